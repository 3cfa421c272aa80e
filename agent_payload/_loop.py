"""The correction loop's decisions, in one pure place (no I/O, no SDK, no sleeping): what
``RunState`` sends next and what a reply means (the judging is ``judge.Judge``'s). Attempt ``k``
resends only the last failed reply and its correction, so requests do not grow with ``k``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from agent_payload import _callables, _intake
from agent_payload import judge as _judge
from agent_payload import outline as _outline
from agent_payload import prompts as _prompts
from agent_payload import schema as _schema
from agent_payload._reply import OutputMode
from agent_payload.errors import (
    ConcurrentChangeError,
    InvalidPayloadError,
    ModelReplyError,
    ReadsExhaustedError,
    RefusalError,
    RetriesExhaustedError,
    UsageError,
)
from agent_payload.providers.base import Message, ModelReply, ModelRequest, ToolSpec
from agent_payload.report import Guard, Problem
from agent_payload.result import AgentResult
from agent_payload.usage import Usage, estimate_tokens

__all__ = [
    "AgentResult",
    "Commit",
    "RunSettings",
    "RunState",
    "Validator",
    "estimate_tokens",
]

Validator = Callable[[Any], object]
"""A user validator: called with the merged payload (of the kind returned); raise
``RetryWithFeedback``, ``ValueError`` or ``AssertionError`` to have the model try again."""

Commit = Callable[[AgentResult[Any]], Any]
"""``run(commit=...)``: returns the result to return (``None``: the same)."""

MAX_REFUSALS = 2
"""A run stops with ``RefusalError`` at the second refusal (the first one is retried once)."""


@dataclass(frozen=True, slots=True)
class RunSettings:
    """Everything about one run that is fixed before the first request."""

    output_mode: OutputMode = "text"
    max_tokens: int | None = None
    temperature: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    payload_type: Any = None
    validators: tuple[Validator, ...] = ()
    guards: tuple[Guard, ...] = ()
    read_scope: Any = None
    rules_text: str | None = None
    extra_instructions: str | None = None
    token_budget: int | None = None
    prompt_caching: bool = True
    prompt_cache_key: str | None = None
    max_payload_tokens: int | None = None
    max_reads: int = _outline.DEFAULT_MAX_READS


@dataclass(frozen=True, slots=True)
class _Failure:
    reply: str
    correction: str
    problems: tuple[Problem, ...]


ECHO_TRUNCATED_CHARS = 2000
"""How much of a truncated reply is sent back to the model as its own turn."""


def _echo(reply: str, *, truncated: bool = False) -> str:
    """The failed reply as sent back (providers refuse an empty turn; a truncated one is cut)."""
    if not reply.strip():
        return "(empty reply)"
    if truncated and len(reply) > ECHO_TRUNCATED_CHARS:
        cut = len(reply) - ECHO_TRUNCATED_CHARS
        return f"{reply[:ECHO_TRUNCATED_CHARS]}\n[... {cut} more characters, cut off by the limit]"
    return reply


# --- the state -------------------------------------------------------------------------------


class RunState:
    """The decisions of one ``run`` (not thread-safe); building it checks the payload
    (``InvalidPayloadError`` / ``LimitExceededError``) and renders the prompt."""

    def __init__(self, payload: Any, task: str, settings: RunSettings) -> None:
        if not isinstance(task, str) or not task.strip():
            raise UsageError(
                f"task: expected a non-empty string saying what to change, found {task!r}; "
                "pass the instruction for the model as the second argument of run()"
            )
        # Refuses what is not JSON data, or does not fit its type, before any request. Not
        # copied: every attempt merges (and copies) the caller's payload; the run only reads it.
        self.prepared = prepared = _intake.prepare(
            payload, settings.payload_type, task=task, read_scope=settings.read_scope
        )
        budget = settings.max_payload_tokens
        outline: str | None = None
        if budget is not None and _outline.exceeds(prepared.shown_json, budget):
            outline = _outline.outline(prepared.shown_json, budget)
        parts = _prompts.render_prompt(
            prepared.shown_json,
            task,
            marker=prepared.marker,
            payload_type=prepared.payload_type,
            permissions=settings.rules_text,
            extra_instructions=settings.extra_instructions,
            output_mode=settings.output_mode,
            outline=outline,
            outline_budget=budget or 0,
            max_reads=settings.max_reads,
        )
        try:
            parts.user.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidPayloadError(
                "The payload or the task holds text that is not valid Unicode (a lone surrogate "
                f"such as \\ud800, at character {exc.start} of the prompt); it cannot be sent "
                "to a model. Clean the text first."
            ) from exc
        self.schema: Mapping[str, Any] | None = None
        if settings.output_mode != "text":
            self.schema = _schema.change_request_schema(
                prepared.payload_type, marker=prepared.marker
            )
        self.run_id = ""
        self.marker = prepared.marker
        self.messages: tuple[Message, ...] = (
            Message("system", parts.system),
            Message("user", parts.user, stable_prefix=parts.payload_end),
        )
        self.settings = settings
        self.attempt = 0
        self.usage = Usage()
        self.replies: list[str] = []
        self.last_failure: _Failure | None = None
        self.last_error: ModelReplyError | None = None
        self.refusals = 0
        self.pending: dict[str, Any] = {}  # {"confirming": payload} awaiting confirmation
        self.outlined = outline is not None  # the user message carries an outline
        self.tools: tuple[ToolSpec, ...] = ()  # outline mode: the read tools
        if budget is not None and outline is not None:
            self.tools = tuple(ToolSpec(*spec) for spec in _outline.tool_specs(budget=budget))
        self.reads: list[Message] = []  # the read exchanges: the calls, then their results
        self.reads_before_failure = 0  # how many reads are sent before the last failed reply
        self.reads_used = 0
        self.retargeted = False  # a collision moved the run to a newer payload
        self.judge_reply = self._judge_for(prepared)

    def _judge_for(self, prepared: _intake.Prepared) -> _judge.Judge:
        s = self.settings
        return _judge.Judge(
            prepared.payload,
            validators=s.validators,
            guards=s.guards,
            read_scope=s.read_scope,
            prepared=prepared,
        )

    # -- what to send --------------------------------------------------------------------

    def conversation(self) -> tuple[Message, ...]:
        """The original messages, then the reads and the last failure, as they happened."""
        if self.last_failure is None:
            return (*self.messages, *self.reads)
        cut = self.reads_before_failure
        return (
            *self.messages,
            *self.reads[:cut],
            Message("assistant", self.last_failure.reply),
            Message("user", self.last_failure.correction),
            *self.reads[cut:],
        )

    def next_request(self) -> ModelRequest:
        """The request of the next attempt (and count it)."""
        self.attempt += 1
        return self._request()

    def _request(self) -> ModelRequest:
        s = self.settings
        return ModelRequest(
            messages=self.conversation(),
            output_mode=s.output_mode,
            schema=self.schema,
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            extra=dict(s.extra),
            prompt_caching=s.prompt_caching,
            prompt_cache_key=s.prompt_cache_key,
            tools=self.tools,
        )

    # -- outline mode: the reads ---------------------------------------------------------

    def read_turn(self, reply: ModelReply) -> ModelRequest | None:
        """Outline mode: the request answering the read calls of ``reply`` (None when it is
        to be judged); ``ReadsExhaustedError`` beyond ``max_reads``, ``RetriesExhaustedError``
        when the token budget is spent."""
        if not self.tools or not any(c.name in _outline.READ_TOOLS for c in reply.tool_calls):
            return None
        self._count(reply)
        s = self.settings
        budget = s.max_payload_tokens
        assert budget is not None  # tools are offered only with a budget
        results: list[Message] = []
        for call in reply.tool_calls:
            if call.name not in _outline.READ_TOOLS:
                text = _outline.not_applied_note()
            else:
                if self.reads_used >= s.max_reads:
                    asked = f"{call.name}({call.arguments})"
                    raise ReadsExhaustedError(
                        f"the model asked for read {s.max_reads + 1} of the payload ({asked}, "
                        f"attempt {self.attempt}) but max_reads={s.max_reads} allows "
                        f"{s.max_reads} per run, and it sent no change request; input "
                        f"{self.usage.input_tokens} + output {self.usage.output_tokens} tokens. "
                        "The payload is unchanged. Raise max_reads, raise max_payload_tokens so "
                        "the outline shows more, or name in the task the elements to change.",
                        attempts=self.attempt,
                        usage=self.usage,
                        reads=self.reads_used,
                        last_call=asked,
                        replies=self.replies,
                    )
                self.reads_used += 1
                text = _outline.answer(call.name, call.arguments, self.prepared.shown_json, budget)
                if self.reads_used == s.max_reads:
                    text += "\n\n" + _outline.last_read_note(s.max_reads)
            results.append(Message("tool", text, tool_call_id=call.id))
        self.reads += [Message("assistant", reply.text, tool_calls=reply.tool_calls), *results]
        if self.over_budget():
            raise self.exhausted()
        return self._request()

    def _count(self, reply: ModelReply) -> None:
        usage = reply.usage
        if usage.requests == 0:
            usage = dataclasses.replace(usage, requests=1)
        self.usage = self.usage + usage

    # -- the loop's conditions -----------------------------------------------------------

    def should_retry(self, error: BaseException) -> bool:
        """tenacity's retry condition: a usable model error, and not a final refusal."""
        if not isinstance(error, ModelReplyError):
            return False
        return not (isinstance(error, RefusalError) and self.refusals >= MAX_REFUSALS)

    def over_budget(self) -> bool:
        """True when the token budget (if any) is spent."""
        budget = self.settings.token_budget
        return budget is not None and self.usage.total_tokens >= budget

    def exhausted(self) -> RetriesExhaustedError:
        """The error for a loop that ran out of attempts or tokens."""
        problems = self.last_failure.problems if self.last_failure else ()
        budget = self.settings.token_budget
        if self.over_budget():
            why = f"the token budget of {budget} is spent ({self.usage.total_tokens} used)"
        else:
            why = f"no usable change request after {self.attempt} attempt(s)"
        if any(p.kind == "truncated" for p in problems):
            # more attempts do not help a reply that does not fit; more room does
            limit = self.settings.max_tokens
            now = f" (now {limit})" if limit is not None else " (the provider's default now)"
            advice = (
                f"The replies were cut off by the output token limit: raise max_tokens{now}, "
                "or split the task into smaller ones; inspect .last_reply and .problems."
            )
        else:
            advice = (
                "Raise max_retries or token_budget, make the task smaller, or inspect "
                ".last_reply and .problems."
            )
        return RetriesExhaustedError(
            f"{why}; input {self.usage.input_tokens} + output {self.usage.output_tokens} "
            f"tokens; last problems: {_judge.summary(problems).rstrip('.')}. "
            f"The payload is unchanged. {advice}",
            attempts=self.attempt,
            usage=self.usage,
            last_reply=self.replies[-1] if self.replies else None,
            problems=problems,
            replies=self.replies,
        )

    # -- judging a reply -----------------------------------------------------------------

    def judge(self, reply: ModelReply) -> AgentResult[Any]:
        """``judge_steps`` in sync code (an async validator is a ``ConfigurationError``)."""
        return _callables.drive(
            self.judge_steps(reply), "PayloadAgent", "use AsyncPayloadAgent with it"
        )

    def judge_steps(self, reply: ModelReply) -> Generator[Any, Any, AgentResult[Any]]:
        """The result, or raise the ``ModelReplyError`` to correct (state updated); the
        judge's steps yield each async validator's awaitable to the driver."""
        self._count(reply)
        self.replies.append(reply.text)

        verdict = yield from self.judge_reply.steps(
            reply.text,
            finish_reason=reply.finish_reason,
            truncated=reply.truncated,
            refusal=reply.refusal,
            **self.pending,
        )
        if verdict.status == "confirm":  # the correction asks the model to confirm
            self.pending = {"confirming": verdict.payload_json}
            self._fail(reply.text, verdict)
        if verdict.status == "problems":
            if verdict.stage == "refusal":
                self._refused(reply.text, verdict, reply.refusal or reply.text)
            self._fail(reply.text, verdict, verdict.error)
        self.pending = {}
        change_request = verdict.change_request
        report = verdict.report
        assert change_request is not None and report is not None  # accepted
        reasoning = report.reasoning if report.reasoning is not None else change_request.reasoning
        return AgentResult(
            payload=verdict.payload,
            change_request=change_request,
            report=report,
            reasoning=reasoning,
            attempts=self.attempt,
            usage=self.usage,
            replies=tuple(self.replies),
            marker=self.marker,
            change_tokens=estimate_tokens(reply.text),
            repairs=verdict.repairs,
            confirmed=tuple(finding for _, finding in verdict.confirmations),
            run_id=self.run_id,
            outlined=self.outlined,
            reads=self.reads_used,
        )

    # -- a collision on commit ---------------------------------------------------------

    def collided(self, error: ConcurrentChangeError) -> NoReturn:
        """``run(commit=)`` raised ``error``: judge from now on against ``error.current``
        (when set) and raise the correction, like any other."""
        if error.current is not None:  # prepared as the run prepared its payload
            self.prepared = self.prepared.moved_to(error.current)
            self.retargeted = True
            self.judge_reply = self._judge_for(self.prepared)
        self.pending = {}
        reply = self.replies[-1] if self.replies else ""
        self._fail(reply, self.judge_reply.concurrent(error))

    # -- failures ------------------------------------------------------------------------

    def _fail(
        self,
        reply: str,
        verdict: _judge.Verdict,
        error_type: type[ModelReplyError] = ModelReplyError,
    ) -> NoReturn:
        """Keep the failed reply and its correction for the next attempt; raise."""
        budget = self.settings.max_payload_tokens
        correction = verdict.feedback(
            output_mode=self.settings.output_mode,
            render_current=_outline.current_renderer(budget) if self.outlined and budget else None,
            payload_changed=self.retargeted,
        )
        echo = _echo(reply, truncated=verdict.stage == "truncated")
        self.last_failure = _Failure(echo, correction, verdict.problems)
        self.reads_before_failure = len(self.reads)
        error = error_type(
            f"attempt {self.attempt}: {verdict.message}",
            reply=reply,
            feedback=correction,
            problems=verdict.problems,
        )
        self._raise(error, verdict.cause)

    def _raise(self, error: ModelReplyError, cause: BaseException | None = None) -> NoReturn:
        """Keep ``error`` as the last one and raise it (from ``cause`` when there is one)."""
        self.last_error = error
        if cause is not None:
            raise error from cause
        raise error

    def _refused(self, reply: str, verdict: _judge.Verdict, text: str) -> NoReturn:
        """A refusal: the first one of a run is corrected and retried, the second stops."""
        self.refusals += 1
        if self.refusals >= MAX_REFUSALS:
            self.last_failure = _Failure(reply, "", verdict.problems)
            error = RefusalError(
                f"the model refused the task twice (attempt {self.attempt}, "
                f"{self.usage.total_tokens} tokens used): {text.strip()!r}. The payload is "
                "unchanged; rephrase the task or check that the model is allowed to do it.",
                reply=reply,
                feedback=text,
                problems=verdict.problems,
            )
            self._raise(error, verdict.cause)
        self._fail(reply, verdict, RefusalError)
