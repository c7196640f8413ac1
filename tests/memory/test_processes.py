"""The memory store across real processes, on real storage (local files, SQLite, PostgreSQL).

- A writer process puts a burst of items from many tasks, handing each key to this test the moment its
  ``put`` returns, and is SIGKILLed mid-burst: every acknowledged item must be there, whole, and every
  item that is there must be whole (no half record).
- Two processes race to write one key with ``expect=``: exactly one wins each round, the other gets a
  conflict, and the stored value is the winner's.
``ORCHESTRA_STRESS=1`` runs more rounds and a longer burst.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from orchestra.memory import MemoryStore
from orchestra.storage import storage_from_uri

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"
ACKED_BEFORE_KILL, ROUNDS = (400, 30) if STRESS else (60, 5)
KINDS = ["local", "sqlite", "postgres"]

WRITER = textwrap.dedent(
    """
    import os, sys
    import anyio
    from orchestra.memory import MemoryStore
    from orchestra.storage import storage_from_uri
    from orchestra.testing import HashEmbedder

    store = MemoryStore(storage_from_uri(sys.argv[1]), embedder=HashEmbedder())

    async def writer(task):
        for i in range(100000):
            key = f"t{task:02d}-{i:05d}"
            await store.put_async(("burst", f"t{task % 3}"), key, {"text": f"note {key}", "pad": key * 40})
            os.write(1, key.encode() + b"\\n")  # acknowledged: tell the test at once

    async def main():
        async with anyio.create_task_group() as group:
            for task in range(16):
                group.start_soon(writer, task)

    anyio.run(main)
    """
)

RACER = textwrap.dedent(
    """
    import sys
    from orchestra.errors import StorageConflictError
    from orchestra.memory import MemoryStore
    from orchestra.storage import ABSENT, storage_from_uri

    store = MemoryStore(storage_from_uri(sys.argv[1]))
    name = sys.argv[2]
    print("ready", flush=True)
    for line in sys.stdin:
        round_, expect = line.split()
        try:
            store.put(("race",), f"r{round_}", {"by": name}, expect=ABSENT if expect == "ABSENT" else expect)
            print("won", flush=True)
        except StorageConflictError:
            print("conflict", flush=True)
    """
)


def uri_for(kind: str, tmp_path, request) -> str:
    if kind == "local":
        return f"file:{tmp_path / 'files'}"
    if kind == "sqlite":
        return f"sqlite:{tmp_path / 'memory.db'}"
    return request.getfixturevalue("postgres_uri")


def expected_value(key: str) -> dict:
    return {"text": f"note {key}", "pad": key * 40}


@pytest.mark.parametrize("kind", KINDS)
def test_sigkill_mid_burst_loses_no_acknowledged_item_and_leaves_no_half_one(kind, tmp_path, request) -> None:
    uri = uri_for(kind, tmp_path, request)
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, uri], stdout=subprocess.PIPE, env=ENV, text=True, bufsize=1
    )
    acked = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            acked.append(line.strip())
            if len(acked) >= ACKED_BEFORE_KILL:
                break
        os.kill(child.pid, signal.SIGKILL)
        # Lines already in the pipe were acknowledged before the kill too.
        acked.extend(line.strip() for line in child.stdout if line.strip())
    finally:
        child.kill()
        child.wait()
        child.stdout.close()  # type: ignore[union-attr]
    assert len(acked) >= ACKED_BEFORE_KILL, "the writer died before the kill"

    store = MemoryStore(storage_from_uri(uri))
    found = {item.key: item for item in store.search(("burst",), limit=1_000_000)}
    missing = [key for key in acked if key not in found]
    assert not missing, f"{kind}: acknowledged items lost after SIGKILL: {missing[:5]}"
    for key, item in found.items():  # every record decoded; each is whole
        assert item.value == expected_value(key), f"{kind}: a half item under {key!r}"
        assert item.namespace == ("burst", f"t{int(key[1:3]) % 3}")
    assert len(found) >= len(acked)


@pytest.mark.parametrize("kind", KINDS)
def test_two_processes_one_key_one_wins_the_other_conflicts(kind, tmp_path, request) -> None:
    uri = uri_for(kind, tmp_path, request)
    store = MemoryStore(storage_from_uri(uri))
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, uri, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=ENV,
            text=True,
            bufsize=1,
        )
        for name in ("a", "b")
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        for round_ in range(ROUNDS):
            # Odd rounds create (ABSENT), even ones update the version both were given.
            expect = "ABSENT" if round_ % 2 else store.put(("race",), f"r{round_}", {"by": "setup"})
            for racer in racers:
                assert racer.stdin is not None
                racer.stdin.write(f"{round_} {expect}\n")
                racer.stdin.flush()
            answers = [racer.stdout.readline().strip() for racer in racers]  # type: ignore[union-attr]
            assert sorted(answers) == ["conflict", "won"], f"{kind} round {round_}: {answers}"
            winner = "ab"[answers.index("won")]
            item = store.get(("race",), f"r{round_}")
            assert item is not None
            assert item.value == {"by": winner}
    finally:
        for racer in racers:
            racer.kill()
            racer.wait()
            racer.stdin.close()  # type: ignore[union-attr]
            racer.stdout.close()  # type: ignore[union-attr]
