"""The command line, ``agent-payload apply | run | demo | mcp | batch | store`` (docs/cli.md;
``batch`` and ``store`` live in ``_cli_batch`` and ``_cli_store``). Exit status: 0 success; 1
refused or failed (an ``-o`` file that could not be written is then as it was); 2 a usage or
input error (any ``UsageError``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, NoReturn, TextIO

from agent_payload import _cli_batch, _cli_store
from agent_payload._filelock import lock_path, locked
from agent_payload._files import atomic_write_text, json_file_text, json_layout, loads_json_file
from agent_payload._jsondata import json_data
from agent_payload._render import Style, render_changes, render_issues, summarize, use_color
from agent_payload._reply import OUTPUT_MODES
from agent_payload.agent import PayloadAgent
from agent_payload.changes import DEFAULT_MARKERS
from agent_payload.errors import (
    AgentPayloadError,
    FileWriteError,
    LimitExceededError,
    MergeConflictError,
    ModelReplyError,
    ProviderError,
    RetriesExhaustedError,
    UsageError,
)
from agent_payload.merge import apply_change_request
from agent_payload.parse import parse_change_request_with_repairs
from agent_payload.providers import close_client, infer_model
from agent_payload.report import MergeReport

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

PROG = "agent-payload"


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so ``main`` returns a status to its caller."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message)


# --- reading inputs ------------------------------------------------------------------------


def _read_text(name: str, stdin: TextIO) -> tuple[str, str]:
    """Return ``(display name, text)`` of a file argument (``-`` is stdin)."""
    if name == "-":
        return "<stdin>", stdin.read()
    path = Path(name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        return name, data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{name}: not UTF-8 text (byte {exc.start}: {exc.reason}); JSON files must be UTF-8"
        ) from exc


def _loads(text: str, source: str, *, hint: str = "") -> Any:
    """Parse strict JSON exactly (``_files.loads_json_file``: any depth, numbers as written,
    duplicate keys refused); errors name the source, line and column."""
    try:
        return loads_json_file(text)
    except json.JSONDecodeError as exc:
        message = f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        raise UsageError(message + hint) from exc


def _parse_markers(text: str | None) -> frozenset[str]:
    if text is None:
        return DEFAULT_MARKERS
    markers = frozenset(m.strip() for m in text.split(",") if m.strip())
    if not markers:
        raise UsageError("--markers: give at least one marker, e.g. --markers DELETE,__DELETE__")
    return markers


def _write_payload(
    payload: Any, args: argparse.Namespace, stdout: TextIO, source: tuple[str, str]
) -> None:
    """Print ``payload`` in the layout of the input (``source``: its name and text), or write
    it to ``-o`` atomically; nothing with ``--dry-run``."""
    if args.dry_run:
        return
    text = json_file_text(json_data(payload), json_layout(source[1]))
    output = args.output
    if output is None or output == "-":
        stdout.write(text)
        stdout.flush()
        return
    # Over the input, or over a file whose writers lock it (MCP servers), the write holds the
    # file's lock; over the input it is refused when the input changed since it was read.
    in_place = source[0] != "-" and _same_file(source[0], output)
    if not in_place and not lock_path(output).exists():
        atomic_write_text(output, text)
        return
    with locked(output):
        if in_place and _text_now(source[0]) != source[1]:
            raise FileWriteError(
                f"could not write {output}: it was changed by someone else since it was "
                "read; the file was not changed (run the command again)",
                path=output,
            )
        atomic_write_text(output, text)


def _text_now(name: str) -> str | None:
    try:
        return Path(name).read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _payload_and_other(args: argparse.Namespace, other: str) -> tuple[str, str]:
    """``(payload file, CHANGE or TASK)`` from ``CMD PAYLOAD X`` or ``CMD --payload FILE X``."""
    given = list(args.operands)
    if args.payload_file is not None:
        if len(given) != 1:
            raise UsageError(
                f"with --payload, give only {other} (found {len(given)} operands: {given})"
            )
        return args.payload_file, given[0]
    if len(given) != 2:
        raise UsageError(
            f"expected PAYLOAD {other} (or --payload FILE {other}); found {len(given)} "
            f"operand{'' if len(given) == 1 else 's'}"
        )
    return given[0], given[1]


def _show(
    report: MergeReport,
    reasoning: str | None,
    summary: str,
    args: argparse.Namespace,
    style: Style,
    stdout: TextIO,
    stderr: TextIO,
) -> None:
    """The issues, the reasoning, the diff (on stdout with ``--dry-run``) and ``summary``."""
    for line in render_issues(report, style=style):
        stderr.write(line + "\n")
    if reasoning:
        stderr.write(f"{style.bold('reasoning')}: {reasoning}\n")
    diff_out, diff_style = (stdout, Style(False)) if args.dry_run else (stderr, style)
    for line in render_changes(report.changes, style=diff_style):
        diff_out.write(line + "\n")
    stderr.write(summary + ("; dry run: nothing written" if args.dry_run else "") + "\n")


# --- apply ---------------------------------------------------------------------------------


def _cmd_apply(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    payload_file, change_file = _payload_and_other(args, "CHANGE")
    if payload_file == "-" and change_file == "-":
        raise UsageError("PAYLOAD and CHANGE cannot both be read from stdin ('-'); name a file")
    if args.strict and args.lenient:
        raise UsageError(
            "--strict and --lenient contradict each other (all or nothing is the default)"
        )
    markers = _parse_markers(args.markers)

    payload_name, payload_text = _read_text(payload_file, stdin)
    change_name, change_text = _read_text(change_file, stdin)
    payload = _loads(payload_text, payload_name)
    style = Style(use_color(stderr, no_color=args.no_color))

    change: Any
    if args.reply:
        try:
            parsed = parse_change_request_with_repairs(change_text)
        except ModelReplyError as exc:
            raise UsageError(f"{change_name}: cannot read a change request: {exc}") from exc
        change = parsed.change_request
        if args.report or args.dry_run:
            for repair in parsed.repairs:
                stderr.write(f"{style.dim('repaired')} {change_name}: {repair}\n")
    else:
        hint = " (a raw model reply with fences or prose? pass --reply)"
        change = _loads(change_text, change_name, hint=hint)

    try:
        # A marker written out of habit is a conflict, not a deletion.
        result = apply_change_request(
            payload, change, strict=not args.lenient, markers=markers, refuse_stale_markers=True
        )
    except MergeConflictError as exc:
        for line in render_issues(exc.report, style=style):
            stderr.write(line + "\n")
        n = len(exc.report.conflicts)
        stderr.write(
            f"refused: {n} conflict{'' if n == 1 else 's'}; nothing was applied"
            f"{' or written' if args.output else ''} (--lenient applies the rest)\n"
        )
        return EXIT_FAILED
    except LimitExceededError as exc:
        raise UsageError(str(exc)) from exc

    report = result.report
    if args.report or args.dry_run:
        _show(report, report.reasoning, summarize(report), args, style, stdout, stderr)
    elif report.conflicts:
        n = len(report.conflicts)
        stderr.write(
            f"{n} conflicting part{'' if n == 1 else 's'} of the change request not applied "
            "(--lenient; see --report)\n"
        )
    _write_payload(result.payload, args, stdout, (payload_file, payload_text))
    return EXIT_OK


# --- run -----------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    payload_file, task = _payload_and_other(args, "TASK")
    payload_name, payload_text = _read_text(payload_file, stdin)
    payload = _loads(payload_text, payload_name)
    if task == "-":
        if payload_file == "-":
            raise UsageError("the payload and the task cannot both be read from stdin ('-')")
        task = stdin.read()
    if not task.strip():
        raise UsageError("the task is empty: say what should change in the payload")

    style = Style(use_color(stderr, no_color=args.no_color))
    model: Any = None
    try:
        model = infer_model(args.model)
        agent = PayloadAgent(model, max_retries=args.max_retries, output_mode=args.output_mode)
        result = agent.run(payload, task)
    except RetriesExhaustedError as exc:
        stderr.write(f"{style.red('failed')}: {exc}\n")
        for problem in exc.problems:
            where = f" at {problem.path}" if problem.path else ""
            stderr.write(f"  {problem.kind}{where}: {problem.message}\n")
        return EXIT_FAILED
    except ProviderError as exc:
        stderr.write(f"{style.red('provider error')}: {exc}\n")
        return EXIT_FAILED
    except LimitExceededError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        close_client(model)

    _write_payload(result.payload, args, stdout, (payload_file, payload_text))
    usage, attempts = result.usage, result.attempts
    cached = f" ({usage.cached_input_tokens} cached)" if usage.cached_input_tokens else ""
    summary = (
        f"{summarize(result.report)}; {attempts} attempt{'' if attempts == 1 else 's'}; "
        f"{usage.input_tokens} input{cached} + {usage.output_tokens} output tokens"
    )
    _show(result.report, result.reasoning, summary, args, style, stdout, stderr)
    return EXIT_OK


# --- demo ----------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from agent_payload.demo import run_demo  # the fake servers and the replay: demo only

    try:
        return run_demo(
            out=stdout,
            provider=args.provider,
            offline=args.offline,
            model_name=args.model_name,
            color=use_color(stdout, no_color=args.no_color),
        )
    except ProviderError as exc:
        stderr.write(
            f"provider error: {exc}\n(run `agent-payload demo --offline` for the replay)\n"
        )
        return EXIT_FAILED
    except RetriesExhaustedError as exc:
        stderr.write(f"failed: {exc}\n")
        return EXIT_FAILED


# --- mcp -----------------------------------------------------------------------------------


def _cmd_mcp(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from agent_payload.mcp import PayloadFileEditor, serve

    schema: Any = None
    if args.payload_schema is not None:
        schema_name, schema_text = _read_text(args.payload_schema, stdin)
        schema = _loads(schema_text, schema_name)
        if not isinstance(schema, dict):
            raise UsageError(f"{schema_name}: expected a JSON Schema (an object)")
    editor = PayloadFileEditor(
        args.payload,
        allow=args.allow,
        deny=args.deny,
        hide=args.hide,
        payload_schema=schema,
        max_read_tokens=args.max_read_tokens,
    )
    serve(editor)
    return EXIT_OK


# --- the parser ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``agent-payload`` (exposed for documentation and tests)."""
    parser = _Parser(
        prog=PROG,
        description="Let an LLM agent edit a large JSON payload with a compact change request.",
        epilog="Exit status: 0 success; 1 refused or failed (conflicts unless --lenient, "
        "retries exhausted, provider error); 2 usage or input error.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _add_apply(sub)
    _add_run(sub)
    _add_demo(sub)
    _add_mcp(sub)
    batch = _command(sub, "batch", **_cli_batch.TEXTS)
    _add_agent_options(
        batch,
        "openai:MODEL, openai-responses:MODEL or anthropic:MODEL (key and base URL from the "
        "environment)",
        modes=("text", "tool"),
    )
    _cli_batch.add_arguments(batch)
    _add_agent_options(_cli_store.add_arguments(_command(sub, "store", **_cli_store.TEXTS)), None)
    return parser


def _command(sub: Any, name: str, **texts: str) -> argparse.ArgumentParser:
    """A subcommand's parser; its description and epilog are printed as written."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, formatter_class=argparse.RawDescriptionHelpFormatter, **texts
    )
    return parser


def _add_payload_io(parser: argparse.ArgumentParser, other: str, what: str, shown: str) -> None:
    """What ``apply`` and ``run`` share: PAYLOAD and ``other`` (or ``--payload``), ``-o`` and
    ``--dry-run`` (``what`` they write, the ``shown`` on stderr)."""
    parser.add_argument(
        "operands",
        nargs="+",
        metavar=f"PAYLOAD {other}",
        help=f"payload JSON file and {other} (- for stdin, not both); with --payload, only {other}",
    )
    parser.add_argument(
        "--payload", "-p", dest="payload_file", metavar="FILE", help="payload JSON (- for stdin)"
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help=f"write the {what} to FILE (atomically, with the input's indentation and numbers; "
        "a read-only or hard-linked FILE is refused, a symlink followed)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help=f"print the diff (stdout) and the {shown} (stderr); do not print or write the {what}",
    )
    parser.add_argument("--no-color", action="store_true", help="no ANSI colour on stderr")


def _add_apply(sub: Any) -> None:
    apply = _command(
        sub,
        "apply",
        help="merge a change request into a payload and print the result",
        usage="%(prog)s [options] PAYLOAD CHANGE\n       %(prog)s [options] --payload FILE CHANGE",
        description="Merge CHANGE (a change request) into PAYLOAD and print the merged JSON. "
        "All or nothing: if any part conflicts, nothing is printed or written (exit 1); "
        "--lenient applies the rest.",
        epilog="examples:\n"
        "  agent-payload apply invoice.json change.json --report > merged.json\n"
        "  agent-payload apply --payload invoice.json change.json --dry-run\n"
        "  pbpaste | agent-payload apply invoice.json - --reply -o invoice.json\n\n"
        "exit status: 0 merged; 1 conflicts (nothing applied; with --lenient, 0 and the rest "
        "applied);\n2 usage or input error (unreadable file, invalid JSON with line and column).",
    )
    _add_payload_io(apply, "CHANGE", "result", "report")
    apply.add_argument(
        "--report",
        action="store_true",
        help="print warnings, conflicts, the reasoning, the diff and a summary on stderr",
    )
    apply.add_argument(
        "--lenient",
        action="store_true",
        help="apply what can be applied and report the conflicting parts (exit 0); the default "
        "is all or nothing",
    )
    apply.add_argument(
        "--strict",
        action="store_true",
        help="all or nothing (the default since 0.2; kept for scripts)",
    )
    apply.add_argument(
        "--reply",
        action="store_true",
        help="CHANGE is a raw model reply: read it with the tolerant parser "
        "(fences, prose, comments, trailing commas)",
    )
    apply.add_argument(
        "--markers",
        metavar="M[,M...]",
        help="comma-separated DELETE markers (default: DELETE,__DELETE__)",
    )
    apply.set_defaults(func=_cmd_apply)


def _add_run(sub: Any) -> None:
    run = _command(
        sub,
        "run",
        help="ask a model to edit a payload",
        usage="%(prog)s --model PROVIDER:MODEL [options] PAYLOAD TASK\n"
        "       %(prog)s --model PROVIDER:MODEL [options] --payload FILE TASK",
        description="Ask a model to carry out TASK on the payload; print the updated payload "
        "(stdout) and the model's reasoning and the diff (stderr).",
        epilog="example:\n"
        "  OPENAI_API_KEY=... agent-payload run --model openai:gpt-5.4-mini \\\n"
        "      invoice.json 'remove the duplicated freight line' -o invoice.json\n\n"
        "exit status: 0 done; 1 the model gave no usable change request within the retries, or "
        "the\nprovider failed; 2 usage or input error.",
    )
    _add_payload_io(run, "TASK", "payload", "reasoning")
    _add_agent_options(
        run,
        "e.g. openai:gpt-5.4-mini or anthropic:claude-haiku-5-5 (API key and base URL from the "
        "environment: OPENAI_API_KEY/OPENAI_BASE_URL, ANTHROPIC_API_KEY)",
    )
    run.set_defaults(func=_cmd_run)


def _add_agent_options(
    parser: argparse.ArgumentParser, model_help: str | None, modes: Sequence[str] = OUTPUT_MODES
) -> None:
    """The options of the agent a command runs (``run``, ``batch``, ``store edit``)."""
    parser.add_argument("--model", required=True, metavar="PROVIDER:MODEL", help=model_help)
    parser.add_argument(
        "--output-mode",
        choices=modes,
        default="text",
        help="how the model returns the change request (default: text)",
    )
    parser.add_argument(
        "--max-retries",
        type=_non_negative_int,
        default=2,
        metavar="N",
        help="corrections asked of the model before giving up (default: 2)",
    )


def _add_demo(sub: Any) -> None:
    demo = _command(
        sub,
        "demo",
        help="run the main job end to end (offline replay when no API key is set)",
        description="Edit a realistic invoice with a model: the real provider when\n"
        "OPENAI_API_KEY or ANTHROPIC_API_KEY is set, else an offline replay.",
    )
    demo.add_argument(
        "--provider", choices=("openai", "anthropic"), help="use this provider (needs its key)"
    )
    demo.add_argument("--offline", action="store_true", help="replay offline even with a key")
    demo.add_argument("--model-name", metavar="NAME", help="model name for the real provider")
    demo.add_argument("--no-color", action="store_true", help="no ANSI colour")
    demo.set_defaults(func=_cmd_demo)


def _add_mcp(sub: Any) -> None:
    mcp = _command(
        sub,
        "mcp",
        help="serve a JSON file to MCP hosts (stdio): read it, edit it with change requests",
        description="Serve PAYLOAD_FILE over stdio with the Model Context Protocol\n"
        "(needs pip install 'agent-payload[mcp]'). Tools:\n"
        "  read_payload          the payload as the model may see it, or one subtree (path;\n"
        "                        start/end for a range, keys for some keys of each element),\n"
        "                        and its version; outlined beyond --max-read-tokens\n"
        "  find_in_payload       the paths where texts or numbers occur\n"
        "  apply_change_request  judged like every change request; the file is written\n"
        "                        atomically after a call that applies; a request written\n"
        "                        against an older version (base_version) is rebased over the\n"
        "                        change requests applied since, or sent back when it touches\n"
        "                        what they changed; a refused call leaves it byte-identical\n"
        "  undo_last_change      reverts the last change\n"
        "Several servers (and agent-payload apply -o) may edit one file: they take its lock\n"
        "(.NAME.lock beside it) and share a journal of the change requests (.NAME.journal).\n"
        "stdout is the protocol; logs go to stderr.",
        epilog="rules (for --allow, --deny, --hide): a.b is the key b inside a, items[3] an "
        "element,\nitems[*] any element, * any one key or element, ** any depth, "
        '["a.b"] a key with dots;\na suffix :add,update,delete limits a rule to those kinds '
        "of change.\n\n"
        "examples:\n"
        "  agent-payload mcp invoice.json --deny id --deny 'lines[*].sku' --hide customer\n"
        "  python -m agent_payload.mcp config.json --allow 'features.**' "
        "--payload-schema config.schema.json\n\n"
        "exit status: 0 the client closed the connection; 2 usage or input error (unreadable "
        "file,\ninvalid JSON, a payload not matching its schema, a malformed rule).",
    )
    mcp.add_argument("payload", metavar="PAYLOAD_FILE", help="the JSON file to serve and edit")
    mcp.add_argument(
        "--allow",
        action="append",
        metavar="RULE",
        help="only paths matching an allow rule may change (repeatable; default: everything)",
    )
    mcp.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="RULE",
        help="paths that may not change: read-only (repeatable)",
    )
    mcp.add_argument(
        "--hide",
        action="append",
        default=[],
        metavar="RULE",
        help="keys the model does not see in read_payload and may not change (repeatable)",
    )
    mcp.add_argument(
        "--payload-schema",
        metavar="SCHEMA.json",
        help="a JSON Schema the payload must keep matching; apply_change_request's input "
        "schema is derived from it, and a change whose result does not match is refused",
    )
    mcp.add_argument(
        "--max-read-tokens",
        type=int,
        default=None,
        metavar="N",
        help="the most tokens one answer of read_payload or find_in_payload (or a correction's "
        "current values) may take; a larger value is outlined (default 20000)",
    )
    mcp.set_defaults(func=_cmd_mcp)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _version() -> str:
    try:
        return version("agent-payload")
    except Exception:
        return "unknown"


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the command line; return the exit status (the console script exits with it)."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version
            return int(exc.code) if isinstance(exc.code, int) else EXIT_OK
        status: int = args.func(args, stdin, stdout, stderr)
        return status
    except UsageError as exc:  # a usage or input error
        stderr.write(f"{PROG}: error: {exc}\n")
        return EXIT_USAGE
    except AgentPayloadError as exc:
        stderr.write(f"{PROG}: error: {exc}\n")
        return EXIT_FAILED
    except BrokenPipeError:
        # The reader went away (``agent-payload apply ... | head``): silence the interpreter's
        # final flush of the dead pipe, as the Python docs advise.
        if stdout is sys.stdout:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
        return EXIT_FAILED
    except KeyboardInterrupt:
        stderr.write(f"{PROG}: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
