"""Which servers on one storage are alive: each says so every few seconds, from a thread of its own.

A run record names the server that runs it. When another server reads a record still ``executing``, it
asks whether that server is alive: one that has not said so for ``server_gone_after_s`` is gone, and its
run is settled from the session (``orchestra.hosting.session_outcome``). The heartbeat is written from a thread with
its own event loop, so a server whose event loop is busy for a while is not taken for gone; only a
stopped process is. A wrong guess costs no turn: a settled run that is taken over runs under the
session's conditional writes, which let only one of two writers store a turn.
"""

from __future__ import annotations

import json
import threading
import time

import anyio
import anyio.to_thread

from orchestra._logging import get_logger
from orchestra.errors import StorageError
from orchestra.session import uuid7
from orchestra.storage import Storage

__all__ = ["Liveness"]

log = get_logger("orchestra.server")


class Liveness:
    """This server's heartbeat, and the question whether another one is alive."""

    def __init__(
        self, storage: Storage, *, every_s: float, gone_after_s: float, first_beat_s: float = 10.0
    ) -> None:
        self.storage = storage
        self.server_id = str(uuid7())
        self.every_s = every_s
        self.gone_after_s = gone_after_s
        self.first_beat_s = first_beat_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _key(self, server_id: str) -> str:
        return f"servers/{server_id}.json"

    async def start(self) -> None:
        """Say this server is alive, and go on saying it (until ``stop``). Returns once the first beat was
        written, so a run this server takes is not seen by another server before its server is; or, when
        that write fails or takes over ``first_beat_s`` (a storage that hangs), at that point, logged
        (``heartbeat_failed`` / ``heartbeat_late``): a server then starts all the same, and its next beats
        say it."""
        if self._thread is not None:
            return
        self._stop.clear()
        tried = threading.Event()
        # The thread is set before the wait, so a second start meanwhile starts no second heartbeat.
        self._thread = threading.Thread(
            target=anyio.run, args=(self._beat, tried), name="orchestra-heartbeat", daemon=True
        )
        self._thread.start()
        if not await anyio.to_thread.run_sync(tried.wait, self.first_beat_s):
            log.warning("heartbeat_late", server_id=self.server_id, waited_s=self.first_beat_s)

    async def _say_alive(self) -> None:
        try:
            await self.storage.write(
                self._key(self.server_id), json.dumps({"alive_at": time.time()}).encode()
            )
        except StorageError as exc:  # the next beat tries again; runs are unaffected
            log.warning("heartbeat_failed", server_id=self.server_id, error=str(exc))

    async def _beat(self, tried: threading.Event) -> None:
        while True:
            await self._say_alive()
            tried.set()
            if await anyio.to_thread.run_sync(self._stop.wait, self.every_s):
                return

    async def stop(self) -> None:
        """Stop the heartbeat and say this server is gone (it runs nothing any more)."""
        self._stop.set()
        if self._thread is not None:
            await anyio.to_thread.run_sync(self._thread.join)
            self._thread = None
        try:
            await self.storage.delete(self._key(self.server_id))
        except StorageError as exc:
            log.warning("heartbeat_not_removed", server_id=self.server_id, error=str(exc))

    async def is_alive(self, server_id: str | None) -> bool:
        """Whether ``server_id`` said it was alive within ``gone_after_s`` (this server always is)."""
        if server_id == self.server_id:
            return True
        if server_id is None:
            return False
        found = await self.storage.read(self._key(server_id))
        if found is None:
            return False
        try:
            alive_at = float(json.loads(found[0])["alive_at"])
        except (ValueError, KeyError, TypeError):
            return False
        return time.time() - alive_at < self.gone_after_s
