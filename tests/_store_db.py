"""The databases the store's tests run against: an SQLite file per test, and a real PostgreSQL
server (``pgserver``: the server binaries from PyPI) started once per test process, with a
fresh database per test. A test that needs PostgreSQL is skipped only when the server cannot
start, with the reason in the skip message (shown by ``-ra``)."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest

_server: Any = None
_failure: str | None = None
_names = itertools.count()


def postgres_server() -> Any:
    """The process's PostgreSQL server (started on first use), or skip with the reason."""
    global _server, _failure
    if _server is None and _failure is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR here
                import pgserver

                root = Path(tempfile.mkdtemp(prefix="ap-pg-"))
                _server = pgserver.get_server(root / "data", cleanup_mode="delete")
            atexit.register(_stop)
        except Exception as exc:  # any reason the server cannot start
            _failure = f"{type(exc).__name__}: {exc}"
    if _server is None:
        print(f"PostgreSQL could not start: {_failure}")
        pytest.skip(f"PostgreSQL could not start: {_failure}")
    return _server


def _stop() -> None:
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _server.cleanup()


def postgres_url() -> str:
    """A fresh, empty database on the process's server, as a libpq URL with a Unix socket
    (``?host=/socket/dir``)."""
    server = postgres_server()
    import psycopg

    name = f"t{next(_names)}"
    base = server.get_uri()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    head, _, query = base.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}?{query}"


def store_url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return postgres_url()
