"""The records of a batch job: what it hands out (``BatchProgress``, ``BatchItemResult``) and
the JSON its state file keeps in columns (replies, reports, problems), with the payload types
resolved from the job's own registry (never imported by a name read from the file)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent_payload._jsontext import compact
from agent_payload.errors import ConfigurationError
from agent_payload.providers.base import ModelReply
from agent_payload.result import AgentResult
from agent_payload.usage import Usage

__all__ = [
    "BatchItemResult",
    "BatchProgress",
    "Phase",
    "Status",
    "problems_json",
    "reply_from",
    "reply_json",
    "report_json",
    "resolve_type",
    "type_name",
]

Status = Literal["pending", "done", "failed"]
Phase = Literal["prepared", "submitted", "polling", "collected", "finished"]


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """Counts of a job, given to the ``progress`` callback and returned by ``run()``."""

    phase: Phase
    round: int
    submitted: int
    """Request lines sent so far, over all rounds."""
    done: int
    failed: int
    pending: int
    usage: Usage
    cost: float | None = None
    """Estimated cost in the currency of ``prices`` (None without prices)."""
    batches: tuple[str, ...] = ()
    """The provider's ids of this round's batches submitted so far (batch mode)."""

    @property
    def total(self) -> int:
        return self.done + self.failed + self.pending


@dataclass(frozen=True, slots=True)
class BatchItemResult:
    """One item of a job: where it stands and what came of it."""

    id: str
    status: Status
    payload: Any
    """The updated payload when ``done`` (of the kind added: dict, list or pydantic model),
    else the payload as added."""
    change_request: dict[str, Any] | None
    report: dict[str, Any] | None
    """``{"changes": [{"op", "path", "old", "new"}...], "warnings": [...], "reasoning"}``."""
    attempts: int
    usage: Usage
    error: str | None
    problems: tuple[dict[str, Any], ...] = ()


def type_name(kind: type) -> str:
    return f"{kind.__module__}:{kind.__qualname__}"


def resolve_type(name: str, types: Mapping[str, type]) -> type:
    """The payload type a state file names, from the job's own types only: a name read from the
    file is never imported (a state file must not choose the code that runs)."""
    if name in types:
        return types[name]
    raise ConfigurationError(
        f"BatchJob: the state file holds payloads of type {name}, which this job does not know; "
        "pass it in BatchJob(types=[...]) (types named in a state file are never imported)"
    )


def reply_json(reply: ModelReply) -> str:
    return compact(
        {
            "text": reply.text,
            "finish_reason": reply.finish_reason,
            "truncated": reply.truncated,
            "refusal": reply.refusal,
            "usage": [
                reply.usage.input_tokens,
                reply.usage.output_tokens,
                reply.usage.cached_input_tokens,
                reply.usage.cache_write_input_tokens,
            ],
            "model_name": reply.model_name,
        }
    )


def reply_from(text: str) -> ModelReply:
    data = json.loads(text)
    usage = data.get("usage") or [0, 0]
    n = [*(int(count) for count in usage), 0, 0]  # [input, output, cached, cache writes]
    return ModelReply(
        text=data["text"],
        finish_reason=data.get("finish_reason"),
        truncated=bool(data.get("truncated")),
        refusal=data.get("refusal"),
        usage=Usage(n[0], n[1], 1, n[2], n[3]),
        model_name=data.get("model_name", data.get("model")),  # "model": before 0.2
    )


def report_json(result: AgentResult[Any]) -> str:
    report = result.report
    return compact(
        {
            "changes": [
                {"op": c.op, "path": list(c.path), "old": c.old, "new": c.new}
                for c in report.changes
            ],
            "warnings": [
                {"code": w.code, "path": w.path, "message": w.message} for w in report.warnings
            ],
            "reasoning": result.reasoning,
        }
    )


def problems_json(error: BaseException) -> str:
    problems = getattr(error, "problems", None) or []
    return compact(
        [{"kind": p.kind, "code": p.code, "path": p.path, "message": p.message} for p in problems]
    )
