"""OpenAI's Batch API (Files + Batches, for Chat Completions and Responses) behind
``BatchBackend``; the tag and the entries' hash go into the batch's ``metadata``, so that a job
that crashed before recording its batch finds it again instead of submitting twice.
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
from agent_payload.providers.batching import (
    BatchStatus,
    LineError,
    custom_id_of,
    entries_hash,
    request_body,
)
from agent_payload.providers.openai import OpenAIChatModel, OpenAIResponsesModel, map_openai_errors

__all__ = ["OpenAIBatchBackend"]

_TAG_KEY = "agent_payload_tag"
_HASH_KEY = "agent_payload_sha256"
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
                metadata={_TAG_KEY: tag, _HASH_KEY: entries_hash(entries)},
            )
        return str(batch.id)

    def find(
        self, tag: str, entries: Sequence[str], *, since: float
    ) -> list[tuple[str, bool | None]]:
        digest = entries_hash(entries)
        found: list[tuple[str, bool | None]] = []
        with map_openai_errors(self.model.model_name, self.client):
            for batch in self.client.batches.list(limit=100):
                if batch.created_at < since - 300:
                    break  # newest first: older batches cannot be ours
                metadata = batch.metadata or {}
                if metadata.get(_TAG_KEY) == tag and metadata.get(_HASH_KEY) == digest:
                    found.append((str(batch.id), True))
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
    ) -> Iterator[tuple[str | None, ModelReply | LineError]]:
        with map_openai_errors(self.model.model_name, self.client):
            batch = self.client.batches.retrieve(batch_id)
            named = (("output", batch.output_file_id), ("error", batch.error_file_id))
            files = [(name, self.client.files.content(f).text) for name, f in named if f]
        for name, text in files:
            for number, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    where = f"line {number} of the {name} file of batch {batch_id}"
                    yield self._line(where, line, request)

    def _line(
        self, where: str, line: str, request: ModelRequest
    ) -> tuple[str | None, ModelReply | LineError]:
        try:
            record = json.loads(line)
            custom_id = record["custom_id"]
            if not isinstance(custom_id, str):
                raise TypeError(f"custom_id {custom_id!r}")
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"{where} is not a batch result ({exc!r}): {line:.120}"
            return custom_id_of(line), LineError(problem, "unreadable_result")
        error = record.get("error")
        response = record.get("response")
        if isinstance(error, dict) and error:
            return custom_id, LineError(str(error.get("message")), error.get("code"))
        if not isinstance(response, dict):
            return custom_id, LineError(f"{where} has neither a response nor an error")
        status = response.get("status_code")
        body = response.get("body")
        if status != 200:
            detail = body.get("error", {}).get("message") if isinstance(body, dict) else None
            code = status if isinstance(status, int) else None
            return custom_id, LineError(str(detail or body), status_code=code)
        kind: Any = Response if self.responses else ChatCompletion
        try:
            parsed = kind.model_validate(body)
            return custom_id, self.model.parse_reply(parsed, request)
        except (ValidationError, ProviderError, AttributeError, TypeError) as exc:
            return custom_id, LineError(f"unreadable response body: {exc}", status_code=status)
