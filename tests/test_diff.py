"""diff_payloads, to_json_patch and undo_change_request: examples and hypothesis properties.

The properties run with moderate ``max_examples`` here; run them with many more locally with
``AGENT_PAYLOAD_DIFF_EXAMPLES=20000 pytest tests/test_diff.py``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agent_payload.changes import DEFAULT_MARKERS, AgentPayloadChangeRequest
from agent_payload.diff import (
    MAX_DIFF_DEPTH,
    diff_payloads,
    json_equal,
    json_pointer,
    to_json_patch,
    undo_change_request,
)
from agent_payload.errors import ConfigurationError, InvalidPayloadError, LimitExceededError
from agent_payload.merge import apply_change_request
from agent_payload.report import Change

_EXAMPLES = int(os.environ.get("AGENT_PAYLOAD_DIFF_EXAMPLES", "150"))

# --- strategies --------------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "0", "1", "", "DELETE", "x.y", "a/b~c", "ключ"])
PRIMITIVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, 1.0, -0.0]),
    st.sampled_from(["DELETE", "__DELETE__", "s", "t", "", "{}"]),
)
JSON = st.recursive(
    PRIMITIVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=14,
)
OBJECTS = st.dictionaries(KEYS, JSON, max_size=5)
ARRAYS = st.lists(JSON, max_size=5)
UNRELATED_PAIRS = st.one_of(st.tuples(OBJECTS, OBJECTS), st.tuples(ARRAYS, ARRAYS))


def _mutate(draw: st.DrawFn, value: Any) -> Any:
    """A value near ``value``: some keys and elements kept, changed, dropped, inserted."""
    roll = draw(st.integers(0, 9))
    if roll == 0:
        return draw(JSON)
    if not isinstance(value, dict | list):
        return value if roll < 5 else draw(JSON)
    if roll < 3:
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            fate = draw(st.integers(0, 5))
            if fate:
                out[key] = _mutate(draw, item) if fate < 3 else item
        for key in draw(st.lists(KEYS, max_size=2)):
            out[key] = draw(JSON)
        return out
    items: list[Any] = []
    for item in value:
        fate = draw(st.integers(0, 6))
        if fate == 0:
            continue
        if fate == 1:
            items.append(draw(JSON))
        items.append(_mutate(draw, item) if fate < 4 else item)
    items += draw(st.lists(JSON, max_size=2))
    if draw(st.integers(0, 8)) == 0:
        items.reverse()
    return items


@st.composite
def related_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    old = draw(st.one_of(OBJECTS, ARRAYS))
    new = _mutate(draw, old)
    if type(new) is not type(old):
        new = old
    return old, new


PAIRS = st.one_of(UNRELATED_PAIRS, related_pairs())


def _with_markers(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """A request bucket: the shape of a payload part with markers and placeholders mixed in."""
    roll = draw(st.integers(0, 9))
    if roll == 0:
        return "DELETE"
    if roll == 1:
        return {}
    if isinstance(value, dict) and depth < 4:
        out = {
            k: _with_markers(draw, v, depth + 1) for k, v in value.items() if draw(st.booleans())
        }
        for key in draw(st.lists(KEYS, max_size=1)):
            out[key] = draw(JSON)
        return out
    if isinstance(value, list) and depth < 4:
        if draw(st.booleans()):
            return {
                str(i): _with_markers(draw, v, depth + 1)
                for i, v in enumerate(value)
                if draw(st.booleans())
            }
        return [_with_markers(draw, v, depth + 1) for v in value] + draw(st.lists(JSON, max_size=1))
    return draw(JSON)


@st.composite
def payload_and_request(draw: st.DrawFn) -> tuple[Any, dict[str, Any]]:
    payload = draw(st.one_of(OBJECTS, ARRAYS))
    request: dict[str, Any] = {}
    for bucket in ("newElements", "updateElements", "removeElements"):
        if draw(st.booleans()):
            request[bucket] = _with_markers(draw, payload)
    if draw(st.integers(0, 3)) == 0:
        request["replaceElements"] = (
            draw(st.dictionaries(KEYS, JSON, max_size=2))
            if isinstance(payload, dict)
            else draw(ARRAYS)
        )
    return payload, request


def _apply(payload: Any, request: AgentPayloadChangeRequest[Any] | dict[str, Any]) -> Any:
    result = apply_change_request(payload, request)
    assert result.report.conflicts == [], result.report.conflicts
    return result.payload


def _wire(request: AgentPayloadChangeRequest[Any]) -> str:
    return json.dumps(request.to_wire(), separators=(",", ":"))


# --- properties --------------------------------------------------------------------------------


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAIRS)
def test_diff_turns_old_into_new(pair: tuple[Any, Any]) -> None:
    """For any two JSON payloads of the same root kind, merging diff(old, new) into old gives
    new (JSON equality), with no conflict, under the default markers."""
    old, new = pair
    request = diff_payloads(old, new)
    assert json_equal(_apply(old, request), new), _wire(request)


@settings(max_examples=_EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAIRS)
def test_diff_with_a_single_custom_marker(pair: tuple[Any, Any]) -> None:
    """A request written for the marker "__DELETE__" alone, merged with only that marker
    active, also turns old into new (so "DELETE" in the data is plain data there)."""
    old, new = pair
    request = diff_payloads(old, new, marker="__DELETE__", markers={"__DELETE__"})
    result = apply_change_request(old, request, markers=frozenset({"__DELETE__"}))
    assert result.report.conflicts == []
    assert json_equal(result.payload, new), _wire(request)


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAIRS)
def test_undo_restores_the_original(pair: tuple[Any, Any]) -> None:
    """Applying the undo request of a merge to its result gives back the original payload."""
    before, after = pair
    merged = apply_change_request(before, diff_payloads(before, after))
    undo = undo_change_request(before, merged)
    assert json_equal(_apply(merged.payload, undo), before), _wire(undo)


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload_and_request())
def test_undo_after_any_request(case: tuple[Any, dict[str, Any]]) -> None:
    """Undo works for any merge, conflicts and warnings included: it restores the payload the
    merge started from."""
    payload, request = case
    merged = apply_change_request(payload, request)
    undo = undo_change_request(payload, merged)
    assert json_equal(_apply(merged.payload, undo), payload), _wire(undo)


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload_and_request())
def test_json_patch_reproduces_any_merge(case: tuple[Any, dict[str, Any]]) -> None:
    """The RFC 6902 export of any merge's effective changes, applied by the jsonpatch library
    to the original payload, gives exactly the merged payload (with and without test ops)."""
    payload, request = case
    merged = apply_change_request(payload, request)
    for test in (False, True):
        patch = to_json_patch(payload, merged, test=test)
        assert json_equal(jsonpatch.apply_patch(payload, patch), merged.payload), (
            json.dumps(request),
            patch,
        )


@settings(max_examples=_EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAIRS)
def test_json_patch_of_a_diff(pair: tuple[Any, Any]) -> None:
    """The JSON Patch of a merge of diff(old, new) turns old into new."""
    old, new = pair
    merged = apply_change_request(old, diff_payloads(old, new))
    assert json_equal(jsonpatch.apply_patch(old, to_json_patch(old, merged.report)), new)


# --- what the diff writes ----------------------------------------------------------------------


def test_identical_payloads_give_an_empty_request() -> None:
    """No difference, no request: every bucket is empty."""
    payload = {"a": [1, {"b": None}], "c": "DELETE"}
    assert diff_payloads(payload, json.loads(json.dumps(payload))).is_empty()


def test_one_field_is_one_surgical_update() -> None:
    """A single changed leaf is written as a nested update, nothing else."""
    old = {"customer": {"name": "Ada", "email": "a@x"}, "items": [{"q": 1}, {"q": 2}]}
    new = {"customer": {"name": "Ada", "email": "b@x"}, "items": [{"q": 1}, {"q": 2}]}
    assert diff_payloads(old, new).to_wire() == {"updateElements": {"customer": {"email": "b@x"}}}


def test_short_array_uses_placeholders_long_array_an_index_map() -> None:
    """Near the start of an array positional placeholders are cheapest; deep into a long array
    an index map is (no 150 placeholders)."""
    short_old = {"items": [{"q": i} for i in range(3)]}
    short_new = {"items": [{"q": 0}, {"q": 9}, {"q": 2}]}
    assert diff_payloads(short_old, short_new).to_wire() == {
        "updateElements": {"items": [{}, {"q": 9}]}
    }
    long_old = {"items": [{"q": i} for i in range(180)]}
    long_new = json.loads(json.dumps(long_old))
    long_new["items"][150]["q"] = -1
    assert diff_payloads(long_old, long_new).to_wire() == {
        "updateElements": {"items": {"150": {"q": -1}}}
    }


def test_removing_a_middle_element_deletes_it_by_its_original_position() -> None:
    """A removed element is one marker at its original position, not a shift of the rest."""
    old = {"items": [{"id": i} for i in range(50)]}
    new = {"items": [item for item in old["items"] if item["id"] != 30]}
    request = diff_payloads(old, new).to_wire()
    assert request == {"updateElements": {"items": {"30": "DELETE"}}}
    assert _apply(old, request) == new


def test_appended_items_go_to_new_elements() -> None:
    """Items added at the end of a long array are appended through newElements."""
    old = {"items": [{"id": i} for i in range(20)]}
    new = {"items": [*old["items"], {"id": 20}]}
    assert diff_payloads(old, new).to_wire() == {"newElements": {"items": [{"id": 20}]}}


def test_marker_string_as_data_is_written_literally() -> None:
    """A value that becomes the marker string is written where the merge takes it literally:
    newElements on the existing key (never as an update, which would delete it)."""
    old = {"endpoint": {"method": "GET", "path": "/x"}}
    new = {"endpoint": {"method": "DELETE", "path": "/x"}}
    request = diff_payloads(old, new)
    assert request.to_wire() == {"newElements": {"endpoint": {"method": "DELETE"}}}
    assert _apply(old, request) == new


def test_marker_string_inside_an_array_element() -> None:
    """Inside array elements newElements does not reach: the array is written whole at its
    key, where the merge takes it literally; the result still holds the marker as data."""
    old = {"routes": [{"method": "GET"}, {"method": "POST"}]}
    new = {"routes": [{"method": "GET"}, {"method": "DELETE"}]}
    request = diff_payloads(old, new)
    assert _apply(old, request) == new
    cheaper = diff_payloads(old, new, marker="__DELETE__", markers={"__DELETE__"})
    assert cheaper.to_wire() == {"updateElements": {"routes": [{}, {"method": "DELETE"}]}}
    result = apply_change_request(old, cheaper, markers=frozenset({"__DELETE__"}))
    assert result.payload == new


def test_empty_object_as_data() -> None:
    """``{}`` changes nothing as an update, so a value that must become ``{}`` is removed and
    given again (or emptied key by key), and the merge gives ``{}``."""
    old = {"a": 1, "b": [1, 2], "c": {"k": 1}, "d": [5]}
    new = {"a": {}, "b": {}, "c": {}, "d": [{}]}
    assert _apply(old, diff_payloads(old, new)) == new


def test_kind_change_below_the_root() -> None:
    """An object becoming an array (or back) is set whole; never a shape_mismatch."""
    old = {"a": {"x": 1}, "b": [1], "deep": {"list": [{"o": {"k": 1}}]}}
    new = {"a": [1], "b": {"x": 1}, "deep": {"list": [{"o": ["k"]}]}}
    assert _apply(old, diff_payloads(old, new)) == new


def test_array_root_replaced_whole_when_cheaper() -> None:
    """For an array root that changes completely, replaceElements (a list) is the request."""
    old = [{"a": i} for i in range(5)]
    new = ["x", "y"]
    assert diff_payloads(old, new).to_wire() == {"replaceElements": ["x", "y"]}


def test_array_root_emptied_by_markers() -> None:
    """An empty replaceElements list is absent, so emptying an array root deletes elements."""
    old = [1, 2, 3]
    assert _apply(old, diff_payloads(old, [])) == []


def test_none_counts_as_an_empty_object() -> None:
    """``None`` as the old payload stands for ``{}``, as in the merge."""
    assert diff_payloads(None, {"a": 1}).to_wire() in (
        {"newElements": {"a": 1}},
        {"updateElements": {"a": 1}},
    )


def test_pydantic_payloads_are_diffed_as_their_json() -> None:
    """Pydantic models are dumped in JSON mode; the request turns one into the other."""

    class Item(BaseModel):
        name: str
        qty: int

    class Order(BaseModel):
        items: list[Item]

    old = Order(items=[Item(name="a", qty=1)])
    new = Order(items=[Item(name="a", qty=2), Item(name="b", qty=1)])
    merged = apply_change_request(old, diff_payloads(old, new))
    assert merged.payload == new


def test_reasoning_is_copied() -> None:
    """``reasoning`` given to diff_payloads ends up in the request."""
    assert diff_payloads({}, {"a": 1}, reasoning="because").reasoning == "because"


def test_request_shares_nothing_with_the_payloads() -> None:
    """The request is a fresh copy: changing it afterwards changes neither payload."""
    new = {"a": {"b": [1, 2]}}
    request = diff_payloads({}, new)
    bucket = request.new_elements if request.new_elements else request.update_elements
    assert isinstance(bucket, dict)
    bucket["a"]["b"].append(3)  # type: ignore[index, union-attr]
    assert new == {"a": {"b": [1, 2]}}


# --- refusals ----------------------------------------------------------------------------------


def test_root_kind_change_is_refused_with_a_clear_error() -> None:
    """An object payload cannot become an array through a change request."""
    with pytest.raises(InvalidPayloadError, match="cannot change the kind of the root"):
        diff_payloads({"a": 1}, [1])


def test_non_json_data_is_refused_naming_the_path() -> None:
    """A set in the payload is not JSON: the error names where it is."""
    with pytest.raises(InvalidPayloadError, match=r"items\[1\]"):
        diff_payloads({}, {"items": [1, {1, 2}]})


def test_marker_must_be_one_of_the_merge_markers() -> None:
    """A marker the merge will not read as a marker is a configuration error."""
    with pytest.raises(ConfigurationError, match="not among the merge's markers"):
        diff_payloads({}, {}, marker="X", markers=DEFAULT_MARKERS)


def test_too_deep_payload_is_refused() -> None:
    """A payload deeper than MAX_DIFF_DEPTH is refused with LimitExceededError, not a
    RecursionError."""
    deep: Any = 1
    for _ in range(MAX_DIFF_DEPTH + 5):
        deep = {"a": deep}
    with pytest.raises(LimitExceededError) as info:
        diff_payloads({}, deep)
    assert info.value.limit == "max_depth"


# --- JSON Patch and pointers -------------------------------------------------------------------


def test_json_pointer_escapes_tilde_and_slash() -> None:
    """``~`` becomes ``~0`` and ``/`` becomes ``~1`` (RFC 6901); indices are decimal."""
    assert json_pointer(("a/b", "m~n", 3, "")) == "/a~1b/m~0n/3/"
    assert json_pointer(()) == ""


def test_json_patch_orders_removes_before_writes() -> None:
    """Removes come first, highest original index first; then replaces and adds in
    ascending order, so positions stay right."""
    changes = [
        Change("delete", ("items", 1), old="b"),
        Change("delete", ("items", 3), old="d"),
        Change("update", ("items", 1), old="c", new="C"),
        Change("add", ("items", 3), new="e"),
        Change("add", ("items", 2), new="x"),
    ]
    before = {"items": ["a", "b", "c", "d"]}
    patch = to_json_patch(before, changes)
    assert [op["op"] for op in patch] == ["remove", "remove", "replace", "add", "add"]
    assert [op["path"] for op in patch] == [
        "/items/3",
        "/items/1",
        "/items/1",
        "/items/2",
        "/items/3",
    ]
    assert jsonpatch.apply_patch(before, patch) == {"items": ["a", "C", "x", "e"]}


def test_json_patch_test_ops_refuse_a_different_payload() -> None:
    """With ``test=True`` the patch fails on a payload that is not the original."""
    before = {"a": 1, "b": 2}
    merged = apply_change_request(before, {"updateElements": {"a": 5, "b": "DELETE"}})
    patch = to_json_patch(before, merged, test=True)
    assert jsonpatch.apply_patch(before, patch) == {"a": 5}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch({"a": 1, "b": 3}, patch)
