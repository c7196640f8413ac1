"""Waiting runs on a server: durable timers and external events (docs/waiting.md).

A run whose open questions include waits (``orchestra.sleep``, ``wait_for_event``, a ``wait:`` node)
ends ``interrupted`` like any interrupted run, its waits in ``interrupts`` (and ``waiting``), and frees
its session and its slot. Before its final record is written, ``note_waiting`` writes its entry
``waits/<agent>/<session>/<run_id>`` (durably), so that it is found without reading every run.

Every server sweeps those entries every ``runs.sweep_s`` (``Waits.sweep_forever``, beside takeover's
sweep). An entry says when its first wait is due and which of its waits wait for an event, so a sweep
reads only that (and the session's inbox) for a run that cannot wake yet; a wait whose event the inbox
already gave it is looked at until its run is started (a wake that failed after that is tried again).
For a wait that can end (a timer whose time passed; an event wait whose event is in the session's
inbox, ``inbox/<agent>/<session>.json``, or whose deadline passed) it starts a background run on the session that answers it, with the
Idempotency-Key ``wake:<run_id>:<interrupt_id>``: of any number of servers that see it due at once, the
key's create-only entry lets exactly one start it, and the others get that run. An event wait's answer is decided once in the inbox (``orchestra.inbox``), so
every server answers it the same way. The answering run is a background run like any other: takeover
finishes it if its server dies; once it is started the entry is deleted (waits left open get the
answering run's own entry). An entry whose run no longer waits (answered, deleted) is deleted.

Events come in through ``send_event`` (``POST /api/v1/runs/{id}/events``): kept in the session's inbox
once per Idempotency-Key, then the session's waiting runs are looked at at once (not only at the next
sweep). A kill between a run's stored turn and its entry leaves a background run to takeover (it runs
again and stops at the same wait, with the same time); a plain invoke killed there is not woken
(docs/waiting.md).
"""

from __future__ import annotations

from typing import Any

import anyio

from orchestra._logging import get_logger
from orchestra.errors import OrchestraError
from orchestra.hosting.admission import Admission
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.idempotency import KeyRefused, fingerprint
from orchestra.hosting.interrupts import waits_for_answers
from orchestra.hosting.invocation import Invocation
from orchestra.hosting.reader import RunReader
from orchestra.hosting.records import RunRecord
from orchestra.hosting.session_queue import Busy
from orchestra.hosting.wait_index import due_or_events, inbox_of, note_again
from orchestra.hosting.workspaces import Workspaces
from orchestra.inbox import EventKeyReused, answers_for
from orchestra.storage import Storage
from orchestra.waits import open_waits

__all__ = ["Waits"]

log = get_logger("orchestra.server")


class Waits:
    """This server's part in waking waiting runs, and events sent to runs (see the module docstring)."""

    def __init__(
        self, config: ServerConfig, workspaces: Workspaces, reader: RunReader, admission: Admission
    ) -> None:
        self.config = config
        self.workspaces = workspaces
        self.reader = reader
        self.admission = admission
        self.hosted = {h.id: h for h in config.agents}

    async def sweep_forever(self) -> None:
        """Sweep every workspace every ``runs.sweep_s`` (a failure is logged; the next sweep tries)."""
        while True:
            await anyio.sleep(self.config.runs.sweep_s)
            await note_again()
            for workspace in self.workspaces.all():
                try:
                    await self.sweep(workspace)
                except (OrchestraError, OSError) as exc:
                    log.warning(
                        "wait_sweep_failed", workspace=workspace, error=f"{type(exc).__name__}: {exc}"
                    )

    async def sweep(self, workspace: str, prefix: str = "waits/") -> None:
        """Wake the waits under ``prefix`` that can end now; delete entries of runs that wait no more. A
        failure is logged per entry (the others are still looked at; the next sweep tries again)."""
        storage = self.workspaces.storage(workspace)
        for key in await storage.list(prefix):
            try:
                await self._look_at(workspace, storage, key)
            except (OrchestraError, OSError) as exc:
                log.warning("wait_sweep_failed", entry=key, error=f"{type(exc).__name__}: {exc}")

    async def _look_at(self, workspace: str, storage: Storage, key: str) -> None:
        _, agent_id, session_id, run_id = key.split("/", 3)
        inbox = inbox_of(storage, agent_id, session_id)
        if not await due_or_events(storage, key, inbox):  # one small read: most entries stop here
            return
        record = await self.reader.run_record(workspace, run_id)
        if record is None or not waits_for_answers(record) or agent_id not in self.hosted:
            if record is None or record.final:
                await storage.delete(key)
            return
        waits = open_waits(record.interrupts)
        if not waits:
            await storage.delete(key)
            return
        woken = [
            await self.wake(workspace, record, interrupt_id, answer)
            for interrupt_id, answer in (await answers_for(waits, inbox)).items()
        ]
        if woken and all(woken):
            # The answering run is a background run (takeover finishes it), and if waits are left open it
            # ends waiting on them with an entry of its own: this one is done.
            await storage.delete(key)

    async def wake(self, workspace: str, record: RunRecord, interrupt_id: str, answer: Any) -> bool:
        """Start the run that answers one wait, once across servers (its Idempotency-Key decides); False
        if it could not be started now (a later sweep tries again)."""
        hosted = self.hosted[record.agent_id]
        invocation = Invocation(
            hosted,
            None,
            record.session_id,
            None,
            responses={interrupt_id: answer},
            on_busy=self.config.on_busy(hosted),
        )
        invocation.owner = record.owner  # the owner's run goes on: its owner sees it, its quotas count it
        if "memory_subject" in record.model_fields_set:  # and it uses its owner's memory
            invocation.subject = record.memory_subject
        invocation.idempotency_key = f"wake:{record.run_id}:{interrupt_id}"
        invocation.fingerprint = fingerprint({"wake": interrupt_id, "answer": answer})
        try:
            started, replayed = await self.admission.start(workspace, invocation)
        except (KeyRefused, Busy) as exc:  # being started elsewhere, or the session is busy: a later sweep
            log.info("wake_later", run_id=record.run_id, interrupt_id=interrupt_id, why=exc.code)
            return False
        if not replayed:
            log.info("wake", run_id=record.run_id, interrupt_id=interrupt_id, by=started.run_id)
        return True

    async def send_event(self, workspace: str, record: RunRecord, name: str, payload: Any, key: str) -> bool:
        """Keep an event for ``record``'s session (once per ``key``) and wake its waits that take it now;
        False for a repeated key (nothing new was kept).

        Raises:
            KeyRefused: the key was used for another event (422 ``idempotency_key_reused``).
        """
        assert record.session_id is not None
        storage = self.workspaces.storage(workspace)
        try:
            kept = await inbox_of(storage, record.agent_id, record.session_id).send(name, payload, key)
        except EventKeyReused as exc:
            raise KeyRefused(422, "idempotency_key_reused", str(exc)) from None
        await self.sweep(workspace, f"waits/{record.agent_id}/{record.session_id}/")
        return kept
