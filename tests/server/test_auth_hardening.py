"""The dashboard's login is not forgeable from another site; pages carry security headers."""

from __future__ import annotations

import re

import httpx
import pytest

from orchestra.hosting.config import ApiKey
from orchestra.server.auth import KeyRing, SessionTokens, hash_key
from tests.server.conftest import KEYS, auth


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r"name='csrf' value='([^']+)'", page.text)
    assert match, page.text
    return match.group(1)


def login(client: httpx.Client, key: str, **headers: str) -> httpx.Response:
    token = csrf_of(client.get("/login"))
    return client.post("/login", data={"key": key, "csrf": token}, headers=headers)


def test_a_login_from_our_form_sets_a_signed_token_not_the_key(server):
    with httpx.Client(base_url=server.url) as client:
        response = login(client, KEYS["acme"])
        assert response.status_code == 303
        cookie = client.cookies.get("orchestra_session")
        assert cookie
        assert KEYS["acme"] not in cookie
        assert client.get("/").status_code == 200
        assert "Workspace <b>acme</b>" in client.get("/").text


def test_a_cross_site_login_is_refused(server):
    with httpx.Client(base_url=server.url) as client:
        refused = login(client, KEYS["acme"], origin="https://evil.example")
        assert refused.status_code == 403
        assert "orchestra_session" not in client.cookies
    with httpx.Client(base_url=server.url) as attacker:  # no CSRF cookie: a form posted from elsewhere
        forged = attacker.post("/login", data={"key": KEYS["acme"], "csrf": "guessed"})
        assert forged.status_code == 403


def test_logout_is_a_post_with_a_token(server):
    with httpx.Client(base_url=server.url) as client:
        login(client, KEYS["acme"])
        assert client.get("/logout").status_code == 405
        assert client.post("/logout", data={"csrf": "wrong"}).status_code == 403
        token = csrf_of(client.get("/"))
        assert client.post("/logout", data={"csrf": token}).status_code == 303
        assert client.get("/").status_code == 303  # back to the login page


@pytest.mark.parametrize("path", ["/login", "/", "/api/v1/agents", "/api/v1/runs/unknown-run"])
def test_every_response_carries_the_security_headers(server, path):
    response = httpx.get(f"{server.url}{path}", headers=auth(), timeout=30)
    csp = response.headers["content-security-policy"]
    assert "script-src" not in csp
    assert "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


def test_a_bad_dashboard_filter_is_422(server):
    with httpx.Client(base_url=server.url) as client:
        login(client, KEYS["acme"])
        assert client.get("/", params={"session_id": ".."}).status_code == 422


def test_tokens_expire_and_die_with_their_key():
    ring = KeyRing(
        [ApiKey(workspace="acme", sha256=hash_key("k1")), ApiKey(workspace="acme", sha256=hash_key("k2"))]
    )
    tokens = SessionTokens(ring)
    token = tokens.issue("acme", "k1")
    assert tokens.workspace_of(token) == "acme"
    assert tokens.workspace_of(token.replace("acme", "globex", 1)) is None  # the signature covers it
    revoked = SessionTokens(KeyRing([ApiKey(workspace="acme", sha256=hash_key("k2"))]))
    assert revoked.workspace_of(token) is None
    expired = SessionTokens(ring, lifetime_seconds=-1)
    assert expired.workspace_of(expired.issue("acme", "k1")) is None
