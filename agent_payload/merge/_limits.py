# What the merge accepts: the size limits (``Limits``, ``DEFAULT_LIMITS``) and the errors for
# inputs beyond them or not JSON data at all: the limit messages (request and payload), the
# checked copy of payload data and the error for a root of the wrong kind.
"""Limits and the checks on the payload's data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from agent_payload._jsondata import (
    Link,
    Problem,
    _Bad,
    copy_tree,
    describe,
    locate_problem,
    materialize,
    not_json_message,
    where_in_payload,
)
from agent_payload.errors import ConfigurationError, InvalidPayloadError, LimitExceededError


@dataclass(frozen=True, slots=True)
class Limits:
    """Size limits that protect the merge from hostile or runaway input.

    Exceeding one raises :class:`~agent_payload.errors.LimitExceededError` naming the limit,
    the value found, the maximum and where.

    * ``max_depth`` (default 20,000): nesting of containers in the payload and in the change
      request. Payloads 10,000 levels deep merge fine; a cycle in the payload is reported as
      such before this limit matters.
    * ``max_nodes`` (default 10,000,000): values in the payload (every member and element
      counts, the root too). Checked while the default mode copies the payload; ``share=True``
      never walks the whole payload and checks it only where the walk copies.
    * ``max_request_nodes`` (default 1,000,000): values in the change request.
    * ``max_report_path_parts`` (default 1,000,000): the lengths of the paths of all warnings
      and conflicts, added up. It bounds the report of a hostile request that is wrong at every
      level of a very deep path (each issue names a path as long as its depth); ordinary
      requests, even with thousands of warnings, stay far below it.
    """

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


def _limit_error(
    subject: str, problem: Problem, where: str, limits: Limits
) -> LimitExceededError | None:
    """The LimitExceededError for a depth or size problem of the request or the payload."""
    entry = _LIMIT_MESSAGES.get((subject, problem.kind))
    if entry is None:
        return None
    limit, template = entry
    maximum = getattr(limits, limit)
    shown = (
        where
        if len(where) <= 200
        else f"{where[:80]}…({len(where) - 160} characters)…{where[-80:]}"
    )
    return LimitExceededError(
        template.format(value=problem.value, where=shown, maximum=maximum),
        limit=limit,
        value=problem.value,
        maximum=maximum,
        path=where,
    )


def _payload_problem(problem: Problem | None, limits: Limits) -> Exception:
    assert problem is not None, "the locator finds what the copy refused"
    where = where_in_payload(problem.path)
    exceeded = _limit_error("payload", problem, where, limits)
    if exceeded is not None:
        return exceeded
    return InvalidPayloadError(not_json_message(problem, "The payload", where), path=problem.path)


def _copy_payload(data: Any, limits: Limits, at: Link = None) -> Any:
    """A checked deep copy of payload data; ``at`` is where ``data`` stands in the payload."""
    try:
        return copy_tree(data, limits.max_depth, limits.max_nodes)
    except _Bad:
        problem = locate_problem(data, limits.max_depth, limits.max_nodes)
        if problem is not None and at is not None:
            problem.path = materialize(at) + problem.path
        raise _payload_problem(problem, limits) from None


def _root_error(payload: Any) -> InvalidPayloadError:
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
    return InvalidPayloadError(f"{expected}; {found}.", path=())
