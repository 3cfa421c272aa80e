"""The correction loop's decisions, in one pure place (no I/O, no SDK, no sleeping).

``PayloadAgent.run`` and ``AsyncPayloadAgent.run`` are thin drivers around ``RunState``: they
ask it for the next ``ModelRequest``, send it with their own (sync or async) model, and hand
the ``ModelReply`` back to ``RunState.judge``, which either returns the ``AgentResult`` or
raises a ``ModelReplyError`` whose ``feedback`` is the correction the next attempt will send.
tenacity decides whether there is a next attempt, through ``RunState.should_retry`` and
``RunState.over_budget``.

What the state holds: the original messages (system + user, rendered once), the one DELETE
marker active for the call, the attempt number, the usage so far, every raw reply, and the last
failed reply with its correction. The conversation sent on attempt ``k`` is the original
messages plus only that last failed reply (as the assistant) and its correction (as the user):
its size does not grow with ``k``.

How a reply is judged: by ``agent_payload.judge.Judge`` (truncation, refusal, parsing, the merge
with the active marker alone and every guard, validation, the user's validators, the
whole-merge review, the confirmation decision), the one pipeline the tool handler uses too.
This module only maps the verdict: ``problems`` become the ``ModelReplyError`` of class
``verdict.error`` whose ``feedback`` is ``verdict.feedback()`` (a first refusal is corrected
and retried once, a second one stops the loop with ``RefusalError``); ``confirm`` shows the
model before/after once and remembers the result, so that a next reply yielding the same
payload is accepted as confirmed; ``accepted`` becomes the ``AgentResult``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from agent_payload import _callables, _intake
from agent_payload import judge as _judge
from agent_payload import merge as _merge
from agent_payload import outline as _outline
from agent_payload import prompts as _prompts
from agent_payload import schema as _schema
from agent_payload._reply import OutputMode
from agent_payload.errors import (
    ConcurrentChangeError,
    ConfigurationError,
    InvalidPayloadError,
    ModelReplyError,
    NoChangeRequestError,
    ReadsExhaustedError,
    RefusalError,
    ReplySyntaxError,
    RetriesExhaustedError,
    UnknownFieldError,
    UsageError,
)
from agent_payload.providers.base import (
    Message,
    ModelReply,
    ModelRequest,
    ToolCall,
    ToolSpec,
)
from agent_payload.report import (
    Guard,
    Problem,
)
from agent_payload.result import AgentResult
from agent_payload.usage import Usage, estimate_tokens

__all__ = [
    "AgentResult",
    "Commit",
    "RunSettings",
    "RunState",
    "Validator",
    "estimate_tokens",
    "format_payload_path",
    "validation_errors",
]

Validator = Callable[[Any], object]
"""A user validator: called with the merged payload (the kind the caller will get back: a
dict or list for dict/list payloads, the pydantic model instance for model payloads); raise
``RetryWithFeedback`` (or ``ValueError`` / ``AssertionError``, as in pydantic's validators) to
have the model try again with that message. ``AsyncPayloadAgent`` also takes ``async def``
validators (awaited); ``PayloadAgent`` refuses them with ``ConfigurationError``."""

_REPLY_ERRORS: frozenset[type[ModelReplyError]] = frozenset(
    {ModelReplyError, ReplySyntaxError, NoChangeRequestError, UnknownFieldError}
)
"""Parser errors re-raised with their own class (the others become ``ModelReplyError``)."""

Commit = Callable[[AgentResult[Any]], Any]
"""``run(commit=...)``: called with the accepted result before the run returns; returns the
result to return (``None``: the same); may raise ``ConcurrentChangeError`` (a correction)."""

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


@dataclass(frozen=True, slots=True)
class _Pending:
    """A change waiting for the model's confirmation."""

    payload_json: Any


# --- small pure helpers ----------------------------------------------------------------------

format_payload_path = _prompts.format_payload_path
"""``("items", 3, "price")`` -> ``items[3].price`` (the prompts' own spelling)."""

validation_errors = _merge.validation_errors


_summary = _judge.summary


ECHO_TRUNCATED_CHARS = 2000
"""How much of a truncated reply is sent back to the model as its own turn."""


def _echo(reply: str, *, truncated: bool = False) -> str:
    """The failed reply as it is sent back (the assistant turn of the next attempt).

    An empty reply becomes a short note (providers such as Anthropic refuse empty turns); a
    truncated reply keeps only its beginning, since the correction asks for a new, smaller
    request and repeating all of it on every later attempt would cost its full size again."""
    if not reply.strip():
        return "(empty reply)"
    if truncated and len(reply) > ECHO_TRUNCATED_CHARS:
        cut = len(reply) - ECHO_TRUNCATED_CHARS
        return f"{reply[:ECHO_TRUNCATED_CHARS]}\n[... {cut} more characters, cut off by the limit]"
    return reply


# --- the state -------------------------------------------------------------------------------


class RunState:
    """The decisions of one ``run``: what to send next and what a reply means.

    Build it with ``RunState.start`` (which checks the payload before any token is spent),
    then alternate ``next_request()`` and ``judge(reply)``. Not thread-safe: one per run.
    """

    def __init__(
        self,
        *,
        prepared: _intake.Prepared,
        task: str,
        system: str,
        user: str,
        schema: Mapping[str, Any] | None,
        settings: RunSettings,
        payload_end: int = 0,
        outlined: bool = False,
    ) -> None:
        self.prepared = prepared
        """The payload as ``_intake.prepare`` made it (a collision moves it: ``collided``)."""
        self.run_id = ""
        self.task = task
        self.marker = prepared.marker
        self.messages: tuple[Message, ...] = (
            Message("system", system),
            Message("user", user, stable_prefix=payload_end),
        )
        """System prompt, then the user message: its payload block (``payload_end``
        characters, the same for every attempt and every task on this payload) before the
        task, so the provider's prompt cache serves the longest prefix."""
        self.schema = schema
        self.payload_type = prepared.payload_type
        self.settings = settings
        self.attempt = 0
        self.usage = Usage()
        self.replies: list[str] = []
        self.last_failure: _Failure | None = None
        self.last_error: ModelReplyError | None = None
        self.refusals = 0
        self.pending: _Pending | None = None
        self.outlined = outlined
        """Outline mode: the user message carries the payload's outline and the model may
        read (``read_turn``)."""
        self.tools: tuple[ToolSpec, ...] = ()
        if outlined and settings.max_payload_tokens is not None:
            specs = _outline.tool_specs(budget=settings.max_payload_tokens)
            self.tools = tuple(ToolSpec(*spec) for spec in specs)
        self.reads: list[Message] = []
        """The read exchanges so far (each: the assistant's calls, then one result per call)."""
        self.reads_before_failure = 0
        """How many of ``reads`` came before the last failed reply (they are sent before it)."""
        self.reads_used = 0
        self.retargeted = False
        """True once a collision moved the run to a newer payload (``collided``)."""
        self.judge_reply = self._judge_for(prepared)
        """The one judge of every reply of this run (``agent_payload.judge``); a commit that
        collides (``collided``) gives it the then-current payload."""

    def _judge_for(self, prepared: _intake.Prepared) -> _judge.Judge:
        s = self.settings
        return _judge.Judge(
            prepared.payload,
            validators=s.validators,
            guards=s.guards,
            read_scope=s.read_scope,
            prepared=prepared,
        )

    # -- construction --------------------------------------------------------------------

    @classmethod
    def start(cls, payload: Any, task: str, settings: RunSettings) -> RunState:
        """Check the payload (``InvalidPayloadError`` / ``LimitExceededError`` before any
        request), choose the marker, render the prompt and the schema."""
        if not isinstance(task, str) or not task.strip():
            raise UsageError(
                f"task: expected a non-empty string saying what to change, found {task!r}; "
                "pass the instruction for the model as the second argument of run()"
            )
        # Refuses what is not JSON data, or does not fit its type, before any request. Not
        # copied: every attempt merges (and copies) the caller's payload; the run only reads it.
        prepared = _intake.prepare(
            payload, settings.payload_type, task=task, read_scope=settings.read_scope
        )
        shown_json = prepared.shown_json
        budget = settings.max_payload_tokens
        outline: str | None = None
        if budget is not None and _outline.exceeds(shown_json, budget, count=estimate_tokens):
            outline = _outline.outline(shown_json, budget, count=estimate_tokens)
        parts = _prompts.render_prompt(
            shown_json,
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
        schema: Mapping[str, Any] | None = None
        if settings.output_mode != "text":
            schema = _schema.change_request_schema(prepared.payload_type, marker=prepared.marker)
        return cls(
            prepared=prepared,
            task=task,
            system=parts.system,
            user=parts.user,
            schema=schema,
            settings=settings,
            payload_end=parts.payload_end,
            outlined=outline is not None,
        )

    # -- what to send --------------------------------------------------------------------

    def conversation(self) -> tuple[Message, ...]:
        """The original messages, plus the last failed reply and its correction if any (in
        outline mode the reads, each where it happened: before or after that failure)."""
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
        """Outline mode: when ``reply`` calls a read tool, answer every call of it (from the
        payload as the model may see it, within ``max_payload_tokens``) and return the request
        that carries the answers; None when the reply is to be judged. Raises
        ``ReadsExhaustedError`` for a read beyond ``max_reads``, ``RetriesExhaustedError`` when
        the token budget is spent (the payload is unchanged either way)."""
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
                    raise self._reads_exhausted(call)
                self.reads_used += 1
                text = _outline.answer(
                    call.name,
                    call.arguments,
                    self.prepared.shown_json,
                    budget,
                    count=estimate_tokens,
                )
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

    def _reads_exhausted(self, call: ToolCall) -> ReadsExhaustedError:
        limit = self.settings.max_reads
        asked = f"{call.name}({call.arguments})"
        return ReadsExhaustedError(
            f"the model asked for read {limit + 1} of the payload ({asked}, attempt "
            f"{self.attempt}) but max_reads={limit} allows {limit} per run, and it sent no "
            f"change request; input {self.usage.input_tokens} + output "
            f"{self.usage.output_tokens} tokens. The payload is unchanged. Raise max_reads, "
            "raise max_payload_tokens so the outline shows more, or name in the task the "
            "elements to change.",
            attempts=self.attempt,
            usage=self.usage,
            reads=self.reads_used,
            last_call=asked,
            replies=self.replies,
        )

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
            # issue 18: more attempts do not help a reply that does not fit; more room does
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
            f"tokens; last problems: {_summary(problems).rstrip('.')}. The payload is unchanged. "
            + advice,
            attempts=self.attempt,
            usage=self.usage,
            last_reply=self.replies[-1] if self.replies else None,
            problems=problems,
            replies=self.replies,
        )

    # -- judging a reply -----------------------------------------------------------------

    def judge(self, reply: ModelReply) -> AgentResult[Any]:
        """Return the result, or raise the ``ModelReplyError`` to correct (state updated).
        Every decision is ``agent_payload.judge.Judge``'s; this maps its verdict. Sync: an
        async validator is a ``ConfigurationError`` (``judge_steps`` awaits it)."""
        return _callables.drive(
            self.judge_steps(reply), "PayloadAgent", "use AsyncPayloadAgent with it"
        )

    def judge_steps(self, reply: ModelReply) -> Generator[Any, Any, AgentResult[Any]]:
        """``judge`` as a generator for async drivers: the judge's own steps
        (``Judge.steps``), which yield the awaitable of each async validator; the driver awaits
        it and sends back its value (or throws its exception in), and the generator's return
        value is the result."""
        self._count(reply)
        self.replies.append(reply.text)

        pending: dict[str, Any] = {}
        if self.pending is not None:
            pending["confirming"] = self.pending.payload_json
        verdict = yield from self.judge_reply.steps(
            reply.text,
            finish_reason=reply.finish_reason,
            truncated=reply.truncated,
            refusal=reply.refusal,
            **pending,
        )
        if verdict.status == "confirm":
            self._ask_confirmation(reply.text, verdict)
        if verdict.status == "problems":
            if verdict.stage == "refusal":
                self._refused(reply.text, verdict, reply.refusal or reply.text)
            self._fail(reply.text, verdict, verdict.error)
        self.pending = None
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

    # -- committing an accepted result --------------------------------------------------

    def commit(self, result: AgentResult[Any], commit: Commit) -> AgentResult[Any]:
        """Hand the accepted ``result`` to ``commit`` (a store writing it at the version the
        run read, ``PayloadStore.edit``) and return what it returns (``None``: ``result``);
        a ``ConcurrentChangeError`` it raises becomes this attempt's correction
        (``collided``)."""
        try:
            committed = commit(result)
        except ConcurrentChangeError as exc:
            self.collided(exc)
        if inspect.isawaitable(committed):
            close = getattr(committed, "close", None)
            if callable(close):
                close()
            raise ConfigurationError(
                "PayloadAgent: commit= returned an awaitable, which PayloadAgent cannot await; "
                "use AsyncPayloadAgent, or make it a plain function"
            )
        return result if committed is None else committed

    def collided(self, error: ConcurrentChangeError) -> NoReturn:
        """The accepted request collided with an edit committed since the payload this run
        judged against (MERGE.md section 9): from now on the run judges against the current
        payload (``error.current``, when the surface set it), and the model is sent the
        correction (each colliding entry, what the other edit did, the current subtree)
        exactly like any other; raises that ``ModelReplyError``."""
        if error.current is not None:
            self._retarget(error.current)
        self.pending = None
        reply = self.replies[-1] if self.replies else ""
        self._fail(reply, self.judge_reply.concurrent(error), ModelReplyError)

    def _retarget(self, current: Any) -> None:
        """Judge the next replies against ``current`` (prepared as ``start`` prepared the
        payload, its checks not repeated)."""
        self.prepared = self.prepared.moved_to(current)
        self.retargeted = True
        self.judge_reply = self._judge_for(self.prepared)

    # -- failures ------------------------------------------------------------------------

    def _render_current(self) -> Callable[[Any], str] | None:
        """Outline mode: a correction shows each subtree concerned within half the payload
        budget (complete when it fits, else outlined); full mode: as rendered today."""
        budget = self.settings.max_payload_tokens
        if not self.outlined or budget is None:
            return None
        half = max(budget // 2, _outline.MIN_PAYLOAD_TOKENS)
        return functools.partial(_outline.value_text, budget=half, count=estimate_tokens)

    def _fail(
        self, reply: str, verdict: _judge.Verdict, error_type: type[ModelReplyError]
    ) -> NoReturn:
        """Keep the failed reply and the judge's correction for the next attempt; raise."""
        truncated = verdict.stage == "truncated"
        correction = verdict.feedback(
            output_mode=self.settings.output_mode,
            render_current=self._render_current(),
            payload_changed=self.retargeted,
        )
        self.last_failure = _Failure(
            _echo(reply, truncated=truncated), correction, verdict.problems
        )
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

    def _ask_confirmation(self, reply: str, verdict: _judge.Verdict) -> NoReturn:
        correction = verdict.feedback(output_mode=self.settings.output_mode)
        self.last_failure = _Failure(_echo(reply), correction, verdict.problems)
        self.reads_before_failure = len(self.reads)
        self.pending = _Pending(verdict.payload_json)
        error = ModelReplyError(
            f"attempt {self.attempt}: {verdict.message}",
            reply=reply,
            feedback=correction,
            problems=verdict.problems,
        )
        self._raise(error)
