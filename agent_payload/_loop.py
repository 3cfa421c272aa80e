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

How a reply is judged, in order:

1. truncated (``finish_reason`` length / ``max_tokens``): never parsed nor applied; the
   correction asks for a smaller change request;
2. refused (the provider's refusal field, ``finish_reason == "refusal"``, or the parser's
   ``RefusalError``): the first refusal of a run is answered with a correction and retried once
   (refusal detection from prose is a heuristic, and a model sometimes refuses on a misreading);
   a second refusal in the same run stops the loop with ``RefusalError`` (not retried again);
3. parsed (``parse.parse_change_request_with_repairs``): syntax / prose / unknown fields go
   back with the parser's problems;
4. merged with the active marker alone and the combined guard: any conflict (including guard
   findings of severity ``conflict``) goes back with its change-request path and the current
   payload subtree concerned; nothing of a conflicting request is applied;
5. validated against the payload type (given, or the class of a pydantic payload): errors go
   back with payload paths and the offending value;
6. the user's validators (``(payload) -> None``, may raise ``RetryWithFeedback``);
7. guard findings of severity ``confirm``: the model is shown before/after once
   (``prompts.render_confirm``); if its next reply yields the same payload, the change is
   confirmed; an unconfirmed change is never applied;
8. success: the ``AgentResult``.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from agent_payload import merge as _merge
from agent_payload import parse as _parse
from agent_payload import prompts as _prompts
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import (
    InvalidPayloadError,
    ModelReplyError,
    NoChangeRequestError,
    PayloadValidationError,
    RefusalError,
    ReplySyntaxError,
    RetriesExhaustedError,
    RetryWithFeedback,
    TruncatedReplyError,
    UnknownFieldError,
)
from agent_payload.providers.base import Message, ModelReply, ModelRequest, OutputMode
from agent_payload.report import (
    Change,
    Finding,
    Guard,
    Issue,
    MergeReport,
    MergeResult,
    PayloadPath,
    Problem,
)
from agent_payload.usage import Usage

__all__ = [
    "AgentResult",
    "RunSettings",
    "RunState",
    "Validator",
    "conflict_problems",
    "estimate_tokens",
    "format_payload_path",
    "recording_guard",
    "validation_errors",
    "validation_problems",
]

P = TypeVar("P")

Validator = Callable[[Any], None]
"""A user validator: called with the merged payload (the kind the caller will get back);
raise ``RetryWithFeedback`` to have the model try again with that message."""

_REPLY_ERRORS: frozenset[type[ModelReplyError]] = frozenset(
    {ModelReplyError, ReplySyntaxError, NoChangeRequestError, UnknownFieldError}
)
"""Parser errors re-raised with their own class (the others become ``ModelReplyError``)."""

MAX_REFUSALS = 2
"""A run stops with ``RefusalError`` at the second refusal (the first one is retried once)."""


@dataclass(frozen=True, slots=True)
class AgentResult(Generic[P]):
    """What a successful run returns.

    ``payload`` is the updated payload, of the kind given (dict, list, or the same pydantic
    class); ``change_request`` the request that was applied; ``report`` the merge report
    (effective changes, warnings); ``attempts`` how many model requests the run made;
    ``usage`` the tokens summed over all of them; ``replies`` every raw reply text in order.
    ``rewrite_tokens`` estimates what a full rewrite of the result (minified JSON) would have
    cost in output tokens, ``change_tokens`` what the applied reply cost, counted the same way
    (see ``estimate_tokens``). ``marker`` is the DELETE marker that was active; ``repairs`` what the
    parser had to fix in the applied reply; ``confirmed`` the guard findings the model
    confirmed.
    """

    payload: P
    change_request: AgentPayloadChangeRequest[Any]
    report: MergeReport
    reasoning: str | None
    attempts: int
    usage: Usage
    replies: tuple[str, ...]
    marker: str
    rewrite_tokens: int
    change_tokens: int
    repairs: tuple[str, ...] = ()
    confirmed: tuple[Finding, ...] = ()

    @property
    def changes(self) -> list[Change]:
        """The effective changes (``report.changes``)."""
        return self.report.changes

    @property
    def tokens_saved(self) -> int:
        """``rewrite_tokens - change_tokens`` (negative when the change request cost more)."""
        return self.rewrite_tokens - self.change_tokens


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
    permissions_text: str | None = None
    read_only: Any = None
    extra_instructions: str | None = None
    token_budget: int | None = None


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


_MISSING = object()


def _lookup(data: Any, path: Sequence[str | int]) -> Any:
    node = data
    for part in path:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
            continue
        is_index = isinstance(part, int) and not isinstance(part, bool)
        if isinstance(node, list) and is_index and 0 <= int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _current(data: Any, path: PayloadPath | None) -> tuple[Any, bool]:
    """The payload subtree concerned by a problem: the value at ``path``, or (when the path
    names something missing, such as an index past the end) its parent container, never the
    whole root."""
    if path is None:
        return None, False
    value = _lookup(data, path)
    if value is not _MISSING:
        return value, True
    if len(path) > 1:
        value = _lookup(data, path[:-1])
        if value is not _MISSING:
            return value, True
    return None, False


def _problem_current(data: Any, path: PayloadPath | None, whole_root: bool) -> tuple[Any, bool]:
    if not whole_root and not path:
        return None, False
    return _current(data, path)


def conflict_problems(
    conflicts: Sequence[Issue], data: Any, *, whole_root: bool = True
) -> tuple[Problem, ...]:
    """One ``conflict`` Problem per merge conflict, at its change-request path, with the
    subtree of ``data`` (the payload as the model sees it) concerned. ``whole_root=False``:
    a problem about the root itself carries no current value (not the whole payload)."""
    problems = []
    for issue in conflicts:
        current, has_current = _problem_current(data, issue.payload_path, whole_root)
        problems.append(
            Problem(
                kind="conflict",
                message=issue.message,
                path=issue.path,
                code=issue.code,
                current=current,
                has_current=has_current,
            )
        )
    return tuple(problems)


validation_errors = _merge.validation_errors


def validation_problems(
    errors: Sequence[tuple[Sequence[str | int], str]], data: Any, *, whole_root: bool = True
) -> tuple[Problem, ...]:
    """One ``validation`` Problem per error, at its payload path, with the subtree of ``data``
    concerned (``whole_root`` as for :func:`conflict_problems`)."""
    problems = []
    for loc, msg in errors:
        path = tuple(loc)
        current, has_current = _problem_current(data, path, whole_root)
        problems.append(
            Problem(
                kind="validation",
                message=msg,
                path=format_payload_path(path),
                current=current,
                has_current=has_current,
            )
        )
    return tuple(problems)


def _check_type(payload_json: Any, payload_type: Any) -> None:
    """The caller's payload must already fit ``payload_type``: otherwise every attempt would be
    blamed on the model. ``PayloadValidationError`` before any request."""
    try:
        TypeAdapter(payload_type).validate_python(payload_json)
    except ValidationError as exc:
        errors = validation_errors(exc)
        name = getattr(payload_type, "__name__", str(payload_type))
        raise PayloadValidationError(
            f"The payload given to run() does not validate as {name} before any change: "
            f"{_merge.list_validation_errors(errors)}. Fix the payload (or the payload_type) "
            "first; no model request was made.",
            errors=errors,
            payload=payload_json,
        ) from exc


def recording_guard(guards: Sequence[Guard], sink: list[tuple[Change, Finding]]) -> Guard | None:
    """One guard asking every guard in turn; findings of severity ``confirm`` are also
    appended to ``sink`` with their change."""
    if not guards:
        return None

    def guard(change: Change) -> list[Finding]:
        findings: list[Finding] = []
        for each in guards:
            for finding in each(change):
                findings.append(finding)
                if finding.severity == "confirm":
                    sink.append((change, finding))
        return findings

    return guard


@functools.cache
def _encoding() -> Any:
    try:
        module = importlib.import_module("bpe_openai")
        return module.get_encoding("o200k_base")
    except Exception:  # the tokenizer is optional; any failure falls back to the estimate
        return None


def estimate_tokens(text: str) -> int:
    """Output tokens of ``text``: counted with OpenAI's o200k_base tokenizer when the optional
    ``bpe-openai`` package is importable, else estimated as ``ceil(len(text) / 4)``.

    ``AgentResult.rewrite_tokens`` is this count for the result as minified JSON (the cheapest
    full rewrite a model could send), ``change_tokens`` for the applied reply's text as the
    model sent it (reasoning included), so the two are counted the same way. Other tokenizers
    (Anthropic's) differ by some percent; the ratio is what matters."""
    encoding = _encoding()
    if encoding is not None:
        return len(encoding.encode(text))
    return math.ceil(len(text) / 4)


def _to_json(payload: Any) -> Any:
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json", by_alias=True)
    if payload is None:
        return {}
    return payload


def _summary(problems: Sequence[Problem], limit: int = 3) -> str:
    parts = [f"{p.path + ': ' if p.path else ''}{p.message}" for p in problems[:limit]]
    more = len(problems) - limit
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts) or "no details"


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
        payload: Any,
        payload_json: Any,
        shown_json: Any,
        task: str,
        marker: str,
        system: str,
        user: str,
        schema: Mapping[str, Any] | None,
        payload_type: Any,
        settings: RunSettings,
    ) -> None:
        self.payload = payload
        self.payload_json = payload_json
        self.shown_json = shown_json
        self.task = task
        self.marker = marker
        self.messages: tuple[Message, ...] = (
            Message("system", system),
            Message("user", user),
        )
        self.schema = schema
        self.payload_type = payload_type
        self.settings = settings
        self.attempt = 0
        self.usage = Usage()
        self.replies: list[str] = []
        self.last_failure: _Failure | None = None
        self.last_error: ModelReplyError | None = None
        self.refusals = 0
        self.pending: _Pending | None = None
        self._adapter: TypeAdapter[Any] | None = None

    # -- construction --------------------------------------------------------------------

    @classmethod
    def start(cls, payload: Any, task: str, settings: RunSettings) -> RunState:
        """Check the payload (``InvalidPayloadError`` / ``LimitExceededError`` before any
        request), choose the marker, render the prompt and the schema."""
        if not isinstance(task, str) or not task.strip():
            from agent_payload.errors import UsageError

            raise UsageError(
                f"task: expected a non-empty string saying what to change, found {task!r}; "
                "pass the instruction for the model as the second argument of run()"
            )
        # The payload as the merge sees it; refuses what is not JSON data before any request.
        payload_json = _merge.dump_payload(payload)
        payload_type = settings.payload_type
        if payload_type is None and isinstance(payload, BaseModel):
            payload_type = type(payload)
        elif payload_type is not None and not isinstance(payload, BaseModel):
            _check_type(payload_json, payload_type)
        marker = _merge.choose_marker(payload_json, avoid=(task,))
        scope = settings.read_scope
        shown_json = payload_json if scope is None else scope.project(payload_json)
        parts = _prompts.render_prompt(
            shown_json,
            task,
            marker=marker,
            payload_type=payload_type,
            permissions=settings.permissions_text,
            read_only=settings.read_only,
            extra_instructions=settings.extra_instructions,
            output_mode=settings.output_mode,
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
            from agent_payload import schema as _schema

            schema = _schema.change_request_schema(
                payload_type, marker=marker, strict=settings.output_mode == "json_schema"
            )
        return cls(
            payload=payload,
            payload_json=payload_json,
            shown_json=shown_json,
            task=task,
            marker=marker,
            system=parts.system,
            user=parts.user,
            schema=schema,
            payload_type=payload_type,
            settings=settings,
        )

    # -- what to send --------------------------------------------------------------------

    def conversation(self) -> tuple[Message, ...]:
        """The original messages, plus the last failed reply and its correction if any."""
        if self.last_failure is None:
            return self.messages
        return (
            *self.messages,
            Message("assistant", self.last_failure.reply),
            Message("user", self.last_failure.correction),
        )

    def next_request(self) -> ModelRequest:
        """The request of the next attempt (and count it)."""
        self.attempt += 1
        s = self.settings
        return ModelRequest(
            messages=self.conversation(),
            output_mode=s.output_mode,
            schema=self.schema,
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            extra=dict(s.extra),
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
        return RetriesExhaustedError(
            f"{why}; input {self.usage.input_tokens} + output {self.usage.output_tokens} "
            f"tokens; last problems: {_summary(problems).rstrip('.')}. The payload is unchanged. "
            "Raise max_retries or token_budget, make the task smaller, or inspect "
            ".last_reply and .last_errors.",
            attempts=self.attempt,
            usage=self.usage,
            last_reply=self.replies[-1] if self.replies else None,
            last_errors=problems,
            replies=self.replies,
        )

    # -- judging a reply -----------------------------------------------------------------

    def judge(self, reply: ModelReply) -> AgentResult[Any]:
        """Return the result, or raise the ``ModelReplyError`` to correct (state updated)."""
        usage = reply.usage
        if usage.requests == 0:
            usage = Usage(usage.input_tokens, usage.output_tokens, 1)
        self.usage = self.usage + usage
        self.replies.append(reply.text)

        parsed = self._read(reply)
        change_request = parsed.change_request
        confirm_sink: list[tuple[Change, Finding]] = []
        merged = self._merge(reply.text, change_request, confirm_sink)
        result_payload, report = merged.payload, merged.report
        result_json = _to_json(result_payload)
        self._review(reply.text, result_json, report, confirm_sink)
        self._validate(reply.text, result_payload, result_json, report)
        confirmed: tuple[Finding, ...] = ()
        if confirm_sink:
            if self.pending is None or self.pending.payload_json != result_json:
                self._ask_confirmation(reply.text, result_json, confirm_sink)
            confirmed = tuple(finding for _, finding in confirm_sink)
        self.pending = None
        reasoning = report.reasoning if report.reasoning is not None else change_request.reasoning
        return AgentResult(
            payload=result_payload,
            change_request=change_request,
            report=report,
            reasoning=reasoning,
            attempts=self.attempt,
            usage=self.usage,
            replies=tuple(self.replies),
            marker=self.marker,
            rewrite_tokens=estimate_tokens(
                json.dumps(result_json, ensure_ascii=False, separators=(",", ":"))
            ),
            change_tokens=estimate_tokens(reply.text),
            repairs=tuple(parsed.repairs),
            confirmed=confirmed,
        )

    # -- the steps of judge ----------------------------------------------------------------

    def _read(self, reply: ModelReply) -> _parse.ParsedReply:
        """Steps 1-3: truncation, refusal, parsing."""
        if reply.truncated or reply.finish_reason in ("length", "max_tokens"):
            problem = Problem(
                kind="truncated",
                message="your reply was cut off by the output token limit "
                f"(finish_reason={reply.finish_reason!r}), so none of it was used.",
            )
            self._fail(
                reply.text,
                [problem],
                TruncatedReplyError,
                "the reply was cut off by the token limit; it was not applied",
                truncated=True,
            )
        if reply.refusal is not None or reply.finish_reason == "refusal":
            self._refused(reply.text or reply.refusal or "", reply.refusal or reply.text)
        try:
            return _parse.parse_change_request_with_repairs(
                reply.text, finish_reason=reply.finish_reason
            )
        except RefusalError as exc:
            self._refused(reply.text, reply.text, exc.problems, cause=exc)
        except TruncatedReplyError as exc:
            self._fail(
                reply.text,
                exc.problems or [Problem(kind="truncated", message=str(exc))],
                TruncatedReplyError,
                str(exc),
                truncated=True,
                cause=exc,
            )
        except ModelReplyError as exc:
            problems = exc.problems or [Problem(kind="parse", message=exc.feedback)]
            kind = type(exc) if type(exc) in _REPLY_ERRORS else ModelReplyError
            self._fail(reply.text, problems, kind, str(exc), cause=exc)

    def _merge(
        self,
        reply: str,
        change_request: AgentPayloadChangeRequest[Any],
        confirm_sink: list[tuple[Change, Finding]],
    ) -> MergeResult[Any]:
        """Step 4: merge with the active marker alone and the guards; conflicts go back with
        their change-request path and the current subtree (as the model may see it)."""
        guard = recording_guard(self.settings.guards, confirm_sink)
        try:
            merged = _merge.apply_change_request(
                self.payload, change_request, markers=frozenset({self.marker}), guard=guard
            )
        except PayloadValidationError as exc:
            self._invalid(reply, exc.errors, exc.payload, exc)
        if not merged.report.conflicts:
            return merged
        problems = conflict_problems(merged.report.conflicts, self.shown_json)
        self._fail(
            reply,
            problems,
            ModelReplyError,
            f"the change request conflicts with the payload: {_summary(problems)}",
        )

    def _validate(
        self, reply: str, result_payload: Any, result_json: Any, report: MergeReport
    ) -> None:
        """Steps 5-6: the payload type (a pydantic payload was validated by the merge), then
        the user's validators. A change that validation would silently drop (a key the type
        ignores) is a validation problem too."""
        if self.payload_type is not None and not isinstance(result_payload, BaseModel):
            adapter = self._type_adapter()
            try:
                value = adapter.validate_python(result_json)
            except ValidationError as exc:
                self._invalid(reply, validation_errors(exc), result_json, exc)
            validated = adapter.dump_python(value, mode="json", by_alias=True)
            name = getattr(self.payload_type, "__name__", str(self.payload_type))
            try:
                _merge.reconcile_validated(validated, result_json, report, name, rewrite=False)
            except PayloadValidationError as exc:
                self._invalid(reply, exc.errors, result_json, exc)
        for validator in self.settings.validators:
            try:
                validator(result_payload)
            except RetryWithFeedback as exc:
                self._fail(
                    reply,
                    [Problem(kind="custom", message=exc.feedback, path=exc.path)],
                    ModelReplyError,
                    f"a validator asked for another attempt: {exc.feedback}",
                    cause=exc,
                )

    # -- whole-merge reviews -------------------------------------------------------------

    def _shown(self, data: Any) -> Any:
        """``data`` as the model may see it (projected through the read scope, if any)."""
        scope = self.settings.read_scope
        return data if scope is None else scope.project(data)

    def _review(
        self,
        reply: str,
        result_json: Any,
        report: MergeReport,
        confirm_sink: list[tuple[Change, Finding]],
    ) -> None:
        """Ask every guard that has ``review(before, after, changes, per_change=False)`` about
        the merge as a whole (a data-loss guard: an array shrunk by many separate deletions).
        ``conflict`` findings go back to the model, ``confirm`` ones join the confirmation,
        ``warning`` ones are added to the report's warnings."""
        conflicts: list[Problem] = []
        for guard in self.settings.guards:
            review = getattr(guard, "review", None)
            if not callable(review):
                continue
            for finding in review(self.payload_json, result_json, report.changes, per_change=False):
                path = tuple(getattr(finding, "path", ()) or ())
                where = format_payload_path(path) if path else None
                if finding.severity == "conflict":
                    current, has_current = _current(self.shown_json, path)
                    conflicts.append(
                        Problem(
                            kind="guard",
                            message=finding.message,
                            path=where,
                            code=finding.code,
                            current=current,
                            has_current=has_current,
                        )
                    )
                elif finding.severity == "confirm":
                    old, had_old = _current(self.shown_json, path)
                    new, has_new = _current(self._shown(result_json), path)
                    op: Any = "update" if had_old and has_new else "delete"
                    confirm_sink.append((Change(op, path, old, new), finding))
                else:
                    report.warnings.append(
                        Issue(finding.code, "", finding.message, path if path else None)
                    )
        if conflicts:
            self._fail(
                reply,
                conflicts,
                ModelReplyError,
                f"a guard refused the change request: {_summary(conflicts)}",
            )

    # -- failures ------------------------------------------------------------------------

    def _type_adapter(self) -> TypeAdapter[Any]:
        if self._adapter is None:
            self._adapter = TypeAdapter(self.payload_type)
        return self._adapter

    def _fail(
        self,
        reply: str,
        problems: Sequence[Problem],
        error_type: type[ModelReplyError],
        message: str,
        *,
        truncated: bool = False,
        cause: BaseException | None = None,
        correction: str | None = None,
    ) -> NoReturn:
        problems = tuple(problems)
        if correction is None:
            correction = _prompts.render_correction(
                problems,
                marker=self.marker,
                reply_was_truncated=truncated,
                output_mode=self.settings.output_mode,
            )
        self.last_failure = _Failure(_echo(reply, truncated=truncated), correction, problems)
        error = error_type(
            f"attempt {self.attempt}: {message}",
            reply=reply,
            feedback=correction,
            problems=problems,
        )
        self._raise(error, cause)

    def _raise(self, error: ModelReplyError, cause: BaseException | None = None) -> NoReturn:
        """Keep ``error`` as the last one and raise it (from ``cause`` when there is one)."""
        self.last_error = error
        if cause is not None:
            raise error from cause
        raise error

    def _refused(
        self,
        reply: str,
        text: str,
        problems: Sequence[Problem] = (),
        cause: BaseException | None = None,
    ) -> NoReturn:
        self.refusals += 1
        if not problems:
            problems = [
                Problem(
                    kind="refusal",
                    code="refusal",
                    message=f"your reply declined the task ({text.strip()!r}) and held no "
                    "change request. The task is an edit of the JSON data shown: reply with "
                    'the change request that does it, or with {"reasoning": "<why nothing '
                    'should change>"} if nothing should change.',
                )
            ]
        if self.refusals >= MAX_REFUSALS:
            self.last_failure = _Failure(reply, "", tuple(problems))
            error = RefusalError(
                f"the model refused the task twice (attempt {self.attempt}, "
                f"{self.usage.total_tokens} tokens used): {text.strip()!r}. The payload is "
                "unchanged; rephrase the task or check that the model is allowed to do it.",
                reply=reply,
                feedback=text,
                problems=problems,
            )
            self._raise(error, cause)
        self._fail(
            reply, problems, RefusalError, f"the model refused: {text.strip()!r}", cause=cause
        )

    def _invalid(
        self,
        reply: str,
        errors: Sequence[tuple[Sequence[str | int], str]],
        data: Any,
        cause: BaseException,
    ) -> NoReturn:
        problems = validation_problems(errors, self._shown(_to_json(data)))
        self._fail(
            reply,
            problems,
            ModelReplyError,
            f"the merged payload does not validate: {_summary(problems)}",
            cause=cause,
        )

    def _ask_confirmation(
        self, reply: str, result_json: Any, findings: list[tuple[Change, Finding]]
    ) -> NoReturn:
        problems = tuple(
            Problem(
                kind="guard",
                message=finding.message,
                path=format_payload_path(change.path),
                code=finding.code,
                current=change.old,
                has_current=change.op != "add",
            )
            for change, finding in findings
        )
        correction = _prompts.render_confirm(
            [(change, finding) for change, finding in findings],
            marker=self.marker,
            output_mode=self.settings.output_mode,
        )
        pending = _Pending(result_json)
        self.last_failure = _Failure(_echo(reply), correction, problems)
        self.pending = pending
        error = ModelReplyError(
            f"attempt {self.attempt}: the change needs the model's confirmation: "
            f"{_summary(problems)}",
            reply=reply,
            feedback=correction,
            problems=problems,
        )
        self._raise(error)
