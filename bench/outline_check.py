"""Outline mode by hand: what a model is shown for a payload file, and what its reads return.

For a real-model check (a fresh model reading only these texts): print the first request's
messages and the read tools as the agent would send them, then answer each read call the
model makes, exactly as the agent would.

    python bench/outline_check.py [OPTIONS] PAYLOAD.json show [--task TEXT] [--system] [--tools]
    python bench/outline_check.py PAYLOAD.json read 'lines[31]' [--start N] [--end N]
    python bench/outline_check.py PAYLOAD.json find 'SKU-1031' [--path lines]
    python bench/outline_check.py PAYLOAD.json find --number 42
    python bench/outline_check.py PAYLOAD.json call '{"name": "read_payload", "arguments": {...}}'
    python bench/outline_check.py PAYLOAD.json apply '{"updateElements": ...}' [--out NEW.json]
    python bench/outline_check.py --make-catalogue N > catalogue.json   # a test payload

OPTIONS (before the payload file): ``--budget N`` (``max_payload_tokens``, default 4,000),
``--exclude RULE`` (a read-scope exclude rule, repeatable), ``--output-mode text|tool``.
``apply`` judges a change request through the same pipeline as the agent (the merge, the
read scope) and prints the result or the correction the model would get.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent_payload import judge as _judge
from agent_payload import outline
from agent_payload._loop import RunSettings, RunState, estimate_tokens
from agent_payload.guards import ReadScope


def _catalogue(n: int) -> dict[str, Any]:
    return {
        "catalogue": "spring",
        "currency": "EUR",
        "customer": {"name": "Ada Lovelace", "vat_id": "GB-123456789", "tier": "gold"},
        "lines": [
            {
                "sku": f"SKU-{i:05d}",
                "name": f"Catalogue item {i}",
                "qty": i % 9,
                "price": round(1 + i * 0.01, 2),
                "tags": ["boxed"] if i % 3 else ["boxed", "fragile"],
            }
            for i in range(n)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--make-catalogue"]:
        print(json.dumps(_catalogue(int(argv[1]))))
        return 0
    parser.add_argument("payload", help="a JSON file")
    parser.add_argument("--budget", type=int, default=4_000, help="max_payload_tokens")
    parser.add_argument("--exclude", action="append", default=[], help="read-scope exclude")
    parser.add_argument("--output-mode", choices=("text", "tool"), default="text")
    commands = parser.add_subparsers(dest="command")
    show = commands.add_parser("show", help="the first request as the agent builds it")
    show.add_argument("--task", default="(the task goes here)")
    show.add_argument("--system", action="store_true", help="print the system prompt too")
    show.add_argument("--tools", action="store_true", help="print the read tools too")
    read = commands.add_parser("read", help="answer read_payload")
    read.add_argument("path")
    read.add_argument("--start", type=int)
    read.add_argument("--end", type=int)
    find = commands.add_parser("find", help="answer find_in_payload")
    find.add_argument("text", nargs="?")
    find.add_argument("--number", type=float)
    find.add_argument("--path")
    call = commands.add_parser("call", help='answer {"name": ..., "arguments": ...} as sent')
    call.add_argument("json")
    apply = commands.add_parser("apply", help="judge a change request as the agent would")
    apply.add_argument("change_request")
    apply.add_argument("--out", help="write the merged payload here")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("give a command after the payload file: show, read, find, call, apply")
    payload = json.loads(Path(args.payload).read_text(encoding="utf-8"))
    scope = ReadScope(exclude=args.exclude) if args.exclude else None
    shown = scope.project(payload) if scope is not None else payload

    if args.command == "show":
        settings = RunSettings(
            output_mode=args.output_mode,
            max_payload_tokens=args.budget,
            read_scope=scope,
            guards=(scope,) if scope is not None else (),
            permissions_text=scope.describe() if scope is not None else None,
        )
        state = RunState.start(payload, args.task, settings)
        request = state.next_request()
        for message in request.messages:
            if message.role == "system" and not args.system:
                continue
            print(f"===== {message.role} =====\n{message.content}")
        if args.tools:
            for tool in request.tools:
                print(f"===== tool {tool.name} =====\n{tool.description}")
                print(json.dumps(dict(tool.parameters), indent=1))
        tokens = estimate_tokens("\n".join(m.content for m in request.messages))
        print(
            f"===== outline: {state.outlined}; first request {tokens:,} tokens "
            f"(max_payload_tokens {args.budget:,}) =====",
            file=sys.stderr,
        )
        return 0
    if args.command == "read":
        arguments: dict[str, Any] = {"path": args.path}
        for key in ("start", "end"):
            if getattr(args, key) is not None:
                arguments[key] = getattr(args, key)
        print(outline.answer(outline.READ_PAYLOAD, arguments, shown, args.budget))
        return 0
    if args.command == "find":
        arguments = {"text": args.text} if args.text is not None else {}
        if args.number is not None:
            number = args.number
            arguments["number"] = int(number) if number.is_integer() else number
        if args.path is not None:
            arguments["path"] = args.path
        print(outline.answer(outline.FIND_IN_PAYLOAD, arguments, shown, args.budget))
        return 0
    if args.command == "call":
        sent = json.loads(args.json)
        print(outline.answer(sent["name"], sent.get("arguments", {}), shown, args.budget))
        return 0
    verdict = _judge.judge(args.change_request, payload, read_scope=scope)
    if verdict.status == "accepted":
        print(f"accepted: {len(verdict.report.changes) if verdict.report else 0} change(s)")
        for change in verdict.report.changes if verdict.report else ():
            print(f"  {change.op} {change.path}: {json.dumps(change.new)[:200]}")
        if args.out:
            Path(args.out).write_text(json.dumps(verdict.payload_json), encoding="utf-8")
    else:
        print(f"{verdict.status}: the model would be sent this correction:\n")
        print(verdict.feedback(output_mode=args.output_mode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
