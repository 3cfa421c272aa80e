"""``BatchJob``: the rounds of a job (prepare, submit, wait, collect; or send concurrently) and
the judging of each reply by the agent's own run state. The state file is ``_state``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from agent_payload import merge as _merge
from agent_payload._jsontext import compact, loads_file
from agent_payload._loop import RunState
from agent_payload.batch._records import (
    BatchItemResult,
    BatchProgress,
    Phase,
    problems_json,
    reply_from,
    reply_json,
    report_json,
    resolve_type,
    type_name,
)
from agent_payload.batch._state import USAGE_COLUMNS, BatchStateError, StateFile
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

__all__ = ["BatchJob"]


def _failed(error: BaseException) -> dict[str, Any]:
    """An item's columns once the model (or its payload) failed it."""
    problems = problems_json(error)
    return {"status": "failed", "failure": "model", "error": str(error), "problems": problems}


class BatchJob:
    """A resumable job of many (payload, task) items in one SQLite file (docs/batch.md).

    ``agent``: a ``PayloadAgent`` on a sync OpenAI or Anthropic adapter (``mode="batch"``) or an
    ``AsyncPayloadAgent`` (``mode="concurrent"``); its ``max_retries`` is each item's correction
    budget, its guards and options apply to every item. ``types``: the pydantic payload types
    of items an earlier process added (never imported by name). ``prices``: per million tokens
    (``input``, ``output``; ``cached_input`` and ``cache_write_input`` default to ``input``),
    for the progress's cost estimate. ``max_batch_requests`` / ``max_batch_bytes`` lower the
    provider's limits per batch.
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
        self._types = {type_name(t): t for t in types}
        model = agent.model
        self._backend: BatchBackend | None = None
        self._max_requests, self._max_bytes = 10**12, 10**15  # concurrent: one chunk a round
        if mode == "batch":
            self._backend = backend_for(model)
            if getattr(model, "is_async", False):
                raise ConfigurationError(
                    "BatchJob(mode='batch'): the agent's model wraps an async SDK client; the "
                    "batch APIs are driven from a sync client (openai.OpenAI / anthropic.Anthropic)"
                )
            self._max_requests = min(max_batch_requests or 10**9, self._backend.max_requests)
            self._max_bytes = min(max_batch_bytes or 10**12, self._backend.max_bytes)
        elif not callable(getattr(model, "arequest", None)) or not getattr(
            agent, "_async_client", False
        ):
            raise ConfigurationError(
                "BatchJob(mode='concurrent'): expected an AsyncPayloadAgent (its model's "
                f"arequest() sends the requests), found {type(agent).__name__}"
            )
        self.path = Path(state_path)
        self._file = StateFile(self.path, f"{model.provider}:{model.model_name}", mode)
        self._db = self._file.db
        self._tx = self._file.tx
        self._poll_interval = 30.0
        self._progress: Callable[[BatchProgress], Any] | None = None

    # -- the file --

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> BatchJob:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- adding items --

    def add(self, item_id: str, payload: Any, task: str, *, payload_type: Any = None) -> bool:
        """Add one item; ``False`` when the job holds it already (the same payload and task).
        The payload is checked now (``InvalidPayloadError``)."""
        return self.add_many([(item_id, payload, task, payload_type)]) == 1

    def add_many(self, items: Iterable[Any]) -> int:
        """Add items given as ``(id, payload, task)`` / ``(id, payload, task, payload_type)``
        tuples or ``{"id", "payload", "task", "payload_type"?}`` dicts, in one transaction;
        returns how many were new. An id the job holds already with the same payload, task
        and type is skipped (resuming); with anything different, or given twice here, it is a
        ``UsageError`` naming the ids, and nothing is added."""
        rows = []
        seen: dict[str, int] = {}
        for number, item in enumerate(items, 1):
            if isinstance(item, Mapping):
                missing = {"id", "payload", "task"} - set(item)
                if missing:
                    raise UsageError(f"add_many: an item lacks {sorted(missing)}: {item!r:.200}")
                item = (item["id"], item["payload"], item["task"], item.get("payload_type"))
            item_id, payload, task, *rest = item
            payload_type = rest[0] if rest else None
            row = self._row(item_id, payload, task, payload_type)
            if item_id in seen:
                raise UsageError(
                    f"add_many: items {seen[item_id]} and {number} have the same id "
                    f"{item_id!r}; each item needs an id of its own"
                )
            seen[item_id] = number
            rows.append(row)
        with self._file.guard("the items"):
            return self._file.add_items(rows)

    def _row(self, item_id: Any, payload: Any, task: Any, payload_type: Any) -> tuple[Any, ...]:
        if not isinstance(item_id, str) or not item_id:
            raise UsageError(f"item id: expected a non-empty string, found {item_id!r}")
        if not isinstance(task, str) or not task.strip():
            raise UsageError(f"item {item_id}: task must be a non-empty string, found {task!r}")
        data = _merge.dump_payload(payload)
        model_type = type_name(type(payload)) if isinstance(payload, BaseModel) else None
        declared = None
        if payload_type is not None:
            if not isinstance(payload_type, type):
                raise ConfigurationError(
                    f"item {item_id}: payload_type must be a type, found {payload_type!r}"
                )
            declared = type_name(payload_type)
            self._types.setdefault(declared, payload_type)
        if model_type is not None:
            self._types.setdefault(model_type, type(payload))
        return (item_id, compact(data), task, model_type, declared)

    # -- reading --

    def results(self) -> Iterator[BatchItemResult]:
        """Every item in the order added."""
        return self._file.results(self._types)

    def retry_failed(self) -> int:
        """Give every ``failed`` item a new try when the job runs next: a fresh conversation
        with the full correction budget (its earlier attempts stay counted in its usage).
        Returns how many. Items that failed for want of a reply are retried by ``run()``
        without this."""
        with self._file.guard("the items"), self._file.leased():
            return self._file.retry_failed()

    def progress(self, phase: Phase = "finished") -> BatchProgress:
        """The counts now."""
        with self._file.guard("the counts"):
            return self._file.progress(phase, self.prices)

    # -- the judge, rebuilt from the state file --

    def _state(self, seq: int) -> tuple[RunState, int, Usage]:
        """The item's run state: started afresh and fed every stored reply of its current try
        (deterministic: the same judge, the same replies, the same corrections); with the
        attempts and usage of its earlier tries (``retry_failed``)."""
        with self._file.guard(f"item #{seq}"):
            payload_text, task, model_type, declared, base = self._db.execute(
                "SELECT payload, task, model_type, payload_type, retry_base FROM items "
                "WHERE seq = ?",
                (seq,),
            ).fetchone()
            payload: Any = loads_file(payload_text)
            replies = [
                (attempt, reply_from(text))
                for attempt, text in self._db.execute(
                    "SELECT attempt, reply FROM replies WHERE item_seq = ? ORDER BY attempt", (seq,)
                ).fetchall()
            ]
        if model_type is not None:
            payload = resolve_type(model_type, self._types).model_validate(payload)  # type: ignore[attr-defined]
        payload_type = resolve_type(declared, self._types) if declared else None
        state: RunState = self.agent.start_run(payload, task, payload_type, (), None)
        earlier = Usage()
        for attempt, reply in replies:
            if attempt <= base:
                earlier = earlier + reply.usage
                continue
            state.next_request()
            with contextlib.suppress(ModelReplyError):
                state.judge(reply)
        return state, base, earlier

    def _apply_reply(self, seq: int, reply: ModelReply, rnd: int) -> None:
        """Store and judge one reply (inside the caller's transaction)."""
        state, base, earlier = self._state(seq)
        state.next_request()
        self._db.execute(
            "INSERT INTO replies VALUES (?, ?, ?, ?)",
            (seq, base + state.attempt, rnd, reply_json(reply)),
        )
        try:
            result = state.judge(reply)
        except ModelReplyError as exc:
            retry = state.should_retry(exc)
            if retry and state.attempt < self.max_attempts and not state.over_budget():
                columns = {"status": "pending", "failure": None, "error": None}
                columns["problems"] = problems_json(exc)
            else:
                columns = _failed(state.exhausted() if retry else exc)
        except AgentPayloadError as exc:
            columns = _failed(exc)
        else:
            columns = {"status": "done", "failure": None, "error": None, "problems": None}
            columns["result"] = compact(_merge.dump_payload(result.payload))
            columns["change_request"] = compact(result.change_request.to_wire())
            columns["report"] = report_json(result)
        usage = dataclasses.replace(earlier + state.usage, requests=base + state.attempt)
        columns.update(zip(USAGE_COLUMNS, dataclasses.astuple(usage), strict=True))
        self._file.set_item(seq, in_round=None, **columns)

    # -- rounds --

    def _prepare_round(self) -> int | None:
        """Write the next round's request lines, in one transaction but one item at a time
        (memory does not grow with the job); None when nothing is pending."""
        pending = self._db.execute(
            "SELECT seq FROM items WHERE status = 'pending' AND in_round IS NULL ORDER BY seq"
        ).fetchall()
        if not pending:
            return None
        (last,) = self._db.execute("SELECT COALESCE(MAX(round), 0) FROM chunks").fetchone()
        rnd = last + 1
        chunk, count, size = -1, 0, 0
        backend = self._backend
        with self._tx() as db:
            for (seq,) in pending:
                try:
                    state = self._state(seq)[0]
                except (BatchStateError, ConfigurationError):
                    raise  # the file or the job's setup, not the item
                except AgentPayloadError as exc:  # refused before any request (payload, limits)
                    self._file.set_item(seq, **_failed(exc))
                    continue
                custom_id = f"{self._file.tag}-i{seq}-r{rnd}"  # unique to this job
                request = state.next_request()
                line = backend.entry(custom_id, request) if backend else {"custom_id": custom_id}
                entry = compact(line)
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
                self._file.set_item(seq, in_round=rnd)
        return rnd if chunk >= 0 else self._prepare_round()

    # -- running --

    def run(
        self,
        *,
        poll_interval: float = 30.0,
        max_rounds: int | None = None,
        progress: Callable[[BatchProgress], Any] | None = None,
    ) -> BatchProgress:
        """Run rounds until no item is pending (or ``max_rounds`` more were run), resuming what
        an earlier ``run()`` left and sending again the items that failed for want of a reply;
        returns the final counts. Another ``run()`` on the same file is refused with
        ``BatchStateError``. In ``mode="concurrent"`` it runs an event loop of its own (give the
        job an async client of its own); from async code ``await arun()``."""
        if self.mode == "concurrent":
            return asyncio.run(self.arun(max_rounds=max_rounds, progress=progress))
        backend = self._backend
        assert backend is not None
        with self._running(poll_interval, progress):
            for rnd in self._rounds(max_rounds):
                self._submit_round(backend, rnd)
                self._wait_round(backend, rnd)
                self._collect_round(backend, rnd)
            return self._finish()

    @contextlib.contextmanager
    def _running(
        self, poll_interval: float, progress: Callable[[BatchProgress], Any] | None
    ) -> Iterator[None]:
        """The lease for one run, its types checked, between begin_run() and end_run()."""
        self._poll_interval, self._progress = poll_interval, progress
        with self._file.guard("the job", decoding=False), self._file.leased():
            for name in self._file.type_names():
                resolve_type(name, self._types)  # before anything is sent
            self._file.begin_run()
            yield
            self._file.end_run()

    def _rounds(self, max_rounds: int | None) -> Iterator[int]:
        """The rounds to run: first one a previous run left open, then new ones while items
        are pending (at most ``max_rounds`` new ones)."""
        started = 0
        while True:
            rnd = self._file.open_round()
            if rnd is None:
                if max_rounds is not None and started >= max_rounds:
                    return
                rnd = self._prepare_round()
                if rnd is None:
                    return
                started += 1
                self._report("prepared")
            yield rnd

    def _finish(self) -> BatchProgress:
        final = self.progress("finished")
        if self._progress is not None:
            self._progress(final)
        return final

    def _report(self, phase: Phase) -> None:
        if self._progress is not None:
            self._progress(self.progress(phase))

    def _submit_round(self, backend: BatchBackend, rnd: int) -> None:
        for chunk, state, _, since in self._file.chunks(rnd, "prepared", "submitting"):
            tag = f"{self.path.stem}-{self._file.tag}-r{rnd}c{chunk}"
            rows = self._db.execute(
                "SELECT entry FROM requests WHERE round = ? AND chunk = ? ORDER BY custom_id",
                (rnd, chunk),
            )
            entries = [entry for (entry,) in rows]
            if state == "submitting" and since is not None:
                # The job stopped between asking for this batch and hearing of it.
                found = self._find(backend, rnd, chunk, tag, entries, since)
                if found is not None:
                    self._file.set_chunk(rnd, chunk, state="submitted", batch_id=found)
                    continue
            now = time.time()
            self._file.set_chunk(rnd, chunk, state="submitting", submitting_at=now)
            try:
                batch_id = backend.submit(entries, tag=tag)
            except ProviderError:
                # The answer was lost, or the create failed: the batch may exist or not.
                found = self._find(backend, rnd, chunk, tag, entries, now)
                if found is None:
                    raise  # not created: the next run() submits it (state 'submitting')
                batch_id = found
            self._file.set_chunk(rnd, chunk, state="submitted", batch_id=batch_id)
            self._report("submitted")

    def _find(
        self,
        backend: BatchBackend,
        rnd: int,
        chunk: int,
        tag: str,
        entries: list[str],
        since: float,
    ) -> str | None:
        """The provider batch a chunk left ``submitting`` became, None if none was created.
        Only a batch whose request hash or custom ids are this chunk's is adopted (the ids
        carry the job's own tag); a candidate that cannot tell yet (still running, no
        metadata) is waited for; anything else (two of this chunk's own, an ended one that
        cannot tell) is ``BatchStateError`` naming the candidates."""
        claimed = {
            b for (b,) in self._db.execute("SELECT batch_id FROM chunks WHERE batch_id IS NOT NULL")
        }
        while True:
            found = [(b, m) for b, m in backend.find(tag, entries, since=since) if b not in claimed]
            ours = [b for b, mine in found if mine]
            unknown = [b for b, mine in found if mine is None]
            if len(ours) > 1:
                raise BatchStateError(
                    f"{self.path}: round {rnd}, chunk {chunk} was being submitted when the job "
                    f"stopped, and {len(ours)} provider batches ({', '.join(ours)}) carry its "
                    "requests. Cancel the ones that are not to be used, record the right one with "
                    "adopt_batch(), then run again"
                )
            if ours:
                return ours[0]
            unclear = [b for b, mine in found if mine is False]
            if unclear:
                raise BatchStateError(
                    f"{self.path}: round {rnd}, chunk {chunk} was being submitted when the job "
                    f"stopped, and provider batches {', '.join(unclear)} could be it: they have "
                    "its size and time but no result that says whose they are. If one is, record "
                    f"it with adopt_batch({rnd}, {chunk}, batch_id); if none is, "
                    f"adopt_batch({rnd}, {chunk}, None) submits the chunk anew. Nothing was "
                    "submitted again"
                )
            if not unknown:
                return None
            # Candidates that may be this chunk's batch cannot tell yet: wait for them to end.
            self._report("polling")
            self._sleep(self._poll_interval)

    def adopt_batch(self, round: int, chunk: int, batch_id: str | None) -> None:
        """Record by hand which provider batch a chunk left ``submitting`` is (see run()), or
        with ``None`` that none is: the next ``run()`` submits the chunk anew."""
        with self._file.guard("the job", decoding=False), self._file.leased():
            if batch_id is None:
                self._file.forget_submission(round, chunk)
            else:
                self._file.set_chunk(round, chunk, state="submitted", batch_id=batch_id)

    def _wait_round(self, backend: BatchBackend, rnd: int) -> None:
        while waiting := self._file.chunks(rnd, "submitted"):
            for chunk, _, batch_id, _ in waiting:
                assert batch_id is not None
                status = backend.poll(batch_id)
                if status.ended:
                    ended = {"ended_status": status.status, "message": status.message}
                    self._file.set_chunk(rnd, chunk, state="ended", **ended)
            if self._file.chunks(rnd, "submitted"):
                self._report("polling")
                self._sleep(self._poll_interval)

    def _collect_round(self, backend: BatchBackend, rnd: int) -> None:
        request = ModelRequest(messages=(), output_mode=self.agent.output_mode)
        for chunk, _, batch_id, _ in self._file.chunks(rnd, "ended"):
            assert batch_id is not None
            unreadable: list[str] = []
            for custom_id, outcome in backend.results(batch_id, request):
                if custom_id is None:  # a line that names no request: its request is lost
                    assert isinstance(outcome, LineError)
                    unreadable.append(outcome.message)
                    continue
                self._collect_line(custom_id, outcome, rnd)
            reason = self._file.lost_reason(rnd, chunk, batch_id, unreadable)
            lost = "WHERE round = ? AND chunk = ? AND state = 'open'"
            with self._tx() as db:
                for (seq,) in db.execute(
                    f"SELECT item_seq FROM requests {lost}", (rnd, chunk)
                ).fetchall():
                    self._file.transport_failure(seq, reason, self.max_transport_retries)
                db.execute(f"UPDATE requests SET state = 'lost' {lost}", (rnd, chunk))
                self._file.set_chunk(rnd, chunk, state="collected")
            self._report("collected")

    def _collect_line(self, custom_id: str, outcome: ModelReply | LineError, rnd: int) -> None:
        with self._tx() as db:
            row = db.execute(
                "SELECT item_seq, state FROM requests WHERE custom_id = ?", (custom_id,)
            ).fetchone()
            if row is None or row[1] != "open":
                return  # not ours, or already applied before a crash
            seq = row[0]
            if isinstance(outcome, LineError):
                code, detail = outcome.status_code, outcome.message
                detail = detail if code is None else f"HTTP {code}: {detail}"
                self._file.transport_failure(seq, detail, self.max_transport_retries)
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
        with self._running(0.0, progress):
            for rnd in self._rounds(max_rounds):
                await self._send_round(rnd)
            return self._finish()

    async def _send_round(self, rnd: int) -> None:
        self._db.execute(
            "UPDATE chunks SET state = 'submitted' WHERE round = ? AND state = 'prepared'", (rnd,)
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
            nonlocal stopping, answered
            async with gate:
                if stopping:
                    return
                request = self._state(seq)[0].next_request()
                try:
                    reply: ModelReply | LineError = await model.arequest(request)
                except ProviderError as exc:
                    reply = LineError(str(exc), status_code=exc.status_code)
                try:
                    self._collect_line(custom_id, reply, rnd)
                    answered += 1
                    if answered % every == 0 or answered == len(open_lines):
                        self._report("collected")
                except BaseException:
                    stopping = True
                    raise

        tasks = [asyncio.ensure_future(send(cid, seq)) for cid, seq in open_lines]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        self._db.execute("UPDATE chunks SET state = 'collected' WHERE round = ?", (rnd,))
