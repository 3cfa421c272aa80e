# The change-request normaliser: wrappers unwrapped, snake_case bucket names accepted, unknown
# top-level fields reported, the request checked to be JSON data and copied. Kept whole in this
# one file: it is to become the one normaliser that the parser shares.
"""The change request as the walk reads it: buckets, reasoning, top-level issues."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent_payload._jsondata import (
    Problem,
    _Bad,
    copy_tree,
    describe,
    format_request_path,
    locate_problem,
)
from agent_payload.changes import BUCKETS, WIRE_NAMES, AgentPayloadChangeRequest
from agent_payload.errors import InvalidChangeRequestError
from agent_payload.merge._limits import Limits, _limit_error
from agent_payload.merge._nodes import _is_empty_container
from agent_payload.report import Issue

WRAPPERS: Final[tuple[str, ...]] = (
    "payloadChangeRequest",
    "changeRequest",
    "change_request",
    "payload_change_request",
)
"""Top-level wrappers that are unwrapped when the top level has no bucket of its own."""

_SNAKE: Final[dict[str, str]] = {v: k for k, v in WIRE_NAMES.items() if k != v}
"""camelCase bucket name -> snake_case spelling."""
_SNAKE_TO_CAMEL: Final[dict[str, str]] = {k: v for k, v in WIRE_NAMES.items() if k != v}
_KNOWN_FIELDS: Final[tuple[str, ...]] = (*BUCKETS, "reasoning")


@dataclass(slots=True)
class _Request:
    buckets: dict[str, Any]  # camelCase name -> JSON data (absent buckets are not here)
    reasoning: str | None
    issues: list[Issue]  # unknown_field conflicts and shadowed warnings of the top level


def _empty_bucket(v: Any) -> bool:
    return v is None or _is_empty_container(v)


def _copy_request(data: Any, limits: Limits) -> Any:
    try:
        return copy_tree(data, limits.max_depth, limits.max_request_nodes)
    except _Bad:
        problem = locate_problem(data, limits.max_depth, limits.max_request_nodes)
        raise _request_problem(problem, limits) from None
    except RecursionError as exc:  # pragma: no cover - copy_tree is iterative
        raise InvalidChangeRequestError("The change request is nested too deeply.") from exc


def _request_problem(problem: Problem | None, limits: Limits) -> Exception:
    if problem is None:  # pragma: no cover - the locator finds what the copy refused
        return InvalidChangeRequestError("The change request is not JSON data.")
    where = format_request_path(problem.path) or "the top level"
    exceeded = _limit_error("request", problem, where, limits)
    if exceeded is not None:
        return exceeded
    return InvalidChangeRequestError(
        f"The change request holds {problem.detail} at {where}; expected JSON data "
        "(dict with string keys, list, str, int, float, bool, None). Convert it to JSON data "
        "first.",
        path=where,
    )


def _normalise_request(change_request: Any, limits: Limits) -> _Request:
    if change_request is None:
        return _Request({}, None, [])
    if isinstance(change_request, AgentPayloadChangeRequest):
        raw: Any = {
            "newElements": change_request.new_elements,
            "updateElements": change_request.update_elements,
            "removeElements": change_request.remove_elements,
            "replaceElements": change_request.replace_elements,
            "reasoning": change_request.reasoning,
        }
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
    raw = _copy_request(raw, limits)
    issues: list[Issue] = []
    outer_reasoning: Any = None
    for _ in range(limits.max_depth):
        if any(not _empty_bucket(raw.get(n)) for n in (*BUCKETS, *_SNAKE.values())):
            break
        wrapper = next((w for w in WRAPPERS if isinstance(raw.get(w), dict)), None)
        if wrapper is None:
            break
        if raw.get("reasoning") is not None:
            outer_reasoning = raw["reasoning"]
        for key in raw:
            if key == wrapper or key == "reasoning":
                continue
            if key in _KNOWN_FIELDS or key in _SNAKE_TO_CAMEL:
                continue  # an empty bucket beside the wrapper: absent
            issues.append(_unknown_field(key, wrapper_beside=wrapper))
        raw = raw[wrapper]
    buckets: dict[str, Any] = {}
    reasoning: Any = None
    for key, value in raw.items():
        if key in BUCKETS:
            if not _empty_bucket(value):
                buckets[key] = value
        elif key in _SNAKE_TO_CAMEL:
            pass
        elif key == "reasoning":
            reasoning = value
        else:
            issues.append(_unknown_field(key, wrapper_beside=None))
    for snake, camel in _SNAKE_TO_CAMEL.items():
        if snake not in raw or _empty_bucket(raw[snake]):
            continue
        if camel in buckets:
            issues.append(
                Issue(
                    "shadowed",
                    format_request_path([snake]),
                    f"{snake} and {camel} are the same bucket spelt two ways; {camel} was "
                    f"applied and {snake} was ignored. Send each bucket once, spelt {camel}.",
                )
            )
        else:
            buckets[camel] = raw[snake]
    if reasoning is None:
        reasoning = outer_reasoning
    if reasoning is not None and not isinstance(reasoning, str):
        reasoning = json.dumps(reasoning, ensure_ascii=False)
    return _Request(buckets, reasoning, issues)


def _unknown_field(key: str, *, wrapper_beside: str | None) -> Issue:
    candidates = [*BUCKETS, "reasoning", *_SNAKE_TO_CAMEL]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]}?" if close else ""
    if key in WRAPPERS:
        what = (
            f"{key} is a wrapper, but the change request already has buckets of its own at the "
            "top level, so it was not unwrapped and its content was not applied. Send one change "
            "request: the buckets at the top level, without the wrapper."
        )
    else:
        beside = f" (beside the {wrapper_beside} wrapper)" if wrapper_beside else ""
        what = (
            f"{json.dumps(key, ensure_ascii=False)}{beside} is not a field of a change request; "
            "its content was not applied. The only top-level fields are newElements, "
            "updateElements, removeElements, replaceElements and reasoning: put payload changes "
            f"inside one of the buckets, e.g. updateElements.{hint}"
        )
    return Issue("unknown_field", format_request_path([key]), what)


# --- payload intake ----------------------------------------------------------------------------
