"""diff_payloads, to_json_patch and undo_change_request: examples and hypothesis properties.

The properties run with the Hypothesis profile's ``max_examples`` (``conftest.py``), the slowest
with half of it; ``pytest --hypothesis-profile=thorough tests/test_diff.py`` runs 1,000 each.
"""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
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


def _apply(payload: Any, request: AgentPayloadChangeRequest | dict[str, Any]) -> Any:
    result = apply_change_request(payload, request)
    assert result.report.conflicts == [], result.report.conflicts
    return result.payload


def _wire(request: AgentPayloadChangeRequest) -> str:
    return json.dumps(request.to_wire(), separators=(",", ":"))


# --- properties --------------------------------------------------------------------------------


@given(PAIRS)
def test_diff_turns_old_into_new(pair: tuple[Any, Any]) -> None:
    """For any two JSON payloads of the same root kind, merging diff(old, new) into old gives
    new (JSON equality), with no conflict, under the default markers."""
    old, new = pair
    request = diff_payloads(old, new)
    assert json_equal(_apply(old, request), new), _wire(request)


@settings(max_examples=settings.default.max_examples // 2)
@given(PAIRS)
def test_diff_with_a_single_custom_marker(pair: tuple[Any, Any]) -> None:
    """A request written for the marker "__DELETE__" alone, merged with only that marker
    active, also turns old into new (so "DELETE" in the data is plain data there)."""
    old, new = pair
    request = diff_payloads(old, new, marker="__DELETE__", markers={"__DELETE__"})
    result = apply_change_request(old, request, markers=frozenset({"__DELETE__"}))
    assert result.report.conflicts == []
    assert json_equal(result.payload, new), _wire(request)


@given(PAIRS)
def test_undo_restores_the_original(pair: tuple[Any, Any]) -> None:
    """Applying the undo request of a merge to its result gives back the original payload."""
    before, after = pair
    merged = apply_change_request(before, diff_payloads(before, after))
    undo = undo_change_request(before, merged)
    assert json_equal(_apply(merged.payload, undo), before), _wire(undo)


@given(payload_and_request())
def test_undo_after_any_request(case: tuple[Any, dict[str, Any]]) -> None:
    """Undo works for any merge, conflicts and warnings included: it restores the payload the
    merge started from."""
    payload, request = case
    merged = apply_change_request(payload, request)
    undo = undo_change_request(payload, merged)
    assert json_equal(_apply(merged.payload, undo), payload), _wire(undo)


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


@settings(max_examples=settings.default.max_examples // 2)
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


# --- insertions, moves and reorders (MERGE.md section 8) ---------------------------------------


def _rearrange(draw: st.DrawFn, items: list[Any]) -> list[Any]:
    """``items`` with random insertions, moves, deletions and edits, a few of each."""
    out = list(items)
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.integers(0, 4))
        if op == 0 or not out:
            out.insert(draw(st.integers(0, len(out))), draw(JSON))
        elif op == 1:
            moved = out.pop(draw(st.integers(0, len(out) - 1)))
            out.insert(draw(st.integers(0, len(out))), moved)
        elif op == 2:
            out.pop(draw(st.integers(0, len(out) - 1)))
        elif op == 3:
            at = draw(st.integers(0, len(out) - 1))
            out[at] = _mutate(draw, out[at])
        else:
            out.insert(draw(st.integers(0, len(out))), draw(st.sampled_from(["DELETE", {}, []])))
    return out


@st.composite
def rearranged_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    """Arrays at the root, under keys and inside array elements, rearranged."""
    items = draw(st.lists(JSON, max_size=7))
    if draw(st.booleans()):  # (before drawing the nested arrays, which it would not use)
        return _unshared(items), _unshared(_rearrange(draw, items))
    inner = draw(st.lists(JSON, max_size=4))
    count = draw(st.integers(0, 4))
    rows: list[Any] = [{"id": i, "tags": draw(st.lists(JSON, max_size=3))} for i in range(count)]
    old = {"items": items, "grid": [inner, list(inner)], "rows": rows}
    new_rows = [{**row, "tags": _rearrange(draw, row["tags"])} for row in rows]
    new = {
        "items": _rearrange(draw, items),
        "grid": _rearrange(draw, [_rearrange(draw, inner), list(inner)]),
        "rows": _rearrange(draw, new_rows),
    }
    return _unshared(old), _unshared(new)


def _unshared(value: Any) -> Any:
    """A copy sharing no container (``jsonpatch`` deep-copies, keeping aliases: an edit of a
    list reachable twice would show twice)."""
    return json.loads(json.dumps(value))


@given(rearranged_pairs())
def test_diff_of_insertions_and_moves_turns_old_into_new(pair: tuple[Any, Any]) -> None:
    """Random insertions, moves, deletions and edits at several depths: merging the diff gives
    the new payload with no conflict, with the default markers and with one custom marker."""
    old, new = pair
    assert json_equal(_apply(old, diff_payloads(old, new)), new)
    custom = diff_payloads(old, new, marker="__DELETE__", markers={"__DELETE__"})
    result = apply_change_request(old, custom, markers=frozenset({"__DELETE__"}))
    assert result.report.conflicts == []
    assert json_equal(result.payload, new), _wire(custom)


@given(rearranged_pairs())
def test_json_patch_of_insertions_reproduces_the_merge(pair: tuple[Any, Any]) -> None:
    """The RFC 6902 export of a merge with insertions (each inserted item an ``add`` at its
    result position) gives the new payload through the jsonpatch library, with and without
    test operations."""
    old, new = pair
    merged = apply_change_request(old, diff_payloads(old, new))
    for test in (False, True):
        patch = to_json_patch(old, merged, test=test)
        assert json_equal(jsonpatch.apply_patch(old, patch), new), patch


@given(rearranged_pairs())
def test_undo_of_insertions_restores_the_original(pair: tuple[Any, Any]) -> None:
    """Undo after a merge with insertions and moves restores the original payload."""
    old, new = pair
    merged = apply_change_request(old, diff_payloads(old, new))
    undo = undo_change_request(old, merged)
    assert json_equal(_apply(merged.payload, undo), old), _wire(undo)


def test_insert_in_the_middle_is_one_index_map_entry() -> None:
    """An item inserted in the middle of a long array is one newElements index-map entry
    before the original element that follows it; nothing after it is rewritten."""
    old = {"items": [{"id": i} for i in range(50)]}
    new = {"items": [*old["items"][:25], {"id": 99}, *old["items"][25:]]}
    request = diff_payloads(old, new)
    assert request.to_wire() == {"newElements": {"items": {"25": [{"id": 99}]}}}
    merged = apply_change_request(old, request)
    assert merged.payload == new
    assert to_json_patch(old, merged) == [{"op": "add", "path": "/items/25", "value": {"id": 99}}]


def test_a_move_is_a_deletion_and_an_insertion() -> None:
    """A moved element is deleted at its original position and inserted whole where it goes."""
    old = {"items": [{"id": i} for i in range(50)]}
    new = {"items": [old["items"][49], *old["items"][:49]]}
    request = diff_payloads(old, new)
    assert request.to_wire() == {
        "newElements": {"items": {"0": [{"id": 49}]}},
        "updateElements": {"items": {"49": "DELETE"}},
    }
    assert _apply(old, request) == new


def test_a_reorder_of_a_few_elements_moves_them_one_by_one() -> None:
    """Three elements moved in an array of 100: three deletions and three insertions, far
    smaller than the array."""
    old = {"items": [{"id": i, "name": f"item {i}"} for i in range(100)]}
    items = list(old["items"])
    for src, dst in ((10, 80), (50, 3), (90, 40)):
        items.insert(dst, items.pop(src))
    new = {"items": items}
    request = diff_payloads(old, new)
    assert _apply(old, request) == new
    assert len(_wire(request)) < len(json.dumps(new, separators=(",", ":"))) // 10


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (["a", "x", "b", "c"], {"newElements": {"xs": {"1": ["x"]}}}),
        (["x", "a", "b", "c", "z"], {"newElements": {"xs": {"0": ["x"], "3": ["z"]}}}),
    ],
)
def test_the_examples_of_section_8(new: list[str], expected: dict[str, Any]) -> None:
    """The insertion examples of MERGE.md section 8, found by the diff. (Its move example,
    three one-letter strings, is cheaper rewritten position by position: see the test of a
    move on a longer array.)"""
    old = {"xs": ["a", "b", "c"]}
    request = diff_payloads(old, {"xs": new})
    assert request.to_wire() == expected
    assert _apply(old, request) == {"xs": new}


def test_inserted_content_is_literal() -> None:
    """``{}``, ``[]`` and marker strings are inserted as data (inserted content is literal)."""
    old = {"xs": ["a", "b", "c", "d"]}
    new = {"xs": ["a", {}, "DELETE", [], "b", "c", "d", {}]}
    request = diff_payloads(old, new)
    assert _apply(old, request) == new


def test_insert_inside_nested_arrays_of_array_elements() -> None:
    """newElements reaches inside array elements through index maps: an item inserted into
    an element's nested array is an index map inside an index map (MERGE.md section 8)."""
    old = {"rows": [{"id": 1, "tags": ["a", "b", "c"]}, {"id": 2, "tags": []}]}
    new = {"rows": [{"id": 1, "tags": ["a", "first", "b", "c"]}, {"id": 2, "tags": []}]}
    request = diff_payloads(old, new)
    assert request.to_wire() == {"newElements": {"rows": {"0": {"tags": {"1": ["first"]}}}}}
    assert _apply(old, request) == new


def test_insert_before_an_element_that_newelements_also_changes() -> None:
    """One key cannot both insert before element k and descend into it: the element's own
    change is written another way (here: deleted and inserted again with its marker-string
    data), and the result is still exact."""
    old = {"routes": [{"m": "GET"}, {"m": "POST", "p": "/a"}]}
    new = {"routes": [{"m": "GET"}, {"m": "PUT"}, {"m": "DELETE", "p": "/a"}]}
    assert _apply(old, diff_payloads(old, new)) == new


def test_dropping_every_third_of_8000_ints_deletes_by_original_position() -> None:
    """The case that was quadratic in version 0.1 (9.6 s): every removed value is one marker
    at its original position, and the merge gives the new list."""
    old = {"values": list(range(8_000))}
    new = {"values": [v for v in old["values"] if v % 3]}
    request = diff_payloads(old, new)
    assert request.new_elements is None
    assert _apply(old, request) == new


def test_long_array_with_ten_percent_edits() -> None:
    """20,000 records with changed fields, deletions and insertions at random places."""
    import random

    rng = random.Random(7)
    items = [{"id": i, "qty": rng.randint(1, 9)} for i in range(20_000)]
    edited = [dict(item) for item in items]
    for k in rng.sample(range(20_000), 1_600):
        edited[k]["qty"] += 10
    dropped = set(rng.sample(range(20_000), 200))
    edited = [item for i, item in enumerate(edited) if i not in dropped]
    for k in sorted(rng.sample(range(len(edited)), 200), reverse=True):
        edited.insert(k, {"id": -k, "qty": 0})
    old, new = {"items": items}, {"items": edited}
    request = diff_payloads(old, new)
    assert _apply(old, request) == new
    wire = request.to_wire()
    inserted = wire["newElements"]["items"]
    # Nothing but the edits is written: at most 200 inserted items (an inserted record that
    # lands where a deleted one stood may be written as an update of it instead), and at most
    # one update entry per changed, deleted or replaced record.
    assert sum(len(run) for run in inserted.values()) <= 200
    assert len(wire["updateElements"]["items"]) <= 1_600 + 200 + 200


# --- depth -------------------------------------------------------------------------------------


def _chain(depth: int, leaf: Any, kind: str = "dict") -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value} if kind == "dict" else [value]
    return value


def test_deep_payload_with_a_shallow_change() -> None:
    """Payloads as deep as the merge accepts (10,000 levels) are diffed: only what changes
    must fit in a change request."""
    old = {"deep": _chain(10_000, 1), "x": 1, "list": [_chain(3_000, 1, "list"), 1]}
    new = {"deep": _chain(10_000, 1), "x": 2, "list": [0, _chain(3_000, 1, "list"), 1]}
    request = diff_payloads(old, new)
    assert request.to_wire() == {
        "newElements": {"list": {"0": [0]}},
        "updateElements": {"x": 2},
    }
    assert json_equal(_apply(old, request), new)


def test_a_change_too_deep_for_a_change_request_is_refused_naming_where() -> None:
    """A change 10,000 levels down cannot be written in an AgentPayloadChangeRequest (about
    250 levels): LimitExceededError naming the limit and the path, never a RecursionError."""
    with pytest.raises(LimitExceededError) as info:
        diff_payloads(_chain(10_000, 1), _chain(10_000, 2))
    assert info.value.limit == "max_depth"
    assert info.value.maximum == MAX_DIFF_DEPTH
    assert info.value.value == 10_000
    assert info.value.path.startswith("a.a.a")
    nested = _chain(MAX_DIFF_DEPTH - 10, 1)
    request = diff_payloads(nested, _chain(MAX_DIFF_DEPTH - 10, 2))
    assert json_equal(_apply(nested, request), _chain(MAX_DIFF_DEPTH - 10, 2))
