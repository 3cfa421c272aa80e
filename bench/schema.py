"""What the change-request schema costs: its size against the payload's own schema, and the
input tokens of one tool-mode attempt.

Two payload types, built deterministically:

* ``Wide``: one model with 200 fields of mixed kinds (required strings and integers, optional
  floats, booleans with defaults, ``Literal`` choices, lists of strings);
* ``Nested``: 20 sub-models of 10 fields each (distinct field names, the same mix), each a
  field of the root.

For each: the payload's own JSON Schema as pydantic writes it (``model_json_schema()``,
minified), the change-request schema (``agent_payload.schema.change_request_schema``,
minified), their ratio (the target: at most 2x), and the input tokens of a tool-mode attempt
(``RunState`` with ``output_mode="tool"``: the system prompt, the user message with the payload
and the tool's schema; the payload schema is no longer repeated in the user message), counted
with ``o200k_base`` (``bpe-openai``) when installed, else length/4. The second attempt adds the
failed reply and its correction.

    python bench/schema.py            # print the table
    python bench/schema.py --write    # also write bench/results/schema.txt
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, create_model

from agent_payload._loop import RunSettings, RunState
from agent_payload.errors import ModelReplyError
from agent_payload.prompts import render_prompt
from agent_payload.providers.base import ModelReply
from agent_payload.schema import change_request_schema
from agent_payload.usage import estimate_tokens

RESULTS = Path(__file__).parent / "results"
TARGET = 2.0

_KINDS: list[tuple[Any, Any]] = [
    (str, ...),
    (int, ...),
    (float | None, None),
    (bool, False),
    (Literal["draft", "issued", "paid"], "draft"),
    (list[str], []),
]
_VALUES: list[Any] = ["text", 7, 1.5, True, "issued", ["a", "b"]]


def _wide() -> tuple[type[BaseModel], BaseModel]:
    fields: dict[str, Any] = {f"field_{i}": _KINDS[i % len(_KINDS)] for i in range(200)}
    model = create_model("Wide", **fields)
    instance = model(**{f"field_{i}": _VALUES[i % len(_VALUES)] for i in range(200)})
    return model, instance


def _nested() -> tuple[type[BaseModel], BaseModel]:
    subs: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for j in range(20):
        names = {f"s{j}_f{i}": (i + j) % len(_KINDS) for i in range(10)}
        sub = create_model(f"Section{j}", **{n: _KINDS[k] for n, k in names.items()})
        subs[f"section_{j}"] = (sub, ...)
        values[f"section_{j}"] = sub(**{n: _VALUES[k] for n, k in names.items()})
    model = create_model("Nested", **subs)
    return model, model(**values)


def _chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def measure(name: str, model: type[BaseModel], instance: BaseModel) -> dict[str, Any]:
    own_schema = model.model_json_schema()
    own = _chars(own_schema)
    own_tokens = estimate_tokens(json.dumps(own_schema, separators=(",", ":")))
    schema = change_request_schema(model)
    size = _chars(schema)
    state = RunState.start(instance, "Mark it issued", RunSettings(output_mode="tool"))
    assert state.schema is not None
    first = sum(estimate_tokens(m.content) for m in state.conversation())
    tool = estimate_tokens(json.dumps(state.schema, separators=(",", ":")))
    # The user message as 0.1 wrote it in tool mode (with the payload schema inside).
    old_user = render_prompt(
        state.prepared.payload_json, "Mark it issued", marker=state.marker, payload_type=model
    ).user
    twice = estimate_tokens(old_user) - estimate_tokens(state.messages[1].content)
    state.next_request()
    bad = '{"updateElements": {"field_x": 1}}'
    with contextlib.suppress(ModelReplyError):  # the expected correction
        state.judge(ModelReply(bad, finish_reason="stop"))
    second = sum(estimate_tokens(m.content) for m in state.conversation())
    return {
        "name": name,
        "own": own,
        "size": size,
        "ratio": size / own,
        "schema_tokens": tool,
        "own_tokens": own_tokens,
        "attempt1": first + tool,
        "attempt2": second + tool,
        "saved": twice,
    }


def report() -> str:
    rows = [measure("200-field model", *_wide()), measure("20x10 nested model", *_nested())]
    counter = "o200k_base" if estimate_tokens("hello world") == 2 else "length/4 estimate"
    lines = [
        f"agent_payload schema benchmark (Python {sys.version.split()[0]}; tokens: {counter})",
        "",
        f"{'payload type':<20} {'own schema':>11} {'change-request':>15} {'ratio':>6} "
        f"{'own schema':>11} {'tool schema':>12} {'attempt 1':>10} {'attempt 2':>10} "
        f"{'not resent':>11}",
        f"{'':<20} {'chars':>11} {'chars':>15} {'':>6} {'tokens':>11} {'tokens':>12} "
        f"{'tokens in':>10} {'tokens in':>10} {'tokens':>11}",
        "-" * 113,
    ]
    for r in rows:
        lines.append(
            f"{r['name']:<20} {r['own']:>11,} {r['size']:>15,} {r['ratio']:>5.2f}x "
            f"{r['own_tokens']:>11,} {r['schema_tokens']:>12,} {r['attempt1']:>10,} "
            f"{r['attempt2']:>10,} {r['saved']:>11,}"
        )
    lines.append("")
    lines.append(
        "attempt N tokens in: system + user messages (+ the failed reply and its correction "
        "on attempt 2) + the tool schema, per request. not resent: tokens of the payload "
        "schema that 0.1 also put in the user message in tool mode, on every attempt."
    )
    ok = True
    for r in rows:
        met = r["ratio"] <= TARGET
        ok = ok and met
        lines.append(
            f"GOAL change-request schema <= {TARGET:g}x the payload's own schema, {r['name']}: "
            f"{'MET' if met else 'MISSED'} ({r['ratio']:.2f}x)"
        )
    lines.append("ALL GOALS MET" if ok else "ALL GOALS NOT MET")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write bench/results/schema.txt")
    args = parser.parse_args(argv)
    text = report()
    print(text, end="")
    if args.write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "schema.txt").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
