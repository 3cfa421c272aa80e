"""The lenient reader: strict JSON, JSON5 and Python literals, with every position known.
Nothing is inferred: anything outside the grammar is ``_Damage`` at its position."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Final

_CONTROL_CHARS = "accepted raw control characters inside strings"

MAX_REPLY_DEPTH: Final = 250
"""Deepest nesting of objects and arrays read from a reply (the change request itself is level
1). Deeper replies are a syntax error about depth; the change-request model cannot hold more."""

_MAX_DIGITS: Final = 4300  # Python's int/str conversion limit: JSON data cannot carry more

_SPACE: Final = re.compile(r"[ \t\n\r\f\v\u00a0\u2028\u2029\ufeff]*")
_DSTR: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_PLAIN_DSTR: Final = re.compile(r'"[^"\\\x00-\x1f]*"')
_SSTR: Final = re.compile(r"'[^'\\]*(?:\\.[^'\\]*)*'", re.DOTALL)
_JSON_NUMBER: Final = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?(?![\w$.])")
_NUMBER5: Final = re.compile(
    r"[+-]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?![\w$.])"
)
_WORD: Final = re.compile(r"(?:[^\W\d]|\$)[\w$]*")
_BAD_NUMBER: Final = re.compile(r"[\w$.+\-]+")
_RAW_CONTROL: Final = re.compile(r"[\x00-\x1f]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_ESCAPE5: Final = re.compile(
    r"\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|(\r\n|[\n\r\u2028\u2029])|([^1-9xu]))|\\(.?)",
    re.DOTALL,
)
_SIMPLE_ESCAPES: Final[dict[str, str]] = {
    "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "0": "\0",
}  # fmt: skip
_LITERALS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None}
_PY_LITERALS: Final[dict[str, Any]] = {"True": True, "False": False, "None": None}
_COMMENT_REPAIR: Final[dict[str, str]] = {
    "//": "stripped // comments (json5)",
    "/*": "stripped /* */ comments (json5)",
    "#": "stripped # comments",
}
_JSON5_SYNTAX = "read JSON5 syntax (json5)"
_POSITIONAL: Final[frozenset[str]] = frozenset(
    {"updateElements", "removeElements", "update_elements", "remove_elements"}
)


class _Damage(Exception):
    """The text cannot be read at ``pos``: ``what`` went wrong, ``hint`` says what to write."""

    def __init__(
        self, pos: int, what: str, hint: str = "", *, eof: bool = False, depth: bool = False
    ) -> None:
        super().__init__(what)
        self.pos = pos
        self.what = what
        self.hint = hint
        self.eof = eof
        self.depth = depth
        self.resume = pos + 1


_quoted: Final = json.encoder.encode_basestring_ascii
"""``json.dumps`` of a string (the same text; the C function itself, a hot path's cost)."""


def _found(text: str, pos: int) -> str:
    """What stands at ``pos``, for an error message."""
    if pos >= len(text):
        return "the end of the reply"
    word = _WORD.match(text, pos)
    if word is not None:
        return f"the bare word {word.group()[:40]}"
    char = text[pos]
    if char.isspace():
        return "a line break" if char in "\r\n" else "a space"
    return json.dumps(char, ensure_ascii=False)


def _bare_word(word: str, pos: int) -> _Damage:
    """The damage of ``word`` where a value should be (no JSON or Python literal)."""
    if word in ("NaN", "Infinity"):
        return _Damage(pos, f"{word}, which is not a JSON number", "use a number or null instead.")
    near = (
        difflib.get_close_matches(word.lower(), ("true", "false", "null"), n=1, cutoff=0.6)
        if len(word) <= 6 and word[0] in "tfnTFN"
        else []
    )
    if word == "undefined":
        hint = "write null for no value."
    elif near:
        hint = f"did you mean {near[0]}? If it is text, quote it: {_quoted(word)}."
    else:
        hint = f"text must be quoted: {_quoted(word)}."
    return _Damage(pos, f"the bare word {word[:40]} where a value should be", hint)


class _Grammar:
    """A reader for one value; anything outside the grammar is ``_Damage`` at its position."""

    __slots__ = ("array_comments", "context", "repairs", "text")

    def __init__(self, text: str, context: str | None = None) -> None:
        self.text = text
        self.repairs: dict[str, None] = {}
        # comments written inside arrays, with the top-level key(s) they sit under
        self.array_comments: list[tuple[int, tuple[str, ...]]] = []
        self.context: list[str] = [context] if context else []

    def read_object(self, pos: int) -> tuple[Any, int]:
        """The object opening at ``pos``, and the position just past it."""
        value, end = self._object(pos, 1)
        for at, keys in self.array_comments:
            if _POSITIONAL.intersection(keys):
                raise _Damage(
                    at,
                    "a comment inside an array of updateElements/removeElements",
                    "an array there is positional: a comment cannot stand for elements, so "
                    "the elements after it would land on the wrong positions. Write one {} per "
                    "element kept unchanged, or use an index map such as "
                    '{"3": {"qty": 99}} to change elements by position.',
                )
        return value, end

    def read_whole(self) -> Any:
        """The text as exactly one object (blank space around it only)."""
        start = self.gap(0, False)
        if self.text[start : start + 1] != "{":
            raise _Damage(start, f"expected an object, found {_found(self.text, start)}")
        value, end = self.read_object(start)
        end = self.gap(end, False)
        if end < len(self.text):
            raise _Damage(
                end,
                f"unexpected {_found(self.text, end)} after the object",
                "send exactly one JSON object.",
            )
        return value

    # -- blanks and comments --

    def gap(self, pos: int, in_array: bool) -> int:
        text = self.text
        if text[pos : pos + 1] not in _GAP_CHARS:
            return pos  # the common case: nothing to skip
        while True:
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            char = text[pos : pos + 1]
            if char == "/" and text[pos + 1 : pos + 2] == "*":
                close = text.find("*/", pos + 2)
                if close == -1:
                    raise _Damage(pos, "a /* comment that never closes", eof=True)
                end, kind = close + 2, "/*"
            elif char == "#" or (char == "/" and text[pos + 1 : pos + 2] == "/"):
                newline = _LINE_END.search(text, pos)
                end = len(text) if newline is None else newline.start()
                kind = "#" if char == "#" else "//"
            elif char == "/" and pos + 1 == len(text):  # the reply ends where a comment starts
                raise _Damage(pos, "the reply ends inside a comment", eof=True)
            else:
                return pos
            if in_array:
                self.array_comments.append((pos, tuple(self.context[:2])))
            self.repairs[_COMMENT_REPAIR[kind]] = None
            pos = end

    # -- values --

    def _value(self, pos: int, depth: int) -> tuple[Any, int]:
        text = self.text
        char = text[pos : pos + 1]
        if char == '"':
            return self._string(pos, _DSTR)
        if char == "{":
            return self._object(pos, depth + 1)
        if char == "[":
            return self._array(pos, depth + 1)
        if char and char in "-0123456789+.":
            return self._number(pos)
        if char == "'":
            self.repairs["read single-quoted strings (json5)"] = None
            return self._string(pos, _SSTR)
        if not char:
            raise _Damage(pos, "the reply ends where a value should be", eof=True)
        match = _WORD.match(text, pos)
        if match is None:
            raise _Damage(pos, f"expected a value, found {_found(text, pos)}")
        word = match.group()
        if word in _LITERALS:
            return _LITERALS[word], match.end()
        if match.end() == len(text):
            raise _Damage(pos, "the reply ends inside a word", eof=True)
        if word in _PY_LITERALS:
            self.repairs["converted Python literals True/False/None to JSON"] = None
            return _PY_LITERALS[word], match.end()
        raise _bare_word(word, pos)

    def _string(self, pos: int, pattern: re.Pattern[str]) -> tuple[str, int]:
        if pattern is _DSTR:  # the common case first: no escape, no control character
            plain = _PLAIN_DSTR.match(self.text, pos)
            if plain is not None:
                text = plain.group()[1:-1]
                if text.isascii() or _SURROGATE.search(text) is None:
                    return text, plain.end()
        match = pattern.match(self.text, pos)
        if match is None:
            raise _Damage(pos, "a string that never closes", eof=True)
        raw = match.group()
        value: str | None = None
        if raw[0] == '"':
            try:
                value = json.decoder.scanstring(raw, 1, False)[0]  # type: ignore[attr-defined]
            except ValueError:
                value = None
        if value is None:
            value = self._escapes(raw, pos)
        if _RAW_CONTROL.search(raw) is not None:
            self.repairs[_CONTROL_CHARS] = None
        if _SURROGATE.search(value) is not None:
            # join escaped pairs (\ud83d\ude80) read one by one; a lone surrogate stays
            value = value.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
            if _SURROGATE.search(value) is not None:
                raise _Damage(
                    pos,
                    "a string holding a lone UTF-16 surrogate (such as \\ud800)",
                    "a surrogate is only valid in a pair (\\ud83d\\ude80); write the character "
                    "itself or its full pair.",
                )
        return value, match.end()

    def _escapes(self, raw: str, pos: int) -> str:
        """A string with escapes beyond JSON's: JSON5's (``\\x41``, ``\\'``, ``\\v``, ``\\0``,
        a line continuation, any other character standing for itself)."""

        def one(match: re.Match[str]) -> str:
            code, byte, newline, char, bad = match.groups()
            if code is not None:
                return chr(int(code, 16))
            self.repairs[_JSON5_SYNTAX] = None
            if byte is not None:
                return chr(int(byte, 16))
            if newline is not None:
                return ""
            if char is not None:
                if char == "0" and match.end() < len(body) and body[match.end()].isdigit():
                    raise _Damage(pos, "an octal escape in a string", "use \\u0000 escapes.")
                return _SIMPLE_ESCAPES.get(char, char)
            raise _Damage(
                pos + 1 + match.start(),
                f"the escape \\{bad} in a string",
                'JSON escapes are \\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX.',
            )

        body = raw[1:-1]
        if "\\" not in body:
            return body
        return _ESCAPE5.sub(one, body)

    def _number(self, pos: int) -> tuple[Any, int]:
        text = self.text
        match = _JSON_NUMBER.match(text, pos)
        json5 = match is None
        if json5:
            match = _NUMBER5.match(text, pos)
            if match is None:
                bad = _BAD_NUMBER.match(text, pos)
                shown = bad.group()[:40] if bad else text[pos : pos + 1]
                if bad is not None and bad.end() >= len(text):  # 1e+ at the very end: cut off
                    raise _Damage(pos, "the reply ends inside a number", eof=True)
                raise _Damage(pos, f"the malformed number {shown}", "write a JSON number.")
        token = match.group()  # type: ignore[union-attr]
        digits = sum(c.isdigit() for c in token)
        if digits > _MAX_DIGITS:
            raise _Damage(
                pos,
                f"a number with {digits} digits (JSON data carries at most {_MAX_DIGITS})",
                "write it as a string if it must be kept exactly.",
            )
        body = token.lstrip("+-")
        sign = -1 if token.startswith("-") else 1
        if body[:2] in ("0x", "0X"):
            value: Any = sign * int(body, 16)
        elif len(body) > 1 and body[0] == "0" and body[1].isdigit():
            raise _Damage(pos, f"the number {token[:40]} with a leading zero", "write it plainly.")
        elif json5 is False and match.group(1) is None and match.group(2) is None:  # type: ignore[union-attr]
            return int(token), match.end()  # type: ignore[union-attr]
        elif "." in body or "e" in body or "E" in body:
            value = sign * float(body)
            if value - value != 0.0:
                raise _Damage(
                    pos,
                    f"the number {token[:40]}, which overflows to infinity",
                    "JSON data cannot hold it; use a smaller number or a string.",
                )
        else:
            value = sign * int(body)
        if json5:
            self.repairs[_JSON5_SYNTAX] = None
        return value, match.end()  # type: ignore[union-attr]

    # -- containers --

    def _object(self, pos: int, depth: int) -> tuple[dict[str, Any], int]:
        if depth > MAX_REPLY_DEPTH:
            raise _Damage(pos, "", depth=True)
        text = self.text
        pairs: dict[str, Any] = {}
        pos = self.gap(pos + 1, False)
        if text[pos : pos + 1] == "}":
            return pairs, pos + 1
        track = depth <= 2
        while True:
            key, pos = self._key(pos)
            if key in pairs:
                raise _Damage(
                    pos,
                    f"the key {json.dumps(key, ensure_ascii=False)} given twice in one object",
                    "a JSON reader keeps only the last, so the first would be lost: put "
                    "everything for that key under one occurrence.",
                )
            pos = self.gap(pos, False)
            if text[pos : pos + 1] != ":":
                raise self._no_colon(key, pos)
            pos = self.gap(pos + 1, False)
            if text[pos : pos + 1] in (",", "}"):
                raise _Damage(
                    pos,
                    f"the key {json.dumps(key, ensure_ascii=False)} has no value",
                    'write the value (null, "" or {} if that is what you mean).',
                )
            if track:
                self.context.append(key)
            pairs[key], pos = self._value(pos, depth)
            if track:
                self.context.pop()
            closed, pos = self._after_item(pos, "}", f"the value of {_quoted(key)}")
            if closed:
                return pairs, pos
            char = text[pos : pos + 1]
            if char == ",":
                raise _Damage(pos, "two commas in a row in an object", "remove one.")
            if char and (char.isdigit() or char in "-+."):
                raise _Damage(
                    pos,
                    f"a number where a key should be, after the value of {json.dumps(key)}",
                    "a decimal comma? Numbers use a decimal point (12.5); keys are quoted.",
                )

    def _key(self, pos: int) -> tuple[str, int]:
        text = self.text
        char = text[pos : pos + 1]
        if char == '"':
            return self._string(pos, _DSTR)
        if char == "'":
            self.repairs["read single-quoted strings (json5)"] = None
            return self._string(pos, _SSTR)
        word = _WORD.match(text, pos)
        if word is not None:
            self.repairs["read unquoted keys (json5)"] = None
            return word.group(), word.end()
        if not char:
            raise _Damage(pos, "the reply ends where a key should be", eof=True)
        raise _Damage(
            pos,
            f"expected a key (a quoted string), found {_found(text, pos)}",
            'keys are strings: write "2", not 2.' if char.isdigit() else "",
        )

    def _no_colon(self, key: str, pos: int) -> _Damage:
        if pos >= len(self.text):
            return _Damage(pos, "the reply ends after a key", eof=True)
        name = json.dumps(key, ensure_ascii=False)
        if self.text[pos] in ",}":
            return _Damage(
                pos,
                f"the key {name} has no ':' and no value (a set such as {{{name}}} is not JSON)",
                'write "key": value; for a list of values use an array [...].',
            )
        return _Damage(pos, f"expected ':' after the key {name}, found {_found(self.text, pos)}")

    def _after_item(self, pos: int, close: str, after: str) -> tuple[bool, int]:
        """After an item: (closed, the next position); a trailing comma is read as JSON5."""
        in_array = close == "]"
        text = self.text
        pos = self.gap(pos, in_array)
        char = text[pos : pos + 1]
        if char == close:
            return True, pos + 1
        if char != ",":
            if pos >= len(text):
                raise _Damage(pos, "the reply ends inside an object or array", eof=True)
            raise _Damage(
                pos,
                f"expected ',' or '{close}' after {after}, found {_found(text, pos)}",
                "a comma is missing between two items, or a string is not closed or quoted.",
            )
        pos = self.gap(pos + 1, in_array)
        if text[pos : pos + 1] == close:
            self.repairs["removed trailing commas (json5)"] = None
            return True, pos + 1
        return False, pos

    def _array(self, pos: int, depth: int) -> tuple[list[Any], int]:
        if depth > MAX_REPLY_DEPTH:
            raise _Damage(pos, "", depth=True)
        text = self.text
        items: list[Any] = []
        pos = self.gap(pos + 1, True)
        if text[pos : pos + 1] == "]":
            return items, pos + 1
        while True:
            if text[pos : pos + 1] == ",":
                raise _Damage(
                    pos,
                    f"an empty position in an array (a hole before element {len(items)})",
                    "every position needs a value: write {} for an element kept unchanged "
                    "(null for a null), or use an index map to change elements by position.",
                )
            item, pos = self._value(pos, depth)
            items.append(item)
            closed, pos = self._after_item(pos, "]", f"element {len(items) - 1}")
            if closed:
                return items, pos


_GAP_CHARS: Final = frozenset(" \t\n\r\f\v\u00a0\u2028\u2029\ufeff/#")
_LINE_END: Final = re.compile(r"[\n\r\u2028\u2029]")
