"""``Judge``: the one pipeline from a reply to a verdict (the steps are listed in
``agent_payload.judge``)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Generator, Sequence
from typing import Any, Literal, NoReturn

from pydantic import BaseModel

from agent_payload import _callables, _intake
from agent_payload import merge as _merge
from agent_payload import parse as _parse
from agent_payload import typed as _typed
from agent_payload._config import read_scope_of
from agent_payload._jsondata import json_data, json_equal
from agent_payload._paths import format_payload_path, lookup
from agent_payload._reply import is_refusal, is_truncation
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import (
    ConcurrentChangeError,
    MergeConflictError,
    ModelReplyError,
    NoChangeRequestError,
    PayloadValidationError,
    RefusalError,
    ReplySyntaxError,
    TruncatedReplyError,
    UnknownFieldError,
)
from agent_payload.judge._problems import MISSING, conflict_problems, summary, value_at
from agent_payload.judge._recorder import Recorder
from agent_payload.judge._verdict import Reply, Stage, Verdict
from agent_payload.report import Guard, Issue, MergeReport, PayloadPath, Problem

__all__ = ["Judge", "judge"]

_REPLY_ERRORS: frozenset[type[ModelReplyError]] = frozenset(
    {ModelReplyError, ReplySyntaxError, NoChangeRequestError, UnknownFieldError}
)
"""Parser errors kept with their own class (the others become ``ModelReplyError``)."""

_NOTHING: Any = object()


class _Refused(Exception):
    """A step of ``_judge_request`` refused the request: ``verdict`` says why."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict


class Judge:
    """Judges replies against one payload and one configuration (pure; build one per payload,
    call it once per reply).

    ``payload``: a dict, a list, ``None`` or a pydantic model. ``marker``: the DELETE marker
    (default: ``"DELETE"`` unless the data or a string the type admits holds it, as on every
    surface). ``payload_type``: validates the result (default: a pydantic payload's class).
    ``validators``: ``(payload) -> None``, raising ``RetryWithFeedback``, ``ValueError`` or
    ``AssertionError`` (an ``async def`` one needs an async driver of ``steps``). ``guards``,
    with ``permissions`` and ``read_scope`` added; ``read_scope`` also decides what every text
    may show. ``base`` and ``applied``: for a reply written against ``base``, the requests
    applied since (giving ``payload``), over which it is rebased (MERGE.md section 9). The
    payload is prepared as every surface prepares it (``InvalidPayloadError``,
    ``PayloadValidationError``, ``ConfigurationError`` now) unless ``prepared`` is given.
    """

    def __init__(
        self,
        payload: Any,
        *,
        marker: str | None = None,
        payload_type: Any = None,
        validators: Sequence[Callable[[Any], object]] = (),
        guards: Sequence[Guard] = (),
        permissions: Guard | None = None,
        read_scope: Any = None,
        base: Any = _NOTHING,
        applied: Sequence[Any] = (),
        prepared: _intake.Prepared | None = None,
        share: bool = False,
    ) -> None:
        # share: the merge shares what it does not touch (the caller never mutates ``payload``)
        self.share = share
        self.base = base
        self.applied = tuple(applied)
        self.validators = tuple(validators)
        given = read_scope
        read_scope = read_scope_of(guards, read_scope, "Judge(read_scope=...)")
        all_guards = list(guards)
        for extra in (permissions, given):
            if extra is not None and not any(g is extra for g in all_guards):
                all_guards.append(extra)
        self.guards: tuple[Guard, ...] = tuple(all_guards)
        self.read_scope = read_scope
        if prepared is None:
            prepared = _intake.prepare(payload, payload_type, marker=marker, read_scope=read_scope)
        # The merge takes the prepared JSON (a model's round trip was checked by ``prepare``).
        self.payload = prepared.payload
        self.payload_json = prepared.payload_json
        self.payload_type = prepared.payload_type
        self.marker = prepared.marker if marker is None else marker
        self.shown_json = prepared.shown_json

    # -- what the model may see ------------------------------------------------------------

    def shown(self, data: Any) -> Any:
        """``data`` (JSON data) as the model may see it: projected through the read scope."""
        return _intake.project(self.read_scope, data)

    def hidden(self, path: PayloadPath | None) -> bool:
        """True when the payload node at ``path`` (or an ancestor) is outside the read scope."""
        scope = self.read_scope
        if scope is None or path is None:
            return False
        node = self.payload_json
        for n, part in enumerate(path, 1):  # one walk down, not one lookup per prefix
            node = lookup(node, (part,), MISSING)
            if not scope.visible(path[:n], None if node is MISSING else node):
                return True
        return False

    def _redact(self, issues: Sequence[Issue]) -> list[Issue]:
        """Issues about hidden nodes, with a message naming only the path (not the value)."""
        return [
            dataclasses.replace(
                issue,
                message=f"`{format_payload_path(issue.payload_path or ())}` is outside the part "
                "of the payload you were shown; this entry was not applied there. Change only "
                "what you were shown.",
            )
            if self.hidden(issue.payload_path)
            else issue
            for issue in issues
        ]

    # -- the verdict -----------------------------------------------------------------------

    def __call__(
        self,
        reply: Reply,
        *,
        finish_reason: str | None = None,
        truncated: bool = False,
        refusal: str | None = None,
        confirming: Any = _NOTHING,
    ) -> Verdict:
        """The verdict on ``reply``. ``finish_reason``/``truncated``/``refusal``: what the
        provider said of it (a cut-off reply is never parsed). ``confirming``: the payload JSON
        of the previous ``confirm`` verdict (``verdict.payload_json``); a reply producing the
        same payload is accepted as confirmed. Sync: an async validator is refused with a
        configuration error; async callers drive ``steps``, which lets them await it."""
        steps = self.steps(
            reply,
            finish_reason=finish_reason,
            truncated=truncated,
            refusal=refusal,
            confirming=confirming,
        )
        return _callables.drive(
            steps, "Judge", "drive Judge.steps from async code (AsyncPayloadAgent, ahandle)"
        )

    def steps(
        self,
        reply: Reply,
        *,
        finish_reason: str | None = None,
        truncated: bool = False,
        refusal: str | None = None,
        confirming: Any = _NOTHING,
    ) -> Generator[Any, Any, Verdict]:
        """``__call__``'s judging as a generator, for surfaces that can await: it yields each async
        validator's awaitable, the driver sends back its value (or throws its exception in), and
        it returns the verdict (``_callables.drive`` runs it in sync code)."""
        text = _text(reply)
        if truncated or is_truncation(finish_reason):
            problem = Problem(
                kind="truncated",
                message="your reply was cut off by the output token limit "
                f"(finish_reason={finish_reason!r}), so none of it was used.",
            )
            return self._no(
                "truncated",
                (problem,),
                TruncatedReplyError,
                "the reply was cut off by the token limit; it was not applied",
            )
        if refusal is not None or is_refusal(finish_reason):
            return self._refused(text or refusal or "", refusal or text)
        if isinstance(reply, AgentPayloadChangeRequest):
            request: AgentPayloadChangeRequest = reply
            repairs: tuple[str, ...] = ()
        else:
            try:
                parsed = _parse.parse_change_request_with_repairs(text, finish_reason=finish_reason)
            except RefusalError as exc:
                return self._refused(text, text, exc.problems, exc)
            except TruncatedReplyError as exc:
                problems = tuple(exc.problems) or (Problem(kind="truncated", message=str(exc)),)
                return self._no("truncated", problems, TruncatedReplyError, str(exc), exc)
            except ModelReplyError as exc:
                problems = tuple(exc.problems) or (Problem(kind="parse", message=exc.feedback),)
                kind = type(exc) if type(exc) in _REPLY_ERRORS else ModelReplyError
                return self._no("parse", problems, kind, str(exc), exc)
            request = parsed.change_request
            repairs = tuple(parsed.repairs)
        return (yield from self._judge_request(request, repairs, confirming))

    def _judge_request(
        self, request: AgentPayloadChangeRequest, repairs: tuple[str, ...], confirming: Any
    ) -> Generator[Any, Any, Verdict]:
        """Steps 4 to 8 for a parsed request; a step that refuses it raises ``_Refused``."""
        recorder = Recorder(self.guards, self.read_scope) if self.guards else None
        try:
            if self.base is not _NOTHING:
                request = self._rebase(request)
            self._named_outside(request)  # in the current payload's coordinates
            result, report = self._merge(request, recorder)
            result, result_json = self._validate_type(request, result, report, recorder)
            yield from self._run_validators(request, result, report)
        except _Refused as refused:
            return refused.verdict
        # Step 7: confirmation (guard findings of severity confirm, unless confirmed).
        flagged = recorder.confirmations(self, result_json, report) if recorder else []
        asked = bool(flagged) and (
            confirming is _NOTHING or not json_equal(confirming, result_json)
        )
        problems = tuple(
            Problem(
                kind="guard",
                message=finding.message,
                path=format_payload_path(change.path, root=""),
                code=finding.code,
                current=change.old,
                has_current=change.op != "add",
            )
            for change, finding in (flagged if asked else ())
        )
        status: Literal["confirm", "accepted"] = "confirm" if asked else "accepted"
        return Verdict(
            status=status,
            stage=status,
            marker=self.marker,
            problems=problems,
            payload=None if asked else result,
            payload_json=result_json,
            change_request=request,
            report=report,
            repairs=repairs,
            confirmations=tuple(flagged),
            message=f"the change needs the model's confirmation: {summary(problems)}"
            if asked
            else "",
        )

    def _named_outside(self, request: AgentPayloadChangeRequest) -> None:
        """Step 4, first: an entry naming a path outside the read scope goes back, whatever its
        value and whether the key exists (nothing merged: no answer depends on hidden data)."""
        named = getattr(self.read_scope, "named_outside", None)
        outside = named(request.to_wire(), self.shown_json) if named is not None else None
        if not outside:
            return
        issues = [
            Issue(
                "permission_denied",
                format_payload_path(rparts, root=""),
                f"`{format_payload_path(ppath)}` is outside the part of the payload you were "
                "shown: you may not add, change, delete or test anything there, whatever the "
                "value. Nothing of this change request was applied; name only what you were "
                "shown.",
                ppath,
            )
            for rparts, ppath in outside
        ]
        report = MergeReport(conflicts=issues, reasoning=request.reasoning)
        self._conflicts(request, report, issues, "the change request names hidden paths")

    def _rebase(self, request: AgentPayloadChangeRequest) -> AgentPayloadChangeRequest:
        """Step 4a (MERGE.md section 9): the request rebased over ``applied``; a collision, or a
        conflict with its own base, goes back with the current subtree shown."""
        base_json = json_data(self.base)
        try:
            return _merge.rebase_change_request(
                base_json, self.applied, request, markers=frozenset({self.marker})
            )
        except ConcurrentChangeError as exc:
            report = exc.report
            if self.read_scope is not None:
                # what the other edit did may hold values outside the scope (``applied`` need not
                # have been judged by it): only where, and the projected current value, are shown
                report.conflicts[:] = [_without_values(i) for i in report.conflicts]
            report.conflicts[:] = self._redact(report.conflicts)
            self._conflicts(
                request,
                report,
                report.conflicts,
                "the change request collides with edits applied since the payload it was "
                "written against",
            )
        except MergeConflictError as exc:
            # Judged on its base (as if it had come in time); the value shown is the current
            # one, which the next call is read against (its base is the payload as it is now).
            report = exc.report
            problems = tuple(
                dataclasses.replace(p, message=f"in the payload as you saw it: {p.message}")
                for p in conflict_problems(self._redact(report.conflicts), self.shown_json)
            )
            message = f"the change request conflicts with the payload: {summary(problems)}"
            self._refuse("merge", problems, message, request=request, report=report)

    def _merge(
        self, request: AgentPayloadChangeRequest, recorder: Recorder | None
    ) -> tuple[Any, MergeReport]:
        """Step 4: the merge (guards included); a conflict, or a part doing nothing, goes back."""
        # a model's JSON form, as the merge would dump it
        model_json = self.payload_json if isinstance(self.payload, BaseModel) else None
        try:
            merged = _merge.merge_checked(
                self.payload,
                request,
                markers=frozenset({self.marker}),
                guards=None if recorder is None else [recorder],
                refuse_stale_markers=True,  # a marker written out of habit goes back
                model_json=model_json,
                share=self.share,
            )
        except PayloadValidationError as exc:
            self._invalid(exc.errors, exc.payload, exc, request)
        report = merged.report
        report.conflicts[:] = self._redact(report.conflicts)
        report.warnings[:] = self._redact(report.warnings)
        if report.conflicts:
            self._conflicts(
                request, report, report.conflicts, "the change request conflicts with the payload"
            )
        ineffective = _merge.ineffective_parts(report, request.reasoning)
        if ineffective:
            self._conflicts(
                request, report, ineffective, "parts of the change request change nothing"
            )
        return merged.payload, report

    def _validate_type(
        self,
        request: AgentPayloadChangeRequest,
        result: Any,
        report: MergeReport,
        recorder: Recorder | None,
    ) -> tuple[Any, Any]:
        """Step 5: the payload type (a pydantic payload was validated by the merge); what
        validation changes is judged by the guards; a change it drops or undoes goes back."""
        result_json = json_data(result)
        if self.payload_type is None or isinstance(result, BaseModel):
            return result, result_json
        try:
            _, result_json = _typed.validate_merged(
                self.payload_type,
                original=None,
                before_json=self.payload_json,
                merged_json=result_json,
                report=report,
                guard=recorder,
            )
        except PayloadValidationError as exc:
            self._invalid(exc.errors, result_json, exc, request)
        if report.conflicts:
            report.conflicts[:] = self._redact(report.conflicts)
            self._conflicts(request, report, report.conflicts, "the validated payload was refused")
        return result_json, result_json

    def _run_validators(
        self, request: AgentPayloadChangeRequest, result: Any, report: MergeReport
    ) -> Generator[Any, Any, None]:
        """Step 6: the user's validators (an async one's awaitable is yielded to the driver)."""
        for validator in self.validators:
            try:
                outcome = validator(result)
                if inspect.isawaitable(outcome):
                    yield outcome
            except Exception as exc:
                problem = _callables.validator_problem(exc)
                if problem is None:
                    raise
                message = f"a validator asked for another attempt: {problem.message}"
                self._refuse("validator", (problem,), message, exc, request=request, report=report)

    # -- failures --------------------------------------------------------------------------

    def concurrent(self, error: ConcurrentChangeError) -> Verdict:
        """The verdict for a request that collided, when committed, with an edit made since
        (MERGE.md section 9): its ``concurrent_change`` conflicts shown as every conflict is, with
        the current subtree from this judge's payload (build the judge on the current one)."""
        problems = conflict_problems(self._redact(error.report.conflicts), self.shown_json)
        return self._no(
            "merge",
            problems,
            ModelReplyError,
            f"the change request collided with an edit made since (nothing applied): "
            f"{summary(problems)}",
            error,
            report=error.report,
        )

    def _conflicts(
        self,
        request: AgentPayloadChangeRequest,
        report: MergeReport,
        issues: Sequence[Issue],
        what: str,
    ) -> NoReturn:
        problems = conflict_problems(issues, self.shown_json, hidden=self.hidden)
        self._refuse(
            "merge", problems, f"{what}: {summary(problems)}", request=request, report=report
        )

    def _no(
        self,
        stage: Stage,
        problems: Sequence[Problem],
        error: type[ModelReplyError],
        message: str,
        cause: BaseException | None = None,
        *,
        request: AgentPayloadChangeRequest | None = None,
        report: MergeReport | None = None,
    ) -> Verdict:
        return Verdict(
            status="problems",
            stage=stage,
            marker=self.marker,
            problems=tuple(problems),
            change_request=request,
            report=report,
            error=error,
            message=message,
            cause=cause,
        )

    def _refuse(
        self,
        stage: Stage,
        problems: Sequence[Problem],
        message: str,
        cause: BaseException | None = None,
        **where: Any,
    ) -> NoReturn:
        """A step refuses the request: ``_judge_request`` returns this verdict."""
        raise _Refused(self._no(stage, problems, ModelReplyError, message, cause, **where))

    def _refused(
        self,
        reply: str,
        text: str,
        problems: Sequence[Problem] = (),
        cause: BaseException | None = None,
    ) -> Verdict:
        if not problems:
            problems = (
                Problem(
                    kind="refusal",
                    code="refusal",
                    message=f"your reply declined the task ({text.strip()!r}) and held no "
                    "change request. The task is an edit of the JSON data shown: reply with "
                    'the change request that does it, or with {"reasoning": "<why nothing '
                    'should change>"} if nothing should change.',
                ),
            )
        return self._no(
            "refusal", problems, RefusalError, f"the model refused: {text.strip()!r}", cause
        )

    def _invalid(
        self,
        errors: Sequence[tuple[Sequence[str | int], str]],
        data: Any,
        cause: BaseException,
        request: AgentPayloadChangeRequest,
    ) -> NoReturn:
        shown = self.shown(json_data(data))
        problems = []
        for loc, msg in errors:
            path = tuple(loc)
            current, has_current = value_at(shown, path)
            if self.hidden(path):
                msg = "outside the part of the payload you were shown; the change request may "
                msg += "not change it."
            problems.append(
                Problem(
                    kind="validation",
                    message=msg,
                    path=format_payload_path(path, root=""),
                    current=current,
                    has_current=has_current,
                )
            )
        message = f"the merged payload does not validate: {summary(problems)}"
        self._refuse("validation", problems, message, cause, request=request)


def judge(reply: Reply, payload: Any, **config: Any) -> Verdict:
    """``Judge(payload, **config)(reply)``: one reply judged once (see :class:`Judge`). The
    keywords of ``Judge.__call__`` (``finish_reason``, ``truncated``, ``refusal``,
    ``confirming``) are passed to the call."""
    call = {
        k: config.pop(k)
        for k in ("finish_reason", "truncated", "refusal", "confirming")
        if k in config
    }
    return Judge(payload, **config)(reply, **call)


def _without_values(issue: Issue) -> Issue:
    """A ``concurrent_change`` conflict saying where the other edit collided, not what it did."""
    where = format_payload_path(issue.payload_path or ())
    return dataclasses.replace(
        issue,
        message="Since the payload you were shown, another edit changed what this entry touches "
        f"(now at {where}, or no longer there). Nothing of your request was applied. Read the "
        "current value and write a new change request against the current payload.",
    )


def _text(reply: Reply) -> str:
    if reply is None:
        return ""
    if isinstance(reply, str):
        return reply
    wire = reply.to_wire() if isinstance(reply, AgentPayloadChangeRequest) else dict(reply)
    return json.dumps(wire, ensure_ascii=False)
