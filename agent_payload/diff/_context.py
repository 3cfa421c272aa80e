"""The state of one diff: candidate encodings (``_Enc``) and their costs, the caches both passes
share (``_Shared``), and the marker and literal costs (``_Ctx``)."""

from __future__ import annotations

import marshal
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Literal

from agent_payload._jsondata import json_equal
from agent_payload.diff._align import _C_DEPTH, _element_keys, _lcs_pairs
from agent_payload.diff._data import _MISSING, _SAME_IF_EQUAL, MAX_DIFF_DEPTH, _dumps

_Part = Literal["u", "x", "n", "r"]
_PARTS: tuple[_Part, ...] = ("u", "x", "n", "r")

_COST: dict[_Part, str] = {"u": "cu", "x": "cx", "n": "cn", "r": "cr"}

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
        return getattr(self, part), getattr(self, _COST[part])

    def set(self, part: _Part, value: Any, cost: int) -> None:
        setattr(self, part, value)
        setattr(self, _COST[part], cost)

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
    """What both passes of ``diff_payloads`` share, keyed by the identity of the payloads'
    containers (alive for the whole call): element keys, alignments, depths and lengths."""

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
        """``json_equal`` for deep payloads, remembering every pair of containers compared (the
        diff asks again one level down at each level of a deep change: the depth squared)."""
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
        """How deeply ``value`` nests containers, remembering it for every container below (the
        diff asks again one level down at each level of a deep change)."""
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
        """``(i, j, pi, pj)`` for each pair where something may happen (it or the pair before it
        differs, or a gap lies before it), with the pair before it; ``(len(c), len(t), ...)`` ends
        the list. The encoder skips the other pairs: few edits in a long array cost one pass."""
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
