"""orchestra.client against a real server: invoke, stream, reads, typed errors (sync and async)."""

import contextlib
import socket
import threading

import httpx
import pytest

from orchestra.client import (
    AsyncClient,
    AuthenticationError,
    Client,
    ClientError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    ServerUnreachableError,
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


# -- a server that is not running, or drops the connection (issue 35, item 21) ------------------------


def unused_url() -> str:
    """A URL where nothing listens (a port just freed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextlib.contextmanager
def hanging_up():
    """A server that accepts every connection and closes it at once, before any answer."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.recv(65536)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


SYNC_CALLS = [
    ("invoke", ("chat", "hi")),
    ("start_run", ("chat", "hi")),
    ("resume", ("chat", "s1")),
    ("agents", ()),
    ("session", ("chat", "s1")),
    ("delete_session", ("chat", "s1")),
    ("runs", ()),
    ("cancel", ("r1",)),
]


@pytest.mark.parametrize(("call", "args"), SYNC_CALLS, ids=[c for c, _ in SYNC_CALLS])
def test_a_server_that_is_not_running_is_named_not_a_raw_httpx_error(call, args):
    url = unused_url()
    with Client(url, "key", retries=1) as client, pytest.raises(ServerUnreachableError) as raised:
        getattr(client, call)(*args)
    error = raised.value
    assert isinstance(error, ClientError)
    assert isinstance(error, ConnectionError)
    assert (error.url, error.code, error.status) == (url, "connect_failed", 0)
    assert str(error).startswith(f"cannot reach the server at {url} for ")
    assert "is orchestra serve running there?" in str(error)
    assert isinstance(error.__cause__, httpx.ConnectError)


def test_streams_of_a_server_that_is_not_running_raise_the_same():
    url = unused_url()
    with Client(url, "key", retries=1) as client:
        with pytest.raises(ServerUnreachableError, match="cannot reach the server at"):
            list(client.stream("chat", "hi"))
        with pytest.raises(ServerUnreachableError, match="for GET /api/v1/runs/r1/stream"):
            list(client.stream(run_id="r1"))


async def test_the_async_client_raises_the_same_for_a_server_that_is_not_running():
    url = unused_url()
    async with AsyncClient(url, "key", retries=1) as client:
        for call in (
            lambda: client.invoke("chat", "hi"),
            client.agents,
            lambda: client.resume("chat", "s1"),
            lambda: client.delete_session("chat", "s1"),
        ):
            with pytest.raises(ServerUnreachableError) as raised:
                await call()
            assert (raised.value.url, raised.value.code) == (url, "connect_failed")
        with pytest.raises(ServerUnreachableError):
            [event async for event in client.stream("chat", "hi")]
        with pytest.raises(ServerUnreachableError):
            [event async for event in client.stream(run_id="r1")]


def test_a_connection_lost_before_the_answer_says_the_request_may_have_run():
    with (
        hanging_up() as url,
        Client(url, "key", retries=1) as client,
        pytest.raises(ServerUnreachableError) as raised,
    ):
        client.invoke("chat", "hi", idempotency_key="k1")
    assert raised.value.code == "connection_lost"
    assert f"no answer from the server at {url} to POST /api/v1/agents/chat/invoke" in str(raised.value)
    assert "it may have run: repeat it with the same idempotency_key" in str(raised.value)


def test_runs_commands_name_a_server_that_is_not_running_in_one_line():
    from typer.testing import CliRunner

    from orchestra.cli import app

    url = unused_url()
    result = CliRunner().invoke(app, ["runs", "list", "--url", url, "--api-key", "k"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot reach the server at {url} for GET /api/v1/runs")
    assert result.stderr.count("\n") == 1
