"""Any YAML file read the way pipeline specs are (the server config is one): safe YAML, every problem as
``file:line:column: field: message``, unknown keys with a "did you mean"."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestra.errors import OrchestraSpecError
from orchestra.spec._yaml import Located, load_located
from orchestra.spec.loader import _validation_problems

__all__ = ["load_document"]

M = TypeVar("M", bound=BaseModel)


def load_document(
    path: str | os.PathLike[str], model: type[M], *, extra: Mapping[str, Any] | None = None
) -> tuple[M, Located]:
    """Read the YAML file at ``path`` as ``model`` (its data plus ``extra``, fields the file does not
    hold); also returns where each value came from, for the caller's own checks
    (``located.error(("agents", 0, "id"), "...")``). ``${VAR}`` is replaced by the environment
    variable, as in specs.

    Raises:
        OrchestraSpecError: with every problem found, each as ``file:line:column: field: message``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OrchestraSpecError(f"{path}:1:1: (document): cannot read the file: {exc}") from None
    located = load_located(text, str(path))
    if located.problems:
        raise OrchestraSpecError(located.problems)
    if not isinstance(located.data, dict):
        fields = ", ".join(name for name, field in model.model_fields.items() if not field.exclude)
        raise OrchestraSpecError(located.error((), f"expected a mapping of {fields}"))
    try:
        return model.model_validate({**located.data, **(extra or {})}), located
    except ValidationError as exc:
        raise OrchestraSpecError(_validation_problems(located, exc, model)) from None
