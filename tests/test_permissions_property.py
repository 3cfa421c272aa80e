"""Property: whatever the payload, request and deny list, no effective change that the merge
applies touches a denied path, and the result equals the input at every denied path.

The checks here use an independent oracle (a plain recursive matcher and a plain recursive
diff), not the guard's own walk."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_payload.guards import Permissions
from agent_payload.merge import apply_change_request
from agent_payload.report import Change

KEYS = ["a", "b", "id", "0", "1"]
MARKER = "DELETE"

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["x", "y", ""]))


def _json(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.sampled_from(KEYS), children, max_size=4),
        ),
        max_leaves=14,
    )


payloads = st.dictionaries(st.sampled_from(KEYS), _json(scalars), max_size=5)
request_values = _json(st.one_of(scalars, st.just(MARKER), st.just({})))
buckets = st.dictionaries(st.sampled_from(KEYS), request_values, max_size=4)
requests = st.fixed_dictionaries(
    {},
    optional={
        "newElements": buckets,
        "updateElements": buckets,
        "removeElements": buckets,
        "replaceElements": buckets,
    },
)

# rule segments: (text, matcher) where matcher is ("key", k) | ("index", i) | ("any",) |
# ("any_index",) | ("deep",)
SEGMENTS = [
    *((k, ("key", k)) for k in ["a", "b", "id"]),
    ('["0"]', ("key", "0")),
    ("[0]", ("index", 0)),
    ("[1]", ("index", 1)),
    ("[*]", ("any_index",)),
    ("*", ("any",)),
    ("**", ("deep",)),
]


@st.composite
def rules(draw: st.DrawFn) -> tuple[str, tuple[tuple[Any, ...], ...]]:
    segments = draw(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3))
    text = ""
    for i, (seg_text, _) in enumerate(segments):
        if seg_text.startswith("["):
            text += seg_text
        else:
            text += seg_text if i == 0 else "." + seg_text
    return text, tuple(m for _, m in segments)


def _oracle_match(pattern: tuple[tuple[Any, ...], ...], path: tuple[Any, ...]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head[0] == "deep":
        return _oracle_match(rest, path) or (bool(path) and _oracle_match(pattern, path[1:]))
    if not path:
        return False
    seg = path[0]
    is_index = isinstance(seg, int)
    ok = (
        head[0] == "any"
        or (head[0] == "any_index" and is_index)
        or (head[0] == "key" and not is_index and seg == head[1])
        or (head[0] == "index" and is_index and seg == head[1])
    )
    return ok and _oracle_match(rest, path[1:])


def _denied(patterns: list[tuple[tuple[Any, ...], ...]], path: tuple[Any, ...]) -> bool:
    """A path is protected when a rule matches it or one of its ancestors."""
    return any(_oracle_match(p, path[:n]) for p in patterns for n in range(len(path) + 1))


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _touched(path: tuple[Any, ...], old: Any, new: Any, out: list[tuple[Any, ...]]) -> None:
    """Every path whose value differs between old and new (a plain recursive diff)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in set(old) | set(new):
            _touched((*path, k), old.get(k, _ABSENT), new.get(k, _ABSENT), out)
    elif isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            _touched(
                (*path, i),
                old[i] if i < len(old) else _ABSENT,
                new[i] if i < len(new) else _ABSENT,
                out,
            )
    elif old is _ABSENT and new is _ABSENT:
        return
    elif old is _ABSENT or new is _ABSENT or not _same(old, new):
        out.append(path)
        for side in (old, new):
            _all_paths(path, side, out)


_ABSENT: Any = object()


def _all_paths(path: tuple[Any, ...], value: Any, out: list[tuple[Any, ...]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((*path, k))
            _all_paths((*path, k), v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((*path, i))
            _all_paths((*path, i), v, out)


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for seg in path:
        if (isinstance(data, dict) and isinstance(seg, str) and seg in data) or (
            isinstance(data, list) and isinstance(seg, int) and seg < len(data)
        ):
            data = data[seg]
        else:
            return _ABSENT
    return data


def _change_paths(change: Change) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    old = _ABSENT if change.op == "add" else change.old
    new = _ABSENT if change.op == "delete" else change.new
    _touched(change.path, old, new, out)
    return out


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(payload=payloads, request=requests, deny=st.lists(rules(), min_size=1, max_size=3))
def test_no_applied_change_touches_a_denied_path(
    payload: dict[str, Any],
    request: dict[str, Any],
    deny: list[tuple[str, tuple[tuple[Any, ...], ...]]],
) -> None:
    """For random payloads, requests and deny lists: (1) no effective change in the report
    touches a denied path (by an independent matcher and diff); (2) the result equals the
    input at every denied path (paths through arrays are compared when no array element was
    deleted, since a deletion shifts later positions); (3) the input is never changed."""
    perms = Permissions(deny=[text for text, _ in deny])
    patterns = [pattern for _, pattern in deny]
    before = copy.deepcopy(payload)
    result = apply_change_request(payload, request, guards=[perms])
    assert payload == before

    for change in result.report.changes:
        for path in _change_paths(change):
            assert not _denied(patterns, path), (change, path, [t for t, _ in deny])

    shifted = any(
        c.op == "delete" and c.path and isinstance(c.path[-1], int) for c in result.report.changes
    )
    candidates: list[tuple[Any, ...]] = []
    _all_paths((), before, candidates)
    _all_paths((), result.payload, candidates)
    for path in candidates:
        if not any(_oracle_match(p, path) for p in patterns):
            continue
        if shifted and any(isinstance(seg, int) for seg in path):
            continue
        assert _same(_get(before, path), _get(result.payload, path)), (path, request)


@given(payload=payloads, request=requests, allow=st.lists(rules(), min_size=0, max_size=3))
def test_every_applied_change_is_inside_the_allow_list(
    payload: dict[str, Any],
    request: dict[str, Any],
    allow: list[tuple[str, tuple[tuple[Any, ...], ...]]],
) -> None:
    """For random allow lists, every path an applied change touches lies inside an allowed
    path (a rule matches it or an ancestor)."""
    perms = Permissions(allow=[text for text, _ in allow])
    patterns = [pattern for _, pattern in allow]
    result = apply_change_request(payload, request, guards=[perms])
    for change in result.report.changes:
        for path in _change_paths(change):
            assert _denied(patterns, path), (change, path, [t for t, _ in allow])


@given(
    path=st.lists(st.one_of(st.sampled_from(KEYS), st.integers(0, 2)), max_size=5),
    rule=rules(),
)
def test_rule_matching_agrees_with_the_oracle(
    path: list[str | int], rule: tuple[str, tuple[tuple[Any, ...], ...]]
) -> None:
    """The guard's rule matcher and the plain recursive matcher agree on every path."""
    from agent_payload.guards import parse_rule

    assert parse_rule(rule[0]).matches(tuple(path)) == _oracle_match(rule[1], tuple(path))
