"""``agent-payload store``: a shared ``PayloadStore`` from the command line (create, show,
history, edit with a model, revert); its URL is ``--db`` or ``$AGENT_PAYLOAD_STORE``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any, TextIO

from agent_payload._files import loads_json_file
from agent_payload._render import Style, render_changes, summarize, use_color
from agent_payload.agent import PayloadAgent
from agent_payload.errors import (
    MergeConflictError,
    ProviderError,
    RetriesExhaustedError,
    StalePayloadError,
    UsageError,
)
from agent_payload.merge import apply_change_request
from agent_payload.providers import close_client, infer_model

if TYPE_CHECKING:
    from agent_payload.report import Change
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


def add_arguments(store: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``store`` (its parser made with ``TEXTS``); returns the parser of
    ``edit``, which takes the agent's options."""
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
    revert = verbs.add_parser("revert", help="restore an earlier version as a new one")
    revert.add_argument("key")
    revert.add_argument("version", type=int, metavar="VERSION")
    revert.add_argument("--reason", metavar="TEXT", help="recorded as the entry's reasoning")
    for parser in (create, show, history, edit, revert):
        parser.add_argument("--no-color", action="store_true", help="no ANSI colour on stderr")
    store.set_defaults(func=_cmd)
    return edit


def _cmd(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from agent_payload.store import PayloadStore

    url = args.db or os.environ.get(ENV)
    if not url:
        raise UsageError(f"store: give the store's URL with --db or ${ENV}")
    style = Style(use_color(stderr, no_color=args.no_color))
    try:
        with PayloadStore(url) as store:
            verbs = _Verbs(store, args, stdin, stdout, stderr, style)
            status: int = getattr(verbs, args.verb)()
            return status
    except StalePayloadError as exc:  # a usage error here: a version the key never had
        raise UsageError(str(exc)) from exc
    except MergeConflictError as exc:  # a collision or a conflict: nothing stored
        stderr.write(f"{style.red('refused')}: {exc}\n")
        return EXIT_FAILED


@dataclasses.dataclass
class _Verbs:
    """The verbs, each a method run on the open store with the command's arguments."""

    store: PayloadStore
    args: Any
    stdin: TextIO
    out: TextIO
    err: TextIO
    style: Style

    def create(self) -> int:
        args = self.args
        if args.payload == "-":
            text, name = self.stdin.read(), "stdin"
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
        stored = self.store.create(args.key, payload)
        self.err.write(f"created {args.key} at version {stored.version}\n")
        return EXIT_OK

    def show(self) -> int:
        key, version = self.args.key, self.args.version
        if version is None:
            doc = self.store.get(key)
            payload, version = doc.payload, doc.version
        else:
            payload = self.store.payload_at(key, version)
        self.out.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
        self.err.write(f"{key} at version {version}\n")
        return EXIT_OK

    def history(self) -> int:
        entries = self.store.history(self.args.key)
        payload = self.store.created_payload(self.args.key)
        for entry in entries:
            changes: list[Any] = []
            if entry.kind != "create":
                result = apply_change_request(
                    payload, entry.change_request, strict=True, markers=entry.markers, share=True
                )
                payload, changes = result.payload, result.report.changes
            if self.args.json:
                self.out.write(json.dumps(_entry_json(entry), ensure_ascii=False) + "\n")
                continue
            self.out.write(_headline(entry) + "\n")
            if entry.reasoning:
                self.out.write(f"  why: {entry.reasoning}\n")
            if entry.rebased:
                written = json.dumps(entry.written, ensure_ascii=False)
                self.out.write(f"  written against version {entry.base_version}: {written}\n")
            lines = render_changes(changes, style=Style(False))
            self.out.write("".join(f"  {line}\n" for line in lines))
        return EXIT_OK

    def edit(self) -> int:
        args, style = self.args, self.style
        if not args.task.strip():
            raise UsageError("the task is empty: say what should change in the payload")
        model: Any = None
        try:
            model = infer_model(args.model)
            agent = PayloadAgent(model, max_retries=args.max_retries, output_mode=args.output_mode)
            result = self.store.edit(args.key, agent, args.task)
        except RetriesExhaustedError as exc:
            self.err.write(f"{style.red('failed')}: {exc}\n")
            return EXIT_FAILED
        except ProviderError as exc:
            self.err.write(f"{style.red('provider error')}: {exc}\n")
            return EXIT_FAILED
        finally:
            close_client(model)
        history = reversed(self.store.history(args.key))
        version = next(e.version for e in history if e.run_id == result.run_id)
        if result.reasoning:
            self.err.write(f"{style.bold('reasoning')}: {result.reasoning}\n")
        self._changes(result.report.changes)
        self.err.write(
            f"{summarize(result.report)}; {result.attempts} attempt"
            f"{'' if result.attempts == 1 else 's'}; stored {args.key} at version {version}\n"
        )
        return EXIT_OK

    def revert(self) -> int:
        key, version = self.args.key, self.args.version
        stored = self.store.revert(key, version, reasoning=self.args.reason)
        assert stored.report is not None
        self._changes(stored.report.changes)
        self.err.write(f"reverted {key} to version {version}: now version {stored.version}\n")
        return EXIT_OK

    def _changes(self, changes: list[Change]) -> None:
        self.err.write("".join(line + "\n" for line in render_changes(changes, style=self.style)))


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
