"""A fault-injecting HTTP proxy: sits between a client and a real server and fails or delays requests."""

from __future__ import annotations

import contextlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


class FaultyProxy:
    """Forwards HTTP requests to ``target``; ``fail_next``/``delay_next`` inject faults.

    ``delay_next`` forwards the request first and delays only the answer, like a network that lost the
    response of a request the server did carry out; ``lose_next`` forwards it and answers an error instead
    (a 5xx after the server took the request).
    """

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self._lock = threading.Lock()
        self._fail: list[int] = []
        self._delay: list[float] = []
        self._lose: list[int] = []
        self.requests = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    proxy.requests += 1
                    lose = proxy._lose.pop(0) if proxy._lose else None  # before any planned failure
                    fail = proxy._fail.pop(0) if proxy._fail and lose is None else None
                    delay = proxy._delay.pop(0) if proxy._delay else None
                if lose is not None:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                    }
                    with httpx.Client() as client:  # carried out; its answer never reaches the caller
                        client.request(self.command, proxy.target + self.path, headers=headers, content=body)
                    fail = lose
                if fail is not None:
                    payload = b"<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>"
                    self.send_response(fail)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                with httpx.Client() as client:
                    answer = client.request(
                        self.command, proxy.target + self.path, headers=headers, content=body
                    )
                if delay:
                    time.sleep(delay)
                if delay:
                    self.close_connection = True  # the client gave up on this connection
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                    ):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                if self.command != "HEAD":
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        self.wfile.write(answer.content)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def fail_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._fail.extend([status] * count)

    def lose_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._lose.extend([status] * count)

    def delay_next(self, count: int, seconds: float) -> None:
        with self._lock:
            self._delay.extend([seconds] * count)

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
