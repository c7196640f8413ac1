"""The distribution orchestra is installed as: its name (the import name stays ``orchestra``), its
version from the installed metadata, and the line that installs one of its extras."""

from __future__ import annotations

__all__ = ["DISTRIBUTION", "install_hint", "installed_version"]

# "orchestra" on PyPI is an unrelated project: ``pip install 'orchestra[otel]'`` would install it.
DISTRIBUTION = "orchestra-agents"


def installed_version(source_version: str) -> str:
    """The version of the installed distribution (its metadata, as pip installed it), or
    ``source_version`` (the package's ``__version__``, passed in: this module sits below the package's
    root) when run from a source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return f"{source_version} (not installed)"


def install_hint(extra: str) -> str:
    """How to install ``extra``, from a checkout or from the distribution."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (in a checkout: pip install -e '.[{extra}]')"
