"""Settling a run record that cannot be taken as it is, from the session the run wrote to.

A record is unsettled when it says ``executing`` but no live server runs it (its server was killed, or
this one stopped before writing the final record), or when its run failed with an outcome the storage
could not tell (``stored`` is None). Every journal record a hosted run writes carries its run id
(``Record.run``), so the session itself says what happened:

- an agent's turn whose records end it completed: the record is settled ``completed`` with the turn's
  reply (``interrupted``, with its questions, when the turn stopped for a human). A turn its records
  leave open (the server died inside its tools, after a side-effecting one started) did not complete:
  the record says ``interrupted`` with ``needs_resume``, and the session's next request, a request
  repeated with its Idempotency-Key, or ``POST /api/v1/runs/{id}/resume`` finishes it; a turn that a
  later run of the session finished (before its own prompt) is settled ``completed`` with the reply that
  finished it;
  The journal record that commits a hosted turn also says how its run ended (``Record.end``), so a
  server reading a record another live server left ``executing`` answers it as ended at once
  (``ended_in_session``), without waiting for that server to count as gone;
- a pipeline's run is settled with the status its last record saved (``completed`` or ``interrupted``);
  one that stopped half way is ``failed``, and the session's next invocation resumes it;
- a run with no record in the session stored nothing: ``failed``, and a request repeated with its
  Idempotency-Key runs it again;
- a pipeline's run on Temporal workers (``workflow_id``) is committed by the workers, whose records
  name no hosted run: it is settled by the session's run as it stands, when that run is this one and
  it ended; otherwise it is ``failed`` with a note that its workflow may still run there (a background
  run is taken over and follows that workflow instead, ``workers.py``).

When the records written since the run started were folded away (the run started more than the
journal's ``delete_after`` ago), the session can no longer tell: the record says so (``stored`` None).

A record still ``executing`` on a live server is settled the same way as soon as the session says its run
ended (``ended_only``): the server answers a turn after its commit point and writes the final record
after the answer, so the session is where a 2xx answer and its record are one fact.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orchestra.agent import Agent
from orchestra.errors import SnapshotError
from orchestra.hosting.interrupts import open_interrupts
from orchestra.multiagent import MultiAgentBase
from orchestra.session.scopes import Journal, open_scope, started_ms
from orchestra.session.snapshot import Record
from orchestra.session.snapshot_manager import agent_data_of, whole_conversation
from orchestra.spec import build

if TYPE_CHECKING:
    from orchestra.hosting.config import ServerConfig
    from orchestra.hosting.records import RunRecord, RunStore
    from orchestra.storage import Storage

__all__ = ["close_resumed", "ended_in_session", "settle_from_session"]

_FINAL = ("completed", "interrupted")


async def settle_from_session(
    config: ServerConfig, storage: Storage, record: RunRecord, why: str
) -> RunRecord:
    """``record`` made final from its session (``storage`` holds the agent's sessions); see the module
    docstring. ``why`` says why it needed settling, for the record's ``error``."""
    settled = await _settle(config, storage, record, why, ended_only=False)
    assert settled is not None
    return settled


async def ended_in_session(
    config: ServerConfig, storage: Storage, record: RunRecord, why: str
) -> RunRecord | None:
    """``record``, left ``executing`` by a server that may still be running it, made final if its session
    says the run ended (its commit point is there); None if not: it may still be running."""
    return await _settle(config, storage, record, why, ended_only=True)


async def _settle(
    config: ServerConfig, storage: Storage, record: RunRecord, why: str, *, ended_only: bool
) -> RunRecord | None:
    if ended_only and (record.mode != "session" or record.session_id is None):
        return None
    settled = record.model_copy(deep=True)
    settled.finished_at = settled.finished_at or datetime.now(UTC).isoformat()
    settled.settled = why
    if record.mode != "session" or record.session_id is None:
        return _failed(settled, f"{why}; nothing of it was stored", stored=False)
    target = build(config.spec_of(record.agent_id))
    kind: Any = "agent" if isinstance(target, Agent) else "multiAgent"
    scope_id = target.agent_id if isinstance(target, Agent) else target.scope_id
    journal = open_scope(storage, record.session_id, kind, scope_id)
    if record.workflow_id is not None and isinstance(target, MultiAgentBase):
        return await _on_workers(settled, journal, target, why, ended_only=ended_only)
    written, sure = await journal.run_records(record.run_id, started_ms(record.started_at))
    if isinstance(target, MultiAgentBase):
        final = [(seq, r) for seq, r in written if isinstance(r.set.get("run"), dict)]
        status = final[-1][1].set["run"].get("status") if final else None
        if status in _FINAL:
            doc = await journal.load_at(final[-1][0])
            target.document.load(doc.fields, doc.logs)
            result = target.build_result()
            settled.status, settled.output, settled.stored = status, result.output, True
            settled.error = settled.error_code = None
            settled.http_status = 200
            return settled
        if ended_only:
            return None
        if written:
            return _failed(
                settled,
                f"{why}; its completed nodes are saved and the session's next invocation resumes it",
                stored=False,
            )
    elif written and (not ended_only or any(r.end is not None for _, r in written)):
        assert isinstance(target, Agent)
        return await _agent_turn(settled, journal, target, written, why)
    if ended_only:
        return None
    if not sure:
        return _failed(
            settled,
            f"{why}; whether it stored its turn can no longer be told (the session's records since it "
            "started were folded): read the session",
            stored=None,
        )
    return _failed(settled, f"{why}; it stored nothing", stored=False)


async def _agent_turn(
    settled: RunRecord, journal: Journal, agent: Agent, written: list[tuple[int, Record]], why: str
) -> RunRecord:
    """An agent's run that stored records, settled by the state its last record left (see the module
    docstring)."""
    current = await journal.load()
    last = written[-1][0]
    try:
        at = current if current is not None and journal.seq == last else await journal.load_at(last)
    except SnapshotError:  # the state after its last record was folded away: it cannot be told
        return _failed(
            settled,
            f"{why}; whether its turn ended can no longer be told (the session's records since were "
            "folded): read the session",
            stored=None,
        )
    agent.load_agent_data(agent_data_of(at, agent.system_prompt))
    settled.stored, settled.error, settled.error_code = True, None, None
    opened = agent.open_turn()
    if opened is None:
        asked = open_interrupts(agent)
        settled.status, settled.http_status = ("interrupted" if asked else "completed"), 200
        settled.interrupts, settled.output = asked, _reply([r for _, r in written])
        return settled
    reply = _finished_later(at, current, opened) if current is not None else None
    if reply is not None:  # a later run finished the turn first, then ran its own prompt
        settled.status, settled.http_status, settled.output = "completed", 200, reply
        return settled
    settled.status, settled.needs_resume = "interrupted", True
    settled.error = (
        f"{why}; it stopped inside its turn's tools, after a side-effecting one had started, so the turn "
        "is kept open in the session: the session's next request, this request repeated with its "
        f"Idempotency-Key, or POST /api/v1/runs/{settled.run_id}/resume finishes it"
    )
    return settled


def _finished_later(at: Any, current: Any, opened: int) -> str | None:
    """The reply that finished a turn open at ``at`` (its prompt at ``opened`` in the history), found in
    the session as it is now; None while the turn is still open."""
    before, start = whole_conversation(at)
    now, _ = whole_conversation(current)
    prompt = start + opened
    if len(now) <= prompt or now[prompt] != before[prompt]:
        return None
    for message in now[prompt + 1 :]:
        if message["role"] == "assistant" and not any("toolUse" in b for b in message["content"]):
            return "".join(b["text"] for b in message["content"] if "text" in b)
    return None


async def close_resumed(runs: RunStore, resuming: RunRecord) -> None:
    """A run of the session settled with its turn left open (``needs_resume``) names the run that
    finished that turn (``resumed_by``), so that nothing offers to resume it again."""
    if not resuming.resumed or resuming.stored is not True or resuming.kind != "agent":
        return
    for record in await runs.list([resuming.agent_id], resuming.session_id, limit=20):
        left_open = record.needs_resume and record.stored and record.resumed_by is None
        if left_open and record.run_id < resuming.run_id:
            record.resumed_by = resuming.run_id
            await runs.save(record)


async def _on_workers(
    settled: RunRecord, journal: Journal, target: MultiAgentBase, why: str, *, ended_only: bool
) -> RunRecord | None:
    """A pipeline's run on Temporal workers, settled by the session's run as it stands (see the module
    docstring)."""
    doc = await journal.load()
    run = (doc.fields.get("run") if doc is not None else None) or {}
    if run.get("run_id") == settled.run_id and run.get("status") in _FINAL:
        assert doc is not None
        target.document.load(doc.fields, doc.logs)
        result = target.build_result()
        settled.status, settled.output, settled.stored = run["status"], result.output, True
        if settled.status == "interrupted":
            settled.interrupts = open_interrupts(target)
        settled.error = settled.error_code = None
        settled.http_status = 200
        return settled
    if ended_only:
        return None
    return _failed(
        settled,
        f"{why}; its workflow {settled.workflow_id} may still run on the Temporal workers (the session shows "
        f"where it stands), and POST /api/v1/runs/{settled.run_id}/resume or /move goes on from its saved nodes",
        stored=False,
    )


def _failed(record: RunRecord, error: str, *, stored: bool | None) -> RunRecord:
    if record.status == "executing" or record.stored is None:
        record.status, record.error, record.stored = "failed", error, stored
        record.error_code = record.error_code or "server_stopped"
        record.http_status = record.http_status or 502
    return record


def _reply(records: list[Record]) -> Any:
    """The reply of an agent's turn: the text of the last assistant message its records added."""
    for record in reversed(records):
        op = record.logs.get("messages")
        for message in reversed(op.add if op is not None else []):
            if isinstance(message, dict) and message.get("role") == "assistant":
                return "".join(b["text"] for b in message.get("content", ()) if "text" in b)
    return None
