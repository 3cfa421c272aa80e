"""Undo in the MCP server: what it keeps of a change (the values it replaced, not copies of the
file, within ``UNDO_KEPT`` changes and ``UNDO_CHARS`` characters) and how a change is reverted
over the change requests applied since."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from agent_payload._files import json_file_text
from agent_payload._jsondata import json_equal
from agent_payload._paths import format_payload_path
from agent_payload.diff import undo_change_request
from agent_payload.errors import AgentPayloadError, ConcurrentChangeError
from agent_payload.mcp._file import decode
from agent_payload.mcp._journal import Versions
from agent_payload.merge import apply_change_request
from agent_payload.outline import READ_PAYLOAD

__all__ = [
    "UNDO_CHARS",
    "UNDO_KEPT",
    "Undo",
    "inverse",
    "keep",
    "put",
    "replaced_values",
    "revert",
    "undo_of",
]

UNDO_KEPT: Final = 20
"""How many of its changes a server can undo (the oldest is forgotten first)."""
UNDO_CHARS: Final = 4_000_000
"""The most characters of replaced values kept for undo in all (the newest is always kept)."""


@dataclass(frozen=True, slots=True)
class Undo:
    """What undoing one change needs: the versions around it and the values it replaced
    (``old``: the JSON text of ``[[path, value before], ...]``), not copies of the file."""

    before: str
    after: str
    old: str
    exact: bytes | None = None
    """The file's bytes before the change, compressed: kept for the newest change only."""


_Path = tuple[str | int, ...]


def undo_of(before: str, old: Any, new: Any, exact: bytes) -> Undo:
    """What undoing a change from ``old`` to ``new`` needs (its ``after`` set once written)."""
    replaced = [[list(path), value] for path, value in replaced_values(old, new)]
    return Undo(before, "", json_file_text(replaced), exact)


def keep(history: list[Undo], undo: Undo) -> None:
    """Add ``undo`` as the newest (only it keeps its exact bytes), within the limits."""
    if history:
        history[-1] = dataclasses.replace(history[-1], exact=None)
    history.append(undo)
    size = sum(len(u.old) for u in history)
    while len(history) > UNDO_KEPT or (size > UNDO_CHARS and len(history) > 1):
        size -= len(history.pop(0).old)


def replaced_values(old: Any, new: Any) -> list[tuple[_Path, Any]]:
    """The smallest subtrees where ``new`` differs from ``old``, with their old values."""
    out: list[tuple[_Path, Any]] = []
    stack: list[tuple[_Path, Any, Any]] = [((), old, new)]
    while stack:
        path, a, b = stack.pop()
        if type(a) is dict and type(b) is dict and a.keys() == b.keys():
            stack.extend(((*path, k), a[k], b[k]) for k in a if not json_equal(a[k], b[k]))
        elif type(a) is list and type(b) is list and len(a) == len(b):
            stack.extend(
                ((*path, i), a[i], b[i]) for i in range(len(a)) if not json_equal(a[i], b[i])
            )
        else:
            out.append((path, a))
    return out


def put(tree: Any, replaced: Sequence[tuple[_Path, Any]]) -> Any:
    """``tree`` with the value at each path replaced (copied along the paths only)."""
    for path, value in replaced:
        if not path:
            return value
    root = copy.copy(tree)
    copied = {id(root)}
    for path, value in replaced:
        node = root
        for key in path[:-1]:
            child = node[key]
            if id(child) not in copied:
                child = copy.copy(child)
                node[key] = child
                copied.add(id(child))
            node = child
        node[path[-1]] = value
    return root


def inverse(now: Any, replaced: Sequence[tuple[_Path, Any]], marker: str) -> tuple[Any, Any]:
    """``now`` with the ``replaced`` values put back, and the request doing it (or None)."""
    target = put(now, replaced)
    try:
        return target, undo_change_request(target, now, marker=marker, markers={marker})
    except AgentPayloadError:
        return target, None


def revert(
    versions: Versions,
    last: Undo,
    replaced: Sequence[tuple[_Path, Any]],
    current: str,
    payload: Any,
    path: Path,
) -> tuple[Any, Any] | str:
    """``last`` undone over the requests applied since (the file is ``current``, holding
    ``payload``): the payload and the request as applied, or why it cannot be done."""
    mine_data = versions.shown(last.after)
    if mine_data is None:
        return (
            f"Nothing was undone: {path.name} was changed since your last change, and the "
            "version your change left is no longer kept in memory to move the undo over those "
            f"changes. Call {READ_PAYLOAD} and send a change request that puts the old values "
            "back."
        )
    mine = decode(path, mine_data)
    request = inverse(mine, replaced, versions.marker)[1]
    refused = (
        f"Nothing was undone: {path.name} was changed by someone else since your last change "
        f"(your change left version {last.after}; the file is now version {current})"
    )
    advice = (
        f" None of your earlier changes can be undone any more. To revert yours, call "
        f"{READ_PAYLOAD} and send a change request that puts the old values back."
    )
    entries = versions.journal.since(last.after, current)
    if entries == "older":
        return f"{refused}, by more change requests than this server keeps track of.{advice}"
    if isinstance(entries, str) or request is None:
        return (
            f"{refused}, by means other than a change request (an editor, a script): undoing "
            f"would throw their edit away.{advice}"
        )
    entries = versions.without_cancelled(entries, mine, payload)
    try:
        rebased = versions.rebase(mine, entries, request)
        merged = apply_change_request(payload, rebased, markers={versions.marker}, strict=True)
    except ConcurrentChangeError as exc:
        where = sorted({format_payload_path(c.payload_path or ()) for c in exc.report.conflicts})
        return (
            f"{refused}, and what your change changed was changed again since "
            f"({', '.join(where)}): undoing would overwrite that.{advice}"
        )
    except AgentPayloadError as exc:
        return f"{refused}; your change cannot be reverted over it ({exc}).{advice}"
    return merged.payload, rebased
