"""OpenAI's Batch API behind ``providers.batching.BatchBackend`` (Chat Completions, Responses).

A batch is a JSONL file uploaded with ``purpose="batch"`` and a ``batches.create`` naming the
endpoint; the tag goes into the batch's ``metadata`` so that a job that crashed between the
create call and recording its answer finds the batch again instead of submitting it twice.
Output and error files are read back line by line; each line's body is validated as the SDK's
own response type and handed to the adapter's ``parse_reply``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from typing import Any

from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from pydantic import ValidationError

from agent_payload.errors import ProviderError
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.providers.batching import BatchStatus, LineError, request_body
from agent_payload.providers.openai import OpenAIChatModel, OpenAIResponsesModel, map_openai_errors

__all__ = ["OpenAIBatchBackend"]

_TAG_KEY = "agent_payload_tag"
_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})


class OpenAIBatchBackend:
    provider = "openai"
    max_requests = 50_000
    max_bytes = 190 * 1024 * 1024  # the API takes 200 MB; keep a margin for the framing

    def __init__(self, model: OpenAIChatModel | OpenAIResponsesModel) -> None:
        self.model = model
        self.client = model.client
        self.responses = isinstance(model, OpenAIResponsesModel)
        self.endpoint = "/v1/responses" if self.responses else "/v1/chat/completions"

    def entry(self, custom_id: str, request: ModelRequest) -> dict[str, Any]:
        body = request_body(self.model.build_params(request))
        return {"custom_id": custom_id, "method": "POST", "url": self.endpoint, "body": body}

    def submit(self, entries: Sequence[str], *, tag: str) -> str:
        data = "".join(entry + "\n" for entry in entries).encode()
        with map_openai_errors(self.model.model_name, self.client):
            uploaded = self.client.files.create(
                file=(f"agent-payload-{tag}.jsonl", io.BytesIO(data)), purpose="batch"
            )
            # No SDK retry of the create: a retry after a lost answer would submit twice. A
            # failed create is resolved by the job through find() (the tag in the metadata).
            batch = self.client.with_options(max_retries=0).batches.create(
                input_file_id=uploaded.id,
                endpoint=self.endpoint,
                completion_window="24h",
                metadata={_TAG_KEY: tag},
            )
        return str(batch.id)

    def find(self, tag: str, *, count: int, since: float) -> list[str]:
        found: list[str] = []
        with map_openai_errors(self.model.model_name, self.client):
            for batch in self.client.batches.list(limit=100):
                if batch.created_at < since - 300:
                    break  # newest first: older batches cannot be ours
                if (batch.metadata or {}).get(_TAG_KEY) == tag:
                    found.append(str(batch.id))
        return found

    def poll(self, batch_id: str) -> BatchStatus:
        with map_openai_errors(self.model.model_name, self.client):
            batch = self.client.batches.retrieve(batch_id)
        message = None
        if batch.errors is not None and batch.errors.data:
            message = "; ".join(str(e.message) for e in batch.errors.data if e.message)
        return BatchStatus(
            batch_id=batch_id,
            status=str(batch.status),
            ended=batch.status in _ENDED,
            failed_whole=batch.status == "failed",
            message=message,
        )

    def results(
        self, batch_id: str, request: ModelRequest
    ) -> Iterator[tuple[str, ModelReply | LineError]]:
        with map_openai_errors(self.model.model_name, self.client):
            batch = self.client.batches.retrieve(batch_id)
            texts = [
                self.client.files.content(file_id).text
                for file_id in (batch.output_file_id, batch.error_file_id)
                if file_id
            ]
        for text in texts:
            for number, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    yield self._line(batch_id, number, line, request)

    def _line(
        self, batch_id: str, number: int, line: str, request: ModelRequest
    ) -> tuple[str, ModelReply | LineError]:
        try:
            record = json.loads(line)
            custom_id = str(record["custom_id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ProviderError(
                f"OpenAI batch {batch_id}: line {number} of its results is not a batch result "
                f"({exc!r}); the job stopped before applying anything of it",
                provider=self.provider,
            ) from exc
        error = record.get("error")
        response = record.get("response")
        if error:
            return custom_id, LineError(str(error.get("message")), error.get("code"))
        if not isinstance(response, dict):
            return custom_id, LineError("the batch line has neither a response nor an error")
        status = response.get("status_code")
        body = response.get("body")
        if status != 200:
            detail = body.get("error", {}).get("message") if isinstance(body, dict) else None
            return custom_id, LineError(str(detail or body), status_code=status)
        kind: Any = Response if self.responses else ChatCompletion
        try:
            parsed = kind.model_validate(body)
            return custom_id, self.model.parse_reply(parsed, request)
        except (ValidationError, ProviderError, AttributeError, TypeError) as exc:
            return custom_id, LineError(f"unreadable response body: {exc}", status_code=status)
