"""Limits, and the errors for payload data beyond them or not JSON data at all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from agent_payload._jsondata import (
    Link,
    Problem,
    _Bad,
    copy_tree,
    describe,
    format_request_path,
    locate_problem,
    materialize,
    not_json_message,
)
from agent_payload._paths import format_payload_path
from agent_payload.errors import (
    ConfigurationError,
    InvalidChangeRequestError,
    InvalidPayloadError,
    LimitExceededError,
)
from agent_payload.merge._nodes import _ARR, _OBJ, _kind


@dataclass(frozen=True, slots=True)
class Limits:
    """Size limits that protect the merge from hostile or runaway input; exceeding one raises
    ``LimitExceededError`` naming the limit, the value found, the maximum and where.

    * ``max_depth``: nesting of containers in the payload and in the change request.
    * ``max_nodes``: values in the payload, the root included (checked while the default mode
      copies it; ``share=True`` checks only where the walk copies).
    * ``max_request_nodes``: values in the change request.
    * ``max_report_path_parts``: the lengths of the paths of all warnings and conflicts, added up
      (it bounds the report of a hostile request wrong at every level of a very deep path)."""

    max_depth: int = 20_000
    max_nodes: int = 10_000_000
    max_request_nodes: int = 1_000_000
    max_report_path_parts: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_nodes", "max_request_nodes", "max_report_path_parts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"Limits.{name} must be a positive int; found {value!r}. "
                    f"Leave it out to use the default ({getattr(DEFAULT_LIMITS, name, '?')})."
                )


DEFAULT_LIMITS: Final = Limits()


def _check_limits(limits: Limits | None) -> Limits:
    if limits is None:
        return DEFAULT_LIMITS
    if not isinstance(limits, Limits):
        raise ConfigurationError(f"limits must be a Limits instance or None; found {limits!r}.")
    return limits


_LIMIT_MESSAGES: Final[dict[tuple[str, str], tuple[str, str]]] = {
    ("request", "depth"): (
        "max_depth",
        "The change request is nested {value} levels deep at {where}, deeper than "
        "max_depth={maximum}. Send a shallower change request, or raise Limits(max_depth=...).",
    ),
    ("request", "nodes"): (
        "max_request_nodes",
        "The change request holds more than max_request_nodes={maximum} values (counted up to "
        "{where}). Split it into smaller change requests, or raise "
        "Limits(max_request_nodes=...).",
    ),
    ("payload", "depth"): (
        "max_depth",
        "The payload is nested {value} levels deep at {where}, deeper than max_depth={maximum}. "
        "Raise Limits(max_depth=...) if this is intended.",
    ),
    ("payload", "nodes"): (
        "max_nodes",
        "The payload holds more than max_nodes={maximum} values (counted up to {where}). Raise "
        "Limits(max_nodes=...) if this is intended.",
    ),
}
"""(input, problem kind) -> (the limit it exceeds, the message template)."""


def _checked_copy(data: Any, limits: Limits, subject: str = "payload", at: Link = None) -> Any:
    """A checked deep copy of payload data (or, ``subject="request"``, change-request data);
    ``at`` is where ``data`` stands in the payload."""
    nodes = limits.max_nodes if subject == "payload" else limits.max_request_nodes
    try:
        return copy_tree(data, limits.max_depth, nodes)
    except _Bad:
        problem = locate_problem(data, limits.max_depth, nodes)
    assert problem is not None, "the locator finds what the copy refused"
    if at is not None:
        problem.path = materialize(at) + problem.path
    raise _not_data(subject, problem, limits)


def _not_data(subject: str, problem: Problem, limits: Limits) -> Exception:
    """The error for data beyond a limit (``LimitExceededError``) or not JSON data."""
    if subject == "payload":
        where = format_payload_path(problem.path)
    else:
        where = format_request_path(problem.path) or "the top level"
    entry = _LIMIT_MESSAGES.get((subject, problem.kind))
    if entry is not None:
        limit, template = entry
        maximum = getattr(limits, limit)
        shown = where
        if len(where) > 200:
            shown = f"{where[:80]}…({len(where) - 160} characters)…{where[-80:]}"
        return LimitExceededError(
            template.format(value=problem.value, where=shown, maximum=maximum),
            limit=limit,
            value=problem.value,
            maximum=maximum,
            path=where,
        )
    if subject == "request":
        message = not_json_message(problem, "The change request", where)
        return InvalidChangeRequestError(message, path=where)
    return InvalidPayloadError(not_json_message(problem, "The payload", where), path=problem.path)


def _check_root(payload: Any) -> None:
    """Refuse a payload root that is not an object or an array (``InvalidPayloadError``)."""
    if _kind(payload) in (_OBJ, _ARR):
        return
    expected = (
        "The payload root must be a JSON object (dict), a JSON array (list), None (treated as "
        "{}) or a pydantic model instance"
    )
    if isinstance(payload, type):
        found = f"found the class {payload.__name__}: pass an instance of it"
    else:
        described = describe(payload)
        name = type(payload).__name__
        if name not in described:
            described += f" (type {name})"
        found = f"found {described}. Wrap the value in an object, e.g. {{'value': ...}}"
    raise InvalidPayloadError(f"{expected}; {found}.", path=())
