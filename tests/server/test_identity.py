"""Identity (issue 38 item 1): JWTs checked against an issuer's JWKS served over real HTTP, each refusal
naming its rule and never the token; API keys as before; a hook for anything else."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from orchestra.errors import ConfigurationError
from orchestra.server import load_config
from tests.server.conftest import Server, auth
from tests.server.tenants import Issuer, bearer, issuer_fixture, server_fixture, write_tenant_config

issuer = issuer_fixture()
api = server_fixture("identity", extra="  hook: tests.server.tenants:header_identity\n")


def _tampered(token: str) -> str:
    head, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["sub"] = "mallory"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{forged}.{signature}"


def test_a_valid_token_is_a_caller_of_its_workspace(api: Server, issuer: Issuer) -> None:
    token = issuer.token("alice")
    listed = httpx.get(f"{api.url}/api/v1/agents", headers=bearer(token), timeout=30)
    assert listed.status_code == 200, listed.text
    assert {a["id"] for a in listed.json()["agents"]} == {"chat", "helper", "approval"}
    answer = httpx.post(
        f"{api.url}/api/v1/agents/chat/invoke",
        json={"input": "hi", "session_id": "jwt-1"},
        headers=bearer(token),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    record = httpx.get(f"{api.url}/api/v1/runs/{answer.json()['run_id']}", headers=bearer(token), timeout=30)
    assert record.json()["owner"] == "alice"


def test_each_bad_token_gets_its_own_refusal_naming_the_rule(api: Server, issuer: Issuer) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    cases = {
        "token_expired": issuer.token(iat=now - 600, exp=now - 60),
        "wrong_audience": issuer.token(aud="someone-else"),
        "wrong_issuer": issuer.token(iss="https://evil.test/"),
        "unknown_key_id": issuer.token(kid="k-unknown", key=stranger),
        "bad_signature": _tampered(issuer.token()),
        "missing_claim": issuer.token(exp=None),
    }
    for rule, token in cases.items():
        answer = httpx.get(f"{api.url}/api/v1/agents", headers=bearer(token), timeout=30)
        assert answer.status_code == 401, (rule, answer.text)
        assert answer.json()["error"]["code"] == rule
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert token not in answer.text
        assert token.split(".")[1] not in answer.text


def test_a_valid_token_without_a_workspace_is_forbidden(api: Server, issuer: Issuer) -> None:
    answer = httpx.get(f"{api.url}/api/v1/agents", headers=bearer(issuer.token(org=None)), timeout=30)
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "no_workspace"


def test_the_clock_skew_is_allowed(api: Server, issuer: Issuer) -> None:
    now = int(time.time())
    token = issuer.token(iat=now - 600, exp=now - 2)  # expired 2 s ago; leeway_s is 5
    assert httpx.get(f"{api.url}/api/v1/agents", headers=bearer(token), timeout=30).status_code == 200


def test_a_rotated_key_is_fetched_again(api: Server, issuer: Issuer) -> None:
    issuer.keys["k2"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = issuer.token(kid="k2", key=issuer.keys["k2"])
    assert httpx.get(f"{api.url}/api/v1/agents", headers=bearer(token), timeout=30).status_code == 200


def test_api_keys_work_as_before(api: Server) -> None:
    assert httpx.get(f"{api.url}/api/v1/agents", headers=auth(), timeout=30).status_code == 200
    other = httpx.get(f"{api.url}/api/v1/agents", headers=auth("globex"), timeout=30).json()["agents"]
    assert [a["id"] for a in other] == ["other"]
    refused = httpx.get(f"{api.url}/api/v1/agents", headers=bearer("not-a-key"), timeout=30)
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "unauthorized")


def test_the_hook_names_a_caller(api: Server) -> None:
    answer = httpx.post(
        f"{api.url}/api/v1/agents/chat/invoke",
        json={"input": "hi", "session_id": "hooked"},
        headers={"X-Test-User": "carol"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    record = httpx.get(
        f"{api.url}/api/v1/runs/{answer.json()['run_id']}", headers={"X-Test-User": "carol"}, timeout=30
    )
    assert record.json()["owner"] == "carol"


def test_the_doors_name_the_rule_too(api: Server, issuer: Issuer) -> None:
    now = int(time.time())
    expired = issuer.token(iat=now - 600, exp=now - 60)
    answer = httpx.post(f"{api.url}/ag-ui/chat", headers=bearer(expired), json={}, timeout=30)
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "token_expired")
    answer = httpx.post(f"{api.url}/mcp", headers=bearer(expired), json={}, timeout=30)
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "token_expired")
    answer = httpx.post(f"{api.url}/a2a/chat/", headers=bearer(expired), json={}, timeout=30)
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "token_expired")


def test_static_keys_and_the_config_checks(tmp_path, issuer: Issuer) -> None:
    config = write_tenant_config(tmp_path, f"file:{tmp_path}/store", issuer.url)
    text = config.read_text().replace(
        f"jwks_url: {issuer.url}", f"keys: [{json.dumps(issuer.jwks()['keys'][0])}]"
    )
    config.write_text(text)
    with Server(config) as server:
        ok = httpx.get(f"{server.url}/api/v1/agents", headers=bearer(issuer.token()), timeout=30)
        assert ok.status_code == 200, ok.text
    config.write_text(text.replace("keys: [", "jwks_url: http://x/\n    keys: ["))
    with pytest.raises(ConfigurationError, match="jwks_url or keys"):
        load_config(config)
