"""A local HTTP service with side effects that honours ``Idempotency-Key``, and counts what it did.

``POST /effect {"intent": ...}`` carries out the intent once per key: a repeat with a key already seen
answers as the first time did and does nothing. The tests' oracle is ``effects``: how many times each
intent was carried out (a duplicate is an intent carried out under two keys, or without a key twice).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class EffectService:
    def __init__(self) -> None:
        self.effects: Counter[str] = Counter()
        self.keys: dict[str, str] = {}
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                key = self.headers.get("Idempotency-Key")
                with service.lock:
                    if key is None or key not in service.keys:
                        service.effects[body["intent"]] += 1
                        if key is not None:
                            service.keys[key] = body["intent"]
                payload = json.dumps({"done": body["intent"]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/effect"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> EffectService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        with self.lock:
            self.effects.clear()
            self.keys.clear()
