"""Payload paths, one way everywhere: ``format_payload_path`` writes one (``items[3].price``,
``meta["a.b"]``, the root ``(root)``), ``parse_path`` reads what a model writes, and ``lookup``
follows one through a payload (an error names the deepest part that exists)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any, Final

__all__ = [
    "ECHO_LIMIT",
    "ROOT",
    "PathNotFound",
    "PathSyntaxError",
    "counted",
    "echo",
    "format_payload_path",
    "kind_of",
    "lookup",
    "parse_path",
    "show_path",
]

ROOT: Final = "(root)"
"""The root's name in every text a user or a model reads."""
_ROOTS: Final = frozenset({"", ROOT, "$"})
_NAME_STOP: Final = frozenset('.[]"')
ECHO_LIMIT: Final = 120
"""The most characters of a model's own path or text that a message repeats."""


def format_payload_path(path: Sequence[str | int], root: str = ROOT) -> str:
    """``("items", 3, "a.b")`` -> ``items[3]["a.b"]``: ASCII identifiers follow a dot, other
    keys are JSON strings in brackets; the empty path is ``root`` (``""`` for a data field such
    as ``Problem.path``)."""
    out: list[str] = []
    for i, part in enumerate(path):
        if not isinstance(part, str):
            out.append(f"[{int(part)}]")
        elif part.isascii() and part.isidentifier():
            out.append(part if i == 0 else "." + part)
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out) or root


def echo(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` as a message repeats it: cut in the middle beyond ``limit`` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}…({len(text) - 2 * half} characters)…{text[-half:]}"


def show_path(path: Sequence[str | int]) -> str:
    """``format_payload_path`` within ``ECHO_LIMIT`` characters (a deep path: only its ends)."""
    if len(path) > ECHO_LIMIT:  # format no more than the ends shown
        head, tail = format_payload_path(path[:8]), format_payload_path(path[-8:])
        return echo(f"{head}…({len(path) - 16} parts)…{tail}")
    return echo(format_payload_path(path))


class PathSyntaxError(ValueError):
    """A path that does not follow the grammar; the message says where and how to write it."""


def _syntax_error(text: str, pos: int, expected: str) -> PathSyntaxError:
    found = repr(text[pos]) if pos < len(text) else "the end"
    return PathSyntaxError(
        f"the path {echo(repr(text))} cannot be read at character {pos}: expected {expected}, "
        f'found {found}. Write paths as in the outline: lines[3].sku, customer.address, ["a.b"].c; '
        '"" or (root) for the whole payload.'
    )


def parse_path(text: str) -> tuple[str | int, ...]:
    """``lines[3].sku`` -> ``("lines", 3, "sku")``; ``""``, ``(root)`` and ``$`` are the root.
    A bare name is always a key (``stats.2024``: the key ``"2024"``). Raises
    ``PathSyntaxError``."""
    text = text.strip()
    if text in _ROOTS:
        return ()
    parts: list[str | int] = []
    pos = 0
    while pos < len(text):
        if text[pos] == "[":
            pos += 1
            if pos < len(text) and text[pos] == '"':
                try:
                    key, pos = json.JSONDecoder().raw_decode(text, pos)
                except json.JSONDecodeError as exc:
                    raise _syntax_error(text, pos, "a key as a JSON string") from exc
                parts.append(str(key))
            else:
                end = pos
                while end < len(text) and text[end].isascii() and text[end].isdigit():
                    end += 1
                if end == pos or end - pos > 18:
                    raise _syntax_error(
                        text, pos, 'a position such as [3] or a key such as ["a.b"]'
                    )
                parts.append(int(text[pos:end]))
                pos = end
            if pos >= len(text) or text[pos] != "]":
                raise _syntax_error(text, pos, "']'")
            pos += 1
            continue
        if text[pos] == ".":
            if not parts:
                raise _syntax_error(text, pos, "a key name")
            pos += 1
        elif parts:
            raise _syntax_error(text, pos, "'.' or '['")
        end = pos
        while end < len(text) and text[end] not in _NAME_STOP:
            end += 1
        if end == pos:
            raise _syntax_error(text, pos, "a key name")
        parts.append(text[pos:end])
        pos = end
    return tuple(parts)


def counted(n: int, noun: str) -> str:
    """``1 key``, ``3 elements``, ``2 matches``."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}es" if noun.endswith("ch") else f"{n} {noun}s"


def kind_of(value: Any) -> str:
    """``an array of 3 elements``, ``an empty object``, ``a string of 12 characters``, ..."""
    if isinstance(value, dict):
        return f"an object of {counted(len(value), 'key')}" if value else "an empty object"
    if isinstance(value, list):
        return f"an array of {counted(len(value), 'element')}" if value else "an empty array"
    if isinstance(value, str):
        return f"a string of {counted(len(value), 'character')}"
    if value is None:
        return "null"
    return "a boolean" if isinstance(value, bool) else "a number"


class PathNotFound(LookupError):
    """No value at a path; the message names the deepest part of it that exists."""


_RAISE: Any = object()


def lookup(data: Any, path: Sequence[str | int], default: Any = _RAISE) -> Any:
    """The value at ``path`` in ``data`` (linear in the path's length); when there is none,
    ``default`` if given, else ``PathNotFound``."""
    node = data
    for depth, part in enumerate(path):
        if isinstance(part, str) and isinstance(node, dict) and part in node:
            node = node[part]
            continue
        if type(part) is int and isinstance(node, list) and 0 <= part < len(node):
            node = node[part]
            continue
        if default is not _RAISE:
            return default
        raise PathNotFound(_not_found(node, path, depth))
    return node


def _not_found(node: Any, path: Sequence[str | int], depth: int) -> str:
    """Why part ``depth`` of ``path`` is not in ``node``, the value at the parts before it."""
    part, prefix = path[depth], path[:depth]
    head = f"No value at {show_path(path)}: {show_path(prefix)}"
    if isinstance(part, int) and isinstance(node, list):
        return (
            f"{head} is {kind_of(node)} (positions 0 to {len(node) - 1})."
            if node
            else f"{head} is empty."
        )
    if isinstance(part, str) and isinstance(node, dict):
        keys = [echo(json.dumps(k, ensure_ascii=False), 40) for k in itertools.islice(node, 12)]
        more = f", and {len(node) - 12} more" if len(node) > 12 else ""
        what = f"its keys: {', '.join(keys)}{more}" if node else "it is empty"
        return f"{head} has no key {echo(json.dumps(part, ensure_ascii=False))} ({what})."
    hint = ""
    if isinstance(part, int):
        if isinstance(node, dict):
            hint = f'; to read its key "{part}" write {show_path((*prefix, str(part)))}'
        return f"{head} is {kind_of(node)}, not an array{hint}."
    if isinstance(node, list):
        at = int(part) if part.isascii() and part.isdigit() and len(part) < 19 else 0
        hint = f"; write {show_path((*prefix, at))} for the element at position {at}"
    return f"{head} is {kind_of(node)}, not an object{hint}."
