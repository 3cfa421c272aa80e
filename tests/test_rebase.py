"""MERGE.md section 9: rebasing a late change request over the requests applied since its base.

The conformance vectors of ``tests/vectors/rebase/section9.json`` (one per rule of the section), the
section's example, and properties: a rebase over nothing is the identity, and for disjoint edits
of two writers on a payload whose elements carry unique ids, rebasing either over the other gives
the three-way merge by ids.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_payload.errors import ConcurrentChangeError, MergeConflictError
from agent_payload.merge import Applied, apply_change_request, rebase_change_request

CASES = json.loads(
    (Path(__file__).parent / "vectors" / "rebase" / "section9.json").read_text("utf-8")
)


def _markers(case: dict[str, Any]) -> Any:
    return case.get("options", {}).get("markers", ("DELETE", "__DELETE__"))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vector(case: dict[str, Any]) -> None:
    base, applied, request = case["base"], case["applied"], case["change_request"]
    frozen = copy.deepcopy((base, applied, request))
    markers = _markers(case)
    if case["conflicts"]:
        with pytest.raises(ConcurrentChangeError) as caught:
            rebase_change_request(base, applied, request, markers=markers)
        got = [{"code": c.code, "path": c.path} for c in caught.value.report.conflicts]
        assert got == case["conflicts"]
        assert not caught.value.report.changes
    else:
        rebased = rebase_change_request(base, applied, request, markers=markers)
        assert rebased.to_wire() == case["rebased"]
        current = base
        for step in applied:
            current = apply_change_request(current, step, markers=markers).payload
        result = apply_change_request(current, rebased, markers=markers)
        assert result.report.conflicts == []
        assert result.payload == case["expected"]
    assert (base, applied, request) == frozen, "inputs are never mutated"


def test_the_section_9_example_word_for_word() -> None:
    base = {"lines": [{"id": "a", "qty": 1}, {"id": "b", "qty": 2}, {"id": "c", "qty": 3}]}
    since = [{"updateElements": {"lines": {"0": "DELETE"}}}]
    late = {
        "updateElements": {"lines": {"2": {"qty": 30}}},
        "newElements": {"lines": {"1": [{"id": "x"}]}},
    }
    rebased = rebase_change_request(base, since, late)
    assert rebased.to_wire() == {
        "updateElements": {"lines": {"1": {"qty": 30}}},
        "newElements": {"lines": {"0": [{"id": "x"}]}},
    }
    current = apply_change_request(base, since[0]).payload
    assert apply_change_request(current, rebased).payload == {
        "lines": [{"id": "x"}, {"id": "b", "qty": 2}, {"id": "c", "qty": 30}]
    }
    with pytest.raises(ConcurrentChangeError) as caught:
        rebase_change_request(base, since, {"updateElements": {"lines": {"0": {"qty": 10}}}})
    (conflict,) = caught.value.report.conflicts
    assert conflict.code == "concurrent_change"
    assert (
        "deleted lines[0] (as you saw it)" in conflict.message
        and "no longer exists" in conflict.message
    )
    assert conflict.payload_path == ("lines",)  # the correction shows the current array


def test_the_conflict_names_what_the_other_edit_did_and_where_the_entry_is_now() -> None:
    base = {"xs": [{"v": 1}, {"v": 2}]}
    with pytest.raises(ConcurrentChangeError) as caught:
        rebase_change_request(
            base,
            [
                {"newElements": {"xs": {"0": [{"v": 0}]}}},
                {"updateElements": {"xs": {"2": {"v": 5}}}},
            ],
            {"updateElements": {"xs": {"1": {"v": 7}}}},
        )
    (conflict,) = caught.value.report.conflicts
    assert "from 2 to 5" in conflict.message
    assert conflict.payload_path == ("xs", 2, "v")  # where base xs[1].v stands now


def test_one_conflict_per_colliding_entry_and_none_for_the_others() -> None:
    base = {"a": 1, "b": 1, "c": 1}
    with pytest.raises(ConcurrentChangeError) as caught:
        rebase_change_request(
            base,
            [{"updateElements": {"a": 2, "b": 2}}],
            {"updateElements": {"a": 3, "b": 4, "c": 5}},
        )
    assert [c.path for c in caught.value.report.conflicts] == [
        "updateElements.a",
        "updateElements.b",
    ]


def test_a_request_that_conflicts_with_its_own_base_is_judged_there_first() -> None:
    with pytest.raises(MergeConflictError) as caught:
        rebase_change_request({"xs": [1]}, [], {"updateElements": {"xs": {"5": 2}}})
    assert not isinstance(caught.value, ConcurrentChangeError)
    assert caught.value.report.conflicts[0].code == "index_out_of_range"


def test_applied_requests_keep_their_own_markers() -> None:
    base = {"method": "DELETE", "xs": ["a", "b"]}
    rebased = rebase_change_request(
        base,
        [Applied({"updateElements": {"xs": {"0": "__DELETE__"}}}, markers={"__DELETE__"})],
        {"updateElements": {"xs": {"1": "B"}}},
    )
    assert rebased.to_wire() == {"updateElements": {"xs": {"0": "B"}}}


# --- properties -------------------------------------------------------------------------------

_ids = st.integers(min_value=0, max_value=10**6)


@st.composite
def _two_writers(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A payload of elements with unique ids (one nested array each) and two writers' requests
    touching disjoint elements and disjoint insertion anchors."""
    n = draw(st.integers(min_value=1, max_value=8))
    rows = [
        {
            "id": f"r{i}",
            "v": draw(st.integers(0, 9)),
            "tags": [f"t{i}.{k}" for k in range(draw(st.integers(0, 3)))],
        }
        for i in range(n)
    ]
    base = {"rows": rows, "title": "t", "a": 0, "b": 0}
    owner = draw(st.lists(st.sampled_from("AB-"), min_size=n + 1, max_size=n + 1))
    fresh = iter(range(1000))
    requests: dict[str, dict[str, Any]] = {"A": {}, "B": {}}
    for who in "AB":
        update: dict[str, Any] = {}
        new: dict[str, Any] = {}
        for i in range(n + 1):
            if owner[i] != who:
                continue
            if i < n:
                what = draw(st.sampled_from(["delete", "set", "tag-delete", "tag-insert", "none"]))
                if what == "delete":
                    update[str(i)] = "DELETE"
                elif what == "set":
                    update[str(i)] = {"v": draw(st.integers(10, 99))}
                elif what == "tag-delete" and rows[i]["tags"]:
                    update[str(i)] = {"tags": {"0": "DELETE"}}
                elif what == "tag-insert":
                    new[str(i)] = {"tags": {str(len(rows[i]["tags"])): [f"{who}{next(fresh)}"]}}
            if draw(st.booleans()) and str(i) not in new and update.get(str(i)) != "DELETE":
                new[str(i)] = [{"id": f"{who}{next(fresh)}", "v": 0, "tags": []}]
        request: dict[str, Any] = {}
        if update:
            request["updateElements"] = {"rows": update}
        if new:
            request["newElements"] = {"rows": new}
        key = "a" if who == "A" else "b"
        if draw(st.booleans()):
            request.setdefault("updateElements", {})[key] = draw(st.integers(1, 9))
        requests[who] = request
    return base, requests["A"], requests["B"]


def _three_way(base: dict[str, Any], a: dict[str, Any], b: dict[str, Any]) -> Any:
    """The oracle: each writer's result merged by element ids (no rebase involved)."""
    ra = apply_change_request(base, a).payload
    rb = apply_change_request(base, b).payload

    def by_id(rows: list[Any]) -> dict[str, Any]:
        return {r["id"]: r for r in rows}

    base_rows, a_rows, b_rows = by_id(base["rows"]), by_id(ra["rows"]), by_id(rb["rows"])
    out_rows: list[Any] = []

    # every base element kept by both, with each writer's own edits; new elements before
    # the base element that follows them in that writer's result
    def before(rows: list[Any]) -> dict[str | None, list[Any]]:
        groups: dict[str | None, list[Any]] = {}
        pending: list[Any] = []
        for r in rows:
            if r["id"] in base_rows:
                groups[r["id"]] = pending
                pending = []
            else:
                pending.append(r)
        groups[None] = pending
        return groups

    ga, gb = before(ra["rows"]), before(rb["rows"])
    # an insertion anchored at a deleted element joins the next survivor's group
    carry: list[Any] = []
    for rid in [*base_rows, None]:
        group = carry + ga.get(rid, []) + gb.get(rid, [])
        if rid is not None and (rid not in a_rows or rid not in b_rows):
            carry = group
            continue
        carry = []
        out_rows.extend(group)
        if rid is None:
            break
        row = copy.deepcopy(base_rows[rid])
        for mine in (a_rows[rid], b_rows[rid]):
            for k, v in mine.items():
                if v != base_rows[rid][k]:
                    row[k] = v
        out_rows.append(row)
    return {"rows": out_rows, "title": "t", "a": ra["a"], "b": rb["b"]}


@given(_two_writers())
def test_rebasing_either_writer_over_the_other_is_the_three_way_merge_by_ids(
    case: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    base, a, b = case
    expected = _three_way(base, a, b)
    for first, late in ((a, b), (b, a)):
        current = apply_change_request(base, first).payload
        rebased = rebase_change_request(base, [first], late)
        result = apply_change_request(current, rebased)
        assert result.report.conflicts == []
        assert result.payload == expected


@given(_two_writers())
def test_a_rebase_over_nothing_is_the_identity(
    case: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    base, a, _ = case
    rebased = rebase_change_request(base, [], a)
    assert apply_change_request(base, rebased).payload == apply_change_request(base, a).payload


def test_deleting_an_item_inserted_since_leaves_the_rest_of_the_array_known() -> None:
    """Found by four MCP servers on one file: an applied request deleting an item that an
    earlier applied request inserted made the whole array opaque, so every later edit in it
    (and every late request there) collided."""
    base = {"items": [{"id": i, "v": 0} for i in "abcd"]}
    applied = [
        {"newElements": {"items": {"2": [{"id": "x", "v": 0}]}}},
        {"removeElements": {"items": {"2": "DELETE"}}},
        {"updateElements": {"items": {"0": {"v": 1}}}},
    ]
    late = {"updateElements": {"items": {"3": {"v": 2}}}}
    rebased = rebase_change_request(base, applied, late)
    assert rebased.to_wire() == {"updateElements": {"items": {"3": {"v": 2}}}}
    with pytest.raises(ConcurrentChangeError):
        rebase_change_request(base, applied, {"updateElements": {"items": {"0": {"v": 5}}}})
