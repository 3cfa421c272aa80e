"""Payload paths as the library writes them (``items[3].price``, ``["a.b"].c``): reading one,
and the value it names in the payload the model may see."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agent_payload import prompts as _prompts

__all__ = ["has_long_array", "parse_path", "subtree"]

_PATH_TOKEN = re.compile(r'\.?([^.\[\]"]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def parse_path(text: str) -> list[str | int]:
    """A payload path written as the library writes it (``items[3].price``, ``["a.b"].c``)
    as its segments; ``""`` is the root. Raises ``ValueError`` saying what was expected."""
    segments: list[str | int] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _PATH_TOKEN.match(text, pos)
        if match is None or (match.group(1) is not None and pos > 0 and text[pos] != "."):
            raise ValueError(
                f"path {_cut(repr(text))}: cannot read it at character {pos + 1}; expected keys "
                'joined by dots and indices in brackets, such as items[3].price or ["a.b"].c'
            )
        if match.group(1) is not None:
            segments.append(match.group(1))
        elif match.group(2) is not None:
            segments.append(int(match.group(2)))
        else:
            segments.append(json.loads(match.group(3)))
        pos = match.end()
    return segments


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
