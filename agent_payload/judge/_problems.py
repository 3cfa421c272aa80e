"""What the model is shown about a problem: the current value at a path (``value_at``), the
problems of merge conflicts, a one-line summary, and where an original path lands after
deletions (``shifted``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agent_payload._paths import format_payload_path, lookup
from agent_payload.report import Issue, PayloadPath, Problem

__all__ = ["MISSING", "conflict_problems", "shifted", "summary", "value_at"]

MISSING = object()


def value_at(data: Any, path: PayloadPath | None) -> tuple[Any, bool]:
    """The payload subtree concerned by a problem: the value at ``path``, or (when the path
    names something missing, such as an index past the end) its parent container; never the
    whole root (a problem about the root itself carries no current value)."""
    if not path:
        return None, False
    value = lookup(data, path, MISSING)
    if value is not MISSING:
        return value, True
    if len(path) > 1:
        value = lookup(data, path[:-1], MISSING)
        if value is not MISSING:
            return value, True
    return None, False


def conflict_problems(
    conflicts: Sequence[Issue],
    shown: Any,
    hidden: Callable[[PayloadPath | None], bool] | None = None,
) -> tuple[Problem, ...]:
    """The problems of merge conflicts, each with the current value the model may see. A
    conflict at a ``hidden`` path carries none (never the parent's projection in its stead)."""
    problems = []
    for issue in conflicts:
        if hidden is not None and hidden(issue.payload_path):
            current, has_current = None, False
        else:
            current, has_current = value_at(shown, issue.payload_path)
        problems.append(
            Problem(
                kind="conflict",
                message=issue.message,
                path=issue.path or format_payload_path(issue.payload_path or (), root=""),
                code=issue.code,
                current=current,
                has_current=has_current,
            )
        )
    return tuple(problems)


def summary(problems: Sequence[Problem], limit: int = 3) -> str:
    """The first ``limit`` problems on one line (for exception messages)."""
    parts = [f"{p.path + ': ' if p.path else ''}{p.message}" for p in problems[:limit]]
    more = len(problems) - limit
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts) or "no details"


def shifted(path: PayloadPath, deleted: Sequence[PayloadPath]) -> PayloadPath:
    """An original path in the result: each index moves down by the deletions before it in
    the same array (``deleted``: original paths of the deleted nodes)."""
    out: list[str | int] = []
    for n, part in enumerate(path):
        if isinstance(part, int):
            parent = path[:n]
            gone = sum(
                1 for d in deleted if len(d) == n + 1 and d[:n] == parent and _before(d[n], part)
            )
            out.append(part - gone)
        else:
            out.append(part)
    return tuple(out)


def _before(index: str | int, part: int) -> bool:
    return isinstance(index, int) and index < part
