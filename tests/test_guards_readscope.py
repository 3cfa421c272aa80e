"""Read scope: what the model sees (project) and the write protection of the rest."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent_payload.errors import ConfigurationError
from agent_payload.guards import Permissions, ReadScope, combine_guards
from agent_payload.report import Change

PAYLOAD: dict[str, Any] = {
    "id": 7,
    "customer": {"name": "Ada", "ssn": "123-45", "email": "ada@example.com"},
    "items": [
        {"sku": "a", "price": 10, "cost": 4},
        "loose",
        {"sku": "b", "price": 20, "cost": 9},
    ],
    "notes": "internal",
}


def test_exclude_hides_keys_everywhere_it_matches_and_keeps_array_positions() -> None:
    """Excluded keys disappear from objects, inside array elements too; every element stays."""
    view = ReadScope(exclude=["customer.ssn", "items[*].cost", "notes"]).project(PAYLOAD)
    assert view == {
        "id": 7,
        "customer": {"name": "Ada", "email": "ada@example.com"},
        "items": [{"sku": "a", "price": 10}, "loose", {"sku": "b", "price": 20}],
    }


def test_include_shows_only_the_included_keys_and_the_way_to_them() -> None:
    """With include, only included keys (and containers on the way) are shown; arrays are
    shown whole: an element with nothing in scope is shown as {} at its position."""
    view = ReadScope(include=["customer.name", "items[0]", "items[*].price"]).project(PAYLOAD)
    assert view == {
        "customer": {"name": "Ada"},
        "items": [{"sku": "a", "price": 10, "cost": 4}, "loose", {"price": 20}],
    }
    only_first = ReadScope(include=["items[0].sku"]).project(PAYLOAD)
    assert only_first == {"items": [{"sku": "a"}, "loose", {}]}


def test_include_and_exclude_combine() -> None:
    """Exclude wins inside an included subtree."""
    view = ReadScope(include=["customer"], exclude=["**.ssn"]).project(PAYLOAD)
    assert view == {"customer": {"name": "Ada", "email": "ada@example.com"}}


def test_project_never_changes_or_shares_with_the_input() -> None:
    """The view is a new structure: changing it leaves the payload alone."""
    before = copy.deepcopy(PAYLOAD)
    view = ReadScope(exclude=["notes"]).project(PAYLOAD)
    view["customer"]["name"] = "changed"
    view["items"].append(1)
    assert before == PAYLOAD


def test_project_handles_array_roots_pydantic_and_depth() -> None:
    """An array root stays an array; a pydantic model is dumped; 10,000 levels work."""
    from pydantic import BaseModel

    class Doc(BaseModel):
        title: str
        secret: str

    assert ReadScope(exclude=["[*].x"]).project([{"x": 1, "y": 2}]) == [{"y": 2}]
    assert ReadScope(exclude=["secret"]).project(Doc(title="t", secret="s")) == {"title": "t"}
    deep: Any = {"leaf": 1, "hidden": 2}
    for _ in range(10_000):
        deep = {"k": deep}
    view = ReadScope(exclude=["**.hidden"]).project(deep)
    for _ in range(10_000):
        view = view["k"]
    assert view == {"leaf": 1}


def _refused(scope: ReadScope, change: Change) -> tuple[str | int, ...] | None:
    findings = scope(change)
    if not findings:
        return None
    (finding,) = findings
    assert finding.code == "permission_denied" and finding.severity == "conflict"
    return finding.path  # type: ignore[attr-defined, no-any-return]


def test_hidden_keys_are_protected_from_writes() -> None:
    """Changing, deleting or adding a hidden key is refused; visible ones are not."""
    scope = ReadScope(exclude=["customer.ssn", "items[*].cost"])
    assert _refused(scope, Change("update", ("customer", "ssn"), old="1", new="2"))
    assert _refused(scope, Change("delete", ("items", 2, "cost"), old=9))
    assert _refused(scope, Change("add", ("items", 3), new={"sku": "c", "cost": 1}))
    assert _refused(scope, Change("update", ("customer", "name"), old="a", new="b")) is None
    assert _refused(scope, Change("add", ("items", 3), new={"sku": "c"})) is None


def test_deleting_or_replacing_a_container_with_hidden_content_is_refused() -> None:
    """Deleting `customer` (which holds the hidden ssn) or replacing it is refused."""
    scope = ReadScope(exclude=["customer.ssn"])
    assert _refused(scope, Change("delete", ("customer",), old=PAYLOAD["customer"])) == (
        "customer",
        "ssn",
    )
    assert _refused(scope, Change("update", ("customer",), old=PAYLOAD["customer"], new=None))
    item = PAYLOAD["items"][0]
    assert _refused(ReadScope(exclude=["**.cost"]), Change("delete", ("items", 0), old=item))


def test_include_protects_everything_else_and_new_keys_outside_it() -> None:
    """With include, keys outside it (existing or new) may not be written."""
    scope = ReadScope(include=["customer.name", "items[*].price"])
    assert _refused(scope, Change("update", ("customer", "name"), old="a", new="b")) is None
    assert _refused(scope, Change("update", ("items", 1, "price"), old=1, new=2)) is None
    assert _refused(scope, Change("add", ("customer", "phone"), new="1"))
    assert _refused(scope, Change("update", ("notes",), old="a", new="b"))
    assert _refused(scope, Change("update", ("items", 1, "sku"), old="a", new="b"))
    assert _refused(scope, Change("update", ("items", 1), old="loose", new="tight"))


def test_visible_and_describe() -> None:
    """visible() answers per node; describe() explains the scope for the prompt."""
    scope = ReadScope(include=["customer"], exclude=["customer.ssn"])
    assert scope.visible(("customer", "name"))
    assert not scope.visible(("customer", "ssn"))
    assert not scope.visible(("notes",))
    assert "read-only" in scope.describe()
    assert ReadScope().describe() == ""
    assert scope.guard() is scope


def test_bad_rules() -> None:
    """Rules are parsed at construction; an operation suffix makes no sense for reading."""
    with pytest.raises(ConfigurationError, match="position"):
        ReadScope(exclude=["a..b"])
    with pytest.raises(ConfigurationError, match="operation suffix"):
        ReadScope(include=["a:update"])
    with pytest.raises(ConfigurationError, match="list of path rules"):
        ReadScope(include="a")  # type: ignore[arg-type]


def test_combined_guards_ask_every_guard_and_join_descriptions() -> None:
    """combine_guards asks each guard and joins describe() texts; chains flatten."""
    chain = combine_guards(ReadScope(exclude=["s"]), None, Permissions(deny=["d"]))
    change_s = Change("update", ("s",), old=1, new=2)
    change_d = Change("update", ("d",), old=1, new=2)
    assert len(chain(change_s)) == 1 and len(chain(change_d)) == 1
    assert chain(Change("update", ("x",), old=1, new=2)) == []
    assert "Read-only" in chain.describe() and "part of the payload" in chain.describe()
    assert len(combine_guards(chain, Permissions(deny=["e"])).guards) == 3
