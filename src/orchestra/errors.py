"""Every exception orchestra raises, as one small tree.

Each class also inherits the nearest builtin, so callers can catch either::

    OrchestraError
    ├── ConfigurationError (ValueError)        bad arguments or settings; says what to set
    │   ├── GraphError                         an invalid Graph or Swarm, named by node id
    │   └── OrchestraSpecError                 a bad YAML pipeline, named by file:line:column and field
    ├── ModelError (RuntimeError)              a model provider failed
    │   ├── ModelNotConfiguredError            no model given and none configured
    │   ├── ScriptExhaustedError               a ScriptedModel ran out of replies
    │   ├── ContextWindowOverflowError         the conversation no longer fits the model's window
    │   ├── ModelThrottledError                the provider kept throttling after every retry
    │   ├── ModelUnavailableError              a passing provider fault (5xx, unreachable) after every retry
    │   └── ModelAuthenticationError           the provider refused the credentials
    ├── AgentError (RuntimeError)
    │   ├── ConcurrencyError                   a second, overlapping invocation of one agent
    │   ├── MaxCyclesError                     the model never ended its turn
    │   └── StructuredOutputError              no valid structured output within the retries
    ├── StorageError (OSError)                 names the operation, the key and the OS or service reason;
    │   │                                      ``stored`` says whether the change was made (see below)
    │   ├── StorageConflictError               a conditional write lost (somebody else wrote first)
    │   ├── StorageSecurityError               a symlink or a key that escapes the storage root
    │   ├── StorageUnavailableError            a passing outage: the backend kept failing after every retry
    │   ├── StorageFullError                   no space left (a full disk, a quota)
    │   ├── StorageConfigurationError          misconfigured storage (no credentials, no bucket, no
    │   │   (also a ConfigurationError)        permission, a read-only file system): retrying will not help
    │   └── StorageOutcomeUnknownError         a write's answer was lost and reading back could not tell
    │                                          whether it was made (``stored`` is None)
    ├── SessionError (RuntimeError)
    │   ├── SessionConflictError               a second live writer of one session scope
    │   └── SnapshotError                      a stored snapshot is corrupt, truncated or unknown
    ├── RunError (RuntimeError)                a multi-agent run could not be carried out
    │   ├── MultipleNodeErrors                 several nodes failed at once; ``.errors`` holds each
    │   └── BudgetExceededError                a run (or one of its agents) spent its budget; inside a
    │                                          Graph or Swarm it stops the run as interrupted, resumable
    └── TemporalError (RuntimeError)           a run's Temporal workflow could not be started, followed
        │                                      or stopped (``orchestra.temporal``)
        ├── TemporalUnavailableError           Temporal was not reached, or refused; ``reason`` says why
        ├── WorkflowBusyError                  a workflow already runs under the id; ``workflow_id``
        ├── WorkflowFailedError                the workflow failed on the workers; says the node's reason
        └── WorkflowRequestError               Temporal is up, but the workflow did not take a signal or
                                               query (it ended, no worker serves it); ``workflow_id``

Control-flow signals (a tool interrupting for a human, a handoff) are not errors and do not live here.

Every ``StorageError`` and ``SessionError`` has ``stored``: ``False`` when it is known that nothing was
changed (the default), ``True`` when the change was made although the call failed afterwards, ``None``
when it cannot be known. Code that retries decides by type and by ``stored``, never by the message.
"""

from __future__ import annotations

from types import EllipsisType

__all__ = [
    "AgentError",
    "BudgetExceededError",
    "ConcurrencyError",
    "ConfigurationError",
    "ContextWindowOverflowError",
    "GraphError",
    "MaxCyclesError",
    "ModelAuthenticationError",
    "ModelError",
    "ModelNotConfiguredError",
    "ModelThrottledError",
    "ModelUnavailableError",
    "MultipleNodeErrors",
    "OrchestraError",
    "OrchestraSpecError",
    "RunError",
    "ScriptExhaustedError",
    "SessionConflictError",
    "SessionError",
    "SnapshotError",
    "StorageConfigurationError",
    "StorageConflictError",
    "StorageError",
    "StorageFullError",
    "StorageOutcomeUnknownError",
    "StorageSecurityError",
    "StorageUnavailableError",
    "StructuredOutputError",
    "TemporalError",
    "TemporalUnavailableError",
    "WorkflowBusyError",
    "WorkflowFailedError",
    "WorkflowRequestError",
]


class OrchestraError(Exception):
    """The root of every error orchestra raises."""


class ConfigurationError(OrchestraError, ValueError):
    """An argument or setting is wrong; the message says which and what to do instead."""


class GraphError(ConfigurationError):
    """A Graph or Swarm is not valid; the message names the nodes involved."""


class OrchestraSpecError(ConfigurationError):
    """A pipeline spec (YAML) is not valid.

    Attributes:
        errors: every problem found, each already formatted as ``file:line:column: field: message``.
    """

    def __init__(self, errors: list[str] | str) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


class ModelError(OrchestraError, RuntimeError):
    """A model provider failed."""


class ModelNotConfiguredError(ModelError):
    """An agent has no model and none is configured through ``ORCHESTRA_MODEL``."""


class ScriptExhaustedError(ModelError):
    """A ScriptedModel was called more times than it has replies."""


class ContextWindowOverflowError(ModelError):
    """The request no longer fits the model's context window.

    Conversation managers catch this, reduce the history and retry.
    """


class ModelThrottledError(ModelError):
    """The provider kept throttling the requests after every retry."""


class ModelUnavailableError(ModelError):
    """The provider failed for a passing reason (a 5xx answer, a connection that kept failing) after every
    retry of the request; trying again later may work. Retry policies retry it by default."""


class ModelAuthenticationError(ModelError):
    """The provider refused the credentials."""


class AgentError(OrchestraError, RuntimeError):
    """An agent could not complete an invocation."""


class ConcurrencyError(AgentError):
    """An agent was invoked while another invocation of the same agent was still running."""


class MaxCyclesError(AgentError):
    """The model kept calling tools past the agent's cycle limit."""


class StructuredOutputError(AgentError):
    """The model gave no valid structured output within the retries (the message names the fields)."""


class StorageError(OrchestraError, OSError):
    """A storage backend failed.

    Attributes:
        operation: what was asked of the storage (``read``, ``write``, ``delete``, ``list``, ...), if known.
        key: the key (or prefix) it was asked for, if any.
        reason: the OS or service reason (``[Errno 28] No space left on device``, ``503 SlowDown``).
        stored: False if nothing was changed, True if the change was made, None if that is unknown.
    """

    stored: bool | None = False

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = None,
        key: str | None = None,
        reason: str | None = None,
        stored: bool | EllipsisType | None = ...,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.key = key
        self.reason = reason
        if stored is not ...:  # else the class's own default
            self.stored = stored

    def in_context(self, where: str, *, stored: bool | EllipsisType | None = ...) -> StorageError:
        """The same error (same type and attributes), its message prefixed with ``where`` (a session and
        what was being saved), for callers that know more than the storage did (``stored`` too)."""
        copy = type(self).__new__(type(self))
        copy.__dict__.update(self.__dict__)
        OSError.__init__(copy, f"{where}: {self}")
        copy.__cause__ = self.__cause__
        if stored is not ...:
            copy.stored = stored
        return copy


class StorageConflictError(StorageError):
    """A conditional write failed: the key was not in the expected version; nothing was written."""


class StorageSecurityError(StorageError):
    """A key tried to escape the storage root, or a symlink was found under it."""


class StorageUnavailableError(StorageError):
    """A passing outage: the backend kept failing (5xx, timeouts, resets) after every retry.

    ``stored`` is False: a write whose answer was lost was read back and found not made. Try again later.
    """


class StorageFullError(StorageError):
    """There is no space left for the write (a full disk, a quota); nothing was written. Free space."""


class StorageConfigurationError(StorageError, ConfigurationError):
    """The storage is misconfigured: no credentials, no such bucket, no permission, a read-only file
    system. Retrying will not help; the message says what to set."""


class StorageOutcomeUnknownError(StorageError):
    """A write's answer was lost (a timeout, a reset, a 5xx after the request was sent) and reading the key
    back failed too: the write may or may not have been made (``stored`` is None)."""

    stored = None


class SessionError(OrchestraError, RuntimeError):
    """A session could not be loaded or saved (``stored``: whether the save was made, as for storage)."""

    stored: bool | None = False


class SessionConflictError(SessionError):
    """Another live writer saved the same session scope since this manager last read or wrote it."""


class SnapshotError(SessionError):
    """A stored snapshot or journal record is corrupt, truncated or of an unknown schema."""


class RunError(OrchestraError, RuntimeError):
    """A multi-agent run could not be carried out (for example a resume against a changed graph)."""


class MultipleNodeErrors(RunError):
    """Several errors surfaced at once (nodes running in parallel); each is in ``errors``.

    One error alone is always raised as itself: this class is only for genuinely several.
    """

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = errors
        lines = "; ".join(f"{type(e).__name__}: {e}" for e in errors)
        super().__init__(f"{len(errors)} errors at once: {lines}")


class BudgetExceededError(RunError):
    """A run, or an agent of it, spent its budget (``orchestra.multiagent.Budget``).

    Raised before the model call that would go past the budget. Inside a Graph or Swarm it is not a
    failure: the run stops, is saved as INTERRUPTED with a ``BudgetExceeded: ...`` reason, and resumes
    with a larger budget.

    Attributes:
        limit: which limit was reached: ``tokens``, ``cost_usd``, ``model_calls`` or ``wall_seconds``.
        allowed: the budget's value for it.
        spent: what was spent when the check ran.
        scope: what the budget belongs to (``run 'review-loop'``, ``agent 'writer'``).
    """

    def __init__(self, message: str, *, limit: str, allowed: float, spent: float, scope: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.allowed = allowed
        self.spent = spent
        self.scope = scope


class TemporalError(OrchestraError, RuntimeError):
    """A run's Temporal workflow could not be started, followed or stopped (``orchestra.temporal``)."""


class TemporalUnavailableError(TemporalError):
    """Temporal was not reached, or refused the request.

    Attributes:
        address: where Temporal was asked (``HOST:PORT``).
        reason: what it (or the way to it) answered, in one line.
    """

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"Temporal at {address} cannot be reached or refused: {reason}")
        self.address = address
        self.reason = reason


class WorkflowBusyError(TemporalError):
    """A workflow already runs under the id a run would start (another client started it first).

    Attributes:
        workflow_id: the running workflow's id.
    """

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"workflow {workflow_id} is already running")
        self.workflow_id = workflow_id


class WorkflowFailedError(TemporalError):
    """The run's workflow failed on the workers (or was terminated); the message says why."""


class WorkflowRequestError(TemporalError):
    """Temporal answered, but the workflow did not take a request: it had ended (a signal to it), no worker
    serves its queue (a query), or its query failed. Temporal is up: asking again will not help while the
    workflow stays so.

    Attributes:
        workflow_id: the workflow asked.
        request: what it was asked (``signal respond``, ``query progress``, ``result``).
        reason: why it did not take it, in one line.
    """

    def __init__(self, workflow_id: str, request: str, reason: str) -> None:
        super().__init__(f"workflow {workflow_id} did not take the {request}: {reason}")
        self.workflow_id = workflow_id
        self.request = request
        self.reason = reason
