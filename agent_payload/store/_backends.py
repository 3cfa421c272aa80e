"""What differs between the databases ``PayloadStore`` runs on: connecting, the schema and its
format check, and the write transaction that serialises a key's writers. SQLite: WAL,
``BEGIN IMMEDIATE`` for writes. PostgreSQL (``psycopg`` 3): the key's row locked ``FOR UPDATE``.
Both keep one connection per thread. The schema is created on first use, under a lock; a
database holding tables of another application is refused before anything is written to it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agent_payload.errors import ConfigurationError

__all__ = ["FORMAT", "FORMAT_VERSION", "Backend", "Cursor", "open_backend", "redacted"]

FORMAT = "agent-payload-store"
FORMAT_VERSION = 1
META = "agent_payload_meta"

SCHEMA = (
    f"CREATE TABLE {META} (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE agent_payload_documents (
        key TEXT PRIMARY KEY,
        version BIGINT NOT NULL,
        payload TEXT NOT NULL,
        payload_type TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE agent_payload_history (
        key TEXT NOT NULL,
        version BIGINT NOT NULL,
        parent BIGINT,
        kind TEXT NOT NULL,
        base_version BIGINT,
        change_request TEXT,
        written TEXT,
        markers TEXT NOT NULL,
        reasoning TEXT,
        run_id TEXT,
        model_name TEXT,
        usage TEXT,
        reverted_to BIGINT,
        snapshot TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (key, version)
    )""",
)


class Cursor:
    """The calls the store makes inside a transaction (``?`` placeholders)."""

    def __init__(self, execute: Any, placeholder: str, duplicate: type[Exception]) -> None:
        self._execute = execute
        self._placeholder = placeholder
        self._duplicate = duplicate

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = self.run(sql, params).fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.run(sql, params).fetchall()]

    def run(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._execute(sql.replace("?", self._placeholder), tuple(params))

    def insert_new(self, sql: str, params: Sequence[Any] = ()) -> bool:
        """Run an INSERT; False when its key exists (a writer created it meanwhile). Only
        as the transaction's last statement: PostgreSQL aborts the transaction."""
        try:
            self.run(sql, params)
        except self._duplicate:
            return False
        return True


def _needs_schema(cur: Cursor, tables_sql: str, where: str) -> bool:
    """True when the schema must be created (no tables); raise for a database not ours."""
    tables = {row[0] for row in cur.all(tables_sql)}
    if not tables:
        return True
    if META not in tables:
        shown = ", ".join(sorted(tables)[:5])
        raise ConfigurationError(
            f"{where} holds tables of another application ({shown}) and no agent-payload "
            "store; it was left untouched. Give the store a database (or a file) of its own."
        )
    meta = dict(cur.all(f"SELECT name, value FROM {META}"))
    if meta.get("format") != FORMAT:
        raise ConfigurationError(
            f"{where}: its {META} table is not an agent-payload store's (format "
            f"{meta.get('format')!r}); it was left untouched."
        )
    version = meta.get("format_version")
    if version != str(FORMAT_VERSION):
        raise ConfigurationError(
            f"{where} is an agent-payload store of format version {version}, and this "
            f"agent-payload reads version {FORMAT_VERSION}; it was left untouched. Use the "
            "agent-payload release that wrote it."
        )
    return False


def _create(cur: Cursor) -> None:
    for statement in SCHEMA:
        cur.run(statement)
    cur.run(
        f"INSERT INTO {META} (name, value) VALUES (?, ?), (?, ?)",
        ("format", FORMAT, "format_version", str(FORMAT_VERSION)),
    )


class Backend:
    """A database the store runs on, with one connection per thread (and per process: a child
    forked with the store open makes its own, never using its parent's), every one closed by
    ``close``; a transaction is ``BEGIN`` ... ``COMMIT`` on the thread's connection."""

    lock_row = ""
    """What follows ``SELECT ... FROM agent_payload_documents WHERE key = ?`` in a write
    transaction to lock the key's row (empty where the whole database is locked)."""
    begin_write = "BEGIN"
    placeholder = "?"
    duplicate: type[Exception]

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def connection(self) -> Any:
        if os.getpid() != self._pid:  # forked: the parent's connections are not ours to use
            self._pid, self._all, self._local = os.getpid(), [], threading.local()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
            with self._lock:
                self._all.append(conn)
        return conn

    def connect(self) -> Any:
        raise NotImplementedError

    @contextlib.contextmanager
    def transaction(self, *, write: bool) -> Iterator[Cursor]:
        conn = self.connection()
        conn.execute(self.begin_write if write else "BEGIN")
        try:
            yield Cursor(conn.execute, self.placeholder, self.duplicate)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()
        self._local = threading.local()


class SQLiteBackend(Backend):
    begin_write = "BEGIN IMMEDIATE"
    duplicate = sqlite3.IntegrityError

    def __init__(self, url: str, path: str, busy_timeout: float) -> None:
        super().__init__(url)
        self.path = path
        self.busy_timeout = busy_timeout
        self._open()

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )

    def _open(self) -> None:
        tables = "SELECT name FROM sqlite_master WHERE type = 'table'"
        try:
            # Read only: nothing is written to a database that is not ours.
            with self.transaction(write=False) as cur:
                create = _needs_schema(cur, tables, f"the SQLite database {self.path}")
        except sqlite3.DatabaseError as exc:
            self.close()
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise
            if "not a database" in str(exc):
                raise ConfigurationError(
                    f"{self.path} is not an SQLite database ({exc}); it was left untouched"
                ) from exc
            raise ConfigurationError(f"cannot open the SQLite database {self.path}: {exc}") from exc
        except ConfigurationError:
            self.close()
            raise
        if create:
            self.connection().execute("PRAGMA journal_mode=WAL")
            with self.transaction(write=True) as cur:
                if not cur.all(tables):  # another process may have created it meanwhile
                    _create(cur)


class PostgresBackend(Backend):
    lock_row = " FOR UPDATE"
    placeholder = "%s"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        try:
            import psycopg
        except ImportError as exc:
            raise ConfigurationError(
                "a postgresql:// store needs psycopg 3: pip install 'agent-payload[postgres]'"
            ) from exc
        self._psycopg = psycopg
        self.duplicate = psycopg.errors.UniqueViolation
        try:
            self._open()
        except psycopg.OperationalError as exc:
            self.close()
            raise ConfigurationError(
                f"cannot connect to the PostgreSQL store {redacted(url)}: {exc}"
            ) from exc
        except BaseException:
            self.close()
            raise

    def connect(self) -> Any:
        return self._psycopg.connect(self.url, autocommit=True)

    def _open(self) -> None:
        with self.transaction(write=True) as cur:
            # One process creates the schema; the others wait here and then find it.
            cur.run("SELECT pg_advisory_xact_lock(7212145331)")
            schema = cur.one("SELECT current_schema()")
            where = f"the PostgreSQL schema {schema[0] if schema else '?'} of {redacted(self.url)}"
            tables = (
                "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                "current_schema()"
            )
            if _needs_schema(cur, tables, where):
                _create(cur)


def redacted(url: str) -> str:
    """``url`` without its password (for messages)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def open_backend(url: str, *, busy_timeout: float = 60.0) -> Backend:
    """The backend for ``url`` (``ConfigurationError`` for one the store cannot use)."""
    if not isinstance(url, str):
        raise ConfigurationError(f"PayloadStore(url): expected a URL string, found {url!r}")
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        if not rest.startswith("/") or rest in ("/", "/:memory:"):
            raise ConfigurationError(
                f"PayloadStore({url!r}): expected sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db (a file: the store is shared between processes)"
            )
        path = urllib.parse.unquote(rest[1:].split("?", 1)[0])
        if not Path(path).parent.is_dir():
            raise ConfigurationError(
                f"PayloadStore({url!r}): the directory of {path} does not exist"
            )
        return SQLiteBackend(url, path, busy_timeout)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresBackend(url)
    raise ConfigurationError(
        f"PayloadStore({redacted(url)!r}): expected a sqlite:///path.db or postgresql://... URL"
    )
