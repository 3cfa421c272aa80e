"""JSON text of any depth: ``dumps`` as ``json.dumps`` writes it and ``loads_file`` as a file
holds it, without ``json``'s recursion limit (about 1,000 levels; the merge accepts 20,000).

Both use ``json`` (in C) and fall back to an explicit-stack writer or reader only when it runs
out of recursion (or, reading, meets something to refuse). Files (through ``_files``) keep
their numbers: a number whose shortest float form is not its text (``1E-400``, ``12.50``) is
read as a ``JsonNumber`` and written back as that text (``dumps(..., literals=True)``).
"""

from __future__ import annotations

import json
import marshal
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from json.decoder import JSONDecodeError
from typing import Any

scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]

__all__ = [
    "JsonNumber",
    "NotJsonData",
    "TooDeepError",
    "dump_pieces",
    "dumps",
    "loads_file",
    "reject_constant",
    "unique_object",
]

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_CONSTANTS: dict[str, Any] = {"null": None, "true": True, "false": False}
_NON_FINITE = ("NaN", "Infinity", "-Infinity")


class JsonNumber(float):
    """A number read from a file whose shortest float form is not its text (``1E-400`` is
    ``0.0`` as a float, ``12.50`` is ``12.5``): a float for arithmetic and comparison, and
    ``literal``, the text it is written back as (``dumps(..., literals=True)``)."""

    __slots__ = ("literal",)
    literal: str

    def __new__(cls, literal: str) -> JsonNumber:
        number = super().__new__(cls, literal)
        number.literal = literal
        return number

    def __getnewargs__(self) -> tuple[str]:  # type: ignore[override]
        return (self.literal,)

    def __repr__(self) -> str:
        return self.literal

    # Equal to a number when the decimal numbers they write are equal (a float as its shortest
    # form, as JSON writes it): 12.50 equals 12.5, but 1E-400 is not 0, whatever the floats
    # say, so a model that writes 0 there changes the value. The hash stays the float's (equal
    # numbers have equal floats).
    __hash__ = float.__hash__

    def __eq__(self, other: object) -> bool:
        theirs = _decimal(other)
        if theirs is None:
            return float.__eq__(self, other)
        return Decimal(self.literal) == theirs

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal


def _decimal(number: object) -> Decimal | None:
    """The decimal number JSON writes for ``number`` (None: not a finite JSON number)."""
    if type(number) is JsonNumber:
        return Decimal(number.literal)
    if isinstance(number, bool) or not isinstance(number, int | float):
        return None
    if isinstance(number, int):
        return Decimal(int(number))
    if number - number != 0.0:
        return None
    return Decimal(float.__repr__(number))


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` at any depth: ``dump_pieces`` joined (the same options)."""
    return "".join(dump_pieces(value, **options))


def compact(value: Any) -> str:
    return dumps(value, separators=(",", ":"), literals=True, allow_nan=False)  # a stored column


def dump_pieces(
    value: Any,
    *,
    indent: int | str | None = None,
    ensure_ascii: bool = False,
    separators: tuple[str, str] | None = None,
    literals: bool = False,
    allow_nan: bool = True,
) -> list[str]:
    """``json.dumps`` at any depth, as pieces of a few tens of KB whose concatenation is the
    text (a large payload's text is never whole in memory). Data too deep for ``json`` is
    written without ``indent`` (N levels of indentation cost about N squared characters). With
    ``literals``, a ``JsonNumber`` is written as the text it was read from."""
    depth = _literal_depth(value) if literals else None
    if depth is None:
        encoder = json.JSONEncoder(
            indent=indent, ensure_ascii=ensure_ascii, separators=separators, allow_nan=allow_nan
        )
        try:
            if indent is None or isinstance(value, str):
                return [encoder.encode(value)]
            return _pieces(encoder.iterencode(value))
        except RecursionError:
            depth = _INDENT_DEPTH
    if depth >= _INDENT_DEPTH and indent is not None:
        indent, separators = None, (",", ":")
    item_sep, key_sep = separators or ((",", ": ") if indent is not None else (", ", ": "))
    return _pieces(_chunks_iterative(value, indent, ensure_ascii, item_sep, key_sep, allow_nan))


def _pieces(chunks: Iterable[str], batch: int = 8192) -> list[str]:
    """``chunks`` joined ``batch`` at a time (``json.dumps`` with ``indent`` lists every small
    chunk first: several times the text's size for a large file)."""
    parts: list[str] = []
    pending: list[str] = []
    for chunk in chunks:
        pending.append(chunk)
        if len(pending) >= batch:
            parts.append("".join(pending))
            pending.clear()
    parts.append("".join(pending))
    return parts


_INDENT_DEPTH = 900  # data with literals is indented up to this depth (as ``json`` would)


def _literal_depth(value: Any) -> int | None:
    """The nesting depth of ``value`` if it holds a ``JsonNumber`` (None if it holds none);
    ``marshal`` (exact types only, a few hundred levels) answers most data at C speed."""
    try:
        marshal.dumps(value, 2)
        return None
    except ValueError:
        pass
    found = type(value) is JsonNumber
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        values = node.values() if isinstance(node, dict) else node
        kinds = set(map(type, values))
        found = found or JsonNumber in kinds
        if not kinds <= _LEAF_TYPES:
            stack.extend((v, depth + 1) for v in values if isinstance(v, dict | list))
    return deepest if found else None


_LEAF_TYPES = frozenset({str, int, float, bool, type(None), JsonNumber})


def _chunks_iterative(
    value: Any,
    indent: int | str | None,
    ensure_ascii: bool,
    item_sep: str,
    key_sep: str,
    allow_nan: bool,
) -> Iterator[str]:
    # Items: ("v", value, level) to write a value; ("t", text, 0) to emit text.
    stack: list[tuple[str, Any, int]] = [("v", value, 0)]
    step = " " * indent if isinstance(indent, int) else indent

    def newline(level: int) -> str:
        return "" if step is None else "\n" + step * level

    string = _ENCODE_ASCII if ensure_ascii else _ENCODE

    def scalar(item: Any) -> str:  # as json writes it (its own functions for the usual types)
        kind = type(item)
        if kind is str:
            return string(item)
        if kind is int:
            return int.__repr__(item)
        if kind is float and item - item == 0.0:
            return float.__repr__(item)
        if kind is JsonNumber:
            literal: str = item.literal
            return literal
        return json.dumps(item, ensure_ascii=ensure_ascii, allow_nan=allow_nan)

    while stack:
        kind, item, level = stack.pop()
        if kind == "t":
            yield item
            continue
        if isinstance(item, dict) and item:
            yield "{"
            stack.append(("t", newline(level) + "}", 0))
            entries = list(item.items())
            for n in range(len(entries) - 1, -1, -1):
                key, child = entries[n]
                stack.append(("v", child, level + 1))
                prefix = (item_sep if n else "") + newline(level + 1)
                stack.append(("t", prefix + scalar(_key(key)) + key_sep, 0))
        elif isinstance(item, list | tuple) and item:
            yield "["
            stack.append(("t", newline(level) + "]", 0))
            for n in range(len(item) - 1, -1, -1):
                stack.append(("v", item[n], level + 1))
                stack.append(("t", (item_sep if n else "") + newline(level + 1), 0))
        else:
            yield scalar(item)


_ENCODE: Callable[[str], str] = json.encoder.encode_basestring
_ENCODE_ASCII: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def loads_file(text: str, *, max_depth: int | None = None) -> Any:
    """JSON text as a file holds it, read exactly at any depth: numbers a float would change
    are ``JsonNumber``; ``NaN``, a duplicate key and a number beyond any float (or an integer
    longer than Python reads) are ``JSONDecodeError`` at their line and column; text nested
    deeper than ``max_depth`` raises ``TooDeepError`` as soon as the reader gets there."""
    try:
        return json.loads(
            text,
            parse_constant=reject_constant,
            parse_float=_exact_float,
            parse_int=_exact_int,
            object_pairs_hook=unique_object,
        )
    except (NotJsonData, RecursionError):
        # The fast reader met something to refuse (it has no position to give) or great
        # depth: the explicit-stack reader reads again and says where.
        return _loads_iterative(text, max_depth)


class NotJsonData(ValueError):
    """Raised by the strict decoding hooks (``json``'s, here and in the reply parser) for
    text ``json`` reads that is not JSON data: a slower reader then says where and why."""


def reject_constant(name: str) -> Any:
    """``parse_constant`` for strict decoding: ``NaN`` and the infinities are not JSON."""
    raise NotJsonData(name)


def _exact_float(text: str) -> float:
    number = float(text)
    if number - number != 0.0:
        raise NotJsonData
    return number if float.__repr__(number) == text else JsonNumber(text)


def _exact_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # longer than sys.get_int_max_str_digits()
        raise NotJsonData from None


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for strict decoding: a key given twice is refused."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise NotJsonData("duplicate key")
    return obj


class TooDeepError(ValueError):
    """JSON text nested deeper than ``loads(max_depth=...)``; ``pos`` is where."""

    def __init__(self, max_depth: int, pos: int) -> None:
        super().__init__(f"nested more than {max_depth:,} levels deep (at character {pos:,})")
        self.max_depth = max_depth
        self.pos = pos


def _loads_iterative(text: str, max_depth: int | None = None) -> Any:
    """The explicit-stack reader: syntax errors as ``json`` reports them, and what
    ``loads_file`` refuses as a ``JSONDecodeError`` at its position."""
    end = len(text)
    # Each frame is [container, key, where the key starts] (key: the member being read).
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
                start = pos
                key, pos = key_at(pos)
                stack.append([{}, key, start])
                if max_depth is not None and len(stack) > max_depth:
                    raise TooDeepError(max_depth, pos)
                continue
        elif char == "[":
            pos = ws(pos + 1)
            if pos < end and text[pos] == "]":
                value, pos = [], pos + 1
            else:
                stack.append([[], None, 0])
                if max_depth is not None and len(stack) > max_depth:
                    raise TooDeepError(max_depth, pos)
                continue
        elif char == '"':
            value, pos = scanstring(text, pos + 1)
        else:
            value, pos = _scalar_at(text, pos)
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
                if frame[1] in container:
                    name = json.dumps(frame[1], ensure_ascii=False)
                    raise JSONDecodeError(
                        f"the key {name} given twice in one object", text, frame[2]
                    )
                container[frame[1]] = value
            else:
                container.append(value)
            pos = ws(pos)
            if pos < end and text[pos] == ",":
                pos = ws(pos + 1)
                if isinstance(container, dict):
                    frame[2] = pos
                    frame[1], pos = key_at(pos)
                break
            closer = "}" if isinstance(container, dict) else "]"
            if pos < end and text[pos] == closer:
                stack.pop()
                value, pos = container, pos + 1
                continue
            raise JSONDecodeError("Expecting ',' delimiter", text, pos)


def _scalar_at(text: str, pos: int) -> tuple[Any, int]:
    for word, value in _CONSTANTS.items():
        if text.startswith(word, pos):
            return value, pos + len(word)
    for word in _NON_FINITE:
        if text.startswith(word, pos):
            raise JSONDecodeError(f"{word} is not valid JSON (use null or a string)", text, pos)
    match = _NUMBER.match(text, pos)
    if match is None:
        raise JSONDecodeError("Expecting value", text, pos)
    integer, fraction, exponent = match.groups()
    literal = match.group()
    if not (fraction or exponent):
        try:
            return int(integer), match.end()
        except ValueError:  # longer than sys.get_int_max_str_digits()
            raise JSONDecodeError(
                f"an integer of {len(integer):,} digits, longer than can be read "
                f"({sys.get_int_max_str_digits():,} digits at most)",
                text,
                pos,
            ) from None
    number = float(literal)
    if number - number != 0.0:
        raise JSONDecodeError(
            f"the number {literal} is beyond the range of a 64-bit float (about 1.8e308), so it "
            "cannot be read exactly",
            text,
            pos,
        )
    if float.__repr__(number) != literal:
        return JsonNumber(literal), match.end()
    return number, match.end()
