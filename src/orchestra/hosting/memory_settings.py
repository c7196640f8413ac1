"""The server config's ``memory:`` section: how each workspace's memory store embeds its items."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MemorySettings"]


class MemorySettings(BaseModel):
    """``memory:`` in the server config. Without an embedder, search (and the agents' recall) gives the
    newest items first; with one, the most similar to the query."""

    model_config = ConfigDict(extra="forbid")

    embedder: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="package.module:name of an Embedder, or of a function that returns one.",
    )
    embed_fields: list[str] = Field(default_factory=lambda: ["text"], min_length=1)
