"""``orchestra sessions migrate SPEC``: carry the unfinished runs of a storage over to a new version of
their pipeline (its ``migrations:``), or with ``--dry-run`` show what that would do to each of them.

Each unfinished run (executing, failed or interrupted) of the spec's pipeline is loaded as a resume
would load it and carried over exactly as a resume would carry it (``MultiAgentBase.migrate``): a
migration registered for its version rewrites it, and a run saved by another graph with no migration
is reported with what changed. Without ``--dry-run`` the migrated runs are saved (still unfinished:
``orchestra resume`` continues them); a run whose session a live process is running is skipped.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.table import Table

from orchestra.cli._output import EXIT_FAILED, err, fail, out, print_table
from orchestra.errors import OrchestraError, RunError
from orchestra.multiagent import MultiAgentBase, Status
from orchestra.multiagent.events import AfterMultiAgentInvocation, BeforeMultiAgentInvocation
from orchestra.multiagent.migrations import document_changes
from orchestra.session import admin
from orchestra.session.writer_lock import WriterLock
from orchestra.spec import LoadedSpec, build, parse_file
from orchestra.storage import DEFAULT_STORAGE_URI, storage_from_uri

__all__ = ["migrate_command"]

_UNFINISHED = (Status.EXECUTING.value, Status.FAILED.value, Status.INTERRUPTED.value)


@dataclass
class Outcome:
    """What migrating one session's run did (or, with ``--dry-run``, would do)."""

    session_id: str
    status: str  # the run's status
    outcome: str  # migrated, would migrate, up to date, refused, failed, skipped
    from_version: str | None = None
    to_version: str | None = None
    changes: list[str] = field(default_factory=list)


def migrate_command(
    file: Annotated[Path, typer.Argument(help="The new version of the pipeline spec (YAML).", exists=True)],
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage", metavar="URI", help="Where the runs are (default: the spec's, or file:./.orchestra)."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show what each migration would change.")
    ] = False,
    session_ids: Annotated[
        list[str], typer.Option("--session-id", metavar="ID", help="Only this session (repeatable).")
    ] = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcomes as JSON.")] = False,
) -> None:
    """Carry every unfinished run of a pipeline over to this version of its spec (its migrations).

    Example: [bold]orchestra sessions migrate pipeline-v2.yaml --storage s3://acme-runs/orchestra --dry-run[/]
    """
    try:
        loaded = parse_file(file)
    except OrchestraError as exc:
        raise fail(str(exc)) from None
    uri = storage or (loaded.spec.session.storage if loaded.spec.session else DEFAULT_STORAGE_URI)
    try:
        outcomes = anyio.run(_migrate_all, loaded, uri, dry_run, set(session_ids))
    except OrchestraError as exc:
        raise fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps([asdict(o) for o in outcomes]))
    else:
        _print(outcomes, dry_run)
    if any(o.outcome in ("refused", "failed") for o in outcomes):
        raise typer.Exit(EXIT_FAILED)


async def _migrate_all(loaded: LoadedSpec, uri: str, dry_run: bool, only: set[str]) -> list[Outcome]:
    store = storage_from_uri(uri)
    scope = loaded.spec.id
    outcomes = []
    for info in await admin.list_sessions(store):
        if only and info.session_id not in only:
            continue
        if not any(s.kind == "multiAgent" and s.scope_id == scope for s in info.scopes):
            continue
        outcome = await _migrate(loaded, uri, store, info.session_id, dry_run)
        if outcome is not None:
            outcomes.append(outcome)
    return outcomes


async def _migrate(
    loaded: LoadedSpec, uri: str, store: Any, session_id: str, dry_run: bool
) -> Outcome | None:
    orchestrator = build(loaded, session_id=session_id, storage=uri)
    if not isinstance(orchestrator, MultiAgentBase):
        raise OrchestraError(f"{loaded.path} is a single agent: it has no runs to migrate")
    await orchestrator.hooks.invoke(BeforeMultiAgentInvocation(orchestrator, {}))  # loads the saved run
    status = orchestrator.run["status"]
    if status not in _UNFINISHED:
        return None  # a finished run: the next invocation starts afresh on the new version
    saved = orchestrator.run.get("version")
    outcome = Outcome(session_id, status, "up to date", saved, orchestrator.version)
    writer = WriterLock.inspect(store, session_id)
    if writer is not None and writer.alive:
        outcome.outcome = "skipped"
        outcome.changes = [f"being run by process {writer.pid} on {writer.host}"]
        return outcome
    before = orchestrator.document.whole()
    try:
        orchestrator.migrate(force=False)
    except RunError as exc:
        outcome.outcome = (
            "failed" if "migration" in str(exc) and saved in orchestrator.migrations else "refused"
        )
        outcome.changes = [str(exc)]
        return outcome
    steps = orchestrator.run.get("migrations") or []
    if saved == orchestrator.run.get("version") and not document_changes(
        before, orchestrator.document.whole()
    ):
        return outcome
    outcome.to_version = orchestrator.run.get("version")
    outcome.changes = [f"{step['from']} -> {step['to']}" for step in steps[-1:]] + document_changes(
        before, orchestrator.document.whole()
    )
    outcome.outcome = "would migrate" if dry_run else "migrated"
    if not dry_run:  # saved as a resume's end would save it (the run stays unfinished)
        await orchestrator.hooks.invoke(AfterMultiAgentInvocation(orchestrator, {}, None))
    return outcome


def _print(outcomes: list[Outcome], dry_run: bool) -> None:
    if not outcomes:
        err.print("no unfinished run of this pipeline in the storage")
        return
    table = Table("session", "run", "outcome", "version", "changes")
    for o in outcomes:
        version = (
            f"{o.from_version} -> {o.to_version}" if o.from_version != o.to_version else str(o.from_version)
        )
        table.add_row(o.session_id, o.status, o.outcome, version, "\n".join(o.changes))
    print_table(table)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.outcome] = counts.get(o.outcome, 0) + 1
    summary = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    err.print(
        f"{len(outcomes)} unfinished runs: {summary}" + (" (dry run: nothing was saved)" if dry_run else "")
    )
