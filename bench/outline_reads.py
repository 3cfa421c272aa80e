"""Outline reads at scale: a read through an 8,000-segment path (issue 29's goal: under 0.1 s of
CPU; it took 20 s when resolution was quadratic), and the same path missing its last key (the
error answer), beside one ``json.dumps`` of the payload for scale.

    python bench/outline_reads.py
"""

from __future__ import annotations

import json
import sys
from typing import Any

from _timing import best_cpu

from agent_payload import outline

DEPTH = 8_000


def main() -> None:
    sys.setrecursionlimit(50_000)
    payload: Any = {"value": 1}
    for n in range(DEPTH):
        payload = {f"k{n % 10}": payload}
    keys = []
    node = payload
    while "value" not in node:
        (key,) = node
        keys.append(key)
        node = node[key]
    path = ".".join(keys)
    found = best_cpu(
        lambda: outline.answer("read_payload", {"path": path}, payload, 2_000), 5, collect=False
    )
    missing = best_cpu(
        lambda: outline.answer("read_payload", {"path": path + ".nope"}, payload, 2_000),
        5,
        collect=False,
    )
    dumps = best_cpu(lambda: json.dumps(payload), 5, collect=False)
    goal = 0.1
    print(f"read through an {DEPTH:,}-segment path: {found * 1000:.1f} ms CPU")
    print(f"the same path, missing its last key:   {missing * 1000:.1f} ms CPU")
    print(f"json.dumps of the payload (for scale): {dumps * 1000:.1f} ms CPU")
    worst = max(found, missing)
    print(f"goal: under {goal:.1f} s of CPU: {'MET' if worst < goal else 'MISSED'} ({worst:.3f} s)")


if __name__ == "__main__":
    main()
