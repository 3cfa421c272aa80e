"""Guards end to end through merge.apply_change_request(..., guards=[...])."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent_payload.errors import ConcurrentChangeError, MergeConflictError, StalePayloadError
from agent_payload.guards import (
    DataLossGuard,
    Permissions,
    ReadScope,
    combine_guards,
    payload_version,
)
from agent_payload.merge import apply_change_request
from agent_payload.report import MergeResult
from agent_payload.store import VersionedStore, apply_if_version

ORDER: dict[str, Any] = {
    "id": "ord-1",
    "status": "open",
    "customer": {"id": 9, "name": "Ada"},
    "items": [
        {"id": 1, "sku": "a", "price": 10, "note": "gift"},
        {"id": 2, "sku": "b", "price": 20},
    ],
    "meta": {"a.b": 1, "plain": 2},
}


def _merge(request: dict[str, Any], guard: Any, payload: Any = None) -> MergeResult[Any]:
    source = copy.deepcopy(ORDER) if payload is None else payload
    before = copy.deepcopy(source)
    result = apply_change_request(source, request, guards=[guard])
    assert source == before  # the input is never changed
    return result


def _denied_paths(result: MergeResult[Any]) -> list[tuple[str | int, ...] | None]:
    return [c.payload_path for c in result.report.conflicts if c.code == "permission_denied"]


def test_delete_inside_update_elements_is_checked_as_a_delete() -> None:
    """Hole 4 of the reference system: a DELETE marker in updateElements is a delete and is
    refused by a delete-only rule, in positional arrays, index maps and objects alike."""
    perms = Permissions(deny=["items[*]:delete", "**.note:delete"])
    positional = _merge({"updateElements": {"items": [{}, "DELETE"]}}, perms)
    assert _denied_paths(positional) == [("items", 1)]
    assert positional.payload == ORDER
    index_map = _merge({"updateElements": {"items": {"1": "DELETE"}}}, perms)
    assert _denied_paths(index_map) == [("items", 1)]
    note = _merge({"updateElements": {"items": [{"note": "DELETE"}]}}, perms)
    assert _denied_paths(note) == [("items", 0, "note")]
    assert note.payload == ORDER
    # the same rules let updates through
    update = _merge({"updateElements": {"items": [{"note": "wrapped"}]}}, perms)
    assert update.report.conflicts == []
    assert update.payload["items"][0]["note"] == "wrapped"


def test_remove_elements_deletions_are_checked() -> None:
    """removeElements deletions (keys and elements) are checked."""
    perms = Permissions(deny=["items[*]"])
    result = _merge({"removeElements": {"items": ["DELETE"]}}, perms)
    assert _denied_paths(result) == [("items", 0)]
    assert result.payload == ORDER


def test_appends_are_checked_from_new_and_update_elements() -> None:
    """Appending through newElements or past the end in updateElements is checked."""
    perms = Permissions(deny=["items[*]:add"])
    new = _merge({"newElements": {"items": [{"sku": "c"}]}}, perms)
    assert _denied_paths(new) == [("items", 2)]
    beyond = _merge({"updateElements": {"items": [{}, {}, {"sku": "c"}]}}, perms)
    assert _denied_paths(beyond) == [("items", 2)]
    assert new.payload == beyond.payload == ORDER


def test_double_star_and_bracket_rules_through_the_merge() -> None:
    """`**.id` protects ids at every depth; `meta["a.b"]` protects the dotted key only."""
    perms = Permissions(deny=["**.id", 'meta["a.b"]'])
    result = _merge(
        {
            "updateElements": {
                "id": "x",
                "customer": {"id": 10, "name": "Bea"},
                "items": [{"id": 5, "price": 11}],
                "meta": {"a.b": 2, "plain": 3},
            }
        },
        perms,
    )
    assert sorted(_denied_paths(result), key=repr) == sorted(
        [("id",), ("customer", "id"), ("items", 0, "id"), ("meta", "a.b")], key=repr
    )
    assert result.payload["customer"] == {"id": 9, "name": "Bea"}
    assert result.payload["items"][0] == {"id": 1, "sku": "a", "price": 11, "note": "gift"}
    assert result.payload["meta"] == {"a.b": 1, "plain": 3}
    assert result.payload["id"] == "ord-1"


def test_replacing_or_deleting_a_container_with_protected_content_is_refused() -> None:
    """replaceElements of `items`, or deleting it, is refused when `items[*].price` is
    read-only; a conflict names the inner path in its message."""
    perms = Permissions(deny=["items[*].price"])
    replaced = _merge({"replaceElements": {"items": []}}, perms)
    assert len(replaced.report.conflicts) == 1
    assert "`items[0].price`" in replaced.report.conflicts[0].message
    assert replaced.payload == ORDER
    deleted = _merge({"removeElements": {"items": "DELETE"}}, perms)
    assert deleted.payload == ORDER and deleted.report.conflicts
    primitive = _merge({"updateElements": {"items": [5]}}, perms)
    assert primitive.payload == ORDER and primitive.report.conflicts


def test_conflicts_carry_the_request_path_and_strict_mode_raises() -> None:
    """A refusal is a permission_denied conflict at the change-request path; strict mode
    raises MergeConflictError and applies nothing."""
    perms = Permissions(allow=["items[*].price"])
    result = _merge({"updateElements": {"status": "closed", "items": [{"price": 1}]}}, perms)
    (conflict,) = result.report.conflicts
    assert (conflict.code, conflict.path, conflict.payload_path) == (
        "permission_denied",
        "updateElements.status",
        ("status",),
    )
    assert result.payload["items"][0]["price"] == 1
    with pytest.raises(MergeConflictError):
        apply_change_request(
            ORDER, {"updateElements": {"status": "x"}}, guards=[perms], strict=True
        )


def test_read_scope_guard_through_the_merge() -> None:
    """What the model was not shown cannot be written, even by replacing its container."""
    scope = ReadScope(exclude=["customer.id"])
    result = _merge(
        {"replaceElements": {"customer": {"name": "Bea"}}, "updateElements": {"status": "x"}},
        scope,
    )
    assert result.payload["customer"] == ORDER["customer"]
    assert result.payload["status"] == "x"
    assert _denied_paths(result) == [("customer",)]
    # the message goes back to the model: it names the container, never the hidden key
    assert "`customer`" in result.report.conflicts[0].message
    assert "customer.id" not in result.report.conflicts[0].message


@pytest.mark.parametrize(
    ("policy", "applied", "bucket"),
    [("warn", True, "warnings"), ("confirm", True, "warnings"), ("reject", False, "conflicts")],
)
def test_data_loss_policies_through_the_merge(policy: str, applied: bool, bucket: str) -> None:
    """warn/confirm apply the change and record a data_loss warning (with its severity);
    reject refuses it as a data_loss conflict."""
    long_text = "A long description that the model was not asked to touch at all. " * 3
    payload = {"items": [{"description": long_text}]}
    result = _merge(
        {"updateElements": {"items": [{"description": "A long description..."}]}},
        DataLossGuard(policy=policy),  # type: ignore[arg-type]
        payload=payload,
    )
    (issue,) = getattr(result.report, bucket)
    assert issue.code == "data_loss"
    assert issue.payload_path == ("items", 0, "description")
    assert issue.severity == {"warn": "warning", "confirm": "confirm", "reject": "conflict"}[policy]
    changed = result.payload["items"][0]["description"] != long_text
    assert changed is applied


def test_data_loss_review_after_a_merge_that_deletes_elements_one_by_one() -> None:
    """Three DELETE markers remove 3 of 4 items: the per-change guard is quiet, review()
    over the merge sees the array shrink by 75%, and the merge itself runs that review (its
    finding is the report's one warning, at the array's payload path)."""
    payload = {"items": [1, 2, 3, 4]}
    guard = DataLossGuard()
    result = _merge(
        {"updateElements": {"items": [{}, "DELETE", "DELETE", "DELETE"]}}, guard, payload
    )
    assert [(w.code, w.payload_path, w.severity) for w in result.report.warnings] == [
        ("data_loss", ("items",), "warning")
    ]
    findings = guard.review(payload, result.payload, result.report.changes, per_change=False)
    assert [(f.rule, f.path, f.before_size, f.after_size) for f in findings] == [
        ("array_shrunk", ("items",), 4, 1)
    ]


def test_combined_guards_through_the_merge() -> None:
    """Permissions and data-loss guards combined: each contributes its findings."""
    guard = combine_guards(Permissions(deny=["id"]), DataLossGuard(policy="reject"))
    result = _merge({"updateElements": {"id": "x", "status": ""}}, guard)
    assert sorted(c.code for c in result.report.conflicts) == ["data_loss", "permission_denied"]
    assert result.payload == ORDER


def test_apply_if_version_and_versioned_store() -> None:
    """A change applies only to the version it was made against; a stale one raises
    StalePayloadError and nothing is applied."""
    version = payload_version(ORDER)
    result = apply_if_version(ORDER, {"updateElements": {"status": "paid"}}, version)
    assert result.payload["status"] == "paid"
    with pytest.raises(StalePayloadError):
        apply_if_version(result.payload, {"updateElements": {"status": "x"}}, version)

    store = VersionedStore(copy.deepcopy(ORDER))
    _, first = store.get()
    store.apply({"updateElements": {"status": "paid"}}, expected_version=first)
    # a stale request on the same field collides (MERGE.md section 9): nothing applied
    with pytest.raises(ConcurrentChangeError):
        store.apply({"updateElements": {"status": "void"}}, expected_version=first)
    assert store.get()[0]["status"] == "paid"
    # a version the store never had is unknown: StalePayloadError
    unknown = payload_version({"not": "a version of this store"})
    with pytest.raises(StalePayloadError) as info:
        store.apply({"updateElements": {"status": "void"}}, expected_version=unknown)
    assert info.value.expected == unknown and info.value.actual == store.version
    assert store.get()[0]["status"] == "paid"
    # a strict-mode failure leaves the store as it was
    guard = Permissions(deny=["status"])
    with pytest.raises(MergeConflictError):
        store.apply(
            {"updateElements": {"status": "x"}},
            expected_version=store.version,
            guards=[guard],
            strict=True,
        )
    assert store.get()[0]["status"] == "paid"
