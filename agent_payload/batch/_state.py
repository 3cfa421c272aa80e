"""The job's state file: its SQLite schema and format version, the JSON kept in its columns
(replies, reports, problems), the records a job hands out (``BatchProgress``,
``BatchItemResult``), and ``StateFile``, every read and write of the file that is not a
judgement."""

from __future__ import annotations

import contextlib
import importlib
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent_payload import _jsontext
from agent_payload.errors import AgentPayloadError, ConfigurationError
from agent_payload.providers.base import ModelReply
from agent_payload.result import AgentResult
from agent_payload.usage import Usage

__all__ = [
    "FORMAT_VERSION",
    "SCHEMA",
    "BatchItemResult",
    "BatchProgress",
    "BatchStateError",
    "Phase",
    "StateFile",
    "Status",
    "dumps",
    "loads_payload",
    "problems_json",
    "reply_from",
    "reply_json",
    "report_json",
    "resolve_type",
    "type_name",
]

Status = Literal["pending", "done", "failed"]
Phase = Literal["prepared", "submitted", "polling", "collected", "finished"]

FORMAT_VERSION = 1

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
    problems TEXT
);
CREATE INDEX IF NOT EXISTS items_status ON items (status, in_round);
CREATE TABLE IF NOT EXISTS chunks (
    round INTEGER NOT NULL,
    chunk INTEGER NOT NULL,
    state TEXT NOT NULL,
    batch_id TEXT,
    submitting_at REAL,
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


class BatchStateError(AgentPayloadError):
    """The state file cannot be used as it is (another format, another job's model, or a
    submission whose fate the provider cannot tell unambiguously). Nothing was sent."""


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """Counts of a job, given to the ``progress`` callback and returned by ``run()``."""

    phase: Phase
    round: int
    submitted: int
    """Request lines sent so far, over all rounds."""
    done: int
    failed: int
    pending: int
    usage: Usage
    cost: float | None = None
    """Estimated cost in the currency of ``prices`` (None without prices)."""

    @property
    def total(self) -> int:
        return self.done + self.failed + self.pending


@dataclass(frozen=True, slots=True)
class BatchItemResult:
    """One item of a job: where it stands and what came of it."""

    id: str
    status: Status
    payload: Any
    """The updated payload when ``done`` (of the kind added: dict, list or pydantic model),
    else the payload as added."""
    change_request: dict[str, Any] | None
    report: dict[str, Any] | None
    """``{"changes": [{"op", "path", "old", "new"}...], "warnings": [...], "reasoning"}``."""
    attempts: int
    usage: Usage
    error: str | None
    problems: tuple[dict[str, Any], ...] = ()


def type_name(kind: type) -> str:
    return f"{kind.__module__}:{kind.__qualname__}"


def resolve_type(name: str, types: Mapping[str, type]) -> type:
    if name in types:
        return types[name]
    module, _, qualname = name.partition(":")
    try:
        node: Any = importlib.import_module(module)
        for part in qualname.split("."):
            node = getattr(node, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"BatchJob: the payload type {name} cannot be imported; define it at module level, "
            "or pass it in BatchJob(types=[...])"
        ) from exc
    if not isinstance(node, type):
        raise ConfigurationError(f"BatchJob: {name} is not a type")
    return node


def dumps(value: Any) -> str:
    """Compact JSON; numbers read from a file written as they were read (``_jsontext``)."""
    return _jsontext.dumps(value, separators=(",", ":"), literals=True, allow_nan=False)


def loads_payload(text: str) -> Any:
    """A stored payload, its numbers exactly as stored (what ``dumps`` wrote)."""
    return _jsontext.loads_file(text)


def reply_json(reply: ModelReply) -> str:
    return dumps(
        {
            "text": reply.text,
            "finish_reason": reply.finish_reason,
            "truncated": reply.truncated,
            "refusal": reply.refusal,
            "usage": [
                reply.usage.input_tokens,
                reply.usage.output_tokens,
                reply.usage.cached_input_tokens,
                reply.usage.cache_write_input_tokens,
            ],
            "model_name": reply.model_name,
        }
    )


def reply_from(text: str) -> ModelReply:
    data = json.loads(text)
    usage = data.get("usage") or [0, 0]
    n = [*(int(count) for count in usage), 0, 0]  # [input, output, cached, cache writes]
    return ModelReply(
        text=data["text"],
        finish_reason=data.get("finish_reason"),
        truncated=bool(data.get("truncated")),
        refusal=data.get("refusal"),
        usage=Usage(n[0], n[1], 1, n[2], n[3]),
        model_name=data.get("model_name", data.get("model")),  # "model": before 0.2
    )


def report_json(result: AgentResult[Any]) -> str:
    report = result.report
    return dumps(
        {
            "changes": [
                {"op": c.op, "path": list(c.path), "old": c.old, "new": c.new}
                for c in report.changes
            ],
            "warnings": [
                {"code": w.code, "path": w.path, "message": w.message} for w in report.warnings
            ],
            "reasoning": result.reasoning,
        }
    )


def problems_json(error: BaseException) -> str:
    problems = getattr(error, "problems", None) or []
    return dumps(
        [{"kind": p.kind, "code": p.code, "path": p.path, "message": p.message} for p in problems]
    )


class StateFile:
    """The job's SQLite file (WAL mode): opened or created, checked against the job's model and
    mode, and every read or write the job makes that is not a judgement."""

    def __init__(self, path: Path, model: str, mode: str) -> None:
        self.path = path
        self.mode = mode
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
            self._add_cache_columns()
        except sqlite3.DatabaseError as exc:
            raise BatchStateError(f"{self.path}: not a usable batch state file ({exc})") from exc
        self._check_meta(model)

    def _add_cache_columns(self) -> None:
        """A state file written before the cache counts existed gets their columns (0)."""
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(items)")}
        for column in ("cached_input_tokens", "cache_write_input_tokens"):
            if column not in columns:
                self.db.execute(f"ALTER TABLE items ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")

    def _check_meta(self, model: str) -> None:
        meta = dict(self.db.execute("SELECT key, value FROM meta").fetchall())
        if not meta:
            with self.tx():
                self.db.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [
                        ("format_version", str(FORMAT_VERSION)),
                        ("model", model),
                        ("mode", self.mode),
                    ],
                )
            return
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

    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    def job_tag(self) -> str:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'tag'").fetchone()
        if row:
            return str(row[0])
        tag = f"{time.time_ns():x}"
        with self.tx() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('tag', ?)", (tag,))
        return self.job_tag()

    def record_batch(self, rnd: int, chunk: int, batch_id: str) -> None:
        with self.tx() as db:
            db.execute(
                "UPDATE chunks SET state = 'submitted', batch_id = ? WHERE round = ? AND chunk = ?",
                (batch_id, rnd, chunk),
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
        """Every item in the order added."""
        cursor = self.db.execute(
            "SELECT id, status, payload, model_type, result, change_request, report, attempts, "
            "input_tokens, output_tokens, error, problems, cached_input_tokens, "
            "cache_write_input_tokens FROM items ORDER BY seq"
        )
        for row in cursor:
            (
                item_id,
                status,
                payload,
                model_type,
                result,
                request,
                report,
                attempts,
                tokens_in,
                tokens_out,
                error,
                problems,
                cached,
                written,
            ) = row
            data = loads_payload(result if result is not None else payload)
            if model_type is not None:
                data = resolve_type(model_type, types).model_validate(data)  # type: ignore[attr-defined]
            yield BatchItemResult(
                id=item_id,
                status=status,
                payload=data,
                change_request=json.loads(request) if request else None,
                report=json.loads(report) if report else None,
                attempts=attempts,
                usage=Usage(tokens_in, tokens_out, attempts, cached, written),
                error=error,
                problems=tuple(json.loads(problems)) if problems else (),
            )

    def progress(self, phase: Phase, prices: Mapping[str, float] | None) -> BatchProgress:
        """The counts now."""
        counts = dict(
            self.db.execute("SELECT status, COUNT(*) FROM items GROUP BY status").fetchall()
        )
        tokens_in, tokens_out, attempts, cached, written = self.db.execute(
            "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
            "COALESCE(SUM(attempts), 0), COALESCE(SUM(cached_input_tokens), 0), "
            "COALESCE(SUM(cache_write_input_tokens), 0) FROM items"
        ).fetchone()
        (submitted,) = self.db.execute(
            "SELECT COUNT(*) FROM requests r "
            "JOIN chunks c ON c.round = r.round AND c.chunk = r.chunk "
            "WHERE c.state != 'prepared'"
        ).fetchone()
        (rnd,) = self.db.execute("SELECT COALESCE(MAX(round), 0) FROM chunks").fetchone()
        cost = None
        if prices is not None:
            price_in = prices.get("input", 0.0)
            cost = (
                (tokens_in - cached - written) * price_in
                + cached * prices.get("cached_input", price_in)
                + written * prices.get("cache_write_input", price_in)
                + tokens_out * prices.get("output", 0.0)
            ) / 1_000_000
        return BatchProgress(
            phase=phase,
            round=rnd,
            submitted=submitted,
            done=counts.get("done", 0),
            failed=counts.get("failed", 0),
            pending=counts.get("pending", 0),
            usage=Usage(tokens_in, tokens_out, attempts, cached, written),
            cost=cost,
        )
