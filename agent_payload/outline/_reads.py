# The read tools: the path grammar (``parse_path``), the tool descriptions (``tool_specs``) and
# notes, and the answers to ``read_payload`` and ``find_in_payload`` calls (``read``, ``find``,
# ``answer``), each a text for the model; a bad call gets an error text, never an exception.
# ``find`` runs a little over 80 lines: its scan is written out for each container and each
# kind of search, with no call per value (the hot part on a payload of megabytes).
"""Answers to the read tools of outline mode (pure)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from string import Template
from typing import Any

from agent_payload import prompts as _prompts
from agent_payload._jsondata import format_payload_path as _format_path
from agent_payload.outline._shape import (
    FIND_IN_PAYLOAD,
    FIND_LIMIT,
    FULL,
    LEVELS,
    MIN_PAYLOAD_TOKENS,
    READ_PAYLOAD,
    Count,
    _count,
    _fit,
)
from agent_payload.usage import estimate_tokens

# --- paths -----------------------------------------------------------------------------------


class PathSyntaxError(ValueError):
    """A path that does not follow the grammar; the message says where and how to write it."""


_ROOTS = frozenset({"", "(root)", "$"})
_NAME_STOP = frozenset('.[]"')


def _path_error(text: str, pos: int, expected: str) -> PathSyntaxError:
    found = repr(text[pos]) if pos < len(text) else "the end"
    return PathSyntaxError(
        f"the path {text!r} cannot be read at character {pos}: expected {expected}, found "
        f'{found}. Write paths as in the outline: lines[3].sku, customer.address, ["a.b"].c; '
        '"" or (root) for the whole payload.'
    )


def parse_path(text: str) -> tuple[str | int, ...]:
    """``lines[3].sku`` -> ``("lines", 3, "sku")``; raises ``PathSyntaxError``."""
    text = text.strip()
    if text in _ROOTS:
        return ()
    parts: list[str | int] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char == "[":
            pos += 1
            if pos < len(text) and text[pos] == '"':
                try:
                    key, end = json.JSONDecoder().raw_decode(text, pos)
                except json.JSONDecodeError as exc:
                    raise _path_error(text, pos, "a key as a JSON string") from exc
                parts.append(str(key))
                pos = end
            else:
                end = pos
                while end < len(text) and text[end].isascii() and text[end].isdigit():
                    end += 1
                if end == pos:
                    raise _path_error(text, pos, 'a position such as [3] or a key such as ["a.b"]')
                parts.append(int(text[pos:end]))
                pos = end
            if pos >= len(text) or text[pos] != "]":
                raise _path_error(text, pos, "']'")
            pos += 1
            continue
        if char == ".":
            if not parts:
                raise _path_error(text, pos, "a key name")
            pos += 1
        elif parts:
            raise _path_error(text, pos, "'.' or '['")
        end = pos
        while end < len(text) and text[end] not in _NAME_STOP:
            end += 1
        if end == pos:
            raise _path_error(text, pos, "a key name")
        parts.append(text[pos:end])
        pos = end
    return tuple(parts)


def _show_path(path: Sequence[str | int]) -> str:
    return _format_path(path) or "(root)"


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return f"an object of {_count(len(value), 'key')}" if value else "an empty object"
    if isinstance(value, list):
        return f"an array of {_count(len(value), 'element')}" if value else "an empty array"
    if isinstance(value, str):
        return f"a string of {_count(len(value), 'character')}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


class _ReadError(Exception):
    """A read that cannot be answered; the message goes to the model as the tool result."""


def _resolve(data: Any, path: tuple[str | int, ...]) -> Any:
    node = data
    for depth, part in enumerate(path):
        here = _show_path(path[:depth])
        asked = _show_path(path)
        if isinstance(part, int):
            if not isinstance(node, list):
                hint = (
                    f'; to read its key "{part}" write {_show_path((*path[:depth], str(part)))}'
                    if isinstance(node, dict)
                    else ""
                )
                raise _ReadError(
                    f"No value at {asked}: {here} is {_kind(node)}, not an array{hint}."
                )
            if part >= len(node):
                raise _ReadError(
                    f"No value at {asked}: {here} is {_kind(node)} (positions 0 to "
                    f"{len(node) - 1})."
                    if node
                    else f"No value at {asked}: {here} is empty."
                )
            node = node[part]
        else:
            if not isinstance(node, dict):
                hint = (
                    f"; write {_show_path((*path[:depth], int(part)))} for the element at "
                    f"position {part}"
                    if isinstance(node, list) and part.isascii() and part.isdigit()
                    else ""
                )
                raise _ReadError(
                    f"No value at {asked}: {here} is {_kind(node)}, not an object{hint}."
                )
            if part not in node:
                raise _ReadError(
                    f"No value at {asked}: {here} has no key {json.dumps(part)} "
                    f"({_keys_hint(node)})."
                )
            node = node[part]
    return node


def _keys_hint(node: dict[str, Any], limit: int = 12) -> str:
    if not node:
        return "it is empty"
    keys = [json.dumps(k, ensure_ascii=False) for k in itertools.islice(node, limit)]
    more = f", and {len(node) - limit} more" if len(node) > limit else ""
    return f"its keys: {', '.join(keys)}{more}"


# --- the tools -------------------------------------------------------------------------------


ToolText = tuple[str, str, dict[str, Any]]


def tool_specs(*, budget: int, limit: int = FIND_LIMIT) -> tuple[ToolText, ...]:
    """``(name, description, JSON Schema of the arguments)`` of the two read tools."""
    read_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": 'Where to read: lines[3], customer.address, "" for the root.',
            },
            "start": {
                "type": "integer",
                "minimum": 0,
                "description": "First position to read (arrays; objects: keys in order).",
            },
            "end": {
                "type": "integer",
                "minimum": 0,
                "description": "Position after the last one to read (exclusive).",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    find_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "text": {
                "type": "string",
                "description": "Text to find in keys and string values (case-insensitive).",
            },
            "number": {"type": "number", "description": "A number to find (equal values)."},
            "path": {
                "type": "string",
                "description": "Search only inside this path (default: the whole payload).",
            },
        },
        "additionalProperties": False,
    }
    read_text = Template(_prompts.load_template("tool_read_payload")).substitute(budget=str(budget))
    find_text = Template(_prompts.load_template("tool_find_in_payload")).substitute(
        limit=str(limit)
    )
    return (
        (READ_PAYLOAD, read_text.strip(), read_schema),
        (FIND_IN_PAYLOAD, find_text.strip(), find_schema),
    )


def last_read_note(max_reads: int) -> str:
    """Added to the answer of the last read a run allows."""
    template = Template(_prompts.load_template("read_last"))
    return template.substitute(max_reads=str(max_reads)).strip()


def not_applied_note() -> str:
    """The result of a change-request call sent in the same turn as a read."""
    return _prompts.load_template("read_not_applied").strip()


def _arguments(arguments: str | Mapping[str, Any], name: str, allowed: set[str]) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            raise _ReadError(
                f"Error: the arguments of {name} are not a JSON object ({exc}); send an object "
                f"such as {_example(name)}."
            ) from exc
    else:
        parsed = dict(arguments)
    if not isinstance(parsed, dict):
        raise _ReadError(
            f"Error: the arguments of {name} must be a JSON object such as {_example(name)}, "
            f"found {type(parsed).__name__}."
        )
    unknown = sorted(set(parsed) - allowed)
    if unknown:
        raise _ReadError(
            f"Error: {name} takes only {', '.join(sorted(allowed))}; unknown argument(s): "
            f"{', '.join(unknown)}."
        )
    return parsed


def _example(name: str) -> str:
    if name == READ_PAYLOAD:
        return '{"path": "lines[3]"} or {"path": "lines", "start": 100, "end": 120}'
    return '{"text": "SKU-1031"} or {"number": 42, "path": "lines"}'


def _path_argument(parsed: Mapping[str, Any], name: str, required: bool) -> tuple[str | int, ...]:
    raw = parsed.get("path")
    if raw is None:
        if required:
            raise _ReadError(f"Error: {name} needs a path, such as {_example(name)}.")
        return ()
    if not isinstance(raw, str):
        raise _ReadError(
            f'Error: the path of {name} must be a string such as "lines[3]", found '
            f"{json.dumps(raw)}."
        )
    try:
        return parse_path(raw)
    except PathSyntaxError as exc:
        raise _ReadError(f"Error: {exc}") from exc


def _position(parsed: Mapping[str, Any], key: str) -> int | None:
    value = parsed.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        raise _ReadError(
            f"Error: {key} must be a position (an integer >= 0), found {json.dumps(value)}."
        )
    return value


def read(
    shown: Any,
    path: Sequence[str | int],
    budget: int,
    *,
    start: int | None = None,
    end: int | None = None,
    count: Count | None = None,
) -> str:
    """The answer to ``read_payload``: the value at ``path`` in ``shown`` (elements ``start``
    to ``end``, end excluded, of an array, or keys of an object by position), complete when it
    fits ``budget`` tokens, else outlined; a text saying why when there is nothing to read."""
    try:
        return _read(shown, tuple(path), budget, start, end, count or estimate_tokens)
    except _ReadError as exc:
        return str(exc)


def _read(
    shown: Any,
    path: tuple[str | int, ...],
    budget: int,
    start: int | None,
    end: int | None,
    count: Count,
) -> str:
    node = _resolve(shown, path)
    where = _show_path(path)
    window: tuple[int, int] | None = None
    if start is not None or end is not None:
        if not isinstance(node, dict | list):
            raise _ReadError(
                f"Error: start and end read part of an array or object, but {where} is "
                f"{_kind(node)}; read it without them."
            )
        n = len(node)
        lo = 0 if start is None else start
        hi = n if end is None else min(end, n)
        if lo >= n:
            last = f"positions 0 to {n - 1}" if n else "it is empty"
            raise _ReadError(
                f"Error: start {lo} is past the end of {where} ({_kind(node)}: {last})."
            )
        if hi <= lo:
            raise _ReadError(f"Error: end {end} must be greater than start {lo} (end is excluded).")
        window = (lo, hi)
    what = _kind(node)
    if window is not None:
        unit = "keys" if isinstance(node, dict) else "elements"
        what += f", {unit} {window[0]} to {window[1] - 1}"
    outlined = " " + _prompts.load_template("read_outlined").strip()
    # The header is counted with the note, so the whole answer fits whatever the body is.
    body_budget = max(budget - count(f"{where} ({what}){outlined}:\n"), MIN_PAYLOAD_TOKENS // 2)
    text, complete = _fit(node, body_budget, count, (FULL, *LEVELS), window)
    return f"{where} ({what}){'' if complete else outlined}:\n{text}"


def value_text(value: Any, budget: int, *, count: Count | None = None) -> str:
    """``value`` written for the model within ``budget`` tokens: complete when it fits, else
    its outline after a line saying so (outline mode's corrections show a subtree this way)."""
    count = count or estimate_tokens
    note = _prompts.load_template("read_outlined").strip()
    body_budget = max(budget - count(note + "\n"), MIN_PAYLOAD_TOKENS // 2)
    text, complete = _fit(value, body_budget, count, (FULL, *LEVELS))
    return text if complete else f"{note}\n{text}"


def find(
    shown: Any,
    budget: int,
    *,
    text: str | None = None,
    number: float | None = None,
    path: Sequence[str | int] = (),
    limit: int = FIND_LIMIT,
    count: Count | None = None,
) -> str:
    """The answer to ``find_in_payload``: the paths under ``path`` where ``text`` occurs in a
    key or a string value (case-insensitive), or where a number equals ``number``; at most
    ``limit`` of them and never more than ``budget`` tokens, with how many more there are."""
    count = count or estimate_tokens
    try:
        root = _resolve(shown, tuple(path))
    except _ReadError as exc:
        return str(exc)
    needle = text.casefold() if text is not None else None
    lines: list[str] = []
    total = 0

    def hit(where: tuple[str | int, ...], line: str) -> None:
        nonlocal total
        total += 1
        if len(lines) < limit:
            lines.append(f"{_show_path(where)}{line}")

    def scalar(where: tuple[str | int, ...], value: Any) -> None:
        if needle is not None:
            if isinstance(value, str) and needle in value.casefold():
                hit(where, f": {_snippet(value, needle)}")
        elif isinstance(value, int | float) and not isinstance(value, bool) and value == number:
            hit(where, f": {json.dumps(value)}")

    # An explicit stack (any depth); a path is built only for a container or a match. The
    # test of a scalar is written out in each loop (no call per value: this is the hot part).
    containers = (dict, list)
    stack: list[tuple[tuple[str | int, ...], Any]] = [(tuple(path), root)]
    while stack:
        where, node = stack.pop()
        later: list[tuple[tuple[str | int, ...], Any]] = []
        if isinstance(node, dict):
            if needle is not None:
                for key, item in node.items():
                    if needle in key.casefold():
                        hit((*where, key), f" (the key {json.dumps(key, ensure_ascii=False)})")
                    if isinstance(item, containers):
                        later.append(((*where, key), item))
                    elif isinstance(item, str) and needle in item.casefold():
                        scalar((*where, key), item)
            else:
                for key, item in node.items():
                    if isinstance(item, containers):
                        later.append(((*where, key), item))
                    elif (
                        isinstance(item, int | float)
                        and not isinstance(item, bool)
                        and item == number
                    ):
                        scalar((*where, key), item)
        elif isinstance(node, list):
            if needle is not None:
                for index, item in enumerate(node):
                    if isinstance(item, containers):
                        later.append(((*where, index), item))
                    elif isinstance(item, str) and needle in item.casefold():
                        scalar((*where, index), item)
            else:
                for index, item in enumerate(node):
                    if isinstance(item, containers):
                        later.append(((*where, index), item))
                    elif (
                        isinstance(item, int | float)
                        and not isinstance(item, bool)
                        and item == number
                    ):
                        scalar((*where, index), item)
        else:
            scalar(where, node)
        stack.extend(reversed(later))
    return _found(lines, total, text, number, path, budget, count)


def _found(
    lines: list[str],
    total: int,
    text: str | None,
    number: float | None,
    path: Sequence[str | int],
    budget: int,
    count: Count,
) -> str:
    """The text of ``find``'s answer: the first ``lines`` of ``total`` matches, as many as fit
    ``budget``, with how many more there are."""
    what = json.dumps(text, ensure_ascii=False) if text is not None else json.dumps(number)
    inside = "the payload" if not path else _show_path(path)
    if total == 0:
        searched = "keys and string values" if text is not None else "numbers"
        return f"No match for {what} in {inside} ({searched} searched)."
    while True:
        shown_n = len(lines)
        head = f"{_count(total, 'match')} for {what} in {inside}:"
        more = (
            f"… and {total - shown_n} more; search inside a path, or for a longer text, to "
            "narrow it down."
            if total > shown_n
            else ""
        )
        body = "\n".join([head, *lines, *([more] if more else [])])
        if count(body) <= budget or not lines:
            return body
        lines.pop()


def _snippet(value: str, needle: str, width: int = 80) -> str:
    if len(value) <= width:
        return json.dumps(value, ensure_ascii=False)
    at = max(value.casefold().find(needle) - width // 4, 0)
    piece = value[at : at + width]
    before = "…" if at else ""
    after = "…" if at + width < len(value) else ""
    return f"{before}{json.dumps(piece, ensure_ascii=False)}{after} ({len(value)} characters)"


def answer(
    name: str,
    arguments: str | Mapping[str, Any],
    shown: Any,
    budget: int,
    *,
    count: Count | None = None,
) -> str:
    """The tool result for one call of a read tool (``read_payload`` or ``find_in_payload``)
    with ``arguments`` (the call's JSON text or a mapping): a bad call gets an error text that
    says what was wrong and how to call it, never an exception."""
    try:
        if name == READ_PAYLOAD:
            parsed = _arguments(arguments, name, {"path", "start", "end"})
            path = _path_argument(parsed, name, required=True)
            start, end = _position(parsed, "start"), _position(parsed, "end")
            return read(shown, path, budget, start=start, end=end, count=count)
        if name == FIND_IN_PAYLOAD:
            parsed = _arguments(arguments, name, {"text", "number", "path"})
            path = _path_argument(parsed, name, required=False)
            text, number = parsed.get("text"), parsed.get("number")
            if (text is None) == (number is None):
                raise _ReadError(
                    f"Error: {name} needs either text or number (not both), such as "
                    f"{_example(name)}."
                )
            if text is not None and (not isinstance(text, str) or not text):
                raise _ReadError(
                    f"Error: text must be a non-empty string, found {json.dumps(text)}; to "
                    "find a number use number."
                )
            if number is not None and (
                isinstance(number, bool)
                or not isinstance(number, int | float)
                or not math.isfinite(number)
            ):
                raise _ReadError(
                    f"Error: number must be a number, found {json.dumps(number)}; to find "
                    "text use text."
                )
            return find(shown, budget, text=text, number=number, path=path, count=count)
        raise _ReadError(
            f"Error: there is no tool {name!r}; the read tools are {READ_PAYLOAD} and "
            f"{FIND_IN_PAYLOAD}."
        )
    except _ReadError as exc:
        return str(exc)
