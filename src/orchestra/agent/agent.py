"""``Agent``: a model, tools, and three kinds of state."""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping
from contextlib import aclosing, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from orchestra._ids import validate_id
from orchestra._logging import get_logger
from orchestra._sync import run_sync
from orchestra.agent._direct import ToolCaller
from orchestra.agent._limits import InvocationMeter, ModelCallRetries
from orchestra.agent._loop import Checkpoint, PendingTools, run_invocation
from orchestra.agent.result import AgentResult, AgentStreamEvent, ResultEvent
from orchestra.agent.state import JSONState
from orchestra.agent.structured import DEFAULT_MAX_RETRIES, OutputTool, resolve_output_type
from orchestra.budget import Budget
from orchestra.conversation import ConversationManager, SlidingWindowConversationManager
from orchestra.errors import ConcurrencyError, ConfigurationError, ModelNotConfiguredError, SnapshotError
from orchestra.history import repair_history, unfinished_turn
from orchestra.hooks import (
    AgentInitialized,
    HookProvider,
    HookRegistry,
    MessageAdded,
    MessageRedacted,
    SessionManager,
)
from orchestra.interrupts import Interrupt
from orchestra.messages import MessageDict, validate_message, validate_messages
from orchestra.models import Model, default_model, resolve_model
from orchestra.models._registry import MODEL_ENV_VAR
from orchestra.retry import RetryPolicy
from orchestra.tools import ToolRegistry

__all__ = ["Agent", "AgentData", "AgentStream", "deferred_initialization"]

_debug_log = logging.getLogger("orchestra.agent")
_defer_initialization: ContextVar[bool] = ContextVar("orchestra_defer_agent_initialization", default=False)


@contextmanager
def deferred_initialization() -> Iterator[None]:
    """Agents built inside this block skip their synchronous initialization; ``await agent.initialize()``."""
    token = _defer_initialization.set(True)
    try:
        yield
    finally:
        _defer_initialization.reset(token)


@dataclass
class AgentData:
    """What a session persists of an agent (what a snapshot trigger receives as ``agent_data``)."""

    messages: list[MessageDict]
    state: dict[str, Any]
    conversation_manager_state: dict[str, Any]
    system_prompt: str | None
    interrupt_state: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Agent:
    """An agent: talks to a model, calls tools, keeps conversation history, agent state and invocation state.

    Args:
        model: a ``Model``, a model string (``openai:gpt-4o``, ``bedrock:<id>``, ``scripted``) or None for
            the model named by ``ORCHESTRA_MODEL``.
        messages: an earlier conversation to continue (plain dicts or ``Message`` models).
        state: initial agent state (JSON values only; never sent to the model).
        tools: functions decorated with ``@tool`` (plain functions are wrapped) or ``AgentTool`` objects.
        system_prompt: the system prompt.
        conversation_manager: keeps the history within the context window; defaults to a
            ``SlidingWindowConversationManager``.
        session_manager: persists and restores this agent (a ``HookProvider`` with a ``session_id``).
        name: a human readable name (node id in graphs, handoff target in swarms).
        agent_id: the id under which sessions store this agent; defaults to ``"default"``.
        description: what the agent does (shown to other agents in a swarm).
        hooks: hook providers to register.
        record_direct_tool_call: whether ``agent.tool.NAME(...)`` calls are recorded in the history.
        max_cycles: the most model calls in one invocation before ``MaxCyclesError``.
        output_type: a pydantic model class: every invocation returns a validated instance in
            ``result.output`` (an invocation's own ``output_type=`` overrides it). See
            ``orchestra.agent.structured``.
        max_output_retries: how many invalid or missing structured outputs the model may give before
            ``StructuredOutputError``.
        resume_turns: a turn a killed process left open in the session (the prompt, the model's tool
            calls, some results) is resumed by the next invocation: recorded tool results are reused, the
            remaining calls run, then the model is asked again. False drops such a turn on load instead,
            unless a side-effecting tool of it started (that turn is always resumed, so that the effect
            runs once). See ``orchestra.tools.effects``.
        budget: what one invocation may spend (``orchestra.budget.Budget``: tokens, cost, model calls,
            seconds); past it the invocation raises ``BudgetExceededError`` before its next model call and
            its turn is rolled back. See docs/concepts.md, "Budgets and retries".
        retry: how a failed model call is made again (``orchestra.retry.RetryPolicy``: which errors, how
            many attempts, the waits). None: a failed call raises at once (the model's own request
            retries aside).
    """

    def __init__(
        self,
        model: Model | str | Mapping[str, Any] | None = None,
        messages: Iterable[Mapping[str, Any]] | None = None,
        state: Mapping[str, Any] | JSONState | None = None,
        tools: Iterable[Any] | None = None,
        system_prompt: str | None = None,
        conversation_manager: ConversationManager | None = None,
        session_manager: SessionManager | None = None,
        name: str | None = None,
        agent_id: str | None = None,
        description: str | None = None,
        hooks: Iterable[HookProvider] | None = None,
        record_direct_tool_call: bool = True,
        max_cycles: int = 50,
        output_type: type[BaseModel] | str | None = None,
        max_output_retries: int = DEFAULT_MAX_RETRIES,
        resume_turns: bool = True,
        budget: Budget | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.name = name or "agent"
        self.resume_turns = resume_turns
        # Where this agent's turns are stored (set by whatever persists it: a session manager, an
        # orchestrator): with a tool-call id it makes the call's idempotency key.
        self.effect_scope: str | None = None
        self.agent_id = validate_id(agent_id or "default", "agent_id")
        self.description = description
        self.system_prompt = system_prompt
        self._model = resolve_model(model) if model is not None else None
        self.messages: list[MessageDict] = validate_messages(messages or [])
        # What the conversation manager took out of the history, oldest first, when a session keeps it
        # (SnapshotSessionManager(keep_dropped_messages=True) sets a list; None: nobody keeps them).
        self.dropped_messages: list[MessageDict] | None = None
        owner = f"agent {self.name!r} state"
        if isinstance(state, JSONState):
            self.state = state
        else:
            self.state = JSONState(state, owner=owner)
        self.tool_registry = ToolRegistry(tools or [])
        self.tool = ToolCaller(self)
        self.conversation_manager: ConversationManager = (
            conversation_manager if conversation_manager is not None else SlidingWindowConversationManager()
        )
        self.record_direct_tool_call = record_direct_tool_call
        if max_cycles < 1:
            raise ConfigurationError(f"max_cycles must be at least 1, got {max_cycles}")
        self.max_cycles = max_cycles
        self.output_type = resolve_output_type(output_type) if output_type is not None else None
        if max_output_retries < 0:
            raise ConfigurationError(f"max_output_retries must be 0 or more, got {max_output_retries}")
        self.max_output_retries = max_output_retries
        self.hooks = HookRegistry()
        for provider in hooks or []:
            self.hooks.add_hook(provider)
        self._budget: Budget | None = None
        self._retry: RetryPolicy | None = None
        self._limits: set[type] = set()
        self.budget = budget
        self.retry = retry
        self._pending_tools: PendingTools | None = None
        self._owner_lock = threading.Lock()
        self._owner: _Exclusive | None = None
        self._own_session_id = secrets.token_hex(4)
        self.log = get_logger("orchestra.agent", agent=self.name)
        self.session_manager = session_manager
        if session_manager is not None:
            if not isinstance(session_manager, SessionManager):
                raise ConfigurationError(
                    f"agent {self.name!r}: session_manager must be a session manager (a HookProvider with a "
                    f"session_id), got {type(session_manager).__name__}"
                )
            self.hooks.add_hook(session_manager)
        self._initialized = False
        if not self.hooks.has_callbacks(AgentInitialized):
            self._initialized = True  # nothing to run: no event loop needed
        elif not _defer_initialization.get():
            run_sync(self.initialize)

    async def initialize(self) -> None:
        """Run the ``AgentInitialized`` hooks (a session manager restores the saved state here) once.

        The constructor does this itself, synchronously. Inside an event loop, prefer
        ``await Agent.create(...)``, which does it without blocking the loop.
        """
        if self._initialized:
            return
        self._initialized = True
        if self.hooks.has_callbacks(AgentInitialized):
            await self.hooks.invoke(AgentInitialized(self))

    @classmethod
    async def create(cls, *args: Any, **kwargs: Any) -> Agent:
        """Build an agent and initialize it asynchronously (for code already in an event loop)."""
        with deferred_initialization():
            agent = cls(*args, **kwargs)
        await agent.initialize()
        return agent

    # -- budget and retries ---------------------------------------------------------------------------

    @property
    def budget(self) -> Budget | None:
        """What one invocation may spend (None: no limit); may be changed between invocations."""
        return self._budget

    @budget.setter
    def budget(self, value: Budget | None) -> None:
        if value is not None and not isinstance(value, Budget):
            raise ConfigurationError(
                f"agent {self.name!r}: budget must be a Budget, not {type(value).__name__}"
            )
        if value is not None:
            self._add_limit(InvocationMeter)
        self._budget = value

    @property
    def retry(self) -> RetryPolicy | None:
        """How a failed model call is made again (None: it is not); may be changed between invocations."""
        return self._retry

    @retry.setter
    def retry(self, value: RetryPolicy | None) -> None:
        if value is not None and not isinstance(value, RetryPolicy):
            raise ConfigurationError(
                f"agent {self.name!r}: retry must be a RetryPolicy, not {type(value).__name__}"
            )
        if value is not None:
            self._add_limit(ModelCallRetries)
        self._retry = value

    def _add_limit(self, kind: type[InvocationMeter | ModelCallRetries]) -> None:
        """Register the hooks that apply a budget or a retry policy, once (they read the current one)."""
        if kind not in self._limits:
            self._limits.add(kind)
            self.hooks.add_hook(kind())

    # -- identity -------------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The session manager's id, or a random 8-hex-character id made for this instance."""
        if self.session_manager is not None:
            return str(self.session_manager.session_id)
        return self._own_session_id

    @property
    def model(self) -> Model:
        """The agent's model; without one, the model named by ``ORCHESTRA_MODEL``."""
        if self._model is None:
            self._model = default_model()
            if self._model is None:
                raise ModelNotConfiguredError(
                    f"agent {self.name!r} has no model: pass Agent(model=...) (e.g. a ScriptedModel for "
                    f"tests) or set {MODEL_ENV_VAR} (e.g. {MODEL_ENV_VAR}=openai:gpt-4o-mini, "
                    f"bedrock:<model id>, ollama:llama3.2, or echo for an offline stand-in)"
                )
        return self._model

    @model.setter
    def model(self, value: Model | str | Mapping[str, Any]) -> None:
        self._model = resolve_model(value)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, agent_id={self.agent_id!r})"

    # -- invocation -----------------------------------------------------------------------------------

    def __call__(
        self,
        prompt: Any = None,
        *,
        invocation_state: dict[str, Any] | None = None,
        output_type: type[BaseModel] | None = None,
    ) -> AgentResult:
        """Invoke the agent and wait for the result (works inside a running event loop too).

        Args:
            prompt: a string, a list of content blocks, a list of messages, interrupt responses, or None
                to continue from the current history.
            invocation_state: a dict shared by reference with every hook and tool of this invocation;
                returned as ``result.state``. Defaults to a new empty dict.
            output_type: a pydantic model class for ``result.output`` (overrides ``Agent(output_type=)``).
        """
        return run_sync(self.invoke_async, prompt, invocation_state=invocation_state, output_type=output_type)

    async def invoke_async(
        self,
        prompt: Any = None,
        *,
        invocation_state: dict[str, Any] | None = None,
        output_type: type[BaseModel] | None = None,
    ) -> AgentResult:
        """Invoke the agent and return the result."""
        stream = self.stream_async(prompt, invocation_state=invocation_state, output_type=output_type)
        # Nobody reads the events: drive the invocation's own generator, without the stream's per-event
        # wrapper (the hold and the rollback are the same). aclosing: a cancelled invocation must release
        # the agent at once, not when the GC finalizes it.
        result: AgentResult | None = None
        try:
            async with aclosing(stream._start()) as events:
                async for event in events:
                    if type(event) is ResultEvent:
                        result = event.result
        finally:
            stream._finish()
        assert result is not None, "an invocation always ends with a ResultEvent"
        return result

    def stream_async(
        self,
        prompt: Any = None,
        *,
        invocation_state: dict[str, Any] | None = None,
        output_type: type[BaseModel] | None = None,
    ) -> AgentStream:
        """Invoke the agent, yielding text chunks, tool calls and results, messages, and the result last.

        Stopping early (``aclose()``, ``aclosing``, or dropping the stream after a ``break``) ends the
        invocation: the history is rolled back to where it started and the agent is free at once.
        """
        chosen = resolve_output_type(output_type) if output_type is not None else self.output_type
        output = OutputTool(chosen, self.max_output_retries) if chosen is not None else None
        if output is not None and output.name in self.tool_registry:
            raise ConfigurationError(
                f"agent {self.name!r} has a tool named {output.name!r}, the name of its output type's final "
                "tool; rename the tool or the output type"
            )
        return AgentStream(self, prompt, {} if invocation_state is None else invocation_state, output)

    def exclusive(self, what: str) -> _Exclusive:
        """Hold the agent for one operation; a second, overlapping one raises ``ConcurrencyError``."""
        return _Exclusive(self, what)

    # -- history --------------------------------------------------------------------------------------

    async def _append_message(self, message: MessageDict, invocation_state: dict[str, Any]) -> None:
        self.messages.append(message)
        if self.hooks.has_callbacks(MessageAdded):
            await self.hooks.invoke(MessageAdded(self, message, invocation_state))

    async def append_message(self, message: Mapping[str, Any]) -> MessageDict:
        """Validate and append a message to the history (hooks see it as added)."""
        plain = validate_message(message)
        await self._append_message(plain, {})
        return plain

    async def redact_latest_message(self, redacted: str | Mapping[str, Any]) -> None:
        """Replace the newest message with a redacted version; sessions persist it under every strategy."""
        if not self.messages:
            raise ValueError(f"agent {self.name!r} has no message to redact")
        old = self.messages[-1]
        message = (
            {"role": old["role"], "content": [{"text": redacted}]}
            if isinstance(redacted, str)
            else validate_message(redacted)
        )
        index = len(self.messages) - 1
        self.messages[index] = message
        await self.hooks.invoke(MessageRedacted(self, index, message, previous=old))

    # -- what sessions and orchestrators persist -------------------------------------------------------

    def agent_data(self) -> AgentData:
        """The agent's persistable state (``messages`` is the live history list, not a copy)."""
        return AgentData(
            messages=self.messages,
            state=self.state.to_dict(),
            conversation_manager_state=self.conversation_manager.get_state(),
            system_prompt=self.system_prompt,
            interrupt_state=self._pending_tools.to_dict() if self._pending_tools else None,
        )

    def as_tool(self, name: str | None = None, description: str | None = None) -> Any:
        """This agent as a tool another agent's model can call (``{"input": "..."}`` -> its answer).

        It runs with the caller's invocation state and keeps its own conversation. ``name`` defaults to
        the agent's name, ``description`` to its description.
        """
        from orchestra.tools.delegate import DelegateTool

        return DelegateTool(self, name, description)

    def open_interrupts(self) -> list[Interrupt]:
        """The questions the agent waits on: its tools' interrupts that have no answer yet (answer them
        with ``agent([interrupt.to_response(answer), ...])``); empty when it waits for none."""
        pending = self._pending_tools
        return pending.open_interrupts() if pending is not None else []

    def open_turn(self) -> int | None:
        """Where an open turn starts in ``messages`` (the index of its prompt), or None.

        A turn is open when a killed process left it unfinished, or when it failed after a side-effecting
        tool started; the next invocation finishes it first. An agent waiting for interrupt responses is
        not holding an open turn: it waits for the answers.
        """
        pending = self._pending_tools
        if pending is not None and pending.open_interrupts():
            return None
        if pending is None and self.messages:
            last = self.messages[-1]  # the common case, checked per invocation in O(1): a finished turn
            if last["role"] == "assistant" and not any("toolUse" in block for block in last["content"]):
                return None
        kept, _ = unfinished_turn(self.messages, interrupted=pending is not None)
        if kept < len(self.messages):
            return kept
        if pending is None:
            return None
        for index in range(len(self.messages) - 1, -1, -1):  # the prompt of the turn the ledger belongs to
            message = self.messages[index]
            if message["role"] == "user" and not any("toolResult" in b for b in message["content"]):
                return index
        return 0

    def load_agent_data(self, data: AgentData) -> None:
        """Restore what ``agent_data`` captured (the history list is replaced, not appended to)."""
        pending = PendingTools.from_dict(data.interrupt_state) if data.interrupt_state else None
        # A process killed in the middle of a turn may have saved part of it: it is resumed by the next
        # invocation (or, without resume_turns, dropped). Any other broken rule is damage, which is
        # refused rather than cut away with what follows it.
        messages = list(data.messages)
        kept, damage = unfinished_turn(messages, interrupted=pending is not None)
        if damage:
            raise SnapshotError(
                f"agent {self.name!r}: the stored history breaks its rules at messages[{kept}] ({damage[0]}), "
                "which is more than the unfinished last turn a killed process leaves: it is damaged. "
                "Nothing was loaded; restore it from an export or an immutable snapshot"
            )
        keep = kept < len(messages) and (self.resume_turns or (pending is not None and bool(pending.started)))
        self.messages = list(repair_history(messages, interrupted=pending is not None, keep_unfinished=keep))
        if keep:
            last = self.messages[-1]
            calls = [b["toolUse"] for b in last["content"] if "toolUse" in b]
            if pending is None and last["role"] == "assistant" and calls:
                pending = PendingTools(calls, {}, {})  # the model's calls, none run yet
            self.log.info("history_open_turn_kept", open_messages=len(messages) - kept)
        elif kept < len(messages):
            self.log.warning("history_unfinished_turn_dropped", dropped=len(messages) - kept, kept=kept)
        self.state.replace(data.state)
        self.conversation_manager.restore_state(data.conversation_manager_state)
        self.system_prompt = data.system_prompt
        self._pending_tools = pending


class _Exclusive:
    """One operation's hold on an agent; releasing it twice, or after it was taken over, does nothing."""

    def __init__(self, agent: Agent, what: str) -> None:
        self._agent = agent
        self._what = what

    def __enter__(self) -> None:
        agent = self._agent
        with agent._owner_lock:
            if agent._owner is not None:
                raise ConcurrencyError(
                    f"agent {agent.name!r} is already running an invocation; an agent runs one "
                    f"invocation at a time (this {self._what} overlapped it). Create one agent per "
                    "concurrent conversation, or await the first invocation."
                )
            agent._owner = self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        agent = self._agent
        with agent._owner_lock:
            if agent._owner is self:
                agent._owner = None


class AgentStream(AsyncGenerator[AgentStreamEvent, None]):
    """The events of one invocation (what ``Agent.stream_async`` returns).

    The first event takes the agent's hold (an overlapping invocation raises ``ConcurrencyError``); the
    end of the stream, an error, ``aclose()`` or ``aclosing`` releases it. A stream dropped before its
    end (``async for ...: break`` without ``aclosing``) is abandoned: the moment it is garbage (at once
    in CPython), the history is rolled back and the agent released, so the next call never meets a
    ``ConcurrencyError`` from a stream nobody reads.
    """

    def __init__(
        self, agent: Agent, prompt: Any, invocation_state: dict[str, Any], output: OutputTool | None = None
    ) -> None:
        self._agent = agent
        self._output = output
        self._prompt = prompt
        self._invocation_state = invocation_state
        self._hold = agent.exclusive("invoke")
        self._checkpoint: Checkpoint | None = None
        # run_invocation's generator refers to the agent and the checkpoint, never to this object, so a
        # dropped stream is garbage at once instead of living on in a reference cycle.
        self._events: AsyncGenerator[AgentStreamEvent, None] | None = None
        self._finished = False
        self._log: Any = None

    def _start(self) -> AsyncGenerator[AgentStreamEvent, None]:
        if self._finished:
            raise StopAsyncIteration
        self._hold.__enter__()
        agent = self._agent
        if _debug_log.isEnabledFor(logging.DEBUG):  # nothing to bind or format when nobody listens
            self._log = agent.log.bind(invocation_id=secrets.token_hex(4))
            self._log.debug("invocation.start")
        self._checkpoint = Checkpoint(agent)
        self._events = run_invocation(
            agent, self._prompt, self._invocation_state, self._checkpoint, self._output
        )
        return self._events

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._hold.release()

    async def __anext__(self) -> AgentStreamEvent:
        events = self._events if self._events is not None else self._start()
        try:
            return await events.__anext__()
        except StopAsyncIteration:
            if self._log is not None:
                self._log.debug("invocation.end")
            self._finish()
            raise
        except BaseException:
            self._finish()
            raise

    async def asend(self, value: None) -> AgentStreamEvent:
        return await self.__anext__()

    async def athrow(
        self,
        typ: type[BaseException] | BaseException,
        val: object = None,
        tb: TracebackType | None = None,
    ) -> AgentStreamEvent:
        exc = typ if isinstance(typ, BaseException) else typ()
        if self._events is None:
            self._finished = True
            raise exc
        try:
            return await self._events.athrow(exc)
        finally:
            self._finish()

    async def aclose(self) -> None:
        if self._events is None:
            self._finished = True
            return
        try:
            await self._events.aclose()  # rolls the history back if the invocation had not finished
        finally:
            self._finish()

    def __del__(self) -> None:
        if not self._finished and self._checkpoint is not None:
            # Abandoned mid-invocation. The generator itself is closed later, by the event loop's
            # finalizer; by then the checkpoint and the hold are spent and it changes nothing.
            self._checkpoint.roll_back()
            self._finish()
