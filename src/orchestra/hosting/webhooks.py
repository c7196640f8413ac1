"""Webhooks: a background run that ends is announced once to the URL it was started with, signed.

The body is the run's answer (what ``GET /api/v1/runs/{id}`` summarises: run id, agent, session,
status, output, error, interrupts). It is signed as Standard Webhooks specifies (HMAC-SHA256):
``webhook-id`` (the run id: the same on every try, so a receiver drops repeats), ``webhook-timestamp``
(Unix seconds) and ``webhook-signature`` (``v1,`` and the base64 HMAC-SHA256 of ``id.timestamp.body``
under the secret, given as ``whsec_`` and base64 in the variable ``webhooks.secret_env`` names). Any
Standard Webhooks library verifies it.

A delivery is tried until the receiver answers 2xx, ``webhooks.attempts`` times, waiting
``webhooks.backoff_s`` then twice as long each time; it runs beside the server's other work and never
holds up a run. The run record says how it went (``webhook_delivery``: pending, delivered, failed);
a server that is gone before delivering leaves it pending, and the server that sweeps its runs delivers
it, so a receiver may see a delivery twice (same ``webhook-id``), never none.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import time
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from orchestra._logging import get_logger
from orchestra.hosting.config import WebhookSettings
from orchestra.hosting.outcomes import Refused

__all__ = ["WebhookRefused", "Webhooks", "sign"]

log = get_logger("orchestra.server")


class WebhookRefused(Refused):
    """A webhook that cannot be accepted (422): ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(422, code, message)


def _key(secret: str) -> bytes:
    try:
        key = base64.b64decode(secret.removeprefix("whsec_") + "==", validate=False)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise WebhookRefused(
            "webhooks_not_configured", "the webhook secret is not whsec_ followed by base64; fix the server"
        )
    return key


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for ``body`` (Standard Webhooks, v1)."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


class Webhooks:
    """Checks webhook URLs when a run is started, and delivers them when it ends."""

    def __init__(self, settings: WebhookSettings) -> None:
        self.settings = settings

    def secret(self) -> str | None:
        return os.environ.get(self.settings.secret_env) or None

    def check(self, url: str) -> str:
        """The URL, if a run may be started with it.

        Raises:
            WebhookRefused: no secret is configured, or the URL is not an http(s) URL of an allowed host.
        """
        if self.secret() is None:
            raise WebhookRefused(
                "webhooks_not_configured",
                f"this server signs webhooks with the secret in ${self.settings.secret_env}, which is not set; "
                "start the run without a webhook, or ask an operator to set it",
            )
        _key(self.secret() or "")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WebhookRefused("invalid_webhook", f"webhook {url!r} is not an http or https URL")
        allowed = self.settings.allowed_hosts
        if allowed is not None and parts.hostname not in allowed:
            raise WebhookRefused(
                "invalid_webhook", f"webhook host {parts.hostname!r} is not one of webhooks.allowed_hosts"
            )
        return url

    async def deliver(self, url: str, run_id: str, payload: dict[str, Any]) -> bool:
        """Send ``payload`` until it is taken (2xx) or the tries run out; whether it was taken."""
        secret = self.secret()
        if secret is None:
            log.warning("webhook_not_sent", run_id=run_id, reason="no secret configured")
            return False
        body = json.dumps(payload, sort_keys=True, default=str).encode()
        wait = self.settings.backoff_s
        async with httpx.AsyncClient(timeout=self.settings.timeout_s) as http:
            for attempt in range(1, self.settings.attempts + 1):
                timestamp = int(time.time())
                headers = {
                    "content-type": "application/json",
                    "webhook-id": run_id,
                    "webhook-timestamp": str(timestamp),
                    "webhook-signature": sign(secret, run_id, timestamp, body),
                }
                try:
                    answer = await http.post(url, content=body, headers=headers)
                    if 200 <= answer.status_code < 300:
                        return True
                    problem = f"answered {answer.status_code}"
                except httpx.HTTPError as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                log.warning("webhook_failed", run_id=run_id, attempt=attempt, problem=problem)
                if attempt < self.settings.attempts:
                    await anyio.sleep(wait)
                    wait *= 2
        return False
