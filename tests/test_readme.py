"""The README's examples run as printed (so what a newcomer copies works)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def _block(marker: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert match is not None, f"README.md has no <!-- {marker} --> python block"
    return match.group(1)


def test_ten_line_example_runs_and_prints_what_its_comments_say() -> None:
    """The ten-line example: a malformed first reply is corrected, the second applied, and each
    print shows the value written in its comment."""
    code = _block("readme-example")
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
    text = README.read_text(encoding="utf-8")
    assert "Issue(code='placeholder_out_of_range', path='updateElements.items[2]'" in text


@pytest.mark.slow
def test_batch_example_runs_as_printed() -> None:
    """The README's batch-job example runs offline and prints what its comments say."""
    code = _block("readme-batch")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README batch example", "exec"), {"__name__": "readme"})
    expected = [
        line.split("# ", 1)[1].strip()
        for line in code.splitlines()
        if line.startswith("    print(") and "# " in line
    ]
    assert out.getvalue().splitlines() == expected
