"""Every public package's ``__all__`` is sorted (ruff's isort-style order) and lists what it exports."""

import importlib
import pkgutil

import pytest

import orchestra

PUBLIC = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(orchestra.__path__, "orchestra.")
    if not any(part.startswith("_") for part in name.split("."))
)


def isort_style(name: str) -> tuple[int, str]:
    """Constants first, then classes, then everything else (the order ruff's RUF022 keeps)."""
    group = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return group, name


@pytest.mark.parametrize("module_name", ["orchestra", *PUBLIC])
def test_all_is_sorted_and_complete(module_name):
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # optional extras (e.g. temporalio) may be absent
        pytest.skip(f"{module_name} needs an optional dependency: {exc}")
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{module_name} has no __all__"
    assert exported == sorted(exported, key=isort_style), f"{module_name}.__all__ is not sorted"
    for name in exported:
        assert hasattr(module, name), f"{module_name}.__all__ names {name!r}, which it does not define"
    if module_name == "orchestra" or module.__file__.endswith("__init__.py"):
        public = {
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and not isinstance(v, type(importlib)) and n not in ("annotations",)
        }
        assert public <= set(exported) | {"__version__"}, (
            f"{module_name} exports {public - set(exported)} without __all__"
        )
