"""The pure merge engine: apply a change request to a payload (MERGE.md is the contract).

``apply_change_request(payload, change_request)`` returns a ``MergeResult`` holding the merged
payload and a report of effective changes, warnings (auto-corrections that
were applied) and conflicts (parts of the request that were not applied). No I/O, no SDK.

How it works, in short:

* The change request is normalised (wrappers unwrapped, snake_case accepted, unknown fields
  reported), checked to be JSON data, and copied.
* Default mode copies the payload once, checking that it is JSON data on the way (a copy
  specialised to dict/list, several times faster than ``copy.deepcopy``), then edits that copy
  in place. The result shares no mutable object with either input.
* ``share=True`` copies only the containers on the paths the request walks and shares every
  other subtree with the input: its cost follows the size of the request, not of the payload.
* The walk goes wherever the request goes, with an explicit stack of generators instead of
  recursion, so payloads and requests nested 10,000 levels deep (or deeper, up to
  :attr:`Limits.max_depth`) never meet Python's recursion limit.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, overload

from pydantic import BaseModel, ValidationError

from agent_payload import typed as _typed
from agent_payload._jsondata import (
    Link,
    Problem,
    _Bad,
    copy_tree,
    describe,
    format_payload_path,
    format_request_path,
    json_data,
    json_equal,
    kind_word,
    locate_problem,
    materialize,
)
from agent_payload.changes import (
    BUCKETS,
    DEFAULT_MARKERS,
    MARKER,
    REFERENCE_MARKER,
    WIRE_NAMES,
    AgentPayloadChangeRequest,
)
from agent_payload.errors import (
    ConfigurationError,
    InvalidChangeRequestError,
    InvalidPayloadError,
    LimitExceededError,
    MergeConflictError,
    PayloadValidationError,
)
from agent_payload.report import (
    Change,
    ChangeOp,
    Finding,
    Guard,
    Issue,
    MergeReport,
    MergeResult,
    ask_guard,
)

__all__ = [
    "DEFAULT_LIMITS",
    "WRAPPERS",
    "Limits",
    "apply_change_request",
    "choose_marker",
    "dump_payload",
    "format_payload_path",
    "format_request_path",
    "ineffective_parts",
    "is_library_marker",
    "payload_holds_string",
    "reconcile_validated",
]

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


# --- small helpers -----------------------------------------------------------------------------

_MISSING: Final[Any] = object()
_SAME: Final[Any] = object()
_OBJ: Final = 1
_ARR: Final = 2
_PRIM: Final = 3
_BAD: Final = 4
_SCALAR_TYPES: Final = frozenset({str, int, float, bool, type(None)})


def _kind(v: Any) -> int:
    t = type(v)
    if t is dict:
        return _OBJ
    if t is list:
        return _ARR
    if t in _SCALAR_TYPES:
        return _PRIM
    if isinstance(v, dict):
        return _OBJ
    if isinstance(v, list):
        return _ARR
    if isinstance(v, str | int | float):
        return _PRIM
    return _BAD


def _is_index(key: str) -> bool:
    """A decimal index: ASCII digits, no sign, no leading zero except ``"0"`` (section 7)."""
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0")


def _is_index_map(v: Any) -> bool:
    return type(v) is dict and bool(v) and all(_is_index(k) for k in v)


def _index_below(key: str, length: int) -> int | None:
    """The index a decimal key names if it is below ``length`` (no huge int parsing)."""
    if len(key) > len(str(length)):
        return None
    i = int(key)
    return i if i < length else None


def _is_empty_container(v: Any) -> bool:
    return (type(v) is dict or type(v) is list) and not v


def _validate_markers(markers: Iterable[str]) -> frozenset[str]:
    if isinstance(markers, str):
        markers = (markers,)
    try:
        items = list(markers)
    except TypeError as exc:
        raise ConfigurationError(
            f"markers must be an iterable of strings, e.g. {{'DELETE'}}; found {markers!r}."
        ) from exc
    for m in items:
        if not isinstance(m, str) or not m:
            raise ConfigurationError(
                f"Every DELETE marker must be a non-empty string; found {m!r} in markers. "
                "Pass e.g. markers={'DELETE'} (or an empty set for no marker)."
            )
    return frozenset(items)


_NEW_ARRAY_EXPECTED: Final = (
    'an array of items to append, or an index map: {"2": [items]} inserts the items before '
    'element 2 (the array\'s length as key inserts at the end), {"2": {...}} adds inside '
    "element 2"
)
"""What newElements may hold where an array stands (sections 3.2.4 and 8), for messages."""


_FRESH_MARKER: Final = re.compile(r"__DELETE_[0-9a-f]{8}__")


def is_library_marker(value: Any) -> bool:
    """True for a string equal to one of the library's DELETE markers: ``"DELETE"``,
    ``"__DELETE__"`` or a fresh ``"__DELETE_<8 hex>__"`` (whichever is active)."""
    return type(value) is str and (value in DEFAULT_MARKERS or bool(_FRESH_MARKER.fullmatch(value)))


def _marker_inside(value: Any, markers: frozenset[str]) -> tuple[tuple[str | int, ...], str] | None:
    """The first library marker (or active marker) found as a string value inside ``value``,
    with its path relative to ``value``; None when there is none. Iterative, any depth."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        v, at = stack.pop()
        t = type(v)
        if t is str:
            if v in markers or is_library_marker(v):
                return at, v
        elif t is dict:
            stack.extend((child, (*at, k)) for k, child in reversed(v.items()))
        elif t is list:
            stack.extend((child, (*at, i)) for i, child in reversed(list(enumerate(v))))
    return None


def _in_update(rlink: Link) -> bool:
    """True when a change-request link lies in updateElements (its root part)."""
    parts = materialize(rlink)
    return bool(parts) and parts[0] == "updateElements"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _elements(length: int) -> str:
    """``"3 elements (indices 0 to 2)"``: the size of an array, for messages."""
    return f"{_plural(length, 'element')}{f' (indices 0 to {length - 1})' if length else ''}"


# --- request normalisation ---------------------------------------------------------------------


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


def _payload_problem(problem: Problem | None, limits: Limits) -> Exception:
    if problem is None:  # pragma: no cover - the locator finds what the copy refused
        return InvalidPayloadError("The payload is not JSON data.")
    where = format_payload_path(problem.path) or "the root"
    exceeded = _limit_error("payload", problem, where, limits)
    if exceeded is not None:
        return exceeded
    if problem.kind == "cycle":
        return InvalidPayloadError(
            f"The payload holds a cycle at {where}: a container that contains itself. JSON data "
            "is a tree; break the cycle before merging.",
            path=problem.path,
        )
    return InvalidPayloadError(
        f"The payload holds {problem.detail} at {where}; expected JSON data (dict with string "
        "keys, list, str, int, finite float, bool, None). Convert it first, or pass a pydantic "
        "model to have it dumped in JSON mode.",
        path=problem.path,
    )


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


def dump_payload(payload: Any, *, limits: Limits | None = None) -> Any:
    """The payload as JSON data, as the merge sees it (a fresh, independent copy).

    ``None`` becomes ``{}``; a pydantic model is dumped in JSON mode by alias (the same form
    :func:`apply_change_request` merges into and validates back); dicts and lists are checked
    and copied. Prompts should show the model exactly this.
    """
    limits = limits or DEFAULT_LIMITS
    if payload is None:
        return {}
    if isinstance(payload, BaseModel):
        return json_data(payload)
    if _kind(payload) not in (_OBJ, _ARR):
        raise _root_error(payload)
    return _copy_payload(payload, limits)


# --- markers -----------------------------------------------------------------------------------


def _strings(payload: Any) -> Iterator[str]:
    """Every string value of the payload's data (keys excluded), each container visited once
    (so shared subtrees and cycles cost nothing extra). Iterative: any depth is fine."""
    data = json_data(payload) if isinstance(payload, BaseModel) else payload
    seen: set[int] = set()
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict | list):
            if id(v) in seen:
                continue
            seen.add(id(v))
            stack.extend(v.values() if isinstance(v, dict) else v)


def payload_holds_string(payload: Any, value: str) -> bool:
    """True when ``value`` occurs as a string value anywhere in the payload's data.

    Keys do not count (a marker is only ever read as a value). Pydantic models are dumped in JSON
    mode first. Iterative: any depth is fine; a cycle does not hang it.
    """
    return any(s == value for s in _strings(payload))


def choose_marker(payload: Any, *, avoid: Iterable[str] = ()) -> str:
    """The one DELETE marker to activate for this payload (MERGE.md section 1).

    ``"DELETE"`` unless the payload's data holds that string, else ``"__DELETE__"`` unless the
    data holds that too, else ``"__DELETE_<hex>__"``, a fresh marker that the data does not hold
    (deterministic: the same payload always gets the same marker).

    ``avoid``: texts the marker must not occur in, typically the task. A task that asks for the
    value ``"DELETE"`` (an HTTP method on an existing element) must not have that very string
    active as the marker, or the model could only write it by rewriting the element whole; so
    a marker found inside any of these texts is passed over like one the data holds.
    """
    held = {s for s in _strings(payload) if "DELETE" in s}
    texts = [text for text in avoid if "DELETE" in text]

    def free(candidate: str) -> bool:
        return candidate not in held and not any(candidate in text for text in texts)

    if free(MARKER):
        return MARKER
    if free(REFERENCE_MARKER):
        return REFERENCE_MARKER
    counter = 0
    while True:
        candidate = f"__DELETE_{hashlib.sha256(str(counter).encode()).hexdigest()[:8]}__"
        if free(candidate):
            return candidate
        counter += 1


# --- the walk ----------------------------------------------------------------------------------

_Walk = Iterator[Any]


def _run(walk: _Walk) -> None:
    """Drive a tree of generator walks without recursion: a walk yields a child walk to run it
    to completion before it continues."""
    stack = [walk]
    push = stack.append
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        else:
            push(child)


class _Merger:
    """One merge: holds options and the report, and walks the payload beside the buckets."""

    def __init__(
        self,
        *,
        markers: frozenset[str],
        share: bool,
        guard: Guard | None,
        limits: Limits,
        report: MergeReport,
        refuse_stale: bool = False,
    ) -> None:
        self.markers = markers
        self.refuse_stale = refuse_stale
        self.share = share
        self.guard = guard
        self.limits = limits
        self.report = report
        self.path_parts = 0
        if MARKER in markers:
            self.marker_name: str | None = MARKER
        elif markers:
            self.marker_name = sorted(markers)[0]
        else:
            self.marker_name = None

    # --- report helpers ---------------------------------------------------------------------

    def issue(
        self,
        code: str,
        rlink: Link,
        message: str,
        plink: Link | None,
        severity: str | None = None,
    ) -> Issue:
        """An Issue, counted against ``Limits.max_report_path_parts``."""
        rparts = materialize(rlink)
        pparts = _pp(plink)
        self.path_parts += len(rparts) + (len(pparts) if pparts else 0)
        if self.path_parts > self.limits.max_report_path_parts:
            maximum = self.limits.max_report_path_parts
            raise LimitExceededError(
                f"The report's warnings and conflicts would name paths of more than "
                f"max_report_path_parts={maximum} parts in all (the change request asks for "
                f"something wrong at very many deep places; the last at "
                f"{_display_path(rlink)}). Fix the change request, or raise "
                "Limits(max_report_path_parts=...).",
                limit="max_report_path_parts",
                value=self.path_parts,
                maximum=maximum,
                path=_display_path(rlink),
            )
        return Issue(code, format_request_path(rparts), message, pparts, severity)

    def warn(self, code: str, rlink: Link, message: str, plink: Link | None = None) -> None:
        self.report.warnings.append(self.issue(code, rlink, message, plink))

    def conflict(self, code: str, rlink: Link, message: str, plink: Link | None = None) -> None:
        self.report.conflicts.append(self.issue(code, rlink, message, plink))

    def is_marker(self, v: Any) -> bool:
        return type(v) is str and v in self.markers

    def marker_text(self) -> str:
        if self.marker_name is None:
            return "the DELETE marker (none is active in this call)"
        return f'the marker "{self.marker_name}"'

    # --- values ---------------------------------------------------------------------------

    def own_copy(self, value: Any, plink: Link) -> Any:
        """A deep copy of a payload value (share mode: the input's; checked on the way)."""
        return _copy_payload(value, self.limits, plink)

    def old_value(self, value: Any, plink: Link) -> Any:
        """The old value for a Change. In default mode it is our own copy's object, detached
        from the result once the change applies; in share mode it is the input's: copied."""
        if type(value) in _SCALAR_TYPES or (not self.share and _kind(value) != _BAD):
            return value
        return self.own_copy(value, plink)

    def check_payload_value(self, value: Any, plink: Link) -> int:
        """Kind of a payload value read by the walk (share mode may meet unchecked data)."""
        k = _kind(value)
        if k == _BAD or (k == _PRIM and type(value) is float and value - value != 0.0):
            self.own_copy(value, plink)  # raises with the path
        return k

    def owned_child(self, value: Any, kind: int) -> Any:
        """The container to edit in place: in share mode a shallow copy of the input's."""
        if not self.share and (type(value) is dict or type(value) is list):
            return value
        if kind == _OBJ:
            return dict(value)
        return list(value)

    # --- changes and the guard --------------------------------------------------------------

    def commit(
        self, op: ChangeOp, plink: Link, old: Any, new: Any, rlink: Link, glink: Link = _SAME
    ) -> bool:
        """Ask the guard about one effective change; record it; True when it may be applied.

        ``plink`` is the change's path in the report (MERGE.md section 4: the result path for
        an add or update, the original one for a delete). ``glink`` is where the guard judges
        it: the **original node** the change touches (an update or replacement of an element:
        its original position, whatever deletions before it shift in the result; a key added
        inside an element: below the element's original position), or, for an appended or
        inserted element, its position in the result. Default: ``plink``. Guard findings are
        recorded at ``glink`` (a conflict's current value is looked up in the original)."""
        if self.refuse_stale and self.stale_marker(op, old, new, plink, rlink):
            return False
        if glink is _SAME:
            glink = plink
        path = materialize(plink)
        change = Change(
            op,
            path,
            self.old_value(old, plink) if op != "add" else None,
            copy_tree(new, self.limits.max_depth, self.limits.max_request_nodes)
            if op != "delete"
            else None,
        )
        if self.guard is not None:
            gpath = path if glink is plink else materialize(glink)
            judged = change if gpath == path else Change(op, gpath, change.old, change.new)
            findings = ask_guard(self.guard, judged)  # a guard returning None: a clear error
            refused = False
            for finding in findings:
                if not isinstance(finding, Finding):
                    raise ConfigurationError(
                        f"A guard must return a sequence of Finding; it returned {finding!r} "
                        f"for the change at {format_payload_path(gpath) or 'the root'}."
                    )
                issue = self.issue(finding.code, rlink, finding.message, glink, finding.severity)
                if finding.severity == "conflict":
                    refused = True
                    self.report.conflicts.append(issue)
                else:
                    self.report.warnings.append(issue)
            if refused:
                return False
        self.report.changes.append(change)
        return True

    def stale_marker(self, op: ChangeOp, old: Any, new: Any, plink: Link, rlink: Link) -> bool:
        """A marker out of habit (conflict ``stale_marker``; the entry is not applied), both in
        updateElements only: a string equal to one of the library's markers that would replace
        an object or an array, or that sits inside content added at a key or an index that does
        not exist. Both are almost surely a deletion the model meant; the message names the
        marker active in this call. newElements and replaceElements stay literal (the way to
        store the text ``"DELETE"``, MERGE.md section 5)."""
        if op == "update":
            if type(old) is not dict and type(old) is not list:
                return False
            if type(new) is not str or not (new in self.markers or is_library_marker(new)):
                return False
            if not _in_update(rlink):
                return False
            what = "object" if type(old) is dict else "array"
            self.conflict(
                "stale_marker",
                rlink,
                f'The string "{new}" would replace the {what} at {self.pp(plink)}. That looks '
                f"like a deletion, but {self._marker_sentence(new)} To delete "
                f"{self.pp(plink)}, write {self.marker_text()}; to keep it, leave it out (or "
                "write {} in an array); to store that text, use replaceElements. Nothing of "
                "this entry was applied.",
                plink,
            )
            return True
        if op != "add" or (
            type(new) is not dict and type(new) is not list and type(new) is not str
        ):
            return False
        found = _marker_inside(new, self.markers)
        if found is None or not _in_update(rlink):
            return False
        inner, text = found
        full = (*materialize(plink), *inner)
        where = format_payload_path(full) or "the payload root"
        self.conflict(
            "stale_marker",
            rlink,
            f"updateElements would add {self.pp(plink)} (it does not exist in the payload) "
            f'holding the string "{text}" at {where}. That looks like a deletion, but nothing '
            f"exists there to delete, and {self._marker_sentence(text)} Check the path against "
            "the payload (positions and key names); to add new data that holds this text, use "
            "newElements. Nothing of this entry was applied.",
            plink,
        )
        return True

    def _marker_sentence(self, text: str) -> str:
        if self.marker_name is None:
            return f'"{text}" is not a DELETE marker here (none is active in this call).'
        if text == self.marker_name or text in self.markers:
            return f'"{text}" only deletes where something exists.'
        return (
            f'"{text}" is not the DELETE marker of this call: the marker is "{self.marker_name}".'
        )

    def set_key(
        self, c: dict[str, Any], k: str, value: Any, plink: Link, rlink: Link, glink: Link
    ) -> None:
        """Set ``c[k]`` to a literal value from the request (an add or an update); ``plink``
        is its result path, ``glink`` its original one (see ``commit``)."""
        if k in c:
            old = c[k]
            if _kind(old) == _BAD:
                self.check_payload_value(old, plink)
            if json_equal(old, value):
                return
            if self.commit("update", plink, old, value, rlink, glink):
                c[k] = value
        elif self.commit("add", plink, None, value, rlink, glink):
            c[k] = value

    def delete_key(self, c: dict[str, Any], k: str, plink: Link, rlink: Link) -> None:
        if self.commit("delete", plink, c[k], None, rlink):
            del c[k]

    # --- messages ---------------------------------------------------------------------------

    def shape_message(
        self, bucket: str, given: Any, current: Any, plink: Link, element: bool
    ) -> str:
        where = self.pp(plink)
        found = describe(given)
        if isinstance(current, list) and isinstance(given, dict):
            bad = [k for k in given if not _is_index(k)]
            detail = (
                f" It is not an index map: the key {json.dumps(bad[0], ensure_ascii=False)} is "
                "not a decimal index (digits only, no sign, no leading zero)."
                if bad
                else ""
            )
            expected = (
                _NEW_ARRAY_EXPECTED
                if bucket == "newElements"
                else 'an array (positional, with {} placeholders) or an index map like {"3": {...}}'
            )
        else:
            detail = ""
            expected = kind_word(current)
        if element:
            fix = (
                "To give an element a value of another kind, delete it with "
                f"{self.marker_text()} and insert the new value in its place with a newElements "
                'index map ({"<its index>": [new value]}), or replace the whole top-level value '
                "with replaceElements."
            )
        else:
            fix = (
                "To give it a value of another kind, delete it in removeElements and give the new "
                "value at the same path in updateElements, or replace the whole top-level value "
                "with replaceElements."
            )
        return (
            f"{bucket} gives {found} where the payload holds {kind_word(current)} at {where}; "
            f"expected {expected} here.{detail} Not applied. {fix}"
        )

    def mismatch(
        self, bucket: str, given: Any, current: Any, rlink: Link, plink: Link, *, element: bool
    ) -> None:
        """Conflict ``shape_mismatch``: ``bucket`` gives a value of the wrong kind."""
        self.conflict(
            "shape_mismatch",
            rlink,
            self.shape_message(bucket, given, current, plink, element),
            plink,
        )

    def moot_removal(
        self, x: Any, cur: Any, present: bool, xlink: Link, plink: Link, why: str
    ) -> None:
        """Nested removals made moot: judged against the payload first (section 6)."""
        if self.judge_removal(x, cur, present, xlink, plink, element=False):
            self.warn(
                "shadowed",
                xlink,
                f"These nested removals were not applied because {why}. Nothing to do unless "
                "you meant to keep the value: then drop that entry.",
                plink,
            )

    def judge_removal(
        self, x: Any, cur: Any, present: bool, xlink: Link, plink: Link, *, element: bool
    ) -> bool:
        """True when nested removals ``x`` fit the payload value; else say why (nothing inside
        to delete: a warning; a value of another shape: a conflict)."""
        fit = self.removal_fit(x, cur, present)
        if fit == "missing":
            self.warn_remove_missing_nested(x, cur, present, xlink, plink)
        elif fit == "mismatch":
            self.mismatch("removeElements", x, cur, xlink, plink, element=element)
        return fit == "fits"

    def removal_fit(self, x: Any, cur: Any, present: bool) -> str:
        if not present:
            return "missing"
        kc = _kind(cur)
        if kc == _OBJ:
            return "fits" if type(x) is dict else "mismatch"
        if kc == _ARR:
            return "fits" if type(x) is list or _is_index_map(x) else "mismatch"
        return "missing"

    def warn_remove_missing_nested(
        self, x: Any, cur: Any, present: bool, xlink: Link, plink: Link
    ) -> None:
        where = self.pp(plink)
        if not present:
            found = f"there is no {where} in the payload"
        else:
            found = f"{where} holds {describe(cur)}, which has nothing inside to delete"
        self.warn(
            "remove_missing",
            xlink,
            f"removeElements asks to delete inside {where}, but {found}; nothing was deleted. "
            "Check the path against the payload, or drop this entry.",
            plink,
        )

    # --- object node (section 3.1) ----------------------------------------------------------

    def walk_object(
        self,
        c: dict[str, Any],
        u: dict[str, Any] | None,
        n: dict[str, Any] | None,
        x: dict[str, Any] | None,
        olink: Link,
        rlink: Link,
        ulink: Link,
        nlink: Link,
        xlink: Link,
    ) -> _Walk:
        keys: dict[str, None] = {}
        for bucket in (x, u, n):
            if bucket:
                keys.update(dict.fromkeys(bucket))
        for k in keys:
            xv = x.get(k, _MISSING) if x else _MISSING
            uv = u.get(k, _MISSING) if u else _MISSING
            nv = n.get(k, _MISSING) if n else _MISSING
            kx: Link = (xlink, k)
            ku: Link = (ulink, k)
            kn: Link = (nlink, k)
            ko: Link = (olink, k)
            kr: Link = (rlink, k)
            present = k in c
            cur = c[k] if present else _MISSING

            # 1. remove
            x_del = False
            x_nested: Any = None
            if xv is not _MISSING:
                if self.is_marker(xv):
                    if present:
                        x_del = True
                    else:
                        self.warn_missing_key("removeElements", k, kx, olink, ko)
                elif type(xv) is dict or type(xv) is list:
                    if xv:
                        x_nested = xv
                else:
                    self.invalid_remove(xv, kx, ko)

            # 2. delete by update
            if self.is_marker(uv):
                if x_nested is not None:
                    self.moot_removal(
                        x_nested,
                        cur,
                        present,
                        kx,
                        ko,
                        f"updateElements deletes {self.pp(ko)} with {self.marker_text()}",
                    )
                if nv is not _MISSING:
                    self.warn(
                        "shadowed",
                        kn,
                        f"newElements sets {self.pp(ko)}, but updateElements deletes it with "
                        f"{self.marker_text()} at the same path; the deletion wins and this value "
                        "was not added. Send only one of the two.",
                        ko,
                    )
                if present:
                    self.delete_key(c, k, ko, kx if x_del else ku)
                else:
                    self.warn_missing_key("updateElements", k, ku, olink, ko)
                continue

            # 3. k absent (never existed, or deleted in step 1)
            if not present or x_del:
                if x_nested is not None:
                    self.warn_remove_missing_nested(x_nested, cur, present, kx, ko)
                value: Any = _MISSING
                if nv is not _MISSING:
                    value, vlink = nv, kn
                    if uv is not _MISSING:
                        self.warn(
                            "shadowed",
                            ku,
                            f"{self.pp(ko)} is set from newElements; the value given in "
                            "updateElements for the same new key was ignored. Give a new key in "
                            "newElements only.",
                            ko,
                        )
                elif uv is not _MISSING:
                    value, vlink = uv, ku
                    if not x_del:
                        self.warn(
                            "update_missing",
                            ku,
                            f"updateElements names {self.pp(ko)}, which does not exist in the "
                            f"payload; treated as an addition, set to {describe(uv)} as given "
                            "(markers and {} inside it are data). Use newElements for "
                            "new keys.",
                            ko,
                        )
                if x_del:
                    if value is _MISSING:
                        self.delete_key(c, k, ko, kx)
                    else:
                        self.set_key(c, k, value, kr, vlink, ko)
                elif value is not _MISSING:
                    self.set_key(c, k, value, kr, vlink, ko)
                continue

            # 4. k exists
            kc = self.check_payload_value(cur, ko)
            if kc == _PRIM:
                if x_nested is not None:
                    self.warn_remove_missing_nested(x_nested, cur, True, kx, ko)
                if uv is not _MISSING:
                    if nv is not _MISSING:
                        self.shadow_new(kn, ko)
                    if not (type(uv) is dict and not uv):
                        self.set_key(c, k, uv, kr, ku, ko)
                    else:
                        self.no_effect(
                            ku,
                            ko,
                            f"{{}} in updateElements over {self.pp(ko)} (which holds "
                            f"{describe(cur)}) changes nothing: {{}} means keep as it is. To "
                            "set a new value, give the value itself; to make it an empty object, "
                            "use replaceElements (top-level key) or delete it in removeElements "
                            "and add {} with newElements.",
                        )
                elif nv is not _MISSING:
                    self.new_exists(nv, cur, kn, ko)
                    self.set_key(c, k, nv, kr, kn, ko)
                continue

            # c[k] is a container: each bucket judged on its own
            u_acts = False
            u_set = False
            u_desc: Any = None
            if uv is not _MISSING:
                kuv = _kind(uv)
                if kuv == _PRIM:
                    u_acts = u_set = True
                elif kc == _OBJ:
                    if kuv == _OBJ:
                        u_acts = True
                        u_desc = uv or None
                    else:
                        self.mismatch("updateElements", uv, cur, ku, ko, element=False)
                elif kuv == _ARR:
                    u_acts = True
                    u_desc = uv or None
                    if not uv and cur and xv is _MISSING and nv is _MISSING:
                        # (beside a removal or an append for the same list, [] is a filler)
                        self.no_effect(
                            ku,
                            ko,
                            f"[] in updateElements over {self.pp(ko)} (which holds "
                            f"{describe(cur)}) changes nothing: an array in updateElements is "
                            "positional, and an empty one names no element. To empty the list, "
                            "use replaceElements with [] (top-level key) or delete its elements "
                            f"with {self.marker_text()} in removeElements.",
                        )
                elif not uv:
                    u_acts = True
                elif _is_index_map(uv):
                    u_acts = True
                    u_desc = uv
                else:
                    self.mismatch("updateElements", uv, cur, ku, ko, element=False)
            n_set = False
            n_desc: Any = None
            if nv is not _MISSING:
                knv = _kind(nv)
                if knv == _PRIM:
                    if u_acts:
                        self.shadow_new(kn, ko)
                    else:
                        n_set = True
                elif kc == _OBJ:
                    if knv == _OBJ:
                        n_desc = nv or None
                    else:
                        self.mismatch("newElements", nv, cur, kn, ko, element=False)
                elif knv == _ARR:
                    n_desc = nv or None
                elif _is_index_map(nv):
                    n_desc = nv  # insert / descend (section 8)
                elif nv:
                    self.mismatch("newElements", nv, cur, kn, ko, element=False)
            if u_set or n_set:
                if x_nested is not None:
                    self.moot_removal(
                        x_nested,
                        cur,
                        True,
                        kx,
                        ko,
                        f"{'updateElements' if u_set else 'newElements'} replaces "
                        f"{self.pp(ko)} with a primitive value",
                    )
                if u_set and n_desc is not None:
                    self.shadow_new(kn, ko)
                if n_set:
                    self.new_exists(nv, cur, kn, ko)
                self.set_key(c, k, uv if u_set else nv, kr, ku if u_set else kn, ko)
                continue
            x_desc: Any = None
            if x_nested is not None and self.judge_removal(
                x_nested, cur, True, kx, ko, element=False
            ):
                x_desc = x_nested
            if u_desc is None and n_desc is None and x_desc is None:
                continue
            child = self.owned_child(cur, kc)
            c[k] = child
            if kc == _OBJ:
                yield self.walk_object(child, u_desc, n_desc, x_desc, ko, kr, ku, kn, kx)
            else:
                yield self.walk_array(child, u_desc, n_desc, x_desc, ko, kr, ku, kn, kx)

    def no_effect(self, rlink: Link, plink: Link, message: str) -> None:
        """Warning ``no_effect``: a part of the request that was clearly meant to act changes
        nothing (the agent sends it back as a correction; see ``correction_for_no_effect``)."""
        self.warn("no_effect", rlink, message, plink)

    def pp(self, plink: Link) -> str:
        """A payload path for a message; a very deep one is shortened in the middle (the
        issue's ``payload_path`` keeps it whole)."""
        return _display_path(plink) or "the payload root"

    def shadow_new(self, kn: Link, ko: Link) -> None:
        self.warn(
            "shadowed",
            kn,
            f"{self.pp(ko)} already exists and updateElements changes it; the value given in "
            "newElements for the same key was ignored. Use updateElements alone for existing "
            "keys.",
            ko,
        )

    def new_exists(self, nv: Any, cur: Any, kn: Link, ko: Link) -> None:
        self.warn(
            "new_exists",
            kn,
            f"newElements names {self.pp(ko)}, which already exists (it holds {describe(cur)}); "
            f"treated as an update and set to {describe(nv)}. Use updateElements to change "
            "existing keys.",
            ko,
        )

    def warn_missing_key(self, bucket: str, k: str, rlink: Link, olink: Link, ko: Link) -> None:
        parent = self.pp(olink)
        self.warn(
            "remove_missing",
            rlink,
            f"{bucket} deletes {self.pp(ko)} with {self.marker_text()}, but {parent} has no key "
            f"{json.dumps(k, ensure_ascii=False)}; nothing was deleted. Check the key's spelling "
            "and path against the payload, or drop this entry.",
            ko,
        )

    def invalid_remove(self, v: Any, rlink: Link, plink: Link) -> None:
        self.conflict(
            "invalid_remove_value",
            rlink,
            f"removeElements holds {describe(v)} for {self.pp(plink)}; it may only hold "
            f"{self.marker_text()} (to delete) and objects or arrays leading to such markers. Not "
            "applied. To delete, write the marker; to change the value, use updateElements.",
            plink,
        )

    # --- array node (section 3.2) -----------------------------------------------------------

    def walk_array(
        self,
        a: list[Any],
        ua: Any,
        na: Any,
        xa: Any,
        olink: Link,
        rlink: Link,
        ulink: Link,
        nlink: Link,
        xlink: Link,
    ) -> _Walk:
        length = len(a)
        # entries of each bucket by original index: index -> (value, request link)
        u_at: dict[int, tuple[Any, Link]] = {}
        x_at: dict[int, tuple[Any, Link]] = {}
        if type(ua) is list:
            for i in range(min(len(ua), length)):
                u_at[i] = (ua[i], (ulink, i))
        elif ua:
            for key, value in ua.items():
                idx = _index_below(key, length)
                if idx is None:
                    self.conflict(
                        "index_out_of_range",
                        (ulink, key),
                        f"The index map key {json.dumps(key)} addresses element {key} of the "
                        f"array at {self.pp(olink)}, but it has {_elements(length)}. Not "
                        "applied. Keys refer to positions in the current array; an index map "
                        "never appends: use newElements to add items at the end.",
                        olink,
                    )
                else:
                    u_at[idx] = (value, (ulink, key))
        if type(xa) is list:
            for i in range(min(len(xa), length)):
                x_at[i] = (xa[i], (xlink, i))
            for j in range(length, len(xa)):
                self.removal_beyond_end(xa[j], (xlink, j), j, length, olink)
        elif xa:
            for key, value in xa.items():
                idx = _index_below(key, length)
                if idx is None:
                    self.removal_beyond_end(value, (xlink, key), key, length, olink)
                else:
                    x_at[idx] = (value, (xlink, key))
        # a newElements index map (section 8): insertions before original positions (the
        # length included) and descents into original elements
        ins_at: dict[int, tuple[list[Any], Link]] = {}
        n_at: dict[int, tuple[dict[str, Any], Link]] = {}
        if type(na) is dict:
            self.read_insertions(na, length, olink, nlink, ins_at, n_at)

        deleted: list[int] = []
        placed: dict[int, list[Any]] = {}  # original position -> items inserted before it
        inserted = 0
        for i in sorted(u_at.keys() | x_at.keys() | ins_at.keys() | n_at.keys()):
            if i in ins_at:
                items, il = ins_at[i]
                for j, item in enumerate(items):
                    at: Link = (rlink, i - len(deleted) + inserted)
                    # judged at its result position in the original container (as an append)
                    glink: Link = (olink, i - len(deleted) + inserted)
                    if self.commit("add", at, None, item, (il, j), glink):
                        placed.setdefault(i, []).append(item)
                        inserted += 1
                if i == length:
                    break
            ri = i - len(deleted) + inserted
            ai = a[i]
            io: Link = (olink, i)
            ir: Link = (rlink, ri)
            xi, xl = x_at.get(i, (_MISSING, None))
            ui, ul = u_at.get(i, (_MISSING, None))
            ni, nl = n_at.get(i, (None, None))
            x_del = self.is_marker(xi)
            u_del = self.is_marker(ui)
            x_nested: Any = None
            if xi is not _MISSING and not x_del:
                if type(xi) is dict or type(xi) is list:
                    if xi:
                        x_nested = xi
                else:
                    self.invalid_remove(xi, xl, io)
            if x_del or u_del:
                if x_del and not u_del and ui is not _MISSING and not (type(ui) is dict and not ui):
                    self.warn(
                        "shadowed",
                        ul,
                        f"removeElements deletes the element {self.pp(io)}, so this change to it "
                        "was not applied. Send only one of the two.",
                        io,
                    )
                if u_del and x_nested is not None:
                    self.moot_removal(
                        x_nested,
                        ai,
                        True,
                        xl,
                        io,
                        f"updateElements deletes the element {self.pp(io)}",
                    )
                if ni is not None:
                    self.descent_into_deleted(
                        nl, io, i, "removeElements" if x_del else "updateElements"
                    )
                if self.commit("delete", io, ai, None, xl if x_del else ul):
                    deleted.append(i)
                continue
            if ni is not None:
                ni = self.new_descent(ni, ai, nl, io, i)
            if ui is _MISSING or (type(ui) is dict and not ui):
                x_desc: Any = None
                if x_nested is not None and self.judge_removal(
                    x_nested, ai, True, xl, io, element=True
                ):
                    x_desc = x_nested
                if x_desc is not None or ni is not None:
                    yield self.descend_element(a, i, ai, None, ni, x_desc, io, ir, ul, nl, xl)
                continue
            ka = self.check_payload_value(ai, io)
            kui = _kind(ui)
            if ka == _PRIM or kui == _PRIM:
                if x_nested is not None:
                    if ka == _PRIM:
                        self.warn_remove_missing_nested(x_nested, ai, True, xl, io)
                    else:
                        self.moot_removal(
                            x_nested,
                            ai,
                            True,
                            xl,
                            io,
                            f"updateElements replaces the element {self.pp(io)} with a primitive "
                            "value",
                        )
                if ni is not None:
                    self.warn(
                        "shadowed",
                        nl,
                        f"updateElements replaces the element {self.pp(io)} with a primitive "
                        "value, so what newElements adds inside it was not applied. Send only "
                        "one of the two.",
                        io,
                    )
                if not json_equal(ai, ui) and self.commit("update", ir, ai, ui, ul, io):
                    a[i] = ui
                continue
            fits_u = (ka == _OBJ and kui == _OBJ) or (
                ka == _ARR and (kui == _ARR or _is_index_map(ui))
            )
            x_desc = None
            if x_nested is not None and self.judge_removal(
                x_nested, ai, True, xl, io, element=True
            ):
                x_desc = x_nested
            if not fits_u:
                self.mismatch("updateElements", ui, ai, ul, io, element=True)
                if x_desc is not None or ni is not None:
                    yield self.descend_element(a, i, ai, None, ni, x_desc, io, ir, ul, nl, xl)
                continue
            yield self.descend_element(a, i, ai, ui or None, ni, x_desc, io, ir, ul, nl, xl)

        if placed:
            self.rebuild(a, length, deleted, placed)
        elif deleted:
            if len(deleted) <= 16:
                for i in reversed(deleted):
                    del a[i]
            else:
                gone = set(deleted)
                a[:] = [v for i, v in enumerate(a) if i not in gone]

        # 3. beyond the end of a positional update array
        if type(ua) is list and len(ua) > length:
            for j in range(length, len(ua)):
                item = ua[j]
                if (type(item) is dict and not item) or self.is_marker(item):
                    rest = len(ua) - j
                    what = "a {} placeholder" if type(item) is dict else f'the marker "{item}"'
                    self.conflict(
                        "placeholder_out_of_range",
                        (ulink, j),
                        f"The array at {self.pp(olink)} has {_elements(length)}, but "
                        f"updateElements holds {what} at index {j}, beyond its end, where there "
                        "is no element to keep or delete. This item and everything after it in "
                        f"this array ({_plural(rest, 'item')}) were not applied. Positions refer "
                        "to the original array: recount them; to add items at the end use "
                        "newElements.",
                        olink,
                    )
                    break
                ri = len(a)
                self.warn(
                    "update_append",
                    (ulink, j),
                    f"updateElements gives an item at index {j}, beyond the end of the array at "
                    f"{self.pp(olink)} ({_plural(length, 'element')}); it was appended as given "
                    "(markers and {} inside it are data). Use "
                    "newElements to append.",
                    (rlink, ri),
                )
                if self.commit("add", (rlink, ri), None, item, (ulink, j), (olink, ri)):
                    a.append(item)

        # 4. append (a positional newElements list; an index map inserted above)
        if type(na) is list:
            for j, item in enumerate(na):
                if type(item) is dict and not item:
                    continue
                ri = len(a)
                if self.commit("add", (rlink, ri), None, item, (nlink, j), (olink, ri)):
                    a.append(item)

    # --- insertion (section 8) --------------------------------------------------------------

    def read_insertions(
        self,
        na: dict[str, Any],
        length: int,
        olink: Link,
        nlink: Link,
        ins_at: dict[int, tuple[list[Any], Link]],
        n_at: dict[int, tuple[dict[str, Any], Link]],
    ) -> None:
        """Sort a newElements index map into insertions (list values, keys 0 to the length)
        and descents (object values, keys below the length); report everything else."""
        where = self.pp(olink)
        for key, value in na.items():
            kl: Link = (nlink, key)
            kind = _kind(value)
            if kind == _ARR:
                idx = _index_below(key, length + 1)
                if idx is None:
                    self.conflict(
                        "index_out_of_range",
                        kl,
                        f"newElements inserts before element {key} of the array at {where}, "
                        f"but it has {_elements(length)}: insertion keys go from 0 to {length} "
                        f"(the length, {length}, inserts after the last element). Not applied. "
                        "Keys are positions in the original array: recount them.",
                        olink,
                    )
                elif value:
                    ins_at[idx] = (value, kl)
            elif kind == _OBJ:
                idx = _index_below(key, length)
                if idx is None:
                    self.conflict(
                        "index_out_of_range",
                        kl,
                        f"newElements adds inside element {key} of the array at {where}, but it "
                        f"has {_elements(length)}. Not applied. Keys are positions in the "
                        f'original array; to insert new items give a list: {{"{length}": '
                        "[...]} appends them.",
                        olink,
                    )
                elif value:
                    n_at[idx] = (value, kl)
            else:
                self.conflict(
                    "shape_mismatch",
                    kl,
                    f"newElements gives {describe(value)} for element {key} of the array at "
                    f"{where}; in a newElements index map each value is a list of items to "
                    f'insert before that element (e.g. {{"{key}": [...]}}) or an object that '
                    "adds inside it. Not applied. To replace the element use updateElements; "
                    f"to delete it, use {self.marker_text()}.",
                    olink,
                )

    def new_descent(self, ni: dict[str, Any], ai: Any, nl: Link, io: Link, i: int) -> Any:
        """``ni`` when it can descend into element ``ai``; else report why and None."""
        ka = self.check_payload_value(ai, io)
        if ka == _OBJ or (ka == _ARR and _is_index_map(ni)):
            return ni
        if ka == _ARR:
            bad = next(k for k in ni if not _is_index(k))
            self.conflict(
                "shape_mismatch",
                nl,
                f"newElements adds inside element {i} at {self.pp(io)}, which is an array, with "
                f"{describe(ni)} that is not an index map (the key "
                f"{json.dumps(bad, ensure_ascii=False)} is not a decimal index). Not applied. "
                'Inside an array give an index map: {"2": [items]} inserts the items before '
                'its element 2, {"2": {...}} adds inside its element 2.',
                io,
            )
        else:
            self.conflict(
                "shape_mismatch",
                nl,
                f"newElements adds inside element {i} at {self.pp(io)}, but it holds "
                f"{describe(ai)}, which has no keys or items to add to. Not applied. To replace "
                f'the element use updateElements; to insert items before it give a list: {{"{i}": '
                "[...]}.",
                io,
            )
        return None

    def descent_into_deleted(self, nl: Link, io: Link, i: int, bucket: str) -> None:
        self.conflict(
            "shape_mismatch",
            nl,
            f"{bucket} deletes the element {self.pp(io)} in this same request, so newElements "
            "cannot add inside it; the deletion stands and this part was not applied. To put "
            f'a changed copy in its place, insert the full new value with a list: {{"{i}": '
            "[...]}.",
            io,
        )

    def rebuild(
        self, a: list[Any], length: int, deleted: list[int], placed: dict[int, list[Any]]
    ) -> None:
        """``a`` as the result orders it: survivors in original order, each position's
        inserted items before it, the length's after the last survivor."""
        gone = set(deleted)
        out: list[Any] = []
        start = 0
        for i in sorted(gone | placed.keys()):
            out.extend(a[start:i])
            out.extend(placed.get(i, ()))
            start = i + 1 if i in gone else i
        out.extend(a[start:length])
        a[:] = out

    def descend_element(
        self,
        a: list[Any],
        i: int,
        ai: Any,
        u: Any,
        n: Any,
        x: Any,
        io: Link,
        ir: Link,
        ul: Link,
        nl: Link,
        xl: Link,
    ) -> _Walk:
        kind = _kind(ai)
        child = self.owned_child(ai, kind)
        a[i] = child
        if kind == _OBJ:
            return self.walk_object(child, u, n, x, io, ir, ul, nl, xl)
        return self.walk_array(child, u, n, x, io, ir, ul, nl, xl)

    def removal_beyond_end(
        self, v: Any, rl: Link, index: int | str, length: int, olink: Link
    ) -> None:
        if _is_empty_container(v):
            return
        if self.is_marker(v) or type(v) is dict or type(v) is list:
            self.warn(
                "remove_missing",
                rl,
                f"removeElements addresses index {index} of the array at {self.pp(olink)}, which "
                f"has {_plural(length, 'element')}; there is no such element and nothing was "
                "deleted. Positions refer to the original array: recount them.",
                olink,
            )
        else:
            self.invalid_remove(v, rl, (olink, int(index)) if isinstance(index, int) else olink)

    # --- the root (sections 3.3 and 3.4) ----------------------------------------------------

    def merge_root(self, root: Any, buckets: dict[str, Any]) -> Any:
        u = buckets.get("updateElements")
        n = buckets.get("newElements")
        x = buckets.get("removeElements")
        r = buckets.get("replaceElements")
        if type(root) is dict:
            return self.merge_object_root(root, u, n, x, r)
        return self.merge_array_root(root, u, n, x, r)

    def root_mismatch(self, bucket: str, value: Any, root: Any) -> None:
        if type(root) is dict:
            expected = "an object (a partial of the payload)"
            if bucket == "replaceElements":
                expected = "an object naming top-level keys"
        elif bucket == "newElements":
            expected = _NEW_ARRAY_EXPECTED
        elif bucket == "replaceElements":
            expected = "an array, which replaces the whole payload"
        else:
            expected = 'an array (positional, with {} placeholders) or an index map like {"3": ...}'
        self.conflict(
            "shape_mismatch",
            (None, bucket),
            f"{bucket} is {describe(value)}, but the payload root is {kind_word(root)}; expected "
            f"{expected}. This bucket was not applied; send it in the payload's shape.",
            None,
        )

    def merge_object_root(self, root: dict[str, Any], u: Any, n: Any, x: Any, r: Any) -> Any:
        buckets = {"updateElements": u, "newElements": n, "removeElements": x}
        for name, value in (("removeElements", x), ("updateElements", u), ("newElements", n)):
            if value is not None and type(value) is not dict:
                self.root_mismatch(name, value, root)
                buckets[name] = None
        if r is not None:
            if type(r) is not dict:
                self.root_mismatch("replaceElements", r, root)
            else:
                for k, value in r.items():
                    for name in ("updateElements", "removeElements", "newElements"):
                        b = buckets[name]
                        if b is not None and k in b:
                            self.warn(
                                "shadowed",
                                ((None, name), k),
                                f"replaceElements replaces the top-level key "
                                f"{json.dumps(k, ensure_ascii=False)} as a whole, so what "
                                f"{name} says of it was not applied. Name a key in one bucket "
                                "only.",
                                (None, k),
                            )
                    if self.replace_index_map(root, k, value):
                        continue
                    self.set_key(
                        root, k, value, (None, k), ((None, "replaceElements"), k), (None, k)
                    )
                for name in ("updateElements", "removeElements", "newElements"):
                    b = buckets[name]
                    if b is not None and any(k in r for k in b):
                        buckets[name] = {k: v for k, v in b.items() if k not in r}
        return self.walk_root(
            root, buckets["updateElements"], buckets["newElements"], buckets["removeElements"]
        )

    def replace_index_map(self, root: dict[str, Any], k: str, value: Any) -> bool:
        """replaceElements gives an index map (``{"1": {...}}``) for an array: a conflict
        ``shape_mismatch`` (positions are updateElements' job), never an array silently turned
        into an object. True when reported (the key is then left as it is)."""
        cur = root.get(k, _MISSING)
        if type(cur) is not list or type(value) is not dict or not _is_index_map(value):
            return False
        where = self.pp((None, k))
        self.conflict(
            "shape_mismatch",
            ((None, "replaceElements"), k),
            f"replaceElements gives an index map ({describe(value)}) for {where}, which holds "
            f"{describe(cur)}; replacing would turn the array into an object. Not applied. To "
            "change elements by position use updateElements (an index map such as "
            '{"1": {"qty": 5}} or a positional array with {} placeholders); to replace the '
            "whole array, give the new array in replaceElements.",
            (None, k),
        )
        return True

    def merge_array_root(self, root: list[Any], u: Any, n: Any, x: Any, r: Any) -> Any:
        if u is not None and not (type(u) is list or _is_index_map(u)):
            self.root_mismatch("updateElements", u, root)
            u = None
        if x is not None and not (type(x) is list or _is_index_map(x)):
            self.root_mismatch("removeElements", x, root)
            x = None
        if n is not None and not (type(n) is list or _is_index_map(n)):
            self.root_mismatch("newElements", n, root)
            n = None
        if r is not None:
            if type(r) is not list:
                self.root_mismatch("replaceElements", r, root)
            else:
                for name, value in (
                    ("updateElements", u),
                    ("removeElements", x),
                    ("newElements", n),
                ):
                    if value is not None:
                        self.warn(
                            "shadowed",
                            (None, name),
                            f"replaceElements replaces the whole payload, so {name} was not "
                            "applied. Send either replaceElements or the other buckets.",
                            None,
                        )
                if json_equal(root, r):
                    return root
                if self.commit("update", None, root, r, (None, "replaceElements")):
                    return r
                return root
        return self.walk_root(root, u, n, x)

    def walk_root(self, root: Any, u: Any, n: Any, x: Any) -> Any:
        """Walk the root beside what is left of the buckets, editing it in place."""
        links: tuple[Link, Link, Link] = (
            (None, "updateElements"),
            (None, "newElements"),
            (None, "removeElements"),
        )
        if type(root) is dict:
            _run(self.walk_object(root, u, n, x, None, None, *links))
        else:
            _run(self.walk_array(root, u, n, x, None, None, *links))
        return root


def _display_path(link: Link, head: int = 8, tail: int = 16) -> str:
    """A path for messages: whole when short, else its first and last parts around "…"."""
    parts = materialize(link)
    if len(parts) <= head + tail + 1:
        return format_payload_path(parts)
    return (
        format_payload_path(parts[:head])
        + f"…({len(parts) - head - tail} more levels)…"
        + format_payload_path(("x", *parts[-tail:]))[1:]
    )


def _pp(plink: Link | None) -> tuple[str | int, ...] | None:
    return materialize(plink) if plink is not None else None


# --- the public function -----------------------------------------------------------------------

P = TypeVar("P")
M = TypeVar("M", bound=BaseModel)


@overload
def apply_change_request(
    payload: M,
    change_request: AgentPayloadChangeRequest[Any] | Mapping[str, Any] | None,
    *,
    strict: bool = ...,
    markers: Iterable[str] = ...,
    share: bool = ...,
    guard: Guard | None = ...,
    limits: Limits | None = ...,
    refuse_stale_markers: bool = ...,
) -> MergeResult[M]: ...


@overload
def apply_change_request(
    payload: dict[str, Any] | None,
    change_request: AgentPayloadChangeRequest[Any] | Mapping[str, Any] | None,
    *,
    strict: bool = ...,
    markers: Iterable[str] = ...,
    share: bool = ...,
    guard: Guard | None = ...,
    limits: Limits | None = ...,
    refuse_stale_markers: bool = ...,
) -> MergeResult[dict[str, Any]]: ...


@overload
def apply_change_request(
    payload: list[Any],
    change_request: AgentPayloadChangeRequest[Any] | Mapping[str, Any] | None,
    *,
    strict: bool = ...,
    markers: Iterable[str] = ...,
    share: bool = ...,
    guard: Guard | None = ...,
    limits: Limits | None = ...,
    refuse_stale_markers: bool = ...,
) -> MergeResult[list[Any]]: ...


@overload
def apply_change_request(
    payload: Any,
    change_request: Any,
    *,
    strict: bool = ...,
    markers: Iterable[str] = ...,
    share: bool = ...,
    guard: Guard | None = ...,
    limits: Limits | None = ...,
    refuse_stale_markers: bool = ...,
) -> MergeResult[Any]: ...


def apply_change_request(
    payload: Any,
    change_request: Any,
    *,
    strict: bool = False,
    markers: Iterable[str] = DEFAULT_MARKERS,
    share: bool = False,
    guard: Guard | None = None,
    limits: Limits | None = None,
    refuse_stale_markers: bool = False,
) -> MergeResult[Any]:
    """Merge ``change_request`` into ``payload`` as MERGE.md says; return payload and report.

    ``payload``: a dict or a list (JSON data), ``None`` (treated as ``{}``), or a pydantic model
    instance (dumped in JSON mode by alias, merged, and validated back into the same class; a
    failure raises :class:`~agent_payload.errors.PayloadValidationError` whose ``errors`` are
    ``(payload_path, message)`` pairs). A model's type must round-trip exactly (checked first:
    :func:`agent_payload.typed.check_round_trip` raises ``ConfigurationError``); its secret
    and excluded fields are carried through; what validation changes (validators, union
    switches, defaults) is part of the report and judged by ``guard``; a change validation
    would drop or undo raises ``PayloadValidationError`` (see :mod:`agent_payload.typed`). A
    refused consequence of validation refuses the whole typed result: the input comes back
    with the conflict and no changes. Anything else at the root, or data that is not JSON
    anywhere inside (a tuple, a set, a datetime, a non-string key, NaN or an infinity, a
    cycle), raises :class:`~agent_payload.errors.InvalidPayloadError` naming its path.

    ``change_request``: an :class:`~agent_payload.changes.AgentPayloadChangeRequest`, a mapping
    in wire form (wrappers such as ``payloadChangeRequest`` are unwrapped, snake_case bucket
    names accepted, any other top-level field is a conflict ``unknown_field``), or ``None``
    (empty). Anything else raises :class:`~agent_payload.errors.InvalidChangeRequestError`, as
    does data inside it that is not JSON (the error names its change-request path).

    Neither input is ever mutated. The report lists effective ``changes`` (values are copies),
    ``warnings`` (auto-corrections that were applied), ``conflicts`` (parts that were not
    applied) with change-request paths, and ``reasoning`` as given (a non-string reasoning is
    kept as JSON text).

    ``changes`` come in walk order: replaceElements keys first; then at each object node key by
    key, in the order removeElements, updateElements and newElements first name them, each
    key's own change or the changes below it; at an array node, in original index order, the
    items a newElements index map inserts before each position (MERGE.md section 8) and then
    that element's deletion, replacement or nested changes; then the appended items. A
    ``delete`` has the path in the original payload, an ``add`` or ``update`` the path in the
    result (array indices shift after deletions), as MERGE.md section 4 says.

    Options:

    * ``strict``: raise :class:`~agent_payload.errors.MergeConflictError` (carrying the full
      report, whose ``changes`` are what lenient mode would have applied) when anything
      conflicts; nothing is applied.
    * ``markers``: the DELETE markers in force, any iterable of non-empty strings (a single
      string is one marker; empty: no marker at all).
    * ``share``: default ``False`` returns a payload that shares no mutable object with either
      input. ``True`` copies only the containers on the paths the request walks and shares
      every other subtree with the input payload, so a one-field edit costs the same on a 10 MB
      payload as on a 10 KB one. Then the caller must treat both the input and the result as
      immutable afterwards (mutating one changes the other), and only what the walk touches is
      checked to be JSON data (``Limits.max_nodes`` is not checked). A subtree that is deleted
      or replaced is still copied into the report's ``Change.old``, at the cost of its size.
    * ``guard``: called with each effective :class:`~agent_payload.report.Change` before it is
      applied (deletions, appends, replacements of containers and replaceElements included).
      A :class:`~agent_payload.report.Finding` of severity ``"conflict"`` refuses the change:
      it is not applied and is recorded as a conflict with the finding's code, at the
      change-request path of the entry and the change's payload path. ``"warning"`` and
      ``"confirm"`` are recorded as warnings and the change applies. ``Issue.severity`` keeps
      the finding's severity. The guard is given each change at the **original node** it
      touches (an update or deletion of an element, or of anything inside it, at the element's
      position in ``payload``, whatever deletions before it shift it to; an appended element
      at its new position), so rules with literal indices mean what the model was shown; the
      report keeps MERGE.md's paths. A guard with ``review(before, after, changes,
      per_change=False)`` (``DataLossGuard``, ``GuardChain``) is also asked about the whole
      merge: its ``conflict`` findings refuse every change at or below their path (the merge
      runs again without them), the others are recorded as warnings. The guard must not
      mutate the change's values. A refused deletion
      of an array element keeps the element as it is (a change to it from the other bucket,
      already reported as ``shadowed``, is not applied either), and later result indices count
      it.
    * ``limits``: :class:`Limits` (depth and sizes); exceeding one raises
      :class:`~agent_payload.errors.LimitExceededError`.
    * ``refuse_stale_markers`` (the agent, the tool handler and the CLI turn it on): a DELETE
      marker written out of habit is a conflict ``stale_marker`` instead of literal data: in
      updateElements, a string equal to any of the library's markers (``"DELETE"``,
      ``"__DELETE__"``, ``"__DELETE_<8 hex>__"``) that would replace an object or an array, or
      any such string inside content added at a key or index that does not exist. Off, the
      merge follows MERGE.md to the letter (that content is literal).
    """
    limits = DEFAULT_LIMITS if limits is None else limits
    if not isinstance(limits, Limits):
        raise ConfigurationError(f"limits must be a Limits instance or None; found {limits!r}.")
    active = _validate_markers(markers)
    if guard is not None and not callable(guard):
        raise ConfigurationError(f"guard must be callable (a Guard) or None; found {guard!r}.")

    model_class: type[BaseModel] | None = None
    if isinstance(payload, BaseModel):
        model_class = type(payload)
        _typed.check_round_trip(payload)  # issue 17: an exact round trip, or refused up front
        before: Any = json_data(payload)
        share_mode = False
    elif payload is None:
        before = {}
        share_mode = False
    else:
        if _kind(payload) not in (_OBJ, _ARR):
            raise _root_error(payload)
        before = payload
        share_mode = share

    def work_copy() -> Any:
        if payload is None:
            return {}
        if share_mode:
            return dict(before) if type(before) is dict else list(before)
        return _copy_payload(before, limits)

    request = _normalise_request(change_request, limits)

    def merge_pass(pass_guard: Guard | None) -> tuple[Any, MergeReport]:
        report = MergeReport(reasoning=request.reasoning)
        for issue in request.issues:
            (report.conflicts if issue.code == "unknown_field" else report.warnings).append(issue)
        merger = _Merger(
            markers=active,
            share=share_mode,
            guard=pass_guard,
            limits=limits,
            report=report,
            refuse_stale=refuse_stale_markers,
        )
        return merger.merge_root(work_copy(), request.buckets), report

    result, report = merge_pass(guard)
    findings = _review_merge(guard, before, result, report)
    refused = [f for f in findings if f.severity == "conflict"]
    if refused and guard is not None:
        # The whole-merge review refused part of the merge: merge again, refusing every change
        # at or below what it refused, so that part is not applied (and the rest is).
        result, report = merge_pass(_RefuseBelow(guard, refused))
        findings = [f for f in _review_merge(guard, before, result, report) if f not in refused]
    for finding in findings:
        path = tuple(getattr(finding, "path", ()) or ())
        issue = Issue(finding.code, "", finding.message, path, finding.severity)
        (report.conflicts if finding.severity == "conflict" else report.warnings).append(issue)

    if strict and report.conflicts:
        raise MergeConflictError(_strict_message(report), report=report)
    if model_class is not None:
        # issue 17: validation is part of the change (reported, judged by the guard).
        model, _ = _typed.validate_merged(
            model_class,
            original=payload,
            before_json=before,
            merged_json=result,
            report=report,
            guard=guard,
        )
        if report.conflicts:
            if strict:
                raise MergeConflictError(_strict_message(report), report=report)
            report.changes.clear()  # a refused consequence of validation: nothing applied
            return MergeResult(payload, report)
        return MergeResult(model, report)
    return MergeResult(result, report)


def _review_merge(
    guard: Guard | None, before: Any, after: Any, report: MergeReport
) -> list[Finding]:
    """The guard's whole-merge review, when it has one: ``guard.review(before, after, changes,
    per_change=False)`` (a ``DataLossGuard``, or a ``GuardChain`` holding one). The one place
    it runs: the agent, the tool handler and the session all merge through here."""
    review = getattr(guard, "review", None)
    if guard is None or not callable(review):
        return []
    findings = list(review(before, after, list(report.changes), per_change=False))
    for finding in findings:
        if not isinstance(finding, Finding):
            raise ConfigurationError(
                f"A guard's review must return a sequence of Finding; it returned {finding!r}."
            )
    return findings


class _RefuseBelow:
    """The guard of a second merge pass: refuses every change at or below a path that the
    whole-merge review refused (with the review's message on the first one), and asks the
    guard about the others. Has no ``review`` (the pass is reviewed by the caller)."""

    def __init__(self, guard: Guard, refused: Sequence[Finding]) -> None:
        self.guard = guard
        self.refused = [(tuple(getattr(f, "path", ()) or ()), f) for f in refused]
        self.told: set[int] = set()

    def __call__(self, change: Change) -> Sequence[Finding]:
        for n, (path, finding) in enumerate(self.refused):
            if change.path[: len(path)] == path:
                if n in self.told:
                    where = format_payload_path(path) or "the payload root"
                    return [
                        Finding(
                            finding.code,
                            f"Not applied: part of the change to {where} refused above.",
                            "conflict",
                        )
                    ]
                self.told.add(n)
                return [finding]
        return self.guard(change)


_CLAIMS_NO_CHANGE: Final = re.compile(
    r"\b(?:no\s+(?:change|edit|update)s?\b|nothing\s+(?:to|needs|should|changes)|already|"
    r"unchanged|as\s+it\s+is|leave\s+(?:it|them|everything)|keep\s+(?:it|them|everything))",
    re.IGNORECASE,
)


def ineffective_parts(report: MergeReport, reasoning: str | None) -> list[Issue]:
    """The warnings to send back to the model as a correction, because parts of the request
    that were clearly meant to act did nothing (the agent's rule; empty when none):

    * every warning, when the request made **no** effective change at all (a DELETE at a key
      that does not exist, ``[]`` over a list, ... and nothing else);
    * the ``no_effect`` warnings, when the request changed something else but its
      ``reasoning`` claims a change (a non-empty reasoning that does not say "no change",
      "already", "unchanged", "nothing to ...", "keep it/them", "leave it/them").

    A request with conflicts is judged by them first (nothing here). A request that says
    nothing should change (``{}``, reasoning alone) has no warnings and passes.
    """
    if report.conflicts or not report.warnings:
        return []
    if not report.changes:
        return list(report.warnings)
    no_effect = [w for w in report.warnings if w.code == "no_effect"]
    if no_effect and reasoning and reasoning.strip() and not _CLAIMS_NO_CHANGE.search(reasoning):
        return no_effect
    return []


def validation_errors(
    exc: ValidationError, data: Any = None
) -> list[tuple[tuple[str | int, ...], str]]:
    """``(payload path, message)`` for each error of a pydantic ``ValidationError``. With
    ``data`` (the value validated), union branch tags are removed from the paths
    (:func:`agent_payload.typed.clean_loc`) and duplicates dropped."""
    if data is not None:
        return _typed.validation_errors(exc, data)
    return [(tuple(err["loc"]), str(err["msg"])) for err in exc.errors(include_url=False)]


def list_validation_errors(errors: Sequence[tuple[Sequence[str | int], str]]) -> str:
    """The first ten ``(payload path, message)`` pairs as one line for an error message."""
    return "; ".join(f"{format_payload_path(p) or 'the root'}: {m}" for p, m in errors[:10])


def reconcile_validated(
    validated: Any, merged: Any, report: MergeReport, type_name: str, *, rewrite: bool = True
) -> None:
    """Check the merge's changes against ``validated``, the merged data as its pydantic type
    dumps it back.

    Validation may drop keys the type ignores (``extra="ignore"``: a misspelt field), coerce
    values (``"1"`` to ``1``) or restore a deleted field's default. A change whose key was
    dropped would be lost silently, so it raises ``PayloadValidationError`` naming its path (in
    the agent it goes back to the model). With ``rewrite``, a coerced or restored value is
    reported as it ends up, and a change coerced back to the old value is dropped.
    """
    if json_equal(validated, merged):
        return
    lost: list[tuple[tuple[str | int, ...], str]] = []
    changes: list[Change] = []
    for change in report.changes:
        present, value = _lookup(validated, change.path)
        if change.op != "delete" and not present:
            lost.append(
                (
                    change.path,
                    f"not a field of {type_name}: the type ignores it, so this change would be "
                    "lost. Use the field names of the schema.",
                )
            )
        elif change.op == "delete":
            if not present:
                changes.append(change)
            elif not json_equal(value, change.old):  # restored to a default
                changes.append(Change("update", change.path, change.old, value))
        elif json_equal(value, change.new):
            changes.append(change)
        elif change.op == "add" or not json_equal(value, change.old):
            changes.append(Change(change.op, change.path, change.old, value))
    if lost:
        raise PayloadValidationError(
            f"The merged payload does not fit {type_name}: {list_validation_errors(lost)}",
            errors=lost,
            payload=merged,
        )
    if rewrite:
        report.changes[:] = changes


def _lookup(data: Any, path: tuple[str | int, ...]) -> tuple[bool, Any]:
    for part in path:
        in_object = isinstance(data, dict) and isinstance(part, str) and part in data
        in_array = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if not (in_object or in_array):
            return False, None
        data = data[part]
    return True, data


def _strict_message(report: MergeReport) -> str:
    lines = [
        f"{_plural(len(report.conflicts), 'conflict')} in the change request; nothing was "
        "applied (strict mode):"
    ]
    for issue in report.conflicts[:20]:
        lines.append(f"  {issue.code} at {issue.path}: {issue.message}")
    if len(report.conflicts) > 20:
        lines.append(f"  ... and {len(report.conflicts) - 20} more (see .report.conflicts)")
    return "\n".join(lines)
