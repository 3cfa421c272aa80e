"""Anthropic's Message Batches API behind ``BatchBackend``. A batch carries no metadata, so
``find`` takes one created since the attempt with as many requests, whose results name the
job's custom ids (which carry its tag)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from anthropic.types.messages import MessageBatchIndividualResponse
from pydantic import ValidationError

from agent_payload.errors import ProviderError
from agent_payload.providers.anthropic import AnthropicModel, map_anthropic_errors
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.providers.batching import BatchStatus, LineError, custom_id_of, request_body

__all__ = ["AnthropicBatchBackend"]

_COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")


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

    def find(
        self, tag: str, entries: Sequence[str], *, since: float
    ) -> list[tuple[str, bool | None]]:
        ids = {json.loads(entry)["custom_id"] for entry in entries}
        found: list[tuple[str, bool | None]] = []
        with map_anthropic_errors(self.model.model_name, self.client):
            candidates = []
            for batch in self.client.messages.batches.list(limit=100):
                created = batch.created_at.timestamp()
                if created < since - 300:
                    break  # newest first
                counts = batch.request_counts
                total = sum(getattr(counts, n) for n in _COUNTS)
                if created >= since - 5 and total == len(ids):
                    candidates.append(str(batch.id))
            for batch_id in candidates:
                if not self.poll(batch_id).ended:
                    found.append((batch_id, None))  # its results, and so its ids, come at the end
                    continue
                named = {custom_id_of(line) for line in self._lines(batch_id)} - {None}
                if named & ids:
                    found.append((batch_id, True))
                elif not named:
                    found.append((batch_id, False))  # ended, and no line says whose it is
        return found

    def poll(self, batch_id: str) -> BatchStatus:
        with map_anthropic_errors(self.model.model_name, self.client):
            batch = self.client.messages.batches.retrieve(batch_id)
        return BatchStatus(
            batch_id=batch_id,
            status=str(batch.processing_status),
            ended=batch.processing_status == "ended",
        )

    def _lines(self, batch_id: str) -> list[str]:
        with (
            map_anthropic_errors(self.model.model_name, self.client),
            self.client.messages.batches.with_streaming_response.results(batch_id) as response,
        ):
            return [line for line in response.iter_lines() if line.strip()]

    def results(
        self, batch_id: str, request: ModelRequest
    ) -> Iterator[tuple[str | None, ModelReply | LineError]]:
        for number, text in enumerate(self._lines(batch_id), 1):
            try:
                line = MessageBatchIndividualResponse.model_validate_json(text)
            except ValidationError as exc:
                where = f"line {number} of the results of batch {batch_id}"
                problem = f"{where} is not a batch result ({exc.errors()[0]['msg']}): {text:.120}"
                yield custom_id_of(text), LineError(problem, "unreadable_result")
                continue
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
