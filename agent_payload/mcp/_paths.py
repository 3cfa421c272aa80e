"""Payload paths as the library writes them (``items[3].price``, ``["a.b"].c``): reading one,
and the value it names in the payload the model may see."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent_payload import outline as _outline
from agent_payload import prompts as _prompts

__all__ = ["has_long_array", "parse_path", "subtree"]


def parse_path(text: str) -> list[str | int]:
    """A payload path written as the library writes it (``items[3].price``, ``["a.b"].c``)
    as its segments; ``""`` is the root. The one grammar of paths (``outline.parse_path``);
    ``ValueError`` (``PathSyntaxError``) says what was expected."""
    return list(_outline.parse_path(text))


def _cut(text: str, limit: int = 120) -> str:
    """``text`` as an error message repeats it: cut beyond ``limit`` characters."""
    return text if len(text) <= limit else f"{text[: limit - 20]}… ({len(text)} characters)"


def subtree(data: Any, segments: Sequence[str | int], text: str) -> Any:
    """The value at ``segments`` (linear in their number); ``ValueError`` saying where the
    path leaves the payload (the path and its parts repeated at most 120 characters each)."""
    node = data
    text = _cut(repr(text))
    for depth, segment in enumerate(segments):
        if isinstance(node, dict) and isinstance(segment, str) and segment in node:
            node = node[segment]
            continue
        if isinstance(node, list) and isinstance(segment, int) and segment < len(node):
            node = node[segment]
            continue
        where = _cut(_prompts.format_payload_path(segments[:depth]) or "the root")
        segment_text = _cut(repr(segment))
        if isinstance(node, dict) and isinstance(segment, str):
            if segment not in node:
                raise ValueError(f"path {text}: {where} has no key {segment_text} you can see")
            node = node[segment]
        elif isinstance(node, list) and isinstance(segment, int):
            if segment >= len(node):
                raise ValueError(
                    f"path {text}: {where} is an array of {len(node)} elements "
                    f"(indices 0 to {len(node) - 1}); there is no element {segment}"
                )
            node = node[segment]
        elif isinstance(node, list):
            raise ValueError(
                f"path {text}: {where} is an array; address its elements by index, "
                f"as in {_cut(_prompts.format_payload_path([*segments[:depth], 0]))}"
            )
        elif isinstance(node, dict):
            raise ValueError(
                f"path {text}: {where} is an object; address its keys by name, "
                f"as in [{_cut(json.dumps(segment))}]"
            )
        else:
            raise ValueError(f"path {text}: {where} is a plain value, with nothing inside")
    return node


def has_long_array(value: Any, threshold: int) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            if len(node) > threshold:
                return True
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())
    return False
