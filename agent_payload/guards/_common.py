"""Helpers shared by the guards: a change as its effects on single nodes, payload paths as
text and a JSON size estimate (iterative)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agent_payload._jsondata import Link, json_equal, materialize
from agent_payload._paths import format_payload_path as format_path
from agent_payload.report import Change, PayloadPath

__all__ = ["fine_changes", "format_path", "json_size", "path_below", "verb"]


def path_below(base: PayloadPath, linked: Link) -> PayloadPath:
    """``base`` followed by the segments of the linked path ``linked``."""
    return base + materialize(linked)


def json_size(value: Any) -> int:
    """The approximate length of ``value`` as compact JSON (escapes not counted), without
    writing its strings; a list of plain strings or numbers is counted at C speed."""
    total = 0
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):  # braces, commas, and each key with its quotes and colon
            total += 2 + max(len(node) - 1, 0) + sum(map(len, node)) + 3 * len(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            kinds = set(map(type, node))
            if kinds <= _NUMBERS:  # numbers, booleans and nulls as json.dumps writes them
                total += len(json.dumps(node, separators=(",", ":")))
            elif kinds == {str}:  # brackets, commas, each string with its quotes
                total += 1 + 3 * len(node) + sum(map(len, node))
            else:
                total += 2 + max(len(node) - 1, 0)
                stack.extend(node)
        elif isinstance(node, str):
            total += len(node) + 2
        elif node is None or isinstance(node, bool):
            total += 4 if node is not False else 5
        else:
            total += len(repr(node))
    return total


_NUMBERS = frozenset({int, float, bool, type(None)})


def fine_changes(change: Change) -> Iterator[tuple[Link, str, Any, Any]]:
    """``change`` as its effects on single nodes, ``(link below change.path, op, old, new)``:
    a same-kind container replacement counts only its differences (a container's deletions
    first)."""
    if change.op != "update":
        yield None, change.op, change.old, change.new
        return
    stack: list[tuple[Link, Any, Any]] = [(None, change.old, change.new)]
    while stack:
        linked, old, new = stack.pop()
        if isinstance(old, dict) and isinstance(new, dict):
            for key, value in old.items():
                if key not in new:
                    yield (linked, key), "delete", value, None
                else:
                    stack.append(((linked, key), value, new[key]))
            for key, value in new.items():
                if key not in old:
                    yield (linked, key), "add", None, value
        elif isinstance(old, list) and isinstance(new, list):
            common = min(len(old), len(new))
            for i in range(common):
                stack.append(((linked, i), old[i], new[i]))
            for i in range(common, len(old)):
                yield (linked, i), "delete", old[i], None
            for i in range(common, len(new)):
                yield (linked, i), "add", None, new[i]
        elif not json_equal(old, new):
            yield linked, "update", old, new


def verb(op: str) -> str:
    """``add`` -> ``add``, ``update`` -> ``change``, ``delete`` -> ``delete``."""
    return {"add": "add", "update": "change", "delete": "delete"}.get(op, op)
