"""What importing orchestra costs a fresh process: ``import orchestra`` and ``import orchestra.cli``.

Each case runs ``--rounds`` times in a new interpreter, interleaved with the floor (``python -c pass``:
the interpreter alone), and prints one JSON line per case: the median wall time, the floor's median
measured in the same run, the time over the floor, the ratio, and the peak RSS (Linux: /proc).

    python benchmarks/bench_import.py --rounds 15
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

_CASES = {
    "floor": "pass",
    "import orchestra": "import orchestra",
    "import orchestra.cli": "import orchestra.cli",
}
_PEAK = (
    "\nwith open('/proc/self/status') as s:"
    "\n    print(next(int(l.split()[1]) for l in s if l.startswith('VmHWM')) / 1024)"
)


def _once(code: str) -> tuple[float, float]:
    started = time.perf_counter()
    output = subprocess.run(
        [sys.executable, "-c", code + _PEAK], check=True, capture_output=True, text=True
    ).stdout
    return time.perf_counter() - started, float(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    rounds = parser.parse_args().rounds
    times: dict[str, list[float]] = {name: [] for name in _CASES}
    peaks: dict[str, list[float]] = {name: [] for name in _CASES}
    for _ in range(rounds):  # interleaved, so that a busy moment of the machine hits every case alike
        for name, code in _CASES.items():
            seconds, peak = _once(code)
            times[name].append(seconds)
            peaks[name].append(peak)
    floor = statistics.median(times["floor"])
    for name in _CASES:
        median = statistics.median(times[name])
        print(
            json.dumps(
                {
                    "case": name,
                    "rounds": rounds,
                    "median_s": round(median, 4),
                    "floor_s": round(floor, 4),
                    "over_floor_s": round(median - floor, 4),
                    "ratio": round(median / floor, 2),
                    "peak_rss_mb": round(statistics.median(peaks[name]), 1),
                }
            )
        )


if __name__ == "__main__":
    main()
