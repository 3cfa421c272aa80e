"""Property (issue 17): over generated pydantic models (optional, aliased, nested, discriminated
unions, dicts, lists, a validator with a side effect, a computed field) and random change
requests, a typed merge that succeeds reports exactly what validation produced:

* the report is a diff of the input and the validated result: its RFC 6902 patch applied to the
  input's JSON form gives the validated model's JSON form, and no reported change is a no-op;
* every reported change was seen by the guard (the merge's own changes, and what validation
  added: union switches, the validator's side effect);
* the round trip is exact: the result's JSON form validates back to an equal model;
* a request that fails leaves the input as it was.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Annotated, Any, Literal

import jsonpatch  # type: ignore[import-untyped]
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, computed_field, create_model, model_validator

from agent_payload import apply_change_request
from agent_payload._jsondata import json_equal
from agent_payload.diff import diff_payloads, to_json_patch
from agent_payload.errors import PayloadValidationError
from agent_payload.report import Change, Finding
from agent_payload.typed import check_round_trip

_names = itertools.count()


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    name: str = "c"
    lives: list[int] = []


class Dog(BaseModel):
    kind: Literal["dog"] = "dog"
    name: str = "d"


Pet = Annotated[Cat | Dog, Field(discriminator="kind")]

LEAVES: dict[str, tuple[Any, Any, st.SearchStrategy[Any]]] = {
    "int": (int, ..., st.integers(-5, 5)),
    "str": (str, ..., st.sampled_from(["a", "b", "DELETE", ""])),
    "bool": (bool, False, st.booleans()),
    "opt": (int | None, None, st.none() | st.integers(0, 3)),
    "lit": (Literal["x", "y"], "x", st.sampled_from(["x", "y"])),
}


@st.composite
def specs(draw: st.DrawFn, depth: int = 0) -> Any:
    choices = ["leaf", "leaf", "model", "list", "dict", "pet", "pet"] if depth < 2 else ["leaf"]
    kind = draw(st.sampled_from(choices))
    if kind == "leaf":
        return ("leaf", draw(st.sampled_from(sorted(LEAVES))))
    if kind == "pet":
        return ("pet",)
    if kind == "list":
        return ("list", draw(specs(depth + 1)))
    if kind == "dict":
        return ("dict", draw(specs(depth + 1)))
    fields = draw(st.lists(specs(depth + 1), min_size=1, max_size=4))
    aliased = draw(st.booleans())
    return ("model", tuple(fields), aliased)


def build(spec: Any) -> tuple[Any, Any]:
    """(type, default) for a spec; models get fresh class names."""
    kind = spec[0]
    if kind == "leaf":
        tp, default, _ = LEAVES[spec[1]]
        return tp, default
    if kind == "pet":
        return Pet, ...
    if kind == "list":
        inner, _ = build(spec[1])
        return list[inner], ...  # type: ignore[valid-type]
    if kind == "dict":
        inner, _ = build(spec[1])
        return dict[str, inner], ...  # type: ignore[valid-type]
    fields: dict[str, Any] = {}
    for i, sub in enumerate(spec[1]):
        tp, default = build(sub)
        alias = f"f{i}Alias" if spec[2] else None
        fields[f"f{i}"] = (tp, Field(default, alias=alias))
    model = create_model(
        f"M{next(_names)}",
        __config__=ConfigDict(populate_by_name=True),
        **fields,
    )
    return model, ...


@st.composite
def values(draw: st.DrawFn, spec: Any) -> Any:
    kind = spec[0]
    if kind == "leaf":
        return draw(LEAVES[spec[1]][2])
    if kind == "pet":
        if draw(st.booleans()):
            return {"kind": "cat", "name": "Tom", "lives": draw(st.lists(st.integers(0, 9)))}
        return {"kind": "dog", "name": "Rex"}
    if kind == "list":
        return draw(st.lists(values(spec[1]), max_size=3))
    if kind == "dict":
        keys = draw(st.lists(st.sampled_from(["k", "l", "m"]), max_size=3, unique=True))
        return {k: draw(values(spec[1])) for k in keys}
    return {
        (f"f{i}Alias" if spec[2] else f"f{i}"): draw(values(sub)) for i, sub in enumerate(spec[1])
    }


class RootBase(BaseModel):
    """Every root carries a validator with a side effect and a computed field."""

    model_config = ConfigDict(populate_by_name=True)
    tags: list[str] = []
    count: int = 0

    @model_validator(mode="after")
    def _count(self) -> RootBase:
        self.count = len(self.tags)  # a side effect of validation
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def size(self) -> int:
        return self.count * 2


@st.composite
def cases(draw: st.DrawFn) -> tuple[BaseModel, Any]:
    fields = draw(st.lists(specs(1), min_size=1, max_size=4))
    spec = ("model", tuple(fields), draw(st.booleans()))
    inner, _ = build(spec)
    root = create_model(f"Root{next(_names)}", __base__=RootBase, body=(inner, ...))
    data = {"tags": draw(st.lists(st.sampled_from(["t", "u"]), max_size=3))}
    data["body"] = draw(values(spec))
    payload = root.model_validate(data)
    before = payload.model_dump(mode="json", by_alias=True)
    target = draw(mutations(before))
    if draw(st.integers(0, 2)) == 0:  # union switches: every pet changes kind
        stack = [target]
        while stack:
            node = stack.pop()
            if isinstance(node, dict) and node.get("kind") in ("cat", "dog"):
                node["kind"] = "dog" if node["kind"] == "cat" else "cat"
            elif isinstance(node, dict | list):
                stack.extend(node.values() if isinstance(node, dict) else node)
    if draw(st.integers(0, 2)) == 0:  # the validator's side effect: count follows tags
        target["tags"] = [*before["tags"], "t"]
    if draw(st.integers(0, 3)) > 0:
        request: Any = diff_payloads(before, target)
    else:
        request = draw(raw_requests(before))
    return payload, request


@st.composite
def mutations(draw: st.DrawFn, data: Any) -> Any:
    """A few random edits of JSON data: leaves changed (sometimes to a wrong type), keys and
    elements deleted, elements appended, union branches switched."""
    out = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 4))):
        spots: list[list[tuple[Any, Any]]] = []
        stack: list[tuple[Any, list[tuple[Any, Any]]]] = [(out, [])]
        while stack:  # every node below the root, with the way to it
            node, way = stack.pop()
            if isinstance(node, dict | list):
                items = node.items() if isinstance(node, dict) else enumerate(node)
                for key, child in items:
                    spots.append([*way, (node, key)])
                    stack.append((child, [*way, (node, key)]))
        spots = [w for w in spots if w[0][1] not in ("size", "count") and len(w) > 1] or spots
        path = draw(st.sampled_from(spots))
        node = path[-1][0][path[-1][1]]
        parent, key = path[-1]
        action = draw(st.sampled_from(["set", "set", "delete", "append", "switch"]))
        if isinstance(node, dict) and node.get("kind") in ("cat", "dog") and draw(st.booleans()):
            action = "switch"
        if action == "set":
            same = {int: [0, 1, 7], str: ["x", "y", "a", "DELETE"], bool: [True, False]}
            if type(node) in same and draw(st.integers(0, 3)) > 0:
                parent[key] = draw(st.sampled_from(same[type(node)]))
            else:
                parent[key] = draw(st.sampled_from([0, "x", "dog", True, None, [], "DELETE"]))
        elif action == "delete":
            del parent[key]
        elif action == "append" and isinstance(node, list):
            node.append(copy.deepcopy(node[0]) if node else draw(st.sampled_from([1, "t"])))
        elif action == "switch" and isinstance(node, dict) and node.get("kind") in ("cat", "dog"):
            node["kind"] = "dog" if node["kind"] == "cat" else "cat"
    return out


@st.composite
def raw_requests(draw: st.DrawFn, data: dict[str, Any]) -> dict[str, Any]:
    """A small random change request aimed at real keys of the payload."""
    keys = sorted(data)
    bucket = draw(st.sampled_from(["updateElements", "removeElements", "newElements"]))
    key = draw(st.sampled_from(keys))
    value = draw(
        st.sampled_from(
            ["DELETE", 3, "t", [{}], {"kind": "dog"}, {"0": "DELETE"}, {"0": ["t"]}, {"1": ["u"]}]
        )
    )
    return {bucket: {key: value}}


def original_path(path: tuple[Any, ...], changes: list[Change]) -> tuple[Any, ...]:
    """Where a path of the result was in the original payload, read from a report (MERGE.md
    section 4: a delete at its original path, an add at its path in the result). In each array
    on the way, result index r is the k-th element that was not deleted, k being r less the
    adds before it; an element added whole keeps its result path."""
    out: list[Any] = []
    for depth, part in enumerate(path):
        if type(part) is int:
            here = [c for c in changes if len(c.path) == depth + 1]
            added = [
                c.path[depth] for c in here if c.op == "add" and c.path[:depth] == path[:depth]
            ]
            if part in added:
                return path
            gone = {
                c.path[depth] for c in here if c.op == "delete" and c.path[:depth] == tuple(out)
            }
            kept = part - sum(1 for a in added if isinstance(a, int) and a < part)
            survivors = (i for i in itertools.count() if i not in gone)
            part = next(itertools.islice(survivors, kept, None))
        out.append(part)
    return tuple(out)


class Owner(RootBase):
    pet: Pet


def test_an_update_after_a_deletion_is_judged_where_the_element_was() -> None:
    """An index map that deletes [8] and sets [10]: the guard judges the update at [10], where
    the element was, and the report names it at [9], where it is (found by the property below
    with ``make thorough``)."""
    lives = [0] * 9 + [1, 1]
    owner = Owner(pet={"kind": "cat", "name": "Tom", "lives": lives})  # type: ignore[arg-type]
    seen: list[Change] = []

    def guard(change: Change) -> list[Finding]:
        seen.append(change)
        return []

    request = {"updateElements": {"pet": {"lives": {"8": "DELETE", "10": 0}}}}
    result = apply_change_request(owner, request, guards=[guard])
    assert result.payload.model_dump()["pet"]["lives"] == [0] * 8 + [1, 0]
    assert seen == [
        Change("delete", ("pet", "lives", 8), 0, None),
        Change("update", ("pet", "lives", 10), 1, 0),
    ]
    assert result.report.changes == [
        Change("delete", ("pet", "lives", 8), 0, None),
        Change("update", ("pet", "lives", 9), 1, 0),
    ]
    assert original_path(("pet", "lives", 9), result.report.changes) == ("pet", "lives", 10)


@settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(cases())
def test_the_report_is_the_validated_difference_and_every_change_is_judged(
    case: tuple[BaseModel, Any],
) -> None:
    payload, request = case
    before = payload.model_dump(mode="json", by_alias=True)
    seen: list[Change] = []

    def guard(change: Change) -> list[Finding]:
        seen.append(change)
        return []

    try:
        result = apply_change_request(payload, request, guards=[guard])
    except PayloadValidationError:
        event("refused by validation")
        assert payload.model_dump(mode="json", by_alias=True) == before  # nothing changed
        return
    after = result.payload.model_dump(mode="json", by_alias=True)
    changes = result.report.changes
    event("applied" if changes else "applied, no change")
    if any(c.path == ("count",) for c in changes):
        event("a validator side effect reported")
    if any(c.path[-1:] == ("kind",) for c in changes):
        event("a union switch reported")
    if any(c.path[-1:] == ("lives",) and c.op == "delete" for c in changes):
        event("a union switch deleting a field reported")
    # The report is a diff of the input and the validated result.
    patched = jsonpatch.apply_patch(copy.deepcopy(before), to_json_patch(before, changes))
    assert json.dumps(patched, sort_keys=True) == json.dumps(after, sort_keys=True)
    assert all(not (c.op == "update" and json_equal(c.old, c.new)) for c in changes)
    if json_equal(before, after):
        assert changes == []
    # Every reported change was judged, or lies inside a judged one (a container set whole).
    # The report names an update or an add at its position in the result, a guard judges an
    # update at the element's original position (an index map that deletes [8] and sets [10]
    # reports the update at [9]), so each change is looked for at both.
    for change in changes:
        places = {change.path, original_path(change.path, changes)}
        assert any(
            place[: len(s.path)] == s.path and (s.op == change.op or s.path != place)
            for s in seen
            for place in places
        ), (change, seen)
    # The round trip is exact.
    check_round_trip(result.payload)
    again = type(result.payload).model_validate(after)
    assert again == result.payload


@st.composite
def model_pairs(draw: st.DrawFn) -> tuple[BaseModel, BaseModel]:
    fields = draw(st.lists(specs(1), min_size=1, max_size=4))
    spec = ("model", tuple(fields), True)  # aliased
    inner, _ = build(spec)
    root = create_model(f"Pair{next(_names)}", __base__=RootBase, body=(inner, ...))
    data = {"tags": draw(st.lists(st.sampled_from(["t", "u"]), max_size=3))}
    data["body"] = draw(values(spec))
    old = root.model_validate(data)
    target = draw(mutations(old.model_dump(mode="json", by_alias=True)))
    target.pop("size", None)
    try:
        new = root.model_validate(target)
    except Exception:
        new = root.model_validate({**data, "tags": [*data["tags"], "t"]})
    return old, new


@given(model_pairs())
def test_diff_payloads_of_aliased_models_merges_back(pair: tuple[BaseModel, BaseModel]) -> None:
    """Issue 17: aliased model pairs failed to merge back (657 of 1,500); now none do."""
    old, new = pair
    assert apply_change_request(old, diff_payloads(old, new)).payload == new
