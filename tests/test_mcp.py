"""The MCP server, driven by the official MCP client over stdio (``python -m agent_payload.mcp``).

The file on disk is the witness: a refused call leaves it byte-identical, a good call is on disk,
undo restores the exact bytes, and an edit made by someone else meanwhile is never overwritten.
The whole tool protocol and the stdout/stderr split are proven over stdio against the real
process; the other scenarios drive the server that ``agent-payload mcp`` builds from its
options with the same client connected in process (no interpreter to start per test).
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import agent_payload.mcp
from agent_payload import Permissions, ReadScope, cli
from agent_payload.mcp import PayloadFileEditor, build_server, parse_path
from agent_payload.prompts import render_system
from agent_payload.schema import change_request_schema
from tests._mcp_client import connect

INVOICE: dict[str, Any] = {
    "id": "INV-7",
    "lines": [{"sku": f"S{i}", "qty": i} for i in range(10)],
    "customer": {"name": "Ann", "tax_id": "SECRET-42"},
}


@pytest.fixture
def invoice_file(tmp_path: Path) -> Path:
    path = tmp_path / "invoice.json"
    path.write_text(json.dumps(INVOICE, indent=4) + "\n", encoding="utf-8")
    return path


@asynccontextmanager
async def connect_in_process(path: Path, *options: str) -> AsyncIterator[Any]:
    """The server ``agent-payload mcp PATH OPTIONS`` serves, built by the command line from its
    options, with the official client connected to it in process."""
    from mcp import Client

    editors: list[PayloadFileEditor] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(agent_payload.mcp, "serve", editors.append)
        status, out, err = cli_run("mcp", str(path), *options)
    assert (status, out, err) == (0, "", "")
    (editor,) = editors
    async with Client(build_server(editor)) as client:
        yield client


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def text(result: Any) -> str:
    (block,) = result.content
    return str(block.text)


def payload_text(result: Any) -> str:
    """The payload a result shows, without its last line (the version)."""
    body, _, version = text(result).rpartition("\n\n(version ")
    assert version.startswith(result.structured_content["version"]), text(result)
    return body


def without_base_version(schema: dict[str, Any]) -> dict[str, Any]:
    """The apply tool's input schema less its ``base_version`` (a string)."""
    properties = dict(schema["properties"])
    assert properties.pop("base_version")["type"] == "string"
    return {**schema, "properties": properties}


@pytest.mark.slow
def test_list_read_refuse_apply_undo_over_stdio(invoice_file: Path) -> None:
    original = invoice_file.read_bytes()

    async def main() -> None:
        async with connect(invoice_file, "--deny", "id", "--hide", "customer.tax_id") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert list(tools) == [
                "read_payload",
                "find_in_payload",
                "apply_change_request",
                "undo_last_change",
            ]
            apply_tool = tools["apply_change_request"]
            assert without_base_version(apply_tool.input_schema) == change_request_schema(
                None, marker="DELETE"
            )
            assert "base_version" in apply_tool.description
            # The description teaches the format with the system prompt's own text.
            system = render_system(marker="DELETE")
            assert system.splitlines()[0] in apply_tool.description
            assert "INDEX MAPS" in apply_tool.description
            assert Permissions(deny=["id"]).describe() in apply_tool.description
            assert ReadScope(exclude=["customer.tax_id"]).describe() in apply_tool.description

            # read: the scope applied, index comments for the long array, one subtree by path.
            read = await client.call_tool("read_payload", {})
            assert not read.is_error
            shown = text(read)
            assert "/*9*/" in shown and "SECRET" not in shown and "tax_id" not in shown
            assert '"name":"Ann"' in shown
            line = await client.call_tool("read_payload", {"path": "lines[3]"})
            assert json.loads(payload_text(line)) == {"sku": "S3", "qty": 3}
            hidden = await client.call_tool("read_payload", {"path": "customer.tax_id"})
            assert hidden.is_error and "SECRET" not in text(hidden)

            # A wrong call: index beyond the end. An MCP error result; the file untouched.
            wrong = await client.call_tool(
                "apply_change_request", {"updateElements": {"lines": {"12": {"qty": 3}}}}
            )
            assert wrong.is_error
            assert "index_out_of_range" in text(wrong) and "nothing in it was applied" in text(
                wrong
            )
            assert invoice_file.read_bytes() == original
            # Refused by the permissions, and by the read scope (never showing the hidden value).
            for arguments in (
                {"updateElements": {"id": "INV-8"}},
                {"updateElements": {"customer": [1]}},
                {"replaceElements": {"customer": {"name": "Bob"}}},
            ):
                refused = await client.call_tool("apply_change_request", arguments)
                assert refused.is_error and "SECRET" not in text(refused), arguments
                assert invoice_file.read_bytes() == original
            misspelt = await client.call_tool("apply_change_request", {"updateElement": {}})
            assert misspelt.is_error and "updateElement" in text(misspelt)
            assert invoice_file.read_bytes() == original

            # A good call: on disk, indentation kept.
            good = await client.call_tool(
                "apply_change_request",
                {"updateElements": {"lines": {"2": {"qty": 30}}}, "reasoning": "thirty"},
            )
            assert not good.is_error, text(good)
            assert "update lines[2].qty: 2 -> 30" in text(good)
            expected = json.loads(json.dumps(INVOICE))
            expected["lines"][2]["qty"] = 30
            assert json.loads(invoice_file.read_bytes()) == expected
            assert invoice_file.read_text(encoding="utf-8") == json.dumps(expected, indent=4) + "\n"

            # Undo: the exact bytes of before; a second undo has nothing left.
            undone = await client.call_tool("undo_last_change", {})
            assert not undone.is_error, text(undone)
            assert invoice_file.read_bytes() == original
            nothing = await client.call_tool("undo_last_change", {})
            assert nothing.is_error and invoice_file.read_bytes() == original

    run(main)


def test_an_edit_made_meanwhile_is_never_overwritten(invoice_file: Path) -> None:
    async def main() -> None:
        async with connect_in_process(invoice_file) as client:
            read = await client.call_tool("read_payload", {})
            seen = read.structured_content["version"]
            assert f"(version {seen}: pass it as base_version" in text(read)
            theirs = invoice_file.read_text(encoding="utf-8").replace('"Ann"', '"Bob"')
            invoice_file.write_text(theirs, encoding="utf-8")  # someone else's edit

            # An outside edit (no change request explains it) collides with every request
            # written before it: the message says what changed and to read again.
            change = {"updateElements": {"lines": {"0": {"qty": 5}}}}
            stale = await client.call_tool("apply_change_request", change)
            assert stale.is_error
            assert "changed by someone else since version " + seen in text(stale)
            assert "customer.name changed" in text(stale)
            assert "Call read_payload" in text(stale)
            now = stale.structured_content["version"]
            assert now != seen and f"(version {now})" in text(stale)
            assert invoice_file.read_text(encoding="utf-8") == theirs
            explicit = await client.call_tool(
                "apply_change_request", {**change, "base_version": seen}
            )
            assert explicit.is_error and "customer.name changed" in text(explicit)

            # After reading the new version, the same change applies on top of their edit.
            read = await client.call_tool("read_payload", {})
            assert '"Bob"' in text(read) and read.structured_content["version"] == now
            good = await client.call_tool("apply_change_request", change)
            assert not good.is_error, text(good)
            on_disk = json.loads(invoice_file.read_text(encoding="utf-8"))
            assert (on_disk["customer"]["name"], on_disk["lines"][0]["qty"]) == ("Bob", 5)

            # Edited again behind our back: undo would overwrite it, so it is refused, saying
            # plainly that someone else changed the file (two different versions) and that no
            # undo is left: asking again does not loop on the same promise.
            after_ours = invoice_file.read_bytes()
            theirs_again = after_ours.replace(b'"INV-7"', b'"INV-9"')
            invoice_file.write_bytes(theirs_again)
            undo = await client.call_tool("undo_last_change", {})
            assert undo.is_error, text(undo)
            mine, then = good.structured_content["version"], undo.structured_content["version"]
            assert mine != then
            assert (
                f"changed by someone else since your last change (your change left version "
                f"{mine}; the file is now version {then})" in text(undo)
            )
            assert "can be undone any more" in text(undo)
            assert "read again" not in text(undo) and "send your change again" not in text(undo)
            again = await client.call_tool("undo_last_change", {})
            assert again.is_error and "There is no change of yours to undo" in text(again)
            assert invoice_file.read_bytes() == theirs_again

    run(main)


@pytest.mark.slow
def test_payload_schema_shapes_the_tool_and_refuses_a_result_that_breaks_it(
    tmp_path: Path,
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "port": {"type": "integer", "minimum": 1},
        },
        "required": ["name", "port"],
    }
    schema_file = tmp_path / "config.schema.json"
    schema_file.write_text(json.dumps(schema), encoding="utf-8")
    config = tmp_path / "config.json"
    config.write_text('{"name": "api", "port": 80}\n', encoding="utf-8")
    original = config.read_bytes()

    async def main() -> None:
        async with connect_in_process(config, "--payload-schema", str(schema_file)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert without_base_version(
                tools["apply_change_request"].input_schema
            ) == change_request_schema(schema, marker="DELETE")
            bad = await client.call_tool("apply_change_request", {"updateElements": {"port": 0}})
            assert bad.is_error and "minimum" in text(bad)
            assert config.read_bytes() == original
            good = await client.call_tool(
                "apply_change_request", {"updateElements": {"port": 8080}}
            )
            assert not good.is_error, text(good)
            # One-line JSON stays on one line.
            assert config.read_text(encoding="utf-8") == '{"name": "api", "port": 8080}\n'

    run(main)


@pytest.mark.slow
def test_stdout_carries_only_the_protocol_and_logs_go_to_stderr(invoice_file: Path) -> None:
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "apply_change_request", "arguments": {"updateElements": {"x": 1}}},
        },
    ]
    # A client waits for each answer before it closes stdin (the SDK's stdio server cancels
    # the requests still running at end of input), so this one does too.
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_payload.mcp", str(invoice_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines = []
    for request in requests:
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        if "id" in request:
            lines.append(proc.stdout.readline())
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    replies = [json.loads(line) for line in [*lines, *out.splitlines()] if line.strip()]
    assert [r.get("id") for r in replies] == [1, 2]
    assert replies[1]["result"]["isError"] is False
    assert "serving" in err and "apply_change_request: done" in err


# --- the command line ----------------------------------------------------------------------------


def cli_run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(list(argv), stdin=io.StringIO(""), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def test_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, _ = cli_run("mcp", "--help")  # argparse prints help to sys.stdout
    out = capsys.readouterr().out
    assert status == 0
    for option in ("PAYLOAD_FILE", "--allow RULE", "--deny RULE", "--hide RULE"):
        assert option in out
    assert "--payload-schema SCHEMA.json" in out
    for tool in ("read_payload", "apply_change_request", "undo_last_change"):
        assert tool in out
    assert "stderr" in out
    cli_run("--help")
    assert "mcp" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "options", "message"),
    [
        (None, (), "cannot read"),
        ('{"a": ', (), "not valid JSON"),
        ("42", (), "42"),
        ('{"a": 1}', ("--deny", "a[x"), "allow/deny rules: bad path rule 'a[x'"),
        ('{"a": 1}', ("--hide", "a]"), "hide rules: bad path rule 'a]'"),
        ('{"port": 0}', ("--payload-schema", "SCHEMA"), "does not match the payload schema"),
        ('{"port": 1}', ("--payload-schema", "BADREF"), "$ref '#/$defs/Port' at properties/port"),
        ('{"port": 1}', ("--payload-schema", "BADREF"), "cannot be resolved"),
        ('{"port": 1}', ("--payload-schema", "REMOTEREF"), "$ref 'https://example.com/s.json'"),
    ],
)
def test_startup_errors_are_usage_errors(
    tmp_path: Path, content: str | None, options: tuple[str, ...], message: str
) -> None:
    path = tmp_path / "payload.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    schema = tmp_path / "schema.json"
    schema.write_text('{"properties": {"port": {"minimum": 1}}}', encoding="utf-8")
    # issue 30: an unresolvable $ref is a startup error (was a traceback, or a raw error as a
    # tool result when no value of the file reached it)
    bad = tmp_path / "bad.json"
    bad.write_text('{"properties": {"port": {"$ref": "#/$defs/Port"}}}', encoding="utf-8")
    remote = tmp_path / "remote.json"
    remote.write_text('{"properties": {"x": {"$ref": "https://example.com/s.json"}}}', "utf-8")
    files = {"SCHEMA": schema, "BADREF": bad, "REMOTEREF": remote}
    argv = [str(files[o]) if o in files else o for o in options]
    status, out, err = cli_run("mcp", str(path), *argv)
    assert (status, out) == (2, "")
    assert message in err


# --- the editor and paths, directly ------------------------------------------------------------


def test_parse_path_reads_the_library_s_own_path_form() -> None:
    assert parse_path("") == []
    assert parse_path("items[3].price") == ["items", 3, "price"]
    assert parse_path('["a.b"].c[0][1]') == ["a.b", "c", 0, 1]
    assert parse_path("[2]") == [2]
    for bad in ("a..b", "a[x]", "a[0]b", 'a["b'):
        with pytest.raises(ValueError, match="cannot be read at character"):
            parse_path(bad)


def test_read_paths_explain_what_is_there(invoice_file: Path) -> None:
    editor = PayloadFileEditor(invoice_file)
    assert "array of 10 elements" in editor.read("lines[10]").text
    assert "write lines[0] for the element at position 0" in editor.read("lines.x").text
    assert 'no key "nope"' in editor.read("nope").text
    assert editor.read("id").text.startswith('"INV-7"\n\n(version ')


def test_without_the_mcp_package_the_command_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, invoice_file: Path
) -> None:
    for name in ("mcp", "mcp.server", "mcp.server.mcpserver"):
        monkeypatch.setitem(sys.modules, name, None)
    status, out, err = cli_run("mcp", str(invoice_file))
    assert (status, out) == (2, "")
    assert "pip install 'agent-payload[mcp]'" in err


def test_schema_refusals_under_a_read_scope_name_the_rule_never_the_data(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "port": {"type": "integer", "minimum": 1},
            "db": {"type": "object", "maxProperties": 2},
        },
    }
    path = tmp_path / "config.json"
    path.write_text('{"port": 80, "db": {"host": "h", "password": "hunter2"}}', encoding="utf-8")
    original = path.read_bytes()
    editor = PayloadFileEditor(path, hide=["db.password"], payload_schema=schema)
    low = editor.apply({"updateElements": {"port": 0}})
    assert low.is_error and "the schema's 'minimum' rule (1) fails" in low.text
    grown = editor.apply({"updateElements": {"db": {"user": "u"}}})
    assert grown.is_error and "'maxProperties' rule (2)" in grown.text
    assert "hunter2" not in grown.text and "password" not in grown.text
    assert path.read_bytes() == original


@pytest.mark.slow
def test_arguments_nested_too_deeply_for_the_sdk_get_an_error_result(invoice_file: Path) -> None:
    """Issue 30: the SDK drops a message nested deeper than pydantic-core reads (200 levels)
    without an answer; the client waited forever. Now: an error result, nothing written."""
    before = invoice_file.read_bytes()
    deep: Any = 1
    for _ in range(220):
        deep = {"a": deep}

    async def main() -> None:
        async with connect(invoice_file) as client:
            refused = await client.call_tool("apply_change_request", {"updateElements": deep})
            assert refused.is_error
            assert "nested more than" in text(refused) and "nothing" in text(refused)
            shallow = {"updateElements": {"customer": {"a": {"a": 1}}}}
            done = await client.call_tool("apply_change_request", shallow)
            assert not done.is_error, text(done)

    run(main)
    assert invoice_file.read_bytes() != before


def test_a_too_deep_tool_call_is_rewritten_to_one_that_gets_an_answer() -> None:
    """The same as above without a subprocess (a regression there waits for an answer that
    never comes; here it fails): the line the SDK would drop becomes a call it reads, with the
    id and the tool name kept; every other line passes through unchanged."""
    from mcp_types import jsonrpc_message_adapter

    from agent_payload.mcp._server import _TOO_DEEP, _depth_checked

    deep: Any = 1
    for _ in range(220):
        deep = {"a": deep}
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
    line = json.dumps({**call, "params": {"name": "apply_change_request", "arguments": deep}})
    message = jsonrpc_message_adapter.validate_json(_depth_checked(line), by_name=False)
    assert message.id == 7
    assert message.params["name"] == "apply_change_request"
    assert message.params["arguments"] == {_TOO_DEEP: True}
    shallow = json.dumps({**call, "params": {"name": "read_payload", "arguments": {}}})
    assert _depth_checked(shallow) == shallow
