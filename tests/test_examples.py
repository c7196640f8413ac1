import runpy
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_quickstart_runs(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["quickstart.py"])
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "agent said: Recorded that you viewed your profile." in out
    assert "actions taken: 2, last: view profile" in out
    assert "messages in the history: 8" in out
