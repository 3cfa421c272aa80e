"""The one way 0.2 keeps a renamed or moved name working for one release: a
``DeprecationWarning`` that names the replacement. Every alias that calls ``renamed`` is listed
in the CHANGELOG as "`old` -> `new`" and goes away in the next release."""

from __future__ import annotations

import warnings

__all__ = ["renamed"]


def renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (both written as the user writes
    them); ``stacklevel`` points the warning at the user's line (3: the caller's caller)."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
