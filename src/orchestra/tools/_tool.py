"""The ``@tool`` decorator: a Python function becomes a tool with a JSON schema and validated input."""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, overload, runtime_checkable

import anyio.to_thread
import pydantic
from pydantic import BaseModel, ConfigDict, ValidationError

from orchestra._context import current_orchestrator
from orchestra._pydantic import validation_problems
from orchestra.errors import ConfigurationError
from orchestra.history import EMPTY_TOOL_OUTPUT, TOOL_NAME_PATTERN
from orchestra.interrupts import Interrupt, InterruptException
from orchestra.messages import ToolResultDict
from orchestra.models import ToolSpec
from orchestra.tools.effects import OnUnknown
from orchestra.waits import waiting_scope

if TYPE_CHECKING:
    from orchestra.agent.protocol import AgentLike

__all__ = [
    "AgentTool",
    "FunctionTool",
    "ToolContext",
    "ToolProgressEvent",
    "ToolResultDict",
    "TurnControl",
    "as_tool",
    "tool",
    "tool_result",
]

CONTEXT_PARAMETER = "tool_context"

ApprovalCheck = Callable[[dict[str, Any], "ToolContext"], Any]
"""``requires_approval`` as a function of the call's arguments and context: true when the call asks first
(it may be async; see ``orchestra.tools.approval``)."""


def check_tool_name(name: str) -> str:
    """``name`` if both providers accept it as a tool name; a ``ConfigurationError`` showing a valid one."""
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        valid = re.sub(r"[^a-zA-Z0-9_-]", "_", str(name))[:64] or "my_tool"
        raise ConfigurationError(
            f"tool name {name!r} is not accepted by model providers: use 1-64 letters, digits, '_' or "
            f"'-' (for example {valid!r})"
        )
    return name


def _resolve_annotation(
    annotation: Any, fn: Callable[..., Any], localns: dict[str, Any] | None, tool_name: str, param: str
) -> Any:
    """A parameter's annotation as a type, evaluated in the scope that defined the function."""
    if not isinstance(annotation, str):
        return annotation
    globalns = getattr(inspect.unwrap(fn), "__globals__", {})
    try:
        return eval(annotation, globalns, localns or {})  # the user's own annotation, in its own scope
    except Exception as exc:
        raise ConfigurationError(
            f"tool {tool_name!r}: cannot build an input schema for parameter {param!r}: its annotation "
            f"{annotation!r} does not resolve ({type(exc).__name__}: {exc}). Import the name at run time "
            "(not only under TYPE_CHECKING), or annotate the parameter with a type that exists there"
        ) from None


@dataclass
class ToolContext:
    """What a tool declared with ``context=True`` receives as its ``tool_context`` parameter.

    Attributes:
        agent: the agent running the tool (``agent.state``, ``agent.messages``).
        tool_use: the model's request: ``toolUseId``, ``name``, ``input``.
        invocation_state: the invocation's state dict, shared by reference with hooks and other tools.
        orchestrator: the Graph or Swarm running the agent, if any (its ``state`` is shared by all nodes).
        idempotency_key: the same on every execution of this call (after a crash, a retry, a resume in
            another process): pass it on to what the tool changes (see ``orchestra.tools.effects``).
        turn: the agent loop's round of tool calls this call belongs to (None for a direct call,
            ``agent.tool.NAME(...)``): what ``end_turn``, ``report_progress`` and ``interrupt`` act on.
    """

    agent: AgentLike
    tool_use: dict[str, Any]
    invocation_state: dict[str, Any]
    orchestrator: Any = field(default_factory=current_orchestrator.get)
    idempotency_key: str = ""
    turn: TurnControl | None = field(default=None, repr=False)
    # What a tool caught and answered as an error result (its span's ``error.type``).
    _error: BaseException | None = field(default=None, init=False, repr=False)

    @property
    def error(self) -> BaseException | None:
        """What the tool raised and answered as an error result, if anything (hooks and spans see it)."""
        return self._error

    def end_turn(self, message: str) -> None:
        """End the agent's turn once this tool call returns: no further model call in this invocation.

        The agent's history gets the tool results and then an assistant message with ``message``, so
        roles keep alternating. Swarm's handoff tool uses this.
        """
        if self.turn is None:
            raise RuntimeError("end_turn() is only available while the agent loop runs the tool")
        self.turn.end(message)

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell whoever streams the agent how far this call is (a ``ToolProgressEvent``)."""
        if self.turn is not None and self.turn.streamed:
            self.turn.progress.append(ToolProgressEvent(self.tool_use["toolUseId"], progress, total, message))

    def progress_reporter(self) -> Any:
        """``report_progress`` as a plain callable (safe from other threads), or None when nothing listens."""
        return self.report_progress if self.turn is not None and self.turn.streamed else None

    def interrupt(self, name: str, reason: Any = None) -> Any:
        """Ask a human (or the calling application) for input and stop the run until it answers.

        The first time, this stops the agent (and the Graph or Swarm around it) with status INTERRUPTED
        and ``result.interrupts`` lists the question. When the run is invoked again with a response for
        this interrupt, the tool runs again from the start and this call returns the response.
        """
        interrupt_id = Interrupt.make_id(self.tool_use["toolUseId"], name)
        known = self.turn.interrupts.get(interrupt_id) if self.turn is not None else None
        if known is not None and known.response is not None:
            return known.response
        raise InterruptException(Interrupt(id=interrupt_id, name=name, reason=reason))


@dataclass(frozen=True)
class ToolProgressEvent:
    """A tool reported progress (``ToolContext.report_progress``; an MCP server's progress notifications).

    The agent's stream gives a tool call's progress events after they happened, before its result.
    """

    tool_use_id: str
    progress: float
    total: float | None = None
    message: str | None = None


class TurnControl:
    """One round of an agent's tool calls, as its tools see it: they may end the agent's turn (see
    ``ToolContext.end_turn``) and report progress (collected here, in order, from any thread, when the
    invocation is ``streamed``: nobody else reads it), and ``interrupts`` holds the turn's questions with
    the answers given so far (``ToolContext.interrupt``)."""

    def __init__(self, interrupts: dict[str, Interrupt] | None = None, streamed: bool = True) -> None:
        self.streamed = streamed
        self.ended = False
        self.messages: list[str] = []
        self.progress: list[ToolProgressEvent] = []
        self.interrupts: dict[str, Interrupt] = interrupts if interrupts is not None else {}

    def end(self, message: str) -> None:
        self.ended = True
        self.messages.append(message)


@runtime_checkable
class AgentTool(Protocol):
    """Anything an agent can call: a name, a spec for the model, and an async ``invoke``."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> ToolSpec: ...

    async def invoke(self, tool_use: dict[str, Any], context: ToolContext) -> ToolResultDict:
        """Run the tool for ``tool_use``; errors inside the tool become an error result."""
        ...


def tool_result(tool_use_id: str, value: Any, status: str = "success") -> ToolResultDict:
    """Turn what a tool returned into a tool result block."""
    if isinstance(value, dict) and "status" in value and "content" in value:
        return {"toolUseId": tool_use_id, "status": value["status"], "content": list(value["content"])}
    if isinstance(value, str):
        # Providers refuse blank text blocks, so an empty answer is said in words.
        content: list[dict[str, Any]] = [{"text": value if value.strip() else EMPTY_TOOL_OUTPUT}]
    elif isinstance(value, BaseModel):
        content = [{"json": value.model_dump(mode="json")}]
    elif isinstance(value, dict | list):
        content = [{"json": json.loads(json.dumps(value, default=str))}]
    elif value is None:
        content = [{"text": EMPTY_TOOL_OUTPUT}]
    else:
        content = [{"text": str(value)}]
    return {"toolUseId": tool_use_id, "status": status, "content": content}


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Yields|Raises|Examples?|Notes?)\s*:\s*$")
_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and its ``Args:`` descriptions."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in lines:
        heading = _SECTION.match(line)
        if heading:
            section, current, arg_indent = heading.group(1), None, None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            indent = len(line) - len(line.lstrip())
            match = _ARG.match(line)
            if match and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = match.group(1).lstrip("*")
                args[current] = match.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {line.strip()}".strip()
    return "\n".join(description).strip(), args


class FunctionTool:
    """A Python function as a tool. Made by :func:`tool`; still callable as the plain function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        context: bool = False,
        localns: dict[str, Any] | None = None,
        effects: bool = False,
        on_unknown: OnUnknown = "interrupt",
        requires_approval: bool | ApprovalCheck = False,
    ) -> None:
        self.fn = fn
        self._name = check_tool_name(name or fn.__name__)
        self.takes_context = context
        if on_unknown not in ("interrupt", "retry", "error"):
            raise ConfigurationError(
                f"tool {self._name!r}: on_unknown must be 'interrupt', 'retry' or 'error', not {on_unknown!r}"
            )
        self.effects = effects
        self.on_unknown: OnUnknown = on_unknown
        if not (isinstance(requires_approval, bool) or callable(requires_approval)):
            raise ConfigurationError(
                f"tool {self._name!r}: requires_approval is True, False or a function of the call's "
                f"arguments and context, not {requires_approval!r}"
            )
        self.requires_approval = requires_approval
        signature = inspect.signature(fn)
        if context and CONTEXT_PARAMETER not in signature.parameters:
            raise ConfigurationError(
                f"tool {self._name!r} is declared with context=True but has no parameter named "
                f"{CONTEXT_PARAMETER!r}; add `{CONTEXT_PARAMETER}: ToolContext` to its signature"
            )
        summary, arg_docs = _parse_docstring(fn.__doc__)
        self._description = description or summary or self._name
        fields: dict[str, Any] = {}
        for param in signature.parameters.values():
            # The context parameter's annotation is never needed (it is often imported for typing only).
            if context and param.name == CONTEXT_PARAMETER:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = (
                Any
                if param.annotation is param.empty
                else _resolve_annotation(param.annotation, fn, localns, self._name, param.name)
            )
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (
                annotation,
                pydantic.Field(default=default, description=arg_docs.get(param.name)),
            )
        self.input_model: type[BaseModel] = pydantic.create_model(
            f"{self._name}_input", __config__=ConfigDict(extra="forbid"), **fields
        )
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        self._spec: ToolSpec = {
            "name": self._name,
            "description": self._description,
            "inputSchema": {"json": schema},
        }
        self._is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__name__ = self._name
        self.__wrapped__ = fn

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self._name!r})"

    async def invoke(self, tool_use: dict[str, Any], context: ToolContext) -> ToolResultDict:
        tool_use_id = tool_use["toolUseId"]
        raw_input = tool_use.get("input") or {}
        try:
            validated = self.input_model.model_validate(raw_input)
        except ValidationError as exc:
            problems = validation_problems(exc)
            return tool_result(
                tool_use_id, f"Error: invalid input for tool {self._name!r}: {problems}", "error"
            )
        kwargs = {name: getattr(validated, name) for name in type(validated).model_fields}
        if self.takes_context:
            kwargs[CONTEXT_PARAMETER] = context
        try:
            if self._is_async:
                with waiting_scope(context):  # orchestra.sleep / wait_for_event ask through the call
                    value = await self.fn(**kwargs)
            else:
                value = await anyio.to_thread.run_sync(lambda: self.fn(**kwargs))
            if inspect.isawaitable(value):
                value = await value
        except InterruptException:
            raise
        except Exception as exc:
            context._error = exc
            return tool_result(tool_use_id, f"Error: {type(exc).__name__}: {exc}", "error")
        return tool_result(tool_use_id, value)


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    context: bool = False,
    effects: bool = False,
    on_unknown: OnUnknown = "interrupt",
    requires_approval: bool | ApprovalCheck = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    context: bool = False,
    effects: bool = False,
    on_unknown: OnUnknown = "interrupt",
    requires_approval: bool | ApprovalCheck = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool of a function, bare (``@tool``) or with options (``@tool(name=..., context=True)``).

    The input schema comes from the type hints and the ``Args:`` section of a Google-style docstring; the
    description from the docstring's first part. Input is validated before the call.

    Args:
        fn: the function (when used bare).
        name: the tool's name; defaults to the function's name.
        description: the tool's description; defaults to the docstring.
        context: pass a :class:`ToolContext` to the function's ``tool_context`` parameter.
        effects: the tool changes the world (sends, pays, writes): it runs once across crashes and
            resumes, its result recorded before the model sees it (see ``orchestra.tools.effects``).
        on_unknown: for ``effects=True``, what a resumed turn does with a call that started but never
            returned: ``"interrupt"`` (ask a human; the default), ``"retry"`` (run it again with the same
            idempotency key) or ``"error"`` (tell the model the outcome is unknown).
        requires_approval: ask a human before each call runs (``True``), or before the calls a function
            ``(arguments, tool_context) -> bool`` says so; the answer approves, rejects with a reason,
            edits the arguments, or approves the tool for the rest of the session (see
            ``orchestra.tools.approval``).
    """
    # Annotations may name classes local to the function that defines the tool: keep that scope (at
    # module level the locals are the globals, which the function already has).
    caller = sys._getframe(1)
    localns = None if caller.f_locals is caller.f_globals else dict(caller.f_locals)
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "context": context,
        "localns": localns,
        "effects": effects,
        "on_unknown": on_unknown,
        "requires_approval": requires_approval,
    }
    if fn is not None:
        return FunctionTool(fn, **options)

    def decorate(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, **options)

    return decorate


def as_tool(obj: Any) -> AgentTool:
    """Accept what users pass as ``tools=[...]``: tool objects, plain functions (wrapped with ``@tool``),
    and agents, graphs and swarms (as their ``as_tool()``)."""
    if isinstance(obj, AgentTool):
        return obj
    if hasattr(obj, "invoke_async") and hasattr(obj, "as_tool"):  # an Agent, Graph or Swarm
        delegate: AgentTool = obj.as_tool()
        return delegate
    if callable(obj):
        return FunctionTool(obj)
    raise ConfigurationError(f"{obj!r} is not a tool: pass a function decorated with @tool or an AgentTool")
