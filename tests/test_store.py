"""``PayloadStore`` (issue 28) on SQLite and on a real PostgreSQL: create, get, apply (rebased at a
stale base, sent back on a collision, all or nothing), history, revert, the schema's format
check, typed payloads, and replaying the history. The concurrency acceptance tests (processes,
SIGKILL, agents at once) are in ``tests/test_store_concurrency.py``."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, SecretStr

from agent_payload.errors import (
    ConcurrentChangeError,
    ConfigurationError,
    InvalidChangeRequestError,
    MergeConflictError,
    PayloadValidationError,
    StalePayloadError,
    UsageError,
)
from agent_payload.store import PayloadStore, replay
from agent_payload.usage import Usage
from tests._store_db import store_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty store, once per backend."""
    return store_url(request.param, tmp_path)


PLAN = {"steps": [{"id": "a", "done": False}, {"id": "b", "done": False}, {"id": "c"}]}


def test_create_get_apply_history(url: str) -> None:
    with PayloadStore(url) as store:
        created = store.create("plan", PLAN)
        assert (created.version, created.payload) == (1, PLAN)
        done = store.apply(
            "plan",
            {"updateElements": {"steps": {"0": {"done": True}}}},
            base_version=1,
            reasoning="a is done",
            run_id="run-1",
            model_name="m",
            usage=Usage(10, 2, 1),
        )
        assert done.version == 2 and done.payload["steps"][0]["done"] is True
        assert store.get("plan").payload == done.payload and store.get("plan").version == 2
        first, second = store.history("plan")
        assert (first.version, first.kind, first.parent, first.change_request) == (
            1,
            "create",
            None,
            None,
        )
        assert second.change_request == {"updateElements": {"steps": {"0": {"done": True}}}}
        assert (second.parent, second.base_version, second.written, second.rebased) == (
            1,
            1,
            None,
            False,
        )
        assert (second.reasoning, second.run_id, second.model_name) == ("a is done", "run-1", "m")
        assert second.usage == Usage(10, 2, 1)
        assert second.created_at >= first.created_at
    with PayloadStore(url) as again:  # a second open finds the store and its data
        assert again.get("plan").version == 2 and again.keys() == ["plan"]


def test_a_stale_base_is_rebased_and_both_forms_are_kept(url: str) -> None:
    """The MERGE.md section 9 example: the request lands where its writer saw it; the history
    keeps it as applied (replayable) and as written (against its base)."""
    lines = {"lines": [{"id": "a", "qty": 1}, {"id": "b", "qty": 2}, {"id": "c", "qty": 3}]}
    with PayloadStore(url) as store:
        store.create("order", lines)
        store.apply("order", {"updateElements": {"lines": {"0": "DELETE"}}}, base_version=1)
        late = {
            "updateElements": {"lines": {"2": {"qty": 30}}},
            "newElements": {"lines": {"1": [{"id": "x"}]}},
        }
        stored = store.apply("order", late, base_version=1)
        assert stored.payload == {
            "lines": [{"id": "x"}, {"id": "b", "qty": 2}, {"id": "c", "qty": 30}]
        }
        entry = store.history("order")[-1]
        assert entry.rebased and entry.written == late and entry.base_version == 1
        assert entry.change_request == {
            "updateElements": {"lines": {"1": {"qty": 30}}},
            "newElements": {"lines": {"0": [{"id": "x"}]}},
        }
        assert replay(store.created_payload("order"), store.history("order")) == stored.payload


def test_a_collision_is_sent_back_and_nothing_is_stored(url: str) -> None:
    with PayloadStore(url) as store:
        store.create("plan", PLAN)
        store.apply("plan", {"updateElements": {"steps": {"0": "DELETE"}}}, base_version=1)
        with pytest.raises(ConcurrentChangeError) as caught:
            store.apply("plan", {"updateElements": {"steps": {"0": {"done": 1}}}}, base_version=1)
        (conflict,) = caught.value.report.conflicts
        assert conflict.code == "concurrent_change" and "no longer exists" in conflict.message
        assert caught.value.version == 2 and caught.value.current == store.get("plan").payload
        assert store.get("plan").version == 2 and len(store.history("plan")) == 2


def test_apply_is_all_or_nothing(url: str) -> None:
    """A conflict, an unknown base version, a result that does not fit the type: nothing is
    stored (the version and the history are as they were)."""
    with PayloadStore(url) as store:
        store.create("plan", PLAN)
        with pytest.raises(MergeConflictError):
            store.apply(
                "plan",
                {"updateElements": {"steps": {"0": {"done": True}, "9": {"x": 1}}}},
                base_version=1,
            )
        with pytest.raises(StalePayloadError, match="versions 1 to 1"):
            store.apply("plan", {"updateElements": {"x": 1}}, base_version=7)
        with pytest.raises(UsageError, match="int version"):
            store.apply("plan", {"updateElements": {"x": 1}}, base_version="1")  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="does not exist"):
            store.apply("nope", {"updateElements": {"x": 1}}, base_version=1)
        with pytest.raises(UsageError, match="already exists"):
            store.create("plan", {})
        with pytest.raises(InvalidChangeRequestError, match="not JSON data"):
            store.apply("plan", {"updateElements": {"x": float("nan")}}, base_version=1)
        with pytest.raises(InvalidChangeRequestError, match="found list"):
            store.apply("plan", [], base_version=1)
        assert store.get("plan").payload == PLAN and len(store.history("plan")) == 1


def test_revert_is_a_new_entry(url: str) -> None:
    with PayloadStore(url) as store:
        store.create("plan", PLAN)
        store.apply("plan", {"updateElements": {"steps": {"0": {"done": True}}}}, base_version=1)
        store.apply("plan", {"newElements": {"steps": [{"id": "d"}]}}, base_version=2)
        reverted = store.revert("plan", 1)
        assert reverted.version == 4 and reverted.payload == PLAN
        entry = store.history("plan")[-1]
        assert (entry.kind, entry.reverted_to, entry.parent) == ("revert", 1, 3)
        assert "revert to version 1" in (entry.reasoning or "")
        assert [e.version for e in store.history("plan")] == [1, 2, 3, 4]
        assert store.payload_at("plan", 3)["steps"][-1] == {"id": "d"}
        assert replay(store.created_payload("plan"), store.history("plan")) == PLAN


@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(["set", "insert", "delete", "append", "revert"]),
            st.integers(0, 6),
            st.integers(0, 3),
        ),
        max_size=12,
    )
)
def test_replaying_the_history_gives_the_current_payload(edits: Any) -> None:
    """Property: whatever was applied (at stale bases, rebased or refused, reverts included),
    replaying the history from the created payload gives the current payload, and each
    version's payload is the replay of the entries up to it."""
    with tempfile.TemporaryDirectory() as tmp, PayloadStore(f"sqlite:///{tmp}/s.db") as store:
        store.create("k", {"xs": [{"n": i} for i in range(4)]})
        for n, (op, position, lag) in enumerate(edits):
            current = store.get("k").version
            base = max(1, current - lag)
            size = len(store.payload_at("k", base)["xs"])
            at = str(min(position, max(size - 1, 0)))
            request = {
                "set": {"updateElements": {"xs": {at: {"v": n}}}},
                "insert": {"newElements": {"xs": {at: [{"n": 100 + n}]}}},
                "delete": {"updateElements": {"xs": {at: "DELETE"}}},
                "append": {"newElements": {"xs": [{"n": 200 + n}]}},
            }.get(op)
            try:
                if request is None:
                    store.revert("k", base)
                else:
                    store.apply("k", request, base_version=base)
            except (ConcurrentChangeError, MergeConflictError):
                pass
        history = store.history("k")
        assert [e.version for e in history] == list(range(1, len(history) + 1))
        assert replay(store.created_payload("k"), history) == store.get("k").payload
        for entry in history:
            assert replay(store.created_payload("k"), history[: entry.version]) == (
                store.payload_at("k", entry.version)
            )


# --- the schema ----------------------------------------------------------------------------


def test_another_applications_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    names = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConfigurationError, match=r"another application \(users\)"):
        PayloadStore(f"sqlite:///{path}")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # no -wal or -shm left


def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text(json.dumps({"not": "sqlite"}) * 100)
    before = path.read_bytes()
    with pytest.raises(ConfigurationError, match="not an SQLite database"):
        PayloadStore(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_another_format_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    PayloadStore(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE agent_payload_meta SET value = '99' WHERE name = 'format_version'")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(ConfigurationError, match="format version 99"):
        PayloadStore(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_an_unreachable_postgres_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(ConfigurationError, match="cannot connect to the PostgreSQL store"):
        PayloadStore(f"postgresql://bob:pw@/app?host={tmp_path}")  # no server there


@pytest.mark.slow
def test_another_applications_postgres_database_is_refused_untouched(tmp_path: Path) -> None:
    import psycopg

    pg = store_url("postgres", tmp_path)
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("CREATE TABLE users (id SERIAL PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    with pytest.raises(ConfigurationError, match=r"another application \(users\)"):
        PayloadStore(pg)
    with psycopg.connect(pg, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
        assert tables == [("users",)]
        assert conn.execute("SELECT name FROM users").fetchall() == [("ada",)]


def test_urls_the_store_cannot_use_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        PayloadStore("mysql://bob:s3cret@db/app")
    assert "s3cret" not in str(caught.value) and "bob:***@db" in str(caught.value)
    for bad in ("mysql://x/y", "sqlite://relative.db", "sqlite:///:memory:", 3):
        with pytest.raises(ConfigurationError):
            PayloadStore(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="does not exist"):
        PayloadStore(f"sqlite:///{tmp_path}/no/such/dir/s.db")
    with pytest.raises(ConfigurationError, match="cannot open the SQLite database"):
        PayloadStore(f"sqlite:///{tmp_path}")  # a directory


# --- typed payloads ------------------------------------------------------------------------


class Step(BaseModel):
    id: str
    done: bool = False


class Plan(BaseModel):
    steps: list[Step]


class Account(BaseModel):
    name: str
    password: SecretStr


class Cached(BaseModel):
    name: str
    cache: dict[str, Any] = Field(default_factory=dict, exclude=True)


def test_a_typed_key_validates_every_apply(url: str) -> None:
    with PayloadStore(url) as store:
        created = store.create("plan", Plan(steps=[Step(id="a")]))
        assert created.payload_type == f"{__name__}.Plan"
        assert created.payload == {"steps": [{"id": "a", "done": False}]}
        with pytest.raises(PayloadValidationError, match="does not validate as Plan"):
            store.apply(
                "plan", {"updateElements": {"steps": {"0": {"done": "maybe"}}}}, base_version=1
            )
        assert store.get("plan").version == 1
        store.apply("plan", {"updateElements": {"steps": {"0": {"done": True}}}}, base_version=1)
        assert Plan.model_validate(store.get("plan").payload).steps[0].done is True
    with PayloadStore(url) as other, pytest.raises(ConfigurationError, match="payload_types"):
        other.apply("plan", {"updateElements": {"steps": "no"}}, base_version=2)  # never imported
    with PayloadStore(url, payload_types=[Plan]) as other, pytest.raises(PayloadValidationError):
        other.apply("plan", {"updateElements": {"steps": "no"}}, base_version=2)


def test_what_json_cannot_keep_is_refused_at_create(url: str) -> None:
    with PayloadStore(url) as store:
        with pytest.raises(ConfigurationError, match="secret"):
            store.create("a", Account(name="ada", password=SecretStr("s3cret")))
        with pytest.raises(ConfigurationError, match="exclude=True"):
            store.create("c", Cached(name="x", cache={"k": 1}))
        with pytest.raises(PayloadValidationError):
            store.create("p", {"steps": [{"done": True}]}, payload_type=Plan)
        assert store.keys() == []


def test_concurrent_creates_of_one_key_one_wins(url: str) -> None:
    """Eight threads create the same key at once: one wins, the others get a clear
    UsageError (never a raw database error), and the key holds the winner's payload."""
    barrier = threading.Barrier(8)
    outcomes: list[Any] = []

    def create(n: int) -> None:
        with PayloadStore(url) as mine:
            barrier.wait()
            try:
                mine.create("k", {"n": n})
                outcomes.append(n)
            except UsageError as exc:
                outcomes.append(str(exc))

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if isinstance(o, int)]
    assert len(winners) == 1 and len(outcomes) == 8
    assert all("already exists" in o for o in outcomes if isinstance(o, str))
    with PayloadStore(url) as store:
        assert store.get("k").payload == {"n": winners[0]} and len(store.history("k")) == 1


def test_a_forked_child_uses_its_own_connection(tmp_path: Path) -> None:
    """A store opened before ``fork`` works in the child (which opens its own connection) and
    in the parent afterwards."""
    with PayloadStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.create("k", {"n": 0})
        context = multiprocessing.get_context("fork")
        parents = store._db.connection()  # type: ignore[attr-defined]
        child = context.Process(target=_bump, args=(store, parents))
        child.start()
        child.join()
        assert child.exitcode == 0
        store.apply("k", {"updateElements": {"m": 1}}, base_version=1)
        assert store.get("k").payload == {"n": 1, "m": 1}


def _bump(store: PayloadStore, parents: Any) -> None:
    if store._db.connection() is parents:  # type: ignore[attr-defined]
        raise SystemExit(3)  # SQLite: a connection must never be used across fork
    store.apply("k", {"updateElements": {"n": 1}}, base_version=1)


def test_numbers_read_from_a_file_are_stored_as_written(url: str) -> None:
    """Issue 30's writer in the store too: a payload read from a file keeps every untouched
    number's text through create, apply, history and get (1E-400 did not become 0.0)."""
    from agent_payload._files import loads_json_file
    from agent_payload._jsontext import dumps

    text = '{"tiny": 1E-400, "big": 12345678901234567890123.45, "price": 12.50, "n": 1}'
    with PayloadStore(url) as store:
        store.create("k", loads_json_file(text))
        store.apply("k", {"updateElements": {"n": 2}}, base_version=1)
        got = store.get("k").payload
    assert dumps(got, separators=(",", ":"), literals=True) == (
        '{"tiny":1E-400,"big":12345678901234567890123.45,"price":12.50,"n":2}'
    )
