"""What a mistake in the server config gets (issue 35, item 26): what pipeline specs get, each problem as
file:line:column: field: message, unknown keys with a "did you mean", and a plain key under sha256:
pointed at orchestra hash-key."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.errors import ConfigurationError
from orchestra.server import hash_key, load_config
from tests.server.conftest import CHAT

HASH = hash_key("my-secret-key")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chat.yaml").write_text(CHAT)
    return tmp_path


def problems(folder, text: str) -> list[str]:
    (folder / "server.yaml").write_text(text)
    with pytest.raises(ConfigurationError) as raised:
        load_config("server.yaml")
    return str(raised.value).splitlines()


def test_a_misspelt_key_is_placed_and_the_right_one_suggested(folder):
    assert sorted(
        problems(
            folder,
            f"""version: 1
storage: memory
agent:
  - {{id: chat, spec: chat.yaml, workspace: acme, on_bussy: enqueue}}
api_keys:
  - {{workspace: acme, sha256: {HASH}}}
limits: {{max_body_byte: 10}}
""",
        )
    ) == [  # each at its value, as spec errors are
        "server.yaml:4:3: agent: unknown key 'agent' (did you mean 'agents'?)",
        "server.yaml:7:25: limits.max_body_byte: unknown key 'max_body_byte' (did you mean 'max_body_bytes'?)",
    ]


def test_a_plain_key_under_sha256_points_to_hash_key_and_is_not_repeated(folder):
    found = problems(
        folder,
        "version: 1\napi_keys:\n  - {workspace: acme, sha256: my-secret-key}\n",
    )
    assert found == [
        "server.yaml:3:31: api_keys[0].sha256: is not a SHA-256 (64 hex digits): store the key's hash, "
        "printed by orchestra hash-key KEY, never the key itself"
    ]
    assert "my-secret-key" not in "\n".join(found)


def test_checks_after_validation_are_placed_too(folder):
    assert problems(
        folder,
        """version: 1
storage: memroy
agents:
  - {id: chat, spec: chat.yaml, workspace: acme}
  - {id: chat, spec: missing.yaml, workspace: acme}
""",
    ) == [
        "server.yaml:2:10: storage: unknown storage URI 'memroy': did you mean memory? for a folder named "
        "'memroy' write file:memroy; use file:./dir, s3://bucket/prefix, sqlite:./file.db, "
        "postgresql://host/db or memory",
        "server.yaml:5:10: agents[1].id: agent id 'chat' is hosted twice",
        "server.yaml:5:22: agents[1].spec: agent 'chat': its spec is not valid:",
        f"{folder / 'missing.yaml'}:1:1: (document): cannot read the file: [Errno 2] No such file or "
        f"directory: '{folder / 'missing.yaml'}'",
        "server.yaml:1:1: api_keys: no api_keys: every API route needs a key (orchestra hash-key KEY)",
    ]


def test_a_hosted_spec_s_own_errors_keep_their_positions(folder):
    (folder / "bad.yaml").write_text(
        "version: 1\nkind: agent\nid: bad\nagents:\n  - {name: a, modle: echo}\n"
    )
    found = problems(
        folder,
        f"version: 1\nagents:\n  - {{id: bad, spec: bad.yaml, workspace: acme}}\n"
        f"api_keys:\n  - {{workspace: acme, sha256: {HASH}}}\n",
    )
    assert found[0] == "server.yaml:3:21: agents[0].spec: agent 'bad': its spec is not valid:"
    bad = folder / "bad.yaml"
    assert f"{bad}:5:22: agents[0].modle: unknown key 'modle' (did you mean 'model'?)" in found


def test_not_yaml_or_not_a_mapping_is_placed(folder):
    assert problems(folder, "version: 1\nagents: [\n")[0].startswith("server.yaml:3:1: syntax: ")
    assert problems(folder, "- a\n") == [
        "server.yaml:1:1: (document): expected a mapping of version, storage, agents, api_keys, limits, runs, "
        "webhooks, schedules, schedule_ticks, memory, auth, quotas, audit, temporal"
    ]


def test_a_good_config_loads_and_an_upper_case_hash_is_the_same_key(folder):
    (folder / "server.yaml").write_text(
        f"version: 1\nagents:\n  - {{id: chat, spec: chat.yaml, workspace: acme}}\n"
        f"api_keys:\n  - {{workspace: acme, sha256: {HASH.upper()}}}\n"
    )
    config = load_config("server.yaml")
    assert config.api_keys[0].sha256 == HASH
    assert config.base_dir == folder


def test_serve_prints_every_problem_with_its_place(folder):
    (folder / "server.yaml").write_text("version: 1\nagent: []\n")
    result = CliRunner().invoke(app, ["serve", "server.yaml"])
    assert result.exit_code == 1
    assert result.stderr == "error: server.yaml:2:8: agent: unknown key 'agent' (did you mean 'agents'?)\n"
