"""Every guard asked in turn about each change and about the whole merge (``Recorder``),
keeping the findings the model must confirm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent_payload.judge._problems import shifted, value_at
from agent_payload.report import Change, Finding, Guard, MergeReport, ask_guard

if TYPE_CHECKING:
    from agent_payload.judge._judge import Judge

__all__ = ["Recorder"]


class Recorder:
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
        # ask_guard: a guard returning None is a clear error
        findings = [finding for guard in self.guards for finding in ask_guard(guard, change)]
        self.flagged += [(change, f) for f in findings if f.severity == "confirm"]
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
                old, had_old = value_at(judge.shown_json, path)
                new, has_new = value_at(shown_after, shifted(path, deleted))
                op: Any = "update" if had_old and has_new else "delete"
                items.append((Change(op, path, old, new), finding))
        return items
