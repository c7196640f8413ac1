"""A background run's webhook: called once when the run ends, signed as Standard Webhooks specifies
(checked by the ``standardwebhooks`` package, an oracle we did not write), retried with backoff, and
never holding the run up."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.server.conftest import FAST_RUNS, WEBHOOK_SECRET, Server, auth, write_platform_config


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that answers 500 to the first ``fail`` deliveries, and holds the
    first one until ``release`` is set."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if len(receiver.received) == 1:
                    receiver.release.wait(30)
                self.send_response(500 if len(receiver.received) <= receiver.fail else 204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def hooked(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_WEBHOOK_SECRET", WEBHOOK_SECRET)
    extra = FAST_RUNS + "webhooks: {backoff_s: 0.1, attempts: 4, timeout_s: 30}\n"
    with Server(write_platform_config(tmp_path, f"file:{tmp_path}/store", extra)) as running:
        yield running


def record(server, run_id: str) -> dict:
    return httpx.get(f"{server.url}/api/v1/runs/{run_id}", headers=auth(), timeout=30).json()


def test_the_webhook_is_signed_retried_and_never_holds_the_run_up(hooked):
    with Receiver(fail=2) as receiver:
        accepted = httpx.post(
            f"{hooked.url}/api/v1/agents/chat/runs",
            json={"input": "hello", "session_id": "w", "webhook": receiver.url},
            headers=auth(),
            timeout=30,
        )
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["run_id"]
        deadline = time.monotonic() + 30
        while not receiver.received:  # the first delivery arrived, and the receiver holds it
            assert time.monotonic() < deadline
            time.sleep(0.02)
        held = record(hooked, run_id)
        assert (held["status"], held["webhook_delivery"]) == ("completed", "pending")  # the run is done
        receiver.release.set()
        while record(hooked, run_id)["webhook_delivery"] == "pending":
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert record(hooked, run_id)["webhook_delivery"] == "delivered"
    assert len(receiver.received) == 3  # two refusals, then taken
    oracle = Webhook(WEBHOOK_SECRET)
    for headers, body in receiver.received:
        assert headers["webhook-id"] == run_id  # the same on every try: a receiver drops repeats
        payload = oracle.verify(body, headers)
        assert payload["run_id"] == run_id
        assert payload["status"] == "completed"
        assert payload["output"] == "echo: hello (turn 1)"
    headers, body = receiver.received[-1]
    with pytest.raises(WebhookVerificationError):
        oracle.verify(body.replace(b"hello", b"HELLO"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB").verify(body, headers)
    assert json.loads(body)["agent_id"] == "chat"


def test_a_webhook_that_is_never_taken_is_recorded_as_failed(hooked):
    with Receiver(fail=10) as receiver:
        receiver.release.set()
        run_id = httpx.post(
            f"{hooked.url}/api/v1/agents/chat/runs",
            json={"input": "x", "webhook": receiver.url},
            headers=auth(),
            timeout=30,
        ).json()["run_id"]
        deadline = time.monotonic() + 30
        while record(hooked, run_id).get("webhook_delivery") in (None, "pending"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert record(hooked, run_id)["webhook_delivery"] == "failed"
    assert len(receiver.received) == 4  # webhooks.attempts


@pytest.mark.parametrize(
    ("url", "code"), [("ftp://example.test/x", "invalid_webhook"), ("not a url", "invalid_webhook")]
)
def test_a_webhook_that_cannot_be_called_is_refused(hooked, url, code):
    answer = httpx.post(
        f"{hooked.url}/api/v1/agents/chat/runs",
        json={"input": "x", "webhook": url},
        headers=auth(),
        timeout=30,
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == code


def test_without_a_secret_a_webhook_is_refused(platform, monkeypatch):
    monkeypatch.delenv("ORCHESTRA_WEBHOOK_SECRET")
    answer = httpx.post(
        f"{platform.url}/api/v1/agents/chat/runs",
        json={"input": "x", "webhook": "http://127.0.0.1:9/hook"},
        headers=auth(),
        timeout=30,
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "webhooks_not_configured"
    assert "ORCHESTRA_WEBHOOK_SECRET" in answer.json()["error"]["message"]
