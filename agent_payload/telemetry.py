"""OpenTelemetry spans for agent runs (the optional extra ``otel``), as the run's hooks: a span
per run, a child per attempt and per read turn, with the GenAI conventions. See docs/agent.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent_payload._drive import Hooks

if TYPE_CHECKING:
    from agent_payload._loop import RunState
    from agent_payload.providers.base import ModelReply, ModelRequest
    from agent_payload.report import Problem
    from agent_payload.result import AgentResult

__all__ = ["CAPTURE_CONTENT", "run_trace"]

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment variable that opts in to message content in spans (``true``)."""

_otel: Any = None  # opentelemetry.trace once imported (on the first run, not at import)
_missing = False


def run_trace(model: Any, state: RunState, started_ns: int) -> Hooks | None:
    """The hooks that record one run's spans, or None when there is no tracing to do."""
    global _otel, _missing
    if _otel is None:
        if _missing:
            return None
        try:  # the optional extra
            from opentelemetry import context, trace
        except ImportError:
            _missing = True
            return None
        _otel = trace
        _otel.attach, _otel.detach = context.attach, context.detach
    spans = _RunTrace(_otel.get_tracer("agent_payload"), model, state, started_ns)
    if not spans.run.is_recording():  # no tracer provider configured: nothing to record
        return None
    return spans.hooks()


class _RunTrace:
    def __init__(self, tracer: Any, model: Any, state: RunState, started_ns: int) -> None:
        self.tracer = tracer
        self.state = state
        self.content = os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"
        name = getattr(model, "model_name", None) or "unknown"
        system = str(getattr(model, "provider", None) or "unknown")
        self.common = {
            "gen_ai.system": system,
            "gen_ai.provider.name": system,
            "gen_ai.request.model": name,
        }
        self.model_name = name
        self.run = tracer.start_span(
            "invoke_agent agent_payload",
            kind=_otel.SpanKind.INTERNAL,
            start_time=started_ns,
            attributes={
                **self.common,
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "agent_payload",
                "agent_payload.run_id": state.run_id,
                "agent_payload.outlined": bool(getattr(state, "outlined", False)),
            },
        )
        self.attempt: Any = None
        self.read: Any = None
        self.attempt_no = 0
        self.codes: list[str] = []
        self.token: Any = None  # the request span made current while the SDK call runs

    def hooks(self) -> Hooks:
        names = ("on_request", "on_response", "on_retry", "on_success", "on_error")
        return Hooks(**{name: getattr(self, name) for name in names})

    def child(self, parent: Any, request: ModelRequest) -> Any:
        span = self.tracer.start_span(
            f"chat {self.model_name}",
            context=_otel.set_span_in_context(parent),
            kind=_otel.SpanKind.INTERNAL,  # the SDK's own client span (if any) nests in it
            attributes={
                **self.common,
                "gen_ai.operation.name": "chat",
                "agent_payload.output_mode": request.output_mode,
            },
        )
        if self.content:
            messages = [{"role": m.role, "content": m.content} for m in request.messages]
            span.set_attribute("gen_ai.input.messages", json.dumps(messages, default=str))
        return span

    def on_request(self, attempt: int, request: ModelRequest, last: bool) -> None:
        if attempt != self.attempt_no:
            self.attempt_no = attempt
            self.attempt = span = self.child(self.run, request)
            span.set_attribute("agent_payload.attempt", attempt)
        else:
            self.end_read()
            self.read = span = self.child(self.attempt, request)
            span.set_attribute("agent_payload.read", self.state.reads_used)
        self.token = _otel.attach(_otel.set_span_in_context(span))

    def release(self) -> None:
        if self.token is not None:
            _otel.detach(self.token)
            self.token = None

    def on_response(self, attempt: int, reply: ModelReply, last: bool) -> None:
        self.release()
        span = self.read if self.read is not None else self.attempt
        if span is None:
            return
        usage = reply.usage
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)
        span.set_attribute(
            "gen_ai.usage.cache_creation.input_tokens", usage.cache_write_input_tokens
        )
        if reply.model_name:
            span.set_attribute("gen_ai.response.model", reply.model_name)
        if reply.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
        if self.content:
            span.set_attribute("gen_ai.output.messages", reply.text)

    def end_read(self) -> None:
        if self.read is not None:
            self.read.end()
            self.read = None

    def end_attempt(self, outcome: str, codes: Sequence[str] = ()) -> None:
        self.end_read()
        if self.attempt is not None:
            self.attempt.set_attribute("agent_payload.outcome", outcome)
            if codes:
                self.attempt.set_attribute("agent_payload.conflict_codes", list(codes))
            self.attempt.end()
            self.attempt = None

    def on_retry(self, attempt: int, problems: Sequence[Problem], last: bool) -> None:
        codes = [p.code or p.kind for p in problems]
        self.codes.extend(c for c in codes if c not in self.codes)
        self.end_attempt("retry", codes)

    def finish(self, outcome: str) -> None:
        usage = self.state.usage
        self.run.set_attribute("agent_payload.attempts", self.state.attempt)
        self.run.set_attribute("agent_payload.outcome", outcome)
        self.run.set_attribute("agent_payload.reads", self.state.reads_used)
        self.run.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        self.run.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        self.run.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)
        if self.codes:
            self.run.set_attribute("agent_payload.conflict_codes", self.codes)
        self.run.end()

    def on_success(self, result: AgentResult[Any]) -> None:
        self.end_attempt("accepted")
        self.run.set_attribute("agent_payload.changes", len(result.report.changes))
        self.finish("accepted")

    def on_error(self, error: BaseException, attempt: int) -> None:
        self.release()
        self.end_attempt("error")
        self.run.set_attribute("error.type", type(error).__qualname__)
        self.run.set_status(_otel.Status(_otel.StatusCode.ERROR, str(error)[:200]))
        self.run.record_exception(error)
        self.finish("error")
