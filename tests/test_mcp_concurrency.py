"""Several writers on one file (issue 27): MCP servers, and the command line's ``-o``.

Each result shows the file's version; a change request written against a version a server
returned is rebased over the writes made since, by that server or another (they share the
journal ``.<name>.journal``), under the file's lock (``.<name>.lock``). The acceptance test runs
four server processes over stdio with the official MCP client; the rest drive editors in
process, several on one file, as several servers would.
"""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import random
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import agent_payload.mcp._file as file_module
import agent_payload.mcp._journal as journal_module
from agent_payload import _filelock, cli
from agent_payload._filelock import lock_path, locked
from agent_payload.mcp import PayloadFileEditor
from agent_payload.mcp._journal import Journal
from agent_payload.merge import apply_change_request
from agent_payload.prompts import strip_index_comments

INVOICE: dict[str, Any] = {
    "id": "INV-7",
    "lines": [{"sku": f"S{i}", "qty": i} for i in range(10)],
    "customer": {"name": "Ann"},
}


@pytest.fixture
def invoice_file(tmp_path: Path) -> Path:
    path = tmp_path / "invoice.json"
    path.write_text(json.dumps(INVOICE, indent=2) + "\n", encoding="utf-8")
    return path


def on_disk(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def skus(path: Path) -> list[tuple[str, int]]:
    return [(line["sku"], line["qty"]) for line in on_disk(path)["lines"]]


# --- rebasing over another server's writes -----------------------------------------------------


def test_a_stale_request_is_rebased_over_another_servers_write(invoice_file: Path) -> None:
    mine, theirs = PayloadFileEditor(invoice_file), PayloadFileEditor(invoice_file)
    seen = mine.read().version
    assert seen is not None
    deleted = theirs.apply({"removeElements": {"lines": {"1": "DELETE"}}})
    assert not deleted.is_error, deleted.text

    # Written against the version it was shown: lines[4] is S4, now at lines[3].
    late = mine.apply({"updateElements": {"lines": {"4": {"qty": 99}}}, "base_version": seen})
    assert not late.is_error, late.text
    assert "written against version " + seen in late.text
    assert "1 change request was applied since" in late.text
    assert "update lines[3].qty: 4 -> 99" in late.text
    assert "call read_payload before writing positions against it" in late.text
    assert skus(invoice_file)[:5] == [("S0", 0), ("S2", 2), ("S3", 3), ("S4", 99), ("S5", 5)]

    # The journal holds both writes, linked version to version, each as applied.
    entries, _ = Journal(invoice_file).entries()
    assert [e.request for e in entries] == [
        {"removeElements": {"lines": {"1": "DELETE"}}},
        {"updateElements": {"lines": {"3": {"qty": 99}}}},
    ]
    assert entries[0].after == entries[1].before and entries[1].after == late.version
    assert entries[0].before == seen


def test_calls_written_against_one_version_all_land_where_the_model_saw_them(
    invoice_file: Path,
) -> None:
    """Two calls of one model turn share their base (the version it was shown), whatever
    order they arrive in."""
    editor = PayloadFileEditor(invoice_file)
    seen = editor.read().version
    first = editor.apply({"removeElements": {"lines": {"1": "DELETE"}}, "base_version": seen})
    second = editor.apply({"updateElements": {"lines": {"4": {"qty": 99}}}, "base_version": seen})
    third = editor.apply({"newElements": {"lines": {"6": [{"sku": "X", "qty": 0}]}}})
    assert not (first.is_error or second.is_error), (first.text, second.text)
    assert not third.is_error, third.text  # no base_version: the version it last showed
    # The third was written against the first two's result, where lines[6] is S7.
    assert skus(invoice_file)[:8] == [
        ("S0", 0),
        ("S2", 2),
        ("S3", 3),
        ("S4", 99),
        ("S5", 5),
        ("S6", 6),
        ("X", 0),
        ("S7", 7),
    ]


def test_a_colliding_request_is_sent_back_with_the_current_values(invoice_file: Path) -> None:
    mine, theirs = PayloadFileEditor(invoice_file), PayloadFileEditor(invoice_file)
    seen = mine.read().version
    assert not theirs.apply({"updateElements": {"lines": {"2": {"qty": 7}}}}).is_error
    before = invoice_file.read_bytes()

    late = mine.apply({"updateElements": {"lines": {"2": {"qty": 8}}}, "base_version": seen})
    assert late.is_error
    assert "concurrent_change" in late.text
    assert "changed lines[2].qty (as you saw it) from 2 to 7" in late.text
    assert "Its current value in the payload:\n  7\n" in late.text
    assert "Changes from earlier successful calls are kept" in late.text
    assert invoice_file.read_bytes() == before
    assert late.version is not None and late.version != seen
    assert f"(version {late.version}: the file as it is now" in late.text

    # Against the version it was sent back with, the same request applies.
    again = mine.apply(
        {"updateElements": {"lines": {"2": {"qty": 8}}}, "base_version": late.version}
    )
    assert not again.is_error, again.text
    assert skus(invoice_file)[2] == ("S2", 8)


def test_a_collision_under_a_read_scope_never_shows_a_hidden_value(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"db": {"host": "h", "password": "hunter2"}}', encoding="utf-8")
    mine = PayloadFileEditor(path, hide=["db.password"])
    theirs = PayloadFileEditor(path)  # another server, without that rule
    seen = mine.read().version
    assert not theirs.apply({"updateElements": {"db": {"password": "swordfish"}}}).is_error
    late = mine.apply({"removeElements": {"db": "DELETE"}, "base_version": seen})
    assert late.is_error and "concurrent_change" in late.text
    assert "another change request changed what this entry touches" in late.text
    assert "hunter2" not in late.text and "swordfish" not in late.text
    assert "password" not in late.text


def test_an_outside_edit_that_leaves_the_same_json_is_no_collision(invoice_file: Path) -> None:
    editor = PayloadFileEditor(invoice_file)
    seen = editor.read().version
    invoice_file.write_text(json.dumps(INVOICE, indent=4) + "\n", encoding="utf-8")  # reformatted
    moved = editor.apply({"updateElements": {"lines": {"1": {"qty": 5}}}, "base_version": seen})
    assert not moved.is_error, moved.text
    assert skus(invoice_file)[1] == ("S1", 5)
    assert invoice_file.read_text(encoding="utf-8").startswith('{\n    "id"')  # theirs kept


def test_a_base_version_this_server_never_showed_is_refused(invoice_file: Path) -> None:
    editor = PayloadFileEditor(invoice_file)
    before = invoice_file.read_bytes()
    change = {"updateElements": {"lines": {"0": {"qty": 1}}}}
    unknown = editor.apply({**change, "base_version": "0123456789ab"})
    assert unknown.is_error and "is not a version this server showed you" in unknown.text
    for wrong in (7, "", ["x"]):
        bad = editor.apply({**change, "base_version": wrong})
        assert bad.is_error and "base_version must be the version string" in bad.text
    assert invoice_file.read_bytes() == before
    # null (how models often leave out an optional argument) is the default base.
    assert not editor.apply({**change, "base_version": None}).is_error


def test_a_request_wrong_on_its_own_base_is_judged_there(invoice_file: Path) -> None:
    mine, theirs = PayloadFileEditor(invoice_file), PayloadFileEditor(invoice_file)
    seen = mine.read().version
    assert not theirs.apply({"newElements": {"lines": [{"sku": "S10", "qty": 10}]}}).is_error
    # lines[10] exists now, not in the version the request was written against.
    wrong = mine.apply({"updateElements": {"lines": {"10": {"qty": 1}}}, "base_version": seen})
    assert wrong.is_error and "index_out_of_range" in wrong.text
    assert f"Judged against version {seen}" in wrong.text
    assert skus(invoice_file)[10] == ("S10", 10)


def test_the_journal_is_compacted_and_a_request_older_than_it_is_sent_back(
    invoice_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "MAX_BYTES", 1500)
    mine, theirs = PayloadFileEditor(invoice_file), PayloadFileEditor(invoice_file)
    seen = mine.read().version
    for qty in range(1, 41):
        assert not theirs.apply({"updateElements": {"lines": {"9": {"qty": 100 + qty}}}}).is_error
    journal = Journal(invoice_file)
    assert journal.path.stat().st_size <= 1500
    entries, compacted = journal.entries()
    assert compacted and 3 <= len(entries) < 40
    late = mine.apply({"updateElements": {"lines": {"0": {"qty": 5}}}, "base_version": seen})
    assert late.is_error
    assert "than this server can move it over" in late.text and "Call read_payload" in late.text
    assert skus(invoice_file)[0] == ("S0", 0)


# --- undo among several writers --------------------------------------------------------------


def test_undo_reverts_only_its_own_change_over_anothers(invoice_file: Path) -> None:
    mine, theirs = PayloadFileEditor(invoice_file), PayloadFileEditor(invoice_file)
    assert not mine.apply({"updateElements": {"lines": {"0": {"qty": 100}}}}).is_error
    seen = theirs.read().version
    assert not theirs.apply({"removeElements": {"lines": {"3": "DELETE"}}}).is_error
    assert not theirs.apply({"updateElements": {"lines": {"5": {"qty": 500}}}}).is_error
    undone = mine.undo()
    assert not undone.is_error, undone.text
    assert "the changes made by others since are kept" in undone.text
    expected = [(f"S{i}", i) for i in range(10) if i != 3]
    expected[5] = ("S6", 500)  # lines[5] after their deletion
    assert skus(invoice_file) == expected
    # The undo is in the journal: the other server's stale request is rebased over it.
    later = theirs.apply({"updateElements": {"lines": {"1": {"qty": 11}}}})
    assert not later.is_error, later.text
    assert "1 change request was applied since" in later.text
    assert skus(invoice_file)[:2] == [("S0", 0), ("S1", 11)]
    # What the undo put back collides with a stale request for the same value.
    stale = theirs.apply({"updateElements": {"lines": {"0": {"qty": 1}}}, "base_version": seen})
    assert stale.is_error and "changed lines[0].qty (as you saw it) from 100 to 0" in stale.text


def test_undoing_two_changes_of_one_value_over_anothers_change(invoice_file: Path) -> None:
    """The second undo is not blocked by the first change and its own undo (they cancel out)."""
    mine, theirs = PayloadFileEditor(invoice_file), PayloadFileEditor(invoice_file)
    assert not mine.apply({"updateElements": {"lines": {"0": {"qty": 100}}}}).is_error
    assert not mine.apply({"updateElements": {"lines": {"0": {"qty": 200}}}}).is_error
    theirs.read()
    assert not theirs.apply({"updateElements": {"lines": {"5": {"qty": 500}}}}).is_error
    for _ in range(2):
        undone = mine.undo()
        assert not undone.is_error, undone.text
    expected = [(f"S{i}", i) for i in range(10)]
    expected[5] = ("S5", 500)
    assert skus(invoice_file) == expected


def test_undo_refuses_plainly_when_another_change_touched_the_same_value(
    invoice_file: Path,
) -> None:
    mine, theirs = PayloadFileEditor(invoice_file), PayloadFileEditor(invoice_file)
    assert not mine.apply({"updateElements": {"lines": {"0": {"qty": 100}}}}).is_error
    assert not mine.apply({"updateElements": {"lines": {"1": {"qty": 100}}}}).is_error
    theirs.read()
    assert not theirs.apply({"updateElements": {"lines": {"1": {"qty": 200}}}}).is_error
    before = invoice_file.read_bytes()
    undo = mine.undo()
    assert undo.is_error
    assert "was changed by someone else since your last change" in undo.text
    assert "what your change changed was changed again since (lines[1].qty)" in undo.text
    assert "None of your earlier changes can be undone any more" in undo.text
    assert mine.undo().text.startswith("There is no change of yours to undo")
    assert invoice_file.read_bytes() == before


# --- the lock ------------------------------------------------------------------------------------


def held_by_someone(path: Path) -> bool:
    """Whether the lock of ``path`` is held (a second open file description cannot take it)."""
    with open(lock_path(path), "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False


def test_every_read_that_decides_and_every_write_hold_the_lock(
    invoice_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    editor = PayloadFileEditor(invoice_file)
    seen: list[tuple[str, bool]] = []
    real_write, real_append = file_module.atomic_write_bytes, Journal.append
    real_read, real_version = file_module.read_bytes, file_module.version

    def write(path: Any, data: bytes) -> None:
        seen.append(("write", held_by_someone(invoice_file)))
        real_write(path, data)

    def version(path: Path) -> str:
        seen.append(("read", held_by_someone(invoice_file)))
        return real_version(path)

    def append(self: Journal, entry: Any) -> None:
        seen.append(("journal", held_by_someone(invoice_file)))
        real_append(self, entry)

    def read(path: Path) -> bytes:
        seen.append(("read", held_by_someone(invoice_file)))
        return real_read(path)

    monkeypatch.setattr(file_module, "atomic_write_bytes", write)
    monkeypatch.setattr(file_module, "version", version)
    monkeypatch.setattr(Journal, "append", append)
    monkeypatch.setattr(file_module, "read_bytes", read)
    assert not editor.apply({"updateElements": {"lines": {"0": {"qty": 5}}}}).is_error
    assert not editor.undo().is_error
    assert {kind for kind, _ in seen} == {"read", "write", "journal"}
    assert all(held for _, held in seen), seen
    assert not held_by_someone(invoice_file)  # released after each call
    assert lock_path(invoice_file).name == ".invoice.json.lock"


def test_a_server_waits_for_the_lock_and_then_sees_what_was_written_under_it(
    invoice_file: Path,
) -> None:
    """A writer holding the lock (here the test) changes the file; the server's call, made
    meanwhile, runs after it and never overwrites it."""
    import threading

    editor = PayloadFileEditor(invoice_file)
    editor.read()
    outcome: list[Any] = []
    with locked(invoice_file):
        worker = threading.Thread(
            target=lambda: outcome.append(editor.apply({"updateElements": {"id": "INV-8"}}))
        )
        worker.start()
        worker.join(0.2)
        assert not outcome  # waiting for the lock
        text = invoice_file.read_text(encoding="utf-8").replace('"Ann"', '"Bob"')
        invoice_file.write_text(text, encoding="utf-8")
    worker.join()
    (result,) = outcome
    assert result.is_error and "customer.name changed" in result.text
    assert on_disk(invoice_file)["customer"]["name"] == "Bob"


def cli_apply(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(["apply", *argv], stdin=io.StringIO(""), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def test_the_command_line_writes_in_place_under_the_lock_and_never_over_a_newer_file(
    invoice_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    change = tmp_path / "change.json"
    change.write_text('{"updateElements": {"lines": {"0": {"qty": 5}}}}', encoding="utf-8")
    held: list[bool] = []
    real_write = cli.atomic_write_text

    def write(path: Any, text: str) -> None:
        held.append(held_by_someone(invoice_file))
        real_write(path, text)

    monkeypatch.setattr(cli, "atomic_write_text", write)
    status, _, err = cli_apply(str(invoice_file), str(change), "-o", str(invoice_file))
    assert status == 0, err
    assert held == [True] and skus(invoice_file)[0] == ("S0", 5)
    # A new output file nobody locks gets no lock file.
    other = tmp_path / "other.json"
    assert cli_apply(str(invoice_file), str(change), "-o", str(other))[0] == 0
    assert held == [True, False] and not lock_path(other).exists()

    # Someone writes the file between the command's read and its write: refused, theirs kept.
    @contextmanager
    def someone_first(path: Any) -> Iterator[None]:
        text = invoice_file.read_text(encoding="utf-8").replace('"Ann"', '"Bob"')
        invoice_file.write_text(text, encoding="utf-8")
        with _filelock.locked(path):
            yield

    monkeypatch.setattr(cli, "locked", someone_first)
    theirs = invoice_file.read_text(encoding="utf-8").replace('"Ann"', '"Bob"')
    change.write_text('{"updateElements": {"lines": {"0": {"qty": 6}}}}', encoding="utf-8")
    status, _, err = cli_apply(str(invoice_file), str(change), "-o", str(invoice_file))
    assert status == 1
    assert "changed by someone else since it was read" in err
    assert invoice_file.read_text(encoding="utf-8") == theirs


# --- acceptance: four servers over stdio ---------------------------------------------------------

SERVERS = 4
EDITS = 200


def _items_from(result: Any) -> list[dict[str, Any]]:
    (block,) = result.content
    return _items_from_text(str(block.text))


def _items_from_text(text: str) -> list[dict[str, Any]]:
    """The items of a ``read_payload`` text (the payload before its notes and version)."""
    data: dict[str, Any] = json.loads(strip_index_comments(text.split("\n\n")[0]))
    return list(data["items"])


async def _one_server(path: Path, k: int, report: dict[str, Any]) -> None:
    """A model stand-in on its own server process: edits only its own elements (ids
    ``s<k>-<n>``), each request written against the version its server last returned, and
    keeps the list of its elements every acknowledged edit implies."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    rng = random.Random(k)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agent_payload.mcp", str(path)]
    )
    mine = [(f"s{k}-{n}", 0) for n in range(3)]  # my elements, in order, with their values
    made = 3
    errors: list[str] = []
    rebased = 0
    async with Client(params) as client:
        view: list[dict[str, Any]] = []
        version = ""
        fresh = False
        for _ in range(EDITS):
            if not fresh or rng.random() < 0.2:
                read = await client.call_tool("read_payload", {})
                view, version, fresh = _items_from(read), read.structured_content["version"], True
            await asyncio.sleep(rng.random() * 0.004)  # others write meanwhile
            at = {item["id"]: i for i, item in enumerate(view)}
            op = rng.choice(["update", "update", "insert", "delete"])
            if len(mine) < 3:
                op = "insert"
            elif len(mine) > 7 and op == "insert":
                op = "delete"
            pick = rng.randrange(len(mine))
            ident, _ = mine[pick]
            if op == "update":
                value = rng.randrange(1, 10**6)
                request: dict[str, Any] = {
                    "updateElements": {"items": {str(at[ident]): {"v": value}}}
                }
                after = [*mine[:pick], (ident, value), *mine[pick + 1 :]]
            elif op == "delete":
                request = {"removeElements": {"items": {str(at[ident]): "DELETE"}}}
                after = [*mine[:pick], *mine[pick + 1 :]]
            elif rng.random() < 0.5:  # insert before one of mine
                new = (f"s{k}-{made}", 0)
                request = {"newElements": {"items": {str(at[ident]): [{"id": new[0], "v": 0}]}}}
                after = [*mine[:pick], new, *mine[pick:]]
                made += 1
            else:  # append
                new = (f"s{k}-{made}", 0)
                request = {"newElements": {"items": [{"id": new[0], "v": 0}]}}
                after = [*mine, new]
                made += 1
            result = await client.call_tool(
                "apply_change_request", {**request, "base_version": version}
            )
            (block,) = result.content
            if result.is_error:
                errors.append(str(block.text))
                fresh = False
                continue
            mine = after
            if "Your request was written against version" in block.text:
                rebased += 1
                fresh = False  # the new version holds others' writes: read it first
            else:  # the new version is exactly the one shown plus this change
                view = apply_change_request({"items": view}, request).payload["items"]
                version = result.structured_content["version"]
    report[f"s{k}"] = {"mine": mine, "errors": errors, "rebased": rebased}


@pytest.fixture
def memory_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory where the platform has one (``/dev/shm``): each write's fsync
    then costs microseconds, not the ~10 ms of a disk, and this test is about the lock."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm) as name:
        yield Path(name)


@pytest.mark.slow
def test_four_servers_editing_one_file_lose_no_acknowledged_edit(memory_dir: Path) -> None:
    path = memory_dir / "shared.json"
    items = [{"id": f"s{k}-{n}", "v": 0} for n in range(3) for k in range(SERVERS)]
    path.write_text(json.dumps({"items": items}, indent=2) + "\n", encoding="utf-8")
    report: dict[str, Any] = {}

    async def main() -> None:
        await asyncio.gather(*(_one_server(path, k, report) for k in range(SERVERS)))

    asyncio.run(main())
    final = on_disk(path)["items"]
    for k in range(SERVERS):
        mine = report[f"s{k}"]
        assert mine["errors"] == [], mine["errors"][:3]
        found = [(i["id"], i["v"]) for i in final if i["id"].startswith(f"s{k}-")]
        assert found == mine["mine"], k
    assert len(final) == sum(len(report[f"s{k}"]["mine"]) for k in range(SERVERS))
    # The writers really were concurrent: many requests arrived after another server wrote.
    assert sum(report[f"s{k}"]["rebased"] for k in range(SERVERS)) > 0
    entries, _ = Journal(path).entries()
    assert len(entries) == SERVERS * EDITS


@pytest.mark.slow
def test_parallel_calls_of_four_editors_against_one_version_each_lose_nothing(
    memory_dir: Path,
) -> None:
    """Four editors on one file (as four servers, in process): each reads, then sends one to
    three requests written against that one version (the parallel tool calls of one model
    turn), each on a different element of its own, interleaved at random with the others'.
    Every request applies, and each editor's elements end as its acknowledged edits say."""
    rng = random.Random(27)
    path = memory_dir / "shared.json"
    items = [{"id": f"s{k}-{n}", "v": 0} for n in range(4) for k in range(SERVERS)]
    path.write_text(json.dumps({"items": items}, indent=2) + "\n", encoding="utf-8")
    editors = [PayloadFileEditor(path) for _ in range(SERVERS)]
    mine: list[list[tuple[str, int]]] = [
        [(f"s{k}-{n}", 0) for n in range(4)] for k in range(SERVERS)
    ]
    made = [4] * SERVERS
    batches: list[list[tuple[dict[str, Any], tuple[Any, ...]]]] = [[] for _ in range(SERVERS)]
    bases = [""] * SERVERS
    sent = errors = rebased = 0
    while sent < SERVERS * 60:
        k = rng.randrange(SERVERS)
        if not batches[k]:
            read = editors[k].read()
            bases[k] = str(read.version)
            at = {item["id"]: i for i, item in enumerate(_items_from_text(read.text))}
            for pick in rng.sample(range(len(mine[k])), min(rng.randint(1, 3), len(mine[k]))):
                ident = mine[k][pick][0]
                op = rng.choice(["update", "update", "insert", "delete", "append"])
                if len(mine[k]) < 4 and op == "delete":
                    op = "insert"
                if len(mine[k]) > 9 and op in ("insert", "append"):
                    op = "delete"
                new = f"s{k}-{made[k]}"
                if op == "update":
                    value = rng.randrange(1, 10**6)
                    request: dict[str, Any] = {
                        "updateElements": {"items": {str(at[ident]): {"v": value}}}
                    }
                    effect: tuple[Any, ...] = ("update", ident, value)
                elif op == "delete":
                    request = {"removeElements": {"items": {str(at[ident]): "DELETE"}}}
                    effect = ("delete", ident)
                elif op == "insert":
                    request = {"newElements": {"items": {str(at[ident]): [{"id": new, "v": 0}]}}}
                    effect, made[k] = ("insert", new, ident), made[k] + 1
                else:
                    request = {"newElements": {"items": [{"id": new, "v": 0}]}}
                    effect, made[k] = ("append", new), made[k] + 1
                batches[k].append((request, effect))
            continue
        request, effect = batches[k].pop(0)
        sent += 1
        result = editors[k].apply({**request, "base_version": bases[k]})
        if result.is_error:
            errors += 1
            batches[k] = []
            continue
        rebased += "Your request was written against version" in result.text
        ids = [ident for ident, _ in mine[k]]
        if effect[0] == "update":
            mine[k] = [(i, effect[2] if i == effect[1] else v) for i, v in mine[k]]
        elif effect[0] == "delete":
            mine[k] = [(i, v) for i, v in mine[k] if i != effect[1]]
        elif effect[0] == "insert":
            at_anchor = ids.index(effect[2])
            mine[k] = [*mine[k][:at_anchor], (effect[1], 0), *mine[k][at_anchor:]]
        else:
            mine[k] = [*mine[k], (effect[1], 0)]
    assert errors == 0
    assert rebased > SERVERS * 10
    final = on_disk(path)["items"]
    for k in range(SERVERS):
        assert [(i["id"], i["v"]) for i in final if i["id"].startswith(f"s{k}-")] == mine[k]
