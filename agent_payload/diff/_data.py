"""The diff's JSON helpers: minified sizes (``_dumps``: the cost of every choice)
and the intake of payloads (``_as_data``)."""

from __future__ import annotations

import json
import sys
from typing import Any, Final

from agent_payload._jsondata import json_data, locate_problem, not_json_message
from agent_payload._paths import format_payload_path
from agent_payload.errors import InvalidPayloadError, LimitExceededError
from agent_payload.merge import DEFAULT_LIMITS
from agent_payload.parse._request import _depth

MAX_DIFF_DEPTH = 200
"""Deepest change request ``diff_payloads`` writes (containers nested in one bucket):
``AgentPayloadChangeRequest`` (pydantic ``JsonValue``) holds values about 250 levels deep and
no deeper. Payloads may be deeper (as deep as the merge accepts) where nothing changes."""


_MISSING: Final[Any] = object()


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_KEY_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=True
)


def _dumps(value: Any) -> str:
    """Minified JSON (one encoder made once; plain primitives written directly)."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    return _ENCODER.encode(value)


_SAME_IF_EQUAL: frozenset[type] = frozenset({str, int, bool, float})


def _as_data(value: Any, what: str) -> tuple[Any, bool, int]:
    """The data (a pydantic model dumped in JSON mode, ``None`` as ``{}``), whether it holds no
    subclass of the JSON types (``_depth(plain_within=)``) and its depth; raises for a root that
    is not a container, data that is not JSON (naming the path) or more than the merge accepts."""
    value = json_data(value)
    if value is None:
        return {}, True, 1
    if not isinstance(value, dict | list):
        raise InvalidPayloadError(
            f"{what}: expected an object or an array at the root, found a "
            f"{type(value).__name__}; wrap the value in an object.",
            path=(),
        )
    depth = _depth(value, DEFAULT_LIMITS.max_nodes)
    if depth is not None:
        return value, True, depth
    problem = locate_problem(value, sys.maxsize, DEFAULT_LIMITS.max_nodes)
    if problem is None:
        return value, False, _depth(value)  # JSON data, with subclasses (a str enum, ...)
    where = format_payload_path(problem.path)
    if problem.kind == "nodes":
        raise LimitExceededError(
            f"{what} holds more than max_nodes={DEFAULT_LIMITS.max_nodes} values (counted up "
            f"to {where}), more than the merge accepts. Diff a smaller part of it.",
            limit="max_nodes",
            value=problem.value,
            maximum=DEFAULT_LIMITS.max_nodes,
            path=where,
        )
    raise InvalidPayloadError(not_json_message(problem, f"The {what}", where), path=problem.path)
