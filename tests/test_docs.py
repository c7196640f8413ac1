"""README.md and docs/ run as pasted: every ``python`` and ``bash`` block runs, in order, in a fresh folder
that holds a copy of examples/ (sybil finds the blocks; the blocks of one page share that folder and,
for Python, one namespace), and then all of them again in the same folder (see ``passes``). A block
that cannot run here (a real model, a cluster, a long-running server, a Ctrl-C) is marked just above it
with ``<!-- illustrative: next "why" -->``; a hidden setup step is an
``<!-- invisible-code-block: bash ... -->``.

Shell blocks: each command (``\\`` continues a line) runs with bash in that folder, with this interpreter's
``bin/`` first on PATH; it must exit 0, or the code its trailing ``# exit N`` comment says (on the second
pass, the code its comment's ``exit N when run again`` says: a refusal that what the first pass made
causes). A ``pip install`` line is checked, not run: it installs from the checkout (``-e .``, with extras
that pyproject.toml defines) or names the distribution, never ``orchestra`` (an unrelated project on
PyPI).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from unittest import SkipTest

import pytest
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DISTRIBUTION = PYPROJECT["project"]["name"]
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
FENCE = re.compile(r"^```(\S*)", re.MULTILINE)
CODE_LANGUAGES = {"python", "bash"}  # what runs; other fences are data (yaml, json, text, mermaid)
EXIT = re.compile(r"#\s*exit (\d+)\b")
AGAIN = re.compile(r"#.*\bexit (\d+) when run again\b")  # a refusal the second paste meets (it is there)
PASS = "__docs_pass__"  # the page's namespace says which time its blocks run


class IllustrativeParser(SkipParser):
    """``<!-- illustrative: next "why" -->``: the next block is shown, not run, for the reason given."""

    directive = "illustrative"


def check_pip_install(command: str) -> None:
    words = shlex.split(command)
    targets = [w for w in words[2:] if not w.startswith("-")]
    assert targets, f"{command!r} installs nothing"
    for target in targets:
        name, _, extras = target.partition("[")
        assert name in (".", DISTRIBUTION) or name.endswith(".whl"), (
            f"{command!r}: install from the checkout ('-e .') or name {DISTRIBUTION}, not {name!r}"
        )
        for extra in filter(None, extras.rstrip("]").split(",")):
            assert extra in EXTRAS, f"{command!r}: pyproject.toml has no extra {extra!r}"


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comment-only and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def run_shell(example: Example) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ORCHESTRA_MODEL", None)
    for command in commands(example.parsed):
        if command.startswith("pip install"):
            check_pip_install(command.split("#")[0].split("&&")[0].strip())
            continue
        expected = int(match.group(1)) if (match := EXIT.search(command)) else 0
        if example.namespace.get(PASS, 1) > 1 and (again := AGAIN.search(command)):
            expected = int(again.group(1))
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )
        assert done.returncode == expected, (
            f"{example.path}:{example.line}: {command!r} exited {done.returncode} (expected {expected})\n"
            f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
        )


SYBIL = Sybil(
    parsers=[
        PythonCodeBlockParser(),
        CodeBlockParser(language="bash", evaluator=run_shell),
        IllustrativeParser(),
    ]
)


SLOW = {"README.md", "docs/quickstart.md", "docs/cli.md"}
"""Pages whose blocks take a minute or more (70, 85 and 65 s here; every other page takes 17 s together):
they run twice with ``ORCHESTRA_STRESS=1``, once in CI."""


def passes(page: Path) -> int:
    """How many times in a row a page's blocks run in one folder: twice, as a reader pasting them again
    would (the second time finds what the first left: sessions, files, a database)."""
    slow = str(page.relative_to(ROOT)) in SLOW
    return 1 if slow and os.environ.get("ORCHESTRA_STRESS") != "1" else 2


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_runs_as_pasted(page, tmp_path, monkeypatch):
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCHESTRA_MODEL", raising=False)
    environ = dict(os.environ)  # a page may set a variable (an encryption key): it stays on that page
    try:
        for number in range(1, passes(page) + 1):
            document = SYBIL.parse(page)  # parsed again: a fresh namespace, as a new python would have
            document.namespace[PASS] = number
            for example in document:
                with contextlib.suppress(SkipTest):  # an illustrative block: shown, not run
                    example.evaluate()
    finally:
        os.environ.clear()
        os.environ.update(environ)


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_block_is_one_that_runs_or_says_why_not(page):
    text = page.read_text()
    for match in FENCE.finditer(text):
        language = match.group(1)
        line = text.count("\n", 0, match.start()) + 1
        assert language not in ("sh", "shell", "console", "py", "python3", "pycon"), (
            f"{page.name}:{line}: write ```bash or ```python, so that the block runs in CI"
        )
    for mark in re.finditer(r"<!--\s*illustrative:(.*?)-->", text, re.DOTALL):
        line = text.count("\n", 0, mark.start()) + 1
        assert re.fullmatch(r'\s*next\s+"[^"]{10,}"\s*', mark.group(1)), (
            f'{page.name}:{line}: write <!-- illustrative: next "why it cannot run here" -->'
        )
