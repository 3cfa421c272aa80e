"""``agent-payload store``: a shared ``PayloadStore`` from the command line (create, show,
history, edit with a model, revert); its URL is ``--db`` or ``$AGENT_PAYLOAD_STORE``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from agent_payload._files import loads_json_file
from agent_payload._render import Style, render_changes, summarize, use_color
from agent_payload._reply import OUTPUT_MODES
from agent_payload.agent import PayloadAgent
from agent_payload.errors import (
    ConfigurationError,
    MergeConflictError,
    ProviderError,
    RetriesExhaustedError,
    StalePayloadError,
    UsageError,
)
from agent_payload.merge import apply_change_request
from agent_payload.providers import close_client, infer_model

if TYPE_CHECKING:
    from agent_payload.store import HistoryEntry, PayloadStore

__all__ = ["ENV", "TEXTS", "add_arguments"]

ENV = "AGENT_PAYLOAD_STORE"
EXIT_OK, EXIT_FAILED = 0, 1


TEXTS = dict(
    help="a payload store shared by many writers (SQLite or PostgreSQL)",
    description="Create, show, edit with a model, revert and read the history of payloads "
    "kept by key in a database shared by many agents and processes. Every edit is "
    "applied at the version it was written against (rebased over what was applied since, "
    "or sent back to the model when it collides) and recorded with its reasoning.",
    epilog="examples:\n"
    "  export AGENT_PAYLOAD_STORE=sqlite:///plans.db\n"
    "  agent-payload store create plan plan.json\n"
    "  agent-payload store edit plan 'mark step 2 done' --model openai:gpt-5.4-mini\n"
    "  agent-payload store history plan\n"
    "  agent-payload store revert plan 3\n\n"
    "exit status: 0 done; 1 refused or failed (a collision, a conflict, retries "
    "exhausted, provider error); 2 usage or input error.",
)


def add_arguments(store: argparse.ArgumentParser, error: Callable[[str], Exception]) -> None:
    """The options of ``store`` (its parser made with ``TEXTS``); ``error`` builds the CLI's
    usage error."""
    store.add_argument(
        "--db",
        metavar="URL",
        help=f"sqlite:///path.db or postgresql://... (default: ${ENV})",
    )
    verbs = store.add_subparsers(dest="verb", metavar="VERB", parser_class=type(store))
    verbs.required = True
    create = verbs.add_parser("create", help="store a payload under a new key (version 1)")
    create.add_argument("key")
    create.add_argument("payload", metavar="PAYLOAD", help="payload JSON file (- for stdin)")
    show = verbs.add_parser("show", help="print a key's payload (stdout) and version (stderr)")
    show.add_argument("key")
    show.add_argument("--version", type=int, metavar="N", help="as it was at version N")
    history = verbs.add_parser("history", help="every version: what changed, who, why")
    history.add_argument("key")
    history.add_argument("--json", action="store_true", help="one JSON object per entry")
    edit = verbs.add_parser("edit", help="ask a model to edit a key")
    edit.add_argument("key")
    edit.add_argument("task", metavar="TASK", help="what should change")
    edit.add_argument("--model", required=True, metavar="PROVIDER:MODEL")
    edit.add_argument("--max-retries", type=int, default=2, metavar="N")
    edit.add_argument("--output-mode", choices=OUTPUT_MODES, default="text")
    revert = verbs.add_parser("revert", help="restore an earlier version as a new one")
    revert.add_argument("key")
    revert.add_argument("version", type=int, metavar="VERSION")
    revert.add_argument("--reason", metavar="TEXT", help="recorded as the entry's reasoning")
    for parser in (create, show, history, edit, revert):
        parser.add_argument("--no-color", action="store_true", help="no ANSI colour on stderr")
    store.set_defaults(
        func=lambda args, stdin, stdout, stderr: _cmd(args, stdin, stdout, stderr, error)
    )


def _cmd(
    args: argparse.Namespace,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    error: Callable[[str], Exception],
) -> int:
    from agent_payload.store import PayloadStore

    url = args.db or os.environ.get(ENV)
    if not url:
        raise error(f"store: give the store's URL with --db or ${ENV}")
    style = Style(use_color(stderr, no_color=args.no_color))
    try:
        with PayloadStore(url) as store:
            verb: Callable[..., int] = {
                "create": _create,
                "show": _show,
                "history": _history,
                "edit": _edit,
                "revert": _revert,
            }[args.verb]
            return verb(store, args, stdin, stdout, stderr, style)
    except (UsageError, ConfigurationError, StalePayloadError) as exc:
        raise error(str(exc)) from exc
    except MergeConflictError as exc:  # a collision or a conflict: nothing stored
        stderr.write(f"{style.red('refused')}: {exc}\n")
        return EXIT_FAILED


def _create(
    store: PayloadStore, args: Any, stdin: TextIO, stdout: TextIO, stderr: TextIO, style: Style
) -> int:
    if args.payload == "-":
        text, name = stdin.read(), "stdin"
    else:
        try:
            with open(args.payload, encoding="utf-8") as handle:
                text, name = handle.read(), args.payload
        except OSError as exc:
            raise UsageError(f"cannot read {args.payload}: {exc.strerror or exc}") from exc
    try:
        payload = loads_json_file(text)
    except ValueError as exc:
        raise UsageError(f"{name}: not JSON ({exc})") from exc
    stored = store.create(args.key, payload)
    stderr.write(f"created {args.key} at version {stored.version}\n")
    return EXIT_OK


def _show(
    store: PayloadStore, args: Any, stdin: TextIO, stdout: TextIO, stderr: TextIO, style: Style
) -> int:
    if args.version is None:
        doc = store.get(args.key)
        payload, version = doc.payload, doc.version
    else:
        payload, version = store.payload_at(args.key, args.version), args.version
    stdout.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    stderr.write(f"{args.key} at version {version}\n")
    return EXIT_OK


def _history(
    store: PayloadStore, args: Any, stdin: TextIO, stdout: TextIO, stderr: TextIO, style: Style
) -> int:
    entries = store.history(args.key)
    payload = store.created_payload(args.key)
    for entry in entries:
        changes: list[Any] = []
        if entry.kind != "create":
            result = apply_change_request(
                payload, entry.change_request, strict=True, markers=entry.markers, share=True
            )
            payload, changes = result.payload, result.report.changes
        if args.json:
            stdout.write(json.dumps(_entry_json(entry), ensure_ascii=False) + "\n")
            continue
        stdout.write(_headline(entry) + "\n")
        if entry.reasoning:
            stdout.write(f"  why: {entry.reasoning}\n")
        if entry.rebased:
            written = json.dumps(entry.written, ensure_ascii=False)
            stdout.write(f"  written against version {entry.base_version}: {written}\n")
        lines = render_changes(changes, style=Style(False))
        stdout.write("".join(f"  {line}\n" for line in lines))
    return EXIT_OK


def _headline(entry: HistoryEntry) -> str:
    when = entry.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    parts = [f"version {entry.version}", when, entry.kind]
    if entry.kind == "revert":
        parts[-1] = f"revert to version {entry.reverted_to}"
    if entry.rebased:
        parts.append(f"rebased from version {entry.base_version}")
    if entry.model_name:
        parts.append(f"model {entry.model_name}")
    if entry.run_id:
        parts.append(f"run {entry.run_id}")
    if entry.usage is not None:
        parts.append(f"{entry.usage.input_tokens}+{entry.usage.output_tokens} tokens")
    return " | ".join(parts)


def _entry_json(entry: HistoryEntry) -> dict[str, Any]:
    data = {k: v for k, v in dataclasses.asdict(entry).items() if k != "key"}
    return {**data, "created_at": entry.created_at.isoformat()}


def _edit(
    store: PayloadStore, args: Any, stdin: TextIO, stdout: TextIO, stderr: TextIO, style: Style
) -> int:
    if not args.task.strip():
        raise UsageError("the task is empty: say what should change in the payload")
    model: Any = None
    try:
        model = infer_model(args.model)
        agent = PayloadAgent(model, max_retries=args.max_retries, output_mode=args.output_mode)
        result = store.edit(args.key, agent, args.task)
    except RetriesExhaustedError as exc:
        stderr.write(f"{style.red('failed')}: {exc}\n")
        return EXIT_FAILED
    except ProviderError as exc:
        stderr.write(f"{style.red('provider error')}: {exc}\n")
        return EXIT_FAILED
    finally:
        close_client(model)
    version = next(
        e.version for e in reversed(store.history(args.key)) if e.run_id == result.run_id
    )
    if result.reasoning:
        stderr.write(f"{style.bold('reasoning')}: {result.reasoning}\n")
    for line in render_changes(result.report.changes, style=style):
        stderr.write(line + "\n")
    stderr.write(
        f"{summarize(result.report)}; {result.attempts} attempt"
        f"{'' if result.attempts == 1 else 's'}; stored {args.key} at version {version}\n"
    )
    return EXIT_OK


def _revert(
    store: PayloadStore, args: Any, stdin: TextIO, stdout: TextIO, stderr: TextIO, style: Style
) -> int:
    stored = store.revert(args.key, args.version, reasoning=args.reason)
    assert stored.report is not None
    for line in render_changes(stored.report.changes, style=style):
        stderr.write(line + "\n")
    stderr.write(f"reverted {args.key} to version {args.version}: now version {stored.version}\n")
    return EXIT_OK
