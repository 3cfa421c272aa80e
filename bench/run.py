"""What does the library itself cost in one agent run, against a JSON round trip of the payload?

Run: ``python bench/run.py`` (``--write`` to save the table to ``bench/results/run.txt``).

**One attempt on a 1 MB dict.** ``PayloadAgent.run`` on the orders document of
``bench/merge.py`` (about 1 MB of JSON) with a scripted model
(``agent_payload.testing.ScriptedModel``: no network, no HTTP) that answers one change
request editing one field, in both layouts: the whole payload in the prompt
(``max_payload_tokens=None``) and the default (``"auto"``: an outline, the payload being
over the budget). The peer is ``json.loads(json.dumps(payload))`` in the same run: one C-level
encode and decode of the payload. Then the stages of the run timed alone, the same calls the
run makes (to say where the time goes).

**Two attempts on a typed model.** ``PayloadAgent.run`` on a pydantic model of 20,000 lines
(an invoice: ``Invoice(lines=[Line(...), ...])``) where the first reply fails validation and
the second is accepted; the calls of ``typed.check_round_trip`` are counted.

CPU time of the process, best of several repeats.

Goals (issue 33): the one-attempt run at most 5x the round trip; the round trip of a typed
payload checked once per run.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _timing import best_cpu, save  # noqa: E402
from merge import make_document  # noqa: E402

import agent_payload.typed as typed  # noqa: E402
from agent_payload import PayloadAgent, apply_change_request, prompts  # noqa: E402
from agent_payload.merge import choose_marker, dump_payload  # noqa: E402
from agent_payload.outline import _shape  # noqa: E402
from agent_payload.parse import parse_change_request  # noqa: E402
from agent_payload.testing import ScriptedModel  # noqa: E402
from agent_payload.usage import estimate_tokens  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "run.txt"


class Line(BaseModel):
    sku: str
    qty: int
    price: float


class Invoice(BaseModel):
    number: str
    lines: list[Line]


def one_attempt(lines: list[str], repeats: int) -> list[str]:
    payload = make_document(1_000_000)
    key = next(iter(payload["orders"]))
    reply = json.dumps({"updateElements": {"orders": {key: {"status": "shipped"}}}})
    task = "ship the first order"
    size = len(json.dumps(payload, separators=(",", ":")))

    def run(budget: int | str | None) -> Callable[[], object]:
        def go() -> object:
            agent = PayloadAgent(ScriptedModel([reply]), max_payload_tokens=budget)
            return agent.run(payload, task)

        return go

    estimate_tokens("warm the tokenizer up")
    run(None)()
    ref = best_cpu(lambda: json.loads(json.dumps(payload)), repeats)
    full = best_cpu(run(None), repeats)
    auto = best_cpu(run("auto"), repeats)
    budget = PayloadAgent(ScriptedModel([reply])).max_payload_tokens
    assert isinstance(budget, int)
    marker = choose_marker(payload, avoid=(task,))
    stages: list[tuple[str, Callable[[], object]]] = [
        ("intake check (dump_payload, copy=False)", lambda: dump_payload(payload, copy=False)),
        ("marker choice (choose_marker)", lambda: choose_marker(payload, avoid=(task,))),
        (
            "prompt, whole payload (render_prompt)",
            lambda: prompts.render_prompt(payload, task, marker=marker),
        ),
        (
            "outline: over budget? + outline",
            lambda: (
                _shape.exceeds(payload, budget, count=estimate_tokens)
                and _shape.outline(payload, budget, count=estimate_tokens)
            ),
        ),
        ("parse the reply", lambda: parse_change_request(reply)),
        (
            "merge, copy mode (apply_change_request)",
            lambda: apply_change_request(payload, json.loads(reply), markers=[marker]),
        ),
    ]
    out = [
        f"One attempt on a {size / 1e6:.2f} MB dict (orders document), scripted model",
        "",
        f"{'':<44}{'time':>10}{'vs round trip':>16}",
        "-" * 70,
        f"{'json.loads(json.dumps(payload))':<44}{ref * 1000:>8.1f}ms{1:>15.2f}x",
        f"{'run, whole payload (max_payload_tokens=None)':<44}{full * 1000:>8.1f}ms"
        f"{full / ref:>15.2f}x",
        f"{'run, default (outline over the budget)':<44}{auto * 1000:>8.1f}ms{auto / ref:>15.2f}x",
        "",
        "stages alone:",
    ]
    for name, fn in stages:
        seconds = best_cpu(fn, repeats)
        out.append(f"  {name:<42}{seconds * 1000:>8.1f}ms{seconds / ref:>15.2f}x")
    worst = max(full, auto) / ref
    out += [
        "",
        f"GOAL one-attempt run on 1 MB <= 5x json.dumps + json.loads: "
        f"{'MET' if worst <= 5 else 'MISSED'} ({full / ref:.2f}x whole payload, "
        f"{auto / ref:.2f}x outline)",
    ]
    print("\n".join(out), flush=True)
    lines += out
    return lines


def typed_two_attempts(lines: list[str]) -> list[str]:
    invoice = Invoice(
        number="INV-1",
        lines=[Line(sku=f"SKU-{i:05d}", qty=1 + i % 7, price=1.5 + i % 13) for i in range(20_000)],
    )
    replies = [
        json.dumps({"updateElements": {"lines": {"3": {"qty": "many"}}}}),
        json.dumps({"updateElements": {"lines": {"3": {"qty": 5}}}}),
    ]
    calls = 0
    real = typed.check_round_trip

    def counting(payload: Any, payload_type: Any = None) -> None:
        nonlocal calls
        calls += 1
        real(payload, payload_type)

    typed.check_round_trip = counting  # type: ignore[assignment]
    try:
        start = time.process_time()
        agent = PayloadAgent(ScriptedModel(replies), max_payload_tokens=None)
        result = agent.run(invoice, "five of line 3")
        seconds = time.process_time() - start
    finally:
        typed.check_round_trip = real  # type: ignore[assignment]
    assert result.attempts == 2 and result.payload.lines[3].qty == 5
    start = time.process_time()
    real(invoice)
    one = time.process_time() - start
    out = [
        "",
        "Two attempts on a typed model of 20,000 lines (the first reply fails validation)",
        "",
        f"  run: {seconds * 1000:.0f} ms; typed.check_round_trip called {calls} time(s), "
        f"{one * 1000:.0f} ms each",
        "",
        f"GOAL the round trip of a typed payload checked once per run: "
        f"{'MET' if calls == 1 else 'MISSED'} ({calls} call(s) in a two-attempt run)",
    ]
    print("\n".join(out), flush=True)
    return lines + out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=7, help="repeats of each timing")
    parser.add_argument("--write", action="store_true", help=f"save the table to {RESULTS}")
    args = parser.parse_args(argv)
    lines = [
        f"agent_payload run benchmark (Python {platform.python_version()}, "
        f"{platform.machine()}; CPU time, best of {args.repeats} repeats)",
        "",
    ]
    print("\n".join(lines), flush=True)
    lines = one_attempt(lines, args.repeats)
    lines = typed_two_attempts(lines)
    if args.write:
        save(RESULTS, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
