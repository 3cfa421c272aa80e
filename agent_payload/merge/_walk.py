"""The walk's base: the site being merged, the driver, and committing one change."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agent_payload._jsondata import Link, copy_tree, json_equal, materialize
from agent_payload._paths import format_payload_path
from agent_payload.errors import ConfigurationError
from agent_payload.merge._limits import Limits, _checked_copy
from agent_payload.merge._messages import _Reporter
from agent_payload.merge._nodes import _BAD, _OBJ, _PRIM, _SAME, _SCALAR_TYPES, _kind
from agent_payload.report import Change, ChangeOp, Finding, Guard, MergeReport, ask_guard

_Walk = Iterator[Any]
_Layout = tuple[int, list[int], dict[int, int], int]


def _run(walk: _Walk) -> None:
    """Drive a tree of generator walks without recursion: a walk yields a child walk to run it
    to completion before it continues."""
    stack = [walk]
    push = stack.append
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        else:
            push(child)


@dataclass(slots=True)
class _Site:
    """A container being merged, what each bucket says of it (``None``: nothing), and their
    places: ``at`` in the original payload, ``result_at`` in the result, ``update_at``,
    ``new_at``, ``remove_at`` in the change request."""

    node: Any
    update: Any
    new: Any
    remove: Any
    at: Link
    result_at: Link
    update_at: Link
    new_at: Link
    remove_at: Link


class _Walker(_Reporter):
    """One merge: holds options and the report, and walks the payload beside the buckets."""

    def __init__(
        self,
        *,
        markers: frozenset[str],
        share: bool,
        guard: Guard | None,
        limits: Limits,
        report: MergeReport,
        refuse_stale: bool = False,
    ) -> None:
        super().__init__(markers=markers, limits=limits, report=report)
        self.refuse_stale = refuse_stale
        self.share = share
        self.guard = guard
        # The rebase (section 9) asks each walked array's layout: original path ->
        # (original length, deleted original indices, original index -> items inserted before
        # it, the result's length). None: not asked.
        self.layouts: dict[tuple[str | int, ...], _Layout] | None = None

    def walk_object(self, site: _Site) -> _Walk:
        """Merge into an object (section 3.1): _objects.py."""
        raise NotImplementedError

    def walk_array(self, site: _Site) -> _Walk:
        """Merge into an array (sections 3.2 and 8): _arrays.py."""
        raise NotImplementedError

    # --- values ---------------------------------------------------------------------------

    def old_value(self, value: Any, plink: Link) -> Any:
        """The old value for a Change. In default mode it is our own copy's object, detached
        from the result once the change applies; in share mode it is the input's: copied."""
        if type(value) in _SCALAR_TYPES or (not self.share and _kind(value) != _BAD):
            return value
        return _checked_copy(value, self.limits, at=plink)

    def check_payload_value(self, value: Any, plink: Link) -> int:
        """Kind of a payload value read by the walk (share mode may meet unchecked data)."""
        k = _kind(value)
        if k == _BAD or (k == _PRIM and type(value) is float and value - value != 0.0):
            _checked_copy(value, self.limits, at=plink)  # raises with the path
        return k

    def owned_child(self, value: Any, kind: int) -> Any:
        """The container to edit in place: in share mode a shallow copy of the input's."""
        if not self.share and (type(value) is dict or type(value) is list):
            return value
        if kind == _OBJ:
            return dict(value)
        return list(value)

    # --- changes and the guard --------------------------------------------------------------

    def commit(
        self, op: ChangeOp, plink: Link, old: Any, new: Any, rlink: Link, glink: Link = _SAME
    ) -> bool:
        """Ask the guard about one effective change; record it; True when it may be applied.

        ``plink`` is the change's path in the report (MERGE.md section 4); ``glink`` (default
        ``plink``) where the guard judges it and its findings are recorded: the original node the
        change touches, or an appended or inserted element's position in the result."""
        if self.refuse_stale and self.stale_marker(op, old, new, plink, rlink):
            return False
        if glink is _SAME:
            glink = plink
        path = materialize(plink)
        change = Change(
            op,
            path,
            self.old_value(old, plink) if op != "add" else None,
            copy_tree(new, self.limits.max_depth, self.limits.max_request_nodes)
            if op != "delete"
            else None,
        )
        if self.guard is not None:
            gpath = path if glink is plink else materialize(glink)
            judged = change if gpath == path else Change(op, gpath, change.old, change.new)
            findings = ask_guard(self.guard, judged)  # a guard returning None: a clear error
            refused = False
            for finding in findings:
                if not isinstance(finding, Finding):
                    raise ConfigurationError(
                        f"A guard must return a sequence of Finding; it returned {finding!r} "
                        f"for the change at {format_payload_path(gpath)}."
                    )
                issue = self.issue(finding.code, rlink, finding.message, glink, finding.severity)
                if finding.severity == "conflict":
                    refused = True
                    self.report.conflicts.append(issue)
                else:
                    self.report.warnings.append(issue)
            if refused:
                return False
        self.report.changes.append(change)
        return True

    def set_key(
        self, c: dict[str, Any], k: str, value: Any, plink: Link, rlink: Link, glink: Link
    ) -> None:
        """Set ``c[k]`` to a literal value from the request (an add or an update); ``plink``
        is its result path, ``glink`` its original one (see ``commit``)."""
        if k in c:
            old = c[k]
            if _kind(old) == _BAD:
                self.check_payload_value(old, plink)
            if json_equal(old, value):
                return
            if self.commit("update", plink, old, value, rlink, glink):
                c[k] = value
        elif self.commit("add", plink, None, value, rlink, glink):
            c[k] = value

    def delete_key(self, c: dict[str, Any], k: str, plink: Link, rlink: Link) -> None:
        if self.commit("delete", plink, c[k], None, rlink):
            del c[k]
