"""Insertion through newElements index maps (MERGE.md section 8): the report, the messages, the
guards, the limits, and properties over random payloads with random insertions.

The conformance cases (every example and bullet of section 8) are data, in
``tests/vectors/insertion.json``, run by ``test_vectors.py``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_payload.diff import to_json_patch
from agent_payload.errors import LimitExceededError
from agent_payload.guards import DataLossGuard, Permissions, ReadScope
from agent_payload.merge import Limits, apply_change_request
from agent_payload.report import Change, Finding

XS = {"xs": ["a", "b", "c"]}


# --- the report --------------------------------------------------------------------------------


def test_each_inserted_item_is_an_add_at_its_result_path() -> None:
    """Inserted items are reported one by one, at their index in the result array."""
    result = apply_change_request(XS, {"newElements": {"xs": {"0": ["w"], "2": ["x", "y"]}}})
    assert result.payload == {"xs": ["w", "a", "b", "x", "y", "c"]}
    assert result.report.changes == [
        Change("add", ("xs", 0), None, "w"),
        Change("add", ("xs", 3), None, "x"),
        Change("add", ("xs", 4), None, "y"),
    ]


def test_changes_after_insertions_name_shifted_result_paths() -> None:
    """An update of an original element after insertions is reported at its result index, a
    deletion at its original index, as section 4 says."""
    payload = {"rows": [{"id": 1}, {"id": 2}, {"id": 3}]}
    request = {
        "newElements": {"rows": {"0": [{"id": 0}, {"id": 0.5}]}},
        "updateElements": {"rows": {"1": "DELETE", "2": {"id": 30}}},
    }
    result = apply_change_request(payload, request)
    assert result.payload == {"rows": [{"id": 0}, {"id": 0.5}, {"id": 1}, {"id": 30}]}
    assert result.report.changes == [
        Change("add", ("rows", 0), None, {"id": 0}),
        Change("add", ("rows", 1), None, {"id": 0.5}),
        Change("delete", ("rows", 1), {"id": 2}, None),
        Change("update", ("rows", 3, "id"), 3, 30),
    ]


def test_descent_reports_changes_inside_the_shifted_element() -> None:
    """What a descent adds inside element k is reported under k's result index."""
    payload = {"rows": [{"id": 1, "tags": ["a"]}, {"id": 2, "tags": []}]}
    request = {
        "newElements": {
            "rows": {"1": {"tags": ["new"], "note": "n"}, "0": {"tags": {"0": ["first"]}}}
        }
    }
    result = apply_change_request(payload, request)
    assert result.report.changes == [
        Change("add", ("rows", 0, "tags", 0), None, "first"),
        Change("add", ("rows", 1, "tags", 0), None, "new"),
        Change("add", ("rows", 1, "note"), None, "n"),
    ]


def test_inserted_items_are_copies_of_the_request() -> None:
    """The result holds its own copies of inserted items: editing it leaves the request as it
    was, and the report's values are copies too."""
    item = {"id": 9, "tags": ["t"]}
    request = {"newElements": {"rows": {"0": [item]}}}
    result = apply_change_request({"rows": []}, request)
    result.payload["rows"][0]["tags"].append("changed")
    assert item == {"id": 9, "tags": ["t"]}
    assert result.report.changes[0].new == {"id": 9, "tags": ["t"]}


# --- messages ----------------------------------------------------------------------------------


def _only_conflict(payload: Any, request: Any) -> Any:
    result = apply_change_request(payload, request)
    assert result.payload == payload
    [conflict] = result.report.conflicts
    return conflict


def test_insertion_beyond_the_length_names_the_length() -> None:
    """index_out_of_range says how long the array is and that the length inserts at the end."""
    conflict = _only_conflict(XS, {"newElements": {"xs": {"4": ["x"]}}})
    assert (conflict.code, conflict.path) == ("index_out_of_range", 'newElements.xs["4"]')
    assert "3 elements" in conflict.message
    assert "0 to 3" in conflict.message
    assert "the length, 3, inserts after the last element" in conflict.message


def test_descent_beyond_the_end_says_how_to_insert() -> None:
    """An object value at the length names no element: the message says a list inserts."""
    conflict = _only_conflict({"r": [{"a": 1}]}, {"newElements": {"r": {"1": {"b": 2}}}})
    assert (conflict.code, conflict.path) == ("index_out_of_range", 'newElements.r["1"]')
    assert "1 element" in conflict.message
    assert '{"1": [...]}' in conflict.message


def test_primitive_value_says_what_an_index_map_holds() -> None:
    """shape_mismatch at the key: lists insert, objects add inside, updates replace."""
    conflict = _only_conflict(XS, {"newElements": {"xs": {"1": "x"}}})
    assert (conflict.code, conflict.path) == ("shape_mismatch", 'newElements.xs["1"]')
    assert "list of items to insert" in conflict.message
    assert "updateElements" in conflict.message
    assert conflict.payload_path == ("xs",)


def test_descent_into_a_primitive_element_says_how_to_replace_it() -> None:
    """An object over a plain element: nothing to add inside; use updateElements or a list."""
    conflict = _only_conflict(XS, {"newElements": {"xs": {"1": {"k": 1}}}})
    assert (conflict.code, conflict.path) == ("shape_mismatch", 'newElements.xs["1"]')
    assert 'holds the string "b"' in conflict.message
    assert "updateElements" in conflict.message
    assert conflict.payload_path == ("xs", 1)


def test_plain_object_into_an_array_element_names_the_index_map() -> None:
    """Into an element that is an array, the object must be an index map."""
    conflict = _only_conflict({"m": [[1]]}, {"newElements": {"m": {"0": {"k": [1]}}}})
    assert (conflict.code, conflict.path) == ("shape_mismatch", 'newElements.m["0"]')
    assert 'the key "k" is not a decimal index' in conflict.message
    assert '{"2": [items]} inserts the items before its element 2' in conflict.message
    assert conflict.payload_path == ("m", 0)


def test_descent_into_a_deleted_element_keeps_the_deletion() -> None:
    """The deletion stands; the message says so and how to put a changed copy in its place."""
    result = apply_change_request(
        {"r": [{"a": 1}, {"a": 2}]},
        {"updateElements": {"r": {"1": "DELETE"}}, "newElements": {"r": {"1": {"b": 2}}}},
    )
    assert result.payload == {"r": [{"a": 1}]}
    [conflict] = result.report.conflicts
    assert (conflict.code, conflict.path) == ("shape_mismatch", 'newElements.r["1"]')
    assert "deletion stands" in conflict.message
    assert '{"1": [...]}' in conflict.message


def test_not_an_index_map_names_the_insertion_form() -> None:
    """A non-index key makes the object a shape_mismatch whose message teaches both forms."""
    conflict = _only_conflict(XS, {"newElements": {"xs": {"end": ["x"]}}})
    assert (conflict.code, conflict.path) == ("shape_mismatch", "newElements.xs")
    assert '"end" is not a decimal index' in conflict.message
    assert "an array of items to append" in conflict.message
    assert "inserts the items before element 2" in conflict.message


def test_strict_mode_applies_nothing() -> None:
    """An out-of-range key beside a valid insertion: strict mode raises, nothing applied."""
    from agent_payload.errors import MergeConflictError

    with pytest.raises(MergeConflictError) as info:
        apply_change_request(XS, {"newElements": {"xs": {"0": ["w"], "9": ["z"]}}}, strict=True)
    assert [c.path for c in info.value.report.conflicts] == ['newElements.xs["9"]']


# --- guards ------------------------------------------------------------------------------------


def test_permission_add_on_elements_allows_insertion() -> None:
    """allow=["xs[*]:add"] lets items be inserted and nothing else change."""
    guard = Permissions(allow=["xs[*]:add"])
    result = apply_change_request(
        XS,
        {"newElements": {"xs": {"1": ["x"]}}, "updateElements": {"xs": {"2": "C"}}},
        guards=[guard],
    )
    assert result.payload == {"xs": ["a", "x", "b", "c"]}
    [conflict] = result.report.conflicts
    assert (conflict.code, conflict.path) == ("permission_denied", 'updateElements.xs["2"]')


def test_refused_insertion_is_a_conflict_and_shifts_nothing() -> None:
    """deny=["xs[*]:add"] refuses each inserted item at its item path; later changes keep the
    right result indices (the refused item takes no place)."""
    guard = Permissions(deny=["xs[*]:add"])
    seen: list[Change] = []

    def recording(change: Change) -> list[Finding]:
        seen.append(change)
        return list(guard(change))

    result = apply_change_request(
        XS,
        {"newElements": {"xs": {"0": ["w", "v"]}}, "updateElements": {"xs": {"1": "B"}}},
        guards=[recording],
    )
    assert result.payload == {"xs": ["a", "B", "c"]}
    assert [c.path for c in result.report.conflicts] == [
        'newElements.xs["0"][0]',
        'newElements.xs["0"][1]',
    ]
    assert all(c.code == "permission_denied" for c in result.report.conflicts)
    assert result.report.changes == [Change("update", ("xs", 1), "b", "B")]
    assert [(c.op, c.path) for c in seen] == [
        ("add", ("xs", 0)),
        ("add", ("xs", 0)),
        ("update", ("xs", 1)),
    ]


def test_guard_sees_inserted_items_as_adds_at_result_paths() -> None:
    """The guard is asked about each inserted item, as an add at its result path, before
    the changes after it."""
    seen: list[tuple[str, tuple[str | int, ...]]] = []

    def recording(change: Change) -> list[Finding]:
        seen.append((change.op, change.path))
        return []

    apply_change_request(
        {"r": [{"t": ["a"]}, {"t": []}]},
        {
            "newElements": {"r": {"0": [{"t": []}], "1": {"t": {"0": ["z"]}}, "2": [{}]}},
            "removeElements": {"r": {"0": "DELETE"}},
        },
        guards=[recording],
    )
    assert seen == [
        ("add", ("r", 0)),
        ("delete", ("r", 0)),
        ("add", ("r", 1, "t", 0)),
        ("add", ("r", 2)),
    ]


def test_read_scope_refuses_an_inserted_item_with_hidden_keys() -> None:
    """An inserted element holding a key outside the read scope is refused; one inside it is
    applied."""
    scope = ReadScope(exclude=["items[*].cost"])
    result = apply_change_request(
        {"items": [{"name": "a", "cost": 1}]},
        {"newElements": {"items": {"0": [{"name": "x", "cost": 5}], "1": [{"name": "y"}]}}},
        guards=[scope],
    )
    assert result.payload == {"items": [{"name": "a", "cost": 1}, {"name": "y"}]}
    [conflict] = result.report.conflicts
    assert (conflict.code, conflict.path) == ("permission_denied", 'newElements.items["0"][0]')


def test_data_loss_guard_is_unaffected_by_insertions() -> None:
    """Insertions raise no data-loss finding, and a container whose element shifted is
    compared with its own result (an element inserted before it does not stand in for it)."""
    payload = {"rows": [{"tags": ["a", "b", "c", "d", "e", "f"]}, {"tags": ["x"]}]}
    request = {
        "newElements": {"rows": {"0": [{"tags": []}], "2": [{"tags": []}]}},
        "removeElements": {"rows": {"0": {"tags": ["DELETE", "DELETE"]}}},
    }
    guard = DataLossGuard(policy="warn")
    result = apply_change_request(payload, request, guards=[guard])
    assert result.payload["rows"][1] == {"tags": ["c", "d", "e", "f"]}
    assert not result.report.warnings
    assert guard.review(payload, result.payload, result.report.changes) == []
    # and a real shrink of the shifted element is still found, at its original path
    request["removeElements"] = {"rows": {"0": {"tags": ["DELETE"] * 5}}}
    result = apply_change_request(payload, request)
    [finding] = guard.review(payload, result.payload, result.report.changes)
    assert finding.path == ("rows", 0, "tags")
    assert (finding.before_size, finding.after_size) == (6, 1)


# --- limits ------------------------------------------------------------------------------------


def test_request_node_limit_counts_inserted_items() -> None:
    """A huge insertion is refused by max_request_nodes, naming the limit."""
    with pytest.raises(LimitExceededError) as info:
        apply_change_request(
            XS,
            {"newElements": {"xs": {"1": list(range(100))}}},
            limits=Limits(max_request_nodes=50),
        )
    assert info.value.limit == "max_request_nodes"


def test_insertion_at_the_bottom_of_a_very_deep_array() -> None:
    """Descents through index maps are iterative: an insertion 3,000 arrays deep works, and
    the depth limit still applies."""
    depth = 3000
    payload: Any = ["leaf"]
    for _ in range(depth):
        payload = [payload]
    request: Any = {"0": ["new"]}
    for _ in range(depth):
        request = {"0": request}
    result = apply_change_request(payload, {"newElements": request})
    node = result.payload
    for _ in range(depth):
        node = node[0]
    assert node == ["new", "leaf"]
    [change] = result.report.changes
    assert change.path == (0,) * depth + (0,)
    with pytest.raises(LimitExceededError):
        apply_change_request(payload, {"newElements": request}, limits=Limits(max_depth=1000))


def test_report_path_limit_bounds_many_deep_conflicts() -> None:
    """Many conflicting keys deep down are bounded by max_report_path_parts."""
    payload: Any = list(range(10))
    request: Any = {str(i): "x" for i in range(10)}
    for _ in range(50):
        payload = [payload]
        request = {"0": request}
    with pytest.raises(LimitExceededError) as info:
        apply_change_request(
            payload, {"newElements": request}, limits=Limits(max_report_path_parts=200)
        )
    assert info.value.limit == "max_report_path_parts"


# --- properties --------------------------------------------------------------------------------

scalars = st.integers(-5, 5) | st.sampled_from(["x", "DELETE", "__DELETE__"]) | st.none()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner),
    max_leaves=8,
)
inserted_values = values | st.just({}) | st.just([])


@st.composite
def flat_edit(draw: st.DrawFn) -> tuple[list[int], dict[str, Any], list[Any]]:
    """A list of distinct ints, a request that inserts, deletes and updates at random original
    positions, and the expected result computed by a direct reading of section 8."""
    n = draw(st.integers(0, 6))
    original = list(range(100, 100 + n))
    inserts = draw(
        st.dictionaries(st.integers(0, n), st.lists(inserted_values, max_size=3), max_size=4)
    )
    fate = draw(
        st.lists(st.sampled_from(["keep", "update", "delete", "remove"]), min_size=n, max_size=n)
    )
    update: dict[str, Any] = {}
    remove: dict[str, Any] = {}
    for i, what in enumerate(fate):
        if what == "update":
            update[str(i)] = -i
        elif what == "delete":
            update[str(i)] = "DELETE"
        elif what == "remove":
            remove[str(i)] = "DELETE"
    request: dict[str, Any] = {"newElements": {"xs": {str(k): v for k, v in inserts.items()}}}
    if update:
        request["updateElements"] = {"xs": update}
    if remove:
        request["removeElements"] = {"xs": remove}
    expected: list[Any] = []
    for i in range(n + 1):
        expected.extend(inserts.get(i, []))
        if i < n and fate[i] == "keep":
            expected.append(original[i])
        elif i < n and fate[i] == "update":
            expected.append(-i)
    return original, request, expected


def _check_report_paths(payload: Any, result: Any) -> None:
    """Every add/update names its value in the result; every delete its value in the input."""

    def at(data: Any, path: tuple[str | int, ...]) -> Any:
        for part in path:
            data = data[part]
        return data

    for change in result.report.changes:
        if change.op == "delete":
            assert at(payload, change.path) == change.old, change
        else:
            assert at(result.payload, change.path) == change.new, change


def _check_json_patch(payload: Any, result: Any) -> None:
    for test in (False, True):
        patch = to_json_patch(payload, result, test=test)
        assert jsonpatch.apply_patch(payload, patch) == result.payload, patch


@given(flat_edit())
def test_flat_insertions_follow_the_rule(case: tuple[list[int], dict[str, Any], list[Any]]) -> None:
    """Random insertions beside random updates and deletions give the section's result order;
    the report, the JSON Patch export and share mode agree with it."""
    original, request, expected = case
    payload = {"xs": original}
    before = json.dumps(request)
    result = apply_change_request(payload, request)
    assert json.dumps(request) == before
    assert result.payload == {"xs": expected}
    assert not result.report.conflicts
    assert not result.report.warnings
    inserted = sum(len(v) for v in request["newElements"]["xs"].values())
    assert sum(c.op == "add" for c in result.report.changes) == inserted
    _check_report_paths(payload, result)
    _check_json_patch(payload, result)
    shared = apply_change_request(payload, request, share=True)
    assert repr(shared.payload) == repr(result.payload)
    assert repr(shared.report.changes) == repr(result.report.changes)


@st.composite
def nested_edit(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """newElements aimed at ``value``: index maps that insert and descend at any depth."""
    if isinstance(value, list) and depth < 4:
        keys = draw(st.lists(st.integers(0, len(value) + 1), max_size=3, unique=True))
        out: dict[str, Any] = {}
        for k in keys:
            if k < len(value) and draw(st.booleans()):
                out[str(k)] = draw(nested_edit(value[k], depth + 1))
            else:
                out[str(k)] = draw(st.lists(inserted_values, max_size=2))
        return out
    if isinstance(value, dict) and depth < 4:
        names = draw(st.lists(st.sampled_from([*value, "new"]), max_size=3, unique=True))
        return {k: draw(nested_edit(value.get(k), depth + 1)) for k in names}
    return draw(inserted_values)


@st.composite
def nested_case(draw: st.DrawFn) -> tuple[Any, dict[str, Any]]:
    payload = draw(
        st.lists(values, max_size=4) | st.dictionaries(st.sampled_from("abc"), values, max_size=3)
    )
    request: dict[str, Any] = {"newElements": draw(nested_edit(payload))}
    for bucket in ("updateElements", "removeElements"):
        if isinstance(payload, list) and payload and draw(st.booleans()):
            picks = draw(st.lists(st.integers(0, len(payload) - 1), max_size=2, unique=True))
            request[bucket] = {str(i): draw(st.sampled_from(["DELETE", {}, 7])) for i in picks}
    return payload, request


@given(nested_case())
def test_nested_insertions_are_consistent(case: tuple[Any, dict[str, Any]]) -> None:
    """At any depth, beside deletions and updates: inputs untouched, share mode equal, every
    change names its value where it says, and the JSON Patch export reproduces the result."""
    payload, request = case
    snapshot = copy.deepcopy((payload, request))
    result = apply_change_request(payload, request)
    assert (payload, request) == snapshot
    shared = apply_change_request(payload, request, share=True)
    assert repr(shared.payload) == repr(result.payload)
    assert repr(shared.report) == repr(result.report)
    _check_report_paths(payload, result)
    _check_json_patch(payload, result)


# --- through the agent -------------------------------------------------------------------------


def test_agent_applies_a_move_and_teaches_insertion() -> None:
    """A scripted model's move (delete at the original position, insert the full value where
    it goes) is applied by the agent in one attempt; the system prompt it was sent teaches the
    newElements index map."""
    from agent_payload import PayloadAgent
    from agent_payload.testing import ScriptedModel

    payload = {"tracks": [{"t": "So What"}, {"t": "Take Five"}, {"t": "Blue in Green"}]}
    reply = json.dumps(
        {
            "updateElements": {"tracks": {"2": "DELETE"}},
            "newElements": {"tracks": {"1": [{"t": "Blue in Green"}]}},
        }
    )
    model = ScriptedModel([reply])
    result = PayloadAgent(model).run(payload, 'Play "Blue in Green" right after "So What".')
    assert result.payload == {
        "tracks": [{"t": "So What"}, {"t": "Blue in Green"}, {"t": "Take Five"}]
    }
    assert result.attempts == 1
    assert [(c.op, c.path) for c in result.changes] == [
        ("add", ("tracks", 1)),
        ("delete", ("tracks", 2)),
    ]
    system = model.requests[0].messages[0].content
    assert '{"newElements":{"steps":{"2":[{"name":"Preheat"}]}}}' in system
    assert "Move an element, also to another array" in system
