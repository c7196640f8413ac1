"""Run one benchmark case in a fresh Python process, so that its peak RSS is its own.

A case is a coroutine function ``case(size) -> dict`` in a benchmark module. The child imports orchestra
first and records its peak RSS then (the baseline every case pays: the interpreter and the imports),
runs the case, and prints the case's dict with ``peak_rss_mb`` and ``rss_over_imports_mb`` added.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

_CHILD = """
import json, resource, sys
import anyio
import orchestra, orchestra.multiagent, orchestra.session, orchestra.storage
sys.path.insert(0, {folder!r})
module = __import__({module!r})
def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
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


def growth(small: dict[str, Any], large: dict[str, Any], size_key: str, value_key: str) -> float:
    """How ``value_key`` grew per unit of size from ``small`` to ``large`` (1.0: linear, below: better)."""
    size_ratio = large[size_key] / small[size_key]
    return round((large[value_key] / small[value_key]) / size_ratio, 3)
