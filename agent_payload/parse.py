"""Model text -> change request (pure: no I/O, no SDK). It never guesses.

``parse_change_request(text, finish_reason=...)`` finds the change request in whatever a model
sent back and returns an ``AgentPayloadChangeRequest``; ``parse_change_request_with_repairs``
also says what was normalised on the way (``ParsedReply.repairs``). What is returned is exactly
what the model wrote; anything damaged or ambiguous raises a ``ModelReplyError`` whose
``feedback`` (rendered by ``agent_payload.prompts.render_correction``) tells the model where
and what to fix.

Accepted (read without a round trip):

* strict JSON (read by the C reader, in growing windows so a failure costs only what was read);
* JSON5: ``//`` and ``/* */`` comments, trailing commas, single-quoted strings, unquoted keys
  (identifiers), hex and signed numbers, ``.5``/``5.``, JSON5 escapes (``\\x41``, ``\\'``,
  ``\\v``, ``\\0``, line continuations); Python's ``True``/``False``/``None`` and ``#``
  comments; raw control characters (tab, newline) inside strings, as ``json.loads`` with
  ``strict=False``. These are read by one grammar reader that knows every position;
* around the object: code fences, prose, XML-like tags, a byte-order mark, thinking blocks
  (``<thinking>``, ``<think>``, ``<scratchpad>``, ``<reflection>``, ``<analysis>`` opening a
  line; and a lone closing tag such as ``</think>`` at the start or end of a line with no
  opening tag before it: everything before it is thinking);
* a wrapper (``payloadChangeRequest``, ``changeRequest``, ``change_request``,
  ``payload_change_request``) when the top level has no bucket of its own (``reasoning`` beside
  it is kept, the inner one wins); snake_case bucket names; both spellings of a bucket holding
  the same content (read as one);
* a whole reply, a wrapper's value or a bucket JSON-encoded as a string (tool arguments encoded
  twice), also inside a fence, after prose or inside a tag;
* the same change request repeated identically (read as one); objects without a bucket field
  beside the change request (an echo of the payload, a merged result, ``{"confidence": 0.8}``):
  ignored;
* ``{}``, ``{"reasoning": "..."}`` and all-empty buckets: the valid, empty change request. An
  ``{}`` inside a sentence of prose is not an answer; one alone on its line is.

Sent back (each with line, column and a short excerpt, ``⟶`` marking the spot, and what to
write instead):

* ``ReplySyntaxError``: a missing value (``"note": }``); a hole in an array (``[{}, , {...}]``,
  ``[, , "DELETE"]``); a missing comma (``[{}, {} {"qty":3}]``); a key without a value (the
  set-like ``{"2"}``); a decimal comma (``12,5`` in an object); a bare word as a value
  (``paid``, ``tru``, ``undefined``); ``NaN``/``Infinity``; a number of more than 4,300 digits
  or one that overflows to infinity; a lone UTF-16 surrogate (``"\\ud800"``); a key given
  twice in one object; a comment inside an array of updateElements/removeElements (positional:
  the feedback asks for one ``{}`` per kept element or an index map; in newElements and
  replaceElements an array is a literal value and a comment there is ordinary JSON5); both
  spellings of a bucket with different content; nesting deeper than ``MAX_REPLY_DEPTH`` (250)
  levels (a message about depth); a bucket that is a string, number or boolean (at the
  bucket's path). ``json_repair`` is not used: no damaged text is ever turned into data.
* ``AmbiguousReplyError`` (a ``ReplySyntaxError``): two or more *different* change requests
  (objects with a bucket field, or an explicit empty answer, compared after unwrapping and
  renaming, reasoning aside), e.g. an answer followed by prose quoting another request: none
  is applied; the feedback says how many and where each starts, and asks for exactly one. A
  damaged change request beside others is a ``ReplySyntaxError`` that also says so.
* ``TruncatedReplyError``: a token-limit ``finish_reason`` (``length``, ``max_tokens``, ...)
  even when the text looks complete; a reply that ends inside an object, a string, a word, a
  comment, an unclosed ``<thinking>`` block (with no change request before it) or a code
  fence. A truncated object is never applied, nor is anything before it.
* ``RefusalError``: a refusal ``finish_reason`` (``refusal``, ``content_filter``, ...), or
  refusal wording in a reply that holds no change request.
* ``NoChangeRequestError``: prose only, an empty reply.
* ``UnknownFieldError``: top-level fields that are not part of the format (the message
  suggests the nearest valid name); a wrapper beside a bucket; an object holding no change
  request when nothing else was found.

``reasoning`` that is not a string is turned into text (recorded). Time is linear in the
length of the reply, whatever it holds (``bench/parse.py``): the scan looks for JSON-like
openings in C, skips whatever an object it read spans, and never rescans.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from pydantic import ValidationError

from agent_payload._jsondata import kind_word
from agent_payload.changes import BUCKETS, WIRE_NAMES, AgentPayloadChangeRequest
from agent_payload.errors import (
    AmbiguousReplyError,
    ModelReplyError,
    NoChangeRequestError,
    RefusalError,
    ReplySyntaxError,
    TruncatedReplyError,
    UnknownFieldError,
    UsageError,
)
from agent_payload.report import Problem

__all__ = [
    "MAX_REPLY_DEPTH",
    "REFUSAL_FINISH_REASONS",
    "TRUNCATION_FINISH_REASONS",
    "WRAPPERS",
    "ParsedReply",
    "parse_change_request",
    "parse_change_request_with_repairs",
]

WRAPPERS: Final[tuple[str, ...]] = (
    "payloadChangeRequest",
    "changeRequest",
    "change_request",
    "payload_change_request",
)
"""Top-level keys that wrap a whole change request (unwrapped when no bucket stands beside)."""

TRUNCATION_FINISH_REASONS: Final[frozenset[str]] = frozenset(
    {"length", "max_tokens", "max_output_tokens", "model_context_window_exceeded"}
)
"""Finish/stop reasons (compared lower-cased) meaning the reply was cut off by a token limit."""

REFUSAL_FINISH_REASONS: Final[frozenset[str]] = frozenset(
    {"refusal", "content_filter", "safety", "prohibited_content", "blocklist", "spii", "recitation"}
)
"""Finish/stop reasons (compared lower-cased) meaning the provider or the model refused."""

_FIELDS: Final[tuple[str, ...]] = (*BUCKETS, "reasoning")
_SNAKE: Final[dict[str, str]] = {wire: py for py, wire in WIRE_NAMES.items() if wire in BUCKETS}
_BUCKET_SPELLINGS: Final[frozenset[str]] = frozenset((*BUCKETS, *_SNAKE.values()))
_KNOWN: Final[frozenset[str]] = frozenset((*_BUCKET_SPELLINGS, "reasoning"))
_SNAKE_TO_CAMEL: Final[dict[str, str]] = {snake: camel for camel, snake in _SNAKE.items()}
_MAX_STRING_DECODES = 4
_CONTROL_CHARS = "accepted raw control characters inside strings"


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


_SHAPE_NAMES: Final[tuple[str, ...]] = tuple({_norm(n) for n in (*_KNOWN, *WRAPPERS)})


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A change request read from a model's reply.

    ``repairs`` says, in words, what had to be repaired or normalised to read it (empty for a
    bare, strict JSON reply); ``raw_json`` is the JSON text the change request was read from.
    """

    change_request: AgentPayloadChangeRequest[Any]
    repairs: tuple[str, ...] = ()
    raw_json: str = ""


def parse_change_request(
    text: str | None, *, finish_reason: str | None = None
) -> AgentPayloadChangeRequest[Any]:
    """Read the change request from a model's reply.

    ``finish_reason`` is the provider's stop reason when known (``"length"``, ``"max_tokens"``,
    ``"refusal"``, ...). Raises a ``ModelReplyError`` subclass (with ``feedback`` for the
    model) when the reply cannot be used; see the module docstring for what is accepted.
    """
    return parse_change_request_with_repairs(text, finish_reason=finish_reason).change_request


def parse_change_request_with_repairs(
    text: str | None, *, finish_reason: str | None = None
) -> ParsedReply:
    """Like ``parse_change_request``, and also say what was repaired (``ParsedReply``)."""
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise UsageError(
            f"parse_change_request: expected the reply as str, found {type(text).__name__}; "
            "decode bytes first"
        )
    reason = finish_reason.strip().lower() if isinstance(finish_reason, str) else None
    if reason in REFUSAL_FINISH_REASONS:
        _refuse(text, f"the provider stopped the reply with finish_reason={finish_reason!r}")
    if reason in TRUNCATION_FINISH_REASONS:
        _truncated(
            text,
            f"the provider stopped the reply with finish_reason={finish_reason!r} (a token "
            "limit), so the reply is incomplete even if it looks complete",
        )
    reader = _Reader(reply=text)
    obj, raw = reader.read(text, depth=0)
    request = reader.normalise(obj)
    return ParsedReply(request, tuple(dict.fromkeys(reader.repairs)), raw)


# --- errors --------------------------------------------------------------------------------


def _feedback(problems: Sequence[Problem], *, truncated: bool = False) -> str:
    from agent_payload.prompts import render_correction  # lazily: prompts sits above parse

    return render_correction(problems, reply_was_truncated=truncated)


def _raise(
    cls: type[ModelReplyError],
    message: str,
    problems: Sequence[Problem],
    *,
    reply: str,
    cause: BaseException | None = None,
    **extra: Any,
) -> NoReturn:
    truncated = cls is TruncatedReplyError
    error = cls(
        message,
        reply=reply,
        feedback=_feedback(problems, truncated=truncated),
        problems=problems,
        **extra,
    )
    raise error from cause


def _truncated(reply: str, why: str, *, cause: BaseException | None = None) -> NoReturn:
    _raise(
        TruncatedReplyError,
        f"The reply was cut off: {why}. A truncated change request is never applied; ask "
        "again (the feedback asks for a smaller change request) or raise the output token "
        "limit.",
        [
            Problem(
                kind="truncated",
                message="your reply ended before its JSON object was complete, so none of it "
                "was used.",
            )
        ],
        reply=reply,
        cause=cause,
    )


def _refuse(reply: str, why: str) -> NoReturn:
    _raise(
        RefusalError,
        f"The model refused: {why}; the reply holds no change request. Ask again with the "
        "feedback, or check that the task is one the model may do.",
        [
            Problem(
                kind="refusal",
                code="refusal",
                message="your reply declined the task and held no change request. The task "
                "is an edit of the JSON data shown: reply with the change request that does "
                'it, or with {"reasoning": "<why nothing should change>"} if nothing should '
                "change.",
            )
        ],
        reply=reply,
    )


def _no_request(reply: str, why: str) -> NoReturn:
    _raise(
        NoChangeRequestError,
        f"The reply holds no change request: {why}. Expected one JSON object with the "
        "optional fields newElements, updateElements, removeElements, replaceElements and "
        "reasoning; ask again with the feedback.",
        [
            Problem(
                kind="no_change_request",
                message=f"{why}. Reply with the change request itself: one JSON object "
                "with the optional fields newElements, updateElements, removeElements, "
                "replaceElements and reasoning ({} if nothing should change).",
            )
        ],
        reply=reply,
    )


def _syntax(
    reply: str,
    message: str,
    model_message: str,
    *,
    path: str | None = None,
    cause: BaseException | None = None,
) -> NoReturn:
    _raise(
        ReplySyntaxError,
        message,
        [Problem(kind="parse", message=model_message, path=path)],
        reply=reply,
        cause=cause,
    )


def _field_path(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"[{json.dumps(name)}]"


def _suggest(name: str) -> str | None:
    """The valid top-level field closest to ``name`` (camelCase), if one is close enough."""
    by_norm = {_norm(n): (n if n in _FIELDS else _wire(n)) for n in _KNOWN}
    exact = by_norm.get(_norm(name))
    if exact is not None:
        return exact
    close = difflib.get_close_matches(_norm(name), list(by_norm), n=1, cutoff=0.6)
    return by_norm[close[0]] if close else None


def _wire(snake: str) -> str:
    return WIRE_NAMES.get(snake, snake)


# --- the grammar: JSON, JSON5 and Python literals, with positions ----------------------------

MAX_REPLY_DEPTH: Final = 250
"""Deepest nesting of objects and arrays read from a reply (the change request itself is level
1). Deeper replies are a syntax error about depth; the change-request model cannot hold more."""

_MAX_DIGITS: Final = 4300  # Python's int/str conversion limit: JSON data cannot carry more

_SPACE: Final = re.compile(r"[ \t\n\r\f\v\u00a0\u2028\u2029\ufeff]*")
_DSTR: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
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


class _Grammar:
    """A reader for one JSON value in ``text`` that accepts exactly strict JSON, JSON5 (comments,
    trailing commas, single quotes, unquoted keys, hex and signed numbers, JSON5 escapes) and
    Python's ``True``/``False``/``None`` and ``#`` comments, plus raw control characters in
    strings (as ``json.loads(strict=False)``). Anything else raises ``_Damage`` at its position;
    nothing is inferred."""

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
        word = _WORD.match(text, pos)
        if word is not None:
            if word.end() == len(text) and word.group() not in _LITERALS:
                raise _Damage(pos, "the reply ends inside a word", eof=True)
            return self._word(word.group(), pos), word.end()
        raise _Damage(pos, f"expected a value, found {_found(text, pos)}")

    def _word(self, word: str, pos: int) -> Any:
        if word in _LITERALS:
            return _LITERALS[word]
        if word in _PY_LITERALS:
            self.repairs["converted Python literals True/False/None to JSON"] = None
            return _PY_LITERALS[word]
        if word in ("NaN", "Infinity"):
            raise _Damage(
                pos, f"{word}, which is not a JSON number", "use a number or null instead."
            )
        near = (
            difflib.get_close_matches(word.lower(), ("true", "false", "null"), n=1, cutoff=0.6)
            if len(word) <= 6 and word[0] in "tfnTFN"
            else []
        )
        if word == "undefined":
            hint = "write null for no value."
        elif near:
            hint = f"did you mean {near[0]}? If it is text, quote it: {json.dumps(word)}."
        else:
            hint = f"text must be quoted: {json.dumps(word)}."
        raise _Damage(pos, f"the bare word {word[:40]} where a value should be", hint)

    def _string(self, pos: int, pattern: re.Pattern[str]) -> tuple[str, int]:
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
            value = _join_pairs(value)
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
            pos = self.gap(pos, False)
            char = text[pos : pos + 1]
            if char == "}":
                return pairs, pos + 1
            if char != ",":
                raise self._no_separator(pos, "}", f"the value of {json.dumps(key)}")
            pos = self.gap(pos + 1, False)
            char = text[pos : pos + 1]
            if char == "}":
                self.repairs["removed trailing commas (json5)"] = None
                return pairs, pos + 1
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

    def _no_separator(self, pos: int, close: str, after: str) -> _Damage:
        if pos >= len(self.text):
            return _Damage(pos, "the reply ends inside an object or array", eof=True)
        return _Damage(
            pos,
            f"expected ',' or '{close}' after {after}, found {_found(self.text, pos)}",
            "a comma is missing between two items, or a string is not closed or quoted.",
        )

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
            pos = self.gap(pos, True)
            char = text[pos : pos + 1]
            if char == "]":
                return items, pos + 1
            if char != ",":
                raise self._no_separator(pos, "]", f"element {len(items) - 1}")
            pos = self.gap(pos + 1, True)
            if text[pos : pos + 1] == "]":
                self.repairs["removed trailing commas (json5)"] = None
                return items, pos + 1


_GAP_CHARS: Final = frozenset(" \t\n\r\f\v\u00a0\u2028\u2029\ufeff/#")
_LINE_END: Final = re.compile(r"[\n\r\u2028\u2029]")


def _join_pairs(value: str) -> str:
    """Join escaped surrogate pairs (``\\ud83d\\ude80``) read one by one into the character;
    a lone surrogate stays (and is refused by the caller)."""
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


def _finite_float(text: str) -> float:
    """A float literal; one too large for a float (``1e400``) or too long is not JSON data."""
    if len(text) > _MAX_DIGITS:
        raise _NotData(text)
    value = float(text)
    if value - value != 0.0:
        raise _NotData(text)
    return value


class _NotData(ValueError):
    """Strict JSON that Python reads but that is not JSON data (NaN, 1e400, a duplicate key):
    the grammar reader tells where and why."""


def _reject_constant(name: str) -> Any:
    raise _NotData(name)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _NotData("duplicate key")
    return value


_STRICT: Final = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_pairs
)
_SUSPECT: Final = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


# Can strict JSON start here? (A failed strict read raises an exception that costs more than
# the read: hostile prose of broken objects is sent to the grammar reader directly.)
_STRICT_START: Final = re.compile(
    r"""\{[ \t\n\r]*(?:\}|"[^"\\]*(?:\\.[^"\\]*)*"[ \t\n\r]*:[ \t\n\r]*"""
    r"""(?:["{\[\-0-9]|true|false|null))"""
)


def _strict_at(text: str, pos: int) -> tuple[Any, int]:
    """Strict JSON at ``pos`` (C speed): the value and its end, or None and where strict
    reading stopped. Read in growing windows: a failed ``raw_decode`` counts the lines of
    everything before the failure, so decoding in place would cost the length of the text for
    every brace of hostile prose."""
    size = 512
    length = len(text)
    while True:
        end = min(length, pos + size)
        chunk = text[pos:end]
        try:
            value, stop = _STRICT.raw_decode(chunk)
        except json.JSONDecodeError as exc:
            cut = end < length and (
                exc.pos >= len(chunk) - 8 or exc.msg.startswith("Unterminated string")
            )
            if not cut:
                return None, pos + (exc.pos if exc.pos < len(chunk) - 8 else len(chunk))
            size *= 4
        except (ValueError, RecursionError):
            return None, pos + 1
        else:
            return value, pos + stop


def _read_object(text: str, pos: int, context: str | None = None) -> tuple[Any, int, list[str]]:
    """The object at ``pos`` of ``text``: strict JSON at C speed, else the grammar reader.
    Returns the value, the end and the repairs; raises ``_Damage`` (whose ``resume`` is where
    scanning for other objects may go on: past everything strict JSON read as one object)."""
    if _STRICT_START.match(text, pos) is None:
        value, end = None, pos + 1  # not strict JSON from its first member on: no C attempt
    else:
        value, end = _strict_at(text, pos)
    if value is not None and _SUSPECT.search(text, pos, end) is None:
        return value, end, []
    grammar = _Grammar(text, context)
    try:
        value, stop = grammar.read_object(pos)
    except _Damage as damage:
        damage.resume = max(damage.pos, end, pos + 1)
        raise
    return value, stop, list(grammar.repairs)


def _read_whole(text: str, context: str | None = None) -> tuple[Any, list[str]]:
    """``text`` as exactly one object; raises ``_Damage``."""
    try:
        value = _STRICT.decode(text)
    except (ValueError, RecursionError):
        pass
    else:
        if isinstance(value, dict) and _SUSPECT.search(text) is None:
            return value, []
    grammar = _Grammar(text, context)
    return grammar.read_whole(), list(grammar.repairs)


# --- finding the change request ----------------------------------------------------------------

_BLANK: Final = re.compile(r"[^\r\n]")

# After an opening brace: does what follows look like a JSON object (rather than prose)?
_JSON_START: Final = re.compile(
    r"""\{[ \t\r\n]*(?:
        \Z | \} | // | /\*
      | ["']?(?i:(?:new|update|remove|replace)[_\-]?elements?|reasoning
                |(?:payload[_\-]?)?change[_\-]?request)\b  # a damaged request still counts
      | (?: "[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)
          | '[^'\\\n]*(?:\\.[^'\\\n]*)*(?:'|\Z)
          | [A-Za-z_$][\w$]*
        ) [ \t\r\n]* (?: : | \Z )
    )""",
    re.VERBOSE,
)
# Where an object (or a JSON string holding one) may start: searched in C, so that prose
# braces cost no Python step each.
_OPENER: Final = re.compile(_JSON_START.pattern + r'|(?<!\\)"(?=[ \t]*\{)', re.VERBOSE)

_THINKING_TAGS = "thinking|think|scratchpad|reflection|analysis"
_THINKING_OPEN: Final = re.compile(rf"^[ \t]*<({_THINKING_TAGS})>", re.IGNORECASE | re.MULTILINE)
_THINKING_CLOSE: Final = re.compile(rf"</({_THINKING_TAGS})\s*>", re.IGNORECASE)
_CLOSE_TAGS: dict[str, re.Pattern[str]] = {}


def _close_tag(name: str) -> re.Pattern[str]:
    pattern = _CLOSE_TAGS.get(name)
    if pattern is None:
        pattern = re.compile(rf"</{re.escape(name)}\s*>", re.IGNORECASE)
        if len(_CLOSE_TAGS) < 64:
            _CLOSE_TAGS[name] = pattern
    return pattern


_FENCE_BEFORE: Final = re.compile(r"(?:```|~~~)[^\n`~]*\n\s*\Z")
_TAG_BEFORE: Final = re.compile(
    r"<([A-Za-z_][\w\-]*)(?:\s[^<>]*)?>\s*(?:(?:```|~~~)[^\n`~]*\n\s*)?\Z"
)
_DECORATION: Final = re.compile(r"</?[A-Za-z_][\w\-]*(?:\s[^<>]*)?>|(?:```|~~~)[\w+\-]*")
_UNCLOSED_FENCE: Final = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
_REQUEST_KEY: Final = re.compile(
    r"""["']?\b(?:(?:new|update|remove|replace)[_\-]?elements?|"""
    r"""(?:payload[_\-]?)?change[_\-]?request)\b["']?\s*:""",
    re.IGNORECASE,
)
_REFUSAL: Final = re.compile(
    r"""\b(?:
        i(?:'m|\s+am)\s+(?:sorry|afraid)\b[^.\n]{0,40}?\b
            (?:can't|cannot|can\s+not|won't|will\s+not|unable|not\s+able)
      | i(?:\s+(?:can't|cannot|can\s+not|won't|will\s+not|am\s+unable\s+to
                  |am\s+not\s+able\s+to|must\s+decline\s+to)
          |'m\s+(?:unable|not\s+able)\s+to)
            \s+(?:help|assist|comply|fulfil|fulfill|complete|continue|support|provide
                  |perform|process|do\s+(?:that|this)|make\s+(?:that|this|these|those))
      | i\s+(?:must|have\s+to|need\s+to)\s+(?:decline|refuse)
      | (?:this|that|your)\s+request\s+(?:violates|goes\s+against|is\s+against)
    )""",
    re.IGNORECASE | re.VERBOSE,
)
_DAMAGED_LOOKAHEAD = 1000  # a damaged object is a change request if a bucket name follows soon


@dataclass(slots=True)
class _Candidate:
    start: int
    end: int
    value: Any = None  # the object read (None when damaged)
    repairs: list[str] = field(default_factory=list)
    damage: _Damage | None = None
    inside: str | None = None  # the object came from a JSON string: the decoded text
    canonical: str = ""


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"


def _excerpt(text: str, pos: int, before: int = 30, after: int = 20) -> str:
    """A short look at ``text`` around ``pos``: ``…"qty": 3, ⟶}}`` (⟶ marks the spot)."""
    start = max(0, pos - before)
    head = ("…" if start else "") + text[start:pos]
    tail = text[pos : pos + after] + ("…" if pos + after < len(text) else "")
    shown = head + "⟶" + tail
    return shown.replace("\r", "").replace("\n", "⏎").replace("\t", " ")


def _has_bucket(value: Any) -> bool:
    """A change request for the ambiguity rule: an object with a bucket field (also in any
    spelling, near miss, or under a wrapper) at its top level."""
    if not isinstance(value, dict):
        return False
    for key, inner in value.items():
        if not isinstance(key, str):  # pragma: no cover - JSON keys are strings
            continue
        if key in _BUCKET_SPELLINGS:
            return True
        if key in WRAPPERS:
            if isinstance(inner, str):
                try:
                    inner, _ = _read_whole(inner.strip())
                except _Damage:
                    return True  # a wrapper holding broken JSON: judged when normalised
            if isinstance(inner, dict) and (_has_bucket(inner) or not inner):
                return True
            continue
        if len(value) <= 20 and _near_bucket(key):
            return True
    return False


def _empty_request(value: Any) -> bool:
    """``{}`` or ``{"reasoning": ...}`` (wrapped or not): the answer "nothing to change"."""
    if not isinstance(value, dict):
        return False
    for key, inner in value.items():
        if key in WRAPPERS:
            if not (inner is None or _empty_request(inner)):
                return False
        elif key != "reasoning":
            return False
    return True


def _near_bucket(key: str) -> bool:
    norm = _norm(key)
    if norm in _SHAPE_NAMES and norm != "reasoning":
        return True
    if len(norm) > 40:
        return False
    close = difflib.get_close_matches(norm, _SHAPE_NAMES, 1, 0.8)
    return bool(close) and close[0] != "reasoning"


def _canonical(value: dict[str, Any]) -> str:
    """What a change request does, for telling identical repeats from different requests:
    buckets after unwrapping and renaming, empty ones and reasoning left out."""
    obj: Any = value
    for _ in range(len(WRAPPERS)):
        wrapper = next((k for k in WRAPPERS if k in obj), None)
        if wrapper is None or any(k in _BUCKET_SPELLINGS for k in obj):
            break
        inner = obj[wrapper]
        if isinstance(inner, str):
            try:
                inner, _ = _read_whole(inner.strip())
            except _Damage:
                break
        if not isinstance(inner, dict):
            break
        obj = {**{k: v for k, v in obj.items() if k != wrapper}, **inner}
    shown: dict[str, Any] = {}
    for key, item in obj.items():
        if key == "reasoning" or _absent(item):
            continue
        name = _SNAKE_TO_CAMEL.get(key, key)
        if isinstance(item, str) and name in BUCKETS:
            with contextlib.suppress(_Damage):
                item, _ = _read_whole(item.strip())
        shown[name] = item
    try:
        return json.dumps(shown, sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):  # pragma: no cover - deeper than the reader allows
        return repr(shown)


class _Lines:
    """Line starts and ends of ``text`` for positions met in increasing order (amortised linear:
    hostile text with millions of ``{}`` on one line must not cost a search each)."""

    __slots__ = ("last_nl", "next_nl", "scanned", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.last_nl = -1
        self.scanned = 0
        self.next_nl = -2  # -2: not yet searched

    def alone(self, start: int, end: int) -> bool:
        """The span is alone on its line(s), fences and tags aside."""
        text = self.text
        found = text.rfind("\n", self.scanned, start)
        if found != -1:
            self.last_nl = found
        self.scanned = max(self.scanned, start)
        if self.next_nl == -2 or (self.next_nl != -1 and self.next_nl < end):
            self.next_nl = text.find("\n", end)
        line_end = len(text) if self.next_nl == -1 else self.next_nl
        before = start - self.last_nl - 1
        if before > 200 or line_end - end > 200:
            return False
        rest = text[self.last_nl + 1 : start] + text[end:line_end]
        return not _DECORATION.sub("", rest).strip()


@dataclass(slots=True)
class _Reader:
    reply: str
    repairs: list[str] = field(default_factory=list)

    # -- the whole reply --

    def read(self, text: str, *, depth: int) -> tuple[dict[str, Any], str]:
        if depth > _MAX_STRING_DECODES:
            _syntax(
                self.reply,
                f"The reply is a JSON string encoded more than {_MAX_STRING_DECODES} times; "
                "expected one JSON object.",
                "your reply was a JSON string inside a JSON string, many times over; reply "
                "with the JSON object itself.",
            )
        if text.startswith("\ufeff"):
            text = text[1:]
            self.repairs.append("removed byte-order mark")
        stripped = text.strip()
        if not stripped:
            _no_request(self.reply, "the reply is empty")
        if stripped[0] == '"':
            try:
                whole = _STRICT.decode(stripped)
            except (ValueError, RecursionError):
                match = _DSTR.match(stripped)
                if match is None and stripped[1:2] in ("{", "[", "\\", '"'):
                    _truncated(self.reply, "the reply is a JSON string that never closes")
            else:
                if isinstance(whole, str):
                    self.repairs.append("decoded the change request from a JSON string")
                    return self.read(whole, depth=depth + 1)
        return self._scan(text)

    # -- the objects in it --

    def _scan(self, original: str) -> tuple[dict[str, Any], str]:
        text, thinking_open = self._set_aside_thinking(original)
        requests: list[_Candidate] = []  # with a bucket field, or an explicit empty answer
        others: list[_Candidate] = []  # readable objects that are no change request, damage
        keys: list[int] | None = None  # where bucket names stand, found at the first damage
        lines = _Lines(text)
        count = 0
        truncated_at: int | None = None
        pos = 0
        while True:
            match = _OPENER.search(text, pos)
            if match is None:
                break
            start = match.start()
            if text[start] == '"':
                candidate = self._string_candidate(text, start)
                if candidate is None:
                    pos = start + 1
                    continue
            elif text.startswith("{}", start):  # the commonest prose brace: no reader call
                if not lines.alone(start, start + 2):
                    pos = start + 2
                    continue
                candidate = _Candidate(start, start + 2, {})
            else:
                try:
                    value, end, repairs = _read_object(text, start)
                except _Damage as damage:
                    if damage.eof:
                        truncated_at = start
                        break
                    if damage.depth:
                        requests.append(_Candidate(start, len(text), damage=damage))
                        break  # everything after it is inside it
                    # (no traceback kept: its frames would pile up for hostile prose)
                    candidate = _Candidate(start, damage.resume, damage=damage.with_traceback(None))
                else:
                    candidate = _Candidate(start, end, value, repairs)
            count += 1
            pos = candidate.end
            if candidate.damage is not None:
                if keys is None:
                    keys = [m.start() for m in _REQUEST_KEY.finditer(text)]
                at = bisect.bisect_left(keys, start)
                limit = candidate.damage.pos + _DAMAGED_LOOKAHEAD
                if candidate.damage.depth or (at < len(keys) and keys[at] < limit):
                    requests.append(candidate)
                else:
                    others[-1:] = [candidate]  # only the last is ever used
            elif _has_bucket(candidate.value) or _empty_request(candidate.value):
                # An explicit empty answer ({"reasoning": ...}, a {} alone on its line) is a
                # change request too: beside an example with buckets, which one is meant
                # cannot be known either.
                if (
                    candidate.value
                    or candidate.inside is not None
                    or lines.alone(candidate.start, candidate.end)
                ):
                    requests.append(candidate)
            else:
                others[-1:] = [candidate]  # only the last is ever used
        if truncated_at is not None:
            _truncated(
                self.reply,
                f"the reply ends inside the JSON object opened at {_where(text, truncated_at)}",
            )
        if requests:
            return self._choose(text, requests, count)
        if thinking_open is not None:
            _truncated(
                self.reply,
                f"the reply ends inside the <thinking> block opened at "
                f"{_where(text, thinking_open)}, before any change request",
            )
        if _REFUSAL.search(text.replace("\u2019", "'")):
            _refuse(self.reply, "the reply declines the task")
        if others:
            return self._take(text, others[-1], count)
        if len(_UNCLOSED_FENCE.findall(text)) % 2 == 1:
            _truncated(self.reply, "the reply ends inside a code fence, before any JSON object")
        if "{" in text:
            _no_request(self.reply, "the reply holds only prose; its braces hold no JSON object")
        _no_request(self.reply, "the reply holds no JSON object")

    def _string_candidate(self, text: str, start: int) -> _Candidate | None:
        """A JSON string at ``start`` whose content is a change request (tool arguments written
        as text); None when it is not one."""
        match = _DSTR.match(text, start)
        if match is None:
            return None
        inner: Any = match.group()
        decodes = 0
        try:
            while isinstance(inner, str) and inner.lstrip()[:1] == '"' and decodes < 4:
                inner = _STRICT.decode(inner.strip())
                decodes += 1
        except (ValueError, RecursionError):
            return None
        if not isinstance(inner, str):
            return None
        begin = len(inner) - len(inner.lstrip())
        if _JSON_START.match(inner, begin) is None or not (
            _REQUEST_KEY.search(inner) or "reasoning" in inner or inner.strip() == "{}"
        ):
            return None
        try:
            value, repairs = _read_whole(inner)
        except _Damage as damage:
            if not _REQUEST_KEY.search(inner):
                return None
            return _Candidate(start, match.end(), damage=damage, inside=inner)
        repairs.insert(0, "decoded the change request from a JSON string")
        return _Candidate(start, match.end(), value, repairs, inside=inner)

    def _choose(
        self, text: str, requests: list[_Candidate], count: int
    ) -> tuple[dict[str, Any], str]:
        damaged = [c for c in requests if c.damage is not None]
        distinct: dict[str, _Candidate] = {}
        for candidate in requests:
            if candidate.damage is None:
                candidate.canonical = _canonical(candidate.value)
                distinct.setdefault(candidate.canonical, candidate)
        others = len(distinct) + len(damaged) - 1
        if damaged:
            self._damaged(text, damaged[0], others)
        if len(distinct) > 1:
            self._ambiguous(text, list(distinct.values()))
        if len(requests) > 1:
            self.repairs.append(
                f"read {len(requests)} identical change requests as one (the last is used)"
            )
        return self._take(text, requests[-1], count)

    def _take(self, text: str, candidate: _Candidate, count: int) -> tuple[dict[str, Any], str]:
        if candidate.damage is not None:
            self._damaged(text, candidate, 0)
        span = text[candidate.start : candidate.end]
        before = text[: candidate.start]
        if _FENCE_BEFORE.search(before[-300:]):
            self.repairs.append("removed code fence")
        tag = _TAG_BEFORE.search(before[-300:])
        if tag is not None:
            self.repairs.append(f"removed <{tag.group(1)}> tags")
        outside = _DECORATION.sub("", before + text[candidate.end :])
        if outside.strip():
            self.repairs.append("ignored text around the JSON object")
        if count > 1:
            self.repairs.append(f"ignored {count - 1} other JSON object(s) in the reply")
        self.repairs.extend(candidate.repairs)
        if not isinstance(candidate.value, dict):  # pragma: no cover - objects only
            _no_request(self.reply, "the reply holds no JSON object")
        return candidate.value, span if candidate.inside is None else candidate.inside

    def _damaged(self, text: str, candidate: _Candidate, others: int) -> NoReturn:
        damage = candidate.damage
        assert damage is not None
        if candidate.inside is not None:
            where = (
                f"in the JSON string at {_where(text, candidate.start)} of your reply, at "
                f"{_where(candidate.inside, damage.pos)} of its text"
            )
            near = _excerpt(candidate.inside, damage.pos)
        else:
            where = f"at {_where(text, damage.pos)}"
            near = _excerpt(text, damage.pos)
        also = (
            f" Your reply also holds {others} other change request(s): send exactly one."
            if others
            else ""
        )
        if damage.depth:
            _syntax(
                self.reply,
                f"The change request {where} of the reply is nested more than "
                f"{MAX_REPLY_DEPTH} levels deep; at most {MAX_REPLY_DEPTH} levels are read. "
                "Ask again with the feedback.",
                f"your change request is nested more than {MAX_REPLY_DEPTH} levels deep "
                f"({where}); at most {MAX_REPLY_DEPTH} levels can be read. Change deep values "
                "with fewer levels: replace a whole subtree higher up with replaceElements, or "
                f"split the edit.{also}",
                cause=damage,
            )
        hint = f" {damage.hint[0].upper()}{damage.hint[1:]}" if damage.hint else ""
        _syntax(
            self.reply,
            f"The change request {where} of the reply cannot be read: {damage.what} (near "
            f"{near!r}). Nothing was guessed or applied; ask again with the feedback.",
            f"your change request cannot be read {where}: {damage.what}. Near: {near}.{hint} "
            f"Nothing was applied; send the whole change request again.{also}",
            cause=damage,
        )

    def _ambiguous(self, text: str, distinct: list[_Candidate]) -> NoReturn:
        starts = []
        for candidate in distinct:
            shown = text[candidate.start : candidate.end]
            if len(shown) > 80:
                shown = shown[:80] + "…"
            starts.append(f"{_where(text, candidate.start)}: {' '.join(shown.split())}")
        listing = "; ".join(starts)
        _raise(
            AmbiguousReplyError,
            f"The reply holds {len(distinct)} different change requests ({listing}); none was "
            "applied, since which one was meant cannot be known. Ask again with the feedback.",
            [
                Problem(
                    kind="parse",
                    code="ambiguous_reply",
                    message=f"your reply held {len(distinct)} different change requests, "
                    f"starting at {listing}. None was applied. Reply with exactly one change "
                    "request (put everything to change in it), and do not quote other change "
                    "requests or examples in the same reply.",
                )
            ],
            reply=self.reply,
        )

    def _set_aside_thinking(self, text: str) -> tuple[str, int | None]:
        """Blank out thinking blocks (keeping lines and columns); a lone closing tag, at the
        start or end of a line with no opening tag before it, ends thinking that began with the
        reply."""
        pieces: list[str] = []
        pos = 0
        first_open = _THINKING_OPEN.search(text)
        for seen, close in enumerate(_THINKING_CLOSE.finditer(text)):
            if seen >= 20 or (first_open is not None and first_open.start() < close.start()):
                break
            head = text[max(0, close.start() - 400) : close.start()]
            tail = text[close.end() : close.end() + 400]
            before = head[head.rfind("\n") + 1 :] if "\n" in head or len(head) < 400 else "x"
            after = tail[: tail.find("\n")] if "\n" in tail else tail
            if before.strip() and after.strip():
                continue
            pieces.append(_BLANK.sub(" ", text[: close.end()]))
            pos = close.end()
            self.repairs.append(f"removed thinking before a lone </{close.group(1)}>")
            break
        opened: int | None = None
        while True:
            match = _THINKING_OPEN.search(text, pos)
            if match is None:
                break
            end = _close_tag(match.group(1)).search(text, match.end())
            pieces.append(text[pos : match.start()])
            if end is None:
                pieces.append(_BLANK.sub(" ", text[match.start() :]))
                opened = match.start()
                pos = len(text)
                break
            pieces.append(_BLANK.sub(" ", text[match.start() : end.end()]))
            repair = f"removed <{match.group(1)}> block"
            if repair not in self.repairs:
                self.repairs.append(repair)
            pos = end.end()
        pieces.append(text[pos:])
        return "".join(pieces), opened

    # -- normalising the object --

    def normalise(self, obj: dict[str, Any]) -> AgentPayloadChangeRequest[Any]:
        obj, outer_unknown = self._unwrap(obj)
        unknown = outer_unknown + [k for k in obj if k not in _KNOWN]
        if unknown:
            self._unknown(unknown)
        data: dict[str, Any] = {}
        for camel in BUCKETS:
            snake = _SNAKE[camel]
            has_camel = camel in obj and not _absent(obj[camel])
            has_snake = snake in obj and not _absent(obj[snake])
            if has_camel and has_snake:
                value = self._bucket(camel, obj[camel])
                other = self._bucket(snake, obj[snake])
                if not _same(value, other):
                    self._both_spellings(camel, snake)
                self.repairs.append(f"read {snake} and {camel}, which hold the same, as one")
            elif has_snake:
                self.repairs.append(f"renamed {snake} to {camel}")
                value = self._bucket(camel, obj[snake])
            else:
                value = self._bucket(camel, obj.get(camel))
            data[camel] = value
        data["reasoning"] = self._reasoning(obj.get("reasoning"))
        depth = _depth(data)
        if depth > MAX_REPLY_DEPTH:
            _syntax(
                self.reply,
                f"The change request is nested {depth} levels deep; at most {MAX_REPLY_DEPTH} "
                "levels are read. Ask again with the feedback.",
                f"your change request is nested {depth} levels deep; at most "
                f"{MAX_REPLY_DEPTH} levels can be read. Change deep values with fewer levels: "
                "replace a whole subtree higher up with replaceElements, or split the edit.",
            )
        try:
            return AgentPayloadChangeRequest.model_validate(data)
        except (ValidationError, RecursionError) as exc:  # pragma: no cover - JSON input
            _syntax(
                self.reply,
                f"The change request read from the reply is not valid: {exc}",
                "your change request could not be read as JSON data.",
                cause=exc,
            )

    def _both_spellings(self, camel: str, snake: str) -> NoReturn:
        _syntax(
            self.reply,
            f"The change request gives both {camel} and {snake}, with different content; which "
            "one was meant cannot be known, so neither is applied. Ask again with the feedback.",
            f"your change request gives both {camel} and {snake}, with different content. "
            f"Use only {camel}, and put everything for that bucket in it.",
            path=camel,
        )

    def _unwrap(self, obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        outer_unknown: list[str] = []
        for _ in range(len(WRAPPERS)):
            own = [k for k in obj if k in _BUCKET_SPELLINGS and not _absent(obj[k])]
            wrappers = [k for k in WRAPPERS if k in obj]
            if own or not wrappers:
                break
            name = wrappers[0]
            inner = obj[name]
            if isinstance(inner, str):
                inner = self._decode_string(name, inner)
            if inner is None:
                inner = {}
            if not isinstance(inner, dict):
                _syntax(
                    self.reply,
                    f"{name}: expected the wrapped change request (an object), found "
                    f"{kind_word(inner)}. Ask again with the feedback.",
                    f"{name} must hold the change request object, not {kind_word(inner)}.",
                    path=name,
                )
            self.repairs.append(f"unwrapped {name}")
            new = dict(inner)
            for key, value in obj.items():
                if key == name:
                    continue
                if key == "reasoning":
                    if new.get("reasoning") is None:
                        new["reasoning"] = value
                elif key in _BUCKET_SPELLINGS:
                    continue  # absent (null, {} or []) beside the wrapper
                else:
                    outer_unknown.append(key)
            obj = new
        return obj, outer_unknown

    def _unknown(self, names: list[str]) -> NoReturn:
        problems = []
        parts = []
        for name in names:
            if name in WRAPPERS:
                hint = (
                    f"{name} is a wrapper and cannot stand beside buckets: move its fields "
                    "to the top level"
                )
            else:
                near = _suggest(name)
                hint = f"did you mean {near}?" if near else "it is not part of the format"
            path = _field_path(name)
            parts.append(f"{path} ({hint})")
            problems.append(
                Problem(
                    kind="unknown_field",
                    code="unknown_field",
                    path=path,
                    message=f"{name!r} is not a field of the change request ({hint}). The only "
                    "top-level fields are newElements, updateElements, removeElements, "
                    "replaceElements and reasoning; changes to the data go inside them.",
                )
            )
        _raise(
            UnknownFieldError,
            "The change request has top-level fields that are not part of the format: "
            + ", ".join(parts)
            + ". Expected only newElements, updateElements, removeElements, replaceElements "
            "and reasoning; nothing was guessed. Ask again with the feedback.",
            problems,
            reply=self.reply,
            fields=names,
        )

    def _decode_string(self, name: str, value: str) -> Any:
        stripped = value.strip()
        if stripped[:1] not in ("{", "["):
            return value
        if stripped[0] == "[":
            try:
                decoded = _STRICT.decode(stripped)
            except (ValueError, RecursionError):
                decoded = value  # an array in a string is read strictly or left as text
        else:
            try:
                decoded, repairs = _read_whole(stripped, context=name)
            except _Damage as damage:
                if damage.eof:
                    _truncated(self.reply, f"{name} holds a JSON string that is cut off")
                where = f"{_where(stripped, damage.pos)} of the string in {name}"
                near = _excerpt(stripped, damage.pos)
                hint = f" {damage.hint[0].upper()}{damage.hint[1:]}" if damage.hint else ""
                what = damage.what or f"nested more than {MAX_REPLY_DEPTH} levels deep"
                _syntax(
                    self.reply,
                    f"{name}: holds a string that looks like JSON but cannot be read at "
                    f"{where}: {what} (near {near!r}). Ask again with the feedback.",
                    f"{name} must be a JSON object, not a string holding broken JSON ({what} "
                    f"at {where}; near: {near}).{hint}",
                    path=name,
                    cause=damage,
                )
            self.repairs.extend(repairs)
        if isinstance(decoded, (dict, list)):
            self.repairs.append(f"decoded {name} from a JSON string")
            return decoded
        return value

    def _bucket(self, name: str, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            self.repairs.append(f"treated the empty string in {name} as absent")
            return None
        if isinstance(value, str):
            value = self._decode_string(name, value)
        if value is None or isinstance(value, (dict, list)):
            return value
        _syntax(
            self.reply,
            f"{name}: expected an object (or an array, for a payload whose root is an array), "
            f"found {kind_word(value)}. Ask again with the feedback.",
            f"{name} must be an object shaped like the payload (an array only when the "
            f"payload's root is an array), not {kind_word(value)}.",
            path=name,
        )

    def _reasoning(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            self.repairs.append("joined reasoning from a list of strings")
            return "\n".join(value)
        self.repairs.append(f"converted reasoning from {kind_word(value)} to text")
        return json.dumps(value, ensure_ascii=False)


def _same(a: Any, b: Any) -> bool:
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (ValueError, RecursionError):  # pragma: no cover - depth is checked before
        return False


def _depth(value: Any) -> int:
    """How deeply ``value`` nests containers (the change request's own object is level 1)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend(
                (item, level + 1) for item in node.values() if isinstance(item, (dict, list))
            )
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((item, level + 1) for item in node if isinstance(item, (dict, list)))
    return deepest


def _absent(value: Any) -> bool:
    return value is None or value == {} or value == []
