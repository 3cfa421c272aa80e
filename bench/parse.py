"""How long does reading a reply take, as the reply grows? (It must grow linearly.)

Run: ``python bench/parse.py`` (``--quick`` for sizes up to 1 MB, ``--write`` to save the table
to ``bench/results/parse.txt``).

Each input is a unit repeated to 10 KB, 100 KB, 1 MB and 10 MB, and read with
``parse_change_request`` (whatever it raises is part of the work: hostile prose is *meant* to
be refused). The inputs:

* ``x {} ``: prose full of empty braces (each ``{}`` once cost a search of the whole line);
* ``{ x ``: braces that never close (each once cost a scan to the end of the text);
* ``{"a": x ``: JSON-looking openings that break at once (each once cost a strict read that
  counted every line before it);
* ``prose``: ordinary chat prose with braces, quotes and apostrophes, and small objects;
* ``</think>``: closing thinking tags inside lines, with no line break anywhere;
* ``strict answer``: prose, then one fenced strict-JSON change request of the size (C reader);
* ``JSON5 answer``: one change request written with comments, unquoted keys, single quotes,
  trailing commas and Python literals (the grammar reader, pure Python).

Times are CPU times of the process (``time.process_time``, so other work on a shared machine
does not blur them), the best of several repeats (one at 10 MB). ``growth`` is the time divided
by the time of the size ten times smaller: about 10x is linear, about 100x would be quadratic.

Goal (issue 33): every input under one second per MB (at 1 MB and 10 MB).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agent_payload.errors import ModelReplyError
from agent_payload.parse import parse_change_request

SIZES = [10_000, 100_000, 1_000_000, 10_000_000]
RESULTS = Path(__file__).parent / "results" / "parse.txt"


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda size: unit * (size // len(unit))


def _strict_answer(size: int) -> str:
    rows = []
    total = 0
    i = 0
    while total < size - 200:
        row = json.dumps({"id": i, "name": f"row {i}", "tags": ["x", "y"], "ok": True})
        rows.append(row)
        total += len(row) + 1
        i += 1
    body = '{"replaceElements": {"rows": [' + ",".join(rows) + ']}, "reasoning": "rewrite"}'
    return f"Here is the change request:\n\n```json\n{body}\n```\nLet me know!"


def _json5_answer(size: int) -> str:
    rows = []
    total = 0
    i = 0
    while total < size - 200:
        row = f"    {{id: {i}, name: 'row {i}', ok: True, tags: ['x', 'y',],}}, // row {i}"
        rows.append(row)
        total += len(row) + 1
        i += 1
    body = "\n".join(rows)
    return f"Sure!\n```json\n{{\n  replaceElements: {{rows: [\n{body}\n  ]}},\n}}\n```"


INPUTS: dict[str, Callable[[int], str]] = {
    "x {} ": _repeat("x {} "),
    "{ x ": _repeat("{ x "),
    '{"a": x ': _repeat('{"a": x '),
    "prose": _repeat(
        'Some prose with {braces} and "quotes" and \'apostrophes\' {"a": 1} don\'t {x}.\n'
    ),
    "</think>": _repeat("x</think>x "),
    "strict answer": _strict_answer,
    "JSON5 answer": _json5_answer,
}


def _read(text: str) -> str:
    try:
        parse_change_request(text)
    except ModelReplyError as error:
        return type(error).__name__
    return "change request"


def _time(text: str, repeats: int) -> tuple[float, str]:
    best = float("inf")
    outcome = ""
    for _ in range(repeats):
        gc.collect()
        start = time.process_time()
        outcome = _read(text)
        best = min(best, time.process_time() - start)
    return best, outcome


def _size(size: int) -> str:
    return f"{size // 1_000_000} MB" if size >= 1_000_000 else f"{size // 1000} KB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 1 MB only")
    parser.add_argument("--write", action="store_true", help=f"save the table to {RESULTS}")
    args = parser.parse_args()
    sizes = SIZES[:-1] if args.quick else SIZES
    lines = [
        f"agent_payload parse benchmark (Python {platform.python_version()}, "
        f"{platform.machine()}; CPU time, best of 3 repeats, 1 at 10 MB)",
        "",
        f"{'input':<16}{'size':>8}{'time':>12}{'growth':>9}  outcome",
        "-" * 72,
    ]
    print("\n".join(lines), flush=True)
    worst: tuple[float, str] = (0.0, "")
    for name, make in INPUTS.items():
        previous: float | None = None
        for size in sizes:
            text = make(size)
            seconds, outcome = _time(text, 1 if size >= 10_000_000 else 3)
            if size >= 1_000_000:
                worst = max(
                    worst, (seconds / (len(text) / 1e6), f"{name.strip()} at {_size(size)}")
                )
            growth = f"{seconds / previous:.1f}x" if previous else ""
            previous = max(seconds, 1e-6)
            line = f"{name:<16}{_size(size):>8}{seconds:>11.3f}s{growth:>9}  {outcome}"
            print(line, flush=True)
            lines.append(line)
        print(flush=True)
        lines.append("")
    goal = (
        f"GOAL every input under one second per MB: {'MET' if worst[0] < 1 else 'MISSED'} "
        f"(slowest {worst[0]:.2f} s per MB: {worst[1]})"
    )
    print(goal)
    lines.append(goal)
    if args.write:
        RESULTS.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
        print(f"written to {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
