"""What the packages share about pydantic: a validation error said in one line."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["validation_problems"]


def validation_problems(exc: ValidationError) -> str:
    """A pydantic validation error as one line naming each field: ``total: Input should be ...; ...``."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )
