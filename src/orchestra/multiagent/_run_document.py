"""``RunDocument``: a Graph's or Swarm's run as named JSON fields and logs, the unit sessions persist
incrementally (see ``orchestra.session``)::

    run                   {"status", "kind", "topology", "version", "execution_count", "usage", "spent", ...}
    topology              the nodes, edges, joins and conditions the run started on (see migrations.py)
    task                  the original task
    state                 the orchestrator's shared state (JSON key-value)
    node/<id>             {"status", "executions", "result", ...} of one node
    agent/<id>            an agent node's state, conversation-manager state, system prompt, interrupts
    agent/<id>/messages   an agent node's conversation (a log)
    execution_order       node ids in the order their executions finished (a log)
    map/<id>...           a map node's items and each item's result (see _map_schedule.py)

It is the one object through which anything outside the orchestrator (sessions, Temporal, the server,
the CLI) reads or changes a run: ``orchestrator.document``. Its rules:

- Every change marks its field dirty; ``take_changes`` hands a session only the dirty fields and logs,
  so a per-node save costs the same whether 1 or 200 nodes have already completed.
- Agents are not copied in: an agent marked changed (``mark_agent``) is read when the changes are
  taken, so a run without a session never copies a conversation.
- A node's result stays the ``NodeResult`` it was until someone reads the record (a save, a dump, a
  reader): a run without a session never dumps one.
- No I/O.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from orchestra._json import decode_bytes, encode_bytes
from orchestra.agent import Agent, AgentData
from orchestra.agent.state import JSONState
from orchestra.messages import Usage, messages_from_json, messages_to_json
from orchestra.multiagent.results import NodeResult, Status

__all__ = ["RunDocument", "SavedNode"]


class SavedNode(Protocol):
    """What the document reads of a node (``nodes.Node``, which sits above this module)."""

    @property
    def kind(self) -> str: ...

    @property
    def executor(self) -> Any: ...

    @property
    def agent(self) -> Agent: ...


Changes = tuple[dict[str, Any], dict[str, list[Any]], list[str]]
"""What ``take_changes`` returns: (changed fields, changed logs, removed field names)."""

_LOG_NAMES = ("execution_order", "node_history", "handoffs", "conversation")  # a swarm's logs too


class RunDocument:
    """The fields and logs of one orchestrator's run, what changed in them since the last save, and how
    its agents' state enters and leaves them.

    Args:
        nodes: the orchestrator's nodes (agent nodes' agents are saved with the run; outputs are read
            back as the models their nodes give).
        state: the orchestrator's shared state (saved as the ``state`` field).
        run: the run record to start with.
    """

    def __init__(self, nodes: Mapping[str, SavedNode], state: JSONState, run: dict[str, Any]) -> None:
        self.nodes = nodes
        self.state = state
        self._fields: dict[str, Any] = {"run": run}
        self._logs: dict[str, list[Any]] = {"execution_order": []}
        self._dirty: set[str] = set()
        self._dirty_logs: set[str] = set()
        self._dirty_agents: set[str] = set()
        self._unset: set[str] = set()
        # Results not dumped yet (their records hold the NodeResult itself), and every result read back.
        self._undumped: set[str] = set()
        self._results: dict[str, NodeResult] = {}
        # Agents used as tools by agent nodes ("<node>/tools/<tool>" -> agent), saved like node agents;
        # and what a loaded run holds for those not attached yet in this process.
        self._tool_agents: dict[str, Agent] = {}
        self._saved_tool_agents: dict[str, AgentData] = {}
        self._shared_records: set[str] = set()  # node records still the loader's (see load)
        self._saved_state_version = -1
        self._orphans: tuple[dict[str, Any], dict[str, list[Any]]] = ({}, {})  # see load
        self._restored_agents: set[str] = set()  # the agent nodes load gave saved state

    # -- reading ----------------------------------------------------------------------------------------

    @property
    def run(self) -> dict[str, Any]:
        """The run record (status, counters, usage, ...); change it with ``update_run``."""
        return self._fields["run"]  # type: ignore[no-any-return]

    @property
    def status(self) -> Status:
        """The status of the current (or last) run."""
        return Status(self.run["status"])

    def field(self, name: str) -> Any:
        """A field's value (None if absent). Read it, do not change it: use ``set`` or ``update_node``."""
        if name.startswith("node/"):
            self._dump(name[len("node/") :])
        return self._fields.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._fields

    def names(self, prefix: str = "") -> list[str]:
        """The names of the fields that start with ``prefix``."""
        return [name for name in self._fields if name.startswith(prefix)]

    def log(self, name: str) -> Sequence[Any]:
        """A log's items (empty if absent). Read it, do not change it: use ``append``."""
        return self._logs.get(name, ())

    def node(self, node_id: str) -> Mapping[str, Any] | None:
        """A node's record (``status``, ``executions``, ``result``, ...), or None if it has none."""
        self._dump(node_id)
        record: dict[str, Any] | None = self._fields.get(f"node/{node_id}")
        return record

    def node_ids(self) -> list[str]:
        """The nodes the run has a record of, in the order their records were made."""
        return [name[len("node/") :] for name in self._fields if name.startswith("node/")]

    def result(self, node_id: str) -> NodeResult | None:
        """The latest result of a node in this run (a structured output as its model)."""
        found = self._results.get(node_id)
        if found is not None:
            return found
        record = self._fields.get(f"node/{node_id}")
        if record is None or record.get("result") is None:
            return None
        result = self._results[node_id] = self._restored_result(node_id, record["result"])
        return result

    def results(self) -> dict[str, NodeResult]:
        """The latest result of every node that has one."""
        out: dict[str, NodeResult] = {}
        for node_id in self.node_ids():
            result = self.result(node_id)
            if result is not None:
                out[node_id] = result
        return out

    def failed_attempts(self, node_id: str) -> list[dict[str, Any]]:
        """The failed attempts of the node's latest execution that its retry policy tried again:
        ``{"attempt", "error", "retry_in"}`` each (saved with the run; ``orchestra sessions show``)."""
        record = self._fields.get(f"node/{node_id}") or {}
        execution = record.get("executions", 0)
        return [
            {k: v for k, v in a.items() if k != "execution"}
            for a in record.get("attempts") or []
            if a.get("execution") == execution
        ]

    def restored_output(self, node_id: str, output: Any, source: dict[str, Any] | None = None) -> Any:
        """A stored output of ``node_id`` as the model it was: an agent node's by its output type, a nested
        orchestrator's by the node ``source`` names in it. Stored by alias; by field name before aliases
        were kept (both are accepted, so older runs still resume)."""
        node = self.nodes.get(node_id)
        if node is None or output is None or isinstance(output, BaseModel):
            return output
        if node.kind == "orchestrator":
            return node.executor.restore_output(output, source)
        if node.kind == "map":
            return node.executor.restore_output(output)
        output_type = node.agent.output_type if node.kind == "agent" else None
        if output_type is None:
            return output
        return output_type.model_validate(output, by_alias=True, by_name=True)

    def output_source(self, node_id: str) -> dict[str, Any]:
        """What says that an output is ``node_id``'s (and, for a nested run, which of its nodes gave it)."""
        result = self.result(node_id)
        inner = result.output_from if result is not None else None
        return {"node": node_id, "from": inner} if inner is not None else {"node": node_id}

    def agent_fields(self, key: str) -> tuple[dict[str, Any], list[Any]]:
        """An agent's saved form (``agent/<key>`` and its messages): a node's agent, or one it used as a
        tool (``<node>/tools/<tool>``). The messages are the live list."""
        data = self._agent(key).agent_data()
        return _agent_data_fields(data), data.messages

    # -- changing -----------------------------------------------------------------------------------------

    def set(self, name: str, value: Any) -> None:
        """Set a field (it is saved with the next save)."""
        self._fields[name] = value
        self._dirty.add(name)
        if self._unset:
            self._unset.discard(name)
        if name.startswith("node/"):
            self._forget_result(name[len("node/") :])

    def remove(self, name: str) -> None:
        """Remove a field (the next save removes it from storage too)."""
        if name.startswith("node/"):
            self._forget_result(name[len("node/") :])
        self._fields.pop(name, None)
        self._dirty.discard(name)
        self._unset.add(name)

    def update_run(self, **changes: Any) -> None:
        """Change keys of the run record."""
        self.run.update(changes)
        self._dirty.add("run")

    def update_node(self, node_id: str, **changes: Any) -> None:
        """Change keys of a node's record (made if it has none); a ``result`` given here is JSON."""
        if "result" in changes:
            self._forget_result(node_id)
        name = f"node/{node_id}"
        record = self._fields.get(name)
        if record is None or name in self._shared_records:
            record = self.record(node_id)
        record.update(changes)
        self._dirty.add(name)
        if self._unset:
            self._unset.discard(name)

    def set_result(self, node_id: str, result: NodeResult, **changes: Any) -> None:
        """Record a node's latest result (and its status, with any other ``changes`` to its record). The
        result is dumped to JSON when the record is first read or saved, not here."""
        self._results[node_id] = result
        self._undumped.add(node_id)
        record = self.record(node_id)
        if changes:
            record.update(changes)
        record["status"] = result.status.value
        record["result"] = result
        name = f"node/{node_id}"
        self._dirty.add(name)
        if self._unset:
            self._unset.discard(name)

    def add_usage(self, usage: Usage) -> None:
        """Add a node's tokens to the run's."""
        # Plain arithmetic on the stored record (its keys are Usage's aliases): per node, pydantic round
        # trips cost more than the rest of the bookkeeping.
        total = self.run["usage"]
        total = {
            "inputTokens": total.get("inputTokens", 0) + usage.input_tokens,
            "outputTokens": total.get("outputTokens", 0) + usage.output_tokens,
            "totalTokens": total.get("totalTokens", 0) + usage.total_tokens,
        }
        self.update_run(usage=total)

    def append(self, name: str, item: Any) -> None:
        """Append to a log."""
        self._logs.setdefault(name, []).append(item)
        self._dirty_logs.add(name)

    def set_log(self, name: str, items: list[Any]) -> None:
        """Replace a log's items."""
        self._logs[name] = items
        self._dirty_logs.add(name)

    def mark_agent(self, key: str) -> None:
        """The agent of node ``key`` (or the tool agent ``<node>/tools/<tool>``) changed: its state belongs
        in the next save."""
        self._dirty_agents.add(key)

    def attach_tool_agent(self, caller: Agent, tool_name: str, agent: Agent) -> str | None:
        """``agent`` is used as the tool ``tool_name`` by ``caller``, one of this run's agent nodes: it is
        saved with the run like a node's agent (``agent/<node>/tools/<tool>``), and gets back what the
        loaded run saved of it the first time. Returns its key for ``mark_agent`` (None: not a node's)."""
        node_id = next(
            (i for i, node in self.nodes.items() if node.kind == "agent" and node.agent is caller), None
        )
        if node_id is None:
            return None
        key = f"{node_id}/tools/{tool_name}"
        if self._tool_agents.get(key) is not agent:
            self._tool_agents[key] = agent
            saved = self._saved_tool_agents.pop(key, None)
            if saved is not None:
                agent.load_agent_data(saved)
        return key

    def reset(self, run: dict[str, Any], **fields: Any) -> None:
        """Start a new run: the fields are ``run`` and ``fields`` only, the logs are emptied, and every agent
        node is saved with the next save (its state is the caller's to reset)."""
        self._unset.update(name for name in self._fields if name not in fields and name != "run")
        self._results.clear()
        self._undumped.clear()
        self._fields = {"run": run}
        self._dirty.add("run")
        for name, value in fields.items():
            self.set(name, value)
        for name in self._logs:
            self.set_log(name, [])
        for node_id, node in self.nodes.items():
            if node.kind == "agent":
                self.mark_agent(node_id)

    # -- saving and loading -------------------------------------------------------------------------------

    def take_changes(self, *, include_agents: bool = True) -> Changes:
        """What changed since the last call: (fields, logs, removed field names). Session managers save it.

        With ``include_agents=False`` the agents' state and the shared state are left out (a Temporal
        workflow's stand-in agents hold none; the activity that ran the node saved them).
        """
        self._dump_all()
        fields = {name: self._fields[name] for name in self._dirty if name in self._fields}
        logs = {name: self._logs[name] for name in self._dirty_logs}
        if not include_agents:
            self._dirty_agents.clear()
            self._saved_state_version = self.state.version
        if self.state.version != self._saved_state_version:
            fields["state"] = self.state.to_dict()
            self._saved_state_version = self.state.version
        for key in self._dirty_agents:
            fields[f"agent/{key}"], logs[f"agent/{key}/messages"] = self.agent_fields(key)
        unset = sorted(self._unset)
        self._dirty.clear()
        self._dirty_logs.clear()
        self._dirty_agents.clear()
        self._unset.clear()
        return fields, logs, unset

    def dump(self) -> dict[str, Any]:
        """The whole run as a plain JSON dict (what ``serialize_state`` gives); see ``load_json``.

        Binary content (an image in the task) is a ``{"__bytes_encoded__": true, "data": ...}`` object, the
        form Strands Agents uses too, and becomes ``bytes`` again in ``load_json``.
        """
        self._dump_all()
        out: dict[str, Any] = json.loads(json.dumps(encode_bytes(self._fields), default=str))
        out["state"] = self.state.to_dict()
        for name, items in self._logs.items():
            out[name] = list(items)
        agent_keys = [node_id for node_id, node in self.nodes.items() if node.kind == "agent"]
        for key in [*agent_keys, *self._tool_agents]:
            agent_fields, messages = self.agent_fields(key)
            out[f"agent/{key}"] = agent_fields
            out[f"agent/{key}/messages"] = json.loads(messages_to_json(messages))  # bytes as base64
        for key, data in self._saved_tool_agents.items():
            out[f"agent/{key}"] = _agent_data_fields(data)
            out[f"agent/{key}/messages"] = json.loads(messages_to_json(data.messages))
        return out

    def load_json(self, payload: Mapping[str, Any]) -> None:
        """Load what ``dump`` (or a session) produced; the next invocation resumes from it."""
        fields = {k: decode_bytes(v) for k, v in payload.items() if not _is_log(k, v)}
        logs = {
            k: messages_from_json(json.dumps(v)) if k.endswith("/messages") else list(v)
            for k, v in payload.items()
            if _is_log(k, v)
        }
        self.load(fields, logs)

    def load(
        self, fields: Mapping[str, Any], logs: Mapping[str, list[Any]], *, shared_records: bool = False
    ) -> None:
        """Take a persisted run document (from a session, or ``load_json``); nothing is changed by it.

        With ``shared_records`` the node records stay the caller's until this document changes one (it
        then copies that record a level deep first): a Temporal activity that runs one node of a large
        graph copies the one record it writes, not all of them."""
        if "run" not in fields:
            return
        self._fields = {k: v for k, v in fields.items() if k != "state" and not k.startswith("agent/")}
        # The agents of nodes this orchestrator does not have (a run saved by another version of the
        # graph): kept aside for a migration that renames the node.
        known = {f"agent/{n}" for n, node in self.nodes.items() if node.kind == "agent"}
        self._orphans = (
            {k: v for k, v in fields.items() if k.startswith("agent/") and k not in known},
            {
                k: list(v)
                for k, v in logs.items()
                if k.startswith("agent/") and k[: -len("/messages")] not in known
            },
        )
        self._shared_records = {k for k in self._fields if k.startswith("node/")} if shared_records else set()
        self._logs = {k: list(v) for k, v in logs.items() if not k.startswith("agent/")}
        self._logs.setdefault("execution_order", [])
        self._results.clear()
        self._undumped.clear()
        if "state" in fields:  # a document that never saved the state keeps the initial one
            self.state.replace(fields["state"] or {})
        self._saved_state_version = self.state.version
        self._restored_agents = set()
        for node_id, node in self.nodes.items():
            if node.kind != "agent" or f"agent/{node_id}" not in fields:
                continue
            self._restored_agents.add(node_id)
            node.agent.load_agent_data(_agent_data(fields, logs, node_id))
        self._tool_agents = {}
        self._saved_tool_agents = {
            name[len("agent/") :]: _agent_data(fields, logs, name[len("agent/") :])
            for name in fields
            if name.startswith("agent/") and "/tools/" in name
        }
        self._dirty.clear()
        self._dirty_logs.clear()
        self._dirty_agents.clear()
        self._unset.clear()

    def whole(self) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """A copy of the run document as saved, agents' state and the orphans of a changed graph included
        (what a migration rewrites)."""
        self._dump_all()
        fields = {**self._orphans[0], **copy.deepcopy(self._fields), "state": self.state.to_dict()}
        logs = {**self._orphans[1], **{k: list(v) for k, v in self._logs.items()}}
        for node_id, node in self.nodes.items():
            # Only the agents the saved run has: a node new in this graph has nothing saved (and a
            # migration may give it the saved agent of a renamed one).
            if node.kind == "agent" and (
                node_id in self._restored_agents or f"node/{node_id}" in self._fields
            ):
                agent_fields, messages = self.agent_fields(node_id)
                fields[f"agent/{node_id}"] = agent_fields
                logs[f"agent/{node_id}/messages"] = list(messages)
        return fields, logs

    def replace(self, fields: dict[str, Any], logs: dict[str, list[Any]]) -> None:
        """Load a rewritten document (a migration's); everything in it is saved with the next save (the
        journal writes only what differs from what it holds), and what it lacks is removed."""
        before = set(self._fields) | set(self._orphans[0])
        orphan_logs = set(self._orphans[1])
        self.load(fields, logs)
        self._dirty.update(self._fields)
        self._dirty_logs.update(self._logs)
        self._dirty_agents.update(n for n, node in self.nodes.items() if node.kind == "agent")
        self._unset.update(name for name in before if name not in fields)
        for name in orphan_logs:
            if name not in logs:  # a renamed or removed agent's conversation: emptied in storage too
                self.set_log(name, [])
        self._saved_state_version = -1

    # -- within the package ---------------------------------------------------------------------------------

    def record(self, node_id: str) -> dict[str, Any]:
        """A node's record to change in place (made if it has none: not saved until it is changed). For
        the schedulers, which read and change records many times per completion."""
        name = f"node/{node_id}"
        record = self._fields.get(name)
        if record is None:
            record = {"status": Status.PENDING.value, "executions": 0, "result": None}
            self._fields[name] = record
        elif name in self._shared_records:  # the loader's: copied before anything here can change it
            self._shared_records.discard(name)
            record = self._fields[name] = dict(record)
            if "incoming" in record:  # the one part changed in place (see GraphScheduler.apply_edges)
                record["incoming"] = dict(record["incoming"])
        return record

    def peek(self, node_id: str) -> dict[str, Any] | None:
        """A node's record as it is (its result maybe not dumped), without making one."""
        record: dict[str, Any] | None = self._fields.get(f"node/{node_id}")
        return record

    def records(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every node's record, in the orchestrator's node order (results maybe not dumped)."""
        fields = self._fields
        for node_id in self.nodes:
            record = fields.get(f"node/{node_id}")
            if record is not None:
                yield node_id, record

    def _agent(self, key: str) -> Agent:
        tool_agent = self._tool_agents.get(key)
        return tool_agent if tool_agent is not None else self.nodes[key].agent

    def _restored_result(self, node_id: str, data: dict[str, Any]) -> NodeResult:
        result = NodeResult.model_validate(data)
        result.output = self.restored_output(node_id, result.output, result.output_from)
        return result

    def _forget_result(self, node_id: str) -> None:
        self._results.pop(node_id, None)
        self._undumped.discard(node_id)

    def _dump(self, node_id: str) -> None:
        if node_id in self._undumped:
            self._undumped.discard(node_id)
            self.record(node_id)["result"] = self._results[node_id].model_dump(mode="json")

    def _dump_all(self) -> None:
        for node_id in list(self._undumped):
            self._dump(node_id)


def _is_log(name: str, value: Any) -> bool:
    return isinstance(value, list) and (name.endswith("/messages") or name in _LOG_NAMES)


def _agent_data(fields: Mapping[str, Any], logs: Mapping[str, list[Any]], key: str) -> AgentData:
    """An agent's saved data from a run document (``agent/<key>`` and its messages log)."""
    agent_fields = fields[f"agent/{key}"]
    return AgentData(
        messages=list(logs.get(f"agent/{key}/messages", [])),
        state=agent_fields.get("state") or {},
        conversation_manager_state=agent_fields.get("conversation_manager_state") or {},
        system_prompt=agent_fields.get("system_prompt"),
        interrupt_state=agent_fields.get("interrupt_state"),
    )


def _agent_data_fields(data: AgentData) -> dict[str, Any]:
    return {
        "state": data.state,
        "conversation_manager_state": data.conversation_manager_state,
        "system_prompt": data.system_prompt,
        "interrupt_state": data.interrupt_state,
    }
