"""The command line: ``agent-payload apply | run | demo | mcp | batch``.

``apply PAYLOAD CHANGE``
    Merge a change request into a payload and print the merged JSON (indent 2, UTF-8) on
    stdout, or write it to ``-o FILE``. Either file may be ``-`` for stdin (not both).
    ``--report`` prints the warnings and conflicts (code, change-request path, message), the
    diff and a one-line summary on stderr. ``--strict`` refuses the whole request when anything
    conflicts: nothing is printed or written, the conflicts go to stderr, exit status 1.
    ``--reply`` reads CHANGE as a raw model reply (code fences, prose, comments, trailing commas)
    with the tolerant parser instead of as strict JSON. ``--markers`` sets the DELETE markers.

``run --model PROVIDER:MODEL --payload FILE TASK``
    Ask a model (``openai:gpt-5.4-mini``, ``anthropic:claude-haiku-5-5``; the SDK reads its API
    key and base URL from the environment) to carry out TASK on the payload. The updated payload
    goes to stdout (or ``-o FILE``); the diff, the attempts and the token usage go to stderr.

``batch --model PROVIDER:MODEL --input ITEMS.jsonl --state JOB.sqlite -o RESULTS.jsonl``
    Many payloads through the provider's batch API (``--concurrent N`` for servers without
    one), resumable: run the same command again after an interruption
    (``agent_payload._cli_batch``, ``agent_payload.batch``).

``demo``
    The main job end to end on a realistic invoice: against the real provider when
    ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY`` is set, else an offline replay of scripted
    replies shipped with the package (it says which). ``--offline`` forces the replay.

``mcp PAYLOAD_FILE [--allow RULE]... [--deny RULE]... [--hide RULE]... [--payload-schema S]``
    Serve the file to MCP hosts over stdio (``agent_payload.mcp``).

Exit status: 0 success; 1 the job was refused or failed (conflicts under ``--strict``, the
correction loop gave up, the provider failed, the ``-o`` file could not be written: writes are
atomic, so it is then exactly as it was); 2 usage or input errors (bad arguments, unreadable
files, invalid JSON, a payload or change request the merge cannot take).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from agent_payload import _jsontext
from agent_payload._files import atomic_write_text
from agent_payload._render import Style, render_changes, render_issues, summarize, use_color
from agent_payload.changes import DEFAULT_MARKERS
from agent_payload.errors import (
    AgentPayloadError,
    ConfigurationError,
    LimitExceededError,
    MergeConflictError,
    ModelReplyError,
    ProviderError,
    RetriesExhaustedError,
    UsageError,
)

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

PROG = "agent-payload"


class CliError(Exception):
    """A usage or input error, printed as ``agent-payload: error: ...`` with exit status 2."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so ``main`` returns a status to its caller."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise CliError(message)


# --- reading inputs ------------------------------------------------------------------------


def _read_text(name: str, stdin: TextIO) -> tuple[str, str]:
    """Return ``(display name, text)`` of a file argument (``-`` is stdin)."""
    if name == "-":
        return "<stdin>", stdin.read()
    path = Path(name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        return name, data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CliError(
            f"{name}: not UTF-8 text (byte {exc.start}: {exc.reason}); JSON files must be UTF-8"
        ) from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (use null or a string)")


def _loads(text: str, source: str, *, hint: str = "") -> Any:
    """Parse strict JSON; errors name the source, line and column."""
    try:
        return _jsontext.loads(text, parse_constant=_reject_constant)  # any depth
    except json.JSONDecodeError as exc:
        message = f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        raise CliError(message + hint) from exc
    except ValueError as exc:
        raise CliError(f"{source}: {exc}{hint}") from exc


def _parse_markers(text: str | None) -> frozenset[str]:
    if text is None:
        return DEFAULT_MARKERS
    markers = frozenset(m.strip() for m in text.split(",") if m.strip())
    if not markers:
        raise CliError("--markers: give at least one marker, e.g. --markers DELETE,__DELETE__")
    return markers


def _dump(value: Any) -> str:
    text = _jsontext.dumps(value, indent=2, ensure_ascii=False) + "\n"  # any depth
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (a "\\ud800" escape in the input) cannot be written as UTF-8: keep
        # it as a JSON escape, which is valid JSON text.
        text = _jsontext.dumps(value, indent=2, ensure_ascii=True) + "\n"
    return text


def _write_result(text: str, output: str | None, stdout: TextIO) -> None:
    if output is None or output == "-":
        stdout.write(text)
        stdout.flush()
        return
    # Atomic: on any failure (disk full, a file-size limit) the file at ``output``, which may
    # be the input itself, is exactly as it was; FileWriteError names it (exit status 1).
    atomic_write_text(output, text)


def _to_jsonable(payload: Any) -> Any:
    from agent_payload._jsondata import json_data

    return json_data(payload)


# --- apply ---------------------------------------------------------------------------------


def _cmd_apply(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    if args.payload == "-" and args.change == "-":
        raise CliError("PAYLOAD and CHANGE cannot both be read from stdin ('-'); name a file")
    markers = _parse_markers(args.markers)

    from agent_payload.merge import apply_change_request

    payload_name, payload_text = _read_text(args.payload, stdin)
    change_name, change_text = _read_text(args.change, stdin)
    payload = _loads(payload_text, payload_name)
    style = Style(use_color(stderr, no_color=args.no_color))

    change: Any
    if args.reply:
        from agent_payload.parse import parse_change_request_with_repairs

        try:
            parsed = parse_change_request_with_repairs(change_text)
        except ModelReplyError as exc:
            raise CliError(f"{change_name}: cannot read a change request: {exc}") from exc
        change = parsed.change_request
        if args.report:
            for repair in parsed.repairs:
                stderr.write(f"{style.dim('repaired')} {change_name}: {repair}\n")
    else:
        change = _loads(
            change_text,
            change_name,
            hint=" (a raw model reply with fences or prose? pass --reply)",
        )

    try:
        result = apply_change_request(payload, change, strict=args.strict, markers=markers)
    except MergeConflictError as exc:
        for line in render_issues(exc.report, style=style):
            stderr.write(line + "\n")
        n = len(exc.report.conflicts)
        stderr.write(
            f"refused (--strict): {n} conflict{'' if n == 1 else 's'}; nothing was applied\n"
        )
        return EXIT_FAILED
    except (UsageError, LimitExceededError) as exc:
        raise CliError(str(exc)) from exc

    _write_result(_dump(_to_jsonable(result.payload)), args.output, stdout)
    if args.report:
        for line in render_issues(result.report, style=style):
            stderr.write(line + "\n")
        for line in render_changes(result.report.changes, style=style):
            stderr.write(line + "\n")
        stderr.write(summarize(result.report) + "\n")
    elif result.report.conflicts:
        n = len(result.report.conflicts)
        stderr.write(
            f"{n} conflicting part{'' if n == 1 else 's'} of the change request not applied "
            "(see --report; --strict refuses the whole request)\n"
        )
    return EXIT_OK


# --- run -----------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    payload_name, payload_text = _read_text(args.payload, stdin)
    payload = _loads(payload_text, payload_name)
    task = args.task
    if task == "-":
        if args.payload == "-":
            raise CliError("the payload and the task cannot both be read from stdin ('-')")
        task = stdin.read()
    if not task.strip():
        raise CliError("the task is empty: say what should change in the payload")

    from agent_payload.agent import PayloadAgent
    from agent_payload.providers import infer_model

    style = Style(use_color(stderr, no_color=args.no_color))
    try:
        model = infer_model(args.model)
        agent = PayloadAgent(model, max_retries=args.max_retries, output_mode=args.output_mode)
        result = agent.run(payload, task)
    except RetriesExhaustedError as exc:
        stderr.write(f"{style.red('failed')}: {exc}\n")
        for problem in exc.last_errors:
            where = f" at {problem.path}" if problem.path else ""
            stderr.write(f"  {problem.kind}{where}: {problem.message}\n")
        return EXIT_FAILED
    except ProviderError as exc:
        stderr.write(f"{style.red('provider error')}: {exc}\n")
        return EXIT_FAILED
    except (UsageError, ConfigurationError, LimitExceededError) as exc:
        raise CliError(str(exc)) from exc

    _write_result(_dump(_to_jsonable(result.payload)), args.output, stdout)
    for line in render_issues(result.report, style=style):
        stderr.write(line + "\n")
    for line in render_changes(result.report.changes, style=style):
        stderr.write(line + "\n")
    usage = result.usage
    stderr.write(
        f"{summarize(result.report)}; {result.attempts} attempt"
        f"{'' if result.attempts == 1 else 's'}; "
        f"{usage.input_tokens} input + {usage.output_tokens} output tokens\n"
    )
    return EXIT_OK


# --- demo ----------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from agent_payload.demo import run_demo

    try:
        return run_demo(
            out=stdout,
            provider=args.provider,
            offline=args.offline,
            model=args.model,
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
    except (UsageError, ConfigurationError) as exc:
        raise CliError(str(exc)) from exc


# --- mcp -----------------------------------------------------------------------------------


def _cmd_mcp(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    schema: Any = None
    if args.payload_schema is not None:
        schema_name, schema_text = _read_text(args.payload_schema, stdin)
        schema = _loads(schema_text, schema_name)
        if not isinstance(schema, dict):
            raise CliError(f"{schema_name}: expected a JSON Schema (an object)")
    from agent_payload.mcp import PayloadFileEditor, serve

    try:
        editor = PayloadFileEditor(
            args.payload, allow=args.allow, deny=args.deny, hide=args.hide, payload_schema=schema
        )
        serve(editor)
    except (UsageError, ConfigurationError) as exc:
        raise CliError(str(exc)) from exc
    return EXIT_OK


# --- the parser ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``agent-payload`` (exposed for documentation and tests)."""
    parser = _Parser(
        prog=PROG,
        description="Let an LLM agent edit a large JSON payload with a compact change request.",
        epilog="Exit status: 0 success; 1 refused or failed (conflicts under --strict, "
        "retries exhausted, provider error); 2 usage or input error.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    apply = sub.add_parser(
        "apply",
        help="merge a change request into a payload and print the result",
        description="Merge CHANGE (a change request) into PAYLOAD and print the merged JSON.",
        epilog="examples:\n"
        "  agent-payload apply invoice.json change.json --report > merged.json\n"
        "  pbpaste | agent-payload apply invoice.json - --reply --strict -o merged.json\n\n"
        "exit status: 0 merged (conflicting parts skipped, see --report); 1 conflicts under "
        "--strict;\n2 usage or input error (unreadable file, invalid JSON with line and column).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    apply.add_argument("payload", metavar="PAYLOAD", help="payload JSON file, or - for stdin")
    apply.add_argument("change", metavar="CHANGE", help="change request file, or - for stdin")
    apply.add_argument(
        "--report",
        action="store_true",
        help="print warnings, conflicts, the diff and a summary on stderr",
    )
    apply.add_argument(
        "--strict",
        action="store_true",
        help="refuse the whole request if anything conflicts (exit 1, nothing printed)",
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
    apply.add_argument("-o", "--output", metavar="FILE", help="write the result to FILE")
    apply.add_argument("--no-color", action="store_true", help="no ANSI colour on stderr")
    apply.set_defaults(func=_cmd_apply)

    run = sub.add_parser(
        "run",
        help="ask a model to edit a payload",
        description="Ask a model to carry out TASK on the payload; print the updated payload "
        "(stdout) and the diff (stderr).",
        epilog="example:\n"
        "  OPENAI_API_KEY=... agent-payload run --model openai:gpt-5.4-mini \\\n"
        "      --payload invoice.json 'remove the duplicated freight line' -o invoice.new.json\n\n"
        "exit status: 0 done; 1 the model gave no usable change request within the retries, or "
        "the\nprovider failed; 2 usage or input error.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("task", metavar="TASK", help="what should change (or - for stdin)")
    run.add_argument(
        "--model",
        required=True,
        metavar="PROVIDER:MODEL",
        help="e.g. openai:gpt-5.4-mini or anthropic:claude-haiku-5-5 (API key and base URL "
        "from the environment: OPENAI_API_KEY/OPENAI_BASE_URL, ANTHROPIC_API_KEY)",
    )
    run.add_argument("--payload", required=True, metavar="FILE", help="payload JSON, - for stdin")
    run.add_argument(
        "--output-mode",
        choices=("text", "tool", "json_schema"),
        default="text",
        help="how the model returns the change request (default: text)",
    )
    run.add_argument(
        "--max-retries",
        type=_non_negative_int,
        default=2,
        metavar="N",
        help="corrections asked of the model before giving up (default: 2)",
    )
    run.add_argument("-o", "--output", metavar="FILE", help="write the payload to FILE")
    run.add_argument("--no-color", action="store_true", help="no ANSI colour on stderr")
    run.set_defaults(func=_cmd_run)

    demo = sub.add_parser(
        "demo",
        help="run the main job end to end (offline replay when no API key is set)",
        description="Edit a realistic invoice with a model: the real provider when "
        "OPENAI_API_KEY or ANTHROPIC_API_KEY is set, else an offline replay.",
    )
    demo.add_argument(
        "--provider", choices=("openai", "anthropic"), help="use this provider (needs its key)"
    )
    demo.add_argument("--offline", action="store_true", help="replay offline even with a key")
    demo.add_argument("--model", metavar="NAME", help="model name for the real provider")
    demo.add_argument("--no-color", action="store_true", help="no ANSI colour")
    demo.set_defaults(func=_cmd_demo)

    mcp = sub.add_parser(
        "mcp",
        help="serve a JSON file to MCP hosts (stdio): read it, edit it with change requests",
        description="Serve PAYLOAD_FILE over stdio with the Model Context Protocol\n"
        "(needs pip install 'agent-payload[mcp]'). Tools:\n"
        "  read_payload          the payload as the model may see it, or one subtree (path)\n"
        "  apply_change_request  judged like every change request; the file is written\n"
        "                        atomically after a call that applies, and the call is\n"
        "                        refused if someone else edited the file since the model\n"
        "                        last read it; a refused call leaves it byte-identical\n"
        "  undo_last_change      restores the file as it was before the last change\n"
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
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    mcp.set_defaults(func=_cmd_mcp)
    from agent_payload import _cli_batch

    _cli_batch.add_parser(sub, CliError)
    return parser


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
        from importlib.metadata import version

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
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    stderr = stderr if stderr is not None else sys.stderr
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version
            return int(exc.code) if isinstance(exc.code, int) else EXIT_OK
        status: int = args.func(args, stdin, stdout, stderr)
        return status
    except CliError as exc:
        stderr.write(f"{PROG}: error: {exc}\n")
        return exc.status
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
