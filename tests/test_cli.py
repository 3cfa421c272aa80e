"""The command line: ``agent-payload apply | run | demo`` (in process through ``main`` and as a
subprocess), and the diff renderer behind it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_payload._render import (
    Style,
    format_payload_path,
    render_changes,
    render_issues,
    summarize,
    use_color,
)
from agent_payload.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from agent_payload.report import Change, Issue, MergeReport

ROOT = Path(__file__).resolve().parent.parent


class _Run:
    def __init__(self, status: int, out: str, err: str) -> None:
        self.status = status
        self.out = out
        self.err = err

    def json(self) -> Any:
        return json.loads(self.out)


def cli(*argv: str, stdin: str = "") -> _Run:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return _Run(status, out.getvalue(), err.getvalue())


def write(tmp_path: Path, name: str, value: Any) -> str:
    path = tmp_path / name
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    path.write_text(text, encoding="utf-8")
    return str(path)


PAYLOAD = {"name": "Zoë", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}], "tmp": 1}
CHANGE = {"updateElements": {"items": [{}, {"qty": 5}], "tmp": "DELETE"}}
MERGED = {"name": "Zoë", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 5}]}


# --- apply ---------------------------------------------------------------------------------


def test_apply_files_prints_merged_json_indented_utf8(tmp_path: Path) -> None:
    """apply PAYLOAD CHANGE prints the merged payload as indent-2 JSON with non-ASCII kept."""
    indented = json.dumps(PAYLOAD, indent=2, ensure_ascii=False)
    run = cli("apply", write(tmp_path, "p.json", indented), write(tmp_path, "c.json", CHANGE))
    assert run.status == EXIT_OK, run.err
    assert run.json() == MERGED
    assert run.out == json.dumps(MERGED, indent=2, ensure_ascii=False) + "\n"
    assert "Zoë" in run.out
    assert run.err == ""


def test_apply_reads_payload_from_stdin(tmp_path: Path) -> None:
    """'-' as PAYLOAD reads the payload from stdin."""
    run = cli("apply", "-", write(tmp_path, "c.json", CHANGE), stdin=json.dumps(PAYLOAD))
    assert run.status == EXIT_OK, run.err
    assert run.json() == MERGED


def test_apply_reads_change_from_stdin(tmp_path: Path) -> None:
    """'-' as CHANGE reads the change request from stdin."""
    run = cli("apply", write(tmp_path, "p.json", PAYLOAD), "-", stdin=json.dumps(CHANGE))
    assert run.status == EXIT_OK, run.err
    assert run.json() == MERGED


def test_apply_refuses_both_from_stdin() -> None:
    """PAYLOAD and CHANGE cannot both be '-': usage error, exit 2, nothing printed."""
    run = cli("apply", "-", "-", stdin="{}")
    assert run.status == EXIT_USAGE
    assert run.out == ""
    assert "both" in run.err and "stdin" in run.err


def test_apply_writes_output_file(tmp_path: Path) -> None:
    """-o FILE writes the result there (UTF-8) and prints nothing on stdout."""
    target = tmp_path / "out.json"
    run = cli(
        "apply",
        write(tmp_path, "p.json", PAYLOAD),
        write(tmp_path, "c.json", CHANGE),
        "-o",
        str(target),
    )
    assert run.status == EXIT_OK, run.err
    assert run.out == ""
    assert json.loads(target.read_text(encoding="utf-8")) == MERGED


def test_apply_report_lists_warnings_conflicts_diff_and_summary(tmp_path: Path) -> None:
    """--report writes each warning and conflict with code and change-request path, the diff
    and a summary line to stderr; stdout stays the merged JSON (--lenient: conflicts skipped)."""
    change = {
        "updateElements": {"items": [{}, {}, {}, "DELETE"], "missing": 3, "name": "Zoe"},
    }
    run = cli(
        "apply",
        write(tmp_path, "p.json", PAYLOAD),
        write(tmp_path, "c.json", change),
        "--report",
        "--lenient",
    )
    assert run.status == EXIT_OK, run.err
    assert run.json() == {**PAYLOAD, "name": "Zoe", "missing": 3}
    assert "warning update_missing at updateElements.missing:" in run.err
    assert "conflict placeholder_out_of_range at updateElements.items[2]:" in run.err
    assert '~ name: "Zoë" -> "Zoe"' in run.err
    assert "+ missing: 3" in run.err
    assert "2 changes (1 added, 1 updated, 0 deleted)" in run.err
    assert "1 warning; 0 conflicts" not in run.err
    assert "\x1b[" not in run.err


def test_apply_strict_exits_1_on_conflict_without_printing(tmp_path: Path) -> None:
    """--strict with a conflicting request prints no result, lists the conflict, exits 1."""
    change = {"updateElements": {"items": {"7": {"qty": 1}}}}
    target = tmp_path / "out.json"
    run = cli(
        "apply",
        write(tmp_path, "p.json", PAYLOAD),
        write(tmp_path, "c.json", change),
        "--strict",
        "-o",
        str(target),
    )
    assert run.status == EXIT_FAILED
    assert run.out == ""
    assert not target.exists()
    assert "index_out_of_range" in run.err
    assert 'updateElements.items["7"]' in run.err
    assert "nothing was applied" in run.err


def test_apply_strict_succeeds_without_conflict(tmp_path: Path) -> None:
    """--strict with a clean request behaves like the default."""
    run = cli(
        "apply", write(tmp_path, "p.json", PAYLOAD), write(tmp_path, "c.json", CHANGE), "--strict"
    )
    assert run.status == EXIT_OK, run.err
    assert run.json() == MERGED


def test_apply_bad_payload_json_names_file_line_and_column(tmp_path: Path) -> None:
    """Invalid payload JSON: exit 2 and a message with the file name, line and column."""
    bad = write(tmp_path, "bad.json", '{\n  "a": 1,\n  "b": 2\n  "c": 3\n}')
    run = cli("apply", bad, write(tmp_path, "c.json", CHANGE))
    assert run.status == EXIT_USAGE
    assert run.out == ""
    assert f"{bad}: invalid JSON at line 4, column 3" in run.err
    assert "Expecting ',' delimiter" in run.err


def test_apply_bad_change_json_suggests_reply(tmp_path: Path) -> None:
    """Invalid change JSON names <stdin> with line and column and points at --reply."""
    reply = '```json\n{"updateElements": {"name": "Ada"}}\n```'
    run = cli("apply", write(tmp_path, "p.json", PAYLOAD), "-", stdin=reply)
    assert run.status == EXIT_USAGE
    assert "<stdin>: invalid JSON at line 1, column 1" in run.err
    assert "--reply" in run.err


def test_apply_reply_reads_a_raw_model_reply(tmp_path: Path) -> None:
    """--reply reads a fenced reply with prose through the tolerant parser."""
    reply = 'Here is the change:\n```json\n{"updateElements": {"name": "Ada",}}\n```\n'
    run = cli("apply", write(tmp_path, "p.json", PAYLOAD), "-", "--reply", stdin=reply)
    assert run.status == EXIT_OK, run.err
    assert run.json() == {**PAYLOAD, "name": "Ada"}
    assert run.err == ""
    reported = cli(
        "apply", write(tmp_path, "p.json", PAYLOAD), "-", "--reply", "--report", stdin=reply
    )
    assert "repaired <stdin>: removed code fence" in reported.err


def test_apply_reply_without_change_request_is_a_usage_error(tmp_path: Path) -> None:
    """--reply on prose with no change request: exit 2 naming the input."""
    run = cli("apply", write(tmp_path, "p.json", PAYLOAD), "-", "--reply", stdin="Sure, done!")
    assert run.status == EXIT_USAGE
    assert "<stdin>: cannot read a change request" in run.err


def test_apply_markers_make_delete_data(tmp_path: Path) -> None:
    """--markers __DELETE__ makes "__DELETE__" the marker: "DELETE" is written as data with
    newElements; in updateElements it is a stale_marker conflict (MERGE.md section 4)."""
    payload = {"method": "GET", "tmp": 1}
    change = {"newElements": {"method": "DELETE"}, "updateElements": {"tmp": "__DELETE__"}}
    args = [write(tmp_path, "p.json", payload), write(tmp_path, "c.json", change)]
    run = cli("apply", *args, "--markers", "__DELETE__")
    assert run.status == EXIT_OK, run.err
    assert run.json() == {"method": "DELETE"}
    habit = {"updateElements": {"method": "DELETE", "tmp": "__DELETE__"}}
    refused = cli("apply", args[0], write(tmp_path, "h.json", habit), "--markers", "__DELETE__")
    assert refused.status != EXIT_OK and "stale_marker" in refused.err + refused.out
    default = cli("apply", args[0], write(tmp_path, "h.json", habit))
    assert default.json() == {}


def test_apply_empty_markers_is_a_usage_error(tmp_path: Path) -> None:
    """--markers with no marker in it is refused with exit 2."""
    run = cli(
        "apply", write(tmp_path, "p.json", {}), write(tmp_path, "c.json", {}), "--markers", ","
    )
    assert run.status == EXIT_USAGE
    assert "--markers" in run.err


def test_apply_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    """A file that cannot be read: exit 2 with its name."""
    missing = str(tmp_path / "nope.json")
    run = cli("apply", missing, write(tmp_path, "c.json", CHANGE))
    assert run.status == EXIT_USAGE
    assert f"cannot read {missing}" in run.err


def test_apply_payload_root_not_container_is_a_usage_error(tmp_path: Path) -> None:
    """A payload whose root is a string is refused by the merge: exit 2 with its message."""
    run = cli("apply", write(tmp_path, "p.json", '"text"'), write(tmp_path, "c.json", CHANGE))
    assert run.status == EXIT_USAGE
    assert "agent-payload: error:" in run.err
    assert "str" in run.err


def test_apply_rejects_nan(tmp_path: Path) -> None:
    """NaN is not JSON: the payload is refused with exit 2."""
    run = cli("apply", write(tmp_path, "p.json", '{"a": NaN}'), write(tmp_path, "c.json", {}))
    assert run.status == EXIT_USAGE
    assert "NaN" in run.err


def test_unknown_option_is_a_usage_error() -> None:
    """argparse errors return 2 from main instead of exiting the process."""
    run = cli("apply", "--frobnicate")
    assert run.status == EXIT_USAGE
    assert "agent-payload: error:" in run.err


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"}
    }
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


@pytest.mark.slow
def test_apply_as_subprocess(tmp_path: Path) -> None:
    """python -m agent_payload apply reads stdin, prints the result and exits 0 (the entry
    point; every option is tested in process above)."""
    module = "agent_payload"
    change = write(tmp_path, "c.json", CHANGE)
    proc = subprocess.run(
        [sys.executable, "-m", module, "apply", "-", change],
        input=json.dumps(PAYLOAD),
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=_env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == MERGED


@pytest.mark.slow
def test_apply_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    """When the reader of stdout is gone (``... | head`` that exited), the process ends with
    status 1 and no traceback."""
    big = {"items": [{"n": i, "text": "x" * 50} for i in range(20000)]}
    payload = write(tmp_path, "p.json", big)
    change = write(tmp_path, "c.json", {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_payload", "apply", payload, change],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait() == EXIT_FAILED
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err


# --- run -------------------------------------------------------------------------------------


def test_run_against_fake_openai_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run --model openai:... talks to the server in OPENAI_BASE_URL with the real SDK, prints
    the updated payload on stdout and the diff on stderr."""
    pytest.importorskip("openai")
    from agent_payload.testing import FakeProviderServer

    reply = json.dumps({"updateElements": {"items": {"1": {"qty": 9}}}, "reasoning": "more"})
    with FakeProviderServer([reply]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        run = cli(
            "run",
            "--model",
            "openai:gpt-test",
            "--payload",
            write(tmp_path, "p.json", PAYLOAD),
            "--no-color",
            "set the quantity of b to 9",
        )
        assert len(server.requests) == 1
        assert "set the quantity of b to 9" in server.requests[0].text
    assert run.status == EXIT_OK, run.err
    assert run.json() == {**PAYLOAD, "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 9}]}
    assert "~ items[1].qty: 2 -> 9" in run.err
    assert "1 attempt" in run.err


def test_run_output_mode_tool_forces_a_tool_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--output-mode tool makes the request force the change-request tool; -o writes the
    payload to a file."""
    pytest.importorskip("openai")
    from agent_payload.testing import FakeProviderServer

    target = tmp_path / "out.json"
    with FakeProviderServer(['{"updateElements": {"name": "Ada"}}']) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        run = cli(
            "run",
            "--model",
            "openai:gpt-test",
            "--payload",
            write(tmp_path, "p.json", PAYLOAD),
            "--output-mode",
            "tool",
            "-o",
            str(target),
            "rename to Ada",
        )
        assert server.requests[0].output_mode == "tool"
    assert run.status == EXIT_OK, run.err
    assert run.out == ""
    assert json.loads(target.read_text(encoding="utf-8")) == {**PAYLOAD, "name": "Ada"}


def test_run_retries_exhausted_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When every reply is unusable, run exits 1, says why, and prints no payload."""
    pytest.importorskip("openai")
    from agent_payload.testing import FakeProviderServer

    typo = '{"updateElement": {"name": "Ada"}}'
    with FakeProviderServer([typo, typo]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        run = cli(
            "run",
            "--model",
            "openai:gpt-test",
            "--payload",
            write(tmp_path, "p.json", PAYLOAD),
            "--max-retries",
            "1",
            "rename",
        )
        assert len(server.requests) == 2
    assert run.status == EXIT_FAILED
    assert run.out == ""
    assert "failed" in run.err


def test_run_empty_task_is_a_usage_error(tmp_path: Path) -> None:
    """An empty task is refused before any model is built."""
    run = cli("run", "--model", "openai:x", "--payload", write(tmp_path, "p.json", {}), "  ")
    assert run.status == EXIT_USAGE
    assert "task is empty" in run.err


# --- demo ------------------------------------------------------------------------------------


def test_demo_offline_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no API key, demo replays offline and says so, shows the correction, the diff and
    the token comparison, without colour, and exits 0."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    run = cli("demo", "--no-color")
    assert run.status == EXIT_OK, run.out + run.err
    out = run.out
    assert "offline replay: no API key found" in out
    assert "Task:" in out and "express handling" in out
    assert "Attempt 1" in out and "rejected" in out
    assert "correction sent back to the model before attempt 2" in out
    assert "index_out_of_range" in out or "28" in out
    assert "Attempt 2" in out and "applied" in out
    assert '~ customer.billingContact.name: "Jonas Weber" -> "Mara Lindqvist"' in out
    assert "- lineItems[27]:" in out
    assert "+ lineItems[27]:" in out
    assert "a full rewrite of the payload would cost" in out
    assert "Check: the result equals the expected invoice" in out
    assert "\x1b[" not in out


def test_demo_honours_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR set and no keys: the offline replay has no ANSI codes."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    run = cli("demo")
    assert run.status == EXIT_OK, run.out + run.err
    assert "offline replay" in run.out and "Tokens:" in run.out
    assert "\x1b[" not in run.out


def test_demo_provider_without_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """--provider openai without OPENAI_API_KEY: exit 2 pointing at --offline."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run = cli("demo", "--provider", "openai")
    assert run.status == EXIT_USAGE
    assert "OPENAI_API_KEY" in run.err and "--offline" in run.err


def test_demo_live_against_fake_openai_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """With OPENAI_API_KEY set, demo uses the real OpenAI SDK (here against the fake server in
    OPENAI_BASE_URL), says it is live, and --offline still forces the replay."""
    pytest.importorskip("openai")
    from agent_payload.demo import load_data
    from agent_payload.testing import FakeProviderServer

    replies = [r["text"] for r in load_data("replay")["replies"]]
    with FakeProviderServer(replies * 2) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        run = cli("demo", "--no-color", "--model-name", "gpt-test")
        assert len(server.requests) == 2
        offline = cli("demo", "--no-color", "--offline")
        assert len(server.requests) == 2
    assert run.status == EXIT_OK, run.out + run.err
    assert "live: openai:gpt-test" in run.out
    assert "offline replay" not in run.out
    assert "correction sent back" in run.out
    assert offline.status == EXIT_OK
    assert "offline replay: --offline given" in offline.out


# --- rendering ------------------------------------------------------------------------------


def test_format_payload_path() -> None:
    """Payload paths are written like items[3].price, odd keys quoted, the root as (root)."""
    assert format_payload_path(("items", 3, "price")) == "items[3].price"
    assert format_payload_path(("a.b", "c d", 0)) == '["a.b"]["c d"][0]'
    assert format_payload_path((0, "x")) == "[0].x"
    assert format_payload_path(()) == "(root)"


def test_render_changes_and_summary() -> None:
    """Each change is one +/-/~ line; values are compact JSON, long ones shortened."""
    report = MergeReport(
        changes=[
            Change("add", ("tags", 2), new="new"),
            Change("delete", ("items", 0), old={"sku": "a"}),
            Change("update", ("name",), old="Bob", new="Ada"),
            Change("update", ("text",), old="x" * 200, new="y"),
        ],
        warnings=[Issue("update_missing", "updateElements.x", "treated as an addition")],
    )
    lines = render_changes(report.changes, width=40)
    assert lines[0] == '+ tags[2]: "new"'
    assert lines[1] == '- items[0]: {"sku": "a"}'
    assert lines[2] == '~ name: "Bob" -> "Ada"'
    assert lines[3].startswith('~ text: "xxx') and "…" in lines[3] and len(lines[3]) < 60
    assert summarize(report) == (
        "4 changes (1 added, 2 updated, 1 deleted); 1 warning; 0 conflicts"
    )
    assert render_issues(report) == [
        "warning update_missing at updateElements.x: treated as an addition"
    ]


def test_colour_only_on_a_tty_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """Colour needs a terminal, no --no-color and no NO_COLOR; Style then adds ANSI codes."""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(Tty()) is True
    assert use_color(io.StringIO()) is False
    assert use_color(Tty(), no_color=True) is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_color(Tty()) is False
    assert Style(True).green("+ a") == "\x1b[32m+ a\x1b[0m"
    assert Style(False).green("+ a") == "+ a"


def test_demo_live_anthropic_when_only_its_key_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """With only ANTHROPIC_API_KEY set, demo goes to Anthropic (the real SDK, here pointed at
    the fake server through ANTHROPIC_BASE_URL) with its default model."""
    pytest.importorskip("anthropic")
    from agent_payload.demo import DEFAULT_MODELS, load_data
    from agent_payload.testing import FakeProviderServer

    replies = [r["text"] for r in load_data("replay")["replies"]]
    with FakeProviderServer(replies) as server:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
        run = cli("demo", "--no-color")
        assert len(server.requests) == 2
        assert server.requests[0].model_name == DEFAULT_MODELS["anthropic"]
    assert run.status == EXIT_OK, run.out + run.err
    assert f"live: anthropic:{DEFAULT_MODELS['anthropic']}" in run.out
    assert "rejected: index_out_of_range" in run.out


def test_apply_never_tracebacks_on_valid_but_awkward_json(tmp_path: Path) -> None:
    """A lone surrogate escape is written back as an escape (stdout stays valid JSON), and JSON
    nested deeper than Python's reader allows is read and written like any other (the merge
    accepts 20,000 levels), never a RecursionError."""
    surrogate = tmp_path / "u.json"
    surrogate.write_text('{"name": "x", "s": "\\ud800"}', encoding="utf-8")
    change = write(tmp_path, "c.json", {"updateElements": {"name": "y"}})
    run = cli("apply", str(surrogate), change)
    assert run.status == EXIT_OK
    assert run.json() == {"name": "y", "s": "\ud800"}
    deep = tmp_path / "d.json"
    deep.write_text('{"name": "x", "d": ' + "[" * 5000 + "]" * 5000 + "}", encoding="utf-8")
    run = cli("apply", str(deep), change)
    assert run.status == EXIT_OK, run.err
    assert run.out.startswith('{"name": "y", "d": [[[')  # the input's one-line layout kept
    assert run.out.count("[") == 5000


def test_apply_says_when_parts_were_not_applied(tmp_path: Path) -> None:
    """--lenient without --report: a conflict is not silent: one line on stderr says how many
    parts of the request were not applied (the merged JSON still goes to stdout, exit 0)."""
    payload = write(tmp_path, "p.json", {"note": "x"})
    change = write(tmp_path, "c.json", {"updateElement": {"note": "y"}})
    run = cli("apply", payload, change, "--lenient")
    assert run.status == EXIT_OK
    assert run.json() == {"note": "x"}
    assert "1 conflicting part of the change request not applied" in run.err
