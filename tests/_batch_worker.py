"""A batch job in a process of its own, for the tests that need two (``test_batch_jobs.py``).

``python tests/_batch_worker.py SPEC`` runs ``run(spec)`` and prints its outcome as one JSON
line (exit 3 for an error). SPEC: ``api`` ("chat" | "anthropic"), ``url`` (the fake server's),
``state``, ``job`` (a name the items carry, so that the model's answer says whose request it
was), ``n`` (items), and optionally ``die_at_create`` (the process dies as it sends a batch
create, after the job recorded "submitting") and ``hold`` (at the first "polling" step it
prints ``holding`` and waits for a line on stdin). The outcome: ``{"results": [[id, status,
payload, error], ...]}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from agent_payload import PayloadAgent
from agent_payload.batch import BatchJob, BatchProgress
from agent_payload.errors import AgentPayloadError

DIED_AT_CREATE = 17


def job_items(job: str, n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"item-{i}", "payload": {"job": job, "n": i, "by": None}, "task": "sign it"}
        for i in range(n)
    ]


def _model(spec: dict[str, Any]) -> Any:
    def die_at_create(request: Any) -> None:
        if request.method == "POST" and request.url.path.endswith("/batches"):
            os._exit(DIED_AT_CREATE)

    hooks = {"request": [die_at_create]} if spec.get("die_at_create") else {}
    if spec["api"] == "anthropic":
        import anthropic

        from agent_payload.providers.anthropic import AnthropicModel

        client = anthropic.Anthropic(
            base_url=spec["url"],
            api_key="test",
            max_retries=0,
            http_client=anthropic.DefaultHttpxClient(event_hooks=hooks),
        )
        return AnthropicModel(client, "claude-fake")
    import openai

    from agent_payload.providers.openai import OpenAIChatModel

    client = openai.OpenAI(
        base_url=spec["url"] + "/v1",
        api_key="test",
        max_retries=0,
        http_client=openai.DefaultHttpxClient(event_hooks=hooks),
    )
    return OpenAIChatModel(client, "gpt-fake")


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the job SPEC describes; its results, or the error that stopped it."""
    held = [False]

    def progress(p: BatchProgress) -> None:
        if spec.get("hold") and p.phase == "polling" and not held[0]:
            held[0] = True
            print("holding", flush=True)
            sys.stdin.readline()

    model = _model(spec)
    try:
        with BatchJob(PayloadAgent(model), spec["state"]) as job:
            job.add_many(job_items(spec["job"], spec["n"]))
            job.run(poll_interval=0, progress=progress)
            return {"results": [[r.id, r.status, r.payload, r.error] for r in job.results()]}
    except AgentPayloadError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        model.client.close()


def main() -> int:
    outcome = run(json.loads(sys.argv[1]))
    print(json.dumps(outcome), flush=True)
    return 3 if "error" in outcome else 0


if __name__ == "__main__":
    sys.exit(main())
