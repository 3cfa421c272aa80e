"""Compute change requests from payload pairs; export merges as RFC 6902; undo merges.

* ``diff_payloads(old, new)`` returns an ``AgentPayloadChangeRequest`` that turns ``old`` into
  ``new`` under MERGE.md, choosing the cheaper encoding wherever there is a choice (fewest
  characters of minified JSON, a close proxy for tokens): a positional update with ``{}``
  placeholders or an index map, a descent into a subtree or setting it whole, appending
  through ``newElements`` or past the end of ``updateElements``, ``replaceElements`` for
  top-level keys (or the whole array at an array root).
* ``to_json_patch(before, result)`` turns a merge's effective changes into an RFC 6902 JSON
  Patch that gives exactly the merged payload when applied to ``before``.
* ``undo_change_request(before, after)`` is the change request that restores ``before``.

Markers in the data. A change request written by ``diff_payloads`` is meant to be merged with
``markers`` holding ``marker`` (the default ``DEFAULT_MARKERS`` holds ``"DELETE"``). Strings
that are markers of the merge (``markers``, by default ``DEFAULT_MARKERS`` plus ``marker``) are
never written where the merge would read them as markers: such a value is written literally,
through ``newElements`` on an existing key, ``replaceElements``, or inside added content (a
whole subtree set at its nearest object key, which the merge takes literally). So the diff is
correct for any data, with the default markers; a marker that the data does not hold (for
example ``merge.choose_marker(new)``, merged with ``markers={that_marker}``) only makes it
cheaper when the data holds marker strings.

``{}`` as data: an update value ``{}`` changes nothing on an existing key, so a value that
must become ``{}`` is set whole (the key is removed in ``removeElements`` and given again in
``updateElements``, which the merge takes literally), or its keys are deleted one by one,
whichever is cheaper. Array elements that cannot be changed in place (a container of the
other kind, ``{}`` over a primitive, a marker string as a value) end the in-place part of the
array: the rest is deleted and appended again, or the array is set whole at its nearest
object key (``replaceElements`` for an array root).

Not every pair has a change request: the root cannot change kind (an object payload stays an
object), and ``None`` stands for ``{}`` as it does in the merge. Payloads deeper than
``MAX_DIFF_DEPTH`` levels are refused with ``LimitExceededError``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any, Literal

from agent_payload._jsondata import format_payload_path, json_data
from agent_payload.changes import DEFAULT_MARKERS, MARKER, AgentPayloadChangeRequest
from agent_payload.errors import ConfigurationError, InvalidPayloadError, LimitExceededError
from agent_payload.report import Change, MergeReport, MergeResult

__all__ = [
    "MAX_DIFF_DEPTH",
    "diff_payloads",
    "json_equal",
    "json_pointer",
    "to_json_patch",
    "undo_change_request",
]

MAX_DIFF_DEPTH = 200
"""Deepest payload ``diff_payloads`` accepts: it recurses once per level, and
``AgentPayloadChangeRequest`` (pydantic ``JsonValue``) holds values about 250 levels deep."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()

# --- JSON helpers ------------------------------------------------------------------------------


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` differs from ``1``, ``1`` equals ``1.0``, key order is ignored."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, bool) or isinstance(y, bool):
            if not (isinstance(x, bool) and isinstance(y, bool) and x == y):
                return False
        elif isinstance(x, int | float) and isinstance(y, int | float):
            if x != y:
                return False
        elif isinstance(x, str) or isinstance(y, str) or x is None or y is None:
            if not (type(x) is type(y) and x == y):
                return False
        elif isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        else:
            return False
    return True


def _canonical(value: Any) -> Any:
    """A form where JSON-equal values dump to the same string (integral floats as ints)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return [_canonical(v) for v in value]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _check_json(value: Any, what: str) -> None:
    """Raise InvalidPayloadError (naming the path) for non-JSON data or excessive depth."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if len(path) > MAX_DIFF_DEPTH:
            where = _show(path)
            where = where if len(where) <= 80 else where[:77] + "..."
            raise LimitExceededError(
                f"{what} is nested deeper than {MAX_DIFF_DEPTH} levels at {where}; "
                "diff_payloads recurses once per level. Diff a shallower part of it instead.",
                limit="max_depth",
                value=len(path),
                maximum=MAX_DIFF_DEPTH,
                path=_show(path),
            )
        if isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str):
                    raise InvalidPayloadError(
                        f"{what}: expected string keys at {_show(path)}, found the key {k!r} "
                        f"({type(k).__name__}); convert the keys to strings.",
                        path=path,
                    )
                stack.append((v, (*path, k)))
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
        elif isinstance(node, float):
            if node != node or node in (float("inf"), float("-inf")):
                raise InvalidPayloadError(
                    f"{what}: expected a finite number at {_show(path)}, found {node!r}; "
                    "JSON has no NaN or infinity.",
                    path=path,
                )
        elif not (node is None or isinstance(node, bool | int | str)):
            raise InvalidPayloadError(
                f"{what}: expected JSON data at {_show(path)}, found a {type(node).__name__}; "
                "pass dicts, lists, strings, numbers, booleans and None (or a pydantic model).",
                path=path,
            )


def _show(path: Sequence[str | int]) -> str:
    return format_payload_path(path) or "the root"


def _as_data(value: Any, what: str) -> Any:
    """Pydantic models dumped in JSON mode; ``None`` is ``{}``; the root must be a container."""
    value = json_data(value)
    if value is None:
        return {}
    if not isinstance(value, dict | list):
        raise InvalidPayloadError(
            f"{what}: expected an object or an array at the root, found a "
            f"{type(value).__name__}; wrap the value in an object.",
            path=(),
        )
    _check_json(value, what)
    return value


# --- the diff ----------------------------------------------------------------------------------

_Part = Literal["u", "x", "n", "r"]
_PARTS: tuple[_Part, ...] = ("u", "x", "n", "r")


@dataclass(slots=True)
class _Enc:
    """What a node contributes to each bucket (``_MISSING`` when nothing) and its cost in
    characters (the cost of the value written in that bucket, without the key above it)."""

    u: Any = _MISSING
    x: Any = _MISSING
    n: Any = _MISSING
    r: Any = _MISSING
    cu: int = 0
    cx: int = 0
    cn: int = 0
    cr: int = 0

    def get(self, part: _Part) -> tuple[Any, int]:
        if part == "u":
            return self.u, self.cu
        if part == "x":
            return self.x, self.cx
        if part == "n":
            return self.n, self.cn
        return self.r, self.cr

    def set(self, part: _Part, value: Any, cost: int) -> None:
        if part == "u":
            self.u, self.cu = value, cost
        elif part == "x":
            self.x, self.cx = value, cost
        elif part == "n":
            self.n, self.cn = value, cost
        else:
            self.r, self.cr = value, cost

    def entry_cost(self, key_cost: int) -> int:
        """Characters to write this node under one key in every bucket it touches."""
        total = 0
        for part in _PARTS:
            value, cost = self.get(part)
            if value is not _MISSING:
                total += cost + key_cost + 2
        return total


@dataclass(slots=True)
class _Ctx:
    marker: str
    sensitive: frozenset[str]
    prefer_new: bool
    lengths: dict[int, int] = field(default_factory=dict)

    def lit(self, value: Any) -> int:
        """Characters of ``value`` written literally (memoized for containers)."""
        if isinstance(value, dict | list):
            key = id(value)
            cached = self.lengths.get(key)
            if cached is None:
                cached = len(_dumps(value))
                self.lengths[key] = cached
            return cached
        return len(_dumps(value))

    def is_sensitive(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.sensitive


def _only(ctx: _Ctx, part: _Part, value: Any) -> _Enc:
    enc = _Enc()
    enc.set(part, value, ctx.lit(value))
    return enc


def _set_whole(ctx: _Ctx, value: Any) -> _Enc:
    """Remove the key, then give it again in updateElements: taken literally by the merge."""
    return _Enc(u=value, cu=ctx.lit(value), x=ctx.marker, cx=len(ctx.marker) + 2)


class _ObjectBuilder:
    """Collects the entries of one object node in each bucket, with running costs."""

    __slots__ = ("costs", "parts")

    def __init__(self) -> None:
        self.parts: dict[_Part, dict[str, Any]] = {"u": {}, "x": {}, "n": {}, "r": {}}
        self.costs: dict[_Part, int] = {"u": 2, "x": 2, "n": 2, "r": 2}

    def add(self, key: str, key_cost: int, enc: _Enc) -> None:
        for part in _PARTS:
            value, cost = enc.get(part)
            if value is not _MISSING:
                self.parts[part][key] = value
                self.costs[part] += key_cost + 2 + cost

    def build(self) -> _Enc:
        enc = _Enc()
        for part in _PARTS:
            if self.parts[part]:
                enc.set(part, self.parts[part], self.costs[part])
        return enc


def _diff_object(
    c: dict[str, Any], t: dict[str, Any], *, reach_n: bool, top: bool, ctx: _Ctx
) -> _Enc | None:
    """Encode the change of object ``c`` into object ``t`` (None: impossible in place)."""
    out = _ObjectBuilder()
    marker_cost = len(ctx.marker) + 2
    for k in c:
        if k not in t:
            out.add(k, len(_dumps(k)), _Enc(u=ctx.marker, cu=marker_cost))
    for k, tv in t.items():
        if k in c:
            cv = c[k]
            if json_equal(cv, tv):
                continue
            cands = _key_candidates(cv, tv, reach_n=reach_n, top=top, ctx=ctx)
        else:
            cands = _add_candidates(tv, reach_n=reach_n, top=top, ctx=ctx)
        if not cands:
            return None
        key_cost = len(_dumps(k))
        out.add(k, key_cost, min(cands, key=lambda e: e.entry_cost(key_cost)))
    return out.build()


def _add_candidates(tv: Any, *, reach_n: bool, top: bool, ctx: _Ctx) -> list[_Enc]:
    """Ways to add a missing key with value ``tv`` (listed in order of preference)."""
    cands: list[_Enc] = []
    if ctx.is_sensitive(tv):
        # A marker in updateElements deletes even on a missing key: only literal buckets.
        if reach_n:
            cands.append(_only(ctx, "n", tv))
    elif reach_n and ctx.prefer_new:
        cands += [_only(ctx, "n", tv), _only(ctx, "u", tv)]
    else:
        cands.append(_only(ctx, "u", tv))  # literal on a missing key (update_missing)
        if reach_n:
            cands.append(_only(ctx, "n", tv))
    if top:
        cands.append(_only(ctx, "r", tv))
    return cands


def _key_candidates(cv: Any, tv: Any, *, reach_n: bool, top: bool, ctx: _Ctx) -> list[_Enc]:
    """Ways to change the existing key's value ``cv`` into ``tv`` (not JSON-equal)."""
    cands: list[_Enc] = []
    if ctx.is_sensitive(tv):
        # newElements sets a primitive literally over any existing value (new_exists).
        if reach_n:
            cands.append(_only(ctx, "n", tv))
        if top:
            cands.append(_only(ctx, "r", tv))
        return cands
    if not isinstance(tv, dict | list):
        cands.append(_only(ctx, "u", tv))  # a primitive or null update sets any value
        return cands
    if isinstance(tv, dict):
        if isinstance(cv, dict):
            desc = _diff_object(cv, tv, reach_n=reach_n, top=False, ctx=ctx)
            if desc is not None:
                cands.append(desc)
        elif not isinstance(cv, list):
            if tv:
                cands.append(_only(ctx, "u", tv))  # a primitive replaced by a container
            elif reach_n:
                cands.append(_only(ctx, "n", tv))  # {} over a primitive: new_exists
    else:
        if isinstance(cv, list):
            desc = _diff_array(cv, tv, reach_n=reach_n, ctx=ctx)
            if desc is not None:
                cands.append(desc)
        elif not isinstance(cv, dict):
            cands.append(_only(ctx, "u", tv))
    cands.append(_set_whole(ctx, tv))
    if top:
        cands.append(_only(ctx, "r", tv))
    return cands


def _elem_change(a: Any, b: Any, ctx: _Ctx) -> _Enc | None:
    """Change array element ``a`` into ``b`` in place (not JSON-equal); None if impossible."""
    if ctx.is_sensitive(b):
        return None  # a marker at a position deletes the element
    if not isinstance(b, dict | list):
        return _only(ctx, "u", b)
    if isinstance(b, dict):
        if isinstance(a, dict):
            return _diff_object(a, b, reach_n=False, top=False, ctx=ctx)
        if isinstance(a, list) or not b:
            return None  # shape_mismatch, or {} which keeps the element
        return _only(ctx, "u", b)
    if isinstance(a, list):
        return _diff_array(a, b, reach_n=False, ctx=ctx)
    if isinstance(a, dict):
        return None
    return _only(ctx, "u", b)


def _alignments(c: list[Any], t: list[Any]) -> Iterator[list[int]]:
    """Candidate alignments: the original indices kept for ``t[0]``, ``t[1]``, ... in order;
    every other original is deleted and the rest of ``t`` is appended."""
    n, m = len(c), len(t)
    yield list(range(min(n, m)))
    ck = [_dumps(_canonical(v)) for v in c]
    tk = [_dumps(_canonical(v)) for v in t]
    matcher = SequenceMatcher(None, ck, tk, autojunk=False)
    kept: list[int] = []
    for tag, a1, a2, b1, b2 in matcher.get_opcodes():
        if tag == "equal":
            kept.extend(range(a1, a2))
            continue
        if tag == "delete":
            continue
        paired = min(a2 - a1, b2 - b1)
        kept.extend(range(a1, a1 + paired))
        if b2 - b1 > paired:
            # Items inserted here: arrays only grow at the end. Either append everything from
            # here on, or shift: update the following originals position by position.
            yield list(kept)
            start_c, start_t = a1 + paired, b1 + paired
            yield kept + list(range(start_c, start_c + min(n - start_c, m - start_t)))
            return
    yield kept


def _diff_array(c: list[Any], t: list[Any], *, reach_n: bool, ctx: _Ctx) -> _Enc | None:
    """Encode the change of array ``c`` into array ``t`` (None: impossible in place)."""
    memo: dict[tuple[int, int], _Enc | None] = {}
    best: _Enc | None = None
    best_cost = 0
    seen: set[tuple[int, ...]] = set()
    for alignment in _alignments(c, t):
        kept = alignment
        updates: dict[int, _Enc] = {}
        for j, i in enumerate(kept):
            if json_equal(c[i], t[j]):
                continue
            if (i, j) not in memo:
                memo[(i, j)] = _elem_change(c[i], t[j], ctx)
            enc = memo[(i, j)]
            if enc is None:
                kept = kept[:j]  # cut here: delete the rest, append it again
                break
            updates[i] = enc
        key = tuple(kept)
        if key in seen:
            continue
        seen.add(key)
        cand = _encode_array(c, t, kept, updates, reach_n=reach_n, ctx=ctx)
        if cand is None:
            continue
        cost = sum(cand.get(p)[1] + 16 for p in _PARTS if cand.get(p)[0] is not _MISSING)
        if best is None or cost < best_cost:
            best, best_cost = cand, cost
    return best


def _encode_array(
    c: list[Any],
    t: list[Any],
    kept: list[int],
    updates: Mapping[int, _Enc],
    *,
    reach_n: bool,
    ctx: _Ctx,
) -> _Enc | None:
    kept_set = set(kept)
    u_entries: dict[int, tuple[Any, int]] = {}
    x_entries: dict[int, tuple[Any, int]] = {}
    marker_cost = len(ctx.marker) + 2
    for i in range(len(c)):
        if i not in kept_set:
            u_entries[i] = (ctx.marker, marker_cost)
        elif i in updates:
            enc = updates[i]
            if enc.u is not _MISSING:
                u_entries[i] = (enc.u, enc.cu)
            if enc.x is not _MISSING:
                x_entries[i] = (enc.x, enc.cx)
    appended = t[len(kept) :]
    if any(isinstance(v, dict) and not v for v in appended):
        return None  # {} cannot be appended: newElements skips it, updateElements refuses it
    out = _Enc()
    if x_entries:
        out.x, out.cx = _cheaper_form(x_entries, len(c))
    tail_ok = not any(ctx.is_sensitive(v) for v in appended)
    options: list[tuple[int, Any, int, Any, int]] = []  # (total, u, cu, n, cn)
    if not appended or reach_n:
        u_val, u_cost = _cheaper_form(u_entries, len(c)) if u_entries else (_MISSING, 0)
        n_val: Any = list(appended) if appended else _MISSING
        n_cost = ctx.lit(n_val) if appended else 0
        options.append((u_cost + n_cost + (16 if appended else 0), u_val, u_cost, n_val, n_cost))
    if appended and tail_ok:
        positional: list[Any] = [{}] * len(c)
        cost = 1 + 3 * len(c)
        for i, (value, vcost) in u_entries.items():
            positional[i] = value
            cost += vcost - 2
        positional.extend(appended)
        cost += sum(ctx.lit(v) + 1 for v in appended)
        options.append((cost, positional, cost, _MISSING, 0))
    if not options:
        return None
    _, out.u, out.cu, out.n, out.cn = min(options, key=lambda o: o[0])
    return out


def _cheaper_form(entries: Mapping[int, tuple[Any, int]], length: int) -> tuple[Any, int]:
    """A positional array (``{}`` for untouched positions) or an index map, whichever is
    shorter (ties go to the positional form the seed teaches)."""
    last = max(entries)
    positional: list[Any] = [{}] * (last + 1)
    pos_cost = 1
    map_cost = 1
    for i, (value, cost) in entries.items():
        positional[i] = value
        pos_cost += cost + 1
        map_cost += cost + len(str(i)) + 4
    pos_cost += 3 * (last + 1 - len(entries))
    if pos_cost <= map_cost:
        return positional, pos_cost
    return {str(i): entries[i][0] for i in sorted(entries)}, map_cost


def _assemble(enc: _Enc, reasoning: str | None) -> AgentPayloadChangeRequest[Any]:
    wire: dict[str, Any] = {}
    if enc.n is not _MISSING:
        wire["newElements"] = enc.n
    if enc.u is not _MISSING:
        wire["updateElements"] = enc.u
    if enc.x is not _MISSING:
        wire["removeElements"] = enc.x
    if enc.r is not _MISSING:
        wire["replaceElements"] = enc.r
    # A fresh copy: the request shares nothing with the payloads.
    wire = json.loads(_dumps(wire))
    if reasoning is not None:
        wire["reasoning"] = reasoning
    return AgentPayloadChangeRequest[Any].model_validate(wire)


def diff_payloads(
    old: Any,
    new: Any,
    *,
    marker: str = MARKER,
    markers: Collection[str] | None = None,
    reasoning: str | None = None,
) -> AgentPayloadChangeRequest[Any]:
    """A change request that turns ``old`` into ``new`` under MERGE.md.

    Merge it with markers that include ``marker`` (the default markers do): ``apply_change_
    request(old, diff_payloads(old, new)).payload == new`` with no conflict, for any JSON
    data of the same root kind. ``markers`` names every marker the merge will run with
    (default: ``DEFAULT_MARKERS`` plus ``marker``); data equal to one of them is written where
    the merge takes it literally. Payloads may be dicts, lists, ``None`` (``{}``) or pydantic
    models (dumped in JSON mode). The request is the cheapest this module knows in minified
    characters; ``reasoning`` is copied into it.

    Raises ``InvalidPayloadError`` for non-JSON data or roots of different kinds (a change
    request cannot turn an object payload into an array), ``ConfigurationError`` for a bad
    marker and ``LimitExceededError`` beyond ``MAX_DIFF_DEPTH`` levels.
    """
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
    before = _as_data(old, "old payload")
    after = _as_data(new, "new payload")
    if isinstance(before, dict) != isinstance(after, dict):
        raise InvalidPayloadError(
            f"diff_payloads: the old payload is an {_kind(before)} and the new one an "
            f"{_kind(after)}; a change request cannot change the kind of the root. Wrap both "
            "in an object to replace one by the other.",
            path=(),
        )
    best: AgentPayloadChangeRequest[Any] | None = None
    best_len = 0
    for prefer_new in (True, False):
        ctx = _Ctx(marker=marker, sensitive=active, prefer_new=prefer_new)
        enc = _diff_root(before, after, ctx)
        request = _assemble(enc, reasoning)
        size = len(_dumps(request.to_wire()))
        if best is None or size < best_len:
            best, best_len = request, size
    assert best is not None
    return best


def _kind(value: Any) -> str:
    return "object" if isinstance(value, dict) else "array"


def _diff_root(before: Any, after: Any, ctx: _Ctx) -> _Enc:
    if isinstance(before, dict):
        enc = _diff_object(before, after, reach_n=True, top=True, ctx=ctx)
        assert enc is not None  # replaceElements can set any top-level key
        return enc
    enc = _diff_array(before, after, reach_n=True, ctx=ctx)
    if after:  # an empty replaceElements is absent: [] is reached by deleting every element
        whole = _only(ctx, "r", after)
        if enc is None or whole.cr + 18 < sum(
            enc.get(p)[1] + 16 for p in _PARTS if enc.get(p)[0] is not _MISSING
        ):
            return whole
    assert enc is not None  # deleting every element always works
    return enc


# --- RFC 6902 export ---------------------------------------------------------------------------


def json_pointer(path: Sequence[str | int]) -> str:
    """The RFC 6901 JSON Pointer of a payload path (``~`` and ``/`` escaped)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _changes_of(source: MergeResult[Any] | MergeReport | Sequence[Change]) -> list[Change]:
    if isinstance(source, MergeResult):
        return list(source.report.changes)
    if isinstance(source, MergeReport):
        return list(source.changes)
    return list(source)


def _path_key(path: Sequence[str | int]) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in path)


def to_json_patch(
    before: Any,
    changes: MergeResult[Any] | MergeReport | Sequence[Change],
    *,
    test: bool = False,
) -> list[dict[str, Any]]:
    """An RFC 6902 JSON Patch doing exactly what a merge did.

    ``changes`` is the merge's result, its report, or the report's ``changes``. Deletes refer
    to the original payload and adds/updates to the result (MERGE.md section 6), so the patch
    removes first, deepest and highest index first (later indices are gone before earlier ones
    move), then replaces and adds in ascending path order (appended items arrive in order).
    ``jsonpatch.apply_patch(before, patch)`` equals the merged payload. With ``test=True``
    each remove and replace is preceded by a ``test`` of the old value, so the patch refuses
    to apply to a payload that is not ``before``.

    ``before`` (the payload the merge started from) is not read: the report's paths and
    values are all the patch needs. It is part of the signature so that a call names both
    ends of the patch.
    """
    del before  # the report's paths and values are all that is needed
    changes = _changes_of(changes)
    ops: list[dict[str, Any]] = []
    deletes = sorted(
        (ch for ch in changes if ch.op == "delete"),
        key=lambda ch: _path_key(ch.path),
        reverse=True,
    )
    for ch in deletes:
        pointer = json_pointer(ch.path)
        if test:
            ops.append({"op": "test", "path": pointer, "value": _copy(ch.old)})
        ops.append({"op": "remove", "path": pointer})
    writes = sorted(
        (ch for ch in changes if ch.op != "delete"),
        key=lambda ch: _path_key(ch.path),
    )
    for ch in writes:
        pointer = json_pointer(ch.path)
        if ch.op == "update":
            if test:
                ops.append({"op": "test", "path": pointer, "value": _copy(ch.old)})
            ops.append({"op": "replace", "path": pointer, "value": _copy(ch.new)})
        else:
            ops.append({"op": "add", "path": pointer, "value": _copy(ch.new)})
    return ops


def _copy(value: Any) -> Any:
    return json.loads(_dumps(value))


# --- undo --------------------------------------------------------------------------------------


def undo_change_request(
    before: Any,
    after: Any,
    *,
    marker: str = MARKER,
    markers: Collection[str] | None = None,
) -> AgentPayloadChangeRequest[Any]:
    """The change request that turns the merged payload back into ``before``.

    ``after`` is the merged payload or the ``MergeResult``. Applying the returned request to
    the merged payload (with markers holding ``marker``) gives back ``before``: it is
    ``diff_payloads(after, before)``, with a reasoning that says so.
    """
    merged = after.payload if isinstance(after, MergeResult) else after
    return diff_payloads(
        merged, before, marker=marker, markers=markers, reasoning="Undo the previous change."
    )
