"""Write permissions: which payload paths a change request may touch (``Permissions``).

Path rules (parsed in ``guards.rules``; explained in docs/guards.md)::

    rule     := path [ ":" ops ]
    path     := first ( "." name | "." "*" | "." "**" | "[" index "]" | "[*]" | "[" string "]" )*
    first    := name | "*" | "**" | "[" string "]" | "[" index "]" | "[*]"
    ops      := op ( "," op )*          op := "add" | "update" | "delete"

A change is judged at the original node it touches, broken down into its effects on single
nodes (deleting or replacing a container deletes everything inside it; a same-kind replacement
counts only its differences): refused when a ``deny`` rule covers an effect, or when ``allow``
is given and does not cover them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agent_payload._jsondata import JSON_TYPES, Link, container_positions, json_equal, materialize
from agent_payload.errors import ConfigurationError
from agent_payload.guards._common import format_path, path_below, verb
from agent_payload.guards.rules import ALL_OPS, PathRule, RuleSet, _parse_rules, _State, parse_rule
from agent_payload.report import Change, Finding, PayloadPath

__all__ = ["ALL_OPS", "PathRule", "PermissionFinding", "Permissions", "parse_rule"]


@dataclass(frozen=True, slots=True)
class PermissionFinding(Finding):
    """A ``permission_denied`` finding: the payload ``path``, the ``op`` of the effect there
    and the ``rule`` (its text) that decided."""

    path: PayloadPath = ()
    op: str = "update"
    rule: str = ""


_Verdict = Callable[[RuleSet, _State, str, Any], tuple[bool, "PathRule | None"]]


def _fine(change: Change) -> Iterator[tuple[Link, str, Any, Any]]:
    """A change as fine changes: same-kind container replacements keep only their differences."""
    if change.op != "update":
        yield None, change.op, change.old, change.new
        return
    stack: list[tuple[Link, Any, Any]] = [(None, change.old, change.new)]
    while stack:
        linked, old, new = stack.pop()
        if isinstance(old, dict) and isinstance(new, dict):
            for key, value in old.items():
                if key not in new:
                    yield (linked, key), "delete", value, None
                else:
                    stack.append(((linked, key), value, new[key]))
            for key, value in new.items():
                if key not in old:
                    yield (linked, key), "add", None, value
        elif isinstance(old, list) and isinstance(new, list):
            common = min(len(old), len(new))
            for i in range(common):
                stack.append(((linked, i), old[i], new[i]))
            for i in range(common, len(old)):
                yield (linked, i), "delete", old[i], None
            for i in range(common, len(new)):
                yield (linked, i), "add", None, new[i]
        elif not json_equal(old, new):
            yield linked, "update", old, new


def _walk_verdicts(
    change: Change, ruleset: RuleSet, verdict: _Verdict
) -> tuple[PayloadPath, str, PathRule | None] | None:
    """The first effect of ``change`` that ``verdict`` refuses, as ``(path, op, rule)``. Below
    a node where no rule is alive every descendant gets the same verdict: the walk stops there."""
    state = ruleset.state_at(change.path)
    for linked, op, old, new in _fine(change):
        here = state
        for segment in materialize(linked):
            here = ruleset.step(here, segment)
        value = new if op == "add" else old
        refused, rule = verdict(ruleset, here, op, value)
        if refused:
            return path_below(change.path, linked), op, rule
        for side_value, side_op in ((old, "delete"), (new, "add")):
            if op not in (side_op, "update"):
                continue
            found = _walk_side(linked, here, side_value, side_op, ruleset, verdict)
            if found is not None:
                path_linked, rule = found
                return path_below(change.path, path_linked), side_op, rule
    return None


def _walk_side(
    linked: Link, state: _State, value: Any, op: str, ruleset: RuleSet, verdict: _Verdict
) -> tuple[Link, PathRule | None] | None:
    stack: list[tuple[Link, _State, Any]] = [(linked, state, value)]
    # The verdict depends only on the state (one cached object per distinct state) and on
    # whether the value is a container, so consecutive siblings share it.
    last_state: _State | None = None
    last_container = False
    last_refused = False
    last_rule: PathRule | None = None
    last_alive = False
    while stack:
        here, here_state, node = stack.pop()
        if isinstance(node, dict):
            children: Iterable[tuple[str | int, Any]] = node.items()
        elif isinstance(node, list):
            # No index named, exact JSON types: every element has the same state, so the same
            # verdict; the first is refused or none is (a million elements judged at once).
            one_by_one = not node or ruleset.names_an_index_below(len(node))
            if not one_by_one and set(map(type, node)) <= JSON_TYPES:
                child_state = ruleset.step(here_state, 0)
                refused, rule = verdict(ruleset, child_state, op, node[0])
                if refused:
                    return (here, 0), rule
                if RuleSet.alive(child_state):
                    for i in container_positions(node):
                        stack.append(((here, i), child_state, node[i]))
                continue
            children = enumerate(node)
        else:
            continue
        for segment, child in children:
            child_state = ruleset.step(here_state, segment)
            container = isinstance(child, dict | list)
            if child_state is not last_state or container is not last_container:
                last_refused, last_rule = verdict(ruleset, child_state, op, child)
                last_state, last_container = child_state, container
                last_alive = RuleSet.alive(child_state)
            if last_refused:
                return (here, segment), last_rule
            if container and last_alive:
                stack.append(((here, segment), child_state, child))
    return None


# --- Permissions ---------------------------------------------------------------------------


class Permissions:
    """A guard refusing changes outside ``allow`` or inside ``deny`` (path rules, see the
    module docstring): ``apply_change_request(..., guards=[Permissions(deny=["id"])])``.
    ``severity`` of the findings: ``"conflict"`` (refused), ``"warning"`` or ``"confirm"``."""

    code = "permission_denied"

    def __init__(
        self,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        *,
        severity: Literal["conflict", "warning", "confirm"] = "conflict",
    ) -> None:
        self.allow_rules: tuple[PathRule, ...] | None = (
            None if allow is None else _parse_rules(allow, "allow")
        )
        self.deny_rules: tuple[PathRule, ...] = _parse_rules(deny, "deny")
        if severity not in ("conflict", "warning", "confirm"):
            raise ConfigurationError(
                f"severity must be 'conflict', 'warning' or 'confirm', got {severity!r}"
            )
        self.severity: Literal["conflict", "warning", "confirm"] = severity
        self._allow = RuleSet(self.allow_rules or ())
        self._deny = RuleSet(self.deny_rules)

    def __repr__(self) -> str:
        allow = None if self.allow_rules is None else [r.text for r in self.allow_rules]
        return f"Permissions(allow={allow!r}, deny={[r.text for r in self.deny_rules]!r})"

    # -- queries ----------------------------------------------------------------------------

    def allows(self, path: PayloadPath, op: str = "update") -> bool:
        """Whether a change with ``op`` at exactly ``path`` (no contents involved) is permitted."""
        if op not in ALL_OPS:
            raise ConfigurationError(f"op must be add, update or delete, got {op!r}")
        if any(rule.covers(path, op) for rule in self.deny_rules):
            return False
        if self.allow_rules is None:
            return True
        return any(rule.covers(path, op) for rule in self.allow_rules)

    def check(self, change: Change) -> PermissionFinding | None:
        """The first violation of ``change`` as a finding, or None."""
        checks = [(self._deny, _deny_verdict, True)] if self.deny_rules else []
        if self.allow_rules is not None:
            checks.append((self._allow, _allow_verdict, False))
        for ruleset, verdict, denied in checks:
            found = _walk_verdicts(change, ruleset, verdict)
            if found is not None:
                return self._finding(change, *found, denied=denied)
        return None

    def __call__(self, change: Change) -> Sequence[Finding]:
        finding = self.check(change)
        return [] if finding is None else [finding]

    def _finding(
        self, change: Change, path: PayloadPath, op: str, rule: PathRule | None, *, denied: bool
    ) -> PermissionFinding:
        where = format_path(path)
        inside = _inside(change, path, op)
        if denied and rule is not None:
            rule_text = rule.text
            if rule.ops == ALL_OPS:
                message = (
                    f"`{where}` is read-only (rule `{rule.text}`): you may not {verb(op)} it"
                    f"{inside}. This change was not applied; leave `{where}` as it is."
                )
            else:
                message = (
                    f"`{where}` may not be {_PAST[op]} (rule `{rule.text}`){inside}. This "
                    "change was not applied."
                )
        else:
            rule_text = "allow list"
            allowed = ", ".join(f"`{r.text}`" for r in (self.allow_rules or ())) or "nothing"
            message = (
                f"`{where}` is outside what you may change: you may not {verb(op)} it{inside}. "
                f"Only these paths may change: {allowed}. This change was not applied."
            )
        return PermissionFinding(
            code=self.code,
            message=message,
            severity=self.severity,
            path=path,
            op=op,
            rule=rule_text,
        )

    # -- prompt -----------------------------------------------------------------------------

    def describe(self) -> str:
        """What the model may and may not change, for the system prompt."""
        lines: list[str] = []
        if self.allow_rules is not None:
            if self.allow_rules:
                listed = ", ".join(_describe_rule(r, allow=True) for r in self.allow_rules)
                lines.append(
                    f"You may change only these paths and what is inside them: {listed}. "
                    "Any other change is refused."
                )
            else:
                lines.append("You may not change anything in this payload.")
        for full, heading in (
            (True, "Read-only (do not add, change or delete them or anything inside them)"),
            (False, "Restricted (the kinds of change named are refused)"),
        ):
            rules = [r for r in self.deny_rules if (r.ops == ALL_OPS) is full]
            if rules:
                lines.append(
                    f"{heading}: {', '.join(_describe_rule(r, allow=False) for r in rules)}."
                )
        if not lines:
            return ""
        lines.append(
            "In these paths `a.b` is the key b inside a, `items[3]` the element at index 3, "
            '`[*]` any element, `*` any one key or element, `**` any depth, `["a.b"]` a key '
            "with dots. A change outside these permissions is refused (permission_denied)."
        )
        return "\n".join(lines)


_PAST = {"add": "added", "update": "changed", "delete": "deleted"}


def _inside(change: Change, path: PayloadPath, op: str) -> str:
    """`` (this change of `a` would delete `a.b` inside it)``, or ``""`` at the change's path."""
    if path == change.path:
        return ""
    target = f"`{format_path(change.path)}`" if change.path else "the whole payload"
    return f" (this {verb(change.op)} of {target} would {verb(op)} `{format_path(path)}` inside it)"


def _describe_rule(rule: PathRule, *, allow: bool) -> str:
    path_text = rule.text.split(":", 1)[0] if rule.ops != ALL_OPS else rule.text
    if rule.ops == ALL_OPS:
        return f"`{path_text}`"
    ops = ", ".join(op for op in ("add", "update", "delete") if op in rule.ops)
    if allow:
        return f"`{path_text}` (only: {ops})"
    return f"`{path_text}` (no {ops.replace(', ', ' / ')})"


def _deny_verdict(
    ruleset: RuleSet, state: _State, op: str, value: Any
) -> tuple[bool, PathRule | None]:
    rule = ruleset.covering(state, op)
    return rule is not None, rule


def _allow_verdict(
    ruleset: RuleSet, state: _State, op: str, value: Any
) -> tuple[bool, PathRule | None]:
    return ruleset.covering(state, op) is None, None
