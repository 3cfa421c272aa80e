"""BatchJob with the real SDKs against the fake batch APIs: verdicts, rounds, resumption.

Each item's payload names how the scripted model treats it (``kind``):

* ``good``: a right change request at once (done, 1 attempt);
* ``fix``: a misspelt bucket, then after the correction a right one (done, 2 attempts);
* ``never``: misspelt every time (failed after max_retries + 1 attempts);
* ``flaky``: its first batch line is an HTTP 500 error line, then a right reply (done, 1 attempt);
* ``down``: every batch line an error line (failed with the provider's error, no attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agent_payload import AsyncPayloadAgent, PayloadAgent
from agent_payload.batch import BatchJob, BatchProgress, BatchStateError
from agent_payload.errors import ConfigurationError
from agent_payload.providers.openai import OpenAIChatModel
from agent_payload.testing import FakeProviderServer, FakeRequest, Fault, ScriptedModel
from tests._batch_helpers import (
    BROKEN,
    GOOD,
    batch_argv,
    close_clients,
    make_model,
    use_server,
    write_items,
)

KINDS = ("good", "fix", "never", "flaky", "down")


class Price(BaseModel):
    sku: str
    price: int
    kind: str


class Script:
    """The scripted model, keyed by the item's sku (seen in the prompt); thread-safe."""

    def __init__(self) -> None:
        self.lines: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, request: FakeRequest) -> str | Fault:
        user = next(text for role, text in request.messages if role == "user")
        sku = user.split('"sku":"', 1)[1].split('"', 1)[0]
        kind = sku.split("-")[0]
        with self.lock:
            self.lines[sku] += 1
            seen = self.lines[sku]
        corrected = any(role == "assistant" for role, _ in request.messages)
        if kind == "down" or (kind == "flaky" and seen == 1):
            return Fault.status(500)
        if kind == "never" or (kind == "fix" and not corrected):
            return BROKEN
        return GOOD


def items(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        sku = f"{kind}-{i:04d}"
        out.append(
            {
                "id": sku,
                "payload": {"sku": sku, "price": 10, "kind": kind},
                "task": "set the price to 20",
            }
        )
    return out


def expected(kind: str) -> tuple[str, int, int]:
    """(status, attempts, final price) per kind, with max_retries=1, max_transport_retries=1."""
    return {
        "good": ("done", 1, 20),
        "fix": ("done", 2, 20),
        "never": ("failed", 2, 10),
        "flaky": ("done", 1, 20),
        "down": ("failed", 0, 10),
    }[kind]


_close_clients = pytest.fixture(autouse=True)(close_clients)


async def arun_concurrent(
    server: FakeProviderServer,
    state: Path,
    n: int,
    *,
    concurrency: int = 8,
    progress: Callable[[BatchProgress], None] | None = None,
) -> BatchJob:
    """A concurrent-mode job run inside a loop that closes its async client at the end."""
    client = server.openai_client(async_client=True, max_retries=0)
    try:
        agent = AsyncPayloadAgent(OpenAIChatModel(client, "local-model"), max_retries=1)
        job = BatchJob(
            agent, state, mode="concurrent", concurrency=concurrency, max_transport_retries=1
        )
        job.add_many(items(n))
        try:
            await job.arun(progress=progress)
        except BaseException:
            job.close()
            raise
        return job
    finally:
        await client.close()


def snapshot(job: BatchJob) -> list[tuple[Any, ...]]:
    return [
        (r.id, r.status, json.dumps(r.payload, sort_keys=True), r.attempts, r.error is not None)
        for r in job.results()
    ]


def check(job: BatchJob) -> None:
    for r in job.results():
        status, attempts, price = expected(r.id.split("-")[0])
        assert (r.id, r.status, r.attempts, r.payload["price"]) == (r.id, status, attempts, price)
        if status == "done":
            assert r.change_request == {"updateElements": {"price": 20}}
            assert r.report is not None
            assert r.report["changes"] == [
                {"op": "update", "path": ["price"], "old": 10, "new": 20}
            ]
            assert r.error is None
        elif r.id.startswith("down"):
            assert r.error is not None and "provider error after 2 tries" in r.error
        else:
            assert r.error is not None and r.problems and r.problems[0]["kind"] == "unknown_field"


JOB_ITEMS = 30
JOB_CHUNK = 10
"""The resume tests' job: 30 items (6 of each kind) in batches of at most 10, so two rounds of
three batches each (30 lines, then 24: fix, never, flaky, down), every kind in every batch."""


def run_job(
    tmp: Path,
    api: str,
    *,
    output_mode: str = "text",
    kill: Callable[[BatchProgress], None] | None = None,
    setup: Callable[[FakeProviderServer], None] | None = None,
    n: int = JOB_ITEMS,
    chunk: int = JOB_CHUNK,
) -> tuple[list[tuple[Any, ...]], int, int]:
    """Run a job to the end (resuming after each kill, as a new process would); return its
    results, the number of batches created and of request lines answered."""
    tmp.mkdir(parents=True, exist_ok=True)
    state = tmp / f"{api}-{output_mode}.sqlite"
    with FakeProviderServer(handler=Script()) as server:
        server.batch_polls = 1
        if setup is not None:
            setup(server)
        for _ in range(20):
            agent = PayloadAgent(make_model(server, api), max_retries=1, output_mode=output_mode)  # type: ignore[arg-type]
            with BatchJob(agent, state, max_transport_retries=1, max_batch_requests=chunk) as job:
                job.add_many(items(n))
                try:
                    job.run(poll_interval=0, progress=kill)
                except Killed:
                    continue
                return snapshot(job), server.batches_created, len(server.batch_requests)
    raise AssertionError("the job never finished")


_baselines: dict[str, tuple[list[tuple[Any, ...]], int, int]] = {}


def baseline_of(api: str) -> tuple[list[tuple[Any, ...]], int, int]:
    """The uninterrupted run's results (computed once per API for the resume tests)."""
    if api not in _baselines:
        with tempfile.TemporaryDirectory() as tmp:
            _baselines[api] = run_job(Path(tmp), api)
    return _baselines[api]


class Killed(Exception):
    """Stands for the process dying at that point."""


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
@pytest.mark.slow
def test_two_hundred_items_exact_verdicts(tmp_path: Path, api: str) -> None:
    """200 items: good, corrected once, never right, a flaky error line, always an error line:
    exact statuses, attempts and payloads, each reply judged as the agent would."""
    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=Script()) as server:
        agent = PayloadAgent(make_model(server, api), max_retries=1)
        seen: list[BatchProgress] = []
        with BatchJob(agent, state, max_transport_retries=1, max_batch_requests=60) as job:
            assert job.add_many(items(200)) == 200
            assert job.add_many(items(200)) == 0  # idempotent by id
            final = job.run(poll_interval=0, progress=seen.append)
            check(job)
            assert final.total == 200 and final.pending == 0
            assert final.done == 120 and final.failed == 80
        # round 1: 200 lines in 4 batches of at most 60; round 2: fix (40) + never (40) + flaky
        # (40) + down (40) = 160 lines in 3 batches; then nothing is pending (down failed twice).
        assert server.batches_created == 7
        assert len(server.batch_requests) == 360
        assert {p.phase for p in seen} >= {"prepared", "submitted", "collected", "finished"}
        # the correction the agent would send reached the model in round 2
        fix = [r for r in server.batch_requests if "fix-0001" in r.text]
        assert len(fix) == 2 and any(role == "assistant" for role, _ in fix[1].messages)
        assert "fix-0001" not in "".join(t for _, t in fix[0].messages if _ == "assistant")


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_tool_mode(tmp_path: Path, api: str) -> None:
    """The batch lines force the change-request tool; the tool arguments are judged."""
    with FakeProviderServer(handler=Script()) as server:
        agent = PayloadAgent(make_model(server, api), max_retries=1, output_mode="tool")
        with BatchJob(agent, tmp_path / "t.sqlite", max_transport_retries=1) as job:
            job.add_many(items(25))
            job.run(poll_interval=0)
            check(job)
        assert all(r.forced_tool == "apply_change_request" for r in server.batch_requests)


def kill_at(phase: str, nth: int) -> Callable[[BatchProgress], None]:
    calls = Counter[str]()
    fired = [False]

    def progress(p: BatchProgress) -> None:
        calls[p.phase] += 1
        if not fired[0] and p.phase == phase and calls[p.phase] == nth:
            fired[0] = True
            raise Killed(phase)

    return progress


@pytest.mark.parametrize("api", ["chat", "anthropic"])
@pytest.mark.parametrize(
    ("phase", "nth"),
    [("prepared", 1), ("submitted", 2), ("polling", 1), ("collected", 2), ("collected", 5)],
)
@pytest.mark.slow
def test_kill_at_each_phase_resumes_to_same_results(
    tmp_path: Path, api: str, phase: str, nth: int
) -> None:
    """Killed after a round is prepared, between submissions, while polling, between chunks'
    collection: run() again gives the same results, with no batch submitted twice."""
    baseline = baseline_of(api)
    resumed = run_job(tmp_path / "kill", api, kill=kill_at(phase, nth))
    assert resumed == baseline


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_lost_create_answer_is_not_submitted_twice(tmp_path: Path, api: str) -> None:
    """The provider creates the batch but the answer is lost (connection reset): the job finds
    the batch by its tag instead of submitting it again."""
    baseline = baseline_of(api)

    def setup(server: FakeProviderServer) -> None:
        server.batch_faults["create"] = [Fault.reset(), Fault.reset()]

    assert run_job(tmp_path / "lost", api, setup=setup) == baseline


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_failed_result_download_resumes(tmp_path: Path, api: str) -> None:
    """Reading results fails (HTTP 500 past the SDK's retries): the job stops; run() again reads
    them and applies each line once."""
    baseline = baseline_of(api)

    def setup(server: FakeProviderServer) -> None:
        server.batch_faults["results"] = [Fault.status(500)]

    state = tmp_path / "dl" / "job.sqlite"
    state.parent.mkdir()
    with FakeProviderServer(handler=Script()) as server:
        setup(server)
        agent = PayloadAgent(make_model(server, api), max_retries=1)
        with BatchJob(agent, state, max_transport_retries=1, max_batch_requests=JOB_CHUNK) as job:
            job.add_many(items(JOB_ITEMS))
            with pytest.raises(Exception, match=r"500|Internal|injected"):
                job.run(poll_interval=0)
        with BatchJob(agent, state, max_transport_retries=1, max_batch_requests=JOB_CHUNK) as job:
            job.run(poll_interval=0)
            assert snapshot(job) == baseline[0]
        assert server.batches_created == baseline[1]


class _Crash(BaseException):
    pass


def test_kill_while_reading_results_applies_each_line_once(tmp_path: Path) -> None:
    """A crash in the middle of a batch's results (a validator that dies once, as a killed
    process would): the lines judged before it stay, the rest are judged on resume, none twice."""
    baseline = baseline_of("chat")
    calls = [0]

    def dies_once(payload: Any) -> None:
        calls[0] += 1
        if calls[0] == 15:  # round 1 validates 6 (good), round 2's second batch the 15th
            raise _Crash

    state = tmp_path / "crash.sqlite"
    with FakeProviderServer(handler=Script()) as server:
        agent = PayloadAgent(make_model(server, "chat"), max_retries=1, validators=[dies_once])
        with BatchJob(agent, state, max_transport_retries=1, max_batch_requests=JOB_CHUNK) as job:
            job.add_many(items(JOB_ITEMS))
            with pytest.raises(_Crash):
                job.run(poll_interval=0)
            done_before = job.progress().done
            assert 0 < done_before < sum(r[1] == "done" for r in baseline[0])
        with BatchJob(agent, state, max_transport_retries=1, max_batch_requests=JOB_CHUNK) as job:
            job.run(poll_interval=0)
            assert snapshot(job) == baseline[0]
        assert server.batches_created == baseline[1]
        assert len(server.batch_requests) == baseline[2]


def test_expired_batch_is_retried(tmp_path: Path) -> None:
    """An expired batch's requests are transport failures, retried in the next round."""
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        server.batch_expire = lambda number: number == 1
        agent = PayloadAgent(make_model(server, "chat"), max_retries=1)
        with BatchJob(agent, tmp_path / "j.sqlite", max_transport_retries=1) as job:
            job.add_many(items(10))
            final = job.run(poll_interval=0)
            assert final.done == 10
        assert server.batches_created == 2


def test_typed_payloads_round_trip_and_resume(tmp_path: Path) -> None:
    """A pydantic payload comes back as the same class; a type error is judged and corrected."""
    replies = iter(['{"updateElements":{"price":"lots"}}', GOOD])
    with FakeProviderServer(handler=lambda r: next(replies)) as server:
        agent = PayloadAgent(make_model(server, "chat"), max_retries=1)
        with BatchJob(agent, tmp_path / "t.sqlite") as job:
            job.add("a", Price(sku="good-1", price=10, kind="good"), "set price to 20")
            job.run(poll_interval=0)
            (result,) = job.results()
            assert result.payload == Price(sku="good-1", price=20, kind="good")
            assert result.attempts == 2
        correction = server.batch_requests[1].messages[-1][1]
        assert "price" in correction


@pytest.mark.slow
def test_concurrent_mode(tmp_path: Path) -> None:
    """mode='concurrent' runs the same rounds through an async client, same verdicts."""
    with FakeProviderServer(handler=Script()) as server:
        job = asyncio.run(arun_concurrent(server, tmp_path / "c.sqlite", 50))
        with job:
            check(job)
            final = job.progress()
            assert (final.done, final.failed) == (30, 20)
        posts = [r for r in server.requests if r.path == "/v1/chat/completions"]
        assert len(posts) == 90  # 50, then 40 (fix, never, flaky, down)


@pytest.mark.slow
def test_concurrent_mode_resumes(tmp_path: Path) -> None:
    """Killed between requests in concurrent mode: run again, it finishes with the same results
    and no request sent twice (one at a time, so nothing was in flight at the kill)."""

    def run(kill: Callable[[BatchProgress], None] | None, state: Path) -> tuple[Any, int]:
        with FakeProviderServer(handler=Script()) as server:
            for _ in range(5):
                try:
                    job = asyncio.run(
                        arun_concurrent(server, state, 15, concurrency=1, progress=kill)
                    )
                except Killed:
                    continue
                with job:
                    posts = [r for r in server.requests if r.path == "/v1/chat/completions"]
                    return snapshot(job), len(posts)
        raise AssertionError("never finished")

    # killed after the 8th of round 1's 15 answers
    assert run(kill_at("collected", 8), tmp_path / "k.sqlite") == run(None, tmp_path / "b.sqlite")


def test_misuse(tmp_path: Path) -> None:
    """Wrong agents and options are ConfigurationErrors before anything is written or sent."""
    with pytest.raises(ConfigurationError, match="batch APIs need an OpenAI or Anthropic"):
        BatchJob(PayloadAgent(ScriptedModel([GOOD])), tmp_path / "a.sqlite")
    with pytest.raises(ConfigurationError, match="AsyncPayloadAgent"):
        BatchJob(PayloadAgent(ScriptedModel([GOOD])), tmp_path / "b.sqlite", mode="concurrent")
    with pytest.raises(ConfigurationError, match="concurrency"):
        BatchJob(
            AsyncPayloadAgent(ScriptedModel([GOOD])),
            tmp_path / "c.sqlite",
            mode="concurrent",
            concurrency=0,
        )


def test_reopened_with_another_model_is_refused(tmp_path: Path) -> None:
    """The state file remembers its model: resuming with another one is a BatchStateError."""
    state = tmp_path / "j.sqlite"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        BatchJob(PayloadAgent(make_model(server, "chat")), state).close()
        with pytest.raises(BatchStateError, match="reopened with anthropic"):
            BatchJob(PayloadAgent(make_model(server, "anthropic")), state)


def test_not_a_state_file(tmp_path: Path) -> None:
    """A file that is not SQLite is a BatchStateError naming it."""
    state = tmp_path / "j.sqlite"
    state.write_text("hello, this is not sqlite" * 100)
    with (
        FakeProviderServer(handler=lambda r: GOOD) as server,
        pytest.raises(BatchStateError, match=r"j\.sqlite"),
    ):
        BatchJob(PayloadAgent(make_model(server, "chat")), state)


def test_cli_batch_runs_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`agent-payload batch` reads JSONL items, writes JSONL results, and re-running the same
    command resumes the job: the second run sends only the items that failed for want of a
    reply (down-*) again, never the ones the model failed or finished."""
    from agent_payload.cli import main

    items_file = write_items(tmp_path / "items.jsonl", items(10))
    out = tmp_path / "o.jsonl"
    with FakeProviderServer(handler=Script()) as server:
        use_server(monkeypatch, server)
        argv = batch_argv(tmp_path, items_file, "--poll-interval", "0", "--max-retries", "1")
        err = io.StringIO()
        assert main(argv, stderr=err) == 1  # never-* and down-* items fail
        assert "6 done, 4 failed, 0 pending" in err.getvalue()
        lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert [(r["id"], r["status"]) for r in lines] == [
            (i["id"], expected(i["id"].split("-")[0])[0]) for i in items(10)
        ]
        assert lines[0]["payload"]["price"] == 20 and lines[0]["attempts"] == 1
        created, lines_sent = server.batches_created, len(server.batch_requests)
        err = io.StringIO()
        assert main(argv, stderr=err) == 1
        assert "already in the job" in err.getvalue()
        assert server.batches_created == created + 3  # down-0004, down-0009: 3 tries again
        again = server.batch_requests[lines_sent:]
        assert len(again) == 6 and all("down-" in r.text for r in again)
        assert json.loads(out.read_text(encoding="utf-8").splitlines()[0]) == lines[0]


def test_cli_batch_bad_input(tmp_path: Path) -> None:
    """A malformed items file is a usage error naming the file and line; nothing is created."""
    from agent_payload.cli import main

    items_file = tmp_path / "items.jsonl"
    items_file.write_text(
        '{"id": "a", "payload": {}, "task": "x"}\n{"id": "b"}\n', encoding="utf-8"
    )
    err = io.StringIO()
    assert main(batch_argv(tmp_path, items_file, model="openai:m"), stderr=err) == 2
    assert "items.jsonl, line 2: expected an object with id, payload and task" in err.getvalue()
    assert not (tmp_path / "s.sqlite").exists()


def test_cli_batch_help_lists_every_option() -> None:
    """`agent-payload batch --help` documents each option."""
    from agent_payload.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["batch", "--help"]) == 0
    for option in ("--model", "--input", "--state", "--output", "--concurrent", "--poll-interval",
                   "--max-rounds", "--max-retries", "--output-mode", "--no-progress"):  # fmt: skip
        assert option in out.getvalue()


def test_progress_counts_tokens_and_cost(tmp_path: Path) -> None:
    """The progress callback gets the counts, the tokens summed over items, and the cost from
    the user's prices (per million tokens)."""
    seen: list[BatchProgress] = []
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        agent = PayloadAgent(make_model(server, "chat"))
        prices = {"input": 1.25, "output": 10.0}
        with BatchJob(agent, tmp_path / "p.sqlite", prices=prices) as job:
            job.add_many(items(4))
            final = job.run(poll_interval=0, progress=seen.append)
    assert seen[0].phase == "prepared" and seen[0].pending == 4 and seen[0].submitted == 0
    assert seen[-1] == final and final.done == 4 and final.submitted == 4
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    expected_cost = (final.usage.input_tokens * 1.25 + final.usage.output_tokens * 10.0) / 1e6
    assert final.cost == pytest.approx(expected_cost)


def test_concurrent_mode_rides_out_429_with_retry_after(tmp_path: Path) -> None:
    """A 429 with Retry-After is retried by the SDK's own retry loop (which honours the header);
    the item is done at its first attempt."""

    async def main() -> BatchJob:
        with FakeProviderServer(
            [Fault.status(429, retry_after_ms=5)], handler=lambda r: GOOD
        ) as server:
            client = server.openai_client(async_client=True, max_retries=2)
            try:
                agent = AsyncPayloadAgent(OpenAIChatModel(client, "local"))
                job = BatchJob(agent, tmp_path / "r.sqlite", mode="concurrent", concurrency=1)
                job.add_many(items(3))
                await job.arun()
                assert len(server.requests) == 4  # the 429, then three answers
                return job
            finally:
                await client.close()

    with asyncio.run(main()) as job:
        assert [(r.status, r.attempts) for r in job.results()] == [("done", 1)] * 3
