"""Helpers shared by the guards: payload paths as text and a JSON size estimate (iterative)."""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_
from typing import Any

from agent_payload._jsondata import Link, materialize
from agent_payload._paths import format_payload_path as format_path
from agent_payload.report import PayloadPath

__all__ = ["format_path", "json_size", "path_below", "verb"]


def path_below(base: PayloadPath, linked: Link) -> PayloadPath:
    """``base`` followed by the segments of the linked path ``linked``."""
    return base + materialize(linked)


def json_size(value: Any) -> int:
    """The approximate length of ``value`` as compact JSON, counted without serialising."""
    total = 0
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):  # braces, commas, and each key with its quotes and colon
            total += 2 + max(len(node) - 1, 0) + sum(map(len, node)) + 3 * len(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            total += 2 + max(len(node) - 1, 0)
            total += _count_plain_elements(node, stack)
        elif isinstance(node, str):
            total += len(node) + 2
        elif node is None or isinstance(node, bool):
            total += 4 if node is not False else 5
        else:
            total += len(repr(node))
    return total


_MAX_KINDS = 6  # element types of one list counted kind by kind (more: element by element)


def _count_plain_elements(items: list[Any], stack: list[Any]) -> int:
    """What :func:`json_size` counts for the plain scalars of ``items``, a kind at a time at C
    speed; every other element goes on ``stack`` for the walk."""
    kinds = set(map(type, items))
    if len(kinds) > _MAX_KINDS:
        stack.extend(items)
        return 0
    total = 0
    for kind in kinds:
        members = (
            items
            if len(kinds) == 1
            else list(compress(items, map(is_, map(type, items), repeat(kind))))
        )
        if kind is str:
            total += sum(map(len, members)) + 2 * len(members)
        elif kind is int or kind is float:
            total += sum(map(len, map(repr, members)))
        elif kind is bool:
            total += 4 * len(members) + members.count(False)
        elif kind is type(None):
            total += 4 * len(members)
        else:
            stack.extend(members)
    return total


def verb(op: str) -> str:
    """``add`` -> ``add``, ``update`` -> ``change``, ``delete`` -> ``delete``."""
    return {"add": "add", "update": "change", "delete": "delete"}.get(op, op)
