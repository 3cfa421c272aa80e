"""The names of a change request's top level: buckets in both spellings, wrappers, near misses.

One place that says which top-level names a change request may use, shared by the parser
(``agent_payload.parse``) and the merge (``agent_payload.merge``). Core: it imports only
``changes``.
"""

from __future__ import annotations

import difflib
import re
from typing import Final

from agent_payload.changes import BUCKETS, WIRE_NAMES

__all__ = [
    "BUCKET_SPELLINGS",
    "CAMEL_TO_SNAKE",
    "FIELDS",
    "KNOWN",
    "SNAKE_TO_CAMEL",
    "WRAPPERS",
    "absent",
    "near_bucket",
    "suggest",
]

WRAPPERS: Final[tuple[str, ...]] = (
    "payloadChangeRequest",
    "changeRequest",
    "change_request",
    "payload_change_request",
)
"""Top-level keys that wrap a whole change request (unwrapped when no bucket stands beside)."""

FIELDS: Final[tuple[str, ...]] = (*BUCKETS, "reasoning")
"""The top-level fields of the format, in wire (camelCase) spelling."""
CAMEL_TO_SNAKE: Final[dict[str, str]] = {
    wire: py for py, wire in WIRE_NAMES.items() if wire in BUCKETS
}
"""camelCase bucket name -> its snake_case spelling."""
SNAKE_TO_CAMEL: Final[dict[str, str]] = {snake: camel for camel, snake in CAMEL_TO_SNAKE.items()}
"""snake_case bucket name -> its camelCase spelling."""
BUCKET_SPELLINGS: Final[frozenset[str]] = frozenset((*BUCKETS, *CAMEL_TO_SNAKE.values()))
"""Every accepted spelling of a bucket."""
KNOWN: Final[frozenset[str]] = frozenset((*BUCKET_SPELLINGS, "reasoning"))
"""Every accepted top-level field name (wrappers aside)."""


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


_SHAPE_NAMES: Final[tuple[str, ...]] = tuple({_norm(n) for n in (*KNOWN, *WRAPPERS)})


def suggest(name: str) -> str | None:
    """The valid top-level field closest to ``name`` (camelCase), if one is close enough."""
    by_norm = {_norm(n): (n if n in FIELDS else WIRE_NAMES.get(n, n)) for n in KNOWN}
    exact = by_norm.get(_norm(name))
    if exact is not None:
        return exact
    close = difflib.get_close_matches(_norm(name), list(by_norm), n=1, cutoff=0.6)
    return by_norm[close[0]] if close else None


def near_bucket(key: str) -> bool:
    """``key`` is a bucket or wrapper name in some spelling, or a near miss of one (not of
    ``reasoning``): an object holding it is meant as a change request."""
    norm = _norm(key)
    if norm in _SHAPE_NAMES and norm != "reasoning":
        return True
    if len(norm) > 40:
        return False
    close = difflib.get_close_matches(norm, _SHAPE_NAMES, 1, 0.8)
    return bool(close) and close[0] != "reasoning"


def absent(value: object) -> bool:
    """A bucket given as ``null``, ``{}`` or ``[]`` asks for nothing: it counts as absent."""
    return value is None or value == {} or value == []
