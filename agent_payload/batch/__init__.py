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
budget, or refused twice is ``failed`` with the last problems (``retry_failed()`` gives such
items a fresh try). A request that got no reply at all (a batch error line, an unreadable
results line, an expired or failed batch, a provider error in concurrent mode) is a transport
failure: retried in the next round up to ``max_transport_retries`` times, then ``failed`` with
the provider's error; the next ``run()`` tries those items again (a ``run()`` resuming one that
a crash stopped carries on as that one would have). Transport failures do not count as model
attempts.

**The state file is the only truth** (SQLite, WAL mode, marked as this format by its
``application_id``: another application's database is refused untouched): items, every request
line with its round and chunk, every raw reply, results. One ``run()`` at a time holds it (an OS
lock on ``<state>.lock``; another is refused with ``BatchStateError``). Each step is one
transaction, so the process may be killed at any moment and ``run()`` called again:

* a round is prepared (its request lines written) in one transaction before anything is sent;
  each line's custom id carries the job's own random tag;
* before a chunk is submitted its state becomes ``submitting`` with the time; once the provider
  answers, the batch id is recorded. If the job died in between, the next ``run()`` looks for
  the batch and adopts it only when it is provably this chunk's (OpenAI: the tag and request
  hash in the batch's ``metadata``; Anthropic: a batch of that size created since then whose
  results name this job's custom ids, waited for while it runs); anything ambiguous is a
  ``BatchStateError`` naming the candidates rather than a guess;
* a reply is stored and judged in one transaction, at most once per request line: re-reading a
  batch's results after a crash skips the lines already applied.

In concurrent mode a request that was in flight when the process died has no stored reply; it
is sent again on resume (its answer was never received, so nothing of it was applied).

**Progress.** ``run(progress=callback)`` calls ``callback(BatchProgress)`` after each step
(``phase``: ``prepared``, ``submitted``, ``polling``, ``collected``, ``finished``) with the
counts, tokens and provider batch ids so far and the estimated cost when ``prices`` are given.
Raising from the callback stops ``run()`` at that point; the state file stays consistent.

Where each part lives: ``_job`` (``BatchJob``: the rounds and the judging), ``_state`` (the
SQLite file: its format, marker and lease), ``_records`` (the records a job hands out and the
JSON kept in the file's columns).
"""

from agent_payload.batch._job import BatchJob
from agent_payload.batch._records import BatchItemResult, BatchProgress
from agent_payload.batch._state import BatchStateError

__all__ = ["BatchItemResult", "BatchJob", "BatchProgress", "BatchStateError"]
