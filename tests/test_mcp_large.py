"""The MCP server on files larger than the context (issue 29).

Through the official MCP client over stdio: a 3 MB file is read as an outline within
``--max-read-tokens``, ``find_in_payload`` finds a SKU, a range read shows only some keys, a
wrong index and a wrong path get bounded errors, and the edit lands on disk. A file nested 3,000
levels deep is served. 40 edits of a 6 MB file: the server's peak resident memory
(``resource.getrusage(RUSAGE_CHILDREN)`` of a process whose only child is the server) is no
higher after 40 edits than after 2, and, less that of the same server editing a small file,
within four times the file's parsed size.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from agent_payload._files import loads_json_file
from agent_payload.mcp import PayloadFileEditor
from agent_payload.usage import estimate_tokens
from tests._mcp_client import connect

pytestmark = pytest.mark.slow


def lines(count: int) -> dict[str, Any]:
    """A goods receipt of ``count`` lines (about 130 bytes each, indented)."""
    note = "of the goods receipt, checked and stored in bay 4"
    return {
        "number": "GR-1",
        "lines": [
            {"sku": f"SKU-{10_000 + i}", "qty": i % 7, "note": f"line {i} {note}"}
            for i in range(count)
        ],
    }


def text(result: Any) -> str:
    (block,) = result.content
    return str(block.text)


def test_a_3_mb_file_is_outlined_found_and_edited_through_the_client(tmp_path: Path) -> None:
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(lines(26_000), indent=1), encoding="utf-8")
    assert path.stat().st_size > 3_000_000

    async def main() -> None:
        async with connect(path, "--max-read-tokens", "4000") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) >= {"read_payload", "find_in_payload"}
            assert set(tools["read_payload"].input_schema["properties"]) == {
                "path",
                "start",
                "end",
                "keys",
            }
            whole = await client.call_tool("read_payload", {})
            assert not whole.is_error
            assert "/*" in text(whole) and "not shown" in text(whole)
            assert estimate_tokens(text(whole)) <= 4_100, len(text(whole))

            found = await client.call_tool("find_in_payload", {"text": ["SKU-31337", "SKU-10001"]})
            assert not found.is_error, text(found)
            assert "lines[21337].sku" in text(found) and "lines[1].sku" in text(found)

            part = await client.call_tool(
                "read_payload", {"path": "lines", "start": 21330, "end": 21340, "keys": ["sku"]}
            )
            assert "SKU-31337" in text(part) and "note" not in text(part)

            wrong = await client.call_tool(
                "apply_change_request", {"updateElements": {"lines": {"99999": {"qty": 1}}}}
            )
            assert wrong.is_error and "index_out_of_range" in text(wrong)
            assert len(text(wrong)) < 20_000, len(text(wrong))

            long_path = "lines" + ".x" * 8_000
            lost = await client.call_tool("read_payload", {"path": long_path})
            assert lost.is_error and len(text(lost)) < 2_000, len(text(lost))
            lost = await client.call_tool("find_in_payload", {"text": "y" * 50_000})
            assert len(text(lost)) < 2_000

            right = await client.call_tool(
                "apply_change_request", {"updateElements": {"lines": {"21337": {"qty": 99}}}}
            )
            assert not right.is_error, text(right)

    asyncio.run(main())
    assert json.loads(path.read_text(encoding="utf-8"))["lines"][21337]["qty"] == 99


def test_a_file_nested_3000_levels_deep_is_served(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"top": 1, "a": ' + '{"a": ' * 3_000 + "1" + "}" * 3_001, encoding="utf-8")
    editor = PayloadFileEditor(path)
    read = editor.read()
    assert not read.is_error, read.text
    done = editor.apply({"updateElements": {"top": 2}})
    assert not done.is_error, done.text
    assert loads_json_file(path.read_text(encoding="utf-8"))["top"] == 2
    assert not editor.undo().is_error
    assert loads_json_file(path.read_text(encoding="utf-8"))["top"] == 1


_EDITS = textwrap.dedent(
    """
    import asyncio, os, resource, sys
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, get_default_environment

    async def main(path: str, edits: int) -> None:
        env = {**get_default_environment(), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        command = [sys.executable, "-m", "agent_payload.mcp", path]
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
        async with Client(params) as client:
            await client.call_tool("find_in_payload", {"text": "SKU-10001"})
            for i in range(edits):
                change = {"updateElements": {"lines": {str(i * 7): {"qty": 1000 + i}}}}
                result = await client.call_tool("apply_change_request", change)
                assert not result.is_error, result.content[0].text[:2000]

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    """
)


def peak_of_server(path: Path, edits: int) -> int:
    """The peak resident memory (bytes) of the MCP server serving ``path`` through ``edits``
    change requests, measured in a fresh process whose only child is that server."""
    done = subprocess.run(
        [sys.executable, "-c", _EDITS, str(path), str(edits)],
        capture_output=True,
        text=True,
        env={**os.environ},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.strip().splitlines()[-1])


def test_forty_edits_of_a_6_mb_file_keep_memory_bounded(tmp_path: Path) -> None:
    """The peak does not grow with the edits (undo and the versions kept are bounded), and stays
    under three times the parsed size: a file's bytes are let go before its payload is built,
    the merge shares what it does not touch, and the new text is written in pieces."""
    big, small = tmp_path / "big.json", tmp_path / "small.json"
    big_text = json.dumps(lines(48_000), indent=2)
    big.write_text(big_text, encoding="utf-8")
    small.write_text(json.dumps(lines(300), indent=2), encoding="utf-8")
    assert big.stat().st_size > 6_000_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        parsed = loads_json_file(big_text)
        parsed_size = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del parsed

    baseline = peak_of_server(small, 40)  # the interpreter, the SDK, the library
    two = peak_of_server(big, 2)
    big.write_text(big_text, encoding="utf-8")
    forty = peak_of_server(big, 40)
    edited = json.loads(big.read_text(encoding="utf-8"))["lines"]
    assert [edited[i * 7]["qty"] for i in range(40)] == [1000 + i for i in range(40)]
    # 38 more edits add at most the bounded caches (versions shown, 8 MB compressed; undo's
    # values): less than one parsed copy, where two file copies per edit were kept before.
    assert forty - two < parsed_size, (forty - two, parsed_size)
    print(f"peak over baseline: {(forty - baseline) / parsed_size:.2f}x the parsed size")
    assert forty - baseline < 3 * parsed_size, (forty - baseline, parsed_size)


def test_undo_keeps_the_replaced_values_and_is_capped(tmp_path: Path) -> None:
    """Undo needs no copies of the file: each change keeps the value it replaced (older ones
    are restored as the same JSON in the file's layout), the last ``UNDO_KEPT`` changes."""
    from agent_payload.mcp._editor import UNDO_KEPT

    path = tmp_path / "receipt.json"
    original = json.dumps(lines(50), indent=2) + "\n"
    path.write_text(original, encoding="utf-8")
    editor = PayloadFileEditor(path)
    for i in range(UNDO_KEPT + 5):
        change = {"updateElements": {"lines": {str(i): {"qty": 100 + i}, "0": {"note": f"n{i}"}}}}
        assert not editor.apply(change).is_error
    assert all(u.exact is None for u in editor._history[:-1])
    assert len(editor._history) == UNDO_KEPT
    assert all(len(u.old) < 2_000 for u in editor._history)  # values, not the file
    for _ in range(UNDO_KEPT):
        undone = editor.undo()
        assert not undone.is_error, undone.text
    after = json.loads(path.read_text(encoding="utf-8"))
    assert [line["qty"] for line in after["lines"][:6]] == [
        0,
        101,
        102,
        103,
        104,
        5,
    ]  # edit 0 set only the note
    assert after["lines"][0]["note"] == "n4"
    assert editor.undo().text.startswith("There is no change of yours to undo")
    # Two edits and two undos of an untouched file: its exact bytes again.
    path.write_text(original, encoding="utf-8")
    editor = PayloadFileEditor(path)
    assert not editor.apply({"updateElements": {"number": "GR-2"}}).is_error
    assert not editor.apply({"updateElements": {"lines": {"3": {"qty": 9}}}}).is_error
    assert not editor.undo().is_error and not editor.undo().is_error
    assert path.read_text(encoding="utf-8") == original


def test_a_file_that_cannot_be_read_is_not_remembered_as_shown(tmp_path: Path) -> None:
    """Only a version whose payload was read counts as shown: a file left broken by someone
    else (not JSON, not UTF-8) takes no room among the versions kept for rebasing."""
    from agent_payload.mcp._journal import digest

    path = tmp_path / "p.json"
    path.write_text('{"a": 1}', encoding="utf-8")
    editor = PayloadFileEditor(path)
    for broken in (b'{"a": ', b'{"a": "\xff"}'):
        path.write_bytes(broken)
        assert editor.read().is_error
        assert editor.apply({"updateElements": {"a": 2}}).is_error
        assert digest(broken) not in editor._versions._shown
    path.write_text('{"a": 1}', encoding="utf-8")
    assert not editor.apply({"updateElements": {"a": 2}}).is_error
