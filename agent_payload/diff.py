"""Compute change requests from payload pairs; export merges as RFC 6902; undo merges.

* ``diff_payloads(old, new)`` returns an ``AgentPayloadChangeRequest`` that turns ``old`` into
  ``new`` under MERGE.md, choosing the cheaper encoding wherever there is a choice (fewest
  characters of minified JSON, a close proxy for tokens): a positional update with ``{}``
  placeholders or an index map, a descent into a subtree or setting it whole, appending
  through ``newElements`` or past the end of ``updateElements``, inserting through a
  ``newElements`` index map (MERGE.md section 8), ``replaceElements`` for top-level keys (or
  the whole array at an array root).
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
whichever is cheaper.

Arrays. The old and new elements are aligned by a longest common subsequence of element keys
(``marshal`` bytes of each element, or canonical JSON for data holding subclasses of the JSON
types): common prefix and suffix first, then patience anchors (elements unique on both sides,
their longest increasing run found by patience sorting, O(n log n)) splitting the rest into
regions, each small region solved exactly by dynamic programming; a work budget proportional
to the input bounds the whole. Between two matched elements the leftovers are paired in order.
Each pair that differs is changed in place, or deleted and inserted again when that is cheaper
(or the only way: a container of the other kind, ``{}`` over a primitive, a marker string as
the new element); unpaired originals are deleted by their original position; unpaired new
elements are inserted before the next kept original through a ``newElements`` index map
(MERGE.md section 8), or appended (a ``newElements`` list, or past the end of a positional
``updateElements``). So an insertion in the middle costs the inserted items, a move one
deletion plus the moved value, and a reorder the same per moved element. The element-by-element
(positional) alignment is tried too when few positions differ, and the cheaper wins. One key
of an index map either inserts before element k or descends into it: when both are wanted,
the insertion takes the key of a deleted original in between, or element k is written without
``newElements`` (or deleted and inserted again).

Not every pair has a change request: the root cannot change kind (an object payload stays an
object), and ``None`` stands for ``{}`` as it does in the merge. Payloads may be as deep as
the merge accepts (``merge.Limits``; every walk over a whole payload is iterative); what is
limited is the request: a change that needs a request nested deeper than ``MAX_DIFF_DEPTH``
levels (the path to it, plus the depth of the value written there) is refused with
``LimitExceededError`` naming where, because ``AgentPayloadChangeRequest`` holds about 250
levels (pydantic ``JsonValue``) and a deeper request could not be returned, validated or
serialised. The recursion of the diff follows only what changed and stops at that depth, so it
never meets Python's recursion limit.
"""

from __future__ import annotations

import json
import marshal
import math
import sys
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, pairwise, repeat
from typing import Any, Literal

from agent_payload._jsondata import format_payload_path, json_data, locate_problem, materialize
from agent_payload.changes import DEFAULT_MARKERS, MARKER, AgentPayloadChangeRequest
from agent_payload.errors import ConfigurationError, InvalidPayloadError, LimitExceededError
from agent_payload.merge import DEFAULT_LIMITS, _is_index_map
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
"""Deepest change request ``diff_payloads`` writes (containers nested in one bucket):
``AgentPayloadChangeRequest`` (pydantic ``JsonValue``) holds values about 250 levels deep and
no deeper. Payloads may be deeper (as deep as the merge accepts) where nothing changes."""


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


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_KEY_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=True
)


def _dumps(value: Any) -> str:
    """Minified JSON (one encoder made once: ``json.dumps`` with options builds one per call;
    plain primitives directly, as the encoder writes them)."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    return _ENCODER.encode(value)


_PLAIN_SCALARS: frozenset[type] = frozenset({str, int, bool, type(None)})
_SAME_IF_EQUAL: frozenset[type] = frozenset({str, int, bool, float})


def _plain_json(value: Any) -> int | None:
    """The depth of ``value`` (containers nested, see ``_depth``) when it is JSON data made of
    exactly dict, list, str, int, float, bool and None (no subclasses), with string keys and
    finite floats; None means: look closer. Iterative, level by level, and bounded by
    ``Limits.max_nodes`` (so a cycle ends it)."""
    level = [value]
    depth = 0
    budget = DEFAULT_LIMITS.max_nodes
    while level:
        depth += 1
        below: list[Any] = []
        push = below.append
        for node in level:
            budget -= len(node)
            if budget < 0:
                return None
            if type(node) is dict:
                for k in node:
                    if type(k) is not str:
                        return None
                node = node.values()
            for v in node:
                tv = type(v)
                if tv is dict or tv is list:
                    push(v)
                elif tv is float:
                    if not math.isfinite(v):
                        return None
                elif tv not in _PLAIN_SCALARS:
                    return None
        level = below
    return depth


def _check_json(value: Any, what: str) -> tuple[bool, int]:
    """Raise ``InvalidPayloadError`` (naming the path) for non-JSON data, a cycle, or more
    values than the merge accepts (``LimitExceededError``). Any depth is fine (iterative).
    Returns whether the data holds no subclass of the JSON types, and its depth."""
    depth = _plain_json(value)
    if depth is not None:
        return True, depth
    problem = locate_problem(value, sys.maxsize, DEFAULT_LIMITS.max_nodes)
    if problem is None:
        return False, _depth(value)  # JSON data, with subclasses (a str enum, ...)
    where = _show(problem.path)
    if problem.kind == "nodes":
        raise LimitExceededError(
            f"{what} holds more than max_nodes={DEFAULT_LIMITS.max_nodes} values (counted up "
            f"to {where}), more than the merge accepts. Diff a smaller part of it.",
            limit="max_nodes",
            value=problem.value,
            maximum=DEFAULT_LIMITS.max_nodes,
            path=where,
        )
    if problem.kind == "key":
        raise InvalidPayloadError(
            f"{what}: expected string keys at {_show(problem.path[:-1])}, found "
            f"{problem.detail}; convert the keys to strings.",
            path=problem.path,
        )
    if problem.kind == "float":
        raise InvalidPayloadError(
            f"{what}: expected a finite number at {where}, found {problem.detail}; "
            "JSON has no NaN or infinity.",
            path=problem.path,
        )
    raise InvalidPayloadError(
        f"{what}: expected JSON data at {where}, found {problem.detail}; pass dicts, lists, "
        "strings, numbers, booleans and None (or a pydantic model).",
        path=problem.path,
    )


def _show(path: Sequence[str | int]) -> str:
    return format_payload_path(path) or "the root"


def _as_data(value: Any, what: str) -> tuple[Any, bool, int]:
    """Pydantic models dumped in JSON mode; ``None`` is ``{}``; the root must be a container.
    Returns the data, whether it is plain (``_plain_json``) and its depth."""
    value = json_data(value)
    if value is None:
        return {}, True, 1
    if not isinstance(value, dict | list):
        raise InvalidPayloadError(
            f"{what}: expected an object or an array at the root, found a "
            f"{type(value).__name__}; wrap the value in an object.",
            path=(),
        )
    return (value, *_check_json(value, what))


def _depth(value: Any) -> int:
    """Containers nested in ``value`` (0 for a primitive, 1 for ``{}`` or ``[1]``); iterative."""
    best = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if d > best:
            best = d
        stack.extend((child, d + 1) for child in v if isinstance(child, dict | list))
    return best


# --- element keys and the alignment of long arrays -------------------------------------------


def _json_key(value: Any) -> str:
    return _KEY_ENCODER.encode(value)


def _iterative_key(value: Any) -> str:
    """``_json_key`` without recursion, for elements nested deeper than the C encoder goes."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _Token):
            out.append(v.text)
        elif isinstance(v, dict):
            out.append("{")
            keys = sorted(v)
            stack.append(_Token("}"))
            for idx in range(len(keys) - 1, -1, -1):
                stack.append(v[keys[idx]])
                stack.append(_Token(("," if idx else "") + _json_key(keys[idx]) + ":"))
        elif isinstance(v, list):
            out.append("[")
            stack.append(_Token("]"))
            for idx in range(len(v) - 1, -1, -1):
                stack.append(v[idx])
                if idx:
                    stack.append(_Token(","))
        else:
            out.append(_json_key(v))
    return "".join(out)


class _Token:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _element_keys(values: list[Any], plain: bool) -> list[Any]:
    """One key per element; equal keys mean JSON-equal elements (different keys may still be
    JSON-equal: ``1`` and ``1.0``, keys in another order; the diff compares those with
    ``json_equal`` and finds nothing to change). For plain data (exact JSON types) the
    ``marshal`` bytes, version 2 (fast, exact about types, independent of object sharing);
    otherwise canonical JSON, where a subclass could hide behind equal bytes."""
    if plain:
        try:
            return list(map(marshal.dumps, values, repeat(2, len(values))))
        except ValueError:  # nested deeper than marshal goes
            return [_deep_safe_key(_marshal_key, v) for v in values]
    try:
        return [_json_key(v) for v in values]
    except RecursionError:
        return [_deep_safe_key(_json_key, v) for v in values]


def _marshal_key(value: Any) -> bytes:
    return marshal.dumps(value, 2)


def _deep_safe_key(key: Any, value: Any) -> Any:
    try:
        return key(value)
    except (RecursionError, ValueError):
        return "\x00" + _iterative_key(value)  # a str: never equal to marshal bytes


_C_DEPTH = 400
"""Payloads at most this deep are compared with Python's ``!=`` and ``marshal`` (both
recursive, in C); deeper ones with ``json_equal`` (iterative)."""

_SMALL_LCS = 4096
"""Regions with at most this many (old x new) element pairs get an exact LCS by dynamic
programming; larger ones patience anchors (elements unique on both sides)."""


def _lcs_pairs(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)`` with ``a[i] == b[j]``, increasing in both: a longest common subsequence
    for small inputs, patience diff for large ones. Runs in O((n + m) log(n + m)) on large
    inputs: common prefixes and suffixes are matched directly, every region is split at the
    longest increasing run of elements unique on both sides, and the recursion has a work
    budget proportional to the input (past it, the rest stays unmatched: correct, just less
    minimal)."""
    out: list[tuple[int, int]] = []
    budget = 32 * (len(a) + len(b)) + _SMALL_LCS
    stack = [(0, len(a), 0, len(b))]
    while stack:
        a0, a1, b0, b1 = stack.pop()
        while a0 < a1 and b0 < b1 and a[a0] == b[b0]:
            out.append((a0, b0))
            a0 += 1
            b0 += 1
        while a0 < a1 and b0 < b1 and a[a1 - 1] == b[b1 - 1]:
            a1 -= 1
            b1 -= 1
            out.append((a1, b1))
        if a0 == a1 or b0 == b1:
            continue
        if (a1 - a0) * (b1 - b0) <= _SMALL_LCS:
            out += _dp_lcs(a, a0, a1, b, b0, b1)
            continue
        budget -= (a1 - a0) + (b1 - b0)
        if budget < 0:
            continue
        anchors = _patience_anchors(a, a0, a1, b, b0, b1)
        if not anchors:
            continue
        out += anchors
        # The regions between anchors (and before the first, after the last) still to align.
        bounds = [(a0 - 1, b0 - 1), *anchors, (a1, b1)]
        stack += [
            (p[0] + 1, q[0], p[1] + 1, q[1])
            for p, q in pairwise(bounds)
            if q[0] - p[0] > 1 and q[1] - p[1] > 1
        ]
    out.sort()
    return out


def _patience_anchors(
    a: Sequence[int], a0: int, a1: int, b: Sequence[int], b0: int, b1: int
) -> list[tuple[int, int]]:
    """The longest run, increasing on both sides, of elements that occur exactly once in
    ``a[a0:a1]`` and once in ``b[b0:b1]``."""
    count_a = Counter(a[a0:a1])
    count_b = Counter(b[b0:b1])
    where_a = {x: i for i, x in enumerate(a[a0:a1], a0) if count_a[x] == 1 and count_b[x] == 1}
    if not where_a:
        return []
    seq_b = [j for j, x in enumerate(b[b0:b1], b0) if x in where_a]
    seq_a = [where_a[b[j]] for j in seq_b]
    # Longest increasing subsequence of the a positions, in b order (patience sorting).
    tails: list[int] = []  # tails[k]: smallest a position ending a run of length k + 1
    tail_at: list[int] = []  # index into seq of that tail
    back: list[int] = []
    last = -1
    for n, i in enumerate(seq_a):
        if i > last:  # the common case: extends the longest run
            back.append(tail_at[-1] if tail_at else -1)
            tails.append(i)
            tail_at.append(n)
            last = i
            continue
        k = bisect_left(tails, i)
        tails[k] = i
        tail_at[k] = n
        back.append(tail_at[k - 1] if k else -1)
        if k == len(tails) - 1:
            last = i
    run: list[tuple[int, int]] = []
    n = tail_at[-1]
    while n >= 0:
        run.append((seq_a[n], seq_b[n]))
        n = back[n]
    run.reverse()
    return run


def _dp_lcs(
    a: Sequence[int], a0: int, a1: int, b: Sequence[int], b0: int, b1: int
) -> list[tuple[int, int]]:
    """An exact longest common subsequence of two small regions (dynamic programming)."""
    na, nb = a1 - a0, b1 - b0
    table = [[0] * (nb + 1) for _ in range(na + 1)]
    for i in range(na - 1, -1, -1):
        row, below = table[i], table[i + 1]
        x = a[a0 + i]
        for j in range(nb - 1, -1, -1):
            if x == b[b0 + j]:
                row[j] = below[j + 1] + 1
            else:
                row[j] = max(below[j], row[j + 1])
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < na and j < nb:
        if a[a0 + i] == b[b0 + j]:
            pairs.append((a0 + i, b0 + j))
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


# --- the diff ----------------------------------------------------------------------------------

_Part = Literal["u", "x", "n", "r"]
_PARTS: tuple[_Part, ...] = ("u", "x", "n", "r")

_INF = 10**15
"""The cost of a value that cannot be written: it would sit deeper than ``MAX_DIFF_DEPTH``."""

_BUCKET_COST = 16
"""What one more bucket (or one more array entry in a bucket) costs, roughly, in characters."""


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

    def total(self) -> int:
        """Characters of every bucket this node writes, with a bucket's overhead each."""
        return sum(
            cost + _BUCKET_COST
            for value, cost in (self.get(p) for p in _PARTS)
            if value is not _MISSING
        )


@dataclass(slots=True)
class _Shared:
    """What both passes of ``diff_payloads`` share: element keys and alignments of arrays
    (keyed by the identity of the payload's lists, alive for the whole call), depths and
    lengths of the payload's containers."""

    plain: bool
    depth: int  # the depth of the deeper payload: no value in either is deeper
    shallow: bool = False  # plain and shallow enough for recursive C comparisons

    def __post_init__(self) -> None:
        self.shallow = self.plain and self.depth <= _C_DEPTH

    keys: dict[int, list[Any]] = field(default_factory=dict)
    alignments: dict[tuple[int, int], tuple[list[tuple[int, int]], int]] = field(
        default_factory=dict
    )
    event_lists: dict[tuple[int, int, str], list[tuple[int, int, int, int]]] = field(
        default_factory=dict
    )
    depths: dict[int, int] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)
    equal: dict[tuple[int, int], bool] = field(default_factory=dict)

    def same(self, a: Any, b: Any) -> bool:
        """``json_equal``, faster on plain data: there Python's ``!=`` (as coarse as JSON
        equality or coarser: ``True == 1``) proves a difference, and equal ``marshal`` bytes
        (exact about types) prove equality."""
        if a is b:
            return True
        ta = type(a)
        if self.shallow and ta is type(b):
            if ta in _SAME_IF_EQUAL:
                return bool(a == b)
            if a != b:
                return False
            if ta is dict or ta is list:
                try:
                    if marshal.dumps(a, 2) == marshal.dumps(b, 2):
                        return True
                except ValueError:  # nested deeper than marshal goes
                    pass
        if not self.shallow and isinstance(a, dict | list):
            return self.deep_equal(a, b)
        return json_equal(a, b)

    def deep_equal(self, a: Any, b: Any) -> bool:
        """``json_equal`` for deep payloads, remembering the answer for every pair of
        containers compared on the way: the diff asks again one level down at each level of
        a deep change, which would otherwise cost the depth squared."""
        memo = self.equal
        found = memo.get((id(a), id(b)))
        if found is not None:
            return found
        stack: list[tuple[Any, Any, bool]] = [(a, b, False)]
        while stack:
            x, y, done = stack.pop()
            key = (id(x), id(y))
            if key in memo:
                continue
            if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
                pairs = [(x[k], y[k]) for k in x]
            elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
                pairs = list(zip(x, y, strict=True))
            else:
                memo[key] = json_equal(x, y)  # a primitive, or containers that differ
                continue
            if done:
                memo[key] = all(memo.get((id(u), id(v)), False) for u, v in pairs)
                continue
            stack.append((x, y, True))
            stack.extend((u, v, False) for u, v in pairs if (id(u), id(v)) not in memo)
        return memo[(id(a), id(b))]

    def depth_of(self, value: Any) -> int:
        """``_depth(value)``, remembering the depth of every container below it (the diff
        asks again one level down at each level of a deep change)."""
        depths = self.depths
        found = depths.get(id(value))
        if found is not None:
            return found
        stack: list[tuple[Any, bool]] = [(value, False)]
        while stack:
            node, done = stack.pop()
            children = [
                c
                for c in (node.values() if isinstance(node, dict) else node)
                if isinstance(c, dict | list)
            ]
            if done:
                depths[id(node)] = 1 + max((depths[id(c)] for c in children), default=0)
            elif id(node) not in depths:
                stack.append((node, True))
                stack.extend((c, False) for c in children if id(c) not in depths)
        return depths[id(value)]

    def element_keys(self, values: list[Any]) -> list[Any]:
        found = self.keys.get(id(values))
        if found is None:
            found = self.keys[id(values)] = _element_keys(values, self.plain)
        return found

    def alignment(self, c: list[Any], t: list[Any]) -> tuple[list[tuple[int, int]], int]:
        """Pairs ``(i, j)`` (original ``i`` becomes target ``j``), increasing in both: the
        equal elements of a common subsequence, and between two of them the leftover elements
        paired in order. Also how many pairs are equal."""
        found = self.alignments.get((id(c), id(t)))
        if found is not None:
            return found
        ids: dict[Any, int] = {}
        a = [ids.setdefault(k, len(ids)) for k in self.element_keys(c)]
        b = [ids.setdefault(k, len(ids)) for k in self.element_keys(t)]
        matches = _lcs_pairs(a, b)
        pairs: list[tuple[int, int]] = []
        pi = pj = -1
        for i, j in chain(matches, ((len(c), len(t)),)):
            gap = min(i - pi, j - pj) - 1
            if gap > 0:
                pairs.extend(
                    zip(range(pi + 1, pi + 1 + gap), range(pj + 1, pj + 1 + gap), strict=True)
                )
            if i < len(c):
                pairs.append((i, j))
            pi, pj = i, j
        found = self.alignments[(id(c), id(t))] = (pairs, len(matches))
        return found

    def events(
        self, c: list[Any], t: list[Any], kind: str, pairs: list[tuple[int, int]]
    ) -> list[tuple[int, int, int, int]]:
        """``(i, j, pi, pj)`` for each pair where something may happen (the elements differ,
        the pair before them differs, or a gap lies before it), with the pair before it
        ``(pi, pj)``; ``(len(c), len(t), ...)`` ends the list. The other pairs are equal
        and follow each other: the encoder skips them (a long array with few edits costs a
        pass over its pairs, once per alignment)."""
        found = self.event_lists.get((id(c), id(t), kind))
        if found is not None:
            return found
        ck, tk = self.element_keys(c), self.element_keys(t)
        out: list[tuple[int, int, int, int]] = []
        pi = pj = -1
        prev_differs = False
        for i, j in pairs:
            differs = ck[i] != tk[j]
            if differs or prev_differs or i != pi + 1 or j != pj + 1:
                out.append((i, j, pi, pj))
            prev_differs = differs
            pi, pj = i, j
        out.append((len(c), len(t), pi, pj))
        self.event_lists[(id(c), id(t), kind)] = out
        return out


@dataclass(slots=True)
class _Ctx:
    marker: str
    sensitive: frozenset[str]
    prefer_new: bool
    shared: _Shared
    chose: bool = False  # prefer_new decided something (else the other pass is the same)

    def lit(self, value: Any, depth: int, limit: int = _INF) -> int:
        """Characters of ``value`` written literally at path depth ``depth`` of a bucket
        (``_INF`` if that nests deeper than ``MAX_DIFF_DEPTH``; memoized for containers).
        With ``limit``, a long container may stop being measured once it is known to cost
        more than ``limit``: the answer is then only "more than ``limit``"."""
        if isinstance(value, dict | list):
            key = id(value)
            shared = self.shared
            if (
                depth + shared.depth > MAX_DIFF_DEPTH
                and depth + shared.depth_of(value) > MAX_DIFF_DEPTH
            ):
                return _INF
            cached = shared.lengths.get(key)
            if cached is None:
                if len(value) > 64 and limit < _INF:
                    # Measure item by item, and stop past the limit (a long array set whole
                    # is rarely the cheapest way: do not dump all of it to learn that).
                    total = 1
                    for item in value.values() if isinstance(value, dict) else value:
                        total += len(_dumps(item)) + 1
                        if total > limit:
                            return total
                cached = shared.lengths[key] = len(_dumps(value))
            return cached
        return len(_dumps(value))

    def is_sensitive(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.sensitive


def _only(ctx: _Ctx, part: _Part, value: Any, depth: int, limit: int = _INF) -> _Enc:
    enc = _Enc()
    enc.set(part, value, ctx.lit(value, depth, limit))
    return enc


def _set_whole(ctx: _Ctx, value: Any, depth: int, limit: int = _INF) -> _Enc:
    """Remove the key, then give it again in updateElements: taken literally by the merge."""
    return _Enc(u=value, cu=ctx.lit(value, depth, limit), x=ctx.marker, cx=len(ctx.marker) + 2)


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
    c: dict[str, Any], t: dict[str, Any], *, reach_n: bool, top: bool, depth: int, ctx: _Ctx
) -> _Enc | None:
    """Encode the change of object ``c`` (at path depth ``depth``) into object ``t``
    (None: impossible in place)."""
    if depth + 1 > MAX_DIFF_DEPTH:
        return None
    out = _ObjectBuilder()
    marker_cost = len(ctx.marker) + 2
    for k in c:
        if k not in t:
            out.add(k, len(_dumps(k)), _Enc(u=ctx.marker, cu=marker_cost))
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
        out.add(k, key_cost, min(cands, key=lambda e: e.entry_cost(key_cost)))
    return out.build()


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
        cands.append(_only(ctx, "u", tv, depth))  # a primitive or null update sets any value
        return cands
    if isinstance(tv, dict):
        if isinstance(cv, dict):
            desc = _diff_object(cv, tv, reach_n=reach_n, top=False, depth=depth, ctx=ctx)
            if desc is not None:
                cands.append(desc)
        elif not isinstance(cv, list):
            if tv:
                cands.append(_only(ctx, "u", tv, depth))  # a primitive replaced by a container
            elif reach_n:
                cands.append(_only(ctx, "n", tv, depth))  # {} over a primitive: new_exists
    else:
        if isinstance(cv, list):
            desc = _diff_array(cv, tv, reach_n=reach_n, list_n=True, depth=depth, ctx=ctx)
            if desc is not None:
                cands.append(desc)
        elif not isinstance(cv, dict):
            cands.append(_only(ctx, "u", tv, depth))
    # Setting the value whole: measured only as far as it could still be the cheapest.
    limit = min((e.entry_cost(0) + 64 for e in cands), default=_INF)
    cands.append(_set_whole(ctx, tv, depth, limit))
    if top and not (isinstance(cv, list) and _is_index_map(tv)):
        # (replaceElements refuses an index-map-shaped object over an array as ambiguous:
        # such a value is set whole through removeElements + updateElements instead)
        cands.append(_only(ctx, "r", tv, depth, limit))
    return cands


def _elem_change(a: Any, b: Any, *, reach_n: bool, depth: int, ctx: _Ctx) -> _Enc | None:
    """Change array element ``a`` into ``b`` in place (not JSON-equal); None if impossible
    (the element is then deleted and ``b`` inserted in its place)."""
    if ctx.is_sensitive(b):
        return None  # a marker at a position deletes the element
    if not isinstance(b, dict | list):
        return _only(ctx, "u", b, depth)
    if isinstance(b, dict):
        if isinstance(a, dict):
            return _diff_object(a, b, reach_n=reach_n, top=False, depth=depth, ctx=ctx)
        if isinstance(a, list) or not b:
            return None  # shape_mismatch, or {} which keeps the element
        return _only(ctx, "u", b, depth)
    if isinstance(a, list):
        # newElements reaches a nested array only through an index map (MERGE.md section 8).
        return _diff_array(a, b, reach_n=reach_n, list_n=False, depth=depth, ctx=ctx)
    if isinstance(a, dict):
        return None
    return _only(ctx, "u", b, depth)


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
    best: _Enc | None = None
    best_cost = 0
    for events in candidates:
        cand = _encode_array(
            c, t, events, memo, reach_n=reach_n, list_n=list_n, depth=depth, ctx=ctx
        )
        if cand is None:
            continue
        cost = cand.total()
        if best is None or cost < best_cost:
            best, best_cost = cand, cost
    return best


def _encode_array(
    c: list[Any],
    t: list[Any],
    events: list[tuple[int, int, int, int]],
    memo: dict[tuple[int, int, bool], _Enc | None],
    *,
    reach_n: bool,
    list_n: bool,
    depth: int,
    ctx: _Ctx,
) -> _Enc | None:
    """The buckets of one alignment: originals not paired are deleted (a marker at their
    original position), pairs that differ are changed in place (or deleted and inserted again
    when that is cheaper or the only way), and targets not paired are inserted before the
    next kept original (a newElements index map, MERGE.md section 8) or appended. ``events``
    are the pairs where something may happen (``_Shared.events``): the pairs skipped between
    them are equal, follow each other, and are kept as they are."""
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
            enc = _memo_change(memo, c, t, i, j, reach_n=reach_n, depth=item_depth, ctx=ctx)
            if enc is not None and enc.n is not _MISSING and run_before and i == prev_i + 1:
                # The insertion before i needs key i, which this element's descent holds.
                enc = _memo_change(memo, c, t, i, j, reach_n=False, depth=item_depth, ctx=ctx)
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
    # Insertion runs: the key is the next kept original (n at the end), or the first deleted
    # original before it when that element's descent holds its key.
    out = _Enc()
    if x:
        out.x, out.cx = _cheaper_form(x, n)
    tail = runs.pop(n, None) if n in runs else None
    for key, targets in runs.items():
        n_entries[key] = _run_value(t, targets, item_depth + 1, ctx)
    options: list[tuple[int, Any, int, Any, int]] = []  # (total, u, cu, n, cn)
    u_val, u_cost = _cheaper_form(u, n) if u else (_MISSING, 0)
    if reach_n or tail is None:
        entries = dict(n_entries)
        if tail is not None:
            entries[n] = _run_value(t, tail, item_depth + 1, ctx)
        n_val, n_cost = _index_map(entries) if entries else (_MISSING, 0)
        options.append((_total(u_val, u_cost, n_val, n_cost), u_val, u_cost, n_val, n_cost))
        if (
            tail is not None
            and list_n
            and not n_entries
            and not any(isinstance(t[j], dict) and not t[j] for j in tail)
        ):
            # Appended only: a positional newElements list (its {} items would be skipped).
            items = [t[j] for j in tail]
            n_cost = 1 + sum(ctx.lit(v, item_depth) + 1 for v in items)
            options.append((_total(u_val, u_cost, items, n_cost), u_val, u_cost, items, n_cost))
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
        n_val, n_cost = _index_map(n_entries) if n_entries else (_MISSING, 0)
        options.append((_total(positional, cost, n_val, n_cost), positional, cost, n_val, n_cost))
    if not options:
        return None
    _, out.u, out.cu, out.n, out.cn = min(options, key=lambda o: o[0])
    return out


def _size(value: Any) -> int:
    """How many items a container holds (0 for a primitive): a cheap lower bound on length."""
    return len(value) if isinstance(value, dict | list) else 0


def _memo_change(
    memo: dict[tuple[int, int, bool], _Enc | None],
    c: list[Any],
    t: list[Any],
    i: int,
    j: int,
    *,
    reach_n: bool,
    depth: int,
    ctx: _Ctx,
) -> _Enc | None:
    key = (i, j, reach_n)
    if key not in memo:
        memo[key] = _elem_change(c[i], t[j], reach_n=reach_n, depth=depth, ctx=ctx)
    return memo[key]


def _run_value(t: list[Any], targets: list[int], depth: int, ctx: _Ctx) -> tuple[Any, int]:
    """The list of inserted items (at path depth ``depth``) and its cost."""
    items = [t[j] for j in targets]
    return items, 1 + sum(ctx.lit(v, depth) + 1 for v in items)


def _index_map(entries: Mapping[int, tuple[Any, int]]) -> tuple[dict[str, Any], int]:
    cost = 1
    for i, (_, vcost) in entries.items():
        cost += vcost + len(str(i)) + 4
    return {str(i): entries[i][0] for i in sorted(entries)}, cost


def _total(u_val: Any, u_cost: int, n_val: Any, n_cost: int) -> int:
    total = 0
    if u_val is not _MISSING:
        total += u_cost + _BUCKET_COST
    if n_val is not _MISSING:
        total += n_cost + _BUCKET_COST
    return total


def _cheaper_form(entries: Mapping[int, tuple[Any, int]], length: int) -> tuple[Any, int]:
    """A positional array (``{}`` for untouched positions) or an index map, whichever is
    shorter (ties go to the positional form the seed teaches)."""
    last = max(entries)
    pos_cost = 1
    map_cost = 1
    for i, (_, cost) in entries.items():
        pos_cost += cost + 1
        map_cost += cost + len(str(i)) + 4
    pos_cost += 3 * (last + 1 - len(entries))
    if pos_cost <= map_cost:
        positional: list[Any] = [{}] * (last + 1)
        for i, (value, _) in entries.items():
            positional[i] = value
        return positional, pos_cost
    return {str(i): entries[i][0] for i in sorted(entries)}, map_cost


def _too_deep(before: Any, after: Any) -> LimitExceededError:
    """The refusal of a change that no change request can hold, naming where it is: the
    deepest first difference (depth first, one pass: any depth, linear time)."""
    path = _first_difference(before, after)
    where = _show(path)
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
    """The path of the first place (depth first) where ``a`` and ``b`` differ: a key or
    element present on one side only, or values that differ and are not both containers of
    the same kind; ``[]`` if they are equal."""
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
    characters; ``reasoning`` is copied into it. Long arrays are aligned in
    O(n log n) (module docstring).

    Raises ``InvalidPayloadError`` for non-JSON data or roots of different kinds (a change
    request cannot turn an object payload into an array), ``ConfigurationError`` for a bad
    marker and ``LimitExceededError`` when a change needs a request nested deeper than
    ``MAX_DIFF_DEPTH`` levels (payloads may be as deep as the merge accepts) or a payload
    holds more values than the merge accepts.
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
    before, plain_before, depth_before = _as_data(old, "old payload")
    after, plain_after, depth_after = _as_data(new, "new payload")
    if isinstance(before, dict) != isinstance(after, dict):
        raise InvalidPayloadError(
            f"diff_payloads: the old payload is an {_kind(before)} and the new one an "
            f"{_kind(after)}; a change request cannot change the kind of the root. Wrap both "
            "in an object to replace one by the other.",
            path=(),
        )
    shared = _Shared(plain=plain_before and plain_after, depth=max(depth_before, depth_after))
    best: AgentPayloadChangeRequest[Any] | None = None
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


def _kind(value: Any) -> str:
    return "object" if isinstance(value, dict) else "array"


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


# --- RFC 6902 export ---------------------------------------------------------------------------


def json_pointer(path: Sequence[str | int]) -> str:
    """The RFC 6901 JSON Pointer of a payload path (``~`` and ``/`` escaped)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _changes_of(source: MergeResult[Any] | MergeReport | Sequence[Change]) -> list[Change]:
    if isinstance(source, MergeResult):
        return list(source.report.changes)
    if isinstance(source, MergeReport):
        return list(source.changes)
    if isinstance(source, Sequence) and not isinstance(source, str | bytes):
        changes = list(source)
        if all(isinstance(ch, Change) for ch in changes):
            return changes
    raise ConfigurationError(
        "to_json_patch(changes=...): expected a MergeResult, a MergeReport or a list of "
        f"Change (the report's changes), found {type(source).__name__}"
    )


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
    move), then replaces and adds in ascending path order: appended and inserted items (each
    an ``add`` at its result position, MERGE.md section 8) arrive in order, each after every
    result position before it is in place.
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
