"""The protocol between ``agent_payload.batch`` and a provider's batch API (no SDK here): a
batch line is the adapter's own request and a result is read by its own ``parse_reply``, so a
batch reply is judged exactly as a live one. Guide: docs/batch.md."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent_payload.errors import ConfigurationError
from agent_payload.providers.base import Model, ModelReply, ModelRequest

__all__ = [
    "BatchBackend",
    "BatchStatus",
    "LineError",
    "backend_for",
    "custom_id_of",
    "entries_hash",
    "request_body",
]

_SDK_ONLY = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


def request_body(params: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body an SDK ``create(**params)`` call sends: SDK-only keyword arguments
    dropped, ``extra_body`` merged in (as the SDK does)."""
    body = {k: v for k, v in params.items() if k not in _SDK_ONLY}
    extra = params.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


@dataclass(frozen=True, slots=True)
class LineError:
    """A request of a batch that produced no reply (an error line, expired, cancelled)."""

    message: str
    code: str | None = None
    status_code: int | None = None


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """Where a provider batch stands: ``ended`` once its results can be read."""

    batch_id: str
    status: str
    ended: bool
    failed_whole: bool = False
    """True when the provider refused the batch as a whole (every line is an error)."""
    message: str | None = None


class BatchBackend(Protocol):
    provider: str
    max_requests: int
    max_bytes: int

    def entry(self, custom_id: str, request: ModelRequest) -> dict[str, Any]:
        """One batch line for ``request`` (JSON data)."""

    def submit(self, entries: Sequence[str], *, tag: str) -> str:
        """Create a batch of ``entries`` (each the JSON text of an ``entry()``) tagged
        ``tag``; return its id."""

    def find(
        self, tag: str, entries: Sequence[str], *, since: float
    ) -> list[tuple[str, bool | None]]:
        """Batches created since ``since`` (a Unix time) that may be the one submitted under
        ``tag`` with ``entries``, each with whether it is (None: cannot tell yet, still
        running); those known not to be it are left out."""

    def poll(self, batch_id: str) -> BatchStatus: ...

    def results(
        self, batch_id: str, request: ModelRequest
    ) -> Iterator[tuple[str | None, ModelReply | LineError]]:
        """``(custom_id, reply or error)`` for every line of an ended batch; an unreadable line
        is a ``LineError`` for its custom id (``None`` when it names none), never a stop."""


def custom_id_of(line: str) -> str | None:
    """The ``custom_id`` a results line names, None when it names none (not JSON, cut short)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    custom_id = record.get("custom_id") if isinstance(record, dict) else None
    return custom_id if isinstance(custom_id, str) and custom_id else None


def entries_hash(entries: Sequence[str]) -> str:
    """The SHA-256 of a batch's request lines (as submitted, in order)."""
    digest = hashlib.sha256()
    for entry in entries:
        digest.update(entry.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def backend_for(model: Model) -> BatchBackend:
    """The batch backend for a provider adapter with a sync client (``ConfigurationError``
    for anything else: a scripted model, an async client, your own ``Model``)."""
    kind = type(model).__name__
    if kind in ("OpenAIChatModel", "OpenAIResponsesModel"):
        from agent_payload.providers.openai_batch import OpenAIBatchBackend

        return OpenAIBatchBackend(model)  # type: ignore[arg-type]
    if kind == "AnthropicModel":
        from agent_payload.providers.anthropic_batch import AnthropicBatchBackend

        return AnthropicBatchBackend(model)  # type: ignore[arg-type]
    raise ConfigurationError(
        f"BatchJob(mode='batch'): the agent's model is a {kind}; the providers' batch APIs "
        "need an OpenAI or Anthropic adapter on a sync client (openai.OpenAI / "
        "anthropic.Anthropic). Use mode='concurrent' with an AsyncPayloadAgent for other "
        "models or servers without a batch API."
    )
