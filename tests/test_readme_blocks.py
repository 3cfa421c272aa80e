"""Every Python block of README.md (and of docs/*.md) runs offline, extracted from the file.

A block marked ``<!-- name -->`` whose name a dedicated test reads (``tests/test_readme*.py``,
``tests/test_session_readme.py``: they also check what it prints and what it sent) is left to
that test; this file proves that the dedicated test exists. Every other block runs here, with
``print(...)  # value`` lines checked against their comment, inside the ``readme_env`` fixture:
``FakeProviderServer`` answers every model request with a change request setting ``status`` to
``"paid"``, and ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` (and dummy keys) point the SDKs'
own clients at it, so a block written for a real model runs as printed. A block that truly
cannot run offline is marked ``<!-- readme-test: skip (reason) -->`` in the file (none today).
"""

from __future__ import annotations

import contextlib
import gc
import io
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent_payload.testing import FakeProviderServer

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
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


def _dedicated_tests() -> str:
    """The text of the tests that extract marked README blocks by name."""
    files = [*TESTS.glob("test_readme*.py"), TESTS / "test_session_readme.py"]
    return "\n".join(f.read_text(encoding="utf-8") for f in files if f != Path(__file__))


def _dedicated(marker: str | None) -> bool:
    return marker is not None and f'"{marker}"' in _dedicated_tests()


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


@pytest.mark.parametrize("block", [b for b in BLOCKS if _dedicated(b.marker)], ids=lambda b: b.id)
def test_marked_block_has_its_dedicated_test(block: Block) -> None:
    """A block left to a dedicated test is read by name there (so it runs in that test)."""
    assert block.marker is not None
    assert re.search(rf"[\"']{re.escape(block.marker)}[\"']", _dedicated_tests())


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
