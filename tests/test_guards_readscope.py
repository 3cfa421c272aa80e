"""Read scope: what the model sees (project) and the write protection of the rest."""

from __future__ import annotations

import copy
import json
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
    shown whole: an element out of scope is shown emptied ({} or null) at its position."""
    view = ReadScope(include=["customer.name", "items[0]", "items[*].price"]).project(PAYLOAD)
    assert view == {
        "customer": {"name": "Ada"},
        "items": [{"sku": "a", "price": 10, "cost": 4}, None, {"price": 20}],
    }
    only_first = ReadScope(include=["items[0].sku"]).project(PAYLOAD)
    assert only_first == {"items": [{"sku": "a"}, None, {}]}


def test_excluded_elements_do_not_leak() -> None:
    """An excluded array element is shown emptied at its position, whatever its kind."""
    data = {"tags": ["secret", "ok"], "grid": [[1, 2], [3]], "rows": [{"a": 1}, {"a": 2}]}
    view = ReadScope(exclude=["tags[0]", "grid[1]", "rows[0]"]).project(data)
    assert view == {"tags": [None, "ok"], "grid": [[1, 2], []], "rows": [{}, {"a": 2}]}


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


# --- properties ------------------------------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agent_payload.merge import apply_change_request  # noqa: E402

_KEYS = ["a", "b", "id", "0"]
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["x", ""]))


def _tree(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda kids: st.one_of(
            st.lists(kids, max_size=3), st.dictionaries(st.sampled_from(_KEYS), kids, max_size=3)
        ),
        max_leaves=12,
    )


_payloads = st.dictionaries(st.sampled_from(_KEYS), _tree(_scalars), max_size=4)
_buckets = st.dictionaries(
    st.sampled_from(_KEYS), _tree(st.one_of(_scalars, st.just("DELETE"), st.just({}))), max_size=3
)
_requests = st.fixed_dictionaries(
    {},
    optional={
        "newElements": _buckets,
        "updateElements": _buckets,
        "removeElements": _buckets,
        "replaceElements": _buckets,
    },
)
_SEGMENTS = [
    ("a", ("key", "a")),
    ("b", ("key", "b")),
    ("id", ("key", "id")),
    ("[*]", ("any_index",)),
    ("[0]", ("index", 0)),
    ("*", ("any",)),
    ("**", ("deep",)),
]


@st.composite
def _rules(draw: st.DrawFn) -> tuple[str, tuple[tuple[Any, ...], ...]]:
    segments = draw(st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=3))
    text = ""
    for i, (seg, _) in enumerate(segments):
        text += seg if seg.startswith("[") or i == 0 else "." + seg
    return text, tuple(m for _, m in segments)


def _match(pattern: tuple[tuple[Any, ...], ...], path: tuple[Any, ...]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head[0] == "deep":
        return _match(rest, path) or (bool(path) and _match(pattern, path[1:]))
    if not path:
        return False
    seg, is_index = path[0], isinstance(path[0], int)
    ok = (
        head[0] == "any"
        or (head[0] == "any_index" and is_index)
        or (head[0] == "key" and not is_index and seg == head[1])
        or (head[0] == "index" and is_index and seg == head[1])
    )
    return ok and _match(rest, path[1:])


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    out: list[tuple[tuple[Any, ...], Any]] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for seg, child in items:
        out.append(((*path, seg), child))
        out.extend(_nodes(child, (*path, seg)))
    return out


def _excluded(patterns: list[tuple[tuple[Any, ...], ...]], path: tuple[Any, ...]) -> bool:
    return any(_match(p, path[:n]) for p in patterns for n in range(1, len(path) + 1))


@given(payload=_payloads, exclude=st.lists(_rules(), min_size=1, max_size=3))
def test_projection_property(
    payload: dict[str, Any], exclude: list[tuple[str, tuple[tuple[Any, ...], ...]]]
) -> None:
    """For random payloads and exclude lists: no key the view shows lies at or below an
    excluded path, and an excluded array element is shown emptied ({}, [] or null), so nothing
    excluded leaks; every array shown keeps its length and every primitive shown equals the
    payload's value at the same path."""
    scope = ReadScope(exclude=[text for text, _ in exclude])
    patterns = [p for _, p in exclude]
    view = scope.project(payload)
    for path, value in _nodes(view):
        if _excluded(patterns, path):
            assert isinstance(path[-1], int), (path, view)
            assert value in ({}, [], None) and type(value) is not bool, (path, view)
            continue
        original = payload
        for seg in path:
            original = original[seg]
        if isinstance(value, list):
            assert len(value) == len(original)
        elif not isinstance(value, dict):
            assert value == original and type(value) is type(original)


@given(
    payload=_payloads,
    request=_requests,
    exclude=st.lists(_rules(), min_size=1, max_size=3),
)
def test_hidden_content_is_never_written(
    payload: dict[str, Any],
    request: dict[str, Any],
    exclude: list[tuple[str, tuple[tuple[Any, ...], ...]]],
) -> None:
    """For random payloads, requests and exclude lists merged with the scope as guard: every
    excluded path holds the same value after the merge (paths through arrays compared when
    no element was deleted, since a deletion shifts positions)."""
    scope = ReadScope(exclude=[text for text, _ in exclude])
    patterns = [p for _, p in exclude]
    result = apply_change_request(payload, request, guards=[scope])
    shifted = any(
        c.op == "delete" and c.path and isinstance(c.path[-1], int) for c in result.report.changes
    )
    before = dict(_nodes(payload))
    after = dict(_nodes(result.payload))
    for path in set(before) | set(after):
        if not any(_match(p, path) for p in patterns):
            continue
        if shifted and any(isinstance(seg, int) for seg in path):
            continue
        missing = object()
        old, new = before.get(path, missing), after.get(path, missing)
        assert (old is missing) == (new is missing), (path, request)
        if old is not missing:
            assert json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)


def test_refusal_message_never_names_what_the_model_was_not_shown() -> None:
    """Replacing a container that holds a hidden key is refused, and the message (which goes
    back to the model) names the container it asked to change, not the hidden key or rule."""
    from agent_payload import apply_change_request
    from agent_payload.guards import ReadScope

    scope = ReadScope(exclude=["customer.vat_id"])
    payload = {"customer": {"name": "A", "vat_id": "DE1"}}
    result = apply_change_request(
        payload, {"replaceElements": {"customer": {"name": "B"}}}, guards=[scope]
    )
    assert result.payload == payload
    [conflict] = result.report.conflicts
    assert conflict.code == "permission_denied"
    assert "customer" in conflict.message
    assert "vat_id" not in conflict.message
