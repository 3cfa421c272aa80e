"""BatchJob around a single runner (issue 34): two jobs on one provider account, two runners on
one state file, outages, input the job must refuse, state files that are not the job's, results
files with a bad line, and the command line's interruption and exit statuses. The real SDKs
talk to ``FakeProviderServer``'s batch APIs; two processes are real processes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import BaseModel

import agent_payload
from agent_payload import AsyncPayloadAgent, PayloadAgent
from agent_payload.batch import BatchJob, BatchProgress, BatchStateError
from agent_payload.errors import ConfigurationError, UsageError
from agent_payload.providers.openai import OpenAIChatModel
from agent_payload.testing import FakeProviderServer, FakeRequest
from tests._batch_helpers import (
    BROKEN,
    GOOD,
    batch_argv,
    close_clients,
    make_model,
    use_server,
    write_items,
)
from tests._batch_worker import DIED_AT_CREATE, job_items
from tests._batch_worker import run as run_job

ROOT = Path(agent_payload.__file__).resolve().parent.parent  # children import the same code
WORKER = Path(__file__).with_name("_batch_worker.py")
_close_clients = pytest.fixture(autouse=True)(close_clients)


def items(n: int, task: str = "set the price to 20") -> list[dict[str, Any]]:
    return [{"id": f"sku-{i}", "payload": {"sku": i, "price": 10}, "task": task} for i in range(n)]


def sign(request: FakeRequest) -> str:
    """The model signs each item with the job its prompt names."""
    user = next(text for role, text in request.messages if role == "user")
    job = user.split('"job":"', 1)[1].split('"', 1)[0]
    return f'{{"updateElements":{{"by":"{job}"}}}}'


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def worker(spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKER), json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env(),
        check=False,
    )


# -- 1. another job's batch is never adopted ---------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_a_job_never_adopts_another_jobs_batch(tmp_path: Path, api: str) -> None:
    """Job A's process dies between recording "submitting" and its create call; job B (another
    process, the same number of items, the same item ids) then submits and finishes on the same
    account. A, run again, must not take B's batch for its own: its items are signed by A, and
    it submitted a batch of its own."""
    with FakeProviderServer(handler=sign) as server:
        spec = {"api": api, "url": server.url, "n": 4}
        died = worker({**spec, "state": str(tmp_path / "a.sqlite"), "job": "A", "die_at_create": 1})
        assert died.returncode == DIED_AT_CREATE, died.stderr
        b = run_job({**spec, "state": str(tmp_path / "b.sqlite"), "job": "B"})
        assert {r[2]["by"] for r in b["results"]} == {"B"}
        a = run_job({**spec, "state": str(tmp_path / "a.sqlite"), "job": "A"})
        assert [(r[0], r[1], r[2]["by"]) for r in a["results"]] == [
            (f"item-{i}", "done", "A") for i in range(4)
        ]
        assert server.batches_created == 2
        assert len(server.batch_requests) == 8  # four lines each, none answered twice


def test_an_ended_batch_that_cannot_tell_whose_it_is_is_named_not_adopted(tmp_path: Path) -> None:
    """Anthropic batches carry no metadata: candidates of the right size and time whose results
    name no custom id (every line unreadable) are ambiguous: BatchStateError naming them,
    nothing adopted, nothing submitted."""
    with FakeProviderServer(handler=sign) as server:
        spec = {"api": "anthropic", "url": server.url, "n": 3}
        died = worker({**spec, "state": str(tmp_path / "a.sqlite"), "job": "A", "die_at_create": 1})
        assert died.returncode == DIED_AT_CREATE, died.stderr
        server.batch_result_line = lambda line: line[:12]
        b = run_job({**spec, "state": str(tmp_path / "b.sqlite"), "job": "B"})
        assert {r[1] for r in b["results"]} == {"failed"}
        assert server.batches_created == 3  # B's: its lines unreadable, B tried three times
        error = run_job({**spec, "state": str(tmp_path / "a.sqlite"), "job": "A"})["error"]
        assert error.startswith("BatchStateError: ") and "a.sqlite" in error
        assert error.count("msgbatch_") == 3 and "adopt_batch(1, 0, None)" in error
        assert server.batches_created == 3
        # the user says none of them is A's: A submits its own and is done
        server.batch_result_line = lambda line: line
        with BatchJob(PayloadAgent(make_model(server, "anthropic")), tmp_path / "a.sqlite") as a:
            a.adopt_batch(1, 0, None)
            assert a.run(poll_interval=0).done == 3
            assert {r.payload["by"] for r in a.results()} == {"A"}
        assert server.batches_created == 4


# -- 2. one runner per state file --------------------------------------------------------------


def test_a_second_runner_on_the_same_state_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner (a process of its own) holds the job, waiting on its batch, while the same
    command is run again (an overlapping cron): the second one exits 2 with a BatchStateError
    naming the file and the holder; no raw IntegrityError, and the batch is submitted once."""
    from agent_payload.cli import main

    state = tmp_path / "s.sqlite"
    inputs = write_items(tmp_path / "items.jsonl", job_items("A", 5))
    with FakeProviderServer(handler=sign) as server:
        server.batch_polls = 1
        spec = {"api": "chat", "url": server.url, "state": str(state), "job": "A", "n": 5}
        with subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps({**spec, "hold": 1})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        ) as first:
            try:
                assert first.stdout is not None and first.stdout.readline() == "holding\n"
                use_server(monkeypatch, server)
                err = io.StringIO()
                second = main(batch_argv(tmp_path, inputs, "--poll-interval", "0"), stderr=err)
                out, errors = first.communicate("\n")
            finally:
                if first.poll() is None:
                    first.kill()
        assert second == 2, err.getvalue()
        assert "s.sqlite: another run() of this job holds it" in err.getvalue()
        assert f"process {first.pid}" in err.getvalue()
        assert "IntegrityError" not in err.getvalue()
        assert first.returncode == 0, errors
        assert {r[2]["by"] for r in json.loads(out.splitlines()[-1])["results"]} == {"A"}
        assert server.batches_created == 1
        assert len(server.batch_requests) == 5
        assert not (tmp_path / "o.jsonl").exists()


def test_the_lease_is_released_when_run_returns(tmp_path: Path) -> None:
    """The lease is one run()'s: a second job object on the file runs after the first's run()
    returned, and is refused while it runs (here: from the first's progress callback)."""
    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        seen: list[str] = []

        def nested(p: BatchProgress) -> None:
            if p.phase == "prepared":
                with (
                    BatchJob(PayloadAgent(make_model(server, "chat")), state) as other,
                    pytest.raises(BatchStateError, match="another run"),
                ):
                    other.run(poll_interval=0)
                seen.append("refused")

        with BatchJob(PayloadAgent(make_model(server, "chat")), state) as job:
            job.add_many(items(3))
            job.run(poll_interval=0, progress=nested)
        with BatchJob(PayloadAgent(make_model(server, "chat")), state) as job:
            assert job.run(poll_interval=0).done == 3
        assert seen == ["refused"]


def test_a_concurrent_run_holds_the_lease_too(tmp_path: Path) -> None:
    """mode="concurrent" (where two runners sent every request twice) holds the same lease:
    while it runs, another job object on the file is refused."""
    state = tmp_path / "job.sqlite"
    refused: list[str] = []

    async def main(base_url: str) -> BatchProgress:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)
        other_client = openai.AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)
        try:
            other = BatchJob(
                AsyncPayloadAgent(OpenAIChatModel(other_client, "local")), state, mode="concurrent"
            )

            def progress(p: BatchProgress) -> None:
                if p.phase == "prepared":
                    with pytest.raises(BatchStateError, match="another run") as caught:
                        other.retry_failed()
                    refused.append(str(caught.value))

            agent = AsyncPayloadAgent(OpenAIChatModel(client, "local"))
            with other, BatchJob(agent, state, mode="concurrent") as job:
                job.add_many(items(3))
                return await job.arun(progress=progress)
        finally:
            await client.close()
            await other_client.close()

    with FakeProviderServer(handler=lambda r: GOOD) as server:
        assert asyncio.run(main(server.openai_base_url)).done == 3
        assert len(server.requests) == 3
    assert len(refused) == 1 and "job.sqlite" in refused[0]


# -- 3. outages and retries --------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_items_failed_by_an_outage_are_retried_when_the_job_runs_again(tmp_path: Path) -> None:
    """Concurrent mode with the server unreachable: every item fails for want of a reply, with
    the client's error; the same run() again, with the server back, does them all."""
    state = tmp_path / "job.sqlite"

    async def run(base_url: str) -> BatchProgress:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)
        try:
            agent = AsyncPayloadAgent(OpenAIChatModel(client, "local"))
            with BatchJob(agent, state, mode="concurrent", max_transport_retries=1) as job:
                job.add_many(items(4))
                return await job.arun()
        finally:
            await client.close()

    down = asyncio.run(run(f"http://127.0.0.1:{_free_port()}/v1"))
    assert (down.done, down.failed) == (0, 4)
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        up = asyncio.run(run(server.openai_base_url))
        assert (up.done, up.failed) == (4, 0)
        assert len(server.requests) == 4
    with BatchJob(
        AsyncPayloadAgent(OpenAIChatModel(openai.AsyncOpenAI(api_key="t"), "local")),
        state,
        mode="concurrent",
    ) as job:
        assert [(r.status, r.attempts, r.error) for r in job.results()] == [("done", 1, None)] * 4


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_a_whole_batch_failure_keeps_the_providers_message_and_is_retried(
    tmp_path: Path, api: str
) -> None:
    """A batch the provider fails as a whole (twice: out of transport retries): each item's
    error carries the provider's message; run() again submits them anew and they are done."""
    state = tmp_path / "job.sqlite"
    why = "the input file has an invalid line (line 3: model not found)"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        server.batch_fail = lambda number: why if number <= 2 else None
        agent = PayloadAgent(make_model(server, api))
        with BatchJob(agent, state, max_transport_retries=1) as job:
            job.add_many(items(3))
            assert job.run(poll_interval=0).failed == 3
            errors = [r.error for r in job.results()]
            assert all(e is not None and why in e and "after 2 tries" in e for e in errors)
            assert job.run(poll_interval=0).done == 3
        assert server.batches_created == 3


def test_retry_failed_gives_model_failures_a_new_try(tmp_path: Path) -> None:
    """Items the model failed stay failed on a plain run(); retry_failed() sends them again
    with a fresh correction budget, and their earlier attempts stay in their usage."""
    state = tmp_path / "job.sqlite"
    fixed = [False]
    with FakeProviderServer(handler=lambda r: GOOD if fixed[0] else BROKEN) as server:
        agent = PayloadAgent(make_model(server, "chat"), max_retries=1)
        with BatchJob(agent, state) as job:
            job.add_many(items(2))
            assert job.run(poll_interval=0).failed == 2
            assert job.run(poll_interval=0).failed == 2
            assert server.batches_created == 2
            fixed[0] = True
            assert job.retry_failed() == 2
            assert job.progress().pending == 2
            final = job.run(poll_interval=0)
            assert (final.done, final.failed) == (2, 0)
            assert [(r.status, r.attempts, r.usage.requests) for r in job.results()] == [
                ("done", 3, 3)
            ] * 2
            assert job.retry_failed() == 0


def test_cli_retry_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`agent-payload batch --retry-failed` is retry_failed() before the run."""
    from agent_payload.cli import main

    inputs = write_items(tmp_path / "items.jsonl", items(2))
    fixed = [False]
    with FakeProviderServer(handler=lambda r: GOOD if fixed[0] else BROKEN) as server:
        use_server(monkeypatch, server)
        argv = batch_argv(tmp_path, inputs, "--poll-interval", "0", "--no-progress")
        assert main(argv, stderr=io.StringIO()) == 1
        fixed[0] = True
        assert main(argv, stderr=io.StringIO()) == 1  # failed by the model: not retried
        err = io.StringIO()
        assert main([*argv, "--retry-failed"], stderr=err) == 0
        assert "2 failed item(s) sent again" in err.getvalue()
        assert "2 done, 0 failed, 0 pending" in err.getvalue()


# -- 4. input the job must refuse --------------------------------------------------------------


def test_cli_duplicate_and_invalid_ids_are_a_usage_error(tmp_path: Path) -> None:
    """Ids given twice (also 1 and "1"), and ids that are not strings (null, 1), are exit 2
    with every line named; no state file is created."""
    from agent_payload.cli import main

    lines = [
        {"id": "a", "payload": {}, "task": "x"},
        {"id": 1, "payload": {}, "task": "x"},
        {"id": "a", "payload": {}, "task": "x"},
        {"id": "1", "payload": {}, "task": "x"},
        {"id": None, "payload": {}, "task": "x"},
        {"id": "", "payload": {}, "task": "x"},
    ]
    inputs = write_items(tmp_path / "items.jsonl", lines)
    err = io.StringIO()
    assert main(batch_argv(tmp_path, inputs, model="openai:m"), stderr=err) == 2
    text = err.getvalue()
    assert "items.jsonl, line 2: the id must be a string, found 1" in text
    assert "items.jsonl, line 3: the id 'a' was given on line 1 already" in text
    assert "items.jsonl, line 5: the id must be a string, found null" in text
    assert "items.jsonl, line 6: the id is empty" in text
    assert "line 4" not in text  # "1" is an id of its own (1 is refused, not collapsed)
    assert not (tmp_path / "s.sqlite").exists()


def test_a_changed_item_on_resume_is_refused(tmp_path: Path) -> None:
    """Resuming with another payload or task for a stored id is a UsageError naming the id
    and what changed; nothing is added. The same items again are skipped (0 new)."""
    with (
        FakeProviderServer(handler=lambda r: GOOD) as server,
        BatchJob(PayloadAgent(make_model(server, "chat")), tmp_path / "j.sqlite") as job,
    ):
        assert job.add_many(items(3)) == 3
        assert job.add_many(items(3)) == 0
        changed = items(4)
        changed[1]["payload"] = {"sku": 1, "price": 11}
        changed[2]["task"] = "set the price to 30"
        with pytest.raises(UsageError, match=r"'sku-1' \(payload\), 'sku-2' \(task\)"):
            job.add_many(changed)
        assert job.progress().total == 3
        with pytest.raises(UsageError, match="items 1 and 2 have the same id 'x'"):
            job.add_many([("x", {}, "t"), ("x", {}, "t")])


def test_cli_changed_item_on_resume_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_payload.cli import main

    inputs = write_items(tmp_path / "items.jsonl", items(2))
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        use_server(monkeypatch, server)
        argv = batch_argv(tmp_path, inputs, "--poll-interval", "0", "--no-progress")
        assert main(argv, stderr=io.StringIO()) == 0
        write_items(inputs, items(2, task="set the price to 9"))
        err = io.StringIO()
        assert main(argv, stderr=err) == 2
        assert "'sku-0' (task), 'sku-1' (task)" in err.getvalue()


# -- 5. state files ----------------------------------------------------------------------------


def test_another_applications_database_is_refused_untouched(tmp_path: Path) -> None:
    """An SQLite database of another application given as the state file: BatchStateError
    naming it; its bytes are unchanged and no journal files appear."""
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO users (name) VALUES ('ada')")
    db.close()
    before = other.read_bytes()
    with (
        FakeProviderServer(handler=lambda r: GOOD) as server,
        pytest.raises(BatchStateError, match=r"app\.db: an SQLite database of another app"),
    ):
        BatchJob(PayloadAgent(make_model(server, "chat")), other)
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def _finished_job(server: FakeProviderServer, state: Path) -> None:
    with BatchJob(PayloadAgent(make_model(server, "chat")), state) as job:
        job.add_many(items(50))
        job.run(poll_interval=0)


def test_a_damaged_state_file_is_a_batch_state_error(tmp_path: Path) -> None:
    """Pages overwritten in the middle of the file: opening or reading it is a BatchStateError
    naming the file, never a raw sqlite3.DatabaseError."""
    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        _finished_job(server, state)
        data = bytearray(state.read_bytes())
        assert len(data) > 4 * 4096
        data[4096 : len(data) - 100] = b"\xa5" * (len(data) - 4196)
        state.write_bytes(bytes(data))
        with (
            pytest.raises(BatchStateError, match=r"job\.sqlite: .*(damaged|cannot)"),
            BatchJob(PayloadAgent(make_model(server, "chat")), state) as job,
        ):
            list(job.results())


def test_a_damaged_column_is_a_batch_state_error(tmp_path: Path) -> None:
    """A JSON column that does not decode: results() and run() say which file and which item."""
    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        _finished_job(server, state)
        with sqlite3.connect(state) as db:
            db.execute("UPDATE items SET result = '{\"price\":' WHERE id = 'sku-7'")
            db.execute("UPDATE items SET status = 'pending', payload = '[' WHERE id = 'sku-9'")
        db.close()
        with BatchJob(PayloadAgent(make_model(server, "chat")), state) as job:
            with pytest.raises(BatchStateError, match=r"job\.sqlite: item 'sku-7' cannot be read"):
                list(job.results())
            with pytest.raises(BatchStateError, match=r"job\.sqlite: item #10 cannot be read"):
                job.run(poll_interval=0)


def test_a_type_named_in_the_state_is_never_imported(tmp_path: Path, monkeypatch: Any) -> None:
    """The state names a payload type by module: results() does not import that module (it
    could be anything on sys.path); it asks for the type in BatchJob(types=...)."""
    (tmp_path / "planted_module.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass Thing: pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        _finished_job(server, state)
        with sqlite3.connect(state) as db:
            db.execute("UPDATE items SET model_type = 'planted_module:Thing'")
        db.close()
        with (
            BatchJob(PayloadAgent(make_model(server, "chat")), state) as job,
            pytest.raises(ConfigurationError, match=r"planted_module:Thing.*types=\[\.\.\.\]"),
        ):
            list(job.results())
    assert not (tmp_path / "imported").exists()
    assert "planted_module" not in sys.modules


# -- 6. results files --------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_a_malformed_results_line_fails_only_its_item(tmp_path: Path, api: str) -> None:
    """One results line cut short: the other items are applied, that item is a transport
    failure whose error names the line and batch (with no retry left: failed); a run() again
    retries it. No error claims that nothing was applied."""
    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        server.batch_result_line = lambda line: line[:25] if "-i3-r1" in line else line
        agent = PayloadAgent(make_model(server, api))
        with BatchJob(agent, state, max_transport_retries=0) as job:
            job.add_many(items(5))
            final = job.run(poll_interval=0)
            assert (final.done, final.failed) == (4, 1)
            failed = [r for r in job.results() if r.status == "failed"]
            assert [r.id for r in failed] == ["sku-2"]
            error = failed[0].error
            assert error is not None and "is not a batch result" in error
            assert "line 3 of the" in error and "batch" in error
            assert job.run(poll_interval=0).done == 5


# -- 7. the command line -----------------------------------------------------------------------


def test_cli_ctrl_c_says_the_state_is_saved_and_progress_names_the_batches(
    tmp_path: Path,
) -> None:
    """SIGINT while the job waits on its batch: exit 130 and a message that the state is saved
    and how to resume; the progress lines name the provider's batch id; the same command then
    finishes the job without submitting again."""
    inputs = write_items(tmp_path / "items.jsonl", items(3))
    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        server.batch_polls = 10**9
        # A process started by an xdist worker inherits SIGINT ignored: restore Python's handler
        cli = (
            "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from agent_payload.cli import main; sys.exit(main(sys.argv[1:]))"
        )
        argv = [sys.executable, "-c", cli, "batch", "--model", "openai:gpt-fake",
                "--input", str(inputs), "--state", str(state), "-o", str(tmp_path / "o.jsonl"),
                "--poll-interval", "0.01"]  # fmt: skip
        run_env = {**env(), "OPENAI_BASE_URL": server.openai_base_url, "OPENAI_API_KEY": "t"}
        seen = []
        with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=run_env) as proc:
            assert proc.stderr is not None
            try:
                for line in proc.stderr:
                    seen.append(line)
                    if "polling" in line:
                        break
                proc.send_signal(signal.SIGINT)
                rest = proc.stderr.read()
                proc.wait()
            finally:
                if proc.poll() is None:
                    proc.kill()
        assert proc.returncode == 130
        assert "batch_" in "".join(seen) and "fake" in "".join(seen)
        assert f"interrupted; the job's state is saved in {state}" in rest
        assert "run the same command again to resume" in rest
        assert "Traceback" not in rest
        server.batch_polls = 0
        done = subprocess.run(argv, capture_output=True, text=True, env=run_env, check=False)
        assert done.returncode == 0, done.stderr
        assert server.batches_created == 1


def test_cli_missing_sdk_is_exit_2_as_in_run(tmp_path: Path) -> None:
    """Without the openai SDK, `batch` exits 2 like `run` (both a usage error naming the extra)."""
    inputs = write_items(tmp_path / "items.jsonl", items(1))
    payload = tmp_path / "p.json"
    payload.write_text("{}")
    code = f"""
import sys
sys.modules["openai"] = None
from agent_payload.cli import main
batch = main(["batch", "--model", "openai:m", "--input", {str(inputs)!r}, "--state",
              {str(tmp_path / "s.sqlite")!r}, "-o", {str(tmp_path / "o.jsonl")!r}])
run = main(["run", "--model", "openai:m", {str(payload)!r}, "set x"])
print(batch, run)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env(), check=False
    )
    assert done.stdout.split() == ["2", "2"], done.stderr
    assert done.stderr.count("pip install 'agent-payload[openai]'") == 2
    assert not (tmp_path / "s.sqlite").exists()


class Price(BaseModel):
    sku: int
    price: int


def test_a_typed_job_resumed_without_its_type_stops_before_sending(tmp_path: Path) -> None:
    """Typed items added by an earlier job object: a job that does not know the type stops
    at run() with a ConfigurationError naming it, before anything is sent and without failing
    any item; with types=[...] it runs."""
    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=lambda r: GOOD) as server:
        with BatchJob(PayloadAgent(make_model(server, "chat")), state) as job:
            job.add("a", Price(sku=1, price=10), "set the price to 20")
        with BatchJob(PayloadAgent(make_model(server, "chat")), state) as job:
            with pytest.raises(ConfigurationError, match=r"test_batch_jobs:Price"):
                job.run(poll_interval=0)
            assert job.progress().pending == 1
        assert server.batches_created == 0
        agent = PayloadAgent(make_model(server, "chat"))
        with BatchJob(agent, state, types=[Price]) as job:
            assert job.run(poll_interval=0).done == 1
            assert next(job.results()).payload == Price(sku=1, price=20)
