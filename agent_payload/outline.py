"""Outlines of payloads larger than the model's context, and the reads that show the rest (pure).

When the payload as the user message would carry it is larger than ``max_payload_tokens``
(read scope applied), the agent sends an **outline** instead: the tree's shape within the
budget, and offers the model two read tools, ``read_payload`` and ``find_in_payload``, whose
answers this module computes. Everything here is a function of the data the model may see (the
read scope's projection, so a hidden path reads as absent) and of the budget; nothing does I/O.

The notation is the payload's own JSON with comments that are not data:

* ``/*n*/`` before an array element gives its position (as in the full payload);
* ``{/*12 keys*/}``, ``[/*50000 elements*/]`` stand for a container whose content is not shown;
* ``/*3 to 49998 not shown (49996 elements)*/`` marks elements left out of an array (an object:
  ``/*keys 40 to 199 not shown (160 keys)*/``, by position in the object);
* ``"text…"/*cut: 12000 characters in all*/`` is the beginning of a longer string.

``outline(data, budget)`` picks the most detailed of ``LEVELS`` whose text fits the budget
(counted with ``agent_payload._loop.estimate_tokens`` unless ``count`` is given): deeper
levels, more elements, more keys and longer strings first. ``answer(name, arguments, data,
budget)`` answers one read-tool call with a text for the model: the subtree (at its original
positions, outlined the same way when it does not fit) or the paths where a text or number
occurs; a bad call gets a precise error text, never an exception.

Paths are written as in the prompts and corrections: ``lines[3].sku``, ``customer.address``,
``["key.with.dots"]``; the whole payload is ``""`` or ``(root)``. A bare name is always a key
(``stats.2024`` is the key ``"2024"``).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from string import Template
from typing import Any

from agent_payload import prompts as _prompts
from agent_payload._jsondata import format_payload_path as _format_path
from agent_payload.usage import estimate_tokens

__all__ = [
    "CONTEXT_SHARE",
    "DEFAULT_MAX_PAYLOAD_TOKENS",
    "DEFAULT_MAX_READS",
    "FIND_IN_PAYLOAD",
    "FIND_LIMIT",
    "LEVELS",
    "MIN_PAYLOAD_TOKENS",
    "MODEL_CONTEXT_TOKENS",
    "READ_PAYLOAD",
    "READ_TOOLS",
    "Level",
    "PathSyntaxError",
    "answer",
    "context_window",
    "default_max_payload_tokens",
    "exceeds",
    "find",
    "last_read_note",
    "not_applied_note",
    "outline",
    "parse_path",
    "read",
    "tool_specs",
    "value_text",
]

READ_PAYLOAD = "read_payload"
FIND_IN_PAYLOAD = "find_in_payload"
READ_TOOLS = frozenset({READ_PAYLOAD, FIND_IN_PAYLOAD})

DEFAULT_MAX_PAYLOAD_TOKENS = 24_000
"""``max_payload_tokens`` for a model whose context window is not known (``MODEL_CONTEXT_TOKENS``
has no prefix of its name): fits the 32k-token context of small local models with room for the
system prompt (about 1,500 tokens), reads and the reply."""

CONTEXT_SHARE = 4
"""For a known model the default budget is its context window divided by this: the rest is
left for the system prompt, reads, corrections and the reply."""

MIN_PAYLOAD_TOKENS = 200
"""The smallest ``max_payload_tokens`` accepted: the outline of any payload fits it."""

DEFAULT_MAX_READS = 8
"""Read-tool calls (``read_payload``, ``find_in_payload``) a run may make."""

FIND_LIMIT = 20
"""``find_in_payload`` lists at most this many places (fewer when the budget is smaller)."""

MODEL_CONTEXT_TOKENS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("claude", 200_000),
)
"""Context windows (tokens) by model-name prefix; the longest matching prefix wins. A name
with a provider prefix (``openai/gpt-4o``) is looked up without it."""


def context_window(model_name: str | None) -> int | None:
    """The context window of ``model_name`` from ``MODEL_CONTEXT_TOKENS``, or None."""
    if not model_name:
        return None
    name = model_name.rsplit("/", 1)[-1].lower()
    best: tuple[int, int] | None = None
    for prefix, tokens in MODEL_CONTEXT_TOKENS:
        if name.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), tokens)
    return None if best is None else best[1]


def default_max_payload_tokens(model_name: str | None) -> int:
    """``context_window(model_name) // CONTEXT_SHARE`` when known, else
    ``DEFAULT_MAX_PAYLOAD_TOKENS``."""
    window = context_window(model_name)
    if window is None:
        return DEFAULT_MAX_PAYLOAD_TOKENS
    return max(MIN_PAYLOAD_TOKENS, window // CONTEXT_SHARE)


Count = Callable[[str], int]


def _estimate(text: str) -> int:
    return estimate_tokens(text)


# --- does the payload fit? -------------------------------------------------------------------


def _tokens_over(text: str, budget: int, count: Count) -> bool:
    """True when ``text`` counts more than ``budget`` tokens; counts piece by piece and stops
    as soon as the budget is passed (a 50 MB text costs what its first pieces cost)."""
    total = 0
    step = 20_000
    for start in range(0, len(text), step):
        total += count(text[start : start + step])
        if total > budget:
            return True
    return False


def exceeds(shown: Any, budget: int, *, count: Count | None = None) -> bool:
    """True when the payload ``shown`` (the read scope's projection), rendered as the user
    message carries it (``prompts.render_payload``), counts more than ``budget`` tokens.

    Its compact JSON is counted first (a piece at a time, stopping past the budget): when even
    that is over, the full rendering (which only adds index comments and line breaks) is never
    built."""
    count = count or _estimate
    from agent_payload import _jsontext

    compact = _jsontext.dumps(shown, ensure_ascii=False, separators=(",", ":"))
    if _tokens_over(compact, budget, count):
        return True
    return _tokens_over(_prompts.render_payload(shown), budget, count)


# --- levels of detail ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Level:
    """How much an outline shows: containers ``depth`` levels deep (deeper ones are a count),
    the first ``items`` elements of an array (and its last one), the first ``keys`` keys of an
    object, the first ``chars`` characters of a string."""

    depth: int
    items: int
    keys: int
    chars: int


FULL = Level(depth=100, items=10**12, keys=10**12, chars=10**12)
"""Everything (down to 100 levels): tried first for a read."""

LEVELS: tuple[Level, ...] = (
    Level(12, 20, 100, 400),
    Level(8, 10, 60, 200),
    Level(6, 5, 40, 120),
    Level(4, 3, 25, 80),
    Level(3, 2, 15, 60),
    Level(2, 1, 10, 40),
    Level(1, 1, 8, 30),
    Level(1, 0, 5, 20),
    Level(0, 0, 0, 0),
)
"""The outline's levels of detail, most detailed first; the last one shows only the root's
kind and size, and fits any budget of at least ``MIN_PAYLOAD_TOKENS``."""

INDEX_THRESHOLD = _prompts.DEFAULT_INDEX_THRESHOLD
CHARS_PER_TOKEN_CAP = 12
"""A rendering longer than ``budget * CHARS_PER_TOKEN_CAP`` characters is abandoned before it
is counted (no tokenizer packs JSON that densely), so a huge subtree costs little to refuse."""


class _TooLong(Exception):
    pass


_FENCE_CLOSE = re.compile(r"</(?=payload|schema|task)", re.IGNORECASE)


class _Writer:
    """Writes one outline at one level. ``cut`` tells whether anything was left out."""

    def __init__(self, level: Level, cap: int) -> None:
        self.level = level
        self.cap = cap
        self.size = 0
        self.out: list[str] = []
        self.cut = False

    def emit(self, text: str) -> None:
        self.size += len(text)
        if self.size > self.cap:
            raise _TooLong
        self.out.append(text)

    def text(self) -> str:
        return _FENCE_CLOSE.sub(r"<\\/", "".join(self.out))

    # -- values --

    def value(
        self, value: Any, depth: int, indent: int, window: tuple[int, int] | None = None
    ) -> None:
        if isinstance(value, dict):
            self.obj(value, depth, indent, window)
        elif isinstance(value, list):
            self.arr(value, depth, indent, window)
        elif isinstance(value, str):
            limit = self.level.chars
            if len(value) <= limit:
                self.emit(json.dumps(value, ensure_ascii=False))
            else:
                self.cut = True
                shown = json.dumps(value[:limit] + "…", ensure_ascii=False)
                self.emit(f"{shown}/*cut: {len(value)} characters in all*/")
        else:
            self.emit(json.dumps(value))

    def _break(self, indent: int) -> str:
        return "\n" + " " * indent

    def obj(
        self, value: dict[str, Any], depth: int, indent: int, window: tuple[int, int] | None
    ) -> None:
        n = len(value)
        if n == 0:
            self.emit("{}")
            return
        if depth <= 0:
            self.cut = True
            self.emit(f"{{/*{_count(n, 'key')}*/}}")
            return
        lo, hi = window if window is not None else (0, n)
        last = min(hi, lo + self.level.keys)
        broken = indent == 0  # the root's keys stand one per line
        self.emit("{")
        first = True
        if lo > 0:  # keys before the window read
            self.emit(self._break(indent + 1) if broken else "")
            self.emit(f"/*keys 0 to {lo - 1} not shown ({_count(lo, 'key')})*/")
        for key, item in itertools.islice(value.items(), lo, last):
            if not first:
                self.emit(",")
            first = False
            if broken:
                self.emit(self._break(indent + 1))
            self.emit(json.dumps(key, ensure_ascii=False) + ":")
            self.value(item, depth - 1, indent + 1 if broken else indent)
        if last < n:
            self.cut |= last < hi
            if broken:
                self.emit(self._break(indent + 1))
            self.emit(f"/*keys {last} to {n - 1} not shown ({_count(n - last, 'key')})*/")
        if broken:
            self.emit(self._break(indent))
        self.emit("}")

    def arr(
        self, value: list[Any], depth: int, indent: int, window: tuple[int, int] | None
    ) -> None:
        n = len(value)
        if n == 0:
            self.emit("[]")
            return
        if depth <= 0:
            self.cut = True
            self.emit(f"[/*{_count(n, 'element')}*/]")
            return
        lo, hi = window if window is not None else (0, n)
        wanted = self.level.items
        if hi - lo <= wanted + 1:
            positions: list[int] = list(range(lo, hi))
        else:
            positions = [*range(lo, lo + wanted), hi - 1]
        annotate = window is not None or n > INDEX_THRESHOLD or len(positions) < n
        containers = any(isinstance(value[i], dict | list) for i in positions)
        broken = indent == 0 or (annotate and containers)
        inner = indent + 1 if broken else indent
        self.emit("[")
        previous = -1

        def gap(start: int, end: int) -> None:  # elements start..end (inclusive) left out
            if lo <= end and start < hi:  # outside the window read, nothing is missing
                self.cut = True
            if broken:
                self.emit(self._break(inner))
            where = f"{start}" if start == end else f"{start} to {end}"
            self.emit(f"/*{where} not shown ({_count(end - start + 1, 'element')})*/")
            if not broken and end < n - 1:
                self.emit(" ")

        for number, i in enumerate(positions):
            if i > previous + 1:
                gap(previous + 1, i - 1)
            if broken:
                self.emit(self._break(inner))
            if annotate:
                self.emit(f"/*{i}*/")
            self.value(value[i], depth - 1, inner)
            if number < len(positions) - 1:
                self.emit(",")
            previous = i
        if previous < n - 1:
            gap(previous + 1, n - 1)
        if broken:
            self.emit(self._break(indent))
        self.emit("]")


def _count(n: int, noun: str) -> str:
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}es" if noun.endswith("ch") else f"{n} {noun}s"


def _render(
    value: Any, level: Level, cap: int, window: tuple[int, int] | None = None
) -> tuple[str, bool] | None:
    """``(text, complete)`` at ``level``, or None when longer than ``cap`` characters."""
    writer = _Writer(level, cap)
    try:
        writer.value(value, level.depth, 0, window)
    except _TooLong:
        return None
    return writer.text(), not writer.cut


def _fit(
    value: Any,
    budget: int,
    count: Count,
    levels: Sequence[Level],
    window: tuple[int, int] | None = None,
) -> tuple[str, bool]:
    """The most detailed rendering of ``value`` among ``levels`` that fits ``budget``."""
    cap = budget * CHARS_PER_TOKEN_CAP
    for level in levels:
        rendered = _render(value, level, cap, window)
        if rendered is not None and count(rendered[0]) <= budget:
            return rendered
    # The last level shows one count: it always fits a budget of MIN_PAYLOAD_TOKENS.
    rendered = _render(value, LEVELS[-1], 10**9, window)
    assert rendered is not None
    return rendered


def outline(shown: Any, budget: int, *, count: Count | None = None) -> str:
    """The outline of ``shown`` (the payload the model may see) within ``budget`` tokens."""
    return _fit(shown, budget, count or _estimate, LEVELS)[0]


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
        return _read(shown, tuple(path), budget, start, end, count or _estimate)
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
    count = count or _estimate
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
    count = count or _estimate
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

    # An explicit stack (any depth); a path is built only for a container or a match.
    stack: list[tuple[tuple[str | int, ...], Any]] = [(tuple(path), root)]
    while stack:
        where, node = stack.pop()
        later: list[tuple[tuple[str | int, ...], Any]] = []
        if isinstance(node, dict):
            for key, item in node.items():
                if needle is not None and needle in key.casefold():
                    hit((*where, key), f" (the key {json.dumps(key, ensure_ascii=False)})")
                if isinstance(item, dict | list):
                    later.append(((*where, key), item))
                elif _may_match(item, needle, number):
                    scalar((*where, key), item)
        elif isinstance(node, list):
            for index, item in enumerate(node):
                if isinstance(item, dict | list):
                    later.append(((*where, index), item))
                elif _may_match(item, needle, number):
                    scalar((*where, index), item)
        else:
            scalar(where, node)
        stack.extend(reversed(later))
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


def _may_match(value: Any, needle: str | None, number: float | None) -> bool:
    """A cheap test before the path of ``value`` is built."""
    if needle is not None:
        return isinstance(value, str) and needle in value.casefold()
    return isinstance(value, int | float) and not isinstance(value, bool) and value == number


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
