"""A request repeated with its ``Idempotency-Key``: answered from the first run, waiting for it, or run
again when the first stored nothing (``idempotency.py`` keeps the keys; this decides what a repeat gets).

A first run that stopped inside its turn's tools (its server died after a side-effecting one started)
left the turn open: a repeat runs it again, which finishes that turn (its recorded tool results are
reused, never run twice) and answers as the turn does. Once the turn was resumed by another run, the
repeat answers from that run."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from orchestra.errors import StorageConflictError
from orchestra.hosting.idempotency import KeyEntry, KeyRefused
from orchestra.hosting.outcomes import Failure
from orchestra.hosting.runs import RunRecord
from orchestra.hosting.settle import settle_from_session
from orchestra.hosting.turns import recorded_failure

if TYPE_CHECKING:
    from orchestra.hosting.runtime import Invocation, Runtime

__all__ = ["already_done", "claim", "lost_run"]


async def claim(
    runtime: Runtime, workspace: str, invocation: Invocation
) -> tuple[RunRecord, Failure | None] | None:
    """Make the request's key name this run (None: run it), or the first run's answer to replay."""
    assert invocation.idempotency_key is not None
    keys, agent_id = runtime.keys(workspace), invocation.hosted.id
    while True:
        entry = await keys.claim(
            agent_id, invocation.idempotency_key, invocation.fingerprint, invocation.run_id
        )
        if entry is None:
            return None
        first = runtime.waiting_on(entry.run_id)
        if first is not None:
            await first.wait()  # the first request runs here: answer as it does
        prior = await runtime.run_record(workspace, entry.run_id)
        while prior is not None and prior.needs_resume and prior.resumed_by is not None:
            prior = await runtime.run_record(workspace, prior.resumed_by)  # the run that went on with it
        if prior is not None and not prior.final:
            if prior.background and await runtime.liveness.is_alive(prior.server):
                prior = await runtime.wait_final(workspace, prior.run_id)  # queued, or runs elsewhere
            else:
                raise KeyRefused(
                    409,
                    "request_in_progress",
                    f"the first request with this Idempotency-Key (run {prior.run_id}) is still running "
                    "on another server; repeat it after Retry-After seconds to get its answer",
                    retry_after=1,
                )
        if prior is None and time.time() - entry.created_at < runtime.config.runs.server_gone_after_s:
            raise KeyRefused(
                409,
                "request_in_progress",
                "the first request with this Idempotency-Key has just started; repeat it after "
                "Retry-After seconds to get its answer",
                retry_after=1,
            )
        # A run that ended is answered as it was; one that stored nothing because it failed runs again, and
        # so does one whose turn was left open (the same request again finishes it).
        again = prior is None or prior.needs_resume or (prior.stored is False and prior.status == "failed")
        if not again:
            assert prior is not None
            return prior, recorded_failure(prior)
        if await keys.take_over(agent_id, invocation.idempotency_key, entry, invocation.run_id):
            invocation.prior = prior or lost_run(invocation, entry)
            if prior is not None and prior.needs_resume:
                await _resumed_by(runtime, workspace, prior.run_id, invocation.run_id)
            return None


async def already_done(
    runtime: Runtime, workspace: str, invocation: Invocation, record: RunRecord
) -> tuple[RunRecord, Failure | None] | None:
    """For a request that runs again what an earlier one left undone: with the session loaded (every
    later save is conditional on it), check that the earlier one did not store its turn after all."""
    prior = invocation.prior
    if prior is None or invocation.mode != "session":
        return None
    settled = await settle_from_session(
        runtime.config,
        runtime.agent_storage(workspace, prior.agent_id),
        prior,
        "a repeated request found it unfinished",
    )
    if settled.stored is not True or settled.needs_resume:
        return None  # nothing stored (run it), or its turn left open (running it again finishes it)
    if invocation.idempotency_key is not None:
        keys = runtime.keys(workspace)
        entry = await keys.read(invocation.hosted.id, invocation.idempotency_key)
        if entry is not None:  # the key names the run that stored the turn again
            await keys.take_over(invocation.hosted.id, invocation.idempotency_key, entry, prior.run_id)
    await runtime.runs(workspace).save(settled)
    if prior.run_id != record.run_id:
        await runtime.forget(runtime.runs(workspace), record)
    return settled, recorded_failure(settled)


async def _resumed_by(runtime: Runtime, workspace: str, run_id: str, by: str) -> None:
    """The record of a run whose open turn a repeat finishes names that repeat (as a resume does)."""
    runs = runtime.runs(workspace)
    found = await runs.read_versioned(run_id)
    if found is None or found[0].resumed_by is not None:
        return
    record, version = found
    record.resumed_by = by
    with contextlib.suppress(StorageConflictError):  # changed meanwhile (settled again): it stays as is
        await runs.replace(record, version)


def lost_run(invocation: Invocation, entry: KeyEntry) -> RunRecord:
    """A stand-in for a run whose record was never written (its request died first)."""
    return RunRecord(
        run_id=entry.run_id,
        agent_id=invocation.hosted.id,
        kind="agent",
        mode=invocation.mode,
        session_id=invocation.session_id,
        started_at=datetime.fromtimestamp(entry.created_at, UTC).isoformat(),
        status="executing",
    )
