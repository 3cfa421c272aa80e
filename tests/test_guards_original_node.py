"""Guards judge every effect at the original node it touches (issue 10).

Random change requests on an array of elements, with deletions before updates, index maps,
removals, nested arrays and appends, against rules with literal indices. The check is
independent of the merge's report: every original element carries a ``uid`` the requests never
write, and every original tag is a unique string the requests never produce, so where a
protected node ended up in the result is found by value, not by trusting result paths.

* safety: every node a rule protects is unchanged in the result (same value, still present
  unless the request deleted it and the rule allowed deletion);
* no over-refusal: a request that leaves the protected element alone (and appends nothing)
  merges exactly as it does without the guard.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent_payload.guards import Permissions, ReadScope
from agent_payload.merge import apply_change_request

MARKER = "DELETE"


def _payload(n: int, tags: list[int]) -> dict[str, Any]:
    return {
        "items": [
            {"uid": i, "sku": f"sku{i}", "tags": [f"t{i}_{j}" for j in range(tags[i])]}
            for i in range(n)
        ]
    }


@st.composite
def cases(draw: st.DrawFn, *, appends: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    n = draw(st.integers(2, 6))
    tags = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    payload = _payload(n, tags)

    def tag_entry(i: int) -> Any:
        width = tags[i] + (1 if appends else 0)
        entries = st.lists(
            st.sampled_from([{}, MARKER, "new-tag"]), min_size=0, max_size=max(width, 0)
        )
        return draw(entries)

    def element_entry(i: int) -> Any:
        kind = draw(st.sampled_from(["keep", "delete", "sku", "tags", "both", "primitive"]))
        if kind == "keep":
            return {}
        if kind == "delete":
            return MARKER
        if kind == "primitive":
            return "new-primitive"
        entry: dict[str, Any] = {}
        if kind in ("sku", "both"):
            entry["sku"] = "new-sku"
        if kind in ("tags", "both"):
            entry["tags"] = tag_entry(i)
        return entry

    request: dict[str, Any] = {}
    form = draw(st.sampled_from(["positional", "index_map"]))
    if form == "positional":
        length = draw(st.integers(0, n))
        update: Any = [element_entry(i) for i in range(length)]
    else:
        chosen = draw(st.sets(st.integers(0, n - 1), max_size=n))
        update = {str(i): element_entry(i) for i in sorted(chosen)}
    if update:
        request["updateElements"] = {"items": update}
    removals = draw(st.sets(st.integers(0, n - 1), max_size=2))
    if removals:
        remove: dict[str, Any] = {}
        for i in sorted(removals):
            if tags[i] and draw(st.booleans()):
                remove[str(i)] = {"tags": {str(draw(st.integers(0, tags[i] - 1))): MARKER}}
            else:
                remove[str(i)] = MARKER
        request["removeElements"] = {"items": remove}
    if appends and draw(st.booleans()):
        request["newElements"] = {"items": [{"sku": "appended"}]}
    return payload, request


RULE_KINDS = ["items[{i}]", "items[{i}].sku", "items[{i}].tags", "items[{i}].tags[{j}]"]


@st.composite
def rules(draw: st.DrawFn, payload: dict[str, Any]) -> tuple[str, int, int | None]:
    items = payload["items"]
    i = draw(st.integers(0, len(items) - 1))
    kinds = RULE_KINDS if items[i]["tags"] else RULE_KINDS[:3]
    kind = draw(st.sampled_from(kinds))
    j = draw(st.integers(0, len(items[i]["tags"]) - 1)) if "{j}" in kind else None
    return kind.format(i=i, j=j), i, j


def _by_uid(result: Any, uid: int) -> Any:
    found = [e for e in result["items"] if isinstance(e, dict) and e.get("uid") == uid]
    assert len(found) <= 1
    return found[0] if found else None


def _protected_unchanged(
    original: dict[str, Any], result: Any, rule: str, i: int, j: int | None
) -> None:
    """The independent check: the node ``rule`` names (all operations denied) is unchanged."""
    before = original["items"][i]
    after = _by_uid(result, before["uid"])
    assert after is not None, f"{rule}: the element was deleted or replaced: {result}"
    if rule == f"items[{i}]":
        assert after == before, rule
    elif rule.endswith(".sku"):
        assert after.get("sku") == before["sku"], rule
    elif rule.endswith(".tags"):
        assert after.get("tags") == before["tags"], rule
    else:
        assert j is not None
        assert before["tags"][j] in after.get("tags", []), rule


@given(data=st.data())
def test_denied_original_nodes_are_unchanged(data: st.DataObject) -> None:
    payload, request = data.draw(cases())
    rule, i, j = data.draw(rules(payload))
    result = apply_change_request(
        payload, request, markers=[MARKER], guards=[Permissions(deny=[rule])]
    )
    _protected_unchanged(payload, result.payload, rule, i, j)


@given(data=st.data())
def test_nodes_outside_the_read_scope_are_unchanged(data: st.DataObject) -> None:
    payload, request = data.draw(cases())
    rule, i, j = data.draw(rules(payload))
    result = apply_change_request(
        payload, request, markers=[MARKER], guards=[ReadScope(exclude=[rule])]
    )
    _protected_unchanged(payload, result.payload, rule, i, j)


@given(data=st.data())
def test_a_rule_allowing_deletion_lets_the_element_go_but_not_change(data: st.DataObject) -> None:
    """``items[i]:update,add``: the element may be deleted; if it stays, it is unchanged."""
    payload, request = data.draw(cases())
    i = data.draw(st.integers(0, len(payload["items"]) - 1))
    guard = Permissions(deny=[f"items[{i}]:update,add"])
    result = apply_change_request(payload, request, markers=[MARKER], guards=[guard])
    before = payload["items"][i]
    after = _by_uid(result.payload, before["uid"])
    if after is not None:
        assert after["sku"] == before["sku"]
        assert [t for t in after["tags"] if t.startswith("t")] == [
            t for t in before["tags"] if t in after["tags"]
        ]
        assert all(t.startswith("t") for t in after["tags"])


def _touches(request: dict[str, Any], i: int) -> bool:
    update = request.get("updateElements", {}).get("items", [])
    entry = (
        (update[i] if i < len(update) else {})
        if isinstance(update, list)
        else update.get(str(i), {})
    )
    return entry != {} or str(i) in request.get("removeElements", {}).get("items", {})


@given(data=st.data())
def test_a_rule_for_one_element_never_refuses_changes_to_the_others(data: st.DataObject) -> None:
    """Deleting ``items[0]`` and writing into ``items[2]`` is never judged against a rule for
    ``items[1]`` (where the write lands in the result)."""
    payload, request = data.draw(cases(appends=False))
    i = data.draw(st.integers(0, len(payload["items"]) - 1))
    if _touches(request, i):
        return
    plain = apply_change_request(payload, request, markers=[MARKER])
    for guard in (Permissions(deny=[f"items[{i}]"]), ReadScope(exclude=[f"items[{i}]"])):
        guarded = apply_change_request(payload, request, markers=[MARKER], guards=[guard])
        assert [c.code for c in guarded.report.conflicts] == [
            c.code for c in plain.report.conflicts
        ]
        assert guarded.payload == plain.payload


def test_the_reported_escape_is_caught() -> None:
    """The example of the issue, as a fixed case."""
    payload = _payload(3, [0, 0, 0])
    request = {"updateElements": {"items": [MARKER, {"sku": "pwned"}]}}
    for guard in (Permissions(deny=["items[1]"]), ReadScope(exclude=["items[1]"])):
        result = apply_change_request(payload, request, markers=[MARKER], guards=[guard])
        _protected_unchanged(payload, result.payload, "items[1]", 1, None)
        assert [c.code for c in result.report.conflicts] == ["permission_denied"]
