"""Files written back exactly and safely (issue 30, "Files"; issue 32, one reader and writer).

Every JSON file the library reads (the CLI's payload and change files, the file the MCP server
edits, a saved session) goes through one reader, and every file it writes through one writer:
numbers come back as they were written, a duplicate key is refused with its line and column, a
read-only file, a hard link, a directory or a file in a read-only folder is refused with the
old file whole, a symlink is followed, and a new file gets the mode the umask gives.
"""

from __future__ import annotations

import copy
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, SecretStr

from agent_payload._files import (
    JsonLayout,
    atomic_write_text,
    json_file_text,
    json_layout,
    loads_json_file,
)
from agent_payload.agent import PayloadAgent
from agent_payload.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from agent_payload.errors import ConfigurationError, FileWriteError, SessionFileError, UsageError
from agent_payload.mcp import PayloadFileEditor
from agent_payload.merge import apply_change_request
from agent_payload.session import PayloadSession
from agent_payload.testing import FakeProviderServer, ScriptedModel

# The exact numbers of the issue: neither is a 64-bit float, and 12.50 is written with a zero
# a float would drop.
NUMBERS = '{"big": 12345678901234567890123.45, "tiny": 1E-400, "price": 12.50, "name": "x"}\n'
EDITED = '{"big": 12345678901234567890123.45, "tiny": 1E-400, "price": 12.50, "name": "y"}\n'
RENAME = {"updateElements": {"name": "y"}}


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), stdin=io.StringIO(""), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def files(tmp_path: Path, payload: str, change: Any = RENAME) -> tuple[Path, Path]:
    target = tmp_path / "payload.json"
    target.write_text(payload, encoding="utf-8")
    request = tmp_path / "change.json"
    request.write_text(json.dumps(change), encoding="utf-8")
    return target, request


def listing(folder: Path) -> list[str]:
    """The files of ``folder`` but the writers' lock files (``.<name>.lock``, left in place by
    design: see agent_payload._filelock); a write leaves nothing else behind."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


# --- numbers ----------------------------------------------------------------------------------


def test_cli_edit_writes_untouched_numbers_back_exactly(tmp_path: Path) -> None:
    target, request = files(tmp_path, NUMBERS)
    status, _, err = cli("apply", str(target), str(request), "-o", str(target))
    assert status == EXIT_OK, err
    assert target.read_text(encoding="utf-8") == EDITED


def test_cli_prints_untouched_numbers_exactly_and_indented(tmp_path: Path) -> None:
    pretty = (
        '{\n  "big": 12345678901234567890123.45,\n  "list": [\n    1E-400,\n    1.0,\n    -0.0\n'
        '  ],\n  "n": 1\n}\n'
    )
    target, request = files(tmp_path, pretty, {"updateElements": {"n": 2}})
    status, out, err = cli("apply", str(target), str(request))
    assert status == EXIT_OK, err
    assert out == pretty.replace('"n": 1', '"n": 2')


def test_cli_report_shows_numbers_as_the_file_writes_them(tmp_path: Path) -> None:
    target, request = files(tmp_path, NUMBERS, {"updateElements": {"tiny": 0}})
    status, _, err = cli("apply", "--report", "--no-color", str(target), str(request))
    assert status == EXIT_OK, err
    assert "tiny: 1E-400 -> 0" in err, err


def test_mcp_edit_writes_untouched_numbers_back_exactly(tmp_path: Path) -> None:
    target, _ = files(tmp_path, NUMBERS)
    editor = PayloadFileEditor(target)
    outcome = editor.apply(RENAME)
    assert not outcome.is_error, outcome.text
    assert target.read_text(encoding="utf-8") == EDITED
    assert not editor.undo().is_error
    assert target.read_text(encoding="utf-8") == NUMBERS


def test_mcp_model_shows_and_writes_numbers_as_json_allows(tmp_path: Path) -> None:
    """The model reads the literal; a number it writes is written as JSON writes a float."""
    target, _ = files(tmp_path, NUMBERS)
    editor = PayloadFileEditor(target)
    assert "12345678901234567890123.45" in editor.read().text
    assert not editor.apply({"updateElements": {"price": 0.1, "tiny": 2e-300}}).is_error
    assert json.loads(target.read_text(encoding="utf-8")) == {
        "big": 12345678901234567890123.45,
        "tiny": 2e-300,
        "price": 0.1,
        "name": "x",
    }
    assert '"tiny": 2e-300, "price": 0.1,' in target.read_text(encoding="utf-8")


def test_a_number_too_large_for_any_float_is_refused_naming_it(tmp_path: Path) -> None:
    target, request = files(tmp_path, '{"a": 1,\n "b": 1E400}')
    status, _, err = cli("apply", str(target), str(request), "-o", str(target))
    assert status == EXIT_USAGE
    assert "1E400" in err and "line 2, column 7" in err
    assert target.read_text(encoding="utf-8") == '{"a": 1,\n "b": 1E400}'


# --- duplicate keys ---------------------------------------------------------------------------


def test_cli_refuses_a_duplicate_key_with_line_and_column(tmp_path: Path) -> None:
    target, request = files(tmp_path, '{"a": 1, "a": 2}')
    status, out, err = cli("apply", str(target), str(request), "-o", str(target))
    assert status == EXIT_USAGE and not out
    assert 'line 1, column 10: the key "a" given twice' in err, err
    assert target.read_text(encoding="utf-8") == '{"a": 1, "a": 2}'


def test_cli_refuses_a_duplicate_key_in_the_change_file(tmp_path: Path) -> None:
    target, request = files(tmp_path, '{"a": 1}')
    request.write_text('{"updateElements": {"a": 2,\n  "a": 3}}', encoding="utf-8")
    status, _, err = cli("apply", str(target), str(request))
    assert status == EXIT_USAGE
    assert 'line 2, column 3: the key "a" given twice' in err, err


def test_a_duplicate_key_deep_beyond_recursion_is_refused(tmp_path: Path) -> None:
    deep = "[" * 3000 + '{"k": 1, "k": 2}' + "]" * 3000
    target, request = files(tmp_path, deep, {"updateElements": {}})
    status, _, err = cli("apply", str(target), str(request))
    assert status == EXIT_USAGE
    assert 'line 1, column 3010: the key "k" given twice' in err, err


def test_mcp_refuses_a_duplicate_key(tmp_path: Path) -> None:
    target, _ = files(tmp_path, '{"a": 1, "a": 2}')
    with pytest.raises(ConfigurationError, match='line 1, column 10: the key "a" given twice'):
        PayloadFileEditor(target)
    target.write_text('{"a": 1}', encoding="utf-8")
    editor = PayloadFileEditor(target)
    target.write_text('{"a": 1, "a": 2}', encoding="utf-8")
    read = editor.read()
    assert read.is_error and 'line 1, column 10: the key "a" given twice' in read.text


def test_session_file_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    session = PayloadSession(None, {"a": 1})
    file = tmp_path / "s.json"
    session.save(file)
    text = file.read_text(encoding="utf-8").replace('"a": 1', '"a": 1, "a": 2')
    file.write_text(text, encoding="utf-8")
    with pytest.raises(SessionFileError, match=r'column \d+: the key "a" given twice'):
        PayloadSession.load(file, None)


# --- the one writer: modes, links, directories --------------------------------------------------


def test_a_read_only_target_is_refused(tmp_path: Path) -> None:
    target, request = files(tmp_path, '{"name": "x"}')
    target.chmod(0o444)
    status, _, err = cli("apply", str(target), str(request), "-o", str(target))
    assert status == EXIT_FAILED
    assert "read-only" in err and str(target) in err
    assert target.read_text(encoding="utf-8") == '{"name": "x"}'
    assert stat.S_IMODE(target.stat().st_mode) == 0o444
    editor = PayloadFileEditor(target)
    outcome = editor.apply(RENAME)
    assert outcome.is_error and "read-only" in outcome.text
    assert target.read_text(encoding="utf-8") == '{"name": "x"}'
    assert listing(tmp_path) == ["change.json", "payload.json"]


def test_a_symlink_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "payload.json"
    real.write_text('{"name": "x"}', encoding="utf-8")
    real.chmod(0o640)
    link_dir = tmp_path / "links"
    link_dir.mkdir()
    link = link_dir / "payload.json"
    link.symlink_to(os.path.relpath(real, link_dir))
    request = tmp_path / "change.json"
    request.write_text(json.dumps(RENAME), encoding="utf-8")
    status, _, err = cli("apply", str(link), str(request), "-o", str(link))
    assert status == EXIT_OK, err
    assert link.is_symlink()
    assert real.read_text(encoding="utf-8") == '{"name": "y"}\n'
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert listing(real_dir) == ["payload.json"] and listing(link_dir) == ["payload.json"]
    editor = PayloadFileEditor(link)
    assert not editor.apply({"updateElements": {"name": "z"}}).is_error
    assert link.is_symlink() and json.loads(real.read_text(encoding="utf-8")) == {"name": "z"}


def test_a_hard_link_is_refused_not_split(tmp_path: Path) -> None:
    target, request = files(tmp_path, '{"name": "x"}')
    other = tmp_path / "other.json"
    os.link(target, other)
    status, _, err = cli("apply", str(target), str(request), "-o", str(target))
    assert status == EXIT_FAILED
    assert "2 hard links" in err
    assert other.read_text(encoding="utf-8") == '{"name": "x"}'
    assert target.stat().st_ino == other.stat().st_ino


def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path: Path) -> None:
    target = tmp_path / "new.json"
    old = os.umask(0o027)
    try:
        atomic_write_text(target, "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_directory_is_not_a_file_to_write(tmp_path: Path) -> None:
    folder = tmp_path / "payload.json"
    folder.mkdir()
    with pytest.raises(FileWriteError, match="is a directory") as info:
        atomic_write_text(folder, "{}")
    assert isinstance(info.value.__cause__, IsADirectoryError)
    assert folder.is_dir() and listing(tmp_path) == ["payload.json"]


def test_a_target_in_a_read_only_folder_is_refused_and_kept_whole(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    target = folder / "payload.json"
    target.write_text('{"name": "x"}', encoding="utf-8")
    folder.chmod(0o555)
    try:
        with pytest.raises(FileWriteError, match="read-only") as info:
            atomic_write_text(target, '{"name": "y"}')
        assert str(folder) in str(info.value)
        assert isinstance(info.value.__cause__, PermissionError)
        assert target.read_text(encoding="utf-8") == '{"name": "x"}'
        assert listing(folder) == ["payload.json"]
    finally:
        folder.chmod(0o755)


def test_a_failed_encoding_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "p.json"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(FileWriteError):
        atomic_write_text(target, "\udc80")
    assert target.read_text(encoding="utf-8") == "old" and listing(tmp_path) == ["p.json"]


# --- sessions of payloads with secrets and excluded fields ----------------------------------------


class Account(BaseModel):
    user: str
    token: SecretStr
    note: str = Field(default="", exclude=True)


def test_save_refuses_secrets_and_excluded_values_unless_asked(tmp_path: Path) -> None:
    account = Account(user="alice", token=SecretStr("s3cret"), note="kept")
    session = PayloadSession(None, account)
    file = tmp_path / "s.json"
    with pytest.raises(UsageError) as info:
        session.save(file)
    message = str(info.value)
    assert "token (a secret)" in message and "note (exclude=True)" in message
    assert "include_secrets=True" in message
    assert not file.exists()
    session.save(file, include_secrets=True)
    assert json.loads(file.read_text(encoding="utf-8"))["payload"] == {
        "user": "alice",
        "token": "s3cret",
        "note": "kept",
    }
    loaded = PayloadSession.load(file, PayloadAgent(ScriptedModel([])), payload_type=Account)
    assert loaded.payload == account
    assert loaded.payload.token.get_secret_value() == "s3cret"
    assert loaded.payload.note == "kept"


def test_a_saved_session_with_secrets_continues_with_them(tmp_path: Path) -> None:
    """Turns, undo and redo of a loaded session keep the real secret and excluded value."""
    account = Account(user="alice", token=SecretStr("s3cret"), note="kept")
    agent = PayloadAgent(ScriptedModel(['{"updateElements": {"user": "bob"}}']), max_retries=0)
    session = PayloadSession(agent, account)
    session.send("rename the user to bob")
    with pytest.raises(UsageError, match="include_secrets=True"):
        session.to_json()
    file = tmp_path / "s.json"
    session.save(file, include_secrets=True)
    loaded = PayloadSession.load(file, agent, payload_type=Account)
    assert loaded.payload == session.payload
    loaded.undo()
    assert loaded.payload == account and loaded.payload.token.get_secret_value() == "s3cret"
    loaded.redo()
    assert loaded.payload.user == "bob" and loaded.payload.note == "kept"


def test_save_of_a_plain_model_needs_no_option(tmp_path: Path) -> None:
    class Plain(BaseModel):
        user: str

    session = PayloadSession(None, Plain(user="bob"))
    session.save(tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))["payload"] == {
        "user": "bob"
    }


# --- the reader and the writer, adversarially ----------------------------------------------------


@pytest.mark.parametrize(
    "literal",
    ["1e5", "1.0E+2", "-0.0", "0.1", "5e-324", "1.7976931348623157e308", "2.50", "-1E-400"],
)
def test_every_number_is_written_back_as_read(literal: str) -> None:
    text = f'{{"a": [{literal}, 12345678901234567890123456789], "b": {literal}}}'
    data = loads_json_file(text)
    assert json_file_text(data, json_layout(text)) == text + "\n"
    assert float(data["a"][0]) == float(literal)  # a float for arithmetic


def test_a_number_survives_a_move_a_copy_and_a_merge() -> None:
    data = loads_json_file('{"items": [{"p": 1E-400}, {"p": 12.50}], "n": 1}')
    moved = apply_change_request(
        data, {"replaceElements": {"items": [{"p": 3}]}, "updateElements": {"n": 2}}
    ).payload
    assert json_file_text(moved, JsonLayout(None, (",", ":"))) == '{"items":[{"p":3}],"n":2}\n'
    kept = apply_change_request(data, {"updateElements": {"items": ["DELETE", {}]}}).payload
    assert json_file_text(copy.deepcopy(kept), JsonLayout(None)) == (
        '{"items": [{"p": 12.50}], "n": 1}\n'
    )
    assert data == loads_json_file('{"items": [{"p": 1E-400}, {"p": 12.50}], "n": 1}')


def test_a_number_in_a_change_file_is_written_as_given(tmp_path: Path) -> None:
    target, request = files(tmp_path, '{"rate": 1}')
    request.write_text('{"updateElements": {"rate": 0.10000000000000001}}', encoding="utf-8")
    status, out, err = cli("apply", str(target), str(request))
    assert status == EXIT_OK, err
    assert out == '{"rate": 0.10000000000000001}\n'


def test_numbers_deeper_than_recursion_are_written_back_as_read(tmp_path: Path) -> None:
    deep = "[" * 3000 + '{"x": 1E-400, "n": 1}' + "]" * 3000
    target, request = files(tmp_path, deep, {"updateElements": {}})
    status, out, err = cli("apply", str(target), str(request))
    assert status == EXIT_OK, err
    assert out == deep + "\n"


def test_an_integer_longer_than_python_reads_is_refused_naming_it(tmp_path: Path) -> None:
    target, request = files(tmp_path, '{"n": ' + "9" * 5000 + "}")
    status, _, err = cli("apply", str(target), str(request))
    assert status == EXIT_USAGE
    assert "line 1, column 7: an integer of 5,000 digits" in err, err


def test_nan_in_a_file_is_refused_with_its_place(tmp_path: Path) -> None:
    target, request = files(tmp_path, '{"n": [1,\n NaN]}')
    status, _, err = cli("apply", str(target), str(request))
    assert status == EXIT_USAGE
    assert "line 2, column 2: NaN is not valid JSON" in err, err


def test_a_symlink_to_a_read_only_file_is_refused_naming_both(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("{}", encoding="utf-8")
    real.chmod(0o400)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with pytest.raises(FileWriteError) as info:
        atomic_write_text(link, '{"a": 1}')
    assert str(real) in str(info.value) and str(link) in str(info.value)
    assert "read-only" in str(info.value)
    assert real.read_text(encoding="utf-8") == "{}" and link.is_symlink()


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "new.json")
    atomic_write_text(link, "{}")
    assert link.is_symlink() and (tmp_path / "new.json").read_text(encoding="utf-8") == "{}"


def test_a_failed_write_through_a_session_keeps_the_old_save(tmp_path: Path) -> None:
    file = tmp_path / "s.json"
    PayloadSession(None, {"a": 1}).save(file)
    before = file.read_bytes()
    file.chmod(0o444)
    with pytest.raises(FileWriteError, match="read-only"):
        PayloadSession(None, {"a": 2}).save(file)
    assert file.read_bytes() == before and listing(tmp_path) == ["s.json"]


def test_a_secret_inside_an_excluded_value_cannot_be_saved_even_when_asked(
    tmp_path: Path,
) -> None:
    class Vault(BaseModel):
        inner: Account | None = Field(default=None, exclude=True)
        name: str

    vault = Vault(inner=Account(user="a", token=SecretStr("t")), name="v")
    session = PayloadSession(None, vault)
    with pytest.raises(UsageError, match="cannot be written so that they load back equal"):
        session.save(tmp_path / "s.json", include_secrets=True)
    assert listing(tmp_path) == []


def test_a_number_the_model_writes_is_compared_as_written(tmp_path: Path) -> None:
    """1E-400 is not 0 (a float would say it is): setting it to 0 is a change; writing 12.5
    over 12.50 changes nothing, and the file keeps 12.50."""
    target, _ = files(tmp_path, NUMBERS)
    editor = PayloadFileEditor(target)
    assert not editor.apply({"updateElements": {"tiny": 0, "price": 12.5}}).is_error
    assert target.read_text(encoding="utf-8") == NUMBERS.replace("1E-400", "0")
    data = loads_json_file(NUMBERS)
    assert data["tiny"] != 0.0 and data["price"] == 12.5 and data["big"] != 1.2345678901234568e22
    assert data == loads_json_file(NUMBERS) and hash(data["price"]) == hash(12.5)


# --- batch: items and results -------------------------------------------------------------------


def test_cli_batch_keeps_numbers_and_refuses_duplicate_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = '{"sku": "good-0000", "price": 10, "big": 12345678901234567890123.45, "t": 1E-400}'
    items_file = tmp_path / "items.jsonl"
    items_file.write_text(
        f'{{"id": "good-0000", "payload": {payload}, "task": "set the price to 20"}}\n',
        encoding="utf-8",
    )
    out = tmp_path / "results.jsonl"
    reply = '{"updateElements": {"price": 20}}'
    with FakeProviderServer(handler=lambda request: reply) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        argv = [
            "batch", "--model", "openai:gpt-fake", "--input", str(items_file),
            "--state", str(tmp_path / "job.sqlite"), "-o", str(out), "--poll-interval", "0",
        ]  # fmt: skip
        status, _, err = cli(*argv)
    assert status == EXIT_OK, err
    line = out.read_text(encoding="utf-8")
    assert '"big": 12345678901234567890123.45, "t": 1E-400' in line and '"price": 20' in line
    items_file.write_text('{"id": "a", "payload": {}, "task": "x", "task": "y"}\n')
    argv[argv.index("--state") + 1] = str(tmp_path / "other.sqlite")
    status, _, err = cli(*argv)
    assert status == EXIT_USAGE
    assert 'items.jsonl, line 1, column 41: invalid JSON: the key "task" given twice' in err, err
