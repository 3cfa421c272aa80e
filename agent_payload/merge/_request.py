"""The change request as the walk reads it: buckets, reasoning, top-level issues."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_payload._jsondata import describe, format_request_path, kind_word
from agent_payload._normalise import Reactions, UnknownField, normalise_request, reasoning_text
from agent_payload.changes import WIRE_NAMES, AgentPayloadChangeRequest
from agent_payload.errors import InvalidChangeRequestError
from agent_payload.merge._limits import Limits, _checked_copy
from agent_payload.merge._nodes import _is_empty_container
from agent_payload.report import Issue


@dataclass(slots=True)
class _Request:
    buckets: dict[str, Any]  # camelCase name -> JSON data (absent buckets are not here)
    reasoning: str | None
    issues: list[Issue]  # the top level's conflicts (unknown_field, both_spellings)


def _normalise_request(change_request: Any, limits: Limits) -> _Request:
    if change_request is None:
        return _Request({}, None, [])
    if isinstance(change_request, AgentPayloadChangeRequest):
        raw: Any = {wire: getattr(change_request, name) for name, wire in WIRE_NAMES.items()}
    elif isinstance(change_request, Mapping):
        raw = dict(change_request)
    else:
        raise InvalidChangeRequestError(
            f"A change request must be an AgentPayloadChangeRequest, a mapping in wire form "
            f"(newElements, updateElements, removeElements, replaceElements, reasoning) or None; "
            f"found {describe(change_request)}.",
        )
    for key in raw:
        if not isinstance(key, str):
            raise InvalidChangeRequestError(
                f"The change request has the top-level key {key!r} of type "
                f"{type(key).__name__}; its keys must be strings.",
                path="",
            )
    reactions = _RequestReactions()
    read = normalise_request(_checked_copy(raw, limits, "request"), reactions)
    buckets = {
        k: v for k, v in read.buckets.items() if v is not None and not _is_empty_container(v)
    }
    return _Request(buckets, reasoning_text(read.reasoning), reactions.issues)


class _RequestReactions(Reactions):
    """The merge's reactions to the one normaliser's findings: conflicts, applying the rest."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []

    def not_an_object(self, wrapper: str, value: Any) -> None:
        self.issues.append(
            Issue(
                "unknown_field",
                format_request_path([wrapper]),
                f"{wrapper} is a wrapper, but it holds {kind_word(value)} instead of the wrapped "
                "change request, so none of it was applied. Send the change request itself: "
                "one object with the buckets at the top level.",
            )
        )

    def unknown(self, fields: Sequence[UnknownField]) -> None:
        self.issues.extend(_unknown_field(f) for f in fields)

    def spellings_differ(self, camel: str, snake: str) -> None:
        self.issues.append(
            Issue(
                "both_spellings",
                format_request_path([snake]),
                f"{snake} and {camel} are the same bucket spelt two ways, with different "
                "content; which one was meant cannot be known, so neither was applied. Send "
                f"each bucket once, spelt {camel}.",
            )
        )


def _unknown_field(field: UnknownField) -> Issue:
    key = field.name
    hint = f" Did you mean {field.suggestion}?" if field.suggestion else ""
    if field.is_wrapper and field.beside is None:
        what = (
            f"{key} is a wrapper, but the change request already has buckets of its own at the "
            "top level, so it was not unwrapped and its content was not applied. Send one change "
            "request: the buckets at the top level, without the wrapper."
        )
    elif field.is_wrapper:
        what = (
            f"{key} is a second wrapper beside the {field.beside} wrapper, which was unwrapped; "
            "its content was not applied. Send one change request, without wrappers."
        )
    else:
        beside = f" (beside the {field.beside} wrapper)" if field.beside else ""
        what = (
            f"{json.dumps(key, ensure_ascii=False)}{beside} is not a field of a change request; "
            "its content was not applied. The only top-level fields are newElements, "
            "updateElements, removeElements, replaceElements and reasoning: put payload changes "
            f"inside one of the buckets, e.g. updateElements.{hint}"
        )
    return Issue("unknown_field", format_request_path([key]), what)
