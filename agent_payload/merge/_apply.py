"""apply_change_request, the merge's one entry point; ``ineffective_parts``; the validation errors
of a merged typed payload, for messages."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypedDict, TypeVar, Unpack, overload

from pydantic import BaseModel, ValidationError

from agent_payload import typed as _typed
from agent_payload._config import check_guards
from agent_payload._jsondata import json_data
from agent_payload._paths import format_payload_path
from agent_payload.changes import DEFAULT_MARKERS, AgentPayloadChangeRequest
from agent_payload.errors import ConfigurationError, MergeConflictError
from agent_payload.merge._limits import Limits, _check_limits, _check_root, _checked_copy
from agent_payload.merge._markers import _validate_markers
from agent_payload.merge._messages import _strict_message
from agent_payload.merge._request import _normalise_request
from agent_payload.merge._root import _Merger
from agent_payload.report import Change, Finding, Guard, GuardChain, Issue, MergeReport, MergeResult

M = TypeVar("M", bound=BaseModel)


class _Options(TypedDict, total=False):
    """The keyword options of ``apply_change_request`` (for its typed overloads)."""

    strict: bool
    markers: Iterable[str]
    share: bool
    guards: Sequence[Guard] | None
    limits: Limits | None
    refuse_stale_markers: bool


_ChangeRequest = AgentPayloadChangeRequest | Mapping[str, Any] | None


@overload
def apply_change_request(
    payload: M, change_request: _ChangeRequest, **options: Unpack[_Options]
) -> MergeResult[M]: ...
@overload
def apply_change_request(
    payload: dict[str, Any] | None, change_request: _ChangeRequest, **options: Unpack[_Options]
) -> MergeResult[dict[str, Any]]: ...
@overload
def apply_change_request(
    payload: list[Any], change_request: _ChangeRequest, **options: Unpack[_Options]
) -> MergeResult[list[Any]]: ...
@overload
def apply_change_request(
    payload: Any, change_request: Any, **options: Unpack[_Options]
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
    """Merge ``change_request`` into ``payload`` as docs/MERGE.md says; return payload and report.

    ``payload``: a dict or a list (JSON data), ``None`` (``{}``) or a pydantic model instance
    (dumped in JSON mode by alias, merged and validated back into its class, which must round-trip
    exactly: :mod:`agent_payload.typed`; a validation failure raises ``PayloadValidationError``).
    Anything else, or data that is not JSON anywhere inside (a tuple, NaN, a cycle), raises
    ``InvalidPayloadError`` naming its path. ``change_request``: an ``AgentPayloadChangeRequest``,
    a mapping in wire form (wrappers unwrapped, snake_case accepted) or ``None``; anything else
    raises ``InvalidChangeRequestError``. Neither input is mutated.

    The report lists effective ``changes`` in walk order, ``warnings`` (auto-corrections applied),
    ``conflicts`` (parts not applied) and ``reasoning``.

    * ``strict``: raise ``MergeConflictError`` (with the report) on any conflict; nothing applied.
    * ``markers``: the DELETE markers in force (a single string is one marker; empty: none).
    * ``share``: copy only the containers the request walks and share every other subtree with
      the input (treat both as immutable; only what the walk touches is checked).
    * ``guards``: judge each effective change at the original node it touches before it is
      applied, and (``review``) the whole merge: docs/guards.md.
    * ``limits``: :class:`Limits`; exceeding one raises ``LimitExceededError``.
    * ``refuse_stale_markers``: a library marker written out of habit in updateElements is a
      conflict ``stale_marker`` instead of literal data."""
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
    """``apply_change_request`` for a caller holding the checked JSON form ``model_json`` of
    a model ``payload`` (the judge: once per run, not per attempt); ``None``: made here."""
    limits = _check_limits(limits)
    active = _validate_markers(markers)
    checked = check_guards(guards or (), "apply_change_request: guards")
    guard: Guard | None = GuardChain(checked) if len(checked) > 1 else next(iter(checked), None)

    model_class = type(payload) if isinstance(payload, BaseModel) else None
    if model_class is not None:
        before: Any = model_json
        if before is None:
            _typed.check_round_trip(payload)  # an exact round trip, or refused first
            before = json_data(payload)
    elif payload is None:
        before = {}
    else:
        _check_root(payload)
        before = payload
    share_mode = share and model_class is None and payload is not None

    def work_copy() -> Any:
        if share_mode:
            return dict(before) if type(before) is dict else list(before)
        return _checked_copy(before, limits)

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
        # Validation is part of the change (reported, judged by the guard).
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


def _review_merge(
    guard: Guard | None, before: Any, after: Any, report: MergeReport
) -> list[Finding]:
    """The guard's whole-merge ``review(before, after, changes, per_change=False)``, if any:
    the one place it runs (the agent, the tool handler and the session merge through here)."""
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
                    message = f"Not applied: part of the change to {where} refused above."
                    return [Finding(finding.code, message, "conflict")]
                self.told.add(n)
                return [finding]
        return self.guard(change)


_CLAIMS_NO_CHANGE: Final = re.compile(
    r"\b(?:no\s+(?:change|edit|update)s?\b|nothing\s+(?:to|needs|should|changes)|already|"
    r"unchanged|as\s+it\s+is|leave\s+(?:it|them|everything)|keep\s+(?:it|them|everything))",
    re.IGNORECASE,
)


def ineffective_parts(report: MergeReport, reasoning: str | None) -> list[Issue]:
    """The warnings to send back to the model because parts meant to act did nothing (the
    agent's rule): every warning when the request made no effective change; the ``no_effect``
    warnings when it changed something else but its ``reasoning`` claims a change (does not say
    "no change", "already", "unchanged", "nothing to ...", "keep/leave it"). Empty for a request
    with conflicts (judged by them) or with no warnings."""
    if report.conflicts or not report.warnings:
        return []
    if not report.changes:
        return list(report.warnings)
    no_effect = [w for w in report.warnings if w.code == "no_effect"]
    if no_effect and reasoning and reasoning.strip() and not _CLAIMS_NO_CHANGE.search(reasoning):
        return no_effect
    return []


def validation_errors(
    exc: ValidationError, data: Any = None
) -> list[tuple[tuple[str | int, ...], str]]:
    """``(payload path, message)`` for each error of a pydantic ``ValidationError``. With
    ``data`` (the value validated), union branch tags are removed from the paths
    (:func:`agent_payload.typed.clean_loc`) and duplicates dropped."""
    if data is not None:
        return _typed.validation_errors(exc, data)
    return [(tuple(err["loc"]), str(err["msg"])) for err in exc.errors(include_url=False)]


def list_validation_errors(errors: Sequence[tuple[Sequence[str | int], str]]) -> str:
    """The first ten ``(payload path, message)`` pairs as one line for an error message."""
    return "; ".join(f"{format_payload_path(p)}: {m}" for p, m in errors[:10])
