"""What the tests of many tenants share: an issuer (RSA keys, a JWKS served over real HTTP on 127.0.0.1,
tokens), a config with JWT callers, a hook for ``auth.hook``, and a module's fixtures made of them
(``issuer = issuer_fixture()``, ``api = server_fixture("name", ...)``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from orchestra.server import hash_key
from orchestra.server.auth import Identity
from tests.server.conftest import KEYS, Server, write_config

ISSUER = "https://issuer.test/"
AUDIENCE = "orchestra"


class Issuer:
    """An OIDC-like issuer: RSA keys by kid, its JWKS document served over HTTP, tokens signed by it."""

    def __init__(self) -> None:
        self.keys = {"k1": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
        self.fetches = 0
        self.url = ""

    def jwks(self) -> dict[str, Any]:
        found = []
        for kid, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            found.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": found}

    def token(self, sub: str = "alice", *, kid: str = "k1", key: Any = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": sub,
            "iat": now,
            "exp": now + 300,
            "org": "acme",
            "roles": [],
        }
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key or self.keys["k1"], algorithm="RS256", headers={"kid": kid})

    @contextmanager
    def serving(self) -> Iterator[Issuer]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/jwks.json":
                    self.send_error(404)
                    return
                issuer.fetches += 1
                body = json.dumps(issuer.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


USER_KEYS = {"alice": "alice-user-key", "bob": "bob-user-key"}


def write_tenant_config(
    root: Path, storage: str, jwks_url: str, extra: str = "", *, agents: str = ""
) -> Path:
    """``write_config``'s agents and keys, plus JWT callers (workspace from the ``org`` claim), one key
    each for alice and bob (one user's keys, for the dashboard), ``agents`` (more lines of ``agents:``) and
    ``extra``."""
    config = write_config(root, storage)
    text = config.read_text()
    text = text.replace(
        "api_keys:\n",
        agents
        + "api_keys:\n"
        + "".join(
            f"  - {{workspace: acme, sha256: {hash_key(key)}, user: {user}, roles: []}}\n"
            for user, key in USER_KEYS.items()
        ),
    )
    text += (
        f"auth:\n  jwt:\n    jwks_url: {jwks_url}\n    issuer: '{ISSUER}'\n    audience: {AUDIENCE}\n"
        "    leeway_s: 5\n    jwks_refetch_s: 0\n    claims: {workspace: org, user: sub, roles: roles}\n"
        + extra
    )
    config.write_text(text)
    return config


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ADMIN_KEY = KEYS["acme"]  # a key without roles: it sees the whole workspace, as keys always have


def header_identity(headers: Mapping[str, str]) -> Identity | None:
    """An ``auth.hook``: the caller named by ``X-Test-User`` (a gateway in front would set it)."""
    user = headers.get("x-test-user")
    return Identity("acme", user, frozenset(), via="hook") if user else None


def issuer_fixture() -> Callable[..., Any]:
    """A module's ``issuer`` fixture (``issuer = issuer_fixture()``): one issuer serving for the module."""

    @pytest.fixture(scope="module")
    def issuer() -> Iterator[Issuer]:
        with Issuer().serving() as running:
            yield running

    return issuer


def server_fixture(
    name: str, *, agents: str = "", extra: str = "", files: Mapping[str, str] | None = None
) -> Callable[..., Any]:
    """A module's ``api`` fixture (``api = server_fixture(name, ...)``): one server on local files for the
    module, with ``write_tenant_config``'s callers of the module's ``issuer``, ``agents`` and ``extra``, and
    ``files`` (name: text) written beside its config."""

    @pytest.fixture(scope="module")
    def api(issuer: Issuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
        root = tmp_path_factory.mktemp(name)
        for file, text in (files or {}).items():
            (root / file).write_text(text)
        config = write_tenant_config(root, f"file:{root}/store", issuer.url, extra, agents=agents)
        with Server(config) as server:
            yield server

    return api
