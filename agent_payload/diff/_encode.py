"""``diff_payloads``: the walk over objects and arrays choosing the cheapest encoding, and the
assembly of the buckets into an ``AgentPayloadChangeRequest``; ``undo_change_request``, a diff."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

from agent_payload._jsondata import json_equal, kind_word, materialize
from agent_payload._paths import format_payload_path
from agent_payload.changes import DEFAULT_MARKERS, MARKER, AgentPayloadChangeRequest
from agent_payload.diff._context import _INF, _PARTS, _Ctx, _Enc, _only, _Part, _set_whole, _Shared
from agent_payload.diff._data import _MISSING, MAX_DIFF_DEPTH, _as_data, _dumps
from agent_payload.errors import ConfigurationError, InvalidPayloadError, LimitExceededError
from agent_payload.merge import _is_index_map
from agent_payload.report import MergeResult


def _diff_object(
    c: dict[str, Any], t: dict[str, Any], *, reach_n: bool, top: bool, depth: int, ctx: _Ctx
) -> _Enc | None:
    """Encode the change of object ``c`` (at path depth ``depth``) into object ``t``
    (None: impossible in place)."""
    if depth + 1 > MAX_DIFF_DEPTH:
        return None
    parts: dict[_Part, dict[str, Any]] = {"u": {}, "x": {}, "n": {}, "r": {}}
    costs = dict.fromkeys(_PARTS, 2)
    marker_cost = len(ctx.marker) + 2
    for k in c:
        if k not in t:
            parts["u"][k] = ctx.marker
            costs["u"] += len(_dumps(k)) + 2 + marker_cost
    for k, tv in t.items():
        if k in c:
            cv = c[k]
            if ctx.shared.same(cv, tv):
                continue
            cands = _key_candidates(cv, tv, reach_n=reach_n, top=top, depth=depth + 1, ctx=ctx)
        else:
            cands = _add_candidates(tv, reach_n=reach_n, top=top, depth=depth + 1, ctx=ctx)
        if not cands:
            return None
        key_cost = len(_dumps(k))
        best = min(cands, key=lambda e: e.entry_cost(key_cost))
        for part in _PARTS:
            value, cost = best.get(part)
            if value is not _MISSING:
                parts[part][k] = value
                costs[part] += key_cost + 2 + cost
    out = _Enc()
    for part in _PARTS:
        if parts[part]:
            out.set(part, parts[part], costs[part])
    return out


def _add_candidates(tv: Any, *, reach_n: bool, top: bool, depth: int, ctx: _Ctx) -> list[_Enc]:
    """Ways to add a missing key with value ``tv`` (listed in order of preference)."""
    cands: list[_Enc] = []
    if ctx.is_sensitive(tv):
        # A marker in updateElements deletes even on a missing key: only literal buckets.
        if reach_n:
            cands.append(_only(ctx, "n", tv, depth))
    elif reach_n and ctx.prefer_new:
        ctx.chose = True
        cands += [_only(ctx, "n", tv, depth), _only(ctx, "u", tv, depth)]
    else:
        cands.append(_only(ctx, "u", tv, depth))  # literal on a missing key (update_missing)
        if reach_n:
            cands.append(_only(ctx, "n", tv, depth))
    if top:
        cands.append(_only(ctx, "r", tv, depth))
    return cands


def _key_candidates(
    cv: Any, tv: Any, *, reach_n: bool, top: bool, depth: int, ctx: _Ctx
) -> list[_Enc]:
    """Ways to change the existing key's value ``cv`` into ``tv`` (not JSON-equal)."""
    cands: list[_Enc] = []
    if ctx.is_sensitive(tv):
        # newElements sets a primitive literally over any existing value (new_exists).
        if reach_n:
            cands.append(_only(ctx, "n", tv, depth))
        if top:
            cands.append(_only(ctx, "r", tv, depth))
        return cands
    if not isinstance(tv, dict | list):
        return [_only(ctx, "u", tv, depth)]  # a primitive or null update sets any value
    desc = _change(cv, tv, reach_n=reach_n, list_n=True, depth=depth, ctx=ctx)
    if desc is not None:
        cands.append(desc)
    elif reach_n and not tv and not isinstance(cv, dict | list):
        cands.append(_only(ctx, "n", tv, depth))  # {} over a primitive: new_exists
    # Setting the value whole: measured only as far as it could still be the cheapest.
    limit = min((e.entry_cost(0) + 64 for e in cands), default=_INF)
    cands.append(_set_whole(ctx, tv, depth, limit))
    if top and not (isinstance(cv, list) and _is_index_map(tv)):
        # (replaceElements refuses an index-map-shaped object over an array as ambiguous:
        # such a value is set whole through removeElements + updateElements instead)
        cands.append(_only(ctx, "r", tv, depth, limit))
    return cands


def _change(a: Any, b: Any, *, reach_n: bool, list_n: bool, depth: int, ctx: _Ctx) -> _Enc | None:
    """Change ``a`` into ``b`` (not JSON-equal, not a marker) where it stands, descending into
    containers of the same kind; None if impossible (an array element is then deleted and ``b``
    inserted in its place)."""
    if not isinstance(b, dict | list):
        return _only(ctx, "u", b, depth)
    if isinstance(b, dict):
        if isinstance(a, dict):
            return _diff_object(a, b, reach_n=reach_n, top=False, depth=depth, ctx=ctx)
        if isinstance(a, list) or not b:
            return None  # shape_mismatch, or {} which keeps the value
        return _only(ctx, "u", b, depth)  # a primitive replaced by a container
    if isinstance(a, list):
        return _diff_array(a, b, reach_n=reach_n, list_n=list_n, depth=depth, ctx=ctx)
    return None if isinstance(a, dict) else _only(ctx, "u", b, depth)


def _diff_array(
    c: list[Any], t: list[Any], *, reach_n: bool, list_n: bool, depth: int, ctx: _Ctx
) -> _Enc | None:
    """Encode the change of array ``c`` (at path depth ``depth``) into array ``t`` (None:
    impossible in place). ``reach_n``: newElements may be used here (index maps insert and
    descend, MERGE.md section 8); ``list_n``: a positional newElements list may append (not
    where the array is an element of an array: there newElements holds an index map)."""
    if depth + 1 > MAX_DIFF_DEPTH:
        return None
    n, m = len(c), len(t)
    shared = ctx.shared
    ck = shared.element_keys(c)
    tk = shared.element_keys(t)
    pairs, equal = shared.alignment(c, t)
    candidates = [shared.events(c, t, "lcs", pairs)]
    short = min(n, m)
    # Position by position too, when that is plausibly as cheap (few positions differ).
    if n + m <= 64 or (
        sum(1 for i in range(short) if ck[i] != tk[i]) + abs(n - m)
        <= 2 * ((n - equal) + (m - equal)) + 8
    ):
        positional = list(zip(range(short), range(short), strict=True))
        if positional != pairs:
            candidates.append(shared.events(c, t, "positional", positional))

    memo: dict[tuple[int, int, bool], _Enc | None] = {}

    def change_at(i: int, j: int, reach_n: bool) -> _Enc | None:
        # A marker at a position deletes the element; newElements reaches a nested array only
        # through an index map (MERGE.md section 8), never a list.
        key = (i, j, reach_n)
        if key not in memo:
            memo[key] = (
                None
                if ctx.is_sensitive(t[j])
                else _change(c[i], t[j], reach_n=reach_n, list_n=False, depth=depth + 1, ctx=ctx)
            )
        return memo[key]

    best: _Enc | None = None
    best_cost = 0
    for events in candidates:
        # Originals not paired are deleted, pairs that differ changed in place (or deleted and
        # inserted again), targets not paired inserted before the next kept original or appended.
        walked = _walk_events(c, t, events, change_at, reach_n=reach_n, depth=depth, ctx=ctx)
        if walked is None:
            continue
        cand = _array_buckets(t, n, *walked, reach_n=reach_n, list_n=list_n, depth=depth, ctx=ctx)
        if cand is not None and (best is None or cand.total() < best_cost):
            best, best_cost = cand, cand.total()
    return best


_Entries = dict[int, tuple[Any, int]]


def _walk_events(
    c: list[Any],
    t: list[Any],
    events: list[tuple[int, int, int, int]],
    change_at: Callable[[int, int, bool], _Enc | None],
    *,
    reach_n: bool,
    depth: int,
    ctx: _Ctx,
) -> tuple[_Entries, _Entries, _Entries, dict[int, list[int]]] | None:
    """One alignment's entries: deletions and in-place changes (``u``, ``x``), descents in
    newElements, insertion runs by key; None when it cannot be written here."""
    n = len(c)
    ck = ctx.shared.element_keys(c)
    tk = ctx.shared.element_keys(t)
    marker = ctx.marker
    marker_cost = len(marker) + 2
    item_depth = depth + 1  # an element's path depth
    u: dict[int, tuple[Any, int]] = {}
    x: dict[int, tuple[Any, int]] = {}
    n_entries: dict[int, tuple[Any, int]] = {}  # descents (values) and insertions (lists)
    runs: dict[int, list[int]] = {}  # insertion key -> the target indices inserted there
    prev_i = prev_j = -1
    deleted_upto = -1
    last = (-1, -1)
    for i, j, pi, pj in events:
        if (pi, pj) != last:  # the pair before was skipped: kept, equal
            prev_i, prev_j = pi, pj
        last = (i, j)
        for d in range(max(prev_i, deleted_upto) + 1, i):
            u[d] = (marker, marker_cost)
        deleted_upto = max(deleted_upto, i - 1)
        run_before = j - prev_j > 1
        enc: _Enc | None = None
        if i < n and ck[i] != tk[j] and not ctx.shared.same(c[i], t[j]):
            enc = change_at(i, j, reach_n)
            if enc is not None and enc.n is not _MISSING and run_before and i == prev_i + 1:
                # The insertion before i needs key i, which this element's descent holds.
                enc = change_at(i, j, False)
            if reach_n:
                # Deleting it and inserting t[j] instead: cheaper? (Not measured when the
                # change costs less than any insertion could.)
                change = _INF if enc is None else enc.entry_cost(len(str(i)) + 2)
                again = 2 * _size(t[j]) + marker_cost + len(str(i)) + 6
                if change > again:
                    again += ctx.lit(t[j], item_depth + 1, change) - 2 * _size(t[j]) - 1
                if change > again:
                    u[i] = (marker, marker_cost)  # delete it; t[j] joins the insertion run
                    deleted_upto = i
                    continue
            elif enc is None:
                return None
        if run_before:
            if not reach_n and i < n:
                return None
            descends = enc is not None and enc.n is not _MISSING
            runs[prev_i + 1 if descends else i] = list(range(prev_j + 1, j))
        if enc is not None:
            if enc.u is not _MISSING:
                u[i] = (enc.u, enc.cu)
            if enc.x is not _MISSING:
                x[i] = (enc.x, enc.cx)
            if enc.n is not _MISSING:
                n_entries[i] = (enc.n, enc.cn)
        prev_i, prev_j = i, j
    return u, x, n_entries, runs


def _array_buckets(
    t: list[Any],
    n: int,
    u: _Entries,
    x: _Entries,
    n_entries: _Entries,
    runs: dict[int, list[int]],
    *,
    reach_n: bool,
    list_n: bool,
    depth: int,
    ctx: _Ctx,
) -> _Enc | None:
    """The cheapest buckets for an array of ``n`` originals: insertion runs as a newElements
    index map, a positional newElements list, or appended past a positional updateElements."""
    item_depth = depth + 1  # an element's path depth
    x_val, x_cost = _cheaper_form(x, n)
    u_val, u_cost = _cheaper_form(u, n)
    options: list[_Enc] = []

    def option(uv: Any, cu: int, nv: Any, cn: int) -> None:
        options.append(_Enc(u=uv, x=x_val, n=nv, cu=cu, cx=x_cost, cn=cn))

    # Insertion runs: the key is the next kept original (n at the end), or the first deleted
    # original before it when that element's descent holds its key.
    tail = runs.pop(n, None)
    for key, targets in runs.items():
        n_entries[key] = _run_value(t, targets, item_depth + 1, ctx)
    if reach_n or tail is None:
        entries = dict(n_entries)
        if tail is not None:
            entries[n] = _run_value(t, tail, item_depth + 1, ctx)
        option(u_val, u_cost, *_index_map(entries))
        if (
            tail is not None
            and list_n
            and not n_entries
            and not any(isinstance(t[j], dict) and not t[j] for j in tail)
        ):
            # Appended only: a positional newElements list (its {} items would be skipped).
            option(u_val, u_cost, *_run_value(t, tail, item_depth, ctx))
    if tail is not None and not any(
        ctx.is_sensitive(t[j]) or (isinstance(t[j], dict) and not t[j]) for j in tail
    ):
        # Appended past the end of a positional updateElements array (update_append).
        positional: list[Any] = [{}] * n
        cost = 1 + 3 * n
        for i, (value, vcost) in u.items():
            positional[i] = value
            cost += vcost - 2
        for j in tail:
            positional.append(t[j])
            cost += ctx.lit(t[j], item_depth) + 1
        option(positional, cost, *_index_map(n_entries))
    return min(options, key=_Enc.total) if options else None


def _size(value: Any) -> int:
    """How many items a container holds (0 for a primitive): a cheap lower bound on length."""
    return len(value) if isinstance(value, dict | list) else 0


def _run_value(t: list[Any], targets: list[int], depth: int, ctx: _Ctx) -> tuple[Any, int]:
    """The list of inserted items (at path depth ``depth``) and its cost."""
    items = [t[j] for j in targets]
    return items, 1 + sum(ctx.lit(v, depth) + 1 for v in items)


def _index_map(entries: Mapping[int, tuple[Any, int]]) -> tuple[Any, int]:
    if not entries:
        return _MISSING, 0
    cost = 1
    for i, (_, vcost) in entries.items():
        cost += vcost + len(str(i)) + 4
    return {str(i): entries[i][0] for i in sorted(entries)}, cost


def _cheaper_form(entries: Mapping[int, tuple[Any, int]], length: int) -> tuple[Any, int]:
    """A positional array (``{}`` for untouched positions) or an index map, whichever is
    shorter (ties go to the positional form the seed teaches); ``_MISSING`` for none."""
    if not entries:
        return _MISSING, 0
    last = max(entries)
    pos_cost = 1 + sum(cost + 1 for _, cost in entries.values()) + 3 * (last + 1 - len(entries))
    index_map = _index_map(entries)
    if pos_cost > index_map[1]:
        return index_map
    positional: list[Any] = [{}] * (last + 1)
    for i, (value, _) in entries.items():
        positional[i] = value
    return positional, pos_cost


def _too_deep(before: Any, after: Any) -> LimitExceededError:
    """The refusal of a change that no change request can hold, naming where it is: the
    deepest first difference (depth first, one pass: any depth, linear time)."""
    path = _first_difference(before, after)
    where = format_payload_path(path)
    shown = where if len(where) <= 120 else f"{where[:50]}...{where[-50:]}"
    return LimitExceededError(
        f"diff_payloads: the change at {shown} (path depth {len(path)}) needs a change request "
        f"nested deeper than {MAX_DIFF_DEPTH} levels, the most an AgentPayloadChangeRequest "
        "holds (pydantic JsonValue). Diff the parts of the payload below it instead "
        "(diff_payloads(old_part, new_part)), or make the change in smaller steps.",
        limit="max_depth",
        value=len(path),
        maximum=MAX_DIFF_DEPTH,
        path=where,
    )


def _first_difference(a: Any, b: Any) -> list[str | int]:
    """The path of the first place (depth first) where ``a`` and ``b`` differ (a key or element
    on one side only, or unequal values not both containers of one kind); ``[]``: equal."""
    stack: list[tuple[Any, Any, Any]] = [(a, b, None)]  # (old, new, linked path)
    while stack:
        x, y, link = stack.pop()
        if isinstance(x, dict) and isinstance(y, dict):
            for k in reversed([k for k in y if k not in x] + [k for k in x if k not in y]):
                return [*materialize(link), k]
            stack.extend((x[k], y[k], (link, k)) for k in reversed(list(y)))
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            stack.extend((x[i], y[i], (link, i)) for i in range(len(x) - 1, -1, -1))
        elif not json_equal(x, y):
            return list(materialize(link))
    return []


def _assemble(enc: _Enc, reasoning: str | None) -> AgentPayloadChangeRequest:
    buckets = {
        "newElements": enc.n,
        "updateElements": enc.u,
        "removeElements": enc.x,
        "replaceElements": enc.r,
    }
    # A fresh copy: the request shares nothing with the payloads.
    wire = json.loads(_dumps({k: v for k, v in buckets.items() if v is not _MISSING}))
    if reasoning is not None:
        wire["reasoning"] = reasoning
    return AgentPayloadChangeRequest.model_validate(wire)


def diff_payloads(
    old: Any,
    new: Any,
    *,
    marker: str = MARKER,
    markers: Collection[str] | None = None,
    reasoning: str | None = None,
) -> AgentPayloadChangeRequest:
    """A change request that turns ``old`` into ``new`` under MERGE.md, the cheapest this module
    knows in minified characters (``reasoning`` copied into it).

    Merged with markers that include ``marker`` (the defaults do), it gives ``new`` with no
    conflict, for any JSON data of the same root kind; ``markers`` names every marker the merge
    will run with (default: ``DEFAULT_MARKERS`` plus ``marker``). Payloads: dicts, lists, ``None``
    (``{}``) or pydantic models. Raises ``InvalidPayloadError`` for non-JSON data or roots of
    different kinds, ``ConfigurationError`` for a bad marker, ``LimitExceededError`` for a change
    nested deeper than ``MAX_DIFF_DEPTH`` or a payload larger than the merge accepts."""
    if not isinstance(marker, str) or not marker:
        raise ConfigurationError(
            f"diff_payloads: expected a non-empty string as marker, found {marker!r}."
        )
    active = frozenset(markers) if markers is not None else DEFAULT_MARKERS | {marker}
    if marker not in active:
        raise ConfigurationError(
            f"diff_payloads: the marker {marker!r} is not among the merge's markers "
            f"{sorted(active)!r}; add it to markers or pick one of them."
        )
    before, plain_before, depth_before = _as_data(old, "old payload")
    after, plain_after, depth_after = _as_data(new, "new payload")
    if isinstance(before, dict) != isinstance(after, dict):
        raise InvalidPayloadError(
            f"diff_payloads: the old payload is {kind_word(before)} and the new one "
            f"{kind_word(after)}; a change request cannot change the kind of the root. Wrap both "
            "in an object to replace one by the other.",
            path=(),
        )
    shared = _Shared(plain=plain_before and plain_after, depth=max(depth_before, depth_after))
    best: AgentPayloadChangeRequest | None = None
    best_len = 0
    for prefer_new in (True, False):
        ctx = _Ctx(marker=marker, sensitive=active, prefer_new=prefer_new, shared=shared)
        enc = _diff_root(before, after, ctx)
        if enc.total() >= _INF:
            raise _too_deep(before, after)
        request = _assemble(enc, reasoning)
        size = len(_dumps(request.to_wire()))
        if best is None or size < best_len:
            best, best_len = request, size
        if not ctx.chose:
            break
    assert best is not None
    return best


def _diff_root(before: Any, after: Any, ctx: _Ctx) -> _Enc:
    if isinstance(before, dict):
        enc = _diff_object(before, after, reach_n=True, top=True, depth=0, ctx=ctx)
        assert enc is not None  # replaceElements can set any top-level key
        return enc
    enc = _diff_array(before, after, reach_n=True, list_n=True, depth=0, ctx=ctx)
    if after:  # an empty replaceElements is absent: [] is reached by deleting every element
        whole = _only(ctx, "r", after, 0, enc.total() if enc is not None else _INF)
        if enc is None or whole.cr + 18 < enc.total():
            return whole
    assert enc is not None  # deleting every element and inserting the rest always works
    return enc


def undo_change_request(
    before: Any, after: Any, *, marker: str = MARKER, markers: Collection[str] | None = None
) -> AgentPayloadChangeRequest:
    """The change request that turns ``after`` (the merged payload, or its ``MergeResult``) back
    into ``before``: ``diff_payloads(after, before)``, with a reasoning that says so."""
    merged = after.payload if isinstance(after, MergeResult) else after
    return diff_payloads(
        merged, before, marker=marker, markers=markers, reasoning="Undo the previous change."
    )
