"""The run document: a Graph's or Swarm's run as named JSON fields and logs, the unit sessions persist
incrementally (see ``orchestra.session``)::

    run                   {"status", "kind", "topology", "version", "execution_count", "usage", "spent", ...}
    topology              the nodes, edges, joins and conditions the run started on (see migrations.py)
    task                  the original task
    state                 the orchestrator's shared state (JSON key-value)
    node/<id>             {"status", "executions", "result", ...} of one node
    agent/<id>            an agent node's state, conversation-manager state, system prompt, interrupts
    agent/<id>/messages   an agent node's conversation (a log)
    execution_order       node ids in the order their executions finished (a log)
    map/<id>...           a map node's items and each item's result (see map.py)

Each change marks its field dirty; a session save takes only the dirty fields, so a per-node save costs
the same whether 1 or 200 nodes have already completed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from orchestra._json import decode_bytes, encode_bytes
from orchestra.agent import AgentData
from orchestra.agent.state import JSONState
from orchestra.messages import messages_from_json, messages_to_json
from orchestra.multiagent.nodes import Node
from orchestra.multiagent.results import NodeResult, Status

__all__ = ["RunDocument"]


class RunDocument:
    """The fields and logs of a run, what changed in them since the last save, and how its agents' state
    enters and leaves them. ``MultiAgentBase`` is one; its ``_blank_run`` starts a blank document."""

    kind: str
    nodes: dict[str, Node]
    state: JSONState

    def _blank_document(self, run_record: dict[str, Any]) -> None:
        self._fields: dict[str, Any] = {"run": run_record}
        self._logs: dict[str, list[Any]] = {"execution_order": []}
        self._dirty: set[str] = set()
        self._dirty_logs: set[str] = set()
        self._dirty_agents: set[str] = set()
        # Agents used as tools by agent nodes ("<node>/tools/<tool>" -> agent), saved like node agents;
        # and what a loaded run holds for those not attached yet in this process.
        self._tool_agents: dict[str, Any] = {}
        self._saved_tool_agents: dict[str, AgentData] = {}
        self._unset: set[str] = set()
        self._shared_records: set[str] = set()  # node records still the caller's (see load_document)
        self._saved_state_version = -1
        self._orphans: tuple[dict[str, Any], dict[str, list[Any]]] = ({}, {})  # see load_document
        self._restored_agents: set[str] = set()  # the agent nodes load_document gave saved state

    @property
    def run(self) -> dict[str, Any]:
        return self._fields["run"]  # type: ignore[no-any-return]

    @property
    def status(self) -> Status:
        """The status of the current (or last) run."""
        return Status(self.run["status"])

    def _set(self, name: str, value: Any) -> None:
        self._fields[name] = value
        self._dirty.add(name)
        self._unset.discard(name)

    def _update_run(self, **changes: Any) -> None:
        self.run.update(changes)
        self._dirty.add("run")

    def _node_record(self, node_id: str) -> dict[str, Any]:
        name = f"node/{node_id}"
        record = self._fields.get(name)
        if record is None:
            record = {"status": Status.PENDING.value, "executions": 0, "result": None}
            self._fields[name] = record
        elif name in self._shared_records:  # the caller's: copied before anything here can change it
            self._shared_records.discard(name)
            record = self._fields[name] = dict(record)
            if "incoming" in record:  # the one part changed in place (see Graph._apply_edges)
                record["incoming"] = dict(record["incoming"])
        return record

    def _update_node(self, node_id: str, **changes: Any) -> None:
        self._node_record(node_id).update(changes)
        self._dirty.add(f"node/{node_id}")
        self._unset.discard(f"node/{node_id}")

    def _continue_execution(self, node_id: str) -> None:
        """A node that was running (or stopped for an interrupt) goes on: its execution is not a new one."""
        record = self._node_record(node_id)
        if record["status"] == Status.EXECUTING.value or (
            record["status"] == Status.INTERRUPTED.value and record.get("started", True)
        ):
            self._update_node(
                node_id, status=Status.PENDING.value, executions=max(0, record["executions"] - 1)
            )
            self._update_run(execution_count=max(0, self.run["execution_count"] - 1))

    def _append_log(self, name: str, item: Any) -> None:
        self._logs.setdefault(name, []).append(item)
        self._dirty_logs.add(name)

    def _mark_agent(self, node_id: str) -> None:
        """The agent of ``node_id`` finished: its state belongs in the next save."""
        self._dirty_agents.add(node_id)

    def node_result(self, node_id: str) -> NodeResult | None:
        """The latest result of a node in this run."""
        record = self._fields.get(f"node/{node_id}")
        if record is None or record.get("result") is None:
            return None
        return self._restored_result(node_id, record["result"])

    def _restored_result(self, node_id: str, data: dict[str, Any]) -> NodeResult:
        """A node result from the run document: a structured output (stored as JSON) is its model again."""
        result = NodeResult.model_validate(data)
        result.output = self._restored_output(node_id, result.output, result.output_from)
        return result

    def _restored_output(self, node_id: str, output: Any, source: dict[str, Any] | None = None) -> Any:
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

    def restore_output(self, output: Any, source: dict[str, Any] | None) -> Any:
        """An output this orchestrator gave, read back from JSON, as the models it held; ``source`` is what
        ``output_source`` said when the run gave it (None: the output stays as it is)."""
        if source is None or output is None:
            return output
        each = source.get("each")
        if each is not None:
            if not isinstance(output, dict):
                return output
            return {key: self.restore_output(value, each.get(key)) for key, value in output.items()}
        return self._restored_output(source["node"], output, source.get("from"))

    def _node_source(self, node_id: str) -> dict[str, Any]:
        """``output_source`` of an output that is ``node_id``'s (and, for a nested run, its own source)."""
        record = self._fields.get(f"node/{node_id}") or {}
        inner = (record.get("result") or {}).get("output_from")
        return {"node": node_id, "from": inner} if inner is not None else {"node": node_id}

    def attach_tool_agent(self, caller: Any, tool_name: str, agent: Any) -> str | None:
        """``agent`` is used as the tool ``tool_name`` by ``caller``, one of this run's agent nodes: it is
        saved with the run like a node's agent (``agent/<node>/tools/<tool>``), and gets back what the
        loaded run saved of it the first time. Returns its key for ``_mark_agent`` (None: not a node's)."""
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

    def _agent_of(self, key: str) -> Any:
        tool_agent = self._tool_agents.get(key)
        return tool_agent if tool_agent is not None else self.nodes[key].agent

    def _agent_fields(self, node_id: str) -> tuple[dict[str, Any], list[Any]]:
        data = self._agent_of(node_id).agent_data()
        fields = {
            "state": data.state,
            "conversation_manager_state": data.conversation_manager_state,
            "system_prompt": data.system_prompt,
            "interrupt_state": data.interrupt_state,
        }
        return fields, data.messages

    def take_changes(
        self, *, include_agents: bool = True
    ) -> tuple[dict[str, Any], dict[str, list[Any]], list[str]]:
        """What changed since the last call: (fields, logs, removed field names). Used by session managers.

        With ``include_agents=False`` the agents' state and the shared state are left out (a Temporal
        workflow's stand-in agents hold none; the activity that ran the node saved them).
        """
        fields = {name: self._fields[name] for name in self._dirty if name in self._fields}
        logs = {name: self._logs[name] for name in self._dirty_logs}
        if not include_agents:
            self._dirty_agents.clear()
            self._saved_state_version = self.state.version
        if self.state.version != self._saved_state_version:
            fields["state"] = self.state.to_dict()
            self._saved_state_version = self.state.version
        for node_id in self._dirty_agents:
            agent_fields, messages = self._agent_fields(node_id)
            fields[f"agent/{node_id}"] = agent_fields
            logs[f"agent/{node_id}/messages"] = messages
        unset = sorted(self._unset)
        self._dirty.clear()
        self._dirty_logs.clear()
        self._dirty_agents.clear()
        self._unset.clear()
        return fields, logs, unset

    def serialize_state(self) -> dict[str, Any]:
        """The whole run as a plain JSON dict (what a session persists); see ``deserialize_state``.

        Binary content (an image in the task) is a ``{"__bytes_encoded__": true, "data": ...}`` object, the
        form Strands Agents uses too, and becomes ``bytes`` again in ``deserialize_state``.
        """
        out: dict[str, Any] = json.loads(json.dumps(encode_bytes(self._fields), default=str))
        out["state"] = self.state.to_dict()
        for name, items in self._logs.items():
            out[name] = list(items)
        agent_keys = [node_id for node_id, node in self.nodes.items() if node.kind == "agent"]
        for key in [*agent_keys, *self._tool_agents]:
            agent_fields, messages = self._agent_fields(key)
            out[f"agent/{key}"] = agent_fields
            out[f"agent/{key}/messages"] = json.loads(messages_to_json(messages))  # bytes as base64
        for key, data in self._saved_tool_agents.items():
            out[f"agent/{key}"] = _agent_data_fields(data)
            out[f"agent/{key}/messages"] = json.loads(messages_to_json(data.messages))
        return out

    def deserialize_state(self, payload: Mapping[str, Any]) -> None:
        """Restore what ``serialize_state`` (or a session) produced; the next invocation resumes from it."""
        fields = {k: decode_bytes(v) for k, v in payload.items() if not self._is_log(k, v)}
        logs = {
            k: messages_from_json(json.dumps(v)) if k.endswith("/messages") else list(v)
            for k, v in payload.items()
            if self._is_log(k, v)
        }
        self.load_document(fields, logs)

    @staticmethod
    def _is_log(name: str, value: Any) -> bool:
        return isinstance(value, list) and (name.endswith("/messages") or name in _LOG_NAMES)

    def load_document(
        self, fields: Mapping[str, Any], logs: Mapping[str, list[Any]], *, shared_records: bool = False
    ) -> None:
        """Take a persisted run document (from a session or ``deserialize_state``).

        With ``shared_records`` the node records stay the caller's until this orchestrator changes one
        (it then copies that record a level deep first): a Temporal activity that runs one node of a
        large graph copies the one record it writes, not all of them."""
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

    def _attempts(self, node_id: str) -> list[dict[str, Any]]:
        """The failed attempts recorded for the node's current execution (a resume goes on from them)."""
        record = self._node_record(node_id)
        if not record.get("attempts"):
            return []
        execution = record["executions"]
        return [a for a in record.get("attempts") or [] if a.get("execution") == execution]

    def _record_attempt(self, node_id: str, attempt: int, error: str, wait: float) -> None:
        """Record a failed attempt that will be retried after ``wait`` seconds."""
        entry = {"execution": self._node_record(node_id)["executions"], "attempt": attempt, "error": error}
        self._update_node(node_id, attempts=[*self._attempts(node_id), {**entry, "retry_in": round(wait, 3)}])


_LOG_NAMES = ("execution_order", "node_history", "handoffs")


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
