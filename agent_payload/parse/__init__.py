"""Model text -> change request (pure: no I/O); it never guesses. What is accepted and what is
sent back: docs/format.md. Time is linear in the reply's length (``bench/parse.py``): the scan
skips whatever an object it read spans and never rescans."""

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
    bare, strict JSON reply); ``raw_json`` is the JSON text the change request was read from."""

    change_request: AgentPayloadChangeRequest
    repairs: tuple[str, ...] = ()
    raw_json: str = ""


def parse_change_request(
    text: str | None, *, finish_reason: str | None = None
) -> AgentPayloadChangeRequest:
    """Read the change request from a model's reply.

    ``finish_reason`` is the provider's stop reason when known (``"length"``, ``"max_tokens"``,
    ``"refusal"``, ...). Raises a ``ModelReplyError`` subclass (with ``feedback`` for the
    model) when the reply cannot be used; see docs/format.md for what is accepted."""
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
