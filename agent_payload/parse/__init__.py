"""Model text -> change request (pure: no I/O, no SDK). It never guesses.

This package owns the public entry points (``parse_change_request``,
``parse_change_request_with_repairs``, ``ParsedReply``) and the finish reasons; its modules:
``_find`` finds the object in the model's text (candidates, fences, tags, thinking, ambiguity),
``_strict`` and ``_grammar`` decode it (strict JSON in C, else the lenient JSON5-ish reader, with
damage reports), ``_request`` turns the object into the change request (through the one
normaliser, ``agent_payload._normalise``), ``_errors`` builds the errors sent back.

``parse_change_request(text, finish_reason=...)`` finds the change request in whatever a model
sent back and returns an ``AgentPayloadChangeRequest``; ``parse_change_request_with_repairs``
also says what was normalised on the way (``ParsedReply.repairs``). What is returned is exactly
what the model wrote; anything damaged or ambiguous raises a ``ModelReplyError`` whose
``problems`` tell the model where and what to fix (its ``feedback`` is rendered from them by
the prompts layer's correction template: the parser renders no prompt text).

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
  opening tag before it: everything before it is thinking); a gpt-oss "harmony" reply with a
  ``final`` channel is read from that channel alone (``analysis`` is thinking); beside a closed
  ``<final_answer>`` or ``<answer>`` block, ``<draft>`` blocks are set aside;
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

from dataclasses import dataclass

from agent_payload._normalise import WRAPPERS
from agent_payload._reply import REFUSAL_FINISH_REASONS, TRUNCATION_FINISH_REASONS
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import UsageError
from agent_payload.parse._errors import _refuse, _truncated
from agent_payload.parse._find import _Reader
from agent_payload.parse._grammar import MAX_REPLY_DEPTH
from agent_payload.parse._request import _Normaliser

__all__ = [
    "MAX_REPLY_DEPTH",
    "REFUSAL_FINISH_REASONS",
    "TRUNCATION_FINISH_REASONS",
    "WRAPPERS",
    "ParsedReply",
    "parse_change_request",
    "parse_change_request_with_repairs",
]


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A change request read from a model's reply.

    ``repairs`` says, in words, what had to be repaired or normalised to read it (empty for a
    bare, strict JSON reply); ``raw_json`` is the JSON text the change request was read from.
    """

    change_request: AgentPayloadChangeRequest
    repairs: tuple[str, ...] = ()
    raw_json: str = ""


def parse_change_request(
    text: str | None, *, finish_reason: str | None = None
) -> AgentPayloadChangeRequest:
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
    request = _Normaliser(reply=text, repairs=reader.repairs).normalise(obj)
    return ParsedReply(request, tuple(dict.fromkeys(reader.repairs)), raw)
