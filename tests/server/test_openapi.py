"""The whole HTTP API against its own OpenAPI document, with schemathesis over real HTTP, authenticated.

Every operation gets generated requests (valid and invalid); no answer may be a 5xx, and every answer
must match the document: its status codes, headers (``Allow`` on 405), content types and bodies. CI runs
25 examples per operation; ``ORCHESTRA_STRESS=1`` runs 300.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi import checks as openapi_checks

from tests.server.conftest import KEYS, Server, write_config

EXAMPLES = 300 if os.environ.get("ORCHESTRA_STRESS") == "1" else 25


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("openapi")
    with Server(write_config(root, f"file:{root}/store")) as server:
        yield server


@pytest.fixture
def api_schema(api: Server):
    return schemathesis.openapi.from_url(f"{api.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented(case) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {KEYS['acme']}"},
        # Unknown query parameters are ignored, as HTTP APIs commonly do; everything else is checked.
        excluded_checks=[openapi_checks.negative_data_rejection],
    )


def test_the_document_declares_bearer_auth_and_error_bodies(api: Server) -> None:
    import httpx

    document = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
    schemes = document["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())
    invoke = document["paths"]["/api/v1/agents/{agent_id}/invoke"]["post"]
    assert {"401", "404", "409", "422", "502"} <= set(invoke["responses"])
    assert "text/event-stream" in invoke["responses"]["200"]["content"]
    error = invoke["responses"]["409"]["content"]["application/json"]["schema"]["$ref"]
    assert error.endswith("/ErrorBody")
