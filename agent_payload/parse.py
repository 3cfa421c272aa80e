"""Model text -> change request (pure: no I/O, no SDK).

``parse_change_request(text, finish_reason=...)`` finds the change request in whatever a model
sent back and returns an ``AgentPayloadChangeRequest``; ``parse_change_request_with_repairs``
also says what had to be repaired or normalised on the way (``ParsedReply.repairs``).

How a reply is read, in order:

1. ``finish_reason``: a token-limit stop (``length``, ``max_tokens``, ``MAX_TOKENS``,
   ``max_output_tokens``, ...) is ``TruncatedReplyError`` even when the text looks complete; a
   refusal or filter stop (``refusal``, ``content_filter``, ``SAFETY``, ...) is
   ``RefusalError``.
2. Fast path: the whole reply (without a byte-order mark) is strict JSON: ``json.loads``. A
   reply that is a JSON *string* (tool arguments encoded twice) is decoded and read again.
3. Otherwise ``<thinking>``/``<think>``/``<scratchpad>`` blocks are set aside (their text is
   never the answer) and the reply is scanned for JSON objects: code fences, XML-like tags and
   prose around them are ignored. The scanner knows strings (both quotes), escapes and
   comments, so braces inside them do not confuse it. Each object is read strictly first
   (``json.JSONDecoder.raw_decode``, C speed), then leniently: raw control characters in
   strings; then the JSON5 features models copy from documentation (``//``, ``/* */`` and
   ``#`` comments, single quotes, unquoted keys, trailing commas) and Python's
   ``True``/``False``/``None`` (outside strings only) translated token by token into JSON for
   ``json.loads``; then, for the object chosen (step 4) only, ``json5`` itself for the rest
   of JSON5 (hex, ``+1``, ``.5``, ``\\x41``, line continuations), up to 100,000 characters.
   (``json5`` reads about 20 KB a second: a 1 MB chatty reply would take a minute; the
   translation takes well under one. A property test checks it against ``json5``.)
4. Of the objects found, the **last** one shaped like a change request is taken: one with a
   bucket, ``reasoning`` or a wrapper at its top level (or a near miss such as
   ``updateElement``, so that it is reported rather than skipped), or an ``{}`` standing alone
   on its line (the empty change request). Only if that object cannot be read even as JSON5 is
   ``json_repair`` tried, as a last resort for syntax damage; its repairs are recorded, and its
   result is refused when a string, number or word of the object is missing from it (a guess,
   not a syntax fix: ``{"a": @@}`` is not read as ``{"a": ""}``) or when its top-level fields
   differ from those written at the top level (a missing ``]`` "fixed" by moving
   ``reasoning`` into an array).
5. A reply that ends inside an object or a string (one whose opening looks like JSON), or
   inside an unclosed ``<thinking>`` block with no change request before it, is truncated:
   ``TruncatedReplyError``. A truncated reply is never repaired into a partial change;
   ``json_repair`` only ever sees an object whose braces and strings are all closed.
6. The chosen object is normalised: a known wrapper (``payloadChangeRequest``,
   ``changeRequest``, ``change_request``, ``payload_change_request``) is unwrapped when the top
   level has no bucket of its own (``reasoning`` beside it is kept, the inner one wins);
   snake_case bucket names are renamed (camelCase wins when both hold something); a change
   request, a wrapper's value or a bucket that arrives as a JSON string is decoded; any other
   top-level field is ``UnknownFieldError``, whose message suggests the nearest valid name.

Decisions (see also the tests in ``tests/test_parse.py`` and the corpus):

* ``{}``, ``{"reasoning": "..."}`` and all-empty buckets are a valid, empty change request
  ("nothing to change"), not an error. An ``{}`` inside a sentence of prose is not an answer.
* Lists are valid buckets (payloads with an array root); the parser never judges a bucket
  against a payload. A bucket that is an empty string is absent, like ``null`` (recorded). A
  bucket that is another string, a number or a boolean (and not a JSON string of an object or
  array) is ``ReplySyntaxError`` at the bucket's path.
* ``reasoning`` that is not a string is turned into text (a list of strings joined by
  newlines, anything else as JSON), and that is recorded: it is never merged.
* ``NaN``/``Infinity`` are not JSON: ``ReplySyntaxError``.
* Refusal wording counts only when the reply holds no change request: "I can't remove the
  audit log, but here is the rest: {...}" is a change request.
* A truncated object anywhere after the last complete one wins over it: an example followed
  by a cut-off answer is ``TruncatedReplyError``, not the example.
* Fields beside a wrapper other than ``reasoning`` (``taskComplete``, ...) and a wrapper
  beside a bucket are unknown fields, as in the merge (MERGE.md section 6). Tool-call
  envelopes written as text (``{"name": ..., "arguments": {...}}``) are not unwrapped.
* A reply that is cut inside an unclosed ``<thinking>`` block is truncated; ``<thinking>``
  counts only at the start of a line (so the word inside a JSON string is left alone).

Every error is a ``ModelReplyError`` with ``problems`` and a ``feedback`` text rendered from the
correction template (``agent_payload.prompts.render_correction``) that tells the model what to
fix.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import json5
from pydantic import ValidationError

from agent_payload.changes import BUCKETS, WIRE_NAMES, AgentPayloadChangeRequest
from agent_payload.errors import (
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
_MAX_STRING_DECODES = 4
_MAX_TOLERANT_SCANS = 256
_JSON5_MAX_CHARS = 100_000
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


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"


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


# --- lexing ----------------------------------------------------------------------------------

_BLANK: Final = re.compile(r"[^\r\n]")

# One token of JSON, JSON5 or a Python literal (to check json_repair's result against the
# literals of its input): strings in either quote, comments, punctuation, words.
_TOKEN: Final = re.compile(
    r"""
    (?P<dstr>"[^"\\]*(?:\\.[^"\\]*)*(?P<dend>")?)
  | (?P<sstr>'[^'\\]*(?:\\.[^'\\]*)*(?P<send>')?)
  | (?P<lcomment>//[^\r\n]*|\#[^\r\n]*)
  | (?P<bcomment>/\*(?:.*?\*/|.*\Z))
  | (?P<open>\{)
  | (?P<close>\})
  | (?P<bracket>[\[\]])
  | (?P<colon>:)
  | (?P<comma>,)
  | (?P<ws>\s+)
  | (?P<word>[^\s"'/{}\[\]:,]+|/)
    """,
    re.VERBOSE | re.DOTALL,
)

# After an opening brace: does what follows look like a JSON object (rather than prose)?
_JSON_START: Final = re.compile(
    r"""\{\s*(?:\Z|["'{}\[]|//|/\*|[A-Za-z_$][\w$]*\s*(?::|\Z))""",
)

_THINKING_OPEN: Final = re.compile(
    r"^[ \t]*<(thinking|think|scratchpad|reflection|analysis)>", re.IGNORECASE | re.MULTILINE
)
_FENCE_BEFORE: Final = re.compile(r"(?:```|~~~)[^\n`~]*\n\s*\Z")
_TAG_BEFORE: Final = re.compile(
    r"<([A-Za-z_][\w\-]*)(?:\s[^<>]*)?>\s*(?:(?:```|~~~)[^\n`~]*\n\s*)?\Z"
)
_DECORATION: Final = re.compile(r"</?[A-Za-z_][\w\-]*(?:\s[^<>]*)?>|(?:```|~~~)[\w+\-]*")
_UNCLOSED_FENCE: Final = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
_REQUEST_KEY: Final = re.compile(
    r"""["']?\b(?:(?:new|update|remove|replace)[_\-]?elements?|reasoning|"""
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


class _NonJsonConstant(ValueError):
    """NaN or Infinity: accepted by Python's and json5's readers, but not JSON."""


def _reject_constant(name: str) -> Any:
    raise _NonJsonConstant(name)


def _finite_float(text: str) -> float:
    """A float literal; one too large for a float (``1e400``) is not JSON data either."""
    value = float(text)
    if value - value != 0.0:
        raise _NonJsonConstant(f"the number {text[:40]} (it overflows to {value})")
    return value


class _DuplicateKey(_NonJsonConstant):
    """A key given twice in one object: JSON readers keep the last, so the first value (a whole
    bucket, say) would be lost without a trace."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return value


_STRICT: Final = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_pairs
)
_LAX: Final = json.JSONDecoder(
    parse_constant=_reject_constant,
    parse_float=_finite_float,
    object_pairs_hook=_unique_pairs,
    strict=False,
)


def _tokens(text: str, start: int = 0) -> Iterator[re.Match[str]]:
    return _TOKEN.finditer(text, start)


@dataclass(slots=True)
class _Scan:
    """One brace-balanced span, or where the text ended inside one."""

    end: int | None  # one past the closing brace; None: the text ended inside
    json_like: bool


# The brace matcher's tokens: strings, comments and braces; everything else in long runs.
_SCAN_TOKEN: Final = re.compile(
    r"""
    (?P<dstr>"[^"\\]*(?:\\.[^"\\]*)*(?P<dend>")?)
  | (?P<sstr>'[^'\\]*(?:\\.[^'\\]*)*(?P<send>')?)
  | //[^\r\n]* | \#[^\r\n]* | /\*(?:.*?\*/|.*\Z)
  | (?P<open>\{)
  | (?P<close>\})
  | [^"'/\#{}]+ | /
    """,
    re.VERBOSE | re.DOTALL,
)


def _match_braces(text: str, start: int) -> _Scan:
    depth = 0
    for match in _SCAN_TOKEN.finditer(text, start):
        kind = match.lastgroup
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth -= 1
            if depth == 0:
                return _Scan(match.end(), True)
        elif (kind == "dstr" and match.group("dend") is None) or (
            kind == "sstr" and match.group("send") is None
        ):
            break  # a string that never closes: the text ends inside it
    return _Scan(None, _JSON_START.match(text, start) is not None)


# --- reading ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Candidate:
    start: int
    end: int
    value: dict[str, Any] | None  # None: not readable by the strict/JSON5 readers
    repairs: list[str] = field(default_factory=list)
    error: Exception | None = None


def _mask(text: str, start: int, end: int) -> str:
    blank = _BLANK.sub(" ", text[start:end])
    return text[:start] + blank + text[end:]


def _lenient_load(span: str, *, json5_too: bool = True) -> tuple[Any, list[str]]:
    """Read one JSON value strictly, then leniently; raise ``ValueError`` when nothing can.

    The JSON5 features models copy from documentation (comments, single quotes, unquoted
    keys, trailing commas) and Python's literals are first translated token by token into
    strict JSON and read by ``json.loads``: ``json5`` reads about 20 KB a second, far too slow
    for long replies. ``json5`` then reads whatever the translation does not cover (hex
    numbers, ``+1``, ``.5``, ``\\x41`` escapes, line continuations), up to
    ``_JSON5_MAX_CHARS``.
    """
    try:
        return _STRICT.decode(span), []
    except _NonJsonConstant:
        raise
    except (ValueError, RecursionError):
        pass
    try:
        return _LAX.decode(span), [_CONTROL_CHARS]
    except _NonJsonConstant:
        raise
    except (ValueError, RecursionError):
        pass
    translated = _translate(span)
    if translated is None:
        raise ValueError("a string in it is not closed")
    text, repairs = translated
    for decoder, extra in ((_STRICT, []), (_LAX, [_CONTROL_CHARS])):
        try:
            return decoder.decode(text), repairs + extra
        except _NonJsonConstant:
            raise
        except (ValueError, RecursionError):
            pass
    if not json5_too:
        raise ValueError("not JSON, even after translating JSON5 and Python syntax")
    if len(text) > _JSON5_MAX_CHARS:
        raise ValueError(
            f"the object ({len(span)} characters) is not strict JSON, and too long to read "
            f"as JSON5 (at most {_JSON5_MAX_CHARS} characters)"
        )
    # What the translation left (hex, +1, .5, \x41, line continuations) is json5's to read.
    return _json5_loads(text), [*repairs, "read JSON5 syntax (json5)"]


_PY_LITERALS: Final[dict[str, str]] = {"True": "true", "False": "false", "None": "null"}
_STRING: Final = r"""
    (?P<dstr>"[^"\\]*(?:\\.[^"\\]*)*(?P<dend>")?)
  | (?P<sstr>'[^'\\]*(?:\\.[^'\\]*)*(?P<send>')?)
"""
# Pass 1: comments out, single-quoted strings made double-quoted (double ones kept as they are).
_PASS1: Final = re.compile(
    _STRING
    + r"""
  | (?P<line>//[^\r\n]*|\#[^\r\n]*)
  | (?P<block>/\*(?:.*?\*/|.*\Z))
    """,
    re.VERBOSE | re.DOTALL,
)
# Pass 2 (no comments left): unquoted keys, trailing commas, Python literals.
_PASS2: Final = re.compile(
    r"""
    (?P<dstr>"[^"\\]*(?:\\.[^"\\]*)*")
  | (?<=[{,])(?P<space>\s*)(?P<key>(?:[^\W\d]|\$)[\w$]*)(?=\s*:)
  | (?P<trailing>,)(?=\s*[}\]])
  | (?P<literal>\b(?:True|False|None)\b)
    """,
    re.VERBOSE | re.DOTALL,
)
_SINGLE_QUOTED_ESCAPE: Final = re.compile(r'\\(.)|"', re.DOTALL)


def _requote(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if escaped is None:
        return '\\"'  # a bare " inside a single-quoted string
    return "'" if escaped == "'" else match.group(0)


def _translate(span: str) -> tuple[str, list[str]] | None:
    """Translate the common JSON5 features and Python literals in ``span`` into strict JSON
    (never inside strings), in two passes of C-driven ``re.sub``. None when a string is not
    closed."""
    found: dict[str, None] = {}
    unclosed = False

    def pass1(match: re.Match[str]) -> str:
        nonlocal unclosed
        kind = match.lastgroup
        text = match.group()
        if kind == "dstr":
            unclosed = unclosed or match.group("dend") is None
            return text
        if kind == "sstr":
            if match.group("send") is None:
                unclosed = True
                return text
            found["read single-quoted strings (json5)"] = None
            return '"' + _SINGLE_QUOTED_ESCAPE.sub(_requote, text[1:-1]) + '"'
        if kind == "line":
            found["stripped // comments (json5)" if text[0] == "/" else "stripped # comments"] = (
                None
            )
        else:
            found["stripped /* */ comments (json5)"] = None
        return _BLANK.sub(" ", text)  # same length, same lines: error positions still hold

    def pass2(match: re.Match[str]) -> str:
        key = match.group("key")
        if key is not None:
            found["read unquoted keys (json5)"] = None
            return match.group("space") + json.dumps(key)
        if match.group("trailing") is not None:
            found["removed trailing commas (json5)"] = None
            return ""
        literal = match.group("literal")
        if literal is not None:
            found["converted Python literals True/False/None to JSON"] = None
            return _PY_LITERALS[literal]
        return match.group()

    text = _PASS1.sub(pass1, span)
    if unclosed:
        return None
    return _PASS2.sub(pass2, text), list(found)


def _json5_loads(span: str) -> Any:
    constants: list[str] = []
    duplicates: list[str] = []

    def note_constant(name: str) -> None:
        constants.append(name)  # json5 re-raises errors from here as plain ValueError

    # json5 re-raises what its hooks raise as plain ValueErrors: the strict hooks' verdicts
    # are noted here instead, and raised after it returns.
    def note_pairs(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        pairs = list(items)
        try:
            return _unique_pairs(pairs)
        except _DuplicateKey as exc:
            duplicates.append(str(exc))
            return dict(pairs)

    def note_float(text: str) -> float:
        try:
            return _finite_float(text)
        except _NonJsonConstant as exc:
            constants.append(str(exc))
            return float(text)

    try:
        value = json5.loads(
            span,
            parse_constant=note_constant,
            parse_float=note_float,
            object_pairs_hook=note_pairs,
        )
    except RecursionError as exc:
        raise ValueError("the JSON is nested too deeply to read") from exc
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        # json5 reports syntax errors as ValueError; the others guard its corner cases.
        raise ValueError(str(exc) or type(exc).__name__) from exc
    if constants:
        raise _NonJsonConstant(constants[0])
    if duplicates:
        raise _DuplicateKey(duplicates[0])
    return _join_surrogates(value)


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _join_surrogates(value: Any) -> Any:
    """json5 reads an escaped pair such as ``\\ud83d\\ude80`` as two lone surrogates: join
    them into the character they encode (json.loads does)."""
    if isinstance(value, str):
        if _SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_join_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_join_surrogates(k): _join_surrogates(v) for k, v in value.items()}
    return value


def _repair_load(span: str) -> tuple[Any, list[str]]:
    """json_repair, the last resort, on a span whose braces and strings are all closed."""
    import json_repair

    if len(span) > _JSON5_MAX_CHARS:
        raise ValueError(f"too long for json_repair (at most {_JSON5_MAX_CHARS} characters)")

    try:
        value, log = json_repair.repair_json(span, return_objects=True, logging=True)
        # json_repair's contract is "always return something", not "raise ValueError": it
        # is only ever given a closed span, and anything it throws means "not repairable".
    except Exception as exc:
        raise ValueError(f"json_repair could not repair it ({type(exc).__name__})") from exc
    texts = [
        str(entry.get("text", entry)) if isinstance(entry, dict) else str(entry) for entry in log
    ]
    detail = "; ".join(dict.fromkeys(texts)) or "fixed the syntax"
    lost = _lost_content(span, value)
    if lost is not None:
        raise ValueError(
            f"json_repair could only read it by dropping or rewriting {lost!r}, and that is "
            "not applied"
        )
    written = _top_level_keys(span)
    if not isinstance(value, dict) or set(value) != written:
        raise ValueError(
            "json_repair could only read it by moving top-level fields "
            f"({', '.join(sorted(written)) or 'none'} written at the top level), and that is "
            "not applied"
        )
    return value, [f"json_repair: {detail}"]


def _top_level_keys(span: str) -> set[str]:
    """The keys written directly inside the outermost braces of ``span``."""
    keys: set[str] = set()
    depth = 0
    pending: str | None = None
    for match in _tokens(span):
        kind = match.lastgroup
        if kind in ("ws", "lcomment", "bcomment"):
            continue
        if kind == "colon" and pending is not None:
            keys.add(pending)
        pending = None
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth -= 1
        elif depth == 1 and kind in ("dstr", "sstr", "word"):
            token = match.group()
            if kind == "word":
                pending = token
            else:
                body = token[1:-1]
                if kind == "sstr":
                    body = _SINGLE_QUOTED_ESCAPE.sub(_requote, body)
                try:
                    pending = _STRICT.decode(f'"{body}"')
                except (ValueError, RecursionError):
                    pending = body
    return keys


def _lost_content(span: str, value: Any) -> str | None:
    """The first literal of ``span`` (a string, number or word, comments aside) that is
    missing from json_repair's result: a repair that guessed rather than fixed syntax."""
    texts: list[str] = []
    numbers: set[float] = set()

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, item in node.items():
                texts.append(str(key))
                collect(item)
        elif isinstance(node, list):
            for item in node:
                collect(item)
        else:
            texts.append(json.dumps(node, ensure_ascii=False).strip('"'))
            if isinstance(node, str):
                texts.append(node)
            elif isinstance(node, (int, float)) and not isinstance(node, bool):
                numbers.add(float(node))

    collect(value)
    exact = set(texts)
    haystack = "\x00".join(texts)
    literals = {"True": "true", "False": "false", "None": "null"}
    for match in _tokens(span):
        kind = match.lastgroup
        token = match.group()
        if kind in ("dstr", "sstr"):
            body = token[1:-1] if len(token) > 1 and token[-1] == token[0] else token[1:]
            if kind == "sstr":
                body = _SINGLE_QUOTED_ESCAPE.sub(_requote, body)
            try:
                needle = _STRICT.decode(f'"{body}"')
            except (ValueError, RecursionError):
                needle = body
        elif kind == "word":
            try:
                if float(token) in numbers:
                    continue
            except ValueError:
                pass
            needle = literals.get(token, token)
        else:
            continue
        if needle not in exact and needle not in haystack:
            return token
    return None


def _request_like(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    for key in value:
        if not isinstance(key, str):
            continue
        norm = _norm(key)
        if norm in _SHAPE_NAMES or difflib.get_close_matches(norm, _SHAPE_NAMES, 1, 0.8):
            return True
    return False


def _standalone(text: str, start: int, end: int) -> bool:
    """The span is alone on its lines (fences and tags aside)."""
    before = text[text.rfind("\n", 0, start) + 1 : start]
    after_end = text.find("\n", end)
    after = text[end : len(text) if after_end == -1 else after_end]
    return not _DECORATION.sub("", before + after).strip()


@dataclass(slots=True)
class _Reader:
    reply: str
    repairs: list[str] = field(default_factory=list)

    # -- finding the object --

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
        if stripped[0] in '{"':
            try:
                whole = _STRICT.decode(stripped)
            except _NonJsonConstant as exc:
                self._non_json(exc)
            except (ValueError, RecursionError) as exc:
                if stripped[0] == '"' and stripped[1:2] in ("{", "[", "\\", '"'):
                    self._string_reply_failed(stripped, exc)
            else:
                if isinstance(whole, dict):
                    return whole, stripped
                if isinstance(whole, str):
                    self.repairs.append("decoded the change request from a JSON string")
                    return self.read(whole, depth=depth + 1)
        return self._scan(text)

    def _string_reply_failed(self, stripped: str, exc: BaseException) -> None:
        """A reply that opens like a JSON string of JSON but does not decode: truncated when
        the string never closes."""
        match = _SCAN_TOKEN.match(stripped)
        if match is not None and match.lastgroup == "dstr" and match.group("dend") is None:
            _truncated(self.reply, "the reply is a JSON string that never closes", cause=exc)

    def _non_json(self, exc: BaseException) -> NoReturn:
        if isinstance(exc, _DuplicateKey):
            key = json.dumps(str(exc), ensure_ascii=False)
            _syntax(
                self.reply,
                f"The reply's JSON gives the key {key} twice in one object; a JSON reader keeps "
                "only the last, so the first would be lost. Ask again with the feedback.",
                f"your reply gives the key {key} twice in one object, so one of them would be "
                "lost. Put everything for that key under one occurrence.",
                cause=exc,
            )
        _syntax(
            self.reply,
            f"The reply's JSON holds {exc}; NaN and Infinity cannot be merged into JSON "
            "data. Ask again with the feedback.",
            f"your reply's JSON holds {exc}. Use a number or null instead.",
            cause=exc,
        )

    def _scan(self, original: str) -> tuple[dict[str, Any], str]:
        text, thinking_open = self._set_aside_thinking(original)
        candidates, truncated_at = self._candidates(text)
        if truncated_at is not None:
            _truncated(
                self.reply,
                f"the reply ends inside the JSON object opened at {_where(text, truncated_at)}",
            )
        chosen = [c for c in candidates if self._is_request(text, c)]
        if thinking_open is not None and not chosen:
            _truncated(
                self.reply,
                f"the reply ends inside the <thinking> block opened at "
                f"{_where(text, thinking_open)}, before any change request",
            )
        if chosen:
            return self._take(text, chosen[-1], len(candidates))
        if _REFUSAL.search(text.replace("\u2019", "'")):
            _refuse(self.reply, "the reply declines the task")
        rest = [
            c
            for c in candidates
            if c.value or (c.value is None and _JSON_START.match(text, c.start))
        ]
        if rest:
            return self._take(text, rest[-1], len(candidates))
        if len(_UNCLOSED_FENCE.findall(text)) % 2 == 1 and not candidates:
            _truncated(self.reply, "the reply ends inside a code fence, before any JSON object")
        if candidates:
            _no_request(self.reply, "the reply holds only prose; its braces hold no JSON object")
        _no_request(self.reply, "the reply holds no JSON object")

    def _set_aside_thinking(self, text: str) -> tuple[str, int | None]:
        pos = 0
        while True:
            match = _THINKING_OPEN.search(text, pos)
            if match is None:
                return text, None
            close = re.compile(rf"</{re.escape(match.group(1))}\s*>", re.IGNORECASE)
            end = close.search(text, match.end())
            if end is None:
                return _mask(text, match.start(), len(text)), match.start()
            text = _mask(text, match.start(), end.end())
            self.repairs.append(f"removed <{match.group(1)}> block")
            pos = end.end()

    def _candidates(self, text: str) -> tuple[list[_Candidate], int | None]:
        found: list[_Candidate] = []
        scans = 0
        i = text.find("{")
        while i != -1:
            constant: _NonJsonConstant | None = None
            try:
                value, end = _STRICT.raw_decode(text, i)
            except _NonJsonConstant as exc:
                constant = exc
            except (ValueError, RecursionError):
                pass
            else:
                found.append(_Candidate(i, end, value))
                i = text.find("{", end)
                continue
            if scans >= _MAX_TOLERANT_SCANS:
                i = text.find("{", i + 1)
                continue
            scans += 1
            scan = _match_braces(text, i)
            if scan.end is None:
                if scan.json_like:
                    return found, i
                i = text.find("{", i + 1)
                continue
            span = text[i : scan.end]
            if constant is not None:
                found.append(_Candidate(i, scan.end, None, error=constant))
                i = text.find("{", scan.end)
                continue
            try:  # json5 (slow) only for the object chosen, in _take
                value, repairs = _lenient_load(span, json5_too=False)
            except (ValueError, RecursionError) as exc:
                found.append(_Candidate(i, scan.end, None, error=exc))
            else:
                found.append(_Candidate(i, scan.end, value, repairs))
            i = text.find("{", scan.end)
        return found, None

    def _is_request(self, text: str, candidate: _Candidate) -> bool:
        if candidate.value is None:
            head = text[candidate.start : candidate.start + 4000]
            return _REQUEST_KEY.search(head) is not None
        if candidate.value == {}:
            return _standalone(text, candidate.start, candidate.end)
        return _request_like(candidate.value)

    def _take(self, text: str, candidate: _Candidate, count: int) -> tuple[dict[str, Any], str]:
        span = text[candidate.start : candidate.end]
        if isinstance(candidate.error, _NonJsonConstant):
            self._non_json(candidate.error)
        value = candidate.value
        if value is None:
            value, candidate.repairs = self._read_hard(text, candidate, span)
        before = text[: candidate.start]
        if _FENCE_BEFORE.search(before):
            self.repairs.append("removed code fence")
        tag = _TAG_BEFORE.search(before)
        if tag is not None:
            self.repairs.append(f"removed <{tag.group(1)}> tags")
        outside = _DECORATION.sub("", before + text[candidate.end :])
        if outside.strip():
            self.repairs.append("ignored text around the JSON object")
        if count > 1:
            self.repairs.append(f"took the last change request of {count} JSON objects")
        self.repairs.extend(candidate.repairs)
        return value, span

    def _read_hard(
        self, text: str, candidate: _Candidate, span: str
    ) -> tuple[dict[str, Any], list[str]]:
        """The chosen object, which strict JSON and the translation could not read: json5,
        then json_repair (whose result must be shaped like a change request)."""
        error = candidate.error
        try:
            value, repairs = _lenient_load(span)
        except _NonJsonConstant as exc:
            self._non_json(exc)
        except (ValueError, RecursionError) as exc:
            error = exc
        else:
            if isinstance(value, dict):
                return value, repairs
        detail = str(error) if error is not None else "unreadable"
        repair_detail = "json_repair's result is not a change request"
        try:
            value, repairs = _repair_load(span)
        except ValueError as exc:
            value, repairs = None, []
            repair_detail = str(exc)
        if isinstance(value, dict) and _request_like(value):
            return value, repairs
        _syntax(
            self.reply,
            f"The JSON object at {_where(text, candidate.start)} of the reply cannot be read, "
            f"even as JSON5 ({detail}) or after json_repair ({repair_detail}). Ask again with "
            "the feedback.",
            f"the JSON object in your reply cannot be read ({detail}). Use strict JSON: "
            "double-quoted keys and strings, no comments, no trailing commas.",
            cause=error,
        )

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
                self.repairs.append(f"ignored {snake}: {camel} is given too (camelCase wins)")
            if has_snake and not has_camel:
                self.repairs.append(f"renamed {snake} to {camel}")
                value = obj[snake]
            else:
                value = obj.get(camel)
            data[camel] = self._bucket(camel, value)
        data["reasoning"] = self._reasoning(obj.get("reasoning"))
        try:
            return AgentPayloadChangeRequest.model_validate(data)
        except (ValidationError, RecursionError) as exc:  # pragma: no cover - JSON input
            _syntax(
                self.reply,
                f"The change request read from the reply is not valid: {exc}",
                "your change request could not be read as JSON data.",
                cause=exc,
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
                    f"{_kind(inner)}. Ask again with the feedback.",
                    f"{name} must hold the change request object, not {_kind(inner)}.",
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
        try:
            decoded, _ = _lenient_load(stripped)
        except (ValueError, RecursionError) as exc:
            scan = _match_braces(stripped, 0) if stripped[0] == "{" else None
            if scan is not None and scan.end is None:
                _truncated(self.reply, f"{name} holds a JSON string that is cut off", cause=exc)
            _syntax(
                self.reply,
                f"{name}: holds a string that looks like JSON but cannot be read: {exc}. "
                "Ask again with the feedback.",
                f"{name} must be a JSON object, not a string holding broken JSON ({exc}).",
                path=name,
                cause=exc,
            )
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
            f"found {_kind(value)}. Ask again with the feedback.",
            f"{name} must be an object shaped like the payload (an array only when the "
            f"payload's root is an array), not {_kind(value)}.",
            path=name,
        )

    def _reasoning(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            self.repairs.append("joined reasoning from a list of strings")
            return "\n".join(value)
        self.repairs.append(f"converted reasoning from {_kind(value)} to text")
        return json.dumps(value, ensure_ascii=False)


def _absent(value: Any) -> bool:
    return value is None or value == {} or value == []


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__  # pragma: no cover - JSON input only
