"""The repository-based managers: the seed's layout, base64 binaries, redaction, custom repositories."""

import json

import anyio
import pytest

from orchestra import Agent
from orchestra.conversation import SlidingWindowConversationManager
from orchestra.errors import SessionConflictError
from orchestra.session import (
    FileSessionManager,
    RepositorySessionManager,
    Session,
    SessionAgent,
    SessionMessage,
    SessionRepository,
    StorageSessionRepository,
)
from orchestra.storage import InMemoryStorage
from orchestra.testing import ScriptedModel

PNG = b"\x89PNG\r\n\x1a\nrest"


def test_layout_and_binary_content_as_strands_markers(tmp_path):
    manager = FileSessionManager("s1", storage_dir=str(tmp_path))
    agent = Agent(model=ScriptedModel(["a picture"]), session_manager=manager, state={"k": 1})
    agent([{"text": "look"}, {"image": {"format": "png", "source": {"bytes": PNG}}}])
    base = tmp_path / "session_s1"
    assert json.loads((base / "session.json").read_text())["session_type"] == "AGENT"
    stored_agent = json.loads((base / "agents/agent_default/agent.json").read_text())
    assert stored_agent["state"] == {"k": 1}
    first = json.loads((base / "agents/agent_default/messages/message_0.json").read_text())
    assert first["message_id"] == 0
    assert first["message"]["content"][1]["image"]["source"]["bytes"] == {
        "__bytes_encoded__": True,
        "data": "iVBORw0KGgpyZXN0",
    }
    assert {"created_at", "updated_at", "redact_message"} <= set(first)
    restored = Agent(
        model=ScriptedModel([]), session_manager=FileSessionManager("s1", storage_dir=str(tmp_path))
    )
    assert restored.messages == agent.messages
    assert restored.state.get() == {"k": 1}


def test_messages_are_listed_in_numeric_order_and_trimmed_by_the_window(tmp_path):
    def make():
        return Agent(
            model=ScriptedModel([f"r{i}" for i in range(12)]),
            session_manager=FileSessionManager("s1", storage_dir=str(tmp_path)),
            conversation_manager=SlidingWindowConversationManager(window_size=6),
        )

    agent = make()
    for i in range(12):
        agent(f"q{i}")
    assert (tmp_path / "session_s1/agents/agent_default/messages/message_23.json").is_file()
    restored = make()
    assert restored.messages == agent.messages
    assert restored.messages[-1]["content"][0]["text"] == "r11"


async def test_redaction_leaves_no_copy_of_the_original(tmp_path):
    agent = Agent(
        model=ScriptedModel([]), session_manager=FileSessionManager("s1", storage_dir=str(tmp_path))
    )
    await agent.append_message({"role": "user", "content": [{"text": "my password is hunter2"}]})
    await agent.redact_latest_message("[REDACTED]")
    await agent.append_message({"role": "assistant", "content": [{"text": "noted"}]})
    stored = json.loads((tmp_path / "session_s1/agents/agent_default/messages/message_0.json").read_text())
    assert stored["message"]["content"][0]["text"] == "[REDACTED]"
    assert stored["redact_message"]["content"][0]["text"] == "[REDACTED]"
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()]
    restored = Agent(session_manager=FileSessionManager("s1", storage_dir=str(tmp_path)))
    assert restored.messages[0]["content"][0]["text"] == "[REDACTED]"


async def test_a_second_writer_is_detected_when_both_append(tmp_path):
    first = Agent(
        model=ScriptedModel(["1"]), session_manager=FileSessionManager("s1", storage_dir=str(tmp_path))
    )
    second = Agent(
        model=ScriptedModel(["2"]), session_manager=FileSessionManager("s1", storage_dir=str(tmp_path))
    )
    await first.invoke_async("first")
    with pytest.raises(SessionConflictError, match="another writer"):
        await second.invoke_async("second")


class DictRepository:
    """A custom, synchronous repository, as the seed's CustomSessionRepository example."""

    def __init__(self):
        self.sessions, self.agents, self.messages, self.multi = {}, {}, {}, {}

    def create_session(self, session: Session) -> Session:
        self.sessions[session.session_id] = session
        return session

    def read_session(self, session_id):
        return self.sessions.get(session_id)

    def create_agent(self, session_id, session_agent: SessionAgent):
        self.agents[(session_id, session_agent.agent_id)] = session_agent

    def read_agent(self, session_id, agent_id):
        return self.agents.get((session_id, agent_id))

    def update_agent(self, session_id, session_agent):
        self.agents[(session_id, session_agent.agent_id)] = session_agent

    def create_message(self, session_id, agent_id, session_message: SessionMessage):
        self.messages.setdefault((session_id, agent_id), {})[session_message.message_id] = session_message

    def read_message(self, session_id, agent_id, message_id):
        return self.messages.get((session_id, agent_id), {}).get(message_id)

    def update_message(self, session_id, agent_id, session_message):
        self.create_message(session_id, agent_id, session_message)

    def list_messages(self, session_id, agent_id, limit=None, offset=0):
        stored = self.messages.get((session_id, agent_id), {})
        ordered = [stored[i] for i in sorted(stored)][offset:]
        return ordered if limit is None else ordered[:limit]

    def create_multi_agent(self, session_id, multi_agent_state):
        self.multi[(session_id, multi_agent_state["id"])] = multi_agent_state

    def read_multi_agent(self, session_id, multi_agent_id):
        return self.multi.get((session_id, multi_agent_id))

    def update_multi_agent(self, session_id, multi_agent_state):
        self.create_multi_agent(session_id, multi_agent_state)


def test_custom_sync_repository():
    repo = DictRepository()
    assert isinstance(repo, SessionRepository)
    agent = Agent(
        model=ScriptedModel(["hi there"]),
        session_manager=RepositorySessionManager(session_id="user-789", session_repository=repo),
    )
    agent("hello")
    assert len(repo.messages[("user-789", "default")]) == 2
    again = Agent(session_manager=RepositorySessionManager("user-789", repo))
    assert again.messages == agent.messages


class SlowStorage(InMemoryStorage):
    def __init__(self):
        super().__init__()
        self.active = 0
        self.peak = 0

    async def read(self, key):
        self.active += 1
        self.peak = max(self.peak, self.active)
        await anyio.sleep(0.01)
        self.active -= 1
        return await super().read(key)


async def test_messages_are_read_concurrently():
    storage = SlowStorage()
    repo = StorageSessionRepository(storage)
    for i in range(40):
        await repo.create_message(
            "s", "a", SessionMessage(message={"role": "user", "content": [{"text": str(i)}]}, message_id=i)
        )
    messages = await repo.list_messages("s", "a")
    assert [m.message_id for m in messages] == list(range(40))
    assert storage.peak > 1


def test_agent_json_keeps_its_created_at(tmp_path):
    manager = FileSessionManager("s1", storage_dir=str(tmp_path))
    agent = Agent(model=ScriptedModel(["a", "b"]), session_manager=manager)
    path = tmp_path / "session_s1/agents/agent_default/agent.json"
    agent("one")
    created = json.loads(path.read_text())["created_at"]
    agent("two")
    stored = json.loads(path.read_text())
    assert stored["created_at"] == created
    assert stored["updated_at"] >= created


def test_the_repository_remembers_versions_of_agent_files_not_of_every_message(tmp_path):
    manager = FileSessionManager("s1", storage_dir=str(tmp_path))
    agent = Agent(model=ScriptedModel([f"r{i}" for i in range(20)]), session_manager=manager)
    for i in range(20):
        agent(f"q{i}")
    remembered = manager.session_repository._versions
    assert not [key for key in remembered if "/messages/" in key]
    assert any(key.endswith("agent.json") for key in remembered)
