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
    assert page.status_code == 404  # as every page of a run or session that is not the caller's (issue 38)
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


# -- a JSON body sent without Content-Type: application/json (issue 35, item 22) ------------------------


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"]
)
def test_a_json_body_without_the_json_header_is_read_as_json(server, content_type):
    """``curl -d '{...}'`` sends a form's Content-Type: the body is JSON all the same, and is run."""
    headers = {**auth(), **({"content-type": content_type} if content_type else {})}
    with httpx.Client(base_url=server.url) as client:
        response = client.post(
            "/api/v1/agents/chat/invoke", content=b'{"input": "hi", "session_id": "plain"}', headers=headers
        )
        assert response.status_code == 200, response.text
        assert response.json()["output"] == "echo: hi (turn 1)"
        started = client.post(
            "/api/v1/agents/chat/runs", content=b'{"input": "again", "session_id": "plain2"}', headers=headers
        )
        assert started.status_code == 202, started.text


def test_a_body_that_is_not_json_says_to_send_json(server):
    with httpx.Client(base_url=server.url, headers=auth()) as client:
        form = client.post(
            "/api/v1/agents/chat/invoke",
            content=b"input=hi",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert form.status_code == 400
        assert form.json()["error"]["code"] == "invalid_json"
        xml = client.post(
            "/api/v1/agents/chat/invoke",
            content=b'{"input": "hi"}',
            headers={"content-type": "application/xml"},
        )
    assert xml.status_code == 422
    assert xml.json()["error"] == {
        "code": "not_json",
        "message": "the body is not sent as JSON: send a JSON object with Content-Type: application/json",
        "request_id": xml.headers["x-request-id"],
    }


def test_another_site_cannot_use_a_plain_text_post_to_run_a_turn(server):
    """What a page elsewhere can make a logged-in browser send without a preflight (text/plain, the
    dashboard's cookie, no Authorization) runs nothing: /api takes bearer keys only and grants no CORS."""
    with httpx.Client(base_url=server.url) as browser:
        assert login(browser, KEYS["acme"]).status_code == 303
        forged = browser.post(
            "/api/v1/agents/chat/invoke",
            content=b'{"input": "forged", "session_id": "victim"}',
            headers={"content-type": "text/plain", "origin": "https://evil.example"},
        )
        assert forged.status_code == 401
        preflight = browser.options(
            "/api/v1/agents/chat/invoke",
            headers={
                "origin": "https://evil.example",
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type",
            },
        )
        assert "access-control-allow-origin" not in preflight.headers
    runs = httpx.get(f"{server.url}/api/v1/runs", headers=auth(), params={"session_id": "victim"})
    assert runs.json()["runs"] == []
