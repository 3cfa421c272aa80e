"""Validation errors of a merged typed payload, for messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from agent_payload import typed as _typed
from agent_payload._paths import format_payload_path


def validation_errors(
    exc: ValidationError, data: Any = None
) -> list[tuple[tuple[str | int, ...], str]]:
    """``(payload path, message)`` for each error of a pydantic ``ValidationError``. With
    ``data`` (the value validated), union branch tags are removed from the paths
    (:func:`agent_payload.typed.clean_loc`) and duplicates dropped."""
    if data is not None:
        return _typed.validation_errors(exc, data)
    return [(tuple(err["loc"]), str(err["msg"])) for err in exc.errors(include_url=False)]


def list_validation_errors(errors: Sequence[tuple[Sequence[str | int], str]]) -> str:
    """The first ten ``(payload path, message)`` pairs as one line for an error message."""
    return "; ".join(f"{format_payload_path(p)}: {m}" for p, m in errors[:10])
