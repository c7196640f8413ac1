"""The whole HTTP API against its own OpenAPI document, with schemathesis over real HTTP, authenticated.

Every operation gets generated requests (valid and invalid); no answer may be a 5xx, and every answer
must match the document: its status codes, headers (``Allow`` on 405), content types and bodies. CI runs
25 examples per operation; ``ORCHESTRA_STRESS=1`` runs 300. (schemathesis is driven through its Python
API with hypothesis, not its pytest plugin, which lags behind pytest releases.)
"""

from __future__ import annotations

import os

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi import checks as openapi_checks

from tests.server.conftest import KEYS, Server, write_config

EXAMPLES = 300 if os.environ.get("ORCHESTRA_STRESS") == "1" else 25


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("openapi")
    with Server(write_config(root, f"file:{root}/store")) as server:
        yield server


def test_every_operation_answers_as_documented(api: Server) -> None:
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 11

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
        def answers_as_documented(case: schemathesis.Case) -> None:
            case.call_and_validate(
                headers={"Authorization": f"Bearer {KEYS['acme']}"},
                # Unknown query parameters are ignored, as HTTP APIs commonly do; the rest is checked.
                excluded_checks=[openapi_checks.negative_data_rejection],
            )

        answers_as_documented()


def test_the_document_declares_bearer_auth_and_error_bodies(api: Server) -> None:
    document = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
    schemes = document["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())
    invoke = document["paths"]["/api/v1/agents/{agent_id}/invoke"]["post"]
    assert {"401", "404", "409", "422", "502"} <= set(invoke["responses"])
    assert "text/event-stream" in invoke["responses"]["200"]["content"]
    error = invoke["responses"]["409"]["content"]["application/json"]["schema"]["$ref"]
    assert error.endswith("/ErrorBody")


def test_the_document_has_the_run_routes(api: Server) -> None:
    paths = httpx.get(f"{api.url}/openapi.json", timeout=30).json()["paths"]
    assert "202" in paths["/api/v1/agents/{agent_id}/runs"]["post"]["responses"]
    assert "429" in paths["/api/v1/agents/{agent_id}/runs"]["post"]["responses"]
    stream = paths["/api/v1/runs/{run_id}/stream"]["get"]
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    assert {p["name"] for p in stream["parameters"]} >= {"run_id", "Last-Event-ID", "after"}
    assert "202" in paths["/api/v1/runs/{run_id}/cancel"]["post"]["responses"]
    assert "202" in paths["/api/v1/runs/{run_id}/resume"]["post"]["responses"]
    invoke = paths["/api/v1/agents/{agent_id}/invoke"]["post"]
    body = invoke["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    fields = httpx.get(f"{api.url}/openapi.json", timeout=30).json()["components"]["schemas"][body][
        "properties"
    ]
    assert {"responses", "on_busy"} <= set(fields)


def test_a_method_a_path_does_not_have_is_405_with_every_allowed_method(api: Server) -> None:
    document = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
    for path, operations in document["paths"].items():
        concrete = path.replace("{agent_id}", "chat").replace("{session_id}", "s1").replace("{run_id}", "r1")
        response = httpx.request(
            "PATCH", f"{api.url}{concrete}", headers={"Authorization": f"Bearer {KEYS['acme']}"}, timeout=30
        )
        assert response.status_code == 405, (path, response.text)
        allowed = {m.strip() for m in response.headers["allow"].split(",")}
        assert allowed == {m.upper() for m in operations}, path
        assert response.json()["error"]["code"] == "method_not_allowed"


def test_a_streamed_answer_matches_its_documented_events(api: Server) -> None:
    """A ``?stream=true`` invoke answers server-sent events; schemathesis checks each event against the
    documented text/event-stream schema (a random search draws this case only now and then)."""
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    invoke = schema["/api/v1/agents/{agent_id}/invoke"]["POST"]
    agent = httpx.get(f"{api.url}/api/v1/agents", headers={"Authorization": f"Bearer {KEYS['acme']}"})
    case = invoke.Case(
        path_parameters={"agent_id": agent.json()["agents"][0]["id"]},
        query={"stream": True},
        body={"input": "hi"},
        media_type="application/json",
    )
    response = case.call_and_validate(headers={"Authorization": f"Bearer {KEYS['acme']}"})
    assert response.headers["content-type"][0].startswith("text/event-stream")  # schemathesis: lists
