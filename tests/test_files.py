"""Atomic writes: a failed write leaves the old file whole and names the path."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from agent_payload._files import (
    atomic_write_text,
    json_file_chunks,
    json_file_text,
    json_layout,
    loads_json_file,
)
from agent_payload.errors import AgentPayloadError, FileWriteError


def test_write_replaces_and_keeps_mode(tmp_path: Path) -> None:
    """A good write replaces the content, keeps the permission bits and leaves no temp file."""
    target = tmp_path / "p.json"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    atomic_write_text(target, "new")
    assert target.read_text(encoding="utf-8") == "new"
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]


@pytest.mark.slow
def test_failed_write_leaves_old_file_whole(tmp_path: Path) -> None:
    """Under RLIMIT_FSIZE the write fails with FileWriteError and the old file is untouched."""
    target = tmp_path / "big.json"
    old = '{"a": 1}'
    target.write_text(old, encoding="utf-8")
    script = (
        "import resource, sys\n"
        "from agent_payload._files import atomic_write_text\n"
        "from agent_payload.errors import FileWriteError\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "try:\n"
        f"    atomic_write_text({str(target)!r}, 'x' * 100_000)\n"
        "except FileWriteError as exc:\n"
        "    print(type(exc.__cause__).__name__, exc.path, exc)\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert str(target) in done.stdout
    assert target.read_text(encoding="utf-8") == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.json"]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)  # the limit applied to the child only


def test_unwritable_directory(tmp_path: Path) -> None:
    """A directory that does not exist gives FileWriteError naming the path."""
    target = tmp_path / "missing" / "p.json"
    with pytest.raises(FileWriteError) as info:
        atomic_write_text(target, "x")
    assert str(target) in str(info.value)
    assert isinstance(info.value, AgentPayloadError)
    assert isinstance(info.value.__cause__, OSError)


def test_unencodable_text(tmp_path: Path) -> None:
    """A lone surrogate cannot be written as UTF-8: FileWriteError, old file whole."""
    target = tmp_path / "p.json"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(FileWriteError):
        atomic_write_text(target, "\ud800")
    assert target.read_text(encoding="utf-8") == "old"
    assert os.listdir(tmp_path) == ["p.json"]


def test_a_file_is_written_in_pieces_equal_to_its_text() -> None:
    """The pieces a large payload is written in join to exactly the file's text: numbers kept
    as read, the layout kept, and a lone surrogate (which UTF-8 cannot carry) written as its
    JSON escape while every other character stays as it is."""
    text = json.dumps(
        {"lines": [{"n": i, "p": 1.5, "s": "é€𝄞"} for i in range(30_000)]},
        indent=3,
        ensure_ascii=False,
    )
    text = text.replace('"p": 1.5', '"p": 12.50', 1)
    payload = loads_json_file(text)
    layout = json_layout(text)
    pieces = list(json_file_chunks(payload, layout))
    assert len(pieces) > 2
    assert b"".join(pieces).decode("utf-8") == json_file_text(payload, layout) == text + "\n"
    odd = json_file_text({"s": "a\ud800b", "é": "ü"})
    assert odd == '{\n  "s": "a\\ud800b",\n  "é": "ü"\n}\n'
    assert json.loads(odd) == {"s": "a\ud800b", "é": "ü"}
