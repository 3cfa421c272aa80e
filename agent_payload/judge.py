"""One verdict for one reply: the single pipeline that judges a model's change request.

A change request reaches the payload through three doors: ``PayloadAgent`` (text or tool mode),
``ChangeRequestToolHandler`` (frameworks that own the loop) and ``PayloadSession`` (through its
agent). All of them ask :class:`Judge`; nothing else parses, merges, validates, reviews or
decides on a confirmation::

    judge = Judge(payload, marker="DELETE", payload_type=Invoice, guards=[DataLossGuard()],
                  permissions=Permissions(deny=["id"]), read_scope=ReadScope(exclude=["secret"]))
    verdict = judge('{"updateElements": {"total": 5}}')      # text, a mapping, or a request
    if verdict.status == "accepted":
        verdict.payload, verdict.report, verdict.repairs
    else:                                                    # "problems" or "confirm"
        text_for_the_model = verdict.feedback(output_mode="text")

The steps, in order (each one lives here, once):

1. ``truncated`` (the provider says the reply was cut off): never parsed nor applied;
2. ``refusal`` (the provider's refusal field, or the parser's ``RefusalError``);
3. ``parse`` (``parse.parse_change_request_with_repairs``): syntax, prose, unknown fields;
4. ``merge`` (``merge.apply_change_request`` with the active marker alone and every guard, whose
   whole-merge ``review`` the merge runs itself, and ``refuse_stale_markers``: a DELETE marker
   written out of habit is a ``stale_marker`` conflict): any conflict, guard refusals included;
5. ``validation`` against the payload type (a pydantic payload is validated by the merge); a
   change that validation would silently drop (a key the type ignores) is a problem too;
6. ``validator``: the user's validators (``(payload) -> None``; raise ``RetryWithFeedback``, or
   ``ValueError`` / ``AssertionError`` as in pydantic's validators; an ``async def`` validator
   is awaited by the async surfaces, which drive ``Judge.steps``, and is a
   ``ConfigurationError`` for a sync call);
7. ``confirm``: guard findings of severity ``confirm`` ask the model to confirm, showing before
   and after; given ``confirming=`` the payload shown for confirmation last time, the same result
   is accepted as confirmed;
8. ``accepted``.

Nothing the model may not read is ever in a verdict's texts: the current values shown with
problems come from the payload projected through the read scope, and a merge or guard message
about a path outside the scope is replaced by one that names only the path the model wrote.
The read scope and the permissions are guards too (added to ``guards`` if not already there).

A ``Verdict`` says what happened; each surface maps it (README, "What each surface does with a
reply"): the agent raises the ``ModelReplyError`` of class ``verdict.error`` and sends
``verdict.feedback()`` on the next attempt; the tool handler returns ``verdict.feedback()`` as an
``is_error`` tool result (``confirm`` included: the same call again confirms it).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter

from agent_payload import _callables
from agent_payload import merge as _merge
from agent_payload import parse as _parse
from agent_payload import prompts as _prompts
from agent_payload import typed as _typed
from agent_payload._jsondata import format_payload_path, json_data, json_equal
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import (
    ModelReplyError,
    NoChangeRequestError,
    PayloadValidationError,
    RefusalError,
    ReplySyntaxError,
    TruncatedReplyError,
    UnknownFieldError,
)
from agent_payload.report import (
    Change,
    Finding,
    Guard,
    Issue,
    MergeReport,
    PayloadPath,
    Problem,
    ask_guard,
)

__all__ = [
    "SURFACES",
    "Judge",
    "Reply",
    "Status",
    "Verdict",
    "judge",
    "surface_table",
]

Status = Literal["accepted", "problems", "confirm"]
Stage = Literal[
    "truncated", "refusal", "parse", "merge", "validation", "validator", "confirm", "accepted"
]
Reply = str | Mapping[str, Any] | AgentPayloadChangeRequest[Any] | None
"""A reply as a surface has it: the reply text, tool-call arguments (JSON text or a decoded
mapping), an already parsed request, or ``None`` (a tool call without arguments)."""

_REPLY_ERRORS: frozenset[type[ModelReplyError]] = frozenset(
    {ModelReplyError, ReplySyntaxError, NoChangeRequestError, UnknownFieldError}
)
"""Parser errors kept with their own class (the others become ``ModelReplyError``)."""

_NOTHING: Any = object()

SURFACES: dict[str, dict[Status, str]] = {
    "PayloadAgent (text and tool mode)": {
        "accepted": "returns the `AgentResult` (payload, change request, report, repairs, "
        "confirmed findings)",
        "problems": "sends `verdict.feedback()` as the next attempt's correction (a second "
        "refusal stops with `RefusalError`); nothing applied",
        "confirm": "sends the before/after (`render_confirm`); the same payload on the next "
        "attempt is accepted as confirmed",
    },
    "ChangeRequestToolHandler.handle": {
        "accepted": "returns a `ToolResult` with the new payload and a summary of the changes; "
        "the handler keeps the payload",
        "problems": "returns an `is_error` `ToolResult` with `verdict.feedback()` (earlier "
        "calls kept); payload unchanged",
        "confirm": "cannot ask mid-call: returns an `is_error` `ToolResult` with the "
        "before/after; the same call again is accepted as confirmed",
    },
    "PayloadSession.send": {
        "accepted": "records the turn (through its agent) and moves to the new payload",
        "problems": "as the agent (the session calls it); on failure the session is unchanged",
        "confirm": "as the agent",
    },
    "MCP server and framework tools": {
        "accepted": "as the tool handler (they call it); the MCP server then writes the file "
        "atomically",
        "problems": "as the tool handler, marked as an error where the framework can (MCP "
        "error result, `ModelRetry`, `ToolMessage(status='error')`); the file is untouched",
        "confirm": "as the tool handler",
    },
    "BatchJob (batch and concurrent)": {
        "accepted": "the item is `done` with the payload, change request and report (it runs "
        "the agent's own run state)",
        "problems": "the correction goes into the next round, as the agent would send it; out "
        "of retries the item is `failed` with the last problems",
        "confirm": "the before/after goes into the next round, as the agent would send it",
    },
}
"""What each surface does with each kind of verdict: the README table "What each surface does
with a reply" is checked against this (``tests/test_judge.py``)."""


def surface_table() -> str:
    """``SURFACES`` as the Markdown table of the README section "What each surface does with
    a reply" (a test checks that the README holds exactly this)."""
    lines = [
        "| surface | `accepted` | `problems` | `confirm` |",
        "| --- | --- | --- | --- |",
    ]
    for surface, row in SURFACES.items():
        cells = " | ".join(row[status] for status in ("accepted", "problems", "confirm"))
        lines.append(f"| {surface} | {cells} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judge's answer for one reply.

    ``status``: ``accepted`` (``payload`` is the new payload, of the kind given; ``report`` the
    merge report, ``change_request`` what was applied, ``repairs`` what the parser fixed,
    ``confirmations`` the findings the model confirmed), ``problems`` (``problems`` to send
    back; nothing applied), or ``confirm`` (``confirmations``: the changes to confirm, as
    ``(change, finding)`` with before/after as the model may see them; ``payload_json`` the
    result to pass as ``confirming=`` with the next reply). ``stage`` is the step that decided;
    ``error`` the ``ModelReplyError`` class a surface that raises should use, ``message`` a
    one-line account for that error, ``cause`` the exception behind it when there was one.
    """

    status: Status
    stage: Stage
    marker: str
    problems: tuple[Problem, ...] = ()
    payload: Any = None
    payload_json: Any = None
    change_request: AgentPayloadChangeRequest[Any] | None = None
    report: MergeReport | None = None
    repairs: tuple[str, ...] = ()
    confirmations: tuple[tuple[Change, Finding], ...] = ()
    error: type[ModelReplyError] = ModelReplyError
    message: str = ""
    cause: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def codes(self) -> tuple[str, ...]:
        """The problem codes (``kind`` when a problem has no code), in order."""
        return tuple(p.code or p.kind for p in self.problems)

    def feedback(
        self,
        *,
        output_mode: Any = "text",
        tool_name: str = _prompts.DEFAULT_TOOL_NAME,
        earlier_calls_kept: bool = False,
    ) -> str:
        """The text to send back to the model: the correction for ``problems``, the
        before/after for ``confirm`` (``""`` for an accepted reply)."""
        if self.status == "confirm":
            return _prompts.render_confirm(
                self.confirmations, marker=self.marker, output_mode=output_mode, tool_name=tool_name
            )
        if self.status == "accepted":
            return ""
        return _prompts.render_correction(
            self.problems,
            marker=self.marker,
            reply_was_truncated=self.stage == "truncated",
            output_mode=output_mode,
            tool_name=tool_name,
            earlier_calls_kept=earlier_calls_kept,
        )


class Judge:
    """Judges replies against one payload and one configuration (pure: no I/O, no state
    between calls; build one per payload, call it once per reply).

    ``payload``: a dict, a list, ``None`` or a pydantic model. ``marker``: the one DELETE marker
    active (default ``merge.choose_marker``). ``payload_type``: validates the result (default:
    the class of a pydantic payload). ``validators``: ``(payload) -> None`` callables, raise
    ``RetryWithFeedback`` (or ``ValueError`` / ``AssertionError``); an ``async def`` one is
    awaited when an async driver runs ``steps`` (calling the judge is sync and refuses it with
    ``ConfigurationError``). ``guards``: ``Guard`` callables (their ``review`` too);
    ``permissions`` and ``read_scope`` are added to them; ``read_scope`` also decides what
    every text may show.
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
        payload_json: Any = _NOTHING,
        shown_json: Any = _NOTHING,
    ) -> None:
        self.payload = payload
        self.payload_json = (
            _merge.dump_payload(payload) if payload_json is _NOTHING else payload_json
        )
        if payload_type is None and isinstance(payload, BaseModel):
            payload_type = type(payload)
        self.payload_type = payload_type
        self.marker = (
            marker
            if marker is not None
            else _merge.choose_marker(
                self.payload_json,
                avoid=_typed.type_strings(payload_type),  # issue 17
            )
        )
        self.validators = tuple(validators)
        all_guards = list(guards)
        for extra in (permissions, read_scope):
            if extra is not None and not any(g is extra for g in all_guards):
                all_guards.append(extra)
        self.guards: tuple[Guard, ...] = tuple(all_guards)
        self.read_scope = read_scope
        if shown_json is _NOTHING:
            shown_json = self.shown(self.payload_json)
        self.shown_json = shown_json
        self._adapter: TypeAdapter[Any] | None = None

    # -- what the model may see ------------------------------------------------------------

    def shown(self, data: Any) -> Any:
        """``data`` (JSON data) as the model may see it: projected through the read scope."""
        scope = self.read_scope
        return data if scope is None else scope.project(data)

    def hidden(self, path: PayloadPath | None) -> bool:
        """True when the payload node at ``path`` (or an ancestor) is outside the read scope."""
        scope = self.read_scope
        if scope is None or path is None:
            return False
        for n in range(1, len(path) + 1):
            node = _lookup(self.payload_json, path[:n])
            if not scope.visible(path[:n], None if node is _MISSING else node):
                return True
        return False

    def _redact(self, issues: Sequence[Issue]) -> list[Issue]:
        """Issues about hidden nodes keep their code and paths; their message (which may
        describe the hidden value) is replaced by one naming only the path."""
        out = []
        for issue in issues:
            if self.hidden(issue.payload_path):
                where = format_payload_path(issue.payload_path or ()) or "the payload root"
                message = (
                    f"`{where}` is outside the part of the payload you were shown; this entry "
                    "was not applied there. Change only what you were shown."
                )
                issue = Issue(issue.code, issue.path, message, issue.payload_path, issue.severity)
            out.append(issue)
        return out

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
        """The judging of ``__call__`` as a generator, for the surfaces that can await: it
        yields the awaitable of each async validator (the only step that can wait); the driver
        awaits it and sends back its value, or throws its exception in; the generator returns
        the verdict. ``agent_payload._callables.drive`` runs it in sync code."""
        text = _text(reply)
        if truncated or finish_reason in ("length", "max_tokens"):
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
        if refusal is not None or finish_reason == "refusal":
            return self._refused(text or refusal or "", refusal or text)
        if isinstance(reply, AgentPayloadChangeRequest):
            request: AgentPayloadChangeRequest[Any] = reply
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
        self, request: AgentPayloadChangeRequest[Any], repairs: tuple[str, ...], confirming: Any
    ) -> Generator[Any, Any, Verdict]:
        recorder = _Recorder(self.guards, self.read_scope) if self.guards else None
        # Step 4: the merge (guards at the original node, whole-merge review included).
        try:
            merged = _merge.apply_change_request(
                self.payload,
                request,
                markers=frozenset({self.marker}),
                guards=None if recorder is None else [recorder],
                refuse_stale_markers=True,  # issue 18: a marker out of habit goes back
            )
        except PayloadValidationError as exc:
            return self._invalid(exc.errors, exc.payload, exc, request)
        report = merged.report
        report.conflicts[:] = self._redact(report.conflicts)
        report.warnings[:] = self._redact(report.warnings)
        if report.conflicts:
            problems = _conflict_problems(report.conflicts, self.shown_json)
            return self._no(
                "merge",
                problems,
                ModelReplyError,
                f"the change request conflicts with the payload: {summary(problems)}",
                request=request,
                report=report,
            )
        # issue 9: parts meant to act that did nothing go back (merge.ineffective_parts)
        ineffective = _merge.ineffective_parts(report, request.reasoning)
        if ineffective:
            problems = _conflict_problems(ineffective, self.shown_json)
            return self._no(
                "merge",
                problems,
                ModelReplyError,
                f"parts of the change request change nothing: {summary(problems)}",
                request=request,
                report=report,
            )
        result = merged.payload
        result_json = json_data(result)
        # Step 5: the payload type (a pydantic payload was validated by the merge). Issue 17:
        # JSON data with a type comes out as its validated form; what validation changes is
        # the report, each change judged by the guards; a change it drops or undoes goes back.
        if self.payload_type is not None and not isinstance(result, BaseModel):
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
                return self._invalid(exc.errors, result_json, exc, request)
            result = result_json
            if report.conflicts:
                report.conflicts[:] = self._redact(report.conflicts)
                problems = _conflict_problems(report.conflicts, self.shown_json)
                return self._no(
                    "merge",
                    problems,
                    ModelReplyError,
                    f"the validated payload was refused: {summary(problems)}",
                    request=request,
                    report=report,
                )
        # Step 6: the user's validators (an async one's awaitable is yielded to the driver,
        # which sends back its value or throws its exception in).
        for validator in self.validators:
            try:
                outcome = validator(result)
                if inspect.isawaitable(outcome):
                    yield outcome
            except Exception as exc:
                problem = _callables.validator_problem(exc)
                if problem is None and isinstance(exc, ModelReplyError):
                    problem = Problem(
                        kind="custom", message=exc.feedback, path=getattr(exc, "path", None)
                    )
                if problem is None:
                    raise
                return self._no(
                    "validator",
                    (problem,),
                    ModelReplyError,
                    f"a validator asked for another attempt: {problem.message}",
                    exc,
                    request=request,
                    report=report,
                )
        # Step 7: confirmation.
        flagged = recorder.confirmations(self, result_json, report) if recorder else []
        if flagged and (confirming is _NOTHING or not json_equal(confirming, result_json)):
            problems = tuple(
                Problem(
                    kind="guard",
                    message=finding.message,
                    path=format_payload_path(change.path),
                    code=finding.code,
                    current=change.old,
                    has_current=change.op != "add",
                )
                for change, finding in flagged
            )
            return Verdict(
                status="confirm",
                stage="confirm",
                marker=self.marker,
                problems=problems,
                payload_json=result_json,
                change_request=request,
                report=report,
                repairs=repairs,
                confirmations=tuple(flagged),
                message=f"the change needs the model's confirmation: {summary(problems)}",
            )
        return Verdict(
            status="accepted",
            stage="accepted",
            marker=self.marker,
            payload=result,
            payload_json=result_json,
            change_request=request,
            report=report,
            repairs=repairs,
            confirmations=tuple(flagged),
        )

    # -- failures --------------------------------------------------------------------------

    def _no(
        self,
        stage: Stage,
        problems: Sequence[Problem],
        error: type[ModelReplyError],
        message: str,
        cause: BaseException | None = None,
        *,
        request: AgentPayloadChangeRequest[Any] | None = None,
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
        request: AgentPayloadChangeRequest[Any],
    ) -> Verdict:
        shown = self.shown(json_data(data))
        problems = []
        for loc, msg in errors:
            path = tuple(loc)
            current, has_current = _current(shown, path)
            if self.hidden(path):
                msg = "outside the part of the payload you were shown; the change request may "
                msg += "not change it."
            problems.append(
                Problem(
                    kind="validation",
                    message=msg,
                    path=format_payload_path(path),
                    current=current,
                    has_current=has_current,
                )
            )
        return self._no(
            "validation",
            problems,
            ModelReplyError,
            f"the merged payload does not validate: {summary(problems)}",
            cause,
            request=request,
        )

    def _type_adapter(self) -> TypeAdapter[Any]:
        if self._adapter is None:
            self._adapter = TypeAdapter(self.payload_type)
        return self._adapter


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


# --- helpers -----------------------------------------------------------------------------------


class _Recorder:
    """Every guard asked in turn about each change (and about the whole merge through
    ``review``), keeping the ``confirm`` findings of the last merge pass (the merge runs a
    second pass after a review refused part of the first). A change the read scope refuses
    gets the scope's finding alone: the others could describe what the model may not see
    (the names of hidden keys a data-loss finding lists), and the change is refused anyway."""

    def __init__(self, guards: Sequence[Guard], scope: Any = None) -> None:
        self.guards = tuple(guards)
        self.scope = scope
        self.flagged: list[tuple[Change, Finding]] = []
        self.reviewed: list[Finding] = []
        self._new_pass = False

    def __call__(self, change: Change) -> list[Finding]:
        if self._new_pass:
            self.flagged.clear()
            self._new_pass = False
        if self.scope is not None:
            refused = [f for f in self.scope(change) if f.severity == "conflict"]
            if refused:
                return refused
        findings: list[Finding] = []
        for guard in self.guards:
            for finding in ask_guard(guard, change):  # a guard returning None: a clear error
                findings.append(finding)
                if finding.severity == "confirm":
                    self.flagged.append((change, finding))
        return findings

    def review(
        self, before: Any, after: Any, changes: Sequence[Change], *, per_change: bool = True
    ) -> list[Finding]:
        self._new_pass = True
        findings: list[Finding] = []
        for guard in self.guards:
            review = getattr(guard, "review", None)
            if callable(review):
                findings.extend(review(before, after, changes, per_change=per_change))
        self.reviewed = [f for f in findings if f.severity == "confirm"]
        return findings

    def confirmations(
        self, judge: Judge, result_json: Any, report: MergeReport
    ) -> list[tuple[Change, Finding]]:
        """The changes to confirm with before/after as the model may see them."""
        items = list(self.flagged)
        if self.reviewed:
            shown_after = judge.shown(result_json)
            deleted = sorted(
                (c.path for c in report.changes if c.op == "delete" and c.path),
                key=lambda p: (len(p), [str(x) for x in p]),
            )
            for finding in self.reviewed:
                path = tuple(getattr(finding, "path", ()) or ())
                old, had_old = _current(judge.shown_json, path)
                new, has_new = _current(shown_after, _shifted(path, deleted))
                op: Any = "update" if had_old and has_new else "delete"
                items.append((Change(op, path, old, new), finding))
        return items


def _shifted(path: PayloadPath, deleted: Sequence[PayloadPath]) -> PayloadPath:
    """An original path in the result: each index moves down by the deletions before it in
    the same array (``deleted``: original paths of the deleted nodes)."""
    out: list[str | int] = []
    for n, part in enumerate(path):
        if isinstance(part, int):
            parent = path[:n]
            gone = sum(
                1 for d in deleted if len(d) == n + 1 and d[:n] == parent and _before(d[n], part)
            )
            out.append(part - gone)
        else:
            out.append(part)
    return tuple(out)


def _before(index: str | int, part: int) -> bool:
    return isinstance(index, int) and index < part


def _text(reply: Reply) -> str:
    if reply is None:
        return ""
    if isinstance(reply, str):
        return reply
    if isinstance(reply, AgentPayloadChangeRequest):
        return json.dumps(reply.to_wire(), ensure_ascii=False)
    return json.dumps(dict(reply), ensure_ascii=False)


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
    names something missing, such as an index past the end) its parent container; never the
    whole root (a problem about the root itself carries no current value)."""
    if not path:
        return None, False
    value = _lookup(data, path)
    if value is not _MISSING:
        return value, True
    if len(path) > 1:
        value = _lookup(data, path[:-1])
        if value is not _MISSING:
            return value, True
    return None, False


def _conflict_problems(conflicts: Sequence[Issue], shown: Any) -> tuple[Problem, ...]:
    problems = []
    for issue in conflicts:
        current, has_current = _current(shown, issue.payload_path)
        problems.append(
            Problem(
                kind="conflict",
                message=issue.message,
                path=issue.path or format_payload_path(issue.payload_path or ()),
                code=issue.code,
                current=current,
                has_current=has_current,
            )
        )
    return tuple(problems)


def summary(problems: Sequence[Problem], limit: int = 3) -> str:
    """The first ``limit`` problems on one line (for exception messages)."""
    parts = [f"{p.path + ': ' if p.path else ''}{p.message}" for p in problems[:limit]]
    more = len(problems) - limit
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts) or "no details"
