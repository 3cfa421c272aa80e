"""Unit tests of the merge engine beyond the vectors: payload kinds, options, errors, limits."""

from __future__ import annotations

import datetime
import enum
import json
import math
from collections import OrderedDict
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import (
    ConfigurationError,
    InvalidChangeRequestError,
    InvalidPayloadError,
    LimitExceededError,
    MergeConflictError,
    PayloadValidationError,
)
from agent_payload.merge import (
    DEFAULT_LIMITS,
    Limits,
    apply_change_request,
    choose_marker,
    dump_payload,
    format_payload_path,
    format_request_path,
    payload_holds_string,
)
from agent_payload.report import Change, Finding

# --- pydantic payloads ---------------------------------------------------------------------------


class Line(BaseModel):
    sku: str
    qty: int = Field(ge=0)


class Invoice(BaseModel):
    number: str
    lines: list[Line]
    note: str | None = None


class Aliased(BaseModel):
    model_config = ConfigDict(populate_by_name=False)
    first_name: str = Field(alias="firstName")


def test_pydantic_payload_comes_back_as_the_same_class() -> None:
    """A model instance is merged in JSON form and validated back into a new instance."""
    inv = Invoice(number="A1", lines=[Line(sku="x", qty=1), Line(sku="y", qty=2)])
    result = apply_change_request(inv, {"updateElements": {"lines": [{}, {"qty": 5}]}})
    assert type(result.payload) is Invoice
    assert result.payload.lines[1].qty == 5
    assert result.payload is not inv
    assert inv.lines[1].qty == 2
    assert [c.path for c in result.report.changes] == [("lines", 1, "qty")]


def test_pydantic_validation_error_lists_payload_paths() -> None:
    """A merged payload that breaks the model raises PayloadValidationError with (path, msg)."""
    inv = Invoice(number="A1", lines=[Line(sku="x", qty=1)])
    with pytest.raises(PayloadValidationError) as info:
        apply_change_request(inv, {"updateElements": {"lines": [{"qty": -3}]}})
    paths = [path for path, _ in info.value.errors]
    assert paths == [("lines", 0, "qty")]
    assert "lines[0].qty" in str(info.value)
    assert info.value.payload == {"number": "A1", "lines": [{"sku": "x", "qty": -3}], "note": None}


def test_pydantic_model_with_aliases_round_trips() -> None:
    """A model whose fields have aliases is dumped by alias, so it validates back."""
    result = apply_change_request(Aliased(firstName="Ann"), {"updateElements": {"firstName": "Bo"}})
    assert result.payload == Aliased(firstName="Bo")
    assert dump_payload(Aliased(firstName="Ann")) == {"firstName": "Ann"}


# --- the change request ------------------------------------------------------------------------


def test_change_request_model_is_accepted() -> None:
    """An AgentPayloadChangeRequest applies like its wire form, reasoning included."""
    cr = AgentPayloadChangeRequest(
        update_elements={"a": 2}, remove_elements={"b": "DELETE"}, reasoning="why"
    )
    result = apply_change_request({"a": 1, "b": 1}, cr)
    assert result.payload == {"a": 2}
    assert result.report.reasoning == "why"


def test_change_request_must_be_an_object() -> None:
    """A change request that is not a mapping is a usage error naming what was found."""
    with pytest.raises(InvalidChangeRequestError, match="found the string"):
        apply_change_request({}, "updateElements")  # type: ignore[arg-type]
    with pytest.raises(InvalidChangeRequestError, match="array"):
        apply_change_request({}, [1])  # type: ignore[arg-type]


def test_non_json_data_in_the_request_is_named_by_its_path() -> None:
    """A tuple deep inside a bucket is refused with the change-request path where it is."""
    with pytest.raises(InvalidChangeRequestError) as info:
        apply_change_request({"a": {}}, {"updateElements": {"a": {"b.c": [1, (2, 3)]}}})
    assert info.value.path == 'updateElements.a["b.c"][1]'
    assert "tuple" in str(info.value)


def test_non_string_key_in_the_request_is_refused() -> None:
    """A non-string key inside a bucket is refused with its path."""
    with pytest.raises(InvalidChangeRequestError) as info:
        apply_change_request({}, {"newElements": {"a": {1: "x"}}})
    assert info.value.path == "newElements.a[1]"


def test_non_string_reasoning_is_reported_as_json_text() -> None:
    """A reasoning that is not a string is kept, as JSON text, never merged."""
    result = apply_change_request({}, {"reasoning": {"why": 1}})
    assert result.report.reasoning == '{"why": 1}'
    assert result.payload == {}


def test_unknown_field_suggests_the_nearest_name() -> None:
    """A misspelt bucket is a conflict whose message proposes the right spelling."""
    result = apply_change_request({"a": 1}, {"updateElemnts": {"a": 2}})
    [conflict] = result.report.conflicts
    assert conflict.code == "unknown_field"
    assert "Did you mean updateElements?" in conflict.message


def test_nested_wrappers_are_unwrapped() -> None:
    """A wrapper inside a wrapper is unwrapped too (the model nested them)."""
    result = apply_change_request(
        {"a": 1}, {"payloadChangeRequest": {"changeRequest": {"updateElements": {"a": 2}}}}
    )
    assert result.payload == {"a": 2}
    assert not result.report.conflicts


# --- payloads that are not JSON data -----------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "path", "found"),
    [
        ({"a": (1, 2)}, ("a",), "tuple"),
        ({"a": [1, {2, 3}]}, ("a", 1), "set"),
        ({"a": {"when": datetime.date(2024, 1, 1)}}, ("a", "when"), "datetime.date"),
        ({"a": {1: "x"}}, ("a", 1), "key 1"),
        ({"a": [math.nan]}, ("a", 0), "nan"),
        ({"a": [math.inf]}, ("a", 0), "inf"),
    ],
)
def test_non_json_payload_data_is_named_by_its_path(payload: Any, path: Any, found: str) -> None:
    """Each kind of non-JSON value is refused with its payload path and what it is."""
    with pytest.raises(InvalidPayloadError) as info:
        apply_change_request(payload, {})
    assert info.value.payload_path == path
    assert found in str(info.value)


def test_cycle_in_payload_is_reported() -> None:
    """A container that contains itself is an InvalidPayloadError naming where, not a hang."""
    payload: dict[str, Any] = {"a": {"b": []}}
    payload["a"]["b"].append(payload["a"])
    with pytest.raises(InvalidPayloadError, match="cycle") as info:
        apply_change_request(payload, {})
    assert info.value.payload_path == ("a", "b", 0)


@pytest.mark.parametrize("payload", ["", 0, False, 5, 1.5, "abc", (1,), b"{}"])
def test_root_that_is_not_an_object_or_array_names_its_type(payload: Any) -> None:
    """A primitive (or other) root is refused with the type received."""
    with pytest.raises(InvalidPayloadError, match=type(payload).__name__):
        apply_change_request(payload, {"newElements": {"a": 1}})


def test_subclasses_of_json_types_are_accepted_as_plain_data() -> None:
    """OrderedDict, str and int enums are JSON data: merged and returned as plain values."""

    class Color(enum.StrEnum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    payload = OrderedDict(c=Color.RED, l=Level.HIGH, o=OrderedDict(x=1))
    result = apply_change_request(payload, {"updateElements": {"o": {"x": 2}}})
    assert result.payload == {"c": "red", "l": 3, "o": {"x": 2}}
    assert type(result.payload["c"]) is str
    assert type(result.payload["l"]) is int
    assert type(result.payload["o"]) is dict


# --- independence and share mode ---------------------------------------------------------------


def test_change_values_are_copies() -> None:
    """Mutating a Change's values changes neither the result nor the inputs."""
    payload = {"a": {"x": [1]}, "b": [1, 2]}
    request = {"updateElements": {"a": 5}, "newElements": {"c": {"y": [2]}}}
    result = apply_change_request(payload, request)
    by_path = {c.path: c for c in result.report.changes}
    by_path[("c",)].new["y"].append(3)
    by_path[("a",)].old["x"].append(9)
    assert result.payload == {"a": 5, "b": [1, 2], "c": {"y": [2]}}
    assert payload == {"a": {"x": [1]}, "b": [1, 2]}
    assert request == {"updateElements": {"a": 5}, "newElements": {"c": {"y": [2]}}}


def test_share_mode_shares_unchanged_subtrees_and_copies_the_path() -> None:
    """share=True reuses untouched subtrees and gives new containers along the edited path."""
    payload = {"big": {"rows": [[1] * 3] * 3}, "edit": {"inner": {"v": 1}, "keep": [1]}}
    result = apply_change_request(
        payload, {"updateElements": {"edit": {"inner": {"v": 2}}}}, share=True
    )
    assert result.payload["big"] is payload["big"]
    assert result.payload["edit"]["keep"] is payload["edit"]["keep"]
    assert result.payload is not payload
    assert result.payload["edit"] is not payload["edit"]
    assert result.payload["edit"]["inner"] is not payload["edit"]["inner"]
    assert payload["edit"]["inner"] == {"v": 1}
    assert result.payload["edit"]["inner"] == {"v": 2}


def test_share_mode_copies_old_values_in_changes() -> None:
    """In share mode a deleted subtree in the report is a copy, not the input's object."""
    payload = {"gone": {"deep": [1, 2]}}
    result = apply_change_request(payload, {"removeElements": {"gone": "DELETE"}}, share=True)
    [change] = result.report.changes
    assert change.old == {"deep": [1, 2]}
    assert change.old is not payload["gone"]
    assert change.old["deep"] is not payload["gone"]["deep"]


def test_share_mode_checks_what_it_touches() -> None:
    """share=True still refuses non-JSON data on the paths it walks or replaces."""
    with pytest.raises(InvalidPayloadError) as info:
        apply_change_request({"a": (1, 2)}, {"updateElements": {"a": [{}, 3]}}, share=True)
    assert info.value.payload_path == ("a",)
    with pytest.raises(InvalidPayloadError) as info:
        apply_change_request({"a": {"b": {1, 2}}}, {"removeElements": {"a": "DELETE"}}, share=True)
    assert info.value.payload_path == ("a", "b")


# --- strict mode -------------------------------------------------------------------------------


def test_strict_mode_raises_with_the_full_report_and_applies_nothing() -> None:
    """Any conflict in strict mode raises MergeConflictError carrying every conflict."""
    payload = {"a": [1], "b": 1}
    request = {"updateElements": {"a": {"x": 1}, "b": 2}, "bogus": 1}
    with pytest.raises(MergeConflictError) as info:
        apply_change_request(payload, request, strict=True)
    codes = sorted(c.code for c in info.value.report.conflicts)
    assert codes == ["shape_mismatch", "unknown_field"]
    assert "updateElements.a" in str(info.value)
    assert payload == {"a": [1], "b": 1}


def test_strict_mode_without_conflicts_applies() -> None:
    """strict=True merges normally when nothing conflicts (warnings do not count)."""
    result = apply_change_request({"a": 1}, {"updateElements": {"b": 2}}, strict=True)
    assert result.payload == {"a": 1, "b": 2}
    assert [w.code for w in result.report.warnings] == ["update_missing"]


# --- markers -----------------------------------------------------------------------------------


def test_markers_accept_any_iterable_and_a_single_string() -> None:
    """markers may be a list, a generator or one string; an empty one disables deletion."""
    assert (
        apply_change_request({"a": 1}, {"updateElements": {"a": "X"}}, markers=["X"]).payload == {}
    )
    assert apply_change_request({"a": 1}, {"updateElements": {"a": "X"}}, markers="X").payload == {}
    gen = (m for m in ["X"])
    assert apply_change_request({"a": 1}, {"updateElements": {"a": "X"}}, markers=gen).payload == {}
    assert apply_change_request({"a": 1}, {"updateElements": {"a": "X"}}, markers=()).payload == {
        "a": "X"
    }


@pytest.mark.parametrize("markers", [[""], [1], ["DELETE", None], 5])
def test_bad_markers_are_a_configuration_error(markers: Any) -> None:
    """Markers that are not non-empty strings are refused before anything happens."""
    with pytest.raises(ConfigurationError):
        apply_change_request({}, {}, markers=markers)


def test_choose_marker_avoids_strings_the_data_holds() -> None:
    """DELETE, then __DELETE__, then a fresh deterministic marker the data does not hold."""
    assert choose_marker({"DELETE": 1}) == "DELETE"
    assert choose_marker({"m": ["GET", "DELETE"]}) == "__DELETE__"
    both = {"a": "DELETE", "b": ["__DELETE__"]}
    fresh = choose_marker(both)
    assert fresh.startswith("__DELETE_") and fresh.endswith("__")
    assert fresh not in ("DELETE", "__DELETE__")
    assert choose_marker(both) == fresh
    assert choose_marker({**both, "c": fresh}) != fresh


def test_payload_holds_string_looks_at_values_only() -> None:
    """payload_holds_string finds a string value at any depth and ignores keys."""
    assert payload_holds_string({"a": [{"b": "x"}]}, "x")
    assert not payload_holds_string({"x": 1}, "x")
    assert payload_holds_string(Invoice(number="x", lines=[]), "x")


# --- guard -------------------------------------------------------------------------------------


def test_guard_conflict_refuses_the_change() -> None:
    """A conflict finding keeps the value, records a conflict at the request path, with severity."""
    seen: list[Change] = []

    def guard(change: Change) -> list[Finding]:
        seen.append(change)
        if change.path == ("locked",):
            return [Finding("permission_denied", "locked is read-only")]
        return []

    result = apply_change_request(
        {"locked": 1, "free": 1}, {"updateElements": {"locked": 2, "free": 2}}, guards=[guard]
    )
    assert result.payload == {"locked": 1, "free": 2}
    [conflict] = result.report.conflicts
    assert (conflict.code, conflict.path, conflict.payload_path) == (
        "permission_denied",
        "updateElements.locked",
        ("locked",),
    )
    assert conflict.severity == "conflict"
    assert conflict.message == "locked is read-only"
    assert [c.path for c in result.report.changes] == [("free",)]
    assert [c.path for c in seen] == [("locked",), ("free",)]


def test_guard_warning_and_confirm_are_recorded_and_applied() -> None:
    """Warning and confirm findings let the change through and keep their severity."""

    def guard(change: Change) -> list[Finding]:
        return [Finding("data_loss", "shrunk", "warning"), Finding("big", "sure?", "confirm")]

    result = apply_change_request({"a": [1, 2]}, {"updateElements": {"a": "x"}}, guards=[guard])
    assert result.payload == {"a": "x"}
    assert [(w.code, w.severity) for w in result.report.warnings] == [
        ("data_loss", "warning"),
        ("big", "confirm"),
    ]
    assert not result.report.conflicts


def test_guard_sees_deletions_appends_container_replacements_and_replace_elements() -> None:
    """Every kind of effective change goes through the guard, with its op and path."""
    seen: list[tuple[str, tuple[Any, ...]]] = []

    def guard(change: Change) -> list[Finding]:
        seen.append((change.op, change.path))
        return []

    apply_change_request(
        {"l": [1, 2, 3], "o": {"x": 1}, "r": 1, "gone": 1},
        {
            "updateElements": {"l": [{}, "DELETE", {}, 4], "o": 5},
            "newElements": {"l": [9]},
            "removeElements": {"gone": "DELETE"},
            "replaceElements": {"r": {"new": True}},
        },
        guards=[guard],
    )
    assert sorted(seen) == sorted(
        [
            ("update", ("r",)),
            ("delete", ("gone",)),
            ("delete", ("l", 1)),
            ("add", ("l", 2)),
            ("add", ("l", 3)),
            ("update", ("o",)),
        ]
    )


def test_guard_refusing_an_element_deletion_keeps_positions_right() -> None:
    """A refused deletion keeps the element; later result paths count it."""

    def guard(change: Change) -> list[Finding]:
        if change.op == "delete" and change.path == ("l", 0):
            return [Finding("permission_denied", "no")]
        return []

    result = apply_change_request(
        {"l": ["a", "b", "c"]}, {"updateElements": {"l": ["DELETE", "DELETE", "C"]}}, guards=[guard]
    )
    assert result.payload == {"l": ["a", "C"]}
    assert [(c.op, c.path) for c in result.report.changes] == [
        ("delete", ("l", 1)),
        ("update", ("l", 1)),
    ]
    assert result.report.conflicts[0].path == "updateElements.l[0]"


def test_guard_conflict_raises_in_strict_mode() -> None:
    """A guard's refusal is a conflict like any other: strict mode raises."""

    def guard(change: Change) -> list[Finding]:
        return [Finding("permission_denied", "no")]

    with pytest.raises(MergeConflictError):
        apply_change_request({"a": 1}, {"updateElements": {"a": 2}}, guards=[guard], strict=True)


def test_several_guards_are_each_asked_in_turn() -> None:
    """``guards=[a, b]``: both are asked about every change, in order; either one refuses."""
    asked: list[str] = []

    def first(change: Change) -> list[Finding]:
        asked.append(f"first {change.path}")
        return [Finding("permission_denied", "locked")] if change.path == ("locked",) else []

    def second(change: Change) -> list[Finding]:
        asked.append(f"second {change.path}")
        return [Finding("review", "looked at it", "warning")]

    result = apply_change_request(
        {"locked": 1, "free": 1},
        {"updateElements": {"locked": 2, "free": 2}},
        guards=[first, second],
    )
    assert result.payload == {"locked": 1, "free": 2}
    assert asked == [
        "first ('locked',)",
        "second ('locked',)",
        "first ('free',)",
        "second ('free',)",
    ]
    assert [i.code for i in result.report.conflicts] == ["permission_denied"]
    assert [i.code for i in result.report.warnings] == ["review", "review"]


def test_guards_must_be_a_sequence_of_guards() -> None:
    """A single guard passed as ``guards=`` (not in a list), or a non-callable in the list,
    is a configuration error naming the argument."""

    def guard(change: Change) -> list[Finding]:
        return []

    with pytest.raises(ConfigurationError, match="guards"):
        apply_change_request({"a": 1}, {}, guards=guard)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"guards\[1\]"):
        apply_change_request({"a": 1}, {}, guards=[guard, "nope"])  # type: ignore[list-item]


def test_guard_must_return_findings() -> None:
    """A guard returning something that is not a Finding is a configuration error."""
    with pytest.raises(ConfigurationError, match="Finding"):
        apply_change_request({"a": 1}, {"updateElements": {"a": 2}}, guards=[lambda c: ["bad"]])  # type: ignore[list-item, return-value]


# --- paths in the report -----------------------------------------------------------------------


def test_change_paths_use_original_for_deletes_and_result_for_updates() -> None:
    """A delete names the original index; an update or add the index in the result."""
    result = apply_change_request(
        {"a": [{"x": 1}, {"x": 2, "y": 3}]},
        {"updateElements": {"a": ["DELETE", {"x": 9, "y": "DELETE"}]}, "newElements": {"a": [7]}},
    )
    assert [(c.op, c.path) for c in result.report.changes] == [
        ("delete", ("a", 0)),
        ("update", ("a", 0, "x")),
        ("delete", ("a", 1, "y")),
        ("add", ("a", 1)),
    ]


def test_format_request_path() -> None:
    """Identifiers after a dot, other keys as JSON strings in brackets, indices as [i]."""
    assert (
        format_request_path(["updateElements", "items", 3, "name"])
        == "updateElements.items[3].name"
    )
    assert format_request_path(["updateElements", "a.b"]) == 'updateElements["a.b"]'
    assert format_request_path(["updateElements", "p", "ключ"]) == 'updateElements.p["ключ"]'
    assert format_request_path(["updateElements", "items", "150"]) == 'updateElements.items["150"]'
    assert format_request_path(["$meta"]) == '["$meta"]'
    assert format_request_path(["a", 'q"\n']) == 'a["q\\"\\n"]'


def test_format_payload_path() -> None:
    """Payload paths read items[3].price; the root is (root)."""
    assert format_payload_path(("items", 3, "price")) == "items[3].price"
    assert format_payload_path(()) == "(root)"
    assert format_payload_path(("a b", 0)) == '["a b"][0]'


# --- messages ----------------------------------------------------------------------------------


def test_placeholder_out_of_range_names_length_and_items_not_applied() -> None:
    """The message gives the real length and how many items were dropped."""
    result = apply_change_request({"a": [1, 2]}, {"updateElements": {"a": [{}, {}, {}, 4, 5]}})
    [conflict] = result.report.conflicts
    assert conflict.path == "updateElements.a[2]"
    assert "2 elements" in conflict.message
    assert "3 items" in conflict.message
    assert "newElements" in conflict.message


def test_index_out_of_range_names_length() -> None:
    """An index map key beyond the end says how long the array is and what to use instead."""
    result = apply_change_request({"a": [1, 2, 3]}, {"updateElements": {"a": {"7": 0}}})
    [conflict] = result.report.conflicts
    assert "3 elements" in conflict.message
    assert "indices 0 to 2" in conflict.message
    assert "newElements" in conflict.message


def test_shape_mismatch_message_says_what_to_do() -> None:
    """shape_mismatch names both kinds and the non-index key, and proposes a way out."""
    result = apply_change_request({"a": [1]}, {"updateElements": {"a": {"first": 2}}})
    [conflict] = result.report.conflicts
    assert "an array" in conflict.message and "an object" in conflict.message
    assert '"first"' in conflict.message
    assert "replaceElements" in conflict.message
    assert conflict.payload_path == ("a",)


def test_warnings_carry_payload_paths_and_messages() -> None:
    """Every warning names its payload path and says what was done."""
    result = apply_change_request({"a": 1}, {"updateElements": {"b": 1}, "newElements": {"a": 2}})
    by_code = {w.code: w for w in result.report.warnings}
    assert by_code["update_missing"].payload_path == ("b",)
    assert "treated as an addition" in by_code["update_missing"].message
    assert "treated as an update" in by_code["new_exists"].message


# --- limits, depth and size --------------------------------------------------------------------


def nested_dict(depth: int, leaf: Any) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        child: dict[str, Any] = {}
        node["n"] = child
        node = child
    node["leaf"] = leaf
    return root


def test_ten_thousand_levels_deep_payload_and_request() -> None:
    """A 10,000-deep payload edited by a 10,000-deep request at the bottom: no RecursionError."""
    payload = nested_dict(10_000, 1)
    payload["side"] = 0
    request = {"updateElements": nested_dict(10_000, 2)}
    for share in (False, True):
        result = apply_change_request(payload, request, share=share)
        [change] = result.report.changes
        assert len(change.path) == 10_000
        assert (change.old, change.new) == (1, 2)
        node = result.payload
        while "n" in node:
            node = node["n"]
        assert node == {"leaf": 2}
    node = payload
    while "n" in node:
        node = node["n"]
    assert node == {"leaf": 1}


def test_ten_thousand_levels_deep_arrays_and_removal() -> None:
    """Arrays nested 10,000 deep merge by position down to the bottom, and deep removal works."""
    payload: list[Any] = []
    node = payload
    for _ in range(9_999):
        child: list[Any] = []
        node.append(child)
        node = child
    node.extend([1, 2])
    request: list[Any] = []
    rnode = request
    for _ in range(9_999):
        rchild: list[Any] = []
        rnode.append(rchild)
        rnode = rchild
    rnode.append("DELETE")
    result = apply_change_request(payload, {"removeElements": request})
    [change] = result.report.changes
    assert change.op == "delete" and len(change.path) == 10_000
    assert change.old == 1


def test_deep_values_in_messages_and_changes_do_not_recurse() -> None:
    """Deleting, replacing and describing 10,000-deep subtrees is iterative too."""
    payload = {"d": nested_dict(10_000, 1), "e": nested_dict(10_000, 1)}
    result = apply_change_request(
        payload,
        {"removeElements": {"d": "DELETE"}, "updateElements": {"e": [1]}},
        share=True,
    )
    assert [c.op for c in result.report.changes] == ["delete"]
    assert result.report.conflicts[0].code == "shape_mismatch"


def test_a_million_elements() -> None:
    """A payload with 1,000,000 elements merges in both modes."""
    payload = {"items": list(range(1_000_000))}
    request = {"updateElements": {"items": {"999999": -1}}, "newElements": {"items": [0]}}
    for share in (False, True):
        result = apply_change_request(payload, request, share=share)
        assert result.payload["items"][999_999] == -1
        assert len(result.payload["items"]) == 1_000_001
    assert payload["items"][-1] == 999_999


def test_payload_deeper_than_max_depth() -> None:
    """A payload beyond max_depth raises LimitExceededError naming limit, value and place."""
    with pytest.raises(LimitExceededError) as info:
        apply_change_request(nested_dict(50, 1), {}, limits=Limits(max_depth=10))
    err = info.value
    assert (err.limit, err.value, err.maximum) == ("max_depth", 11, 10)
    assert err.path.startswith("n.n.n")


def test_payload_with_too_many_nodes() -> None:
    """A payload with more values than max_nodes raises LimitExceededError."""
    with pytest.raises(LimitExceededError) as info:
        apply_change_request({"a": list(range(100))}, {}, limits=Limits(max_nodes=50))
    assert (info.value.limit, info.value.maximum) == ("max_nodes", 50)
    assert "max_nodes=50" in str(info.value)


def test_request_limits() -> None:
    """Change requests beyond max_request_nodes or max_depth raise LimitExceededError."""
    with pytest.raises(LimitExceededError) as info:
        apply_change_request(
            {}, {"newElements": {"a": list(range(100))}}, limits=Limits(max_request_nodes=20)
        )
    assert info.value.limit == "max_request_nodes"
    with pytest.raises(LimitExceededError) as info:
        apply_change_request({}, {"newElements": nested_dict(30, 1)}, limits=Limits(max_depth=10))
    assert info.value.limit == "max_depth"
    assert info.value.path.startswith("newElements.n")


def test_default_limits_are_documented_values() -> None:
    """The defaults admit 10,000-deep and million-element inputs."""
    assert DEFAULT_LIMITS.max_depth >= 10_001
    assert DEFAULT_LIMITS.max_nodes >= 1_000_001
    assert DEFAULT_LIMITS.max_request_nodes >= 100_000


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_limits_must_be_positive_ints(bad: Any) -> None:
    """Limits refuses values that are not positive ints."""
    with pytest.raises(ConfigurationError, match="max_depth"):
        Limits(max_depth=bad)


def test_limits_argument_must_be_limits() -> None:
    """Passing something else than Limits as limits is a configuration error."""
    with pytest.raises(ConfigurationError):
        apply_change_request({}, {}, limits={"max_depth": 3})  # type: ignore[arg-type]


def test_report_is_json_friendly() -> None:
    """Report values are plain JSON data that json.dumps accepts."""
    result = apply_change_request(
        {"a": [1, {"b": 2}]}, {"updateElements": {"a": ["DELETE", {"b": 3}]}}
    )
    json.dumps([(c.op, c.path, c.old, c.new) for c in result.report.changes])


def test_hostile_deep_request_wrong_at_every_level_is_refused_by_a_limit() -> None:
    """A 10,000-deep request with a mistake at every level raises LimitExceededError, no hang."""
    payload = nested_dict(10_000, 1)
    request: dict[str, Any] = {}
    node = request
    for _ in range(10_000):
        child: dict[str, Any] = {}
        node["n"] = child
        node["zz"] = "DELETE"
        node = child
    with pytest.raises(LimitExceededError) as info:
        apply_change_request(payload, {"updateElements": request})
    assert info.value.limit == "max_report_path_parts"
    assert "more levels" in info.value.path


def test_many_shallow_warnings_stay_within_the_report_limit() -> None:
    """Thousands of ordinary warnings (a field added to every row) are all reported."""
    payload = {"rows": [{"id": i} for i in range(5_000)]}
    request = {"updateElements": {"rows": [{"flag": True}] * 5_000}}
    result = apply_change_request(payload, request)
    assert len(result.report.warnings) == 5_000
    assert all(row["flag"] is True for row in result.payload["rows"])


def test_deep_paths_are_shortened_in_messages_but_whole_in_issues() -> None:
    """A conflict 100 levels down has its whole path in .path and a shortened one in .message."""
    payload = nested_dict(100, [1])
    request = {"updateElements": nested_dict(100, {"x": 1})}
    [conflict] = apply_change_request(payload, request).report.conflicts
    assert conflict.path == "updateElements" + ".n" * 99 + ".leaf"
    assert conflict.payload_path == ("n",) * 99 + ("leaf",)
    assert "more levels" in conflict.message
    assert len(conflict.message) < 1_000


def test_marker_helpers_survive_cycles_and_shared_subtrees() -> None:
    """choose_marker and payload_holds_string visit each container once: no hang on a cycle."""
    payload: dict[str, Any] = {"a": ["DELETE"]}
    payload["a"].append(payload)
    assert payload_holds_string(payload, "DELETE")
    assert not payload_holds_string(payload, "x")
    assert choose_marker(payload) == "__DELETE__"
    shared: list[Any] = ["x"]
    for _ in range(200):
        shared = [shared, shared]
    assert not payload_holds_string({"s": shared}, "y")


def test_choose_marker_passes_over_a_marker_the_task_names() -> None:
    """A task asking for the value "DELETE" (an HTTP method) gets "__DELETE__" as the marker, so
    the model can write "DELETE" as data anywhere; a marker the task does not contain is kept."""
    from agent_payload.merge import choose_marker

    payload = {"endpoints": [{"path": "/s", "method": "POST"}]}
    assert choose_marker(payload) == "DELETE"
    assert choose_marker(payload, avoid=["make the method of /s DELETE"]) == "__DELETE__"
    assert choose_marker(payload, avoid=["delete the endpoint"]) == "DELETE"
    both = "use DELETE, not __DELETE__"
    fresh = choose_marker(payload, avoid=[both])
    assert fresh.startswith("__DELETE_") and fresh not in both


def test_pydantic_payload_never_loses_a_change_silently() -> None:
    """A key the model class ignores (a misspelt field, extra="ignore") would vanish in
    validation: PayloadValidationError names it instead of a report claiming it was applied.
    A coerced value is reported as it ends up, and a change coerced back to the old value is no
    change."""
    from pydantic import BaseModel

    from agent_payload.errors import PayloadValidationError

    class Invoice(BaseModel):
        status: str = "draft"
        qty: int = 1

    invoice = Invoice()
    with pytest.raises(PayloadValidationError) as caught:
        apply_change_request(invoice, {"updateElements": {"stauts": "issued"}})
    assert caught.value.errors[0][0] == ("stauts",)
    assert "not a field of Invoice" in str(caught.value)

    same = apply_change_request(invoice, {"updateElements": {"qty": "1"}})
    assert same.payload == invoice and same.report.changes == []
    coerced = apply_change_request(invoice, {"updateElements": {"qty": "3", "status": "sent"}})
    assert coerced.payload == Invoice(status="sent", qty=3)
    assert sorted((c.path, c.new) for c in coerced.report.changes) == [
        (("qty",), 3),
        (("status",), "sent"),
    ]


class _Color(enum.StrEnum):
    RED = "red"


def test_dump_payload_without_a_copy_checks_and_returns_plain_data_itself() -> None:
    """Issue 33: ``copy=False`` returns plain JSON data itself (the agent only reads it);
    anything a copy would convert is converted, anything it refuses is refused, limits hold."""
    plain = {"a": [1, 2.5, {"b": None}], "c": "x"}
    assert dump_payload(plain, copy=False) is plain
    assert dump_payload(plain) is not plain
    converted = dump_payload({"color": _Color.RED}, copy=False)
    assert converted == {"color": "red"} and type(converted["color"]) is str
    with pytest.raises(InvalidPayloadError, match=r"a\[1\]"):
        dump_payload({"a": [1, (2, 3)]}, copy=False)
    with pytest.raises(LimitExceededError):
        dump_payload({"a": list(range(10))}, copy=False, limits=Limits(max_nodes=5))
    with pytest.raises(LimitExceededError):
        dump_payload({"a": {"b": {"c": 1}}}, copy=False, limits=Limits(max_depth=2))
