"""``PayloadStore``: payloads by key in SQLite or PostgreSQL, each key with its history.

Every write is one transaction that holds the key: read the current version, rebase the request
over what was applied since its base (MERGE.md section 9) or send back ``ConcurrentChangeError``,
apply, store the new version and its history entry. The history keeps each request as applied
(and as written, when rebased); the payload itself is kept at the current version and every
``SNAPSHOT_EVERY`` versions, from which an older version is rebuilt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from agent_payload._intake import prepare
from agent_payload.changes import DEFAULT_MARKERS
from agent_payload.diff import diff_payloads
from agent_payload.errors import (
    ConcurrentChangeError,
    ConfigurationError,
    PayloadValidationError,
    StalePayloadError,
    UsageError,
)
from agent_payload.merge import (
    Applied,
    apply_change_request,
    dump_payload,
    list_validation_errors,
    validation_errors,
)
from agent_payload.report import MergeResult
from agent_payload.result import AgentResult
from agent_payload.store._backends import Backend, Cursor, open_backend, redacted
from agent_payload.store._memory import rebased
from agent_payload.store._records import (
    ENTRY_FIELDS,
    EntryKind,
    HistoryEntry,
    StoredPayload,
    dumps,
    entry_from_row,
    entry_row,
    loads,
    request_json,
    resolve_type,
    type_name,
)
from agent_payload.usage import Usage

__all__ = ["SNAPSHOT_EVERY", "PayloadStore", "replay"]

SNAPSHOT_EVERY = 32  # the payload is kept whole every this many versions (and at version 1)

_DOC = "SELECT version, payload, payload_type FROM agent_payload_documents WHERE key = ?"


class PayloadStore:
    """Payloads by key in a database shared by many writers (``sqlite:///path.db`` or
    ``postgresql://...``), thread-safe; ``close()`` (or a ``with`` block) closes it.

    ``payload_types``: the types of typed keys, for a process that did not create them (a
    type is never imported by the name the database records). ``busy_timeout``: seconds an
    SQLite writer waits for another one.
    """

    def __init__(
        self, url: str, *, payload_types: Iterable[Any] = (), busy_timeout: float = 60.0
    ) -> None:
        self._types: dict[str, Any] = {type_name(t): t for t in payload_types}
        self._db: Backend = open_backend(url, busy_timeout=busy_timeout)
        self.url = url
        self._where = redacted(url)  # messages never show a password

    def __enter__(self) -> PayloadStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def __repr__(self) -> str:
        return f"PayloadStore({self._where!r})"

    # -- reading ----------------------------------------------------------------------------

    def keys(self) -> list[str]:
        with self._db.transaction(write=False) as cur:
            return [r[0] for r in cur.all("SELECT key FROM agent_payload_documents ORDER BY key")]

    def get(self, key: str) -> StoredPayload:
        """The current payload of ``key`` and its version (``UsageError`` for an unknown key)."""
        with self._db.transaction(write=False) as cur:
            version, text, type_ = self._doc(cur, key)
        return StoredPayload(key, version, loads(text), type_)

    def history(self, key: str) -> list[HistoryEntry]:
        """Every entry of ``key``, oldest first (version 1 is its creation)."""
        with self._db.transaction(write=False) as cur:
            self._doc(cur, key)
            rows = cur.all(
                f"SELECT {', '.join(ENTRY_FIELDS)} FROM agent_payload_history WHERE key = ? "
                "ORDER BY version",
                (key,),
            )
        return [entry_from_row(row) for row in rows]

    def payload_at(self, key: str, version: int) -> Any:
        """The payload of ``key`` as it was at ``version`` (rebuilt from the history)."""
        with self._db.transaction(write=False) as cur:
            current, _, _ = self._doc(cur, key)
            _check_version(key, version, current, "version")
            return self._payload_at(cur, key, version)

    def created_payload(self, key: str) -> Any:
        """The payload ``key`` was created with (replay the history from it)."""
        return self.payload_at(key, 1)

    # -- writing ----------------------------------------------------------------------------

    def create(self, key: str, payload: Any, *, payload_type: Any = None) -> StoredPayload:
        """Store ``payload`` under the new ``key`` at version 1.

        ``payload_type`` (a pydantic model class; the class of a model payload by default)
        validates it now and on every apply. What the store cannot keep exactly as JSON (a
        secret, a field with ``exclude=True``) is refused here with ``ConfigurationError``."""
        if not isinstance(key, str) or not key:
            raise UsageError(f"key: expected a non-empty string, found {key!r}")
        name = None
        if payload_type is None and isinstance(payload, BaseModel):
            payload_type = type(payload)
        data = dump_payload(payload)
        if payload_type is not None:
            name = type_name(payload_type)
            _validate(key, data, payload_type, "the payload given to create()")
            data = prepare(data, payload_type).payload  # a secret or an excluded field refused
            self._types[name] = payload_type
        text = dumps(data, "the payload")
        entry = HistoryEntry(key, 1, None, "create", None)
        now = entry.created_at.timestamp()
        with self._db.transaction(write=True) as cur:
            if cur.one(_DOC, (key,)) is not None:
                raise self._exists(key)
            if not cur.insert_new(
                "INSERT INTO agent_payload_documents (key, version, payload, payload_type, "
                "created_at, updated_at) VALUES (?, 1, ?, ?, ?, ?)",
                (key, text, name, now, now),
            ):
                raise self._exists(key)
            self._insert_entry(cur, entry, text)
        return StoredPayload(key, 1, data, name, entry)

    def apply(
        self,
        key: str,
        change_request: Any,
        *,
        base_version: int,
        reasoning: str | None = None,
        run_id: str | None = None,
        model_name: str | None = None,
        usage: Usage | None = None,
        markers: Iterable[str] = DEFAULT_MARKERS,
    ) -> StoredPayload:
        """Apply ``change_request``, written against ``base_version`` of ``key``, in one
        transaction: rebased over what was applied since, merged strictly, validated with the
        key's type, stored as the next version with its history entry. Returns the new version.

        Raises ``ConcurrentChangeError`` (``current`` and ``version`` set) when it collides
        with what was applied since its base, ``MergeConflictError``,
        ``PayloadValidationError`` when the result does not fit the key's type,
        ``StalePayloadError`` for a version the key never had; the store is then unchanged."""
        markers = frozenset(markers)
        written = request_json(change_request)
        with self._db.transaction(write=True) as cur:
            current, text, type_ = self._doc(cur, key, lock=True)
            _check_version(key, base_version, current, "base_version")
            payload = loads(text)
            request: Any = written
            if base_version != current:
                base = self._payload_at(cur, key, base_version)
                since = [Applied(r, m) for r, m in self._requests(cur, key, base_version, current)]
                request = rebased(base, since, written, markers, (payload, current))
            result = apply_change_request(
                payload, request, strict=True, markers=markers, share=True
            )
            if type_ is not None:
                _validate(key, result.payload, resolve_type(type_, self._types, key), "the result")
            return self._commit(
                cur,
                (key, current, type_),
                "apply",
                request,
                result,
                base_version=base_version,
                written=written if base_version != current else None,
                markers=markers,
                reasoning=reasoning,
                run_id=run_id,
                model_name=model_name,
                usage=usage,
            )

    def revert(
        self, key: str, version: int, *, reasoning: str | None = None, run_id: str | None = None
    ) -> StoredPayload:
        """Restore the payload ``key`` had at ``version``, as a new entry (the history is never
        rewritten): its change request turns the current payload into that one."""
        with self._db.transaction(write=True) as cur:
            current, text, type_ = self._doc(cur, key, lock=True)
            _check_version(key, version, current, "version")
            payload = loads(text)
            target = self._payload_at(cur, key, version)
            request = diff_payloads(payload, target, reasoning=reasoning)
            result = apply_change_request(payload, request, strict=True, share=True)
            return self._commit(
                cur,
                (key, current, type_),
                "revert",
                request,
                result,
                base_version=current,
                markers=DEFAULT_MARKERS,
                reasoning=reasoning or f"revert to version {version}",
                run_id=run_id,
                reverted_to=version,
            )

    # -- an agent's edit -------------------------------------------------------------------

    def edit(self, key: str, agent: Any, task: str, **run_options: Any) -> AgentResult[Any]:
        """Run ``agent`` (a ``PayloadAgent``) on the current payload of ``key`` and apply its
        accepted change request inside the run: a collision with an edit committed meanwhile
        goes back to the model as a correction, within the agent's retries. Returns the
        ``AgentResult`` (its ``payload`` as stored). ``run_options`` go to ``agent.run``.
        ``AsyncPayloadAgent``: ``await store.aedit(...)``."""
        if inspect.iscoroutinefunction(getattr(agent, "run", None)):
            raise ConfigurationError(
                "PayloadStore.edit: this agent's run() is async; use await store.aedit(...)"
            )
        payload, commit = self._edit(key, agent, run_options)
        result: AgentResult[Any] = agent.run(payload, task, commit=commit, **run_options)
        return result

    async def aedit(self, key: str, agent: Any, task: str, **run_options: Any) -> AgentResult[Any]:
        """``edit`` for an ``AsyncPayloadAgent`` (the database calls run in a worker thread)."""
        if not inspect.iscoroutinefunction(getattr(agent, "run", None)):
            raise ConfigurationError(
                "PayloadStore.aedit: this agent's run() is not async; use store.edit(...)"
            )
        payload, commit = await asyncio.to_thread(self._edit, key, agent, run_options)

        async def acommit(result: AgentResult[Any]) -> AgentResult[Any]:
            return await asyncio.to_thread(commit, result)

        result: AgentResult[Any] = await agent.run(payload, task, commit=acommit, **run_options)
        return result

    def _edit(
        self, key: str, agent: Any, run_options: dict[str, Any]
    ) -> tuple[Any, Callable[[AgentResult[Any]], AgentResult[Any]]]:
        """The payload to run on, and the commit that applies the run's result at the version
        the run judges against (moved on by every collision)."""
        if "commit" in run_options:
            raise ConfigurationError("PayloadStore.edit: commit= is the store's own")
        doc = self.get(key)
        if doc.payload_type is not None:
            run_options.setdefault("payload_type", resolve_type(doc.payload_type, self._types, key))
        read = [doc.version]
        model_name = getattr(getattr(agent, "model", None), "model_name", None)

        def commit(result: AgentResult[Any]) -> AgentResult[Any]:
            try:
                stored = self.apply(
                    key,
                    result.change_request,
                    base_version=read[0],
                    reasoning=result.reasoning,
                    run_id=result.run_id or None,
                    model_name=model_name if isinstance(model_name, str) else None,
                    usage=result.usage,
                    markers=(result.marker,),
                )
            except ConcurrentChangeError as exc:
                read[0] = exc.version
                raise
            return dataclasses.replace(result, payload=stored.payload)

        return doc.payload, commit

    # -- the parts --------------------------------------------------------------------------

    def _exists(self, key: str) -> UsageError:
        return UsageError(
            f"key {key!r} already exists in {self._where}; apply changes to it, or choose another "
            "key"
        )

    def _doc(self, cur: Cursor, key: str, *, lock: bool = False) -> tuple[int, str, str | None]:
        row = cur.one(_DOC + (self._db.lock_row if lock else ""), (key,))
        if row is None:
            raise UsageError(f"key {key!r} does not exist in {self._where}; create() it first")
        return int(row[0]), row[1], row[2]

    def _payload_at(self, cur: Cursor, key: str, version: int) -> Any:
        row = cur.one(
            "SELECT version, snapshot FROM agent_payload_history WHERE key = ? AND version <= ? "
            "AND snapshot IS NOT NULL ORDER BY version DESC LIMIT 1",
            (key, version),
        )
        assert row is not None  # version 1 always holds one
        payload = loads(row[1])
        for request, markers in self._requests(cur, key, int(row[0]), version):
            payload = apply_change_request(
                payload, request, strict=True, markers=markers, share=True
            ).payload
        return payload

    def _requests(
        self, cur: Cursor, key: str, after: int, upto: int
    ) -> list[tuple[Any, frozenset[str]]]:
        """The requests (as applied) of the versions after ``after`` up to ``upto``."""
        rows = cur.all(
            "SELECT change_request, markers FROM agent_payload_history WHERE key = ? "
            "AND version > ? AND version <= ? ORDER BY version",
            (key, after, upto),
        )
        return [(loads(r[0]), frozenset(loads(r[1]))) for r in rows]

    def _commit(
        self,
        cur: Cursor,
        doc: tuple[str, int, str | None],
        kind: EntryKind,
        request: Any,
        result: MergeResult[Any],
        *,
        markers: Iterable[str],
        **fields: Any,
    ) -> StoredPayload:
        """Store ``result`` as the next version of the key (``doc``: key, current version,
        type) with its history entry."""
        key, current, type_ = doc
        request = request_json(request)
        markers = tuple(sorted(markers))
        entry = HistoryEntry(key, current + 1, current, kind, request, markers=markers, **fields)
        text = dumps(result.payload, "the result")
        self._insert_entry(cur, entry, text if entry.version % SNAPSHOT_EVERY == 0 else None)
        cur.run(
            "UPDATE agent_payload_documents SET version = ?, payload = ?, updated_at = ? "
            "WHERE key = ?",
            (entry.version, text, entry.created_at.timestamp(), key),
        )
        return StoredPayload(key, entry.version, result.payload, type_, entry, result.report)

    @staticmethod
    def _insert_entry(cur: Cursor, entry: HistoryEntry, snapshot: str | None) -> None:
        row = {**entry_row(entry), "snapshot": snapshot}
        cur.run(
            f"INSERT INTO agent_payload_history ({', '.join(row)}) "
            f"VALUES ({', '.join('?' * len(row))})",
            tuple(row.values()),
        )


def _check_version(key: str, version: Any, current: int, what: str) -> None:
    if isinstance(version, bool) or not isinstance(version, int):
        raise UsageError(
            f"{what}: expected the int version read with get({key!r}), found {version!r}"
        )
    if not 1 <= version <= current:
        raise StalePayloadError(
            f"{what} {version}: key {key!r} has versions 1 to {current}; nothing was applied. "
            "Read it again with get() and write the change against that version.",
            expected=str(version),
            actual=str(current),
        )


def _validate(key: str, data: Any, payload_type: Any, what: str) -> None:
    if isinstance(payload_type, dict):
        return
    try:
        TypeAdapter(payload_type).validate_python(data)
    except ValidationError as exc:
        errors = validation_errors(exc, data)
        name = getattr(payload_type, "__name__", str(payload_type))
        raise PayloadValidationError(
            f"key {key!r}: {what} does not validate as {name}: "
            f"{list_validation_errors(errors)}; nothing was stored",
            errors=errors,
            payload=data,
        ) from exc


def replay(created: Any, entries: Sequence[HistoryEntry]) -> Any:
    """The payload after ``entries`` (those after version 1), applied from ``created``."""
    payload = created
    for entry in entries:
        if entry.kind == "create":
            continue
        payload = apply_change_request(
            payload, entry.change_request, strict=True, markers=entry.markers or DEFAULT_MARKERS
        ).payload
    return payload
