"""The README's framework and MCP sections run as printed (issue 13's examples)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from agent_payload import cli

README = Path(__file__).resolve().parent.parent / "README.md"


def _block(marker: str, language: str = "python") -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker} -->\s*```{language}\n(.*?)```", text, re.DOTALL)
    assert match is not None, f"README.md has no <!-- {marker} --> {language} block"
    return match.group(1)


@pytest.mark.parametrize(
    "marker", ["integration-openai-agents", "integration-pydantic-ai", "integration-langchain"]
)
@pytest.mark.slow
def test_framework_example_runs_and_prints_what_its_comments_say(marker: str) -> None:
    code = _block(marker)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"README {marker}", "exec"), {"__name__": "readme"})
    printed = out.getvalue().splitlines()
    expected = [
        line.split("# ", 1)[1].strip()
        for line in code.splitlines()
        if line.startswith("print(") and "# " in line
    ]
    assert len(expected) >= 2
    assert printed == expected


def test_mcp_host_snippet_is_valid_json_and_a_valid_command_line(tmp_path: Path) -> None:
    config = json.loads(_block("mcp-host-config", "json"))
    (server,) = config["mcpServers"].values()
    assert server["command"] == "agent-payload"
    args = cli.build_parser().parse_args(server["args"])
    assert args.command == "mcp"
    assert (args.deny, args.hide) == (["number"], ["customer.tax_id"])
    # The rules it names are well formed for a payload like the README's invoice.
    from agent_payload.mcp import PayloadFileEditor

    path = tmp_path / "invoice.json"
    path.write_text('{"number": "INV-7", "customer": {"tax_id": "X"}}', encoding="utf-8")
    editor = PayloadFileEditor(path, deny=args.deny, hide=args.hide)
    assert "tax_id" not in editor.read().text


@pytest.mark.slow
def test_create_agent_example_runs_when_langchain_is_installed() -> None:
    """LangChain 1.x ``create_agent`` with the LangGraph-state tool (``pip install langchain``:
    a dev dependency; skipped where it is not installed, run by hand with langchain 1.5.0)."""
    pytest.importorskip("langchain.agents")
    code = _block("langgraph-create-agent")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README langgraph-create-agent", "exec"), {"__name__": "readme"})
    expected = [
        line.split("# ", 1)[1].strip()
        for line in code.splitlines()
        if line.startswith("print(") and "# " in line
    ]
    assert out.getvalue().splitlines() == expected
