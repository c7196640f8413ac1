"""orchestra.client against a real server: invoke, stream, reads, typed errors (sync and async)."""

import pytest

from orchestra.client import (
    AsyncClient,
    AuthenticationError,
    Client,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
)
from tests.server.conftest import KEYS


def test_sync_client_modes_and_reads(server):
    with Client(server.url, KEYS["acme"]) as client:
        first = client.invoke(
            "chat", {"message": "What's the weather in London?"}, session_id="user-123-thread-456"
        )
        follow_up = client.invoke("chat", {"message": "What about Paris?"}, session_id="user-123-thread-456")
        assert follow_up.output == "echo: What about Paris? (turn 2)"
        assert first.run_id != follow_up.run_id
        stateless = client.invoke(
            "chat",
            {"message": "What about Paris?"},
            history=[
                {"role": "user", "content": "What's the weather in London?"},
                {"role": "assistant", "content": "It's 12°C and cloudy in London."},
            ],
        )
        assert stateless.output == "echo: What about Paris? (turn 2)"
        assert (
            client.invoke("chat", {"query": "Summarise this report"}).output
            == "echo: Summarise this report (turn 1)"
        )
        assert [a["id"] for a in client.agents()] == ["chat", "helper", "approval"]
        assert [s["session_id"] for s in client.sessions("chat")] == ["user-123-thread-456"]
        assert len(client.session("chat", "user-123-thread-456")["messages"]) == 4
        assert len(client.runs(agent_id="chat", session_id="user-123-thread-456")) == 2
        assert client.run(first.run_id)["output"] == first.output
        client.delete_session("chat", "user-123-thread-456")
        with pytest.raises(NotFoundError):
            client.session("chat", "user-123-thread-456")


def test_sync_stream(server):
    with Client(server.url, KEYS["acme"]) as client:
        events = list(client.stream("helper", "remember milk"))
    assert events[0].event == "tool_call"
    assert events[0].data["name"] == "notebook"
    assert events[-1].event == "result"
    assert events[-1].data["output"] == "Noted in your todo list."


def test_typed_errors(server):
    with Client(server.url, "not-a-key") as anonymous, pytest.raises(AuthenticationError) as info:
        anonymous.agents()
    assert info.value.status == 401
    with Client(server.url, KEYS["acme"]) as client:
        with pytest.raises(NotFoundError, match="unknown_agent"):
            client.invoke("nobody", "x")
        with pytest.raises(InvalidRequestError, match="choose_one_mode") as bad:
            client.invoke("chat", "x", session_id="s", history=[])
        assert bad.value.status == 422
    assert issubclass(ConflictError, Exception)


async def test_async_client(server):
    async with AsyncClient(server.url, KEYS["acme"]) as client:
        reply = await client.invoke("chat", "hello", session_id="a1")
        assert reply.output == "echo: hello (turn 1)"
        events = [event async for event in client.stream("chat", "again", session_id="a1")]
        assert events[-1].data["output"] == "echo: again (turn 2)"
        assert [s["session_id"] for s in await client.sessions("chat")] == ["a1"]
        assert (await client.run(reply.run_id))["session_id"] == "a1"
        assert len(await client.runs()) == 2
        with pytest.raises(NotFoundError):
            await client.session("chat", "missing")


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("delete_session", ("chat", "../../chat2/sessions/victim")),
        ("session", ("chat", "../../../runs")),
        ("sessions", ("../runs",)),
        ("invoke", ("chat/../helper", {"message": "hi"})),
        ("run", ("..",)),
        ("runs", (None, "a\\b")),
    ],
)
def test_the_client_refuses_ids_that_would_leave_their_path_segment(server, call, args):
    with Client(server.url, KEYS["acme"]) as client:
        client.invoke("chat", {"message": "hi"}, session_id="victim")
        with pytest.raises(ValueError, match="invalid"):
            getattr(client, call)(*args)
        assert [s["session_id"] for s in client.sessions("chat")] == ["victim"]  # nothing was touched


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_streamed_turn_that_loses_its_session_raises_conflict_error(server, tmp_path, monkeypatch, mode):
    import anyio

    monkeypatch.setenv("ORCHESTRA_TEST_RACE_STORE", str(tmp_path / "store"))
    with Client(server.url, KEYS["acme"]) as client:
        client.invoke("chat", {"message": "hello"}, session_id="race")
        if mode == "sync":
            with pytest.raises(ConflictError) as caught:
                list(client.stream("chat", "RACE", session_id="race"))
        else:

            async def consume() -> None:
                async with AsyncClient(server.url, KEYS["acme"]) as aclient:
                    async for _ in aclient.stream("chat", "RACE", session_id="race"):
                        pass

            with pytest.raises(ConflictError) as caught:
                anyio.run(consume)
        assert caught.value.retry_after == 1
        messages = client.session("chat", "race")["messages"]
        texts = [block["text"] for m in messages for block in m["content"]]
        assert "the rival's turn" in texts  # the winner's turn is kept...
        assert "RACE" not in texts  # ...the loser's is not
