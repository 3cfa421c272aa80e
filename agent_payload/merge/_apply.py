# The public function: ``apply_change_request`` and its typed overloads. It checks the options,
# takes the payload in (JSON data, None or a pydantic model), normalises the request, runs the
# walk (twice when a guard's whole-merge review refuses part of the first pass), validates a
# typed result back, and raises in strict mode. Also ``ineffective_parts``: which warnings go
# back to the model because a part meant to act did nothing. ``apply_change_request`` is over
# 80 lines because its docstring is the merge's user manual; its code is about 70 lines.
"""apply_change_request: the merge's one entry point."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar, overload

from pydantic import BaseModel

from agent_payload import typed as _typed
from agent_payload._config import check_guards
from agent_payload._jsondata import json_data
from agent_payload._paths import format_payload_path
from agent_payload.changes import DEFAULT_MARKERS, AgentPayloadChangeRequest
from agent_payload.errors import ConfigurationError, MergeConflictError
from agent_payload.merge._limits import DEFAULT_LIMITS, Limits, _copy_payload, _root_error
from agent_payload.merge._markers import _validate_markers
from agent_payload.merge._messages import _strict_message
from agent_payload.merge._nodes import _ARR, _OBJ, _kind
from agent_payload.merge._request import _normalise_request
from agent_payload.merge._root import _Merger
from agent_payload.report import (
    Change,
    Finding,
    Guard,
    GuardChain,
    Issue,
    MergeReport,
    MergeResult,
)

P = TypeVar("P")
M = TypeVar("M", bound=BaseModel)


@overload
def apply_change_request(
    payload: M,
    change_request: AgentPayloadChangeRequest | Mapping[str, Any] | None,
    *,
    strict: bool = ...,
    markers: Iterable[str] = ...,
    share: bool = ...,
    guards: Sequence[Guard] | None = ...,
    limits: Limits | None = ...,
    refuse_stale_markers: bool = ...,
) -> MergeResult[M]: ...


@overload
def apply_change_request(
    payload: dict[str, Any] | None,
    change_request: AgentPayloadChangeRequest | Mapping[str, Any] | None,
    *,
    strict: bool = ...,
    markers: Iterable[str] = ...,
    share: bool = ...,
    guards: Sequence[Guard] | None = ...,
    limits: Limits | None = ...,
    refuse_stale_markers: bool = ...,
) -> MergeResult[dict[str, Any]]: ...


@overload
def apply_change_request(
    payload: list[Any],
    change_request: AgentPayloadChangeRequest | Mapping[str, Any] | None,
    *,
    strict: bool = ...,
    markers: Iterable[str] = ...,
    share: bool = ...,
    guards: Sequence[Guard] | None = ...,
    limits: Limits | None = ...,
    refuse_stale_markers: bool = ...,
) -> MergeResult[list[Any]]: ...


@overload
def apply_change_request(
    payload: Any,
    change_request: Any,
    *,
    strict: bool = ...,
    markers: Iterable[str] = ...,
    share: bool = ...,
    guards: Sequence[Guard] | None = ...,
    limits: Limits | None = ...,
    refuse_stale_markers: bool = ...,
) -> MergeResult[Any]: ...


def apply_change_request(
    payload: Any,
    change_request: Any,
    *,
    strict: bool = False,
    markers: Iterable[str] = DEFAULT_MARKERS,
    share: bool = False,
    guards: Sequence[Guard] | None = None,
    limits: Limits | None = None,
    refuse_stale_markers: bool = False,
) -> MergeResult[Any]:
    """Merge ``change_request`` into ``payload`` as MERGE.md says; return payload and report.

    ``payload``: a dict or a list (JSON data), ``None`` (treated as ``{}``), or a pydantic model
    instance (dumped in JSON mode by alias, merged, and validated back into the same class; a
    failure raises :class:`~agent_payload.errors.PayloadValidationError` whose ``errors`` are
    ``(payload_path, message)`` pairs). A model's type must round-trip exactly (checked first:
    :func:`agent_payload.typed.check_round_trip` raises ``ConfigurationError``); its secret
    and excluded fields are carried through; what validation changes (validators, union
    switches, defaults) is part of the report and judged by ``guard``; a change validation
    would drop or undo raises ``PayloadValidationError`` (see :mod:`agent_payload.typed`). A
    refused consequence of validation refuses the whole typed result: the input comes back
    with the conflict and no changes. Anything else at the root, or data that is not JSON
    anywhere inside (a tuple, a set, a datetime, a non-string key, NaN or an infinity, a
    cycle), raises :class:`~agent_payload.errors.InvalidPayloadError` naming its path.

    ``change_request``: an :class:`~agent_payload.changes.AgentPayloadChangeRequest`, a mapping
    in wire form (wrappers such as ``payloadChangeRequest`` are unwrapped, snake_case bucket
    names accepted, any other top-level field is a conflict ``unknown_field``), or ``None``
    (empty). Anything else raises :class:`~agent_payload.errors.InvalidChangeRequestError`, as
    does data inside it that is not JSON (the error names its change-request path).

    Neither input is ever mutated. The report lists effective ``changes`` (values are copies),
    ``warnings`` (auto-corrections that were applied), ``conflicts`` (parts that were not
    applied) with change-request paths, and ``reasoning`` as given (a non-string reasoning is
    kept as JSON text).

    ``changes`` come in walk order: replaceElements keys first; then at each object node key by
    key, in the order removeElements, updateElements and newElements first name them, each
    key's own change or the changes below it; at an array node, in original index order, the
    items a newElements index map inserts before each position (MERGE.md section 8) and then
    that element's deletion, replacement or nested changes; then the appended items. A
    ``delete`` has the path in the original payload, an ``add`` or ``update`` the path in the
    result (array indices shift after deletions), as MERGE.md section 4 says.

    Options:

    * ``strict``: raise :class:`~agent_payload.errors.MergeConflictError` (carrying the full
      report, whose ``changes`` are what lenient mode would have applied) when anything
      conflicts; nothing is applied.
    * ``markers``: the DELETE markers in force, any iterable of non-empty strings (a single
      string is one marker; empty: no marker at all).
    * ``share``: default ``False`` returns a payload that shares no mutable object with either
      input. ``True`` copies only the containers on the paths the request walks and shares
      every other subtree with the input payload, so a one-field edit costs the same on a 10 MB
      payload as on a 10 KB one. Then the caller must treat both the input and the result as
      immutable afterwards (mutating one changes the other), and only what the walk touches is
      checked to be JSON data (``Limits.max_nodes`` is not checked). A subtree that is deleted
      or replaced is still copied into the report's ``Change.old``, at the cost of its size.
    * ``guards``: each is called with each effective :class:`~agent_payload.report.Change`
      before it is applied (deletions, appends, replacements of containers and replaceElements
      included; several guards are asked in turn, as one ``GuardChain``).
      A :class:`~agent_payload.report.Finding` of severity ``"conflict"`` refuses the change:
      it is not applied and is recorded as a conflict with the finding's code, at the
      change-request path of the entry and the change's payload path. ``"warning"`` and
      ``"confirm"`` are recorded as warnings and the change applies. ``Issue.severity`` keeps
      the finding's severity. The guard is given each change at the **original node** it
      touches (an update or deletion of an element, or of anything inside it, at the element's
      position in ``payload``, whatever deletions before it shift it to; an appended element
      at its new position), so rules with literal indices mean what the model was shown; the
      report keeps MERGE.md's paths. A guard with ``review(before, after, changes,
      per_change=False)`` (``DataLossGuard``, ``GuardChain``) is also asked about the whole
      merge: its ``conflict`` findings refuse every change at or below their path (the merge
      runs again without them), the others are recorded as warnings. The guard must not
      mutate the change's values. A refused deletion
      of an array element keeps the element as it is (a change to it from the other bucket,
      already reported as ``shadowed``, is not applied either), and later result indices count
      it.
    * ``limits``: :class:`Limits` (depth and sizes); exceeding one raises
      :class:`~agent_payload.errors.LimitExceededError`.
    * ``refuse_stale_markers`` (the agent, the tool handler and the CLI turn it on): a DELETE
      marker written out of habit is a conflict ``stale_marker`` instead of literal data: in
      updateElements, a string equal to any of the library's markers (``"DELETE"``,
      ``"__DELETE__"``, ``"__DELETE_<8 hex>__"``) that would replace an object or an array, or
      any such string inside content added at a key or index that does not exist. Off, the
      merge follows MERGE.md to the letter (that content is literal).
    """
    return merge_checked(
        payload,
        change_request,
        strict=strict,
        markers=markers,
        share=share,
        guards=guards,
        limits=limits,
        refuse_stale_markers=refuse_stale_markers,
    )


def merge_checked(
    payload: Any,
    change_request: Any,
    *,
    strict: bool = False,
    markers: Iterable[str] = DEFAULT_MARKERS,
    share: bool = False,
    guards: Sequence[Guard] | None = None,
    limits: Limits | None = None,
    refuse_stale_markers: bool = False,
    model_json: Any = None,
) -> MergeResult[Any]:
    """``apply_change_request``, for a caller that has already checked the round trip of a
    model ``payload`` (``typed.check_round_trip``) and holds its JSON form ``model_json``
    (the judge: once per run, not once per attempt); ``None``: check and dump it here."""
    limits = DEFAULT_LIMITS if limits is None else limits
    if not isinstance(limits, Limits):
        raise ConfigurationError(f"limits must be a Limits instance or None; found {limits!r}.")
    active = _validate_markers(markers)
    guard = _one_guard(guards)

    model_class: type[BaseModel] | None = None
    if isinstance(payload, BaseModel):
        model_class = type(payload)
        before: Any = model_json
        if before is None:
            _typed.check_round_trip(payload)  # issue 17: an exact round trip, or refused first
            before = json_data(payload)
        share_mode = False
    elif payload is None:
        before = {}
        share_mode = False
    else:
        if _kind(payload) not in (_OBJ, _ARR):
            raise _root_error(payload)
        before = payload
        share_mode = share

    def work_copy() -> Any:
        if payload is None:
            return {}
        if share_mode:
            return dict(before) if type(before) is dict else list(before)
        return _copy_payload(before, limits)

    request = _normalise_request(change_request, limits)

    def merge_pass(pass_guard: Guard | None) -> tuple[Any, MergeReport]:
        report = MergeReport(reasoning=request.reasoning)
        report.conflicts.extend(request.issues)  # the top level's: none of them is applied
        merger = _Merger(
            markers=active,
            share=share_mode,
            guard=pass_guard,
            limits=limits,
            report=report,
            refuse_stale=refuse_stale_markers,
        )
        return merger.merge_root(work_copy(), request.buckets), report

    result, report = merge_pass(guard)
    findings = _review_merge(guard, before, result, report)
    refused = [f for f in findings if f.severity == "conflict"]
    if refused and guard is not None:
        # The whole-merge review refused part of the merge: merge again, refusing every change
        # at or below what it refused, so that part is not applied (and the rest is).
        result, report = merge_pass(_RefuseBelow(guard, refused))
        findings = [f for f in _review_merge(guard, before, result, report) if f not in refused]
    for finding in findings:
        path = tuple(getattr(finding, "path", ()) or ())
        issue = Issue(finding.code, "", finding.message, path, finding.severity)
        (report.conflicts if finding.severity == "conflict" else report.warnings).append(issue)

    if strict and report.conflicts:
        raise MergeConflictError(_strict_message(report), report=report)
    if model_class is not None:
        # issue 17: validation is part of the change (reported, judged by the guard).
        model, _ = _typed.validate_merged(
            model_class,
            original=payload,
            before_json=before,
            merged_json=result,
            report=report,
            guard=guard,
        )
        if report.conflicts:
            if strict:
                raise MergeConflictError(_strict_message(report), report=report)
            report.changes.clear()  # a refused consequence of validation: nothing applied
            return MergeResult(payload, report)
        return MergeResult(model, report)
    return MergeResult(result, report)


def _one_guard(guards: Sequence[Guard] | None) -> Guard | None:
    """The guard the walk asks: the one of ``guards``, or a ``GuardChain`` of several."""
    checked = check_guards(guards or (), "apply_change_request: guards")
    if not checked:
        return None
    return checked[0] if len(checked) == 1 else GuardChain(checked)


def _review_merge(
    guard: Guard | None, before: Any, after: Any, report: MergeReport
) -> list[Finding]:
    """The guard's whole-merge review, when it has one: ``guard.review(before, after, changes,
    per_change=False)`` (a ``DataLossGuard``, or a ``GuardChain`` holding one). The one place
    it runs: the agent, the tool handler and the session all merge through here."""
    review = getattr(guard, "review", None)
    if guard is None or not callable(review):
        return []
    findings = list(review(before, after, list(report.changes), per_change=False))
    for finding in findings:
        if not isinstance(finding, Finding):
            raise ConfigurationError(
                f"A guard's review must return a sequence of Finding; it returned {finding!r}."
            )
    return findings


class _RefuseBelow:
    """The guard of a second merge pass: refuses every change at or below a path that the
    whole-merge review refused (with the review's message on the first one), and asks the
    guard about the others. Has no ``review`` (the pass is reviewed by the caller)."""

    def __init__(self, guard: Guard, refused: Sequence[Finding]) -> None:
        self.guard = guard
        self.refused = [(tuple(getattr(f, "path", ()) or ()), f) for f in refused]
        self.told: set[int] = set()

    def __call__(self, change: Change) -> Sequence[Finding]:
        for n, (path, finding) in enumerate(self.refused):
            if change.path[: len(path)] == path:
                if n in self.told:
                    where = format_payload_path(path)
                    return [
                        Finding(
                            finding.code,
                            f"Not applied: part of the change to {where} refused above.",
                            "conflict",
                        )
                    ]
                self.told.add(n)
                return [finding]
        return self.guard(change)


_CLAIMS_NO_CHANGE: Final = re.compile(
    r"\b(?:no\s+(?:change|edit|update)s?\b|nothing\s+(?:to|needs|should|changes)|already|"
    r"unchanged|as\s+it\s+is|leave\s+(?:it|them|everything)|keep\s+(?:it|them|everything))",
    re.IGNORECASE,
)


def ineffective_parts(report: MergeReport, reasoning: str | None) -> list[Issue]:
    """The warnings to send back to the model as a correction, because parts of the request
    that were clearly meant to act did nothing (the agent's rule; empty when none):

    * every warning, when the request made **no** effective change at all (a DELETE at a key
      that does not exist, ``[]`` over a list, ... and nothing else);
    * the ``no_effect`` warnings, when the request changed something else but its
      ``reasoning`` claims a change (a non-empty reasoning that does not say "no change",
      "already", "unchanged", "nothing to ...", "keep it/them", "leave it/them").

    A request with conflicts is judged by them first (nothing here). A request that says
    nothing should change (``{}``, reasoning alone) has no warnings and passes.
    """
    if report.conflicts or not report.warnings:
        return []
    if not report.changes:
        return list(report.warnings)
    no_effect = [w for w in report.warnings if w.code == "no_effect"]
    if no_effect and reasoning and reasoning.strip() and not _CLAIMS_NO_CHANGE.search(reasoning):
        return no_effect
    return []
