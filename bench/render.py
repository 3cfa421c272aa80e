"""How long does rendering a payload for the model take, against ``json.dumps`` of it?

Run: ``python bench/render.py`` (``--quick`` for 1 MB only, ``--write`` to save the table to
``bench/results/render.txt``).

Two payloads of about 1 MB and 10 MB each: the orders document of ``bench/merge.py`` (an
object of records, each a few levels deep with short arrays) and a ``{"items": [...]}`` of
records (a long array: every element gets its ``/*n*/`` comment on a line of its own).
``prompts.render_payload`` (the default layout, and ``indent=1``) is timed against
``json.dumps(indent=1)`` (the same layout without comments: pure Python in CPython, as an
indent disables the C encoder) and compact ``json.dumps`` (the C encoder), in the same run.
CPU time of the process, best of several repeats.

Goal (issue 33): ``render_payload`` at most 3x ``json.dumps(indent=1)`` at 10 MB, with the
same output (``tests/test_prompts.py::test_rendering_at_c_speed_writes_what_the_walk_writes``).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _timing import best_cpu, save  # noqa: E402
from merge import make_document  # noqa: E402

from agent_payload.prompts import render_payload  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "render.txt"


def make_items(target_bytes: int, seed: int = 7) -> dict[str, Any]:
    """``{"items": [...]}`` of about ``target_bytes``: one long array of flat records."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    size = 12
    while size < target_bytes:
        item = {
            "id": len(items),
            "title": f"Item {len(items)} — ñ",
            "price": round(rng.uniform(1, 500), 2),
            "tags": rng.sample(["a", "b", "c", "d"], 2),
            "active": rng.random() < 0.5,
        }
        size += len(json.dumps(item, ensure_ascii=False, separators=(",", ":"))) + 1
        items.append(item)
    return {"items": items}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 MB only")
    parser.add_argument("--write", action="store_true", help=f"save the table to {RESULTS}")
    args = parser.parse_args(argv)
    sizes = (("1 MB", 1_000_000),) if args.quick else (("1 MB", 1_000_000), ("10 MB", 10_000_000))
    lines = [
        f"agent_payload render benchmark (Python {platform.python_version()}, "
        f"{platform.machine()}; CPU time, best of 3 repeats)",
        "",
        f"{'payload':<18}{'size':>7}{'method':>34}{'time':>11}{'vs indent=1':>13}",
        "-" * 83,
    ]
    print("\n".join(lines), flush=True)
    goal: list[str] = []
    for label, target in sizes:
        for kind, make in (("orders", make_document), ("items array", make_items)):
            payload = make(target)
            assert render_payload(payload, index_threshold=None, indent=1) == json.dumps(
                payload, indent=1, ensure_ascii=False
            )
            methods: dict[str, Callable[[], object]] = {
                "json.dumps(indent=1)": lambda p=payload: json.dumps(p, indent=1),
                "json.dumps (compact, C)": lambda p=payload: json.dumps(p, separators=(",", ":")),
                "render_payload": lambda p=payload: render_payload(p),
                "render_payload(indent=1)": lambda p=payload: render_payload(p, indent=1),
            }
            times = {name: best_cpu(fn, 3) for name, fn in methods.items()}
            ref = times["json.dumps(indent=1)"]
            for name, seconds in times.items():
                line = (
                    f"{kind:<18}{label:>7}{name:>34}{seconds * 1000:>9.0f}ms{seconds / ref:>12.2f}x"
                )
                print(line, flush=True)
                lines.append(line)
            lines.append("")
            print(flush=True)
            if label == sizes[-1][0]:
                ratio = times["render_payload"] / ref
                goal.append(
                    f"GOAL render_payload <= 3x json.dumps(indent=1), {label} {kind}: "
                    f"{'MET' if ratio <= 3 else 'MISSED'} ({ratio:.2f}x)"
                )
    print("\n".join(goal))
    lines += goal
    if args.write:
        save(RESULTS, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
