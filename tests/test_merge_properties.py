"""Properties of the merge engine over arbitrary JSON payloads and change requests (hypothesis).

Requests are partly random and partly derived from the payload (real keys and positions, DELETE
markers, ``{}`` placeholders, index maps), so that they hit real paths.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent_payload.errors import AgentPayloadError
from agent_payload.merge import apply_change_request
from agent_payload.report import Finding

MARKERS = ["DELETE", "__DELETE__"]

keys = st.sampled_from(["a", "b", "c", "0", "1", "2", "a.b", "", "DELETE"]) | st.text(max_size=3)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(allow_nan=False, allow_infinity=False, width=16)
    | st.sampled_from(["x", "y", *MARKERS])
    | st.text(max_size=4)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=20,
)
payloads = st.one_of(
    st.dictionaries(keys, json_values, max_size=5),
    st.lists(json_values, max_size=5),
    st.none(),
)


@st.composite
def derived(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """A bucket subtree aimed at ``value``: its keys and positions, markers, placeholders."""
    choice = draw(st.integers(0, 9))
    if depth < 4 and isinstance(value, dict) and value and choice < 6:
        names = draw(st.lists(st.sampled_from([*value, "new", "0"]), max_size=4, unique=True))
        return {k: draw(derived(value.get(k), depth + 1)) for k in names}
    if depth < 4 and isinstance(value, list) and value and choice < 6:
        if draw(st.booleans()):
            size = draw(st.integers(0, len(value) + 2))
            return [
                draw(derived(value[i], depth + 1)) if i < len(value) else draw(json_values)
                for i in range(size)
            ]
        picks = draw(st.lists(st.integers(0, len(value) + 1), max_size=3, unique=True))
        return {
            str(i): draw(derived(value[i], depth + 1)) if i < len(value) else draw(json_values)
            for i in picks
        }
    return draw(st.sampled_from([*MARKERS, {}, None, [], 7]) | json_values)


@st.composite
def payload_and_request(draw: st.DrawFn) -> tuple[Any, Any]:
    payload = draw(payloads)
    target = {} if payload is None else payload
    request: dict[str, Any] = {}
    for name in ("updateElements", "removeElements", "newElements", "replaceElements"):
        mode = draw(st.integers(0, 3))
        if mode == 0:
            continue
        if mode == 1:
            request[name] = draw(json_values)
        else:
            request[name] = draw(derived(target))
    if draw(st.booleans()):
        request["reasoning"] = draw(st.text(max_size=5))
    if draw(st.integers(0, 9)) == 0:
        request[draw(st.sampled_from(["stray", "update_elements", "changeRequest"]))] = draw(
            json_values
        )
    return payload, request


def containers(*roots: Any) -> dict[int, Any]:
    """Every dict and list reachable from ``roots``, by id (the objects kept alive)."""
    found: dict[int, Any] = {}
    stack = list(roots)
    while stack:
        value = stack.pop()
        if isinstance(value, dict | list):
            found[id(value)] = value
            stack.extend(value.values() if isinstance(value, dict) else value)
    return found


def holds_marker(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str) and v in MARKERS:
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def report_key(report: Any) -> Any:
    return (
        repr(report.changes),
        [(w.code, w.path) for w in report.warnings],
        [(c.code, c.path) for c in report.conflicts],
    )


@given(payload_and_request())
def test_inputs_never_mutated(case: tuple[Any, Any]) -> None:
    """Neither the payload nor the change request is changed by a merge, in either mode."""
    payload, request = case
    before = (repr(payload), repr(request))
    for share in (False, True):
        apply_change_request(payload, request, share=share)
        assert (repr(payload), repr(request)) == before


@given(payload_and_request())
def test_result_shares_nothing_with_inputs(case: tuple[Any, Any]) -> None:
    """In default mode no container of the result or of the report's values is an input's."""
    payload, request = case
    result = apply_change_request(payload, request)
    values = [c.old for c in result.report.changes] + [c.new for c in result.report.changes]
    inputs = containers(payload, request)
    produced = containers(result.payload, *values)
    assert not inputs.keys() & produced.keys()
    # and the report's values are not the result's own objects either
    assert not containers(result.payload).keys() & containers(*values).keys()


@given(payload_and_request())
def test_share_mode_gives_the_same_result(case: tuple[Any, Any]) -> None:
    """share=True merges to the same payload and report as the default mode."""
    payload, request = case
    default = apply_change_request(payload, request)
    shared = apply_change_request(payload, request, share=True)
    assert repr(shared.payload) == repr(default.payload)
    assert report_key(shared.report) == report_key(default.report)


@given(payloads, json_values | st.dictionaries(keys, json_values, max_size=5))
def test_only_documented_errors(payload: Any, request: Any) -> None:
    """Arbitrary JSON as a change request (any shape) gives a result or a documented error."""
    with contextlib.suppress(AgentPayloadError):
        apply_change_request(payload, request)


@given(payload_and_request())
def test_strict_mode_raises_exactly_when_lenient_conflicts(case: tuple[Any, Any]) -> None:
    """strict=True raises MergeConflictError carrying the report iff lenient mode conflicts."""
    payload, request = case
    lenient = apply_change_request(payload, request)
    try:
        strict = apply_change_request(payload, request, strict=True)
    except AgentPayloadError as exc:
        assert lenient.report.conflicts
        assert report_key(exc.report) == report_key(lenient.report)  # type: ignore[attr-defined]
    else:
        assert not lenient.report.conflicts
        assert repr(strict.payload) == repr(lenient.payload)


@given(payloads, st.sampled_from([None, {}, {"reasoning": "r"}, {"updateElements": None}]))
def test_empty_request_changes_nothing(payload: Any, request: Any) -> None:
    """An empty change request returns an equal payload and an empty report."""
    result = apply_change_request(payload, request)
    assert repr(result.payload) == repr({} if payload is None else payload)
    assert not result.report.changes
    assert not result.report.warnings
    assert not result.report.conflicts


@given(payloads)
def test_updating_with_own_values_reports_no_change(payload: Any) -> None:
    """updateElements equal to the payload (data holding no marker) changes nothing at all."""
    if holds_marker(payload):
        return
    own = copy.deepcopy(payload)
    result = apply_change_request(payload, {"updateElements": own})
    assert repr(result.payload) == repr({} if payload is None else payload)
    assert result.report.changes == []
    assert result.report.warnings == []
    assert result.report.conflicts == []


@given(payload_and_request())
def test_changes_describe_the_difference(case: tuple[Any, Any]) -> None:
    """No change is reported when the payload is unchanged, and one is reported when it changed."""
    payload, request = case
    result = apply_change_request(payload, request)
    same = repr(result.payload) == repr({} if payload is None else payload)
    if not result.report.changes:
        assert same


@given(payload_and_request())
def test_a_guard_that_refuses_everything_changes_nothing(case: tuple[Any, Any]) -> None:
    """A guard refusing every change: the payload stays equal, each would-be change a conflict."""
    payload, request = case
    lenient = apply_change_request(payload, request)
    refused = apply_change_request(
        payload, request, guards=[lambda change: [Finding("permission_denied", "no")]]
    )
    assert repr(refused.payload) == repr({} if payload is None else payload)
    assert not refused.report.changes
    guard_conflicts = [c for c in refused.report.conflicts if c.code == "permission_denied"]
    assert len(guard_conflicts) == len(lenient.report.changes)
