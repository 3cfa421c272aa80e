"""The data-loss guard: each rule (top level and inside arrays), each policy, and review()."""

from __future__ import annotations

from typing import Any

import pytest

from agent_payload.errors import ConfigurationError
from agent_payload.guards import DATA_LOSS_RULES, DataLossFinding, DataLossGuard
from agent_payload.report import Change

LONG = "The quick brown fox jumps over the lazy dog while the cat watches. " * 3  # 201 chars


def _rules(guard: DataLossGuard, change: Change) -> list[tuple[str, tuple[str | int, ...]]]:
    return [(f.rule, f.path) for f in guard.check_change(change)]


# Each case: old value, new value, the rule expected to fire.
FIRING: list[tuple[str, Any, Any, str]] = [
    ("cut", LONG, LONG[:40], "string_cut"),
    ("ellipsis", "A full sentence about the product.", "A full sentence...", "truncation_marker"),
    ("unicode ellipsis", "A full sentence about the product.", "A full…", "truncation_marker"),
    ("marker alone", "Some text", "...", "truncation_marker"),
    ("[truncated]", "A long description of things", "A long [truncated]", "truncation_marker"),
    ("etc.", "apples, pears, plums, figs", "apples, pears, etc.", "truncation_marker"),
    ("and more", "red, green, blue, cyan, magenta", "red, green and more", "truncation_marker"),
    ("TODO", "Ships in two days", "TODO", "placeholder"),
    ("<...>", "Ships in two days", "<...>", "placeholder"),
    ("[...]", "Ships in two days", "[...]", "placeholder"),
    ("rest unchanged", "Line one. Line two. Line three.", "...rest unchanged", "placeholder"),
    ("angle note", "Line one. Line two.", "<rest of the text unchanged>", "placeholder"),
    ("contained TODO", "Fully written paragraph here.", "Fully written TODO", "placeholder"),
    ("number to TODO", 42, "TODO", "placeholder"),
    ("array shrunk", [1, 2, 3, 4, 5, 6], [1, 2], "array_shrunk"),
    ("object keys lost", {"a": 1, "b": 2, "c": 3}, {"a": 1}, "object_keys_lost"),
    ("object to primitive", {"a": 1}, "see above", "container_to_primitive"),
    ("array to null", [1, 2], None, "container_to_primitive"),
    ("text wiped", "Alice Liddell", "", "wiped"),
    ("blank", "Alice Liddell", "   ", "wiped"),
    ("number nulled", 12.5, None, "wiped"),
]


@pytest.mark.parametrize(("name", "old", "new", "rule"), FIRING, ids=[c[0] for c in FIRING])
def test_each_rule_fires_at_the_top_level(name: str, old: Any, new: Any, rule: str) -> None:
    """Every rule fires on its example as a top-level update."""
    assert _rules(DataLossGuard(), Change("update", ("field",), old=old, new=new)) == [
        (rule, ("field",))
    ]


@pytest.mark.parametrize(("name", "old", "new", "rule"), FIRING, ids=[c[0] for c in FIRING])
def test_each_rule_fires_inside_arrays(name: str, old: Any, new: Any, rule: str) -> None:
    """The same rules fire for a change inside an array element, and for a change that
    replaces the whole array holding the value (nothing skipped for where it sits)."""
    guard = DataLossGuard()
    path = ("items", 3, "field")
    assert _rules(guard, Change("update", path, old=old, new=new)) == [(rule, path)]
    whole = Change("update", ("items",), old=[{"field": old}], new=[{"field": new}])
    assert _rules(guard, whole) == [(rule, ("items", 0, "field"))]
    nested = Change("update", ("grid",), old=[[0, old]], new=[[0, new]])
    assert _rules(guard, nested) == [(rule, ("grid", 0, 1))]


QUIET: list[tuple[str, Any, Any]] = [
    ("small edit", LONG, LONG.replace("quick", "slow")),
    ("short text cut", "Ninety-nine characters at most", "Ninety", "string_cut needs >= 100"),
    ("grows with ellipsis", "Draft", "Final version...", None),
    ("marker already there", "Loading...", "Saving...", None),
    ("empty to text", "", "hello", None),
    ("null to empty", None, "", None),
    ("empty list to primitive", [], 0, None),
    ("half the array", [1, 2, 3, 4], [1, 2], None),
    ("one of two keys", {"a": 1, "b": 2}, {"a": 1}, None),
    ("single element removed", [1], [], None),
    ("placeholder kept", "TODO: write this", "TODO: write this soon", None),
    ("ordinary words", "We sell etchings", "We sell etchings and prints", None),
]


@pytest.mark.parametrize("case", QUIET, ids=[c[0] for c in QUIET])
def test_ordinary_edits_are_not_flagged(case: tuple[Any, ...]) -> None:
    """Ordinary edits (small changes, growth, short texts, thresholds not crossed) are quiet."""
    old, new = case[1], case[2]
    assert _rules(DataLossGuard(), Change("update", ("field",), old=old, new=new)) == []


def test_large_removal_on_delete_and_inside_updates() -> None:
    """Deleting >= large_removal_chars of JSON is flagged, alone, in an array, or as the
    keys/elements a container replacement drops."""
    guard = DataLossGuard(large_removal_chars=500)
    big = {"body": "x" * 600}
    assert _rules(guard, Change("delete", ("doc",), old=big)) == [("large_removal", ("doc",))]
    assert _rules(guard, Change("delete", ("docs", 4), old=big)) == [("large_removal", ("docs", 4))]
    assert _rules(guard, Change("delete", ("doc",), old={"body": "small"})) == []
    dropped = Change("update", ("a",), old={"keep": 1, "big": big}, new={"keep": 1})
    assert _rules(guard, dropped) == [("large_removal", ("a", "big"))]
    shorter = Change("update", ("a",), old=[1, big, 3, 4], new=[1, 2, 3])
    assert ("large_removal", ("a", 3)) not in _rules(guard, shorter)
    tail = Change("update", ("a",), old=[1, 2, big], new=[1, 2])
    assert _rules(guard, tail) == [("large_removal", ("a", 2))]


def test_adds_are_never_flagged() -> None:
    """Adding content is not data loss."""
    assert DataLossGuard()(Change("add", ("x",), new="...")) == []


def test_findings_carry_path_rule_sizes_and_a_message() -> None:
    """Findings have code data_loss, the payload path, the rule, before/after sizes, and a
    message naming the path, the rule and the sizes."""
    (finding,) = DataLossGuard().check_change(
        Change("update", ("items", 2, "description"), old=LONG, new=LONG[:30])
    )
    assert isinstance(finding, DataLossFinding)
    assert finding.code == "data_loss"
    assert (finding.path, finding.rule) == (("items", 2, "description"), "string_cut")
    assert (finding.before_size, finding.after_size) == (len(LONG), 30)
    assert "`items[2].description`" in finding.message
    assert "string_cut" in finding.message
    assert f"{len(LONG)}-character" in finding.message and "30 characters" in finding.message


@pytest.mark.parametrize(
    ("policy", "severity"),
    [("warn", "warning"), ("confirm", "confirm"), ("reject", "conflict"), ("allow", None)],
)
def test_policies(policy: str, severity: str | None) -> None:
    """allow flags nothing; warn, confirm and reject give warning, confirm, conflict."""
    guard = DataLossGuard(policy=policy)  # type: ignore[arg-type]
    findings = guard(Change("update", ("a",), old=LONG, new="..."))
    if severity is None:
        assert findings == []
        assert guard.review({"a": LONG}, {"a": "..."}, []) == []
        assert guard.describe() == ""
    else:
        assert [f.severity for f in findings] == [severity]
        assert guard.describe()


def test_bad_configuration() -> None:
    """Unknown policies, rules and out-of-range ratios are ConfigurationErrors."""
    with pytest.raises(ConfigurationError):
        DataLossGuard(policy="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        DataLossGuard(rules=["string_cut", "typo"])
    with pytest.raises(ConfigurationError):
        DataLossGuard(max_string_cut=1.5)


def test_rules_can_be_selected_and_paths_ignored() -> None:
    """rules= limits the rules that run; ignore= silences paths (permission grammar)."""
    change = Change("update", ("notes", 0), old=LONG, new="x")
    assert _rules(DataLossGuard(rules=["wiped"]), change) == []
    assert _rules(DataLossGuard(ignore=["notes"]), change) == []
    assert _rules(DataLossGuard(ignore=["**.other"]), change) == [("string_cut", ("notes", 0))]
    assert set(DATA_LOSS_RULES) >= {"string_cut", "array_shrunk", "large_removal"}


def test_thresholds_are_configurable() -> None:
    """min_string_length and max_string_cut move the string_cut threshold."""
    change = Change("update", ("a",), old="x" * 50, new="x" * 20)
    assert _rules(DataLossGuard(), change) == []
    assert _rules(DataLossGuard(min_string_length=40, max_string_cut=0.5), change) == [
        ("string_cut", ("a",))
    ]


# --- review: the whole picture -------------------------------------------------------------


def test_review_sees_an_array_shrunk_element_by_element() -> None:
    """The merge reports each deleted element separately; review() still sees the array
    shrink from 10 to 3, at the array's path."""
    before = {"items": list(range(10)), "keep": 1}
    after = {"items": [0, 1, 2], "keep": 1}
    changes = [Change("delete", ("items", i), old=i) for i in range(3, 10)]
    guard = DataLossGuard()
    assert all(guard.check_change(c) == [] for c in changes)  # invisible one by one
    (finding,) = guard.review(before, after, changes)
    assert (finding.rule, finding.path) == ("array_shrunk", ("items",))
    assert (finding.before_size, finding.after_size) == (10, 3)
    assert "10 elements lost 7 of them" in finding.message


def test_review_sees_an_object_losing_keys_one_by_one() -> None:
    """Separate key deletions that remove most of an object are flagged at the object."""
    before = {"profile": {"a": 1, "b": 2, "c": 3, "d": 4}}
    after = {"profile": {"a": 1}}
    changes = [Change("delete", ("profile", k), old=v) for k, v in before["profile"].items()][1:]
    (finding,) = DataLossGuard().review(before, after, changes)
    assert (finding.rule, finding.path) == ("object_keys_lost", ("profile",))


def test_review_maps_nested_paths_through_earlier_deletions() -> None:
    """An array nested in an element whose earlier siblings were deleted is found in the
    result at its shifted position."""
    before = {"rows": [{"cells": [1]}, {"cells": [1, 2, 3, 4]}]}
    after = {"rows": [{"cells": [1]}]}
    changes = [
        Change("delete", ("rows", 0), old={"cells": [1]}),
        Change("delete", ("rows", 1, "cells", 1), old=2),
        Change("delete", ("rows", 1, "cells", 2), old=3),
        Change("delete", ("rows", 1, "cells", 3), old=4),
    ]
    found = {(f.rule, f.path) for f in DataLossGuard().review(before, after, changes)}
    assert ("array_shrunk", ("rows", 1, "cells")) in found


def test_review_includes_or_skips_per_change_findings() -> None:
    """per_change=True adds each change's own findings; per_change=False only the
    container findings (for when the guard already ran inside the merge)."""
    before = {"text": LONG, "items": [1, 2, 3, 4]}
    after = {"text": "", "items": [1]}
    changes = [
        Change("update", ("text",), old=LONG, new=""),
        *(Change("delete", ("items", i), old=i + 1) for i in (1, 2, 3)),
    ]
    guard = DataLossGuard()
    assert {f.rule for f in guard.review(before, after, changes)} == {"wiped", "array_shrunk"}
    assert [f.rule for f in guard.review(before, after, changes, per_change=False)] == [
        "array_shrunk"
    ]


def test_review_is_quiet_for_modest_deletions_and_accepts_pydantic_models() -> None:
    """Deleting fewer than half the elements is fine; pydantic payloads are dumped."""
    from pydantic import BaseModel

    class Doc(BaseModel):
        items: list[int]

    changes = [Change("delete", ("items", 0), old=1)]
    assert DataLossGuard().review(Doc(items=[1, 2, 3]), Doc(items=[2, 3]), changes) == []


def test_deep_values_do_not_recurse() -> None:
    """A 10,000-level value deleted or replaced is measured without RecursionError."""
    deep: Any = "x" * 3000
    for _ in range(10_000):
        deep = [deep]
    guard = DataLossGuard()
    assert [f.rule for f in guard(Change("delete", ("a",), old=deep))] == ["large_removal"]
    assert [f.rule for f in guard(Change("update", ("a",), old=deep, new=deep))] == []
