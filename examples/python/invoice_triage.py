"""Structured output: an extractor returns a validated Invoice, and the graph routes on its fields
(Python version of examples/graphs/invoice_triage.yaml). Run: python examples/python/invoice_triage.py"""

from __future__ import annotations

from pydantic import BaseModel, Field

from orchestra import Agent, ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.multiagent import GraphBuilder, GraphState


class Invoice(BaseModel):
    """An invoice read from a document."""

    customer: str
    total: float = Field(description="The amount due, in euros.")
    overdue: bool = False


def large(state: GraphState) -> bool:
    return state.output("extract").total > 1000


def small(state: GraphState) -> bool:
    return not large(state)


def build() -> object:
    extract = Agent(
        name="extract",
        system_prompt="Read the invoice you are given.",
        # A real model fills the Invoice tool's input; this stand-in first gets a field wrong, is told which
        # one, and corrects it.
        model=ScriptedModel(
            [
                ToolCall("Invoice", {"customer": "ACME", "total": "about 2k"}),
                ToolCall("Invoice", {"customer": "ACME", "total": 2150.0, "overdue": True}),
            ],
            follow_history=True,
        ),
        output_type=Invoice,
    )
    approve = Agent(
        name="approve", model=ScriptedModel(["Sent to a manager for approval."], follow_history=True)
    )
    pay = Agent(name="pay", model=ScriptedModel(["Paid."], follow_history=True))
    builder = GraphBuilder().set_graph_id("invoice_triage")
    builder.add_node(extract, "extract")
    builder.add_node(approve, "approve")
    builder.add_node(pay, "pay")
    builder.add_edge("extract", "approve", condition=large)
    builder.add_edge("extract", "pay", condition=small)
    return builder.build()


if __name__ == "__main__":
    result = build()("Invoice 2026-114 from ACME: 2,150.00 EUR, due 2026-11-01.")  # type: ignore[operator]
    invoice = result.results["extract"].output
    print(result.status.value, f"{invoice.customer} {invoice.total} overdue={invoice.overdue}", result.output)
