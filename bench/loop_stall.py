"""Does an ``AsyncPayloadAgent`` stall the event loop it runs on?

Run: ``python bench/loop_stall.py`` (``--write`` to save the table to
``bench/results/loop_stall.txt``, ``--culprits`` to list the longest calls the worker thread
made without a Python-level step in between).

Four ``AsyncPayloadAgent.run`` calls on different payloads of about 2 MB (the orders
document of ``bench/merge.py``) run concurrently on one event loop with a scripted model
(``agent_payload.testing.ScriptedModel``: no network), one attempt each, once in each
layout: the default (``max_payload_tokens="auto"``: the outline) and the whole payload
(``max_payload_tokens=None``). Beside them a ticker task sleeps 5 ms in a loop and records
the longest gap between its wake-ups: the longest the loop could not serve anything else.
The payloads are big enough to be offloaded to the worker thread, which shares the GIL with
the loop: a long C call there (one ``json.dumps`` of the whole payload, say) holds the GIL
and the loop waits behind it; Python code lets the loop in every 5 ms
(``sys.getswitchinterval``).

The same ticker beside one ``json.dumps`` + ``json.loads`` of one payload in a thread is the
peer: what one C-level pass over the payload costs the loop. Wall-clock times (the gaps are
wall-clock by nature), best and worst of several rounds.

Goal (issue 33): the longest gap under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from merge import make_document  # noqa: E402

from agent_payload import AsyncPayloadAgent  # noqa: E402
from agent_payload.testing import ScriptedModel  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "loop_stall.txt"
TICK = 0.005
RUNS = 4
SIZE = 2_000_000


async def _longest_gap(work: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """The longest gap between the ticker's wake-ups while ``work`` runs, and its wall time."""
    done = False
    longest = 0.0

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(TICK)
            now = time.perf_counter()
            longest = max(longest, now - last - TICK)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(TICK * 2)
    start = time.perf_counter()
    await work()
    elapsed = time.perf_counter() - start
    done = True
    await tick
    return longest, elapsed


def _runs(payloads: list[dict[str, Any]], budget: int | str | None) -> Callable[[], Awaitable[Any]]:
    async def work() -> None:
        runs = []
        for payload in payloads:
            key = next(iter(payload["orders"]))
            reply = json.dumps({"updateElements": {"orders": {key: {"status": "shipped"}}}})
            agent = AsyncPayloadAgent(ScriptedModel([reply]), max_payload_tokens=budget)
            runs.append(agent.run(payload, "ship the first order"))
        results = await asyncio.gather(*runs)
        for payload, result in zip(payloads, results, strict=True):
            key = next(iter(payload["orders"]))
            assert result.payload["orders"][key]["status"] == "shipped"

    return work


def _round_trip(payload: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
    async def work() -> None:
        await asyncio.to_thread(lambda: json.loads(json.dumps(payload)))

    return work


def _culprits(payloads: list[dict[str, Any]]) -> list[str]:
    """The longest calls into C made by the worker thread in the default layout (a profile
    hook on every thread: C calls only, nested Python calls reset the clock)."""
    longest: list[tuple[float, str]] = []
    stacks: dict[int, list[list[Any]]] = {}

    def hook(frame: Any, event: str, arg: Any) -> None:
        stack = stacks.setdefault(threading.get_ident(), [])
        if event == "c_call":
            where = f"{frame.f_code.co_filename.split('agent_payload/')[-1]}:{frame.f_lineno}"
            name = f"{getattr(arg, '__qualname__', arg)} at {where}"
            stack.append([name, time.perf_counter(), True])
        elif event == "call":  # Python code inside the C call: the loop got its turns
            for entry in stack:
                entry[2] = False
        elif event in ("c_return", "c_exception") and stack:
            name, start, pure = stack.pop()
            if pure:
                longest.append((time.perf_counter() - start, name))

    threading.setprofile(hook)
    try:
        asyncio.run(_longest_gap(_runs(payloads, "auto")))
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    longest.sort(reverse=True)
    return [f"{seconds * 1000:7.1f} ms  {name}" for seconds, name in longest[:12]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each case")
    parser.add_argument("--write", action="store_true", help=f"save the table to {RESULTS}")
    parser.add_argument("--culprits", action="store_true", help="list the longest C calls")
    args = parser.parse_args(argv)
    payloads = [make_document(SIZE, seed=seed) for seed in range(RUNS)]
    size = len(json.dumps(payloads[0], separators=(",", ":")))
    if args.culprits:
        print("\n".join(_culprits(payloads)))
        return 0
    lines = [
        f"agent_payload event-loop stall benchmark (Python {platform.python_version()}, "
        f"{platform.machine()}; wall clock, {args.rounds} rounds; switch interval "
        f"{sys.getswitchinterval() * 1000:.0f} ms)",
        "",
        f"{RUNS} concurrent one-attempt runs on payloads of {size / 1e6:.2f} MB, ticker every "
        f"{TICK * 1000:.0f} ms",
        "",
        f"{'work':<46}{'longest gap (best/worst)':>26}{'wall time':>12}",
        "-" * 84,
    ]
    print("\n".join(lines), flush=True)
    cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("json.dumps + json.loads of one payload (thread)", _round_trip(payloads[0])),
        (f"{RUNS} runs, default layout (outline)", _runs(payloads, "auto")),
        (f"{RUNS} runs, whole payload (max_payload_tokens=None)", _runs(payloads, None)),
    ]
    worst_run = 0.0
    for name, work in cases:
        gaps, walls = [], []
        for _ in range(args.rounds):
            gap, wall = asyncio.run(_longest_gap(work))
            gaps.append(gap)
            walls.append(wall)
        if "runs" in name:
            worst_run = max(worst_run, max(gaps))
        line = (
            f"{name:<46}{min(gaps) * 1000:>12.0f} / {max(gaps) * 1000:>4.0f} ms"
            f"{min(walls) * 1000:>9.0f} ms"
        )
        print(line, flush=True)
        lines.append(line)
    goal = (
        f"GOAL longest gap of the loop under 100 ms with {RUNS} concurrent runs: "
        f"{'MET' if worst_run < 0.1 else 'MISSED'} (worst {worst_run * 1000:.0f} ms)"
    )
    print("\n" + goal)
    lines += ["", goal]
    if args.write:
        RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"written to {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
