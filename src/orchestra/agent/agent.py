"""``Agent``: a model, tools, and three kinds of state."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel

from orchestra._ids import validate_id
from orchestra._logging import get_logger
from orchestra._sync import run_sync
from orchestra.agent._direct import ToolCaller
from orchestra.agent._limits import InvocationMeter, ModelCallRetries
from orchestra.agent._loop import Invocation, append_message, run_invocation
from orchestra.agent.protocol import AgentData
from orchestra.agent.result import AgentResult
from orchestra.agent.state import JSONState
from orchestra.agent.stream import AgentStream, Hold, Owner
from orchestra.agent.structured import (
    DEFAULT_MAX_RETRIES,
    TEXT_OUTPUT,
    InvocationOutput,
    OutputTool,
    resolve_output_type,
)
from orchestra.agent.turn import PendingTools, open_turn, restored_turn
from orchestra.budget import Budget
from orchestra.conversation import ConversationManager, SlidingWindowConversationManager
from orchestra.errors import ConfigurationError, ModelNotConfiguredError
from orchestra.hooks import (
    AgentInitialized,
    HookProvider,
    HookRegistry,
    MessageRedacted,
    SessionManager,
)
from orchestra.interrupts import Interrupt
from orchestra.messages import MessageDict, validate_message, validate_messages
from orchestra.models import MODEL_ENV_VAR, Model, default_model, resolve_model
from orchestra.retry import RetryPolicy
from orchestra.tools import DelegateTool, ToolRegistry

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

    kind = "agent"  # what it is as a tool's target (``DelegateTool``), as a Graph's kind is "graph"

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
        self._effect_scope: str | None = None
        self.agent_id = validate_id(agent_id or "default", "agent_id")
        self.description = description
        self.system_prompt = system_prompt
        self._model = resolve_model(model) if model is not None else None
        self.messages: list[MessageDict] = validate_messages(messages or [])
        self._dropped_messages: list[MessageDict] | None = None
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
        # The ledger of the turn's tool calls while they run or wait for interrupt responses (see
        # orchestra.agent.turn); None between turns. Read it; only the agent's loop changes it.
        self.pending_tools: PendingTools | None = None
        self._owner = Owner()
        self._own_session_id = secrets.token_hex(4)
        self.log = get_logger("orchestra.agent", agent=self.name)
        self.session_manager = session_manager
        if session_manager is not None:
            self.hooks.add_hook(self._checked(session_manager))
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

    async def attach_session(self, session_manager: SessionManager, *, agent_id: str | None = None) -> None:
        """Give an agent built without a session manager one, as ``Agent(session_manager=)`` would, and
        restore what that session saved of it (``AgentInitialized``). An agent used as another's tool is
        saved in its caller's session this way (``DelegateTool``).

        Args:
            session_manager: the session manager.
            agent_id: the id to store the agent under from now on (default: its own).

        Raises:
            ConfigurationError: the agent has a session manager already, or ``session_manager`` is not one.
        """
        if self.session_manager is not None:
            raise ConfigurationError(
                f"agent {self.name!r} already has a session manager (session {self.session_id!r})"
            )
        manager = self._checked(session_manager)
        if agent_id is not None:
            self.agent_id = validate_id(agent_id, "agent_id")
        self.session_manager = manager
        self.hooks.add_hook(manager)
        self._initialized = True  # what initialize() would run runs now
        await self.hooks.invoke(AgentInitialized(self))

    def _checked(self, session_manager: Any) -> SessionManager:
        if not isinstance(session_manager, SessionManager):
            raise ConfigurationError(
                f"agent {self.name!r}: session_manager must be a session manager (a HookProvider with a "
                f"session_id), got {type(session_manager).__name__}"
            )
        return session_manager

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
    def effect_scope(self) -> str | None:
        """Where this agent's turns are stored (``bind_session``): with a tool-call id it makes the call's
        idempotency key (see ``orchestra.tools.effects``); None while nothing persists the agent."""
        return self._effect_scope

    @property
    def dropped_messages(self) -> list[MessageDict] | None:
        """What the conversation manager took out of the history, oldest first, when a session keeps it
        (``bind_session(dropped_messages=...)``); None when nobody does."""
        return self._dropped_messages

    def bind_session(self, scope: str, *, dropped_messages: list[MessageDict] | None = None) -> None:
        """Bind the agent to where it is stored (its session manager or its orchestrator's does this).

        Args:
            scope: where its turns are stored (e.g. ``<session>/agent/<agent id>``): its tool calls'
                idempotency keys are made from it.
            dropped_messages: a list the conversation manager notes what it cuts into, for a session that
                keeps them (``SnapshotSessionManager(keep_dropped_messages=True)``); None keeps none.
        """
        self._effect_scope = scope
        self._dropped_messages = dropped_messages

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
        output = self._output(output_type)
        state = {} if invocation_state is None else invocation_state
        with self.exclusive("invoke"):
            invocation = Invocation(self, prompt, state, output, streaming=False)
            log = self._debug_log()
            # Nobody reads events: the loop yields none (a cancellation or an error goes through it, so it
            # is never left suspended and needs no closing).
            async for _ in run_invocation(invocation):
                pass
            if log is not None:
                log.debug("invocation.end")
        assert invocation.result is not None, "an invocation that returns has its result"
        return invocation.result

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
        output = self._output(output_type)
        state = {} if invocation_state is None else invocation_state
        return AgentStream(
            self.exclusive("invoke"),
            lambda: Invocation(self, prompt, state, output, streaming=True),
            self._debug_log(),
        )

    def _output(self, output_type: type[BaseModel] | None) -> InvocationOutput:
        chosen = resolve_output_type(output_type) if output_type is not None else self.output_type
        if chosen is None:
            return TEXT_OUTPUT
        output = OutputTool(chosen, self.max_output_retries)
        if output.name in self.tool_registry:
            raise ConfigurationError(
                f"agent {self.name!r} has a tool named {output.name!r}, the name of its output type's final "
                "tool; rename the tool or the output type"
            )
        return output

    def _debug_log(self) -> Any:
        """A logger bound to a new invocation id when debug logging is on (nothing to format otherwise)."""
        if not _debug_log.isEnabledFor(logging.DEBUG):
            return None
        log = self.log.bind(invocation_id=secrets.token_hex(4))
        log.debug("invocation.start")
        return log

    def exclusive(self, what: str) -> Hold:
        """Hold the agent for one operation; a second, overlapping one raises ``ConcurrencyError``."""
        return self._owner.hold(self.name, what)

    # -- history --------------------------------------------------------------------------------------

    async def append_message(self, message: Mapping[str, Any]) -> MessageDict:
        """Validate and append a message to the history (hooks see it as added)."""
        plain = validate_message(message)
        await append_message(self, plain, {})
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
            interrupt_state=self.pending_tools.to_dict() if self.pending_tools else None,
        )

    def as_tool(self, name: str | None = None, description: str | None = None) -> DelegateTool:
        """This agent as a tool another agent's model can call (``{"input": "..."}`` -> its answer).

        It runs with the caller's invocation state and keeps its own conversation. ``name`` defaults to
        the agent's name, ``description`` to its description.
        """
        return DelegateTool(self, name, description)

    def open_interrupts(self) -> list[Interrupt]:
        """The questions the agent waits on: its tools' interrupts that have no answer yet (answer them
        with ``agent([interrupt.to_response(answer), ...])``); empty when it waits for none."""
        pending = self.pending_tools
        return pending.open_interrupts() if pending is not None else []

    def open_turn(self) -> int | None:
        """Where an open turn starts in ``messages`` (the index of its prompt), or None.

        A turn is open when a killed process left it unfinished, or when it failed after a side-effecting
        tool started; the next invocation finishes it first. An agent waiting for interrupt responses is
        not holding an open turn: it waits for the answers.
        """
        return open_turn(self.messages, self.pending_tools)

    def load_agent_data(self, data: AgentData) -> None:
        """Restore what ``agent_data`` captured (the history list is replaced, not appended to).

        Raises:
            SnapshotError: the stored history is damaged (see ``turn.restored_turn``); nothing is loaded.
        """
        self.messages, pending = restored_turn(self, data.messages, data.interrupt_state)
        self.state.replace(data.state)
        self.conversation_manager.restore_state(data.conversation_manager_state)
        self.system_prompt = data.system_prompt
        self.pending_tools = pending
