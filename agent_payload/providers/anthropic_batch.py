"""Anthropic's Message Batches API behind ``providers.batching.BatchBackend``.

A message batch carries no metadata, so a job that crashed between the create call and
recording its answer looks for the batch by what it knows: created since the job's own record
of the attempt, with exactly its number of requests. One such batch is adopted; several are
reported (``agent_payload.batch`` refuses to guess and asks the user).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from agent_payload.errors import ProviderError
from agent_payload.providers.anthropic import AnthropicModel, map_anthropic_errors
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.providers.batching import BatchStatus, LineError, request_body

__all__ = ["AnthropicBatchBackend"]


class AnthropicBatchBackend:
    provider = "anthropic"
    max_requests = 100_000
    max_bytes = 250 * 1024 * 1024  # the API takes 256 MB

    def __init__(self, model: AnthropicModel) -> None:
        self.model = model
        self.client = model.client

    def entry(self, custom_id: str, request: ModelRequest) -> dict[str, Any]:
        return {"custom_id": custom_id, "params": request_body(self.model.build_params(request))}

    def submit(self, entries: Sequence[str], *, tag: str) -> str:
        with map_anthropic_errors(self.model.model_name, self.client):
            # No SDK retry of the create (a retry after a lost answer would submit twice).
            client = self.client.with_options(max_retries=0)
            batch = client.messages.batches.create(requests=[json.loads(e) for e in entries])
        return str(batch.id)

    def find(self, tag: str, *, count: int, since: float) -> list[str]:
        found: list[str] = []
        with map_anthropic_errors(self.model.model_name, self.client):
            for batch in self.client.messages.batches.list(limit=100):
                created = batch.created_at.timestamp()
                if created < since - 300:
                    break  # newest first
                counts = batch.request_counts
                total = (
                    counts.processing
                    + counts.succeeded
                    + counts.errored
                    + counts.canceled
                    + counts.expired
                )
                if created >= since - 5 and total == count:
                    found.append(str(batch.id))
        return found

    def poll(self, batch_id: str) -> BatchStatus:
        with map_anthropic_errors(self.model.model_name, self.client):
            batch = self.client.messages.batches.retrieve(batch_id)
        return BatchStatus(
            batch_id=batch_id,
            status=str(batch.processing_status),
            ended=batch.processing_status == "ended",
        )

    def results(
        self, batch_id: str, request: ModelRequest
    ) -> Iterator[tuple[str, ModelReply | LineError]]:
        with map_anthropic_errors(self.model.model_name, self.client):
            lines = list(self.client.messages.batches.results(batch_id))
        for line in lines:
            result = line.result
            if result.type == "succeeded":
                try:
                    yield line.custom_id, self.model.parse_reply(result.message, request)
                except ProviderError as exc:
                    yield line.custom_id, LineError(f"unreadable message: {exc}")
            elif result.type == "errored":
                inner = result.error.error
                yield line.custom_id, LineError(str(inner.message), str(inner.type))
            else:
                yield line.custom_id, LineError(f"the request was {result.type}", result.type)
