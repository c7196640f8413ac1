"""A hosted session whose process died mid-turn resumes the turn: at its next request, or at
``POST .../sessions/{sid}/resume``, and the answer says ``"resumed": true`` (issue 26, point 5)."""

from __future__ import annotations

import anyio
import pytest

from orchestra import Agent, tool
from orchestra.client import AsyncClient, ConflictError
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage, PrefixedStorage
from orchestra.testing import ScriptedModel, ToolCall
from tests.server.conftest import KEYS, Server
from tests.support import cut_when

SPEC = """version: 1
kind: agent
id: payer
agents:
  - name: payer
    tools: ['tests.server.test_resume:pay']
    model: {provider: scripted, replies: ["paid, thank you", "anything else?"]}
"""
PAID: list[int] = []


@tool(effects=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    PAID.append(amount)
    return f"paid {amount}"


async def die_mid_turn(root, session_id: str) -> None:
    """What a server killed in the middle of a turn leaves: the turn open, its payment recorded."""
    started = anyio.Event()

    @tool(effects=True, name="pay")
    async def paying(amount: int) -> str:
        """Pay an amount."""
        PAID.append(amount)
        return f"paid {amount}"

    @tool
    async def confirm() -> str:
        """Hangs: the server dies here."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    storage = PrefixedStorage(LocalFileStorage(root), "ws/acme/agents/payer")
    agent = await Agent.create(
        model=ScriptedModel(
            # pay in one round, confirm in the next: when confirm runs, the payment's result is stored
            [[ToolCall("pay", {"amount": 30}, tool_use_id="p1")], [ToolCall("confirm", {}, tool_use_id="c1")]]
        ),
        tools=[paying, confirm],
        session_manager=SnapshotSessionManager(session_id, storage=storage),
    )
    await cut_when(started, lambda: agent.invoke_async("pay the invoice"))


def config(tmp_path):
    (tmp_path / "payer.yaml").write_text(SPEC)
    from orchestra.server import hash_key

    path = tmp_path / "server.yaml"
    path.write_text(
        f"version: 1\nstorage: file:{tmp_path}/store\nagents:\n  - {{id: payer, spec: payer.yaml, workspace: acme}}\n"
        f"api_keys:\n  - {{workspace: acme, sha256: {hash_key(KEYS['acme'])}}}\n"
    )
    return path


@pytest.mark.parametrize("how", ["next request", "resume route"])
async def test_a_turn_cut_by_a_crash_resumes_and_says_so(tmp_path, how):
    PAID.clear()
    await die_mid_turn(tmp_path / "store", "s1")
    assert PAID == [30]
    with Server(config(tmp_path)) as server:
        async with AsyncClient(server.url, KEYS["acme"]) as client:
            if how == "next request":
                answer = await client.invoke("payer", "pay the invoice", session_id="s1")  # the retry
            else:
                answer = await client.resume("payer", "s1")
            assert answer.resumed is True
            assert answer.output == "paid, thank you"
            assert PAID == [30]  # the recorded payment was not made again
            session = await client.session("payer", "s1")
            texts = [b.get("text") for m in session["messages"] for b in m["content"]]
            assert texts.count("pay the invoice") == 1
            with pytest.raises(ConflictError, match="nothing_to_resume"):
                await client.resume("payer", "s1")
