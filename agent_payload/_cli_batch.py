"""``agent-payload batch``: a resumable batch job (``agent_payload.batch``) from a JSONL file:
reading the items, choosing the agent, drawing progress, writing the results."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agent_payload import _jsontext
from agent_payload._files import atomic_write_text, loads_json_file
from agent_payload._jsondata import json_data
from agent_payload.agent import AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import ProviderError, UsageError
from agent_payload.providers import close_client, infer_model

if TYPE_CHECKING:  # imported when the command runs: `agent-payload --help` needs no SQLite
    from agent_payload.batch import BatchJob, BatchProgress

__all__ = ["TEXTS", "add_arguments"]

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


TEXTS = dict(
    help="edit many payloads through the provider's batch API (resumable)",
    description="Carry out each item's task on its payload through the provider's batch "
    "API (half price, results within a day), with the correction loop carried across "
    'rounds. Each line of --input is {"id": ..., "payload": ..., "task": ...}. The '
    "job's state lives in --state: run the same command again to resume after an "
    "interruption; nothing is submitted or applied twice.",
    epilog="examples:\n"
    "  agent-payload batch --model openai:gpt-5.4-mini --input items.jsonl \\\n"
    "      --state job.sqlite -o results.jsonl\n"
    "  agent-payload batch --model openai:local --concurrent 32 --input items.jsonl \\\n"
    "      --state job.sqlite -o results.jsonl   # vLLM, Ollama, LiteLLM: no batch API\n\n"
    'each line of the output: {"id", "status" (done | failed | pending), "payload", '
    '"change_request",\n"attempts", "usage", "error"}.\n\n'
    "an interrupted run (Ctrl-C, a provider error) keeps its state: run the same command "
    "again to resume.\nitems that failed for want of a reply (an outage) are sent again by "
    "the next run;\n--retry-failed sends the items the model failed again too.\n\n"
    "exit status: 0 every item done; 1 some item failed or is still pending, or a provider "
    "error; 2 usage or input error (bad --input, a changed item, a --state file that is "
    "not this job's or is in use, a missing SDK); 130 interrupted.",
)


def add_arguments(batch: argparse.ArgumentParser) -> None:
    """The options of ``batch`` but the agent's (its parser made with ``TEXTS``)."""
    batch.add_argument("--input", required=True, metavar="FILE", help="items, one JSON per line")
    batch.add_argument("--state", required=True, metavar="FILE", help="the job's SQLite file")
    batch.add_argument("-o", "--output", required=True, metavar="FILE", help="results (JSONL)")
    batch.add_argument(
        "--concurrent",
        type=int,
        metavar="N",
        help="no batch API: send N requests at a time through the async client instead",
    )
    batch.add_argument(
        "--poll-interval",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds between polls of a running batch (default: 30)",
    )
    batch.add_argument("--max-rounds", type=int, metavar="N", help="stop after N more rounds")
    batch.add_argument(
        "--retry-failed",
        action="store_true",
        help="send the items that failed (the model's replies never passed) again, each with a "
        "fresh correction budget",
    )
    batch.add_argument("--no-progress", action="store_true", help="no progress display")
    batch.set_defaults(func=lambda args, stdin, stdout, stderr: _cmd(args, stderr))


def _items(path: str) -> list[dict[str, Any]]:
    """The items of ``path``; every bad id is named at once."""
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    items: list[dict[str, Any]] = []
    problems: list[str] = []
    first: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            item = loads_json_file(line)  # duplicate keys refused, numbers as written
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}, column {exc.colno}: invalid JSON: {exc.msg}") from exc
        if not isinstance(item, dict) or not {"id", "payload", "task"} <= set(item):
            raise UsageError(f"{where}: expected an object with id, payload and task")
        item_id = item["id"]
        if not isinstance(item_id, str):
            problems.append(f"{where}: the id must be a string, found {json.dumps(item_id)}")
        elif not item_id:
            problems.append(f"{where}: the id is empty")
        elif item_id in first:
            problems.append(
                f"{where}: the id {item_id!r} was given on line {first[item_id]} already"
            )
        else:
            first[item_id] = number
        items.append(item)
    if problems:
        more = [f"... and {len(problems) - 20} more"] if len(problems) > 20 else []
        raise UsageError(
            "every item needs an id of its own, a non-empty string:\n  "
            + "\n  ".join(problems[:20] + more)
        )
    return items


def _cmd(args: argparse.Namespace, stderr: TextIO) -> int:
    from agent_payload.batch import BatchJob, BatchStateError

    if args.concurrent is not None and args.concurrent < 1:
        raise UsageError(f"--concurrent: expected 1 or more, found {args.concurrent}")
    concurrent = args.concurrent is not None
    items = _items(args.input)
    show = _Progress(stderr, len(items), enabled=not args.no_progress)
    model: Any = None
    try:
        model = infer_model(args.model, async_client=concurrent)
        kind = AsyncPayloadAgent if concurrent else PayloadAgent
        agent = kind(model, max_retries=args.max_retries, output_mode=args.output_mode)
        with BatchJob(
            agent,
            args.state,
            mode="concurrent" if concurrent else "batch",
            concurrency=args.concurrent or 32,
        ) as job:
            added = job.add_many(items)
            if added < len(items):
                stderr.write(
                    f"resuming {args.state}: {len(items) - added} item(s) already in the job\n"
                )
            if args.retry_failed:
                stderr.write(f"{job.retry_failed()} failed item(s) sent again\n")
            if concurrent:
                final = asyncio.run(_arun(job, model, args.max_rounds, show))
            else:
                final = job.run(
                    poll_interval=args.poll_interval, max_rounds=args.max_rounds, progress=show
                )
            lines = _result_lines(job)
    except BatchStateError as exc:  # a usage error, as a missing SDK (ConfigurationError)
        raise UsageError(str(exc)) from exc
    except KeyboardInterrupt:
        stderr.write(
            f"\ninterrupted; the job's state is saved in {args.state}: run the same command "
            "again to resume (nothing is submitted or applied twice)\n"
        )
        return EXIT_INTERRUPTED
    except ProviderError as exc:
        stderr.write(
            f"provider error: {exc}\nthe job's state is saved in {args.state}: run the "
            "same command again to resume\n"
        )
        return EXIT_FAILED
    finally:
        show.close()
        close_client(model)  # an async client is closed by _arun, in its loop
    atomic_write_text(args.output, "".join(line + "\n" for line in lines))
    cached_tokens = final.usage.cached_input_tokens
    cached = f" ({cached_tokens} cached)" if cached_tokens else ""
    stderr.write(
        f"{final.done} done, {final.failed} failed, {final.pending} pending; "
        f"{final.usage.input_tokens} input{cached} + {final.usage.output_tokens} output tokens; "
        f"results in {args.output}\n"
    )
    return EXIT_OK if final.failed == 0 and final.pending == 0 else EXIT_FAILED


def _result_lines(job: BatchJob) -> list[str]:
    """The output file's lines: one JSON object per item."""
    return [
        _jsontext.dumps(  # numbers as the items file wrote them
            {
                "id": r.id,
                "status": r.status,
                "payload": json_data(r.payload),
                "change_request": r.change_request,
                "attempts": r.attempts,
                "usage": {
                    "input": r.usage.input_tokens,
                    "output": r.usage.output_tokens,
                    "cached_input": r.usage.cached_input_tokens,
                },
                "error": r.error,
            },
            literals=True,
        )
        for r in job.results()
    ]


async def _arun(
    job: BatchJob, model: Any, max_rounds: int | None, show: Callable[[BatchProgress], None]
) -> BatchProgress:
    try:
        return await job.arun(max_rounds=max_rounds, progress=show)
    finally:
        close = getattr(getattr(model, "client", None), "close", None)
        if close is not None:
            await close()


class _Progress:
    """A tqdm bar when tqdm is installed (the ``progress`` extra) and stderr is a terminal,
    else a line per step."""

    def __init__(self, stream: TextIO, total: int, *, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.bar: Any = None
        if enabled and stream.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, file=stream, unit="item", dynamic_ncols=True)

    def __call__(self, p: BatchProgress) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.n = p.done + p.failed
            self.bar.set_postfix(
                round=p.round,
                failed=p.failed,
                pending=p.pending,
                tokens=p.usage.total_tokens,
                batches=",".join(p.batches) or "-",
            )
            return
        if p.phase != "collected" or p.pending == 0:
            batches = f" (batches {', '.join(p.batches)})" if p.batches else ""
            self.stream.write(
                f"round {p.round} {p.phase}: {p.submitted} submitted, {p.done} done, "
                f"{p.failed} failed, {p.pending} pending{batches}\n"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
