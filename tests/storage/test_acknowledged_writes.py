"""Acknowledged means committed, checked from outside: writer processes hand each key to a reader
process the moment its ``write()`` returns, and the reader, on a connection of its own, must find it.

Each writer process runs many concurrent writes, so that group commit puts them in shared batches (a
follower's write is answered when its batch's COMMIT is over, never while the transaction still runs).
The keys travel through one pipe (a line per key: writes of a line are atomic), so the reader checks a
key within moments of its acknowledgement. ``ORCHESTRA_STRESS=1`` writes ten times as many keys."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import anyio
import pytest

from orchestra.storage import storage_from_uri

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"
PROCESSES, TASKS, WRITES = (3, 20, 50) if STRESS else (3, 20, 10)

WRITER = textwrap.dedent(
    """
    import os, sys
    import anyio
    from orchestra.storage import ABSENT, storage_from_uri

    uri, name, fd, tasks, writes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    storage = storage_from_uri(uri)

    async def writer(task):
        for i in range(writes):
            key = f"acked/{name}/t{task:02d}/k{i:04d}"
            await storage.write(key, key.encode(), expect=ABSENT)
            os.write(fd, key.encode() + b"\\n")  # acknowledged: hand it to the reader at once

    async def main():
        async with anyio.create_task_group() as group:
            for task in range(tasks):
                group.start_soon(writer, task)

    anyio.run(main)
    """
)

READER = textwrap.dedent(
    """
    import sys
    import anyio
    from orchestra.storage import storage_from_uri

    storage = storage_from_uri(sys.argv[1])

    async def main():
        checked = 0
        for line in sys.stdin:
            key = line.strip()
            found = await storage.read(key)
            if found is None or found[0] != key.encode():
                print("missing", key, flush=True)
            checked += 1
        print("checked", checked, flush=True)

    anyio.run(main)
    """
)


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:{tmp_path}/acked.db"
    return request.getfixturevalue("postgres_uri")


def test_a_write_is_visible_to_another_process_once_acknowledged(database):
    anyio.run(storage_from_uri(database).write, "warm", b"the table exists")
    keys_out, keys_in = os.pipe()
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, database], stdin=keys_out, stdout=subprocess.PIPE, env=ENV, text=True
    )
    os.close(keys_out)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, database, f"w{n}", str(keys_in), str(TASKS), str(WRITES)],
            pass_fds=[keys_in],
            env=ENV,
        )
        for n in range(PROCESSES)
    ]
    os.close(keys_in)
    for writer in writers:
        assert writer.wait(timeout=300) == 0
    out, _ = reader.communicate(timeout=300)
    lines = out.splitlines()
    missing = [line for line in lines if line.startswith("missing")]
    assert lines[-1] == f"checked {PROCESSES * TASKS * WRITES}"
    assert missing == [], f"{len(missing)} acknowledged writes were not visible to another process"
