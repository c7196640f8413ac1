"""Settling a run record that cannot be taken as it is, from the session the run wrote to.

A record is unsettled when it says ``executing`` but no live server runs it (its server was killed, or
this one stopped before writing the final record), or when its run failed with an outcome the storage
could not tell (``stored`` is None). Every journal record a hosted run writes carries its run id
(``Record.run``), so the session itself says what happened:

- an agent's turn whose commit point is in the session ended as that record says (``Record.end``:
  ``completed`` with the turn's reply, or ``interrupted`` with its open questions); an older turn's record
  in the session, which says nothing of its end, completed;
- a pipeline's run is settled with the status its last record saved (``completed`` or ``interrupted``);
  one that stopped half way is ``failed``, and the session's next invocation resumes it;
- a run with no record in the session stored nothing: ``failed``, and a request repeated with its
  Idempotency-Key runs it again.

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
from orchestra.multiagent import MultiAgentBase
from orchestra.server.interrupts import open_interrupts
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.session.snapshot import Record
from orchestra.session.snapshot_manager import agent_data_of
from orchestra.spec import build

if TYPE_CHECKING:
    from orchestra.server.config import ServerConfig
    from orchestra.server.runs import RunRecord
    from orchestra.storage import Storage

__all__ = ["ended_in_session", "settle_from_session"]

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
    journal = Journal(storage, ScopeLayout(record.session_id, kind, scope_id))
    started_ms = int(datetime.fromisoformat(record.started_at).timestamp() * 1000)
    written, sure = await journal.run_records(record.run_id, started_ms)
    if isinstance(target, MultiAgentBase):
        final = [(seq, r) for seq, r in written if isinstance(r.set.get("run"), dict)]
        status = final[-1][1].set["run"].get("status") if final else None
        if status in _FINAL:
            doc = await journal.load_at(final[-1][0])
            target.load_document(doc.fields, doc.logs)
            result = target._build_result()
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
    else:
        ended = [(seq, r) for seq, r in written if r.end is not None]
        if ended or (written and not ended_only):
            settled.status, settled.stored, settled.http_status = "completed", True, 200
            settled.error = settled.error_code = None
            settled.output = _reply([r for _, r in written])
            if ended and ended[-1][1].end == "interrupted":
                settled.status = "interrupted"
                target.load_agent_data(agent_data_of(await journal.load_at(ended[-1][0])))
                settled.interrupts = open_interrupts(target)
            return settled
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
