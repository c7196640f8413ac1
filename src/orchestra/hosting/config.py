"""The server's configuration file: hosted agents and pipelines, storage, API keys, limits.

```yaml
version: 1
storage: sqlite:./.orchestra-server.db     # sessions and runs (any storage URI; this is the default)
agents:
  - id: support                             # the agent_id in URLs
    spec: support_swarm.yaml                # an agent, graph or swarm spec, relative to this file
    workspace: acme
api_keys:
  - workspace: acme
    sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08   # orchestra hash-key KEY
limits:
  max_body_bytes: 1048576
  max_history_messages: 200
runs:
  idempotency_ttl_s: 86400                  # a repeated Idempotency-Key is answered from its first run
  heartbeat_s: 2                            # servers on one storage say they are alive this often
  server_gone_after_s: 30                   # and are gone (their executing runs settled) after this
  on_busy: enqueue                          # a second message to a running session (per agent too)
  max_queue: 20                             # runs waiting on one session (429 past it)
  max_events: 10000                         # events kept per run (past it only lifecycle events)
  poll_s: 0.5                               # how often a run looks for a stop asked on another server
  sweep_s: 5                                # how often a server looks for runs of servers that are gone
  max_attempts: 3                           # a background run is taken over at most this many times
webhooks:
  secret_env: ORCHESTRA_WEBHOOK_SECRET      # the variable that holds the signing secret (whsec_...)
schedules:                                  # runs on a cron schedule (docs/schedules.md; croniter)
  - {id: daily, agent: support, cron: "0 7 * * *", timezone: Europe/Paris, input: "Report for {date}"}
schedule_ticks: {keep: 1000, max_age_days: null, prune_every_s: 600}   # tick records kept per schedule
auth: {jwt: ..., hook: ..., admin_roles: [admin]}   # JWTs and a hook (tenant_config.py, docs/tenants.md)
quotas: {limits: [...], requests_per_s: 20}         # spend per workspace or user; a request rate
audit: {enabled: true, retention_days: 90}          # who did what, kept this long
temporal: temporal://127.0.0.1:7233/default?task_queue=pipelines  # pipelines run on these workers
```

With ``temporal:`` (or ``orchestra serve --temporal URI``) every hosted graph and swarm runs on the
Temporal workers of that task queue, unless its entry says ``runs_on: server``; such a pipeline's
stopped runs can still be moved there (``POST /api/v1/runs/{id}/move``). See ``workers.py``.

Keys are stored as SHA-256 hashes, never in clear. The file is read as pipeline specs are
(``orchestra.spec.load_document``): every problem as ``file:line:column: field: message``, unknown keys
with a "did you mean", ``${VAR}`` replaced by the environment variable.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestra.errors import ConfigurationError, OrchestraSpecError
from orchestra.hosting.memory_settings import MemorySettings
from orchestra.hosting.schedules import Schedule, TickRetention
from orchestra.hosting.tenant_config import AuditSettings, AuthSettings, QuotaSettings
from orchestra.memory.binding import load_embedder
from orchestra.spec import LoadedSpec, load_document, parse_file
from orchestra.spec.models import ID_PATTERN
from orchestra.storage import check_storage_uri, parse_storage_uri

__all__ = [
    "REPLACING",
    "ApiKey",
    "HostedSpec",
    "Limits",
    "OnBusy",
    "RunSettings",
    "RunsOn",
    "ServerConfig",
    "WebhookSettings",
    "load_config",
]

OnBusy = Literal["reject", "enqueue", "interrupt", "rollback"]
"""What a message to a session that is already running does (see ``orchestra.hosting.session_queue``)."""
REPLACING = ("interrupt", "rollback")
"""The policies whose message replaces the session's running run: not on Temporal workers, where the
workflow decides by the session whether it starts afresh or resumes the stopped run."""
RunsOn = Literal["server", "workers"]
"""Where a hosted pipeline's runs run: here, or on the Temporal workers of the config's ``temporal:``."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HostedSpec(_Model):
    """One hosted agent or pipeline."""

    id: str = Field(pattern=ID_PATTERN)
    spec: str = Field(description="A spec file (agent, graph or swarm), relative to the config file.")
    workspace: str = Field(pattern=ID_PATTERN)
    description: str | None = None
    on_busy: OnBusy | None = Field(
        default=None, description="This agent's policy for a second message (default: runs.on_busy)."
    )
    allow: list[str] | None = Field(
        default=None,
        description="Who may call it: users (subjects) and role:<name> entries (default: the workspace).",
    )
    runs_on: RunsOn | None = Field(
        default=None,
        description="A pipeline's runs run on this server or on the Temporal workers of temporal: "
        "(default: workers when temporal: is set, else this server).",
    )


class ApiKey(_Model):
    """An API key of a workspace, as the hex SHA-256 of the key."""

    workspace: str = Field(pattern=ID_PATTERN)
    sha256: str = Field(description="The hex SHA-256 of the key: what orchestra hash-key KEY prints.")
    name: str | None = None
    user: str | None = Field(
        default=None, description="The user it acts as (default: its name, else key:<start of its hash>)."
    )
    roles: list[str] | None = Field(
        default=None,
        description="Its roles. Unset: it sees the whole workspace, as keys always have; set, it is one "
        "user's key unless a role is an admin role (auth.admin_roles).",
    )

    @field_validator("sha256")
    @classmethod
    def _a_hash(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            # Never repeated in the message: it may be the key itself.
            raise ValueError(
                "is not a SHA-256 (64 hex digits): store the key's hash, printed by orchestra hash-key KEY, "
                "never the key itself"
            )
        return value.lower()


class Limits(_Model):
    max_body_bytes: int = Field(default=1024 * 1024, gt=0)
    max_history_messages: int = Field(default=200, gt=0)
    max_input_chars: int = Field(default=200_000, gt=0)
    cached_sessions: int = Field(
        default=1000,
        ge=0,
        description="Sessions whose agent stays in memory between turns (0: load the session every turn).",
    )
    cached_session_mb: float = Field(
        default=256, gt=0, description="The stored size those sessions may weigh together (MiB)."
    )


class RunSettings(_Model):
    """How long idempotency keys are honoured, and how servers on one storage tell a live one from one
    that is gone (to settle the runs it left ``executing``)."""

    idempotency_ttl_s: float = Field(
        default=24 * 3600,
        gt=0,
        description="A repeated Idempotency-Key is answered from its first run for this long (seconds).",
    )
    heartbeat_s: float = Field(default=2.0, gt=0, description="How often a server says it is alive.")
    server_gone_after_s: float = Field(
        default=30.0,
        gt=0,
        description="A server silent this long is gone: its executing runs are settled from their sessions.",
    )
    on_busy: OnBusy = Field(
        default="enqueue",
        description="What a message to a session that is already running does: it waits (enqueue), or "
        "reject, interrupt, rollback.",
    )
    max_queue: int = Field(default=20, ge=0, description="Runs that may wait on one session (429 past it).")
    max_events: int = Field(
        default=10_000, ge=10, description="Events kept with a run; past it, only its lifecycle events."
    )
    poll_s: float = Field(
        default=0.5,
        gt=0,
        description="How often a run looks for a stop asked for on another server, and a waiting message "
        "for its turn.",
    )
    sweep_s: float = Field(
        default=5.0, gt=0, description="How often a server looks for the background runs of gone servers."
    )
    max_attempts: int = Field(
        default=3, ge=1, description="A background run is started at most this many times (takeovers)."
    )


class WebhookSettings(_Model):
    """Where the webhook signing secret comes from (Standard Webhooks: ``whsec_`` and base64)."""

    secret_env: str = Field(
        default="ORCHESTRA_WEBHOOK_SECRET", description="The environment variable holding the secret."
    )
    timeout_s: float = Field(default=10.0, gt=0, description="How long one delivery may take.")
    attempts: int = Field(default=6, ge=1, description="Deliveries tried before giving up.")
    backoff_s: float = Field(
        default=1.0, gt=0, description="The first wait between tries (doubled each time)."
    )
    allowed_hosts: list[str] | None = Field(
        default=None,
        description="The hosts a webhook may call (None: any; the server calls what a key holder gives).",
    )


class ServerConfig(_Model):
    version: int = 1
    # SQLite by default: at the same durability (every turn fsynced) it serves 1.4-1.6x the turns of local
    # files here, concurrent turns sharing one commit (docs/benchmarks.md, "Server").
    storage: str = "sqlite:./.orchestra-server.db"
    agents: list[HostedSpec] = Field(default_factory=list)
    api_keys: list[ApiKey] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    runs: RunSettings = Field(default_factory=RunSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    schedules: list[Schedule] = Field(default_factory=list)
    schedule_ticks: TickRetention = Field(default_factory=TickRetention)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    quotas: QuotaSettings = Field(default_factory=QuotaSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    temporal: str | None = Field(
        default=None,
        description="temporal://HOST:PORT/NAMESPACE?task_queue=QUEUE: the workers hosted pipelines run on.",
    )
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)
    loaded: dict[str, Any] = Field(default_factory=dict, exclude=True)

    def spec_of(self, agent_id: str) -> LoadedSpec:
        spec: LoadedSpec = self.loaded[agent_id]
        return spec

    def on_workers(self, hosted: HostedSpec) -> bool:
        """Whether the pipeline's runs go to the Temporal workers (``temporal:``), not this server."""
        if self.temporal is None or self.spec_of(hosted.id).spec.kind == "agent":
            return False
        return hosted.runs_on != "server"

    def on_busy(self, hosted: HostedSpec) -> OnBusy:
        """The agent's policy for a second message, else the server's."""
        return hosted.on_busy or self.runs.on_busy


def _check_schedules(config: ServerConfig, located: Any) -> list[str]:
    """Each schedule's agent is hosted (the schedule runs in its workspace); ids are not repeated."""
    problems, seen = [], set()
    hosted = {h.id: h for h in config.agents}
    for index, schedule in enumerate(config.schedules):
        if (schedule.id, schedule.workspace) in seen:
            problems.append(
                located.error(("schedules", index, "id"), f"schedule {schedule.id!r} is repeated")
            )
        if schedule.agent not in hosted:
            problems.append(
                located.error(("schedules", index, "agent"), f"no hosted agent is called {schedule.agent!r}")
            )
            continue
        schedule.workspace, schedule.source = hosted[schedule.agent].workspace, "config"
        seen.add((schedule.id, schedule.workspace))
    return problems


def _temporal_problems(config: ServerConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """Pipelines sent to Temporal workers: the extra is installed, the target parses, the storage is one
    the workers can share, and only graphs and swarms are sent (each problem with where it is)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for index, hosted in enumerate(config.agents):
        if hosted.id in config.loaded and config.on_workers(hosted) and config.on_busy(hosted) in REPLACING:
            problems.append(
                (
                    ("agents", index, "on_busy"),
                    f"{hosted.id!r} runs on Temporal workers, where on_busy {config.on_busy(hosted)!r} cannot "
                    "start a new run in place of the session's stopped one: use enqueue or reject (or "
                    "runs_on: server)",
                )
            )
        if hosted.runs_on != "workers" or hosted.id not in config.loaded:
            continue
        if config.spec_of(hosted.id).spec.kind == "agent":
            problems.append(
                (
                    ("agents", index, "runs_on"),
                    f"{hosted.id!r} is an agent: only graphs and swarms run on workers",
                )
            )
        elif config.temporal is None:
            problems.append(
                (
                    ("agents", index, "runs_on"),
                    f"{hosted.id!r} runs on workers, but no temporal: target names them (temporal: "
                    "temporal://HOST:PORT/NAMESPACE?task_queue=QUEUE, or orchestra serve --temporal URI)",
                )
            )
    if config.temporal is None:
        return problems
    try:
        from orchestra.temporal import parse_target  # needs temporalio, an optional extra
    except ImportError:
        problems.append(
            (
                ("temporal",),
                "pipelines on Temporal workers need the temporal extra: pip install 'orchestra-agents[temporal]'",
            )
        )
        return problems

    shared = True
    try:
        parse_target(config.temporal)
    except ConfigurationError as exc:
        problems.append((("temporal",), str(exc)))
    with contextlib.suppress(ConfigurationError):  # an unknown storage URI is reported on its own
        shared = parse_storage_uri(config.storage)[0] != "memory"
    if not shared:
        problems.append(
            (
                ("storage",),
                "memory storage is this process's own, and pipelines on Temporal workers need storage the "
                "workers share: use file:/shared/dir, sqlite:/shared/server.db, s3://bucket/prefix or "
                "postgresql://...",
            )
        )
    return problems


def load_config(path: str | os.PathLike[str], *, temporal: str | None = None) -> ServerConfig:
    """Read and check a server config (and every spec it names); ``temporal`` (``orchestra serve
    --temporal``) replaces the file's ``temporal:``.

    Raises:
        ConfigurationError: the file or a spec it names is not valid; the message says where.
    """
    path = Path(path)
    try:
        config, located = load_document(path, ServerConfig, extra={"base_dir": path.resolve().parent})
    except OrchestraSpecError as exc:
        raise ConfigurationError(str(exc)) from None
    if temporal is not None:
        config.temporal = temporal
    problems: list[str] = []
    try:
        check_storage_uri(config.storage)
    except ConfigurationError as exc:
        problems.append(located.error(("storage",), str(exc)))
    if config.memory.embedder is not None:
        try:
            load_embedder(config.memory.embedder)
        except (ConfigurationError, ImportError) as exc:
            problems.append(located.error(("memory", "embedder"), str(exc)))
    seen: set[str] = set()
    for index, hosted in enumerate(config.agents):
        if hosted.id in seen:
            problems.append(located.error(("agents", index, "id"), f"agent id {hosted.id!r} is hosted twice"))
        seen.add(hosted.id)
        try:
            config.loaded[hosted.id] = parse_file(config.base_dir / hosted.spec)
        except OrchestraSpecError as exc:
            where = located.error(("agents", index, "spec"), f"agent {hosted.id!r}: its spec is not valid:")
            problems.append("\n".join([where, *exc.errors]))
    problems.extend(_check_schedules(config, located))
    problems.extend(located.error(where, problem) for where, problem in _temporal_problems(config))
    if not config.api_keys and config.auth.jwt is None and config.auth.hook is None:
        problems.append(
            located.error(("api_keys",), "no api_keys: every API route needs a key (orchestra hash-key KEY)")
        )
    if problems:
        raise ConfigurationError("\n".join(problems))
    return config
