"""Batch jobs: thousands of payloads through the providers' batch APIs, resumable from one file.

::

    job = BatchJob(PayloadAgent(openai.OpenAI(), model_name="gpt-5.4-mini"), "job.sqlite")
    job.add_many({"id": sku, "payload": entry, "task": "raise prices by 5%"} for ...)
    job.run(poll_interval=30)
    for item in job.results():
        ...  # item.id, item.status ("done" | "failed" | "pending"), item.payload, ...

**Rounds.** A round sends the next request of every pending item: in ``mode="batch"`` as
provider batches (OpenAI Files + Batch API for Chat Completions or Responses; Anthropic
Message Batches), split at the provider's limits on count and bytes; in ``mode="concurrent"``
(servers with no batch API: vLLM, Ollama, a LiteLLM proxy) through the async agent's model,
``concurrency`` at a time. Each reply is judged by the agent's own pipeline, exactly as
``PayloadAgent.run`` judges it (``_loop.RunState``): an accepted reply makes the item ``done``;
a reply that needs a correction sends the item to the next round with exactly the message the
agent would send; an item out of retries (``max_retries`` of the agent), out of its token
budget, or refused twice is ``failed`` with the last problems. A request that got no reply at
all (a batch error line, an expired or failed batch, a provider error in concurrent mode) is a
transport failure: retried in the next round up to ``max_transport_retries`` times, then
``failed`` with the provider's error. Transport failures do not count as model attempts.

**The state file is the only truth** (SQLite, WAL mode): items, every request line with its
round and chunk, every raw reply, results. Each step is one transaction, so the process may be
killed at any moment and ``run()`` called again:

* a round is prepared (its request lines written) in one transaction before anything is sent;
* before a chunk is submitted its state becomes ``submitting`` with the time; once the provider
  answers, the batch id is recorded. If the job died in between, the next ``run()`` looks for
  the batch by its tag (OpenAI: the batch's ``metadata``; Anthropic: created since that time
  with exactly that many requests) and adopts it instead of submitting again; if several
  batches could be it, ``BatchStateError`` says so rather than guess;
* a reply is stored and judged in one transaction, at most once per request line: re-reading a
  batch's results after a crash skips the lines already applied.

In concurrent mode a request that was in flight when the process died has no stored reply; it
is sent again on resume (its answer was never received, so nothing of it was applied).

**Progress.** ``run(progress=callback)`` calls ``callback(BatchProgress)`` after each step
(``phase``: ``prepared``, ``submitted``, ``polling``, ``collected``, ``finished``) with the
counts and tokens so far and the estimated cost when ``prices`` are given. Raising from the
callback stops ``run()`` at that point; the state file stays consistent.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from agent_payload import merge as _merge
from agent_payload._loop import AgentResult, RunState
from agent_payload.errors import (
    AgentPayloadError,
    ConfigurationError,
    ModelReplyError,
    ProviderError,
    UsageError,
)
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.providers.batching import BatchBackend, LineError, backend_for
from agent_payload.usage import Usage

__all__ = ["BatchItemResult", "BatchJob", "BatchProgress", "BatchStateError"]

Status = Literal["pending", "done", "failed"]
Phase = Literal["prepared", "submitted", "polling", "collected", "finished"]

FORMAT_VERSION = 1

_SCHEMA = """
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


def _type_name(kind: type) -> str:
    return f"{kind.__module__}:{kind.__qualname__}"


def _resolve_type(name: str, types: Mapping[str, type]) -> type:
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


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _reply_json(reply: ModelReply) -> str:
    return _dumps(
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


def _reply_from(text: str) -> ModelReply:
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


def _report_json(result: AgentResult[Any]) -> str:
    report = result.report
    return _dumps(
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


def _problems_json(error: BaseException) -> str:
    problems = getattr(error, "problems", None) or []
    return _dumps(
        [{"kind": p.kind, "code": p.code, "path": p.path, "message": p.message} for p in problems]
    )


class BatchJob:
    """A resumable job of many (payload, task) items; see the module docstring.

    ``agent``: a ``PayloadAgent`` whose model is an OpenAI or Anthropic adapter on a sync client
    (``mode="batch"``), or an ``AsyncPayloadAgent`` (``mode="concurrent"``). Its ``max_retries``
    (an int) is each item's correction budget, its guards, validators, read scope and output mode
    apply to every item. ``state_path``: the SQLite file (created if missing; reopened to
    resume). ``types``: payload types to resolve by name on resume (by default they are imported
    by module and qualified name). ``prices``: ``{"input": ..., "output": ...}`` per million
    tokens, for the progress's cost estimate (batch prices, which the providers halve);
    ``"cached_input"`` and ``"cache_write_input"`` price the input read from and written to the
    prompt cache (the ``"input"`` price when not given).
    ``max_batch_requests`` / ``max_batch_bytes`` lower the provider's limits per batch.
    """

    def __init__(
        self,
        agent: Any,
        state_path: str | Path,
        *,
        mode: Literal["batch", "concurrent"] = "batch",
        concurrency: int = 32,
        max_transport_retries: int = 2,
        max_batch_requests: int | None = None,
        max_batch_bytes: int | None = None,
        types: Iterable[type] = (),
        prices: Mapping[str, float] | None = None,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        if mode not in ("batch", "concurrent"):
            raise ConfigurationError(f"mode: expected 'batch' or 'concurrent', found {mode!r}")
        retries = getattr(agent, "max_retries", None)
        if isinstance(retries, bool) or not isinstance(retries, int):
            raise ConfigurationError(
                "BatchJob(agent): expected a PayloadAgent or AsyncPayloadAgent whose max_retries "
                f"is an int (each item's correction budget), found {type(agent).__name__} with "
                f"max_retries={retries!r}"
            )
        for name, value, low in (
            ("concurrency", concurrency, 1),
            ("max_transport_retries", max_transport_retries, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(f"{name}: expected an int >= {low}, found {value!r}")
        self.agent = agent
        self.mode = mode
        self.concurrency = concurrency
        self.max_transport_retries = max_transport_retries
        self.max_attempts = retries + 1
        self.prices = dict(prices) if prices else None
        self._sleep = sleep
        self._types = {_type_name(t): t for t in types}
        model = agent.model
        self._backend: BatchBackend | None = None
        if mode == "batch":
            self._backend = backend_for(model)
            if getattr(model, "is_async", False):
                raise ConfigurationError(
                    "BatchJob(mode='batch'): the agent's model wraps an async SDK client; the "
                    "batch APIs are driven from a sync client (openai.OpenAI / anthropic.Anthropic)"
                )
            self._max_requests = min(max_batch_requests or 10**9, self._backend.max_requests)
            self._max_bytes = min(max_batch_bytes or 10**12, self._backend.max_bytes)
        else:
            self._max_requests, self._max_bytes = 10**12, 10**15  # one chunk a round
        if mode == "concurrent" and (
            not callable(getattr(model, "arequest", None))
            or not getattr(agent, "_async_client", False)
        ):
            raise ConfigurationError(
                "BatchJob(mode='concurrent'): expected an AsyncPayloadAgent (its model's "
                f"arequest() sends the requests), found {type(agent).__name__}"
            )
        self.path = Path(state_path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._add_cache_columns()
        except sqlite3.DatabaseError as exc:
            raise BatchStateError(f"{self.path}: not a usable batch state file ({exc})") from exc
        self._check_meta(f"{model.provider}:{model.model_name}")

    # -- the file --

    def _add_cache_columns(self) -> None:
        """A state file written before the cache counts existed gets their columns (0)."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(items)")}
        for column in ("cached_input_tokens", "cache_write_input_tokens"):
            if column not in columns:
                self._db.execute(
                    f"ALTER TABLE items ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
                )

    def _check_meta(self, model: str) -> None:
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if not meta:
            with self._tx():
                self._db.executemany(
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
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> BatchJob:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- adding items --

    def add(self, item_id: str, payload: Any, task: str, *, payload_type: Any = None) -> bool:
        """Add one item (idempotent by ``item_id``: an id already in the job is left as it is
        and ``False`` returned). The payload is checked now (``InvalidPayloadError``)."""
        return self.add_many([(item_id, payload, task, payload_type)]) == 1

    def add_many(self, items: Iterable[Any]) -> int:
        """Add items given as ``(id, payload, task)`` / ``(id, payload, task, payload_type)``
        tuples or ``{"id", "payload", "task", "payload_type"?}`` dicts, in one transaction;
        returns how many were new."""
        rows = []
        for item in items:
            if isinstance(item, Mapping):
                missing = {"id", "payload", "task"} - set(item)
                if missing:
                    raise UsageError(f"add_many: an item lacks {sorted(missing)}: {item!r:.200}")
                item_id, payload, task = item["id"], item["payload"], item["task"]
                payload_type = item.get("payload_type")
            else:
                item_id, payload, task, *rest = item
                payload_type = rest[0] if rest else None
            rows.append(self._row(item_id, payload, task, payload_type))
        with self._tx() as db:
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO items (id, payload, task, model_type, payload_type) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            return db.total_changes - before

    def _row(self, item_id: Any, payload: Any, task: Any, payload_type: Any) -> tuple[Any, ...]:
        if not isinstance(item_id, str) or not item_id:
            raise UsageError(f"item id: expected a non-empty string, found {item_id!r}")
        if not isinstance(task, str) or not task.strip():
            raise UsageError(f"item {item_id}: task must be a non-empty string, found {task!r}")
        data = _merge.dump_payload(payload)
        model_type = _type_name(type(payload)) if isinstance(payload, BaseModel) else None
        type_name = None
        if payload_type is not None:
            if not isinstance(payload_type, type):
                raise ConfigurationError(
                    f"item {item_id}: payload_type must be a type, found {payload_type!r}"
                )
            type_name = _type_name(payload_type)
        for name in filter(None, (model_type, type_name)):
            kind = payload_type if name == type_name else type(payload)
            self._types.setdefault(name, kind)
        return (item_id, _dumps(data), task, model_type, type_name)

    # -- reading --

    def results(self) -> Iterator[BatchItemResult]:
        """Every item in the order added."""
        cursor = self._db.execute(
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
            data = json.loads(result if result is not None else payload)
            if model_type is not None:
                data = _resolve_type(model_type, self._types).model_validate(data)  # type: ignore[attr-defined]
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

    def progress(self, phase: Phase = "finished") -> BatchProgress:
        """The counts now."""
        counts = dict(
            self._db.execute("SELECT status, COUNT(*) FROM items GROUP BY status").fetchall()
        )
        tokens_in, tokens_out, attempts, cached, written = self._db.execute(
            "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
            "COALESCE(SUM(attempts), 0), COALESCE(SUM(cached_input_tokens), 0), "
            "COALESCE(SUM(cache_write_input_tokens), 0) FROM items"
        ).fetchone()
        (submitted,) = self._db.execute(
            "SELECT COUNT(*) FROM requests r "
            "JOIN chunks c ON c.round = r.round AND c.chunk = r.chunk "
            "WHERE c.state != 'prepared'"
        ).fetchone()
        (rnd,) = self._db.execute("SELECT COALESCE(MAX(round), 0) FROM chunks").fetchone()
        cost = None
        if self.prices is not None:
            price_in = self.prices.get("input", 0.0)
            cost = (
                (tokens_in - cached - written) * price_in
                + cached * self.prices.get("cached_input", price_in)
                + written * self.prices.get("cache_write_input", price_in)
                + tokens_out * self.prices.get("output", 0.0)
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

    # -- the judge, rebuilt from the state file --

    def _state(self, seq: int) -> RunState:
        """The item's run state: started afresh and fed every stored reply (deterministic:
        the same judge, the same replies, the same corrections)."""
        payload_text, task, model_type, type_name = self._db.execute(
            "SELECT payload, task, model_type, payload_type FROM items WHERE seq = ?", (seq,)
        ).fetchone()
        payload: Any = json.loads(payload_text)
        if model_type is not None:
            payload = _resolve_type(model_type, self._types).model_validate(payload)  # type: ignore[attr-defined]
        payload_type = _resolve_type(type_name, self._types) if type_name else None
        state: RunState = self.agent._start(payload, task, payload_type, (), None)
        for (reply_text,) in self._db.execute(
            "SELECT reply FROM replies WHERE item_seq = ? ORDER BY attempt", (seq,)
        ).fetchall():
            state.next_request()
            with contextlib.suppress(ModelReplyError):
                state.judge(_reply_from(reply_text))
        return state

    def _apply_reply(self, seq: int, reply: ModelReply, rnd: int) -> None:
        """Store and judge one reply (inside the caller's transaction)."""
        state = self._state(seq)
        state.next_request()
        self._db.execute(
            "INSERT INTO replies VALUES (?, ?, ?, ?)", (seq, state.attempt, rnd, _reply_json(reply))
        )
        try:
            result = state.judge(reply)
        except ModelReplyError as exc:
            if (
                state.should_retry(exc)
                and state.attempt < self.max_attempts
                and not state.over_budget()
            ):
                self._set(seq, state, status="pending", error=None, problems=_problems_json(exc))
            else:
                final = exc if not state.should_retry(exc) else state.exhausted()
                self._set(
                    seq, state, status="failed", error=str(final), problems=_problems_json(final)
                )
            return
        except AgentPayloadError as exc:
            self._set(seq, state, status="failed", error=str(exc), problems=_problems_json(exc))
            return
        self._db.execute(
            "UPDATE items SET result = ?, change_request = ?, report = ? WHERE seq = ?",
            (
                _dumps(_merge.dump_payload(result.payload)),
                _dumps(result.change_request.to_wire()),
                _report_json(result),
                seq,
            ),
        )
        self._set(seq, state, status="done", error=None, problems=None)

    def _set(
        self, seq: int, state: RunState, *, status: Status, error: str | None, problems: str | None
    ) -> None:
        self._db.execute(
            "UPDATE items SET status = ?, in_round = NULL, attempts = ?, input_tokens = ?, "
            "output_tokens = ?, cached_input_tokens = ?, cache_write_input_tokens = ?, "
            "error = ?, problems = ? WHERE seq = ?",
            (
                status,
                state.attempt,
                state.usage.input_tokens,
                state.usage.output_tokens,
                state.usage.cached_input_tokens,
                state.usage.cache_write_input_tokens,
                error,
                problems,
                seq,
            ),
        )

    def _transport_failure(self, seq: int, message: str) -> None:
        (failures,) = self._db.execute(
            "SELECT transport_failures FROM items WHERE seq = ?", (seq,)
        ).fetchone()
        failures += 1
        if failures > self.max_transport_retries:
            self._db.execute(
                "UPDATE items SET status = 'failed', in_round = NULL, transport_failures = ?, "
                "error = ? WHERE seq = ?",
                (failures, f"provider error after {failures} tries: {message}", seq),
            )
        else:
            self._db.execute(
                "UPDATE items SET in_round = NULL, transport_failures = ? WHERE seq = ?",
                (failures, seq),
            )

    # -- rounds --

    def _open_round(self) -> int | None:
        row = self._db.execute(
            "SELECT MIN(round) FROM chunks WHERE state != 'collected'"
        ).fetchone()
        return row[0] if row and row[0] is not None else None

    def _prepare_round(self) -> int | None:
        """Write the next round's request lines, in one transaction but one item at a time
        (memory does not grow with the job); None when nothing is pending."""
        pending = [
            seq
            for (seq,) in self._db.execute(
                "SELECT seq FROM items WHERE status = 'pending' AND in_round IS NULL ORDER BY seq"
            ).fetchall()
        ]
        if not pending:
            return None
        (last,) = self._db.execute("SELECT COALESCE(MAX(round), 0) FROM chunks").fetchone()
        rnd = last + 1
        chunk, count, size = -1, 0, 0
        with self._tx() as db:
            for seq in pending:
                try:
                    state = self._state(seq)
                except AgentPayloadError as exc:  # refused before any request (payload, limits)
                    db.execute(
                        "UPDATE items SET status = 'failed', error = ?, problems = ? WHERE seq = ?",
                        (str(exc), _problems_json(exc), seq),
                    )
                    continue
                custom_id = f"i{seq}-r{rnd}"
                entry = _dumps(self._entry(custom_id, state.next_request()))
                cost = len(entry.encode()) + 1
                if chunk < 0 or count >= self._max_requests or size + cost > self._max_bytes:
                    chunk, count, size = chunk + 1, 0, 0
                    db.execute(
                        "INSERT INTO chunks (round, chunk, state) VALUES (?, ?, 'prepared')",
                        (rnd, chunk),
                    )
                count, size = count + 1, size + cost
                db.execute(
                    "INSERT INTO requests (custom_id, round, chunk, item_seq, entry) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (custom_id, rnd, chunk, seq, entry),
                )
                db.execute("UPDATE items SET in_round = ? WHERE seq = ?", (rnd, seq))
        return rnd if chunk >= 0 else self._prepare_round()

    def _entry(self, custom_id: str, request: ModelRequest) -> dict[str, Any]:
        if self._backend is not None:
            return self._backend.entry(custom_id, request)
        return {"custom_id": custom_id}

    # -- running --

    def run(
        self,
        *,
        poll_interval: float = 30.0,
        max_rounds: int | None = None,
        progress: Callable[[BatchProgress], Any] | None = None,
    ) -> BatchProgress:
        """Run rounds until no item is pending (or ``max_rounds`` more rounds were run);
        resumes whatever a previous ``run()`` left. Returns the final counts.

        In ``mode="concurrent"`` this runs an event loop of its own (``asyncio.run``) for
        synchronous scripts; the async client's connections belong to that loop, so give the
        job a client of its own. From async code, ``await job.arun()`` instead."""
        if self.mode == "concurrent":
            return asyncio.run(self.arun(max_rounds=max_rounds, progress=progress))
        for rnd in self._rounds(max_rounds, progress):
            self._submit_round(rnd, progress)
            self._wait_round(rnd, poll_interval, progress)
            self._collect_round(rnd, progress)
        return self._finish(progress)

    def _rounds(
        self, max_rounds: int | None, progress: Callable[[BatchProgress], Any] | None
    ) -> Iterator[int]:
        """The rounds to run: first one a previous run left open, then new ones while items
        are pending (at most ``max_rounds`` new ones)."""
        started = 0
        while True:
            rnd = self._open_round()
            if rnd is None:
                if max_rounds is not None and started >= max_rounds:
                    return
                rnd = self._prepare_round()
                if rnd is None:
                    return
                started += 1
                self._report(progress, "prepared")
            yield rnd

    def _finish(self, progress: Callable[[BatchProgress], Any] | None) -> BatchProgress:
        final = self.progress("finished")
        if progress is not None:
            progress(final)
        return final

    def _report(self, progress: Callable[[BatchProgress], Any] | None, phase: Phase) -> None:
        if progress is not None:
            progress(self.progress(phase))

    def _chunks(self, rnd: int, *states: str) -> list[tuple[int, str, str | None, float | None]]:
        marks = ",".join("?" * len(states))
        return self._db.execute(
            f"SELECT chunk, state, batch_id, submitting_at FROM chunks WHERE round = ? "
            f"AND state IN ({marks}) ORDER BY chunk",
            (rnd, *states),
        ).fetchall()

    def _submit_round(self, rnd: int, progress: Callable[[BatchProgress], Any] | None) -> None:
        backend = self._backend
        assert backend is not None
        for chunk, state, _, since in self._chunks(rnd, "prepared", "submitting"):
            tag = f"{self.path.stem}-{self._job_tag()}-r{rnd}c{chunk}"
            entries = [
                entry
                for (entry,) in self._db.execute(
                    "SELECT entry FROM requests WHERE round = ? AND chunk = ? ORDER BY custom_id",
                    (rnd, chunk),
                ).fetchall()
            ]
            if state == "submitting" and since is not None:
                # The job stopped between asking for this batch and hearing of it.
                found = self._find(backend, rnd, chunk, tag, len(entries), since)
                if found is not None:
                    self._record_batch(rnd, chunk, found)
                    continue
            now = time.time()
            with self._tx() as db:
                db.execute(
                    "UPDATE chunks SET state = 'submitting', submitting_at = ? "
                    "WHERE round = ? AND chunk = ?",
                    (now, rnd, chunk),
                )
            try:
                batch_id = backend.submit(entries, tag=tag)
            except ProviderError:
                # The answer was lost, or the create failed: the batch may exist or not.
                found = self._find(backend, rnd, chunk, tag, len(entries), now)
                if found is None:
                    raise  # not created: the next run() submits it (state 'submitting')
                batch_id = found
            self._record_batch(rnd, chunk, batch_id)
            self._report(progress, "submitted")

    def _find(
        self, backend: BatchBackend, rnd: int, chunk: int, tag: str, count: int, since: float
    ) -> str | None:
        """The provider batch a chunk left ``submitting`` became, None if none was created;
        ``BatchStateError`` when more than one could be it (never guess)."""
        claimed = {
            b for (b,) in self._db.execute("SELECT batch_id FROM chunks WHERE batch_id IS NOT NULL")
        }
        found = [b for b in backend.find(tag, count=count, since=since) if b not in claimed]
        if len(found) > 1:
            raise BatchStateError(
                f"{self.path}: round {rnd}, chunk {chunk} was being submitted when the job "
                f"stopped, and {len(found)} provider batches ({', '.join(found)}) could be it. "
                "Cancel the ones that are not, or record the right one with adopt_batch(), then "
                "run again; nothing was submitted twice"
            )
        return found[0] if found else None

    def adopt_batch(self, round: int, chunk: int, batch_id: str) -> None:
        """Record by hand which provider batch a chunk left ``submitting`` is (see run())."""
        self._record_batch(round, chunk, batch_id)

    def _record_batch(self, rnd: int, chunk: int, batch_id: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE chunks SET state = 'submitted', batch_id = ? WHERE round = ? AND chunk = ?",
                (batch_id, rnd, chunk),
            )

    def _job_tag(self) -> str:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'tag'").fetchone()
        if row:
            return str(row[0])
        tag = f"{time.time_ns():x}"
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('tag', ?)", (tag,))
        return self._job_tag()

    def _wait_round(
        self, rnd: int, poll_interval: float, progress: Callable[[BatchProgress], Any] | None
    ) -> None:
        backend = self._backend
        assert backend is not None
        while True:
            waiting = self._chunks(rnd, "submitted")
            if not waiting:
                return
            for chunk, _, batch_id, _ in waiting:
                assert batch_id is not None
                status = backend.poll(batch_id)
                if status.ended:
                    with self._tx() as db:
                        db.execute(
                            "UPDATE chunks SET state = 'ended' WHERE round = ? AND chunk = ?",
                            (rnd, chunk),
                        )
            if self._chunks(rnd, "submitted"):
                self._report(progress, "polling")
                self._sleep(poll_interval)

    def _collect_round(self, rnd: int, progress: Callable[[BatchProgress], Any] | None) -> None:
        backend = self._backend
        assert backend is not None
        request = ModelRequest(messages=(), output_mode=self.agent.output_mode)
        for chunk, _, batch_id, _ in self._chunks(rnd, "ended"):
            assert batch_id is not None
            seen: set[str] = set()
            for custom_id, outcome in backend.results(batch_id, request):
                seen.add(custom_id)
                self._collect_line(custom_id, outcome, rnd)
            with self._tx() as db:
                for seq, custom_id in db.execute(
                    "SELECT item_seq, custom_id FROM requests "
                    "WHERE round = ? AND chunk = ? AND state = 'open'",
                    (rnd, chunk),
                ).fetchall():
                    reason = "the batch ended without a result for this request"
                    self._transport_failure(seq, f"{reason} (batch {batch_id})")
                    db.execute(
                        "UPDATE requests SET state = 'lost' WHERE custom_id = ?", (custom_id,)
                    )
                db.execute(
                    "UPDATE chunks SET state = 'collected' WHERE round = ? AND chunk = ?",
                    (rnd, chunk),
                )
            self._report(progress, "collected")

    def _collect_line(self, custom_id: str, outcome: ModelReply | LineError, rnd: int) -> None:
        with self._tx() as db:
            row = db.execute(
                "SELECT item_seq, state FROM requests WHERE custom_id = ?", (custom_id,)
            ).fetchone()
            if row is None or row[1] != "open":
                return  # not ours, or already applied before a crash
            seq = row[0]
            if isinstance(outcome, LineError):
                detail = outcome.message
                if outcome.status_code is not None:
                    detail = f"HTTP {outcome.status_code}: {detail}"
                self._transport_failure(seq, detail)
                state = "error"
            else:
                self._apply_reply(seq, outcome, rnd)
                state = "answered"
            db.execute("UPDATE requests SET state = ? WHERE custom_id = ?", (state, custom_id))

    # -- concurrent mode --

    async def arun(
        self,
        *,
        max_rounds: int | None = None,
        progress: Callable[[BatchProgress], Any] | None = None,
    ) -> BatchProgress:
        """``run()`` for ``mode="concurrent"`` inside a running event loop."""
        if self.mode != "concurrent":
            raise ConfigurationError("arun() drives mode='concurrent'; use run() for batch mode")
        for rnd in self._rounds(max_rounds, progress):
            await self._send_round(rnd, progress)
        return self._finish(progress)

    async def _send_round(self, rnd: int, progress: Callable[[BatchProgress], Any] | None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE chunks SET state = 'submitted' WHERE round = ? AND state = 'prepared'",
                (rnd,),
            )
        open_lines = self._db.execute(
            "SELECT custom_id, item_seq FROM requests "
            "WHERE round = ? AND state = 'open' ORDER BY custom_id",
            (rnd,),
        ).fetchall()
        gate = asyncio.Semaphore(self.concurrency)
        model = self.agent.model
        stopping = False  # set when a step raised: no new request starts after that
        every = max(1, len(open_lines) // 100)  # progress at most ~100 times a round
        answered = 0

        async def send(custom_id: str, seq: int) -> None:
            nonlocal stopping
            async with gate:
                if stopping:
                    return
                request = self._state(seq).next_request()
                try:
                    reply: ModelReply | LineError = await model.arequest(request)
                except ProviderError as exc:
                    reply = LineError(str(exc), status_code=exc.status_code)
                try:
                    self._collect_line(custom_id, reply, rnd)
                    nonlocal answered
                    answered += 1
                    if answered % every == 0 or answered == len(open_lines):
                        self._report(progress, "collected")
                except BaseException:
                    stopping = True
                    raise

        tasks = [asyncio.ensure_future(send(cid, seq)) for cid, seq in open_lines]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        with self._tx() as db:
            db.execute("UPDATE chunks SET state = 'collected' WHERE round = ?", (rnd,))
