"""``agent-payload store``: create, show, history (diffs and reasoning), edit with a model (the
real OpenAI SDK against the fake server) and revert, on an SQLite store."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from agent_payload.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from agent_payload.store import PayloadStore

PLAN = {"steps": [{"id": "a", "done": False}, {"id": "b", "done": False}]}


def cli(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def test_create_show_edit_history_revert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: Any
) -> None:
    db = f"sqlite:///{tmp_path / 'plans.db'}"
    monkeypatch.setenv("AGENT_PAYLOAD_STORE", db)
    monkeypatch.setenv("NO_COLOR", "1")
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    status, _, err = cli("store", "create", "plan", str(tmp_path / "plan.json"))
    assert status == EXIT_OK and "created plan at version 1" in err

    reply = json.dumps(
        {"updateElements": {"steps": {"1": {"done": True}}}, "reasoning": "b was finished"}
    )
    with serve([reply]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        status, _, err = cli("store", "edit", "plan", "b is done", "--model", "openai:gpt-test")
    assert status == EXIT_OK, err
    assert "~ steps[1].done: false -> true" in err and "at version 2" in err

    status, out, _ = cli("store", "show", "plan")
    assert status == EXIT_OK and json.loads(out)["steps"][1]["done"] is True
    status, out, _ = cli("store", "show", "plan", "--version", "1")
    assert json.loads(out) == PLAN

    status, _, err = cli("store", "revert", "plan", "1", "--reason", "not yet")
    assert status == EXIT_OK and "now version 3" in err

    status, out, _ = cli("store", "history", "plan")
    assert status == EXIT_OK
    lines = out.splitlines()
    assert lines[0].startswith("version 1 | ") and lines[0].endswith("| create")
    assert "model gpt-test" in lines[1] and "why: b was finished" in lines[2]
    assert "  ~ steps[1].done: false -> true" in lines
    assert "revert to version 1" in out and "why: not yet" in out
    assert "  ~ steps[1].done: true -> false" in lines

    status, out, _ = cli("store", "history", "plan", "--json")
    entries = [json.loads(line) for line in out.splitlines()]
    assert [e["version"] for e in entries] == [1, 2, 3]
    assert entries[1]["change_request"]["updateElements"] == {"steps": {"1": {"done": True}}}
    with PayloadStore(db) as store:
        assert store.get("plan").payload == PLAN


def test_errors_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_PAYLOAD_STORE", raising=False)
    status, _, err = cli("store", "show", "plan")
    assert status == EXIT_USAGE and "--db or $AGENT_PAYLOAD_STORE" in err
    db = f"sqlite:///{tmp_path / 's.db'}"
    status, _, err = cli("store", "--db", db, "show", "plan")
    assert status == EXIT_USAGE and "'plan' does not exist" in err
    status, _, err = cli("store", "--db", db, "create", "plan", "-", stdin="{nope")
    assert status == EXIT_USAGE and "stdin: not JSON" in err
    cli("store", "--db", db, "create", "plan", "-", stdin=json.dumps(PLAN))
    status, _, err = cli("store", "--db", db, "revert", "plan", "5")
    assert status == EXIT_USAGE and "versions 1 to 1" in err
    (tmp_path / "other.db").write_text("not a database at all, " * 50)
    status, _, err = cli("store", "--db", f"sqlite:///{tmp_path / 'other.db'}", "show", "x")
    assert status == EXIT_USAGE and "not an SQLite database" in err
    assert EXIT_FAILED == 1
