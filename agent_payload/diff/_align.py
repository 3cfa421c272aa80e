"""Alignment of long arrays: element keys and their longest common subsequence (common prefix and
suffix, patience anchors, small regions solved exactly, within a work budget)."""

from __future__ import annotations

import marshal
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import pairwise, repeat
from typing import Any

from agent_payload.diff._data import _KEY_ENCODER

_json_key: Callable[[Any], str] = _KEY_ENCODER.encode


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
    """One key per element, equal for JSON-equal elements (``1`` and ``1.0`` may differ: the diff
    then finds nothing to change): ``marshal`` bytes for plain data (fast, exact about types),
    else canonical JSON, where a subclass could hide behind equal bytes."""
    if plain:
        try:
            return list(map(marshal.dumps, values, repeat(2, len(values))))
        except ValueError:  # nested deeper than marshal goes
            return [_deep_safe_key(lambda v: marshal.dumps(v, 2), v) for v in values]
    try:
        return [_json_key(v) for v in values]
    except RecursionError:
        return [_deep_safe_key(_json_key, v) for v in values]


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
    """Pairs ``(i, j)`` with ``a[i] == b[j]``, increasing in both: an exact LCS for small
    regions, patience anchors for large ones, in O((n + m) log(n + m)) within a work budget
    (past it, the rest stays unmatched: correct, just less minimal)."""
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
