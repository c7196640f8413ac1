"""What a newcomer's mistakes get from the server: bad ids named as such (not a raw regex), a body that is
not UTF-8 answered like a body that is not JSON, a dashboard that answers "no run" for any id, and a
/docs page that works under the server's own CSP (issue 30)."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import KEYS, auth
from tests.server.test_auth_hardening import login


@pytest.mark.parametrize(
    ("method", "path", "body", "code"),
    [
        (
            "POST",
            "/api/v1/agents/chat/invoke",
            {"input": "x", "session_id": "has space"},
            "invalid_session_id",
        ),
        ("GET", "/api/v1/runs/" + "a" * 300, None, "invalid_run_id"),
        ("GET", "/api/v1/runs/bad%20id", None, "invalid_run_id"),
        ("GET", "/api/v1/runs?session_id=bad%20id", None, "invalid_session_id"),
        ("DELETE", "/api/v1/agents/chat/sessions/bad%20id", None, "invalid_session_id"),
    ],
)
def test_a_bad_id_is_named_with_the_rule_in_words(server, method, path, body, code):
    with httpx.Client(base_url=server.url, headers=auth()) as client:
        response = client.request(method, path, json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == code
    assert "is not a valid id: use 1-128 letters, digits, '.', '_' or '-'" in error["message"]
    assert "pattern" not in error["message"]
    assert "^[" not in error["message"]


def test_a_body_that_is_not_utf8_is_invalid_json(server):
    with httpx.Client(base_url=server.url, headers=auth()) as client:
        response = client.post(
            "/api/v1/agents/chat/invoke",
            content=b'{"input": "\xff\xfe"}',
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_the_dashboard_has_no_run_for_an_id_the_storage_cannot_hold(server):
    with httpx.Client(base_url=server.url) as client:
        assert login(client, KEYS["acme"]).status_code == 303
        page = client.get("/runs/" + "r" * 300)
    assert page.status_code == 200
    assert "No run" in page.text


def test_docs_points_at_the_openapi_document_and_loads_nothing_from_elsewhere(server):
    with httpx.Client(base_url=server.url) as client:
        page = client.get("/docs")
        document = client.get("/openapi.json")
    assert page.status_code == 200
    assert "href='/openapi.json'" in page.text
    assert "<script" not in page.text
    assert "https://" not in page.text
    assert document.status_code == 200
    assert document.json()["info"]["title"] == "orchestra"
