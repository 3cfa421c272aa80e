"""Outlines (pure): the budget (known context windows, the default), whether a payload fits,
the levels of detail, and the writer that renders a value at the most detailed that fits."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_payload import _jsontext
from agent_payload import prompts as _prompts
from agent_payload._paths import counted
from agent_payload.errors import ConfigurationError
from agent_payload.usage import estimate_tokens

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
    known = [
        (len(prefix), tokens) for prefix, tokens in MODEL_CONTEXT_TOKENS if name.startswith(prefix)
    ]
    return max(known)[1] if known else None


def default_max_payload_tokens(model_name: str | None) -> int:
    """``context_window(model_name) // CONTEXT_SHARE`` when known, else
    ``DEFAULT_MAX_PAYLOAD_TOKENS``."""
    window = context_window(model_name)
    if window is None:
        return DEFAULT_MAX_PAYLOAD_TOKENS
    return max(MIN_PAYLOAD_TOKENS, window // CONTEXT_SHARE)


def resolve_max_payload_tokens(value: Any, model_name: str | None, where: str) -> int | None:
    """``max_payload_tokens`` as the agent and the tool handler take it: ``"auto"`` from the
    model's name (``default_max_payload_tokens``; no name: the default), ``None`` (never
    outline) as is, an int >= ``MIN_PAYLOAD_TOKENS`` checked; ``ConfigurationError`` else."""
    if value is None:
        return None
    if value == "auto":
        return default_max_payload_tokens(model_name)
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_PAYLOAD_TOKENS:
        raise ConfigurationError(
            f"{where}max_payload_tokens: expected an int >= {MIN_PAYLOAD_TOKENS}, 'auto' or None "
            f"(never outline), found {value!r}"
        )
    return value


Count = Callable[[str], int]


# --- does the payload fit? -------------------------------------------------------------------


def _tokens_over(pieces: Iterable[str], budget: int, count: Count) -> bool:
    """Whether ``pieces`` count over ``budget`` tokens (read 20,000 characters at a time)."""
    total = 0
    step = 20_000
    buffered: list[str] = []
    size = 0
    for piece in pieces:
        buffered.append(piece)
        size += len(piece)
        if size < step:
            continue
        text = "".join(buffered)
        whole = len(text) - len(text) % step
        for start in range(0, whole, step):
            total += count(text[start : start + step])
            if total > budget:
                return True
        buffered, size = [text[whole:]], len(text) - whole
    return size > 0 and total + count("".join(buffered)) > budget


# _compact_pieces writes containers _OPENED_DEPTH levels deep a part at a time: an object of at
# most _OPENED_KEYS keys one key at a time, a larger one or an array in slices growing to _SLICE.
_OPENED_DEPTH = 3
_OPENED_KEYS = 64
_SLICE = 1_024


def _compact_pieces(value: Any, depth: int = _OPENED_DEPTH) -> Iterator[str]:
    """The compact JSON of ``value`` in lazy pieces (``json`` writes below ``depth``)."""
    t = type(value)
    if depth > 0 and t is dict and value and all(type(key) is str for key in value):
        if len(value) <= _OPENED_KEYS:
            separator = "{"
            for key, item in value.items():
                yield separator + _COMPACT.encode(key) + ":"
                yield from _compact_pieces(item, depth - 1)
                separator = ","
            yield "}"
            return
        items = iter(value.items())
        yield "{"
        size = 1
        first = True
        while part := dict(itertools.islice(items, size)):
            yield ("" if first else ",") + _compact(part)[1:-1]
            first = False
            size = min(2 * size, _SLICE)
        yield "}"
    elif depth > 0 and t is list and value:
        yield "["
        yield from _compact_pieces(value[0], depth - 1)
        start, size = 1, 1
        while start < len(value):
            yield "," + _compact(value[start : start + size])[1:-1]
            start += size
            size = min(2 * size, _SLICE)
        yield "]"
    else:
        yield _compact(value)


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # one for all parts


def _compact(value: Any) -> str:
    try:
        return _COMPACT.encode(value)
    except RecursionError:  # deeper than json goes: the same text by _jsontext's writer
        return _jsontext.dumps(value, ensure_ascii=False, separators=(",", ":"))


def exceeds(shown: Any, budget: int, *, count: Count | None = None) -> bool:
    """True when the payload ``shown`` (the read scope's projection), rendered as the user
    message carries it (``prompts.render_payload``), counts more than ``budget`` tokens. Its
    compact JSON is counted first: when even that is over, the rendering is never built."""
    count = count or estimate_tokens
    if _tokens_over(_compact_pieces(shown), budget, count):
        return True
    return _tokens_over((_prompts.render_payload(shown),), budget, count)


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


@dataclass
class _Writer:
    """Writes one outline at one level. ``cut`` tells whether anything was left out."""

    level: Level
    cap: int
    size: int = 0
    out: list[str] = field(default_factory=list)
    cut: bool = False

    def emit(self, text: str) -> None:
        self.size += len(text)
        if self.size > self.cap:
            raise _TooLong
        self.out.append(text)

    def text(self) -> str:
        return _prompts._escape_fences("".join(self.out))

    # -- values --

    def value(
        self, value: Any, depth: int, indent: int, window: tuple[int, int] | None = None
    ) -> None:
        if isinstance(value, dict | list):
            keyed = isinstance(value, dict)
            if not value:
                self.emit("{}" if keyed else "[]")
            elif depth <= 0:  # a count stands for the content
                self.cut = True
                what = counted(len(value), "key" if keyed else "element")
                self.emit(f"{{/*{what}*/}}" if keyed else f"[/*{what}*/]")
            elif isinstance(value, dict):
                self.obj(value, depth, indent, window)
            else:
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
        lo, hi = window if window is not None else (0, n)
        last = min(hi, lo + self.level.keys)
        broken = indent == 0  # the root's keys stand one per line
        self.emit("{")
        first = True
        if lo > 0:  # keys before the window read
            self.emit(self._break(indent + 1) if broken else "")
            self.emit(f"/*keys 0 to {lo - 1} not shown ({counted(lo, 'key')})*/")
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
            self.emit(f"/*keys {last} to {n - 1} not shown ({counted(n - last, 'key')})*/")
        if broken:
            self.emit(self._break(indent))
        self.emit("}")

    def arr(
        self, value: list[Any], depth: int, indent: int, window: tuple[int, int] | None
    ) -> None:
        n = len(value)
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
            self.emit(f"/*{where} not shown ({counted(end - start + 1, 'element')})*/")
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
    return _fit(shown, budget, count or estimate_tokens, LEVELS)[0]
