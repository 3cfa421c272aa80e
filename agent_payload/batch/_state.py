"""The job's state file: its SQLite schema, format version and marker, its lease, and
``StateFile``, every read and write of the file that is not a judgement. The records it hands
out and the JSON kept in its columns are ``_records``."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agent_payload import _filelock
from agent_payload._jsontext import loads_file
from agent_payload.batch._records import (
    BatchItemResult,
    BatchProgress,
    Phase,
    resolve_type,
)
from agent_payload.errors import AgentPayloadError, UsageError
from agent_payload.usage import Usage

__all__ = ["USAGE_COLUMNS", "BatchStateError", "StateFile"]

FORMAT_VERSION = 1
APPLICATION_ID = 0x61706A62  # b"apjb": SQLite's application_id, in the file's header
_HEADER = b"SQLite format 3\x00"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    payload TEXT NOT NULL,
    task TEXT NOT NULL,
    model_type TEXT,
    payload_type TEXT,
    status TEXT NOT NULL DEFAULT 'pending',
    in_round INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    transport_failures INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_input_tokens INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    change_request TEXT,
    report TEXT,
    error TEXT,
    problems TEXT,
    failure TEXT,
    retry_base INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS items_status ON items (status, in_round);
CREATE TABLE IF NOT EXISTS chunks (
    round INTEGER NOT NULL,
    chunk INTEGER NOT NULL,
    state TEXT NOT NULL,
    batch_id TEXT,
    submitting_at REAL,
    ended_status TEXT,
    message TEXT,
    PRIMARY KEY (round, chunk)
);
CREATE TABLE IF NOT EXISTS requests (
    custom_id TEXT PRIMARY KEY,
    round INTEGER NOT NULL,
    chunk INTEGER NOT NULL,
    item_seq INTEGER NOT NULL,
    entry TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'open'
);
CREATE INDEX IF NOT EXISTS requests_chunk ON requests (round, chunk, state);
CREATE TABLE IF NOT EXISTS replies (
    item_seq INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    round INTEGER NOT NULL,
    reply TEXT NOT NULL,
    PRIMARY KEY (item_seq, attempt)
);
"""


USAGE_COLUMNS = (  # an item's usage, in the order of Usage's fields
    "input_tokens",
    "output_tokens",
    "attempts",
    "cached_input_tokens",
    "cache_write_input_tokens",
)


class BatchStateError(AgentPayloadError):
    """The state file cannot be used as it is (not a job's file, damaged, another job's model,
    another ``run()`` holding it, or a submission whose fate the provider cannot tell
    unambiguously). The message names the file; nothing was sent."""


_COLUMNS = {  # added to a file written before they existed
    "items": (
        ("cached_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
        ("cache_write_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
        ("failure", "TEXT"),
        ("retry_base", "INTEGER NOT NULL DEFAULT 0"),
    ),
    "chunks": (("ended_status", "TEXT"), ("message", "TEXT")),
}


class StateFile:
    """The job's SQLite file (WAL mode): opened or created, checked against the job's model and
    mode, and every read or write the job makes that is not a judgement."""

    def __init__(self, path: Path, model: str, mode: str) -> None:
        self.path = path
        self.mode = mode
        self._lease: int | None = None
        created = self._check_header()
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error as exc:
            raise BatchStateError(f"{self.path}: cannot open the state file ({exc})") from exc
        try:
            with self.guard("its tables"):
                if created:
                    # The marker goes into the header before WAL mode, so that it is in the
                    # main file from the first write on (the header check reads only that).
                    self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                with self.tx() as db:
                    for statement in filter(str.strip, SCHEMA.split(";")):
                        db.execute(statement)
                    self._add_columns()
                self._check_meta(model)
        except BaseException:
            self.db.close()
            raise

    def _check_header(self) -> bool:
        """True when the file is new (missing or empty); ``BatchStateError`` unless its header
        (read without opening it as a database, so another application's file is left unchanged)
        has this format's ``application_id``."""
        try:
            with open(self.path, "rb") as handle:
                header = handle.read(100)
        except FileNotFoundError:
            return True
        except OSError as exc:
            raise BatchStateError(
                f"{self.path}: cannot read the state file ({exc.strerror or exc})"
            ) from exc
        if not header:
            return True
        if not header.startswith(_HEADER) or len(header) < 72:
            raise BatchStateError(
                f"{self.path}: not a batch state file (not an SQLite database); it was left as "
                "it is. Give --state / BatchJob a new path or the job's own file"
            )
        found = int.from_bytes(header[68:72], "big")
        if found != APPLICATION_ID:
            raise BatchStateError(
                f"{self.path}: an SQLite database of another application (application_id "
                f"{found:#x}, a batch state file has {APPLICATION_ID:#x}); it was left as it "
                "is. Give --state / BatchJob a new path or the job's own file"
            )
        return False

    @contextlib.contextmanager
    def guard(self, what: str, *, decoding: bool = True) -> Iterator[None]:
        """Turn an error of the file (SQLite, or with ``decoding`` a JSON column that does not
        decode) into a ``BatchStateError`` naming the file and what was being read."""
        kinds: tuple[type[BaseException], ...] = (sqlite3.DatabaseError,)
        if decoding:
            kinds = (sqlite3.DatabaseError, ValueError, KeyError, TypeError)
        try:
            yield
        except AgentPayloadError:
            raise
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise BatchStateError(
                    f"{self.path}: the state file is locked by another process ({exc}) while "
                    f"reading {what}; run again when it is done"
                ) from exc
            raise self._damaged(what, exc) from exc
        except kinds as exc:
            raise self._damaged(what, exc) from exc

    def _damaged(self, what: str, exc: BaseException) -> BatchStateError:
        return BatchStateError(
            f"{self.path}: {what} cannot be read ({type(exc).__name__}: {exc}); the state file "
            "is damaged or was changed by another program. Restore it from a copy, or start a "
            "new state file"
        )

    def _add_columns(self) -> None:
        for table, columns in _COLUMNS.items():
            present = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
            for column, kind in columns:
                if column not in present:
                    self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def _check_meta(self, model: str) -> None:
        meta = dict(self.db.execute("SELECT key, value FROM meta").fetchall())
        if not meta:
            with self.tx():
                self.db.executemany(
                    "INSERT OR IGNORE INTO meta VALUES (?, ?)",
                    [
                        ("format_version", str(FORMAT_VERSION)),
                        ("model", model),
                        ("mode", self.mode),
                        ("tag", os.urandom(6).hex()),
                    ],
                )
            meta = dict(self.db.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("format_version") != str(FORMAT_VERSION):
            raise BatchStateError(
                f"{self.path}: state format {meta.get('format_version')!r}, this version reads "
                f"{FORMAT_VERSION}"
            )
        if meta.get("model") != model or meta.get("mode") != self.mode:
            raise BatchStateError(
                f"{self.path}: this job runs {meta.get('model')} in {meta.get('mode')} mode; it "
                f"was reopened with {model} in {self.mode} mode. Resume with the same agent, or "
                "start a new state file"
            )
        tag = meta.get("tag")
        if not tag or not tag.isalnum():
            raise self._damaged("the job's tag", ValueError(f"tag {tag!r}"))
        self.tag = tag
        """The job's own random tag: in every custom id and batch tag, so that no other job's
        batch or reply is ever taken for this job's."""

    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A transaction of several statements (one statement is one on its own: autocommit)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.release()
        self.db.close()

    # -- the lease: one run() at a time --

    @contextlib.contextmanager
    def leased(self) -> Iterator[None]:
        """Hold the job's exclusive lease (an OS lock on ``<state>.lock``, released when the
        process ends, however it ends): ``BatchStateError`` when another ``run()`` holds it.
        Held already by this object (a call from inside a run): nothing more to take."""
        if self._lease is not None:
            yield
            return
        where = self.path.with_name(self.path.name + ".lock")
        note = f"process {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S %z')}"
        try:
            self._lease = _filelock.acquire(where, wait=False, note=note)
        except _filelock.LockHeld as exc:
            raise BatchStateError(
                f"{self.path}: another run() of this job holds it ({exc.holder}); two runners "
                "would submit every request twice. Wait for that one to finish (or stop it: its "
                "work is saved) and run again"
            ) from exc
        except OSError as exc:
            raise BatchStateError(
                f"{self.path}: cannot open its lock file {where} ({exc.strerror or exc})"
            ) from exc
        try:
            yield
        finally:
            self.release()

    def release(self) -> None:
        if self._lease is not None:
            fd, self._lease = self._lease, None
            _filelock.release(fd)

    # -- items --

    def add_items(self, rows: list[tuple[Any, ...]]) -> int:
        """Insert the new ``(id, payload, task, model_type, payload_type)`` rows (see add_many)."""
        with self.tx() as db:
            new = []
            changed = []
            for row in rows:
                stored = db.execute(
                    "SELECT payload, task, model_type, payload_type FROM items WHERE id = ?",
                    (row[0],),
                ).fetchone()
                if stored is None:
                    new.append(row)
                elif tuple(stored) != tuple(row[1:]):
                    names = ("payload", "task", "payload type", "payload type")
                    what = [n for n, a, b in zip(names, stored, row[1:], strict=True) if a != b]
                    changed.append(f"{row[0]!r} ({' and '.join(dict.fromkeys(what))})")
            if changed:
                shown = ", ".join(changed[:10]) + (" ..." if len(changed) > 10 else "")
                raise UsageError(
                    f"{self.path}: {len(changed)} item(s) are already in the job with another "
                    f"payload or task: {shown}. The job keeps what it was given first; give "
                    "changed items new ids, or start a new state file"
                )
            db.executemany(
                "INSERT INTO items (id, payload, task, model_type, payload_type) "
                "VALUES (?, ?, ?, ?, ?)",
                new,
            )
            return len(new)

    def retry_failed(self) -> int:
        """Stored replies up to ``retry_base`` count in the usage but are not fed to the judge."""
        return self.db.execute(
            "UPDATE items SET status = 'pending', in_round = NULL, transport_failures = 0, "
            "failure = NULL, retry_base = (SELECT COALESCE(MAX(attempt), 0) FROM replies "
            "WHERE item_seq = items.seq) WHERE status = 'failed'"
        ).rowcount

    def type_names(self) -> set[str]:
        """The payload types the pending items name."""
        rows = self.db.execute(
            "SELECT DISTINCT model_type, payload_type FROM items WHERE status = 'pending'"
        ).fetchall()
        return {name for row in rows for name in row if name}

    def set_item(self, seq: int, **columns: Any) -> None:
        names = ", ".join(f"{name} = ?" for name in columns)
        self.db.execute(f"UPDATE items SET {names} WHERE seq = ?", (*columns.values(), seq))

    def transport_failure(self, seq: int, message: str, retries: int) -> None:
        """A request of the item got no reply (inside the caller's transaction): pending for
        the next round, or ``failed`` (for want of a reply) after ``retries`` retries."""
        (failures,) = self.db.execute(
            "SELECT transport_failures FROM items WHERE seq = ?", (seq,)
        ).fetchone()
        failures += 1
        if failures > retries:
            error = f"provider error after {failures} tries: {message}"
            self.set_item(seq, status="failed", failure="transport")
        else:
            error = f"provider error (try {failures}, retried): {message}"
        self.set_item(seq, in_round=None, transport_failures=failures, error=error)

    def lost_reason(self, rnd: int, chunk: int, batch_id: str, unreadable: list[str]) -> str:
        """Why the requests of an ended batch that have no result got none: its unreadable
        lines, or the provider's word on the batch as a whole."""
        ended_status, message = self.db.execute(
            "SELECT ended_status, message FROM chunks WHERE round = ? AND chunk = ?",
            (rnd, chunk),
        ).fetchone()
        if unreadable:
            shown = "; ".join(unreadable[:3]) + ("; ..." if len(unreadable) > 3 else "")
            return f"batch {batch_id}: no readable result for this request ({shown})"
        if ended_status not in (None, "completed", "ended"):
            said = f": {message}" if message else " (the provider gave no reason)"
            return f"batch {batch_id} {ended_status}{said}"
        return f"the batch ended without a result for this request (batch {batch_id})"

    def begin_run(self) -> None:
        """A run that starts anew (the last one finished) makes the items that failed for
        want of a reply pending again; one that a crash or an error stopped is continued as it
        was (so a resumed job ends as an uninterrupted one)."""
        with self.tx() as db:
            if db.execute("SELECT 1 FROM meta WHERE key = 'run_open'").fetchone() is None:
                db.execute(
                    "UPDATE items SET status = 'pending', transport_failures = 0, "
                    "failure = NULL WHERE status = 'failed' AND failure = 'transport'"
                )
                db.execute("INSERT INTO meta VALUES ('run_open', '1')")

    def end_run(self) -> None:
        self.db.execute("DELETE FROM meta WHERE key = 'run_open'")

    # -- rounds and chunks --

    def set_chunk(self, rnd: int, chunk: int, **columns: Any) -> None:
        names = ", ".join(f"{name} = ?" for name in columns)
        self.db.execute(
            f"UPDATE chunks SET {names} WHERE round = ? AND chunk = ?",
            (*columns.values(), rnd, chunk),
        )

    def forget_submission(self, rnd: int, chunk: int) -> None:
        """A chunk left ``submitting`` became no batch (the user says so): prepared again."""
        self.db.execute(
            "UPDATE chunks SET state = 'prepared', submitting_at = NULL "
            "WHERE round = ? AND chunk = ? AND state = 'submitting'",
            (rnd, chunk),
        )

    def chunks(self, rnd: int, *states: str) -> list[tuple[int, str, str | None, float | None]]:
        marks = ",".join("?" * len(states))
        return self.db.execute(
            f"SELECT chunk, state, batch_id, submitting_at FROM chunks WHERE round = ? "
            f"AND state IN ({marks}) ORDER BY chunk",
            (rnd, *states),
        ).fetchall()

    def open_round(self) -> int | None:
        row = self.db.execute("SELECT MIN(round) FROM chunks WHERE state != 'collected'").fetchone()
        return row[0] if row and row[0] is not None else None

    def results(self, types: Mapping[str, type]) -> Iterator[BatchItemResult]:
        last = 0
        while True:
            with self.guard("the items"):
                cursor = self.db.cursor()
                cursor.row_factory = sqlite3.Row
                rows = cursor.execute(
                    "SELECT * FROM items WHERE seq > ? ORDER BY seq LIMIT 500", (last,)
                ).fetchall()
            if not rows:
                return
            for row in rows:
                last = row["seq"]
                with self.guard(f"item {row['id']!r}"):
                    item = self._result(row, types)
                yield item

    @staticmethod
    def _result(row: sqlite3.Row, types: Mapping[str, type]) -> BatchItemResult:
        data = loads_file(row["payload"] if row["result"] is None else row["result"])
        if row["model_type"] is not None:
            data = resolve_type(row["model_type"], types).model_validate(data)  # type: ignore[attr-defined]
        if row["status"] not in ("pending", "done", "failed"):
            raise ValueError(f"status {row['status']!r}")
        request, report, problems = row["change_request"], row["report"], row["problems"]
        return BatchItemResult(
            id=row["id"],
            status=row["status"],
            payload=data,
            change_request=json.loads(request) if request else None,
            report=json.loads(report) if report else None,
            attempts=row["attempts"],
            usage=Usage(*(row[column] for column in USAGE_COLUMNS)),
            error=row["error"],
            problems=tuple(json.loads(problems)) if problems else (),
        )

    def progress(self, phase: Phase, prices: Mapping[str, float] | None) -> BatchProgress:
        counts = dict(
            self.db.execute("SELECT status, COUNT(*) FROM items GROUP BY status").fetchall()
        )
        sums = ", ".join(f"COALESCE(SUM({column}), 0)" for column in USAGE_COLUMNS)
        usage = Usage(*self.db.execute(f"SELECT {sums} FROM items").fetchone())
        (submitted,) = self.db.execute(
            "SELECT COUNT(*) FROM requests r "
            "JOIN chunks c ON c.round = r.round AND c.chunk = r.chunk "
            "WHERE c.state != 'prepared'"
        ).fetchone()
        (rnd,) = self.db.execute("SELECT COALESCE(MAX(round), 0) FROM chunks").fetchone()
        batches = tuple(
            batch_id
            for (batch_id,) in self.db.execute(
                "SELECT batch_id FROM chunks WHERE round = ? AND batch_id IS NOT NULL "
                "ORDER BY chunk",
                (rnd,),
            )
        )
        cost = None
        if prices is not None:
            price_in = prices.get("input", 0.0)
            cost = (
                usage.uncached_input_tokens * price_in
                + usage.cached_input_tokens * prices.get("cached_input", price_in)
                + usage.cache_write_input_tokens * prices.get("cache_write_input", price_in)
                + usage.output_tokens * prices.get("output", 0.0)
            ) / 1_000_000
        return BatchProgress(
            phase=phase,
            round=rnd,
            submitted=submitted,
            done=counts.get("done", 0),
            failed=counts.get("failed", 0),
            pending=counts.get("pending", 0),
            usage=usage,
            cost=cost,
            batches=batches,
        )
