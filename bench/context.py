"""Input tokens per run against payload size: the whole payload in every request (full mode)
against outline mode (``max_payload_tokens``), for the same one-field edit through the agent.

A catalogue of N lines (``sku``, ``name``, ``qty``, ``price``, ``description``) sized 10 KB to
50 MB; the task sets the quantity of one line three quarters of the way in. The model is
scripted but behaves like one: in full mode it answers with the change request at once; in
outline mode it calls ``find_in_payload`` with the SKU, reads the element at the path the
answer names, then sends the change request. Every request the agent builds is counted with
the project's token estimate (o200k_base when ``bpe-openai`` is installed): the messages, and
the read tools' descriptions and schemas in outline mode. Each run's result is checked.

    python bench/context.py             # 10 KB ... 50 MB (a few minutes: full mode renders it all)
    python bench/context.py --quick     # 10 KB ... 1 MB
    python bench/context.py --write     # also write bench/results/context.txt
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from agent_payload import PayloadAgent
from agent_payload._loop import estimate_tokens
from agent_payload.providers.base import ModelReply, ModelRequest, ToolCall
from agent_payload.testing import ScriptedModel

RESULTS = Path(__file__).parent / "results"
SIZES = {"10 KB": 10_000, "100 KB": 100_000, "1 MB": 1_000_000, "10 MB": 10**7, "50 MB": 5 * 10**7}
QUICK = ("10 KB", "100 KB", "1 MB")
BUDGET = 4_000
"""``max_payload_tokens`` of the outline runs (a few thousand tokens)."""


def _line(i: int) -> dict[str, Any]:
    return {
        "sku": f"SKU-{i:07d}",
        "name": f"Catalogue item {i}",
        "qty": i % 9,
        "price": round(1 + i * 0.01, 2),
        "description": f"Standard part {i}, boxed, shipped from the central warehouse.",
    }


LINE_BYTES = len(json.dumps(_line(5_000_000))) + 1


def catalogue(size: int) -> dict[str, Any]:
    n = max(1, size // LINE_BYTES)
    return {"catalogue": "spring", "currency": "EUR", "lines": [_line(i) for i in range(n)]}


def request_tokens(request: ModelRequest) -> int:
    text = "\n".join(m.content for m in request.messages)
    tools = json.dumps([[t.name, t.description, dict(t.parameters)] for t in request.tools])
    return estimate_tokens(text) + (estimate_tokens(tools) if request.tools else 0)


class Model:
    """The scripted model: finds the SKU, reads what it found, sends the change request."""

    def __init__(self, sku: str, target: int) -> None:
        self.sku = sku
        self.target = target
        self.tokens: list[int] = []
        self.scripted = ScriptedModel(self.reply)

    def reply(self, request: ModelRequest) -> str | ModelReply:
        self.tokens.append(request_tokens(request))
        change = json.dumps({"updateElements": {"lines": {str(self.target): {"qty": 100}}}})
        if not request.tools:
            return change
        results = [m for m in request.messages if m.role == "tool"]
        if not results:
            call = ToolCall("c1", "find_in_payload", json.dumps({"text": self.sku}))
            return ModelReply(text="", tool_calls=(call,))
        if len(results) == 1:
            found = re.search(r"^(lines\[\d+\])\.sku:", results[0].content, re.MULTILINE)
            assert found, results[0].content
            call = ToolCall("c2", "read_payload", json.dumps({"path": found.group(1)}))
            return ModelReply(text="", tool_calls=(call,))
        return change


def one_run(payload: dict[str, Any], budget: int | None) -> tuple[int, int, int, float]:
    """(input tokens summed over the run's requests, the largest request, requests, seconds)."""
    target = len(payload["lines"]) * 3 // 4
    model = Model(payload["lines"][target]["sku"], target)
    started = time.perf_counter()
    result = PayloadAgent(model.scripted, max_payload_tokens=budget).run(
        payload, f"Set the quantity of {payload['lines'][target]['sku']} to 100"
    )
    seconds = time.perf_counter() - started
    assert result.payload["lines"][target]["qty"] == 100
    assert result.payload["lines"][target - 1] == payload["lines"][target - 1]
    return sum(model.tokens), max(model.tokens), len(model.tokens), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 KB to 1 MB only")
    parser.add_argument("--write", action="store_true", help="write bench/results/context.txt")
    args = parser.parse_args()
    sizes = {k: v for k, v in SIZES.items() if not args.quick or k in QUICK}
    rows = [
        f"one-field edit, input tokens per run (max_payload_tokens={BUDGET:,} for outline mode)",
        "",
        f"{'payload':>8} {'lines':>9} {'JSON bytes':>12} {'full: input':>12} "
        f"{'outline: input':>15} {'requests':>9} {'largest':>8} {'ratio':>8}",
    ]
    print("\n".join(rows), flush=True)
    for label, size in sizes.items():
        payload = catalogue(size)
        size_bytes = len(json.dumps(payload))
        full, _, _, full_s = one_run(payload, None)
        outline, largest, requests, outline_s = one_run(payload, BUDGET)
        row = (
            f"{label:>8} {len(payload['lines']):>9,} {size_bytes:>12,} {full:>12,} "
            f"{outline:>15,} {requests:>9} {largest:>8,} {full / outline:>7.1f}x"
        )
        rows.append(row)
        print(row, f"  (full {full_s:.1f} s, outline {outline_s:.1f} s)", flush=True)
    rows += [
        "",
        "full: the payload in the one request. outline: the outline, then find_in_payload and",
        "read_payload answers, then the change request (requests = 3 once the payload is over",
        "the budget; 1 below it, where both modes send the same request). largest: the largest",
        "single request of the outline run. Tokens: o200k_base via bpe-openai when installed.",
    ]
    if args.write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "context.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
