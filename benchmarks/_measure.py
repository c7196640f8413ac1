"""What the benchmarks share: running a case in a fresh Python process, and the fsync floor.

``in_fresh_process`` runs one case so that its peak RSS is its own. A case is a coroutine function
``case(size) -> dict`` in a benchmark module. The child imports orchestra first and records its peak RSS
then (the baseline every case pays: the interpreter and the imports), runs the case, and prints the
case's dict with ``peak_rss_mb`` and ``rss_over_imports_mb`` added (Linux: /proc).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_CHILD = """
import json, sys
# Linux keeps a process's peak RSS across fork and exec (so the child would start at the parent's peak):
# reset it, then read it from /proc (VmHWM).
with open("/proc/self/clear_refs", "w") as reset:
    reset.write("5")
def peak_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024
import anyio
import orchestra, orchestra.multiagent, orchestra.session, orchestra.storage
sys.path.insert(0, {folder!r})
module = __import__({module!r})
baseline = peak_mb()
figures = anyio.run(getattr(module, {case!r}), {size!r})
figures["peak_rss_mb"] = round(peak_mb(), 1)
figures["rss_over_imports_mb"] = round(peak_mb() - baseline, 1)
print(json.dumps(figures))
"""


def in_fresh_process(module_file: str, case: str, size: int) -> dict[str, Any]:
    """``case(size)`` from the module at ``module_file``, run in a new interpreter."""
    path = Path(module_file).resolve()
    code = _CHILD.format(folder=str(path.parent), module=path.stem, case=case, size=size)
    output = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def growth(
    small: dict[str, Any], large: dict[str, Any], size_key: str, value_key: str, min_base: float = 0.0
) -> float | None:
    """How ``value_key`` grew per unit of size from ``small`` to ``large`` (1.0: linear, below: better).

    None when the small case's value is under ``min_base`` (a small case's memory can fit in what the
    imports already reserved: a figure under 1 MB is noise, not a base to divide by).
    """
    if small[value_key] <= min_base:
        return None
    size_ratio = large[size_key] / small[size_key]
    return round((large[value_key] / small[value_key]) / size_ratio, 3)


def fsynced_appends(count: int, size: int) -> float:
    """The floor for durable saves: seconds for ``count`` appends of ``size`` bytes to one file, each
    fdatasync'd (no rename, no folder sync)."""
    with tempfile.TemporaryDirectory() as root:
        fd = os.open(os.path.join(root, "journal.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            record = b"x" * size
            started = time.perf_counter()
            for _ in range(count):
                os.write(fd, record)
                os.fdatasync(fd)
            return time.perf_counter() - started
        finally:
            os.close(fd)
