"""What ``import orchestra`` brings in: not the YAML spec layer (its pydantic models are a third of the
import), which ``orchestra.load`` imports when first used. ``benchmarks/bench_import.py`` measures it."""

import subprocess
import sys


def test_import_orchestra_leaves_the_spec_layer_until_load_is_used():
    code = (
        "import sys, orchestra\n"
        "print('orchestra.spec' in sys.modules)\n"
        "from orchestra import load\n"
        "import orchestra.spec\n"
        "print(load is orchestra.spec.load, orchestra.load is load)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True", "True"]
