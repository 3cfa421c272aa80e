"""What the MCP server keeps to undo a change: the values it replaced, not copies of the file
(issue 29), within ``UNDO_KEPT`` changes and ``UNDO_CHARS`` characters."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent_payload._jsondata import json_equal

__all__ = ["UNDO_CHARS", "UNDO_KEPT", "Undo", "put", "replaced_values"]

UNDO_KEPT: Final = 20
"""How many of its changes a server can undo (the oldest is forgotten first)."""
UNDO_CHARS: Final = 4_000_000
"""The most characters of replaced values kept for undo in all (the newest is always kept)."""


@dataclass(frozen=True, slots=True)
class Undo:
    """What undoing one change needs: the versions before and after it, and the values it
    replaced (``old``: the JSON text of ``[[path, value before], ...]``, one for each smallest
    subtree that differs), not copies of the file."""

    before: str
    after: str
    old: str
    exact: bytes | None = None
    """The file's bytes before the change, compressed: kept for the newest change only."""


_Path = tuple[str | int, ...]


def replaced_values(old: Any, new: Any) -> list[tuple[_Path, Any]]:
    """Where ``new`` differs from ``old`` (JSON equality): the smallest subtrees that differ,
    each with its path and its value in ``old``."""
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
    """``tree`` with the value at each path replaced (containers copied once, along the
    paths only; ``tree`` is not changed)."""
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
