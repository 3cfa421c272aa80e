"""The README and the guides in docs/: every Python block runs offline as printed, extracted
from the file (so what a newcomer copies works), and the marked blocks that need more than
that (what they send, what they print exactly, ``mypy --strict``) have a test of their own here.

A block runs inside the ``readme_env`` fixture: ``FakeProviderServer`` answers every model
request with a change request setting ``status`` to ``"paid"``, and ``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL`` (and dummy keys) point the SDKs' own clients at it, so a block written
for a real model runs as printed; ``print(...)  # value`` lines are checked against their
comment. A block that truly cannot run offline is marked ``<!-- readme-test: skip (reason) -->``
(none today).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent_payload import cli
from agent_payload.agent import PayloadAgent
from agent_payload.session import PayloadSession
from agent_payload.testing import FakeProviderServer, Reply, ScriptedModel
from tests._docs import FILES, ROOT, block, docs_text

TESTS = Path(__file__).resolve().parent
DOCS = FILES
BLOCK = re.compile(r"(?:<!-- ([^>]*?) -->\s*\n)?```python\n(.*?)```", re.DOTALL)
SKIP = re.compile(r"readme-test: skip \((.+)\)")
PAID = '{"updateElements": {"status": "paid"}, "reasoning": "paid"}'


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    marker: str | None
    code: str

    @property
    def id(self) -> str:
        return f"{self.file.name}:{self.line}" + (f":{self.marker}" if self.marker else "")


def _blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start(2))
            found.append(Block(path, line, match.group(1), match.group(2)))
    return found


DEDICATED = {
    "readme-example",
    "readme-batch",
    "tool-loop-example",
    "validators-example",
    "fake-server-example",
    "integration-openai-agents",
    "integration-pydantic-ai",
    "integration-langchain",
    "langgraph-create-agent",
    "session-example",
    "outline-example",
}
"""The marked blocks that a test of their own runs (below, or in test_outline.py), checking
what they print and send."""


def _dedicated(marker: str | None) -> bool:
    return marker in DEDICATED


BLOCKS = _blocks()


@pytest.fixture
def readme_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeProviderServer]:
    """The documented stand-in for a real model: the SDKs' environment points at a fake server
    whose model sets ``status`` to ``"paid"``; the block runs in an empty folder."""
    with FakeProviderServer(handler=lambda request: PAID) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
        monkeypatch.chdir(tmp_path)
        yield server


def test_the_files_have_python_blocks_and_the_collector_sees_them() -> None:
    """The collector finds every ```python fence (a miscounted regex would pass everything)."""
    fences = sum(path.read_text(encoding="utf-8").count("```python\n") for path in DOCS)
    assert len(BLOCKS) == fences >= 10


def test_every_block_left_to_a_test_of_its_own_is_in_the_docs() -> None:
    """Each name in DEDICATED marks one block (so renaming a marker cannot skip its test)."""
    markers = [b.marker for b in BLOCKS]
    assert all(markers.count(name) == 1 for name in DEDICATED), markers


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if not _dedicated(b.marker)], ids=lambda b: b.id
)
def test_python_block_runs_offline_as_printed(block: Block, readme_env: FakeProviderServer) -> None:
    """The block runs; each ``print(...)  # value`` line printed the value of its comment."""
    if block.marker and (skip := SKIP.search(block.marker)):
        pytest.skip(skip.group(1))
    out = io.StringIO()
    namespace = {"__name__": "readme"}
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, block.id, "exec"), namespace)
    finally:
        # A script's SDK clients are closed when it ends; here, when the namespace goes.
        namespace.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    expected = [
        line.split("# ", 1)[1].strip()
        for line in block.code.splitlines()
        if line.lstrip().startswith("print(") and "  # " in line
    ]
    printed = out.getvalue().splitlines()
    if expected:
        assert [line for line in printed if line in expected] == expected, printed


# --- the ten-line example, the merge report, the batch job ---------------------------------------


def test_ten_line_example_runs_and_prints_what_its_comments_say() -> None:
    """The ten-line example: a malformed first reply is corrected, the second applied, and each
    print shows the value written in its comment."""
    code = block("readme-example")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README example", "exec"), {"__name__": "readme"})
    printed = out.getvalue().splitlines()
    expected = [
        line.split("# ", 1)[1].strip()
        for line in code.splitlines()
        if line.startswith("print(") and "# " in line
    ]
    assert printed == expected


def test_merge_example_shows_the_real_report() -> None:
    """The apply_change_request example in the README: payload, changes and conflict as shown."""
    from agent_payload import apply_change_request

    result = apply_change_request(
        {"items": [{"id": 1}, {"id": 2}], "note": "x"},
        {"updateElements": {"items": [{}, {"id": 20}, {}]}, "removeElements": {"note": "DELETE"}},
    )
    assert result.payload == {"items": [{"id": 1}, {"id": 20}]}
    assert [(c.op, c.path) for c in result.report.changes] == [
        ("delete", ("note",)),
        ("update", ("items", 1, "id")),
    ]
    assert [(i.code, i.path) for i in result.report.conflicts] == [
        ("placeholder_out_of_range", "updateElements.items[2]")
    ]
    text = docs_text()
    assert "Issue(code='placeholder_out_of_range', path='updateElements.items[2]'" in text


@pytest.mark.slow
def test_batch_example_runs_as_printed() -> None:
    """The README's batch-job example runs offline and prints what its comments say."""
    code = block("readme-batch")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README batch example", "exec"), {"__name__": "readme"})
    expected = [
        line.split("# ", 1)[1].strip()
        for line in code.splitlines()
        if line.startswith("    print(") and "# " in line
    ]
    assert out.getvalue().splitlines() == expected


# --- the tool loop, validators, the fake server, mypy --strict ---------------------------------

TOOL_LOOP_OPENAI = Path(__file__).resolve().parent / "typing" / "tool_loop_openai.py"


def _examples() -> dict[str, str]:
    text = docs_text()
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
    assert {"tool-loop-example", "validators-example", "fake-server-example"} <= set(_examples())


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
        printed = _run(_examples()["tool-loop-example"], "README tool loop")
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
    code = _examples()["validators-example"]
    assert _run(code, "README validators") == _expected(code)


def test_fake_server_example_runs() -> None:
    pytest.importorskip("openai")
    _run(_examples()["fake-server-example"], "README fake server")


# last: `make check` runs mypy beside the tests and fills the cache this run reads (~1 s warm,
# ~13 s cold), so this waits for the end of the run rather than racing it
@pytest.mark.slow
@pytest.mark.last
def test_mypy_strict_passes_on_the_readme_examples_and_a_typed_tool_loop(tmp_path: Path) -> None:
    """Every marked README example, and an OpenAI tool loop passing the tool definitions and
    results to the real SDK's typed parameters, pass ``mypy --strict``."""
    pytest.importorskip("mypy")
    files = []
    for name, code in _examples().items():
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


# --- frameworks, the MCP host snippet, create_agent ---------------------------------------------


@pytest.mark.parametrize(
    "marker", ["integration-openai-agents", "integration-pydantic-ai", "integration-langchain"]
)
@pytest.mark.slow
def test_framework_example_runs_and_prints_what_its_comments_say(marker: str) -> None:
    code = block(marker)
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
    config = json.loads(block("mcp-host-config", "json"))
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
    code = block("langgraph-create-agent")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README langgraph-create-agent", "exec"), {"__name__": "readme"})
    expected = [
        line.split("# ", 1)[1].strip()
        for line in code.splitlines()
        if line.startswith("print(") and "# " in line
    ]
    assert out.getvalue().splitlines() == expected


# --- the session example ------------------------------------------------------------------------

EXAMPLE = """\
from agent_payload.agent import PayloadAgent
from agent_payload.session import PayloadSession
from agent_payload.testing import ScriptedModel

# A scripted model stands in for a real one (pass an OpenAI or Anthropic client instead).
model = ScriptedModel([
    '{"updateElements": {"status": "confirmed"}, "reasoning": "Confirmed by phone."}',
    '{"newElements": {"items": [{"sku": "CABLE-2M", "qty": 2}]}, "reasoning": "Two cables."}',
    '{"updateElements": {"items": [{"qty": 3}]}, "reasoning": "Three adapters, not one."}',
    '{"updateElements": {"shipping": {"method": "express"}}, "reasoning": "Needed by Friday."}',
    '{"updateElements": {"items": [{}, "DELETE"]}, "reasoning": "Cables are out of stock."}',
])
session = PayloadSession(PayloadAgent(model), {
    "status": "draft",
    "items": [{"sku": "ADAPTER-USB-C", "qty": 1}],
    "shipping": {"method": "standard"},
})
session.send("The customer confirmed the order")
session.send("Add two 2 m cables")
session.send("Make it three adapters")
session.send("Ship express")
session.send("Drop the cables")
session.undo()  # the customer changed their mind: the cables are back
print(session.payload["items"])

turn = session.why("items[0].qty")
assert turn is not None
print(f"turn {turn.index}: {turn.task!r} because {turn.reasoning!r}")
for turn in session.history:
    print(turn.index, turn.task, [(c.op, c.path) for c in turn.changes])
session.save("order-session.json")  # PayloadSession.load("order-session.json", agent)
"""

EXPECTED_OUTPUT = """\
[{'sku': 'ADAPTER-USB-C', 'qty': 3}, {'sku': 'CABLE-2M', 'qty': 2}]
turn 3: 'Make it three adapters' because 'Three adapters, not one.'
1 The customer confirmed the order [('update', ('status',))]
2 Add two 2 m cables [('add', ('items', 1))]
3 Make it three adapters [('update', ('items', 0, 'qty'))]
4 Ship express [('update', ('shipping', 'method'))]
"""


def test_session_example_runs_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example prints the documented output and writes a history file that loads."""
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(EXAMPLE, "README session example", "exec"), {"__name__": "readme"})
    assert out.getvalue() == EXPECTED_OUTPUT

    loaded = PayloadSession.load(tmp_path / "order-session.json", PayloadAgent(ScriptedModel([])))
    assert loaded.payload["shipping"] == {"method": "express"}
    assert loaded.can_redo


def test_readme_block_matches_when_present() -> None:
    """If README.md has the session example, it is exactly EXAMPLE (so the test above tests
    what readers see)."""
    assert block("session-example") == EXAMPLE
