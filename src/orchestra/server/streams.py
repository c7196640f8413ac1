"""Server-sent events: each event of a run's stream (``RunService.events``, ``RunService.follow``) as
``id:``, ``event:`` and ``data:`` lines, the id being the event's id in the run's log (a client that
drops its connection sends the last one back as ``Last-Event-ID``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from orchestra._json import dumps
from orchestra.hosting import StreamEvent

__all__ = ["sse", "sse_stream"]


def sse(event: StreamEvent) -> bytes:
    """An event as server-sent-event text (with its ``id:`` when it has one)."""
    event_id, name, data = event
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {dumps(data, lenient=True)}\n\n".encode()


async def sse_stream(events: AsyncIterator[StreamEvent]) -> AsyncIterator[bytes]:
    """A stream's events as server-sent-event text."""
    async for event in events:
        yield sse(event)
