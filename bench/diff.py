"""How fast is ``diff_payloads`` on long arrays, against ``jsonpatch.make_patch`` on the same pairs?

Run: ``python bench/diff.py`` (``--quick`` for a fast run without the 100,000-element pairs,
``--write`` to save the table to ``bench/results/diff.txt``).

The pairs, generated deterministically (seeded ``random``):

* **records, 10% edits**: an object ``{"items": [...]}`` whose array holds N small records
  (``id``, ``name``, ``qty``, ``tags``); the new payload changes a field in 8% of them, deletes
  1% and inserts 1% new records at random places (10% of the elements edited in all);
* **ints, every third dropped**: ``{"values": list(range(N))}`` with every third value removed
  (the case that took 9.6 s at N = 8,000 with the quadratic alignment of version 0.1);
* **ints, 10% edits**: N random ints, 8% changed, 1% deleted, 1% inserted.

Both contenders get the same pairs in the same process. Every change request is checked
before timing: merged into the old payload it must give the new one with no conflict; every
JSON Patch applied by ``jsonpatch`` must give the new one too. Times are the best and the
median of a few repeats in CPU time of the process (``time.process_time``, so other load on a
shared machine counts less; ``--wall`` for wall-clock time), garbage collector on (as a
caller would have it).

Targets (issue 11), printed as MET or MISSED:

* records, N = 100,000, 10% edits: ``diff_payloads`` under 1 s, and faster than
  ``jsonpatch.make_patch``;
* growth from N = 10,000 to N = 100,000 close to 10x (at most 13x: n log n allows 12.5x).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent_payload.diff import diff_payloads, json_equal  # noqa: E402
from agent_payload.merge import apply_change_request  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "diff.txt"
CLOCK: Callable[[], float] = time.process_time

Pair = tuple[dict[str, Any], dict[str, Any]]


def records(n: int, rng: random.Random) -> Pair:
    old: list[dict[str, Any]] = [
        {"id": i, "name": f"item {i}", "qty": rng.randint(1, 50), "tags": ["a", "b"][: i % 3]}
        for i in range(n)
    ]
    new = copy.deepcopy(old)
    for k in rng.sample(range(n), n * 8 // 100):
        new[k]["qty"] = old[k]["qty"] + 100
    dropped = set(rng.sample(range(n), n // 100))
    new = [item for i, item in enumerate(new) if i not in dropped]
    for k in sorted(rng.sample(range(len(new)), n // 100), reverse=True):
        new.insert(k, {"id": n + k, "name": "new item", "qty": 1, "tags": []})
    return {"items": old}, {"items": new}


def ints_every_third(n: int, rng: random.Random) -> Pair:
    old = list(range(n))
    return {"values": old}, {"values": [v for v in old if v % 3]}


def ints_edits(n: int, rng: random.Random) -> Pair:
    old = [rng.randrange(10**9) for _ in range(n)]
    new = list(old)
    for k in rng.sample(range(n), n * 8 // 100):
        new[k] = -new[k]
    dropped = set(rng.sample(range(n), n // 100))
    new = [v for i, v in enumerate(new) if i not in dropped]
    for k in sorted(rng.sample(range(len(new)), n // 100), reverse=True):
        new.insert(k, rng.randrange(10**9))
    return {"values": old}, {"values": new}


CASES: dict[str, Callable[[int, random.Random], Pair]] = {
    "records, 10% edits": records,
    "ints, every third dropped": ints_every_third,
    "ints, 10% edits": ints_edits,
}


def _time(fn: Callable[[Any, Any], Any], old: Any, new: Any, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        start = CLOCK()
        fn(old, new)
        times.append(CLOCK() - start)
    return min(times), statistics.median(times)


JSONPATCH_UP_TO = {"ints, every third dropped": 10_000}
"""jsonpatch.make_patch is quadratic there (13 s at 10,000): not run on larger pairs."""


def _check(old: Any, new: Any, with_patch: bool) -> tuple[int, int]:
    request = diff_payloads(old, new)
    result = apply_change_request(old, request)
    if result.report.conflicts or not json_equal(result.payload, new):
        raise SystemExit("diff_payloads gave a wrong change request")
    size = len(json.dumps(request.to_wire(), separators=(",", ":")))
    if not with_patch:
        return size, 0
    patch = jsonpatch.make_patch(old, new).patch
    if not json_equal(jsonpatch.apply_patch(old, patch), new):
        raise SystemExit("jsonpatch.make_patch gave a wrong patch")
    return size, len(json.dumps(patch, separators=(",", ":")))


Times = dict[tuple[str, str, int], tuple[float, float]]
"""(contender, case, N) -> (best, median) seconds."""


def run(quick: bool) -> tuple[list[str], Times]:
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    lines = [
        f"{'case':28} {'N':>8}  {'contender':22} {'best':>9} {'median':>9}  {'vs jsonpatch':>13}"
        f"  {'output chars':>12}",
    ]
    times: Times = {}
    for case, make in CASES.items():
        for n in (8_000, *sizes[1:]) if case.startswith("ints, every") else sizes:
            old, new = make(n, random.Random(f"{case}-{n}"))
            with_patch = n <= JSONPATCH_UP_TO.get(case, n)
            size, patch_size = _check(old, new, with_patch)
            repeats = 3 if n <= 10_000 else 2
            best, median = times[("ours", case, n)] = _time(
                diff_payloads, old, new, repeats=repeats
            )
            if with_patch:
                theirs = times[("jsonpatch", case, n)] = _time(
                    jsonpatch.make_patch, old, new, repeats=1 if n > 10_000 else 2
                )
                vs = f"{theirs[0] / max(best, 1e-9):.1f}x faster"
            else:
                vs = "(no jsonpatch)"
            lines.append(
                f"{case:28} {n:>8,}  {'diff_payloads':22} {best:>8.3f}s {median:>8.3f}s  "
                f"{vs:>13}  {size:>12,}"
            )
            if with_patch:
                lines.append(
                    f"{case:28} {n:>8,}  {'jsonpatch.make_patch':22} {theirs[0]:>8.3f}s "
                    f"{theirs[1]:>8.3f}s  {'(reference)':>13}  {patch_size:>12,}"
                )
            else:
                lines.append(
                    f"{case:28} {n:>8,}  {'jsonpatch.make_patch':22} not run: quadratic here "
                    f"(see {JSONPATCH_UP_TO[case]:,})"
                )
            lines.append("")
    return lines, times


def goals(times: Times, quick: bool) -> list[str]:
    case = "records, 10% edits"
    big, small = 100_000, 10_000
    if quick:
        return ["GOALS need the full run (without --quick)."]
    ours_big = times[("ours", case, big)][0]
    theirs_big = times[("jsonpatch", case, big)][0]
    growth = ours_big / max(times[("ours", case, small)][0], 1e-9)
    out = []
    met = ours_big < 1.0
    out.append(
        f"GOAL records, 100,000 elements, 10% edits, diff_payloads under 1 s: "
        f"{'MET' if met else 'MISSED'} ({ours_big:.3f} s)"
    )
    faster = ours_big < theirs_big
    out.append(
        f"GOAL ... and faster than jsonpatch.make_patch: {'MET' if faster else 'MISSED'} "
        f"({theirs_big / ours_big:.1f}x faster: {ours_big:.3f} s against {theirs_big:.3f} s)"
    )
    grows = growth <= 13
    out.append(
        f"GOAL growth from 10,000 to 100,000 elements close to 10x (at most 13x): "
        f"{'MET' if grows else 'MISSED'} ({growth:.1f}x)"
    )
    out.append("ALL GOALS MET" if met and faster and grows else "ALL GOALS NOT MET")
    return out


def main(argv: list[str] | None = None) -> int:
    global CLOCK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 100,000-element pairs")
    parser.add_argument("--write", action="store_true", help="write bench/results/diff.txt")
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    args = parser.parse_args(argv)
    if args.wall:
        CLOCK = time.perf_counter
    header = [
        "diff_payloads against jsonpatch.make_patch on the same pairs, "
        f"{'wall-clock' if args.wall else 'CPU'} time of one process.",
        f"Python {platform.python_version()} on {platform.machine()}, "
        f"jsonpatch {getattr(jsonpatch, '__version__', '?')}.",
        "",
    ]
    lines, times = run(args.quick)
    text = "\n".join([*header, *lines, *goals(times, args.quick)]) + "\n"
    sys.stdout.write(text)
    if args.write:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
