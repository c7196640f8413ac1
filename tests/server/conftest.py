"""A real uvicorn server on 127.0.0.1 (random port) for every HTTP test."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from orchestra.server import create_app, hash_key, load_config

KEYS = {"acme": "acme-secret-key", "globex": "globex-secret-key"}

CHAT = """version: 1
kind: agent
id: chat
agents:
  - name: chat
    model: function:tests.support:echo_reply
    conversation_manager: {type: none}
"""

TOOLS = """version: 1
kind: agent
id: tools
agents:
  - name: helper
    tools: [notebook]
    model:
      provider: scripted
      follow_history: true
      replies:
        - {tool: notebook, input: {mode: create, name: todo, new_str: buy milk}}
        - Noted in your todo list.
"""

PIPELINE = """version: 1
kind: graph
id: approval
nodes:
  - {id: draft, function: 'tests.support:spec_source'}
  - {id: approve, function: 'tests.support:ask_human'}
edges:
  - {from: draft, to: approve}
"""


def write_config(root: Path, storage: str, limits: str = "") -> Path:
    (root / "chat.yaml").write_text(CHAT)
    (root / "tools.yaml").write_text(TOOLS)
    (root / "pipeline.yaml").write_text(PIPELINE)
    config = root / "server.yaml"
    config.write_text(
        f"""version: 1
storage: {storage}
agents:
  - {{id: chat, spec: chat.yaml, workspace: acme, description: An echoing chat agent}}
  - {{id: helper, spec: tools.yaml, workspace: acme}}
  - {{id: approval, spec: pipeline.yaml, workspace: acme}}
  - {{id: other, spec: chat.yaml, workspace: globex}}
api_keys:
  - {{workspace: acme, sha256: {hash_key(KEYS["acme"])}}}
  - {{workspace: globex, sha256: {hash_key(KEYS["globex"])}}}
{limits}"""
    )
    return config


class Server:
    def __init__(self, config_path: Path) -> None:
        self.app = create_app(load_config(config_path))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def server(tmp_path):
    config = write_config(
        tmp_path, f"file:{tmp_path}/store", "limits: {max_body_bytes: 20000, max_history_messages: 6}\n"
    )
    with Server(config) as running:
        yield running


def auth(workspace: str = "acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[workspace]}"}


# -- the server as an agent platform (issue 27): background runs, interrupts, policies -----------------

PAYER = """version: 1
kind: agent
id: payer
agents:
  - name: payer
    tools: ['tests.server.agents:approve_payment']
    model:
      provider: scripted
      follow_history: true
      replies:
        - {tool: approve_payment, input: {amount: 5}}
        - Payment handled.
"""

SLOW = """version: 1
kind: agent
id: slow
agents:
  - name: slow
    model: function:tests.server.agents:slow_echo
    conversation_manager: {type: none}
"""

STEPS = """version: 1
kind: graph
id: steps
agents:
  - {name: writer, model: 'function:tests.server.agents:chunky'}
nodes:
  - {id: one, agent: writer}
  - {id: two, agent: writer}
  - {id: three, agent: writer}
  - {id: four, agent: writer}
  - {id: five, agent: writer}
edges:
  - {from: one, to: two}
  - {from: two, to: three}
  - {from: three, to: four}
  - {from: four, to: five}
"""

REVIEW = """version: 1
kind: graph
id: review
nodes:
  - {id: draft, function: 'tests.server.agents:wait_step'}
  - {id: approve, function: 'tests.server.agents:review'}
  - {id: publish, function: 'tests.server.agents:wait_step'}
edges:
  - {from: draft, to: approve}
  - {from: approve, to: publish}
"""

EFFECTS = """version: 1
kind: agent
id: effects
agents:
  - name: effects
    tools: ['tests.server.agents:pay_once', 'tests.server.agents:confirm']
    model:
      provider: scripted
      follow_history: true
      replies:
        - [{tool: pay_once, input: {amount: 30}, id: p1}, {tool: confirm, input: {}, id: c1}]
        - Paid and confirmed.
"""

WINDOW = """version: 1
kind: agent
id: window
agents:
  - name: window
    model: function:tests.support:echo_reply
    conversation_manager: {type: sliding_window, window_size: 4}
"""

FAST_RUNS = "runs: {heartbeat_s: 0.2, server_gone_after_s: 1.5, poll_s: 0.05, sweep_s: 0.3}\n"
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def write_platform_config(root: Path, storage: str, extra: str = FAST_RUNS) -> Path:
    """A config with the platform's agents (and the ones of ``write_config``), fast liveness and sweeps."""
    write_config(root, storage)
    specs = (
        ("payer", PAYER),
        ("slow", SLOW),
        ("steps", STEPS),
        ("review", REVIEW),
        ("window", WINDOW),
        ("effects", EFFECTS),
    )
    for name, text in specs:
        (root / f"{name}.yaml").write_text(text)
    config = root / "platform.yaml"
    config.write_text(
        f"""version: 1
storage: {storage}
agents:
  - {{id: chat, spec: chat.yaml, workspace: acme}}
  - {{id: payer, spec: payer.yaml, workspace: acme}}
  - {{id: slow, spec: slow.yaml, workspace: acme}}
  - {{id: steps, spec: steps.yaml, workspace: acme}}
  - {{id: review, spec: review.yaml, workspace: acme}}
  - {{id: window, spec: window.yaml, workspace: acme}}
  - {{id: effects, spec: effects.yaml, workspace: acme}}
  - {{id: other, spec: chat.yaml, workspace: globex}}
api_keys:
  - {{workspace: acme, sha256: {hash_key(KEYS["acme"])}}}
  - {{workspace: globex, sha256: {hash_key(KEYS["globex"])}}}
{extra}"""
    )
    return config


@pytest.fixture
def platform(tmp_path, monkeypatch):
    """A server with the platform's agents on local files (in this process)."""
    monkeypatch.setenv("ORCHESTRA_WEBHOOK_SECRET", WEBHOOK_SECRET)
    with Server(write_platform_config(tmp_path, f"file:{tmp_path}/store")) as running:
        yield running


COUNTED = """version: 1
kind: agent
id: counted
agents:
  - name: counted
    model: function:tests.server.agents:counted_echo
    conversation_manager: {type: none}
"""


def counted_config(root: Path, storage: str, runs: str = FAST_RUNS, on_busy: str | None = None) -> Path:
    """The platform's config with the ``counted`` agent (its model calls written to a file), with its own
    second-message policy or, without ``on_busy``, the server's."""
    config = write_platform_config(root, storage, runs)
    (root / "counted.yaml").write_text(COUNTED)
    policy = f", on_busy: {on_busy}" if on_busy else ""
    hosted = f"  - {{id: counted, spec: counted.yaml, workspace: acme{policy}}}\n"
    config.write_text(config.read_text().replace("  - {id: other,", hosted + "  - {id: other,"))
    return config
