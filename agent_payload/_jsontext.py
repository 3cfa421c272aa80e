"""JSON text for data of any depth: ``dumps`` and ``loads`` as the ``json`` module writes and
reads it, without its recursion limit.

The standard ``json`` module recurses once per level and stops with ``RecursionError`` near
1,000 levels, while the merge accepts payloads 20,000 levels deep (``merge.Limits``). Both
functions here use ``json`` (fast, in C) and fall back to an explicit-stack writer or reader
only when it runs out of recursion, so ordinary data costs nothing extra and deep data gives
the same text (``dumps``) or the same value (``loads``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json.decoder import JSONDecodeError
from typing import Any

scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]

__all__ = ["TooDeepError", "dumps", "loads"]

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_CONSTANTS: dict[str, Any] = {"null": None, "true": True, "false": False}
_NON_FINITE = ("NaN", "Infinity", "-Infinity")


def dumps(
    value: Any,
    *,
    indent: int | str | None = None,
    ensure_ascii: bool = False,
    separators: tuple[str, str] | None = None,
) -> str:
    """``json.dumps(value, indent=..., ensure_ascii=..., separators=...)`` at any depth.

    Data too deep for ``json`` is written without ``indent`` and with compact separators (the
    indentation of data nested N levels deep alone takes about N squared characters)."""
    try:
        return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators)
    except RecursionError:
        pass
    if indent is not None:
        indent, separators = None, (",", ":")
    item_sep, key_sep = separators or (", ", ": ")
    return _dumps_iterative(value, indent, ensure_ascii, item_sep, key_sep)


def _dumps_iterative(
    value: Any, indent: int | None, ensure_ascii: bool, item_sep: str, key_sep: str
) -> str:
    out: list[str] = []
    # Items: ("v", value, level) to write a value; ("t", text, 0) to emit text.
    stack: list[tuple[str, Any, int]] = [("v", value, 0)]

    def newline(level: int) -> str:
        return "" if indent is None else "\n" + " " * (indent * level)

    def scalar(item: Any) -> str:
        return json.dumps(item, ensure_ascii=ensure_ascii)

    while stack:
        kind, item, level = stack.pop()
        if kind == "t":
            out.append(item)
            continue
        if isinstance(item, dict) and item:
            out.append("{")
            stack.append(("t", newline(level) + "}", 0))
            entries = list(item.items())
            for n in range(len(entries) - 1, -1, -1):
                key, child = entries[n]
                stack.append(("v", child, level + 1))
                prefix = (item_sep if n else "") + newline(level + 1)
                stack.append(("t", prefix + scalar(_key(key)) + key_sep, 0))
        elif isinstance(item, list | tuple) and item:
            out.append("[")
            stack.append(("t", newline(level) + "]", 0))
            for n in range(len(item) - 1, -1, -1):
                stack.append(("v", item[n], level + 1))
                stack.append(("t", (item_sep if n else "") + newline(level + 1), 0))
        else:
            out.append(scalar(item))
    return "".join(out)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def loads(
    text: str,
    *,
    parse_constant: Callable[[str], Any] | None = None,
    max_depth: int | None = None,
) -> Any:
    """``json.loads(text, parse_constant=...)`` at any depth (``JSONDecodeError`` for text
    that is not JSON, with the same line and column). With ``max_depth``, text nested deeper
    than that raises ``TooDeepError`` as soon as the reader gets there."""
    try:
        return json.loads(text, parse_constant=parse_constant)
    except RecursionError:
        return _loads_iterative(text, parse_constant, max_depth)


class TooDeepError(ValueError):
    """JSON text nested deeper than ``loads(max_depth=...)``; ``pos`` is where."""

    def __init__(self, max_depth: int, pos: int) -> None:
        super().__init__(f"nested more than {max_depth:,} levels deep (at character {pos:,})")
        self.max_depth = max_depth
        self.pos = pos


def _loads_iterative(
    text: str, parse_constant: Callable[[str], Any] | None, max_depth: int | None = None
) -> Any:
    """The explicit-stack reader (only reached for text ``json`` already read up to its
    recursion limit, so syntax errors are reported as ``json`` would report them)."""
    end = len(text)
    # Each frame is [container, key] (key: the member being read, for an object).
    stack: list[list[Any]] = []

    def ws(pos: int) -> int:
        match = _WS.match(text, pos)
        return match.end() if match else pos

    def key_at(pos: int) -> tuple[str, int]:
        if pos >= end or text[pos] != '"':
            raise JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
        key, pos = scanstring(text, pos + 1)
        pos = ws(pos)
        if pos >= end or text[pos] != ":":
            raise JSONDecodeError("Expecting ':' delimiter", text, pos)
        return key, ws(pos + 1)

    pos = ws(0)
    value: Any
    while True:
        # Read one value at pos (opening containers pushes them and reads on).
        if pos >= end:
            raise JSONDecodeError("Expecting value", text, pos)
        char = text[pos]
        if char == "{":
            pos = ws(pos + 1)
            if pos < end and text[pos] == "}":
                value, pos = {}, pos + 1
            else:
                key, pos = key_at(pos)
                stack.append([{}, key])
                if max_depth is not None and len(stack) > max_depth:
                    raise TooDeepError(max_depth, pos)
                continue
        elif char == "[":
            pos = ws(pos + 1)
            if pos < end and text[pos] == "]":
                value, pos = [], pos + 1
            else:
                stack.append([[], None])
                if max_depth is not None and len(stack) > max_depth:
                    raise TooDeepError(max_depth, pos)
                continue
        elif char == '"':
            value, pos = scanstring(text, pos + 1)
        else:
            value, pos = _scalar_at(text, pos, parse_constant)
        # A value is complete: put it in its container, then close containers that end here.
        while True:
            if not stack:
                pos = ws(pos)
                if pos != end:
                    raise JSONDecodeError("Extra data", text, pos)
                return value
            frame = stack[-1]
            container = frame[0]
            if isinstance(container, dict):
                container[frame[1]] = value
            else:
                container.append(value)
            pos = ws(pos)
            if pos < end and text[pos] == ",":
                pos = ws(pos + 1)
                if isinstance(container, dict):
                    frame[1], pos = key_at(pos)
                break
            closer = "}" if isinstance(container, dict) else "]"
            if pos < end and text[pos] == closer:
                stack.pop()
                value, pos = container, pos + 1
                continue
            raise JSONDecodeError("Expecting ',' delimiter", text, pos)


def _scalar_at(text: str, pos: int, parse_constant: Callable[[str], Any] | None) -> tuple[Any, int]:
    for word, value in _CONSTANTS.items():
        if text.startswith(word, pos):
            return value, pos + len(word)
    for word in _NON_FINITE:
        if text.startswith(word, pos):
            if parse_constant is not None:
                return parse_constant(word), pos + len(word)
            return float(word.replace("Infinity", "inf")), pos + len(word)
    match = _NUMBER.match(text, pos)
    if match is None:
        raise JSONDecodeError("Expecting value", text, pos)
    integer, fraction, exponent = match.groups()
    if fraction or exponent:
        return float(integer + (fraction or "") + (exponent or "")), match.end()
    return int(integer), match.end()
