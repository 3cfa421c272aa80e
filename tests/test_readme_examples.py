"""Issue 18: the README's tool loop, validators and FakeProviderServer examples run as printed
(against the fake server with the real SDKs), and ``mypy --strict`` passes on every marked
README example and on an OpenAI tool loop that hands the tool definitions to the real SDK."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent_payload.testing import FakeProviderServer, Reply

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TOOL_LOOP_OPENAI = Path(__file__).resolve().parent / "typing" / "tool_loop_openai.py"


def _blocks() -> dict[str, str]:
    text = README.read_text(encoding="utf-8")
    found = re.findall(r"<!-- ([a-z-]+-example) -->\s*```python\n(.*?)```", text, re.DOTALL)
    return dict(found)


def _run(code: str, name: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, name, "exec"), {"__name__": "readme"})
    return out.getvalue().splitlines()


def _expected(code: str) -> list[str]:
    return [
        line.split("# ", 1)[1].strip()
        for line in code.splitlines()
        if line.startswith("print(") and "# " in line
    ]


def test_the_readme_marks_the_new_examples() -> None:
    assert {"tool-loop-example", "validators-example", "fake-server-example"} <= set(_blocks())


def test_tool_loop_example_runs_against_the_fake_anthropic_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("anthropic")
    script = [
        Reply.tool_call(  # the old marker out of habit: refused, nothing applied
            '{"updateElements": {"webhooks": ["DELETE"]}, "reasoning": "x"}'
        ),
        Reply.tool_call(
            '{"updateElements": {"status": "confirmed"}, "newElements": {"items": '
            '[{"sku": "CABLE-2M", "qty": 2}]}, "reasoning": "Confirmed; two cables."}'
        ),
        Reply.message("Done: the order is confirmed and the cables are on it."),
    ]
    with FakeProviderServer(script) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
        printed = _run(_blocks()["tool-loop-example"], "README tool loop")
        first = server.requests[0].body
        second = server.requests[1].body
    assert printed == [
        "confirmed ['ADAPTER-USB-C', 'CABLE-2M']",
        "1 Confirmed; two cables. [('update', ('status',)), ('add', ('items', 1))]",
    ]
    assert '"__DELETE__"' in first["system"] and '"__DELETE__"' in first["tools"][0]["description"]
    refused = second["messages"][-1]["content"][0]
    assert refused["is_error"] is True and "stale_marker" in str(refused["content"])


def test_validators_example_prints_what_its_comments_say() -> None:
    code = _blocks()["validators-example"]
    assert _run(code, "README validators") == _expected(code)


def test_fake_server_example_runs() -> None:
    pytest.importorskip("openai")
    _run(_blocks()["fake-server-example"], "README fake server")


# last: `make check` runs mypy beside the tests and fills the cache this run reads (~1 s warm,
# ~13 s cold), so this waits for the end of the run rather than racing it
@pytest.mark.slow
@pytest.mark.last
def test_mypy_strict_passes_on_the_readme_examples_and_a_typed_tool_loop(tmp_path: Path) -> None:
    """Every marked README example, and an OpenAI tool loop passing the tool definitions and
    results to the real SDK's typed parameters, pass ``mypy --strict``."""
    pytest.importorskip("mypy")
    files = []
    for name, code in _blocks().items():
        path = tmp_path / f"readme_{name.replace('-', '_')}.py"
        path.write_text(code, encoding="utf-8")
        files.append(str(path))
    files.append(str(TOOL_LOOP_OPENAI))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            # the project's mypy settings (strict) and cache: `make check` type-checked the
            # package and the SDKs it imports a moment ago, so only the examples are new
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            *files,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
