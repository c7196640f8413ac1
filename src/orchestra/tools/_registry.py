"""The tools of one agent, by name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from orchestra.errors import ConfigurationError
from orchestra.models import ToolSpec
from orchestra.tools._tool import AgentTool, as_tool, check_tool_name

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """An agent's tools by name; tool names are unique."""

    def __init__(self, tools: Iterable[Any] = ()) -> None:
        self._tools: dict[str, AgentTool] = {}
        self._specs: list[ToolSpec] | None = None
        # Tool providers (an MCP client) whose tools may change: provider -> (its version, its names).
        self._providers: dict[Any, tuple[int, list[str]]] = {}
        for item in tools:
            provider = getattr(item, "agent_tools", None)
            if callable(provider) and not callable(getattr(item, "invoke", None)):
                self._add_provided(item)
            else:
                self.add(item)

    def _add_provided(self, provider: Any) -> None:
        provided = [self.add(t) for t in provider.agent_tools()]  # a tool provider: an MCP client's tools
        self._providers[provider] = (getattr(provider, "tools_version", 0), [t.name for t in provided])

    def _follow_providers(self) -> None:
        """Take the current tools of every provider whose list changed (checked before each model call)."""
        for provider, (version, names) in list(self._providers.items()):
            if getattr(provider, "tools_version", 0) != version:
                for name in names:
                    self._tools.pop(name, None)
                self._specs = None
                self._add_provided(provider)

    def add(self, item: Any) -> AgentTool:
        """Register a tool (or a plain function, wrapped with ``@tool``)."""
        agent_tool = as_tool(item)
        check_tool_name(agent_tool.name)
        if agent_tool.name in self._tools and self._tools[agent_tool.name] is not agent_tool:
            raise ConfigurationError(f"two tools are named {agent_tool.name!r}; tool names must be unique")
        self._tools[agent_tool.name] = agent_tool
        self._specs = None
        return agent_tool

    def get(self, name: str) -> AgentTool | None:
        if self._providers:
            self._follow_providers()
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs(self) -> list[ToolSpec]:
        """The specs the model sees (cached until the tools change)."""
        if self._providers:
            self._follow_providers()
        if self._specs is None:
            self._specs = [t.spec for t in self._tools.values()]
        return self._specs

    def __contains__(self, name: object) -> bool:
        if self._providers:
            self._follow_providers()
        return name in self._tools

    def __iter__(self) -> Iterator[AgentTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
