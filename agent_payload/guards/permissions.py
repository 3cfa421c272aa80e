"""Write permissions: which payload paths a change request may touch.

Path rules
==========

A rule names a set of payload paths, optionally followed by the operations it concerns::

    rule     := path [ ":" ops ]
    path     := first ( "." name | "." "*" | "." "**" | "[" index "]" | "[*]" | "[" string "]" )*
    first    := name | "*" | "**" | "[" string "]" | "[" index "]" | "[*]"
    ops      := op ( "," op )*          op := "add" | "update" | "delete"

* ``a.b``: the key ``b`` inside the key ``a``. A bare ``name`` is one or more characters other
  than ``. [ ] : * "`` and white space; it is always an object key (``stats.2024`` is the key
  ``"2024"``, never an index).
* ``["key.with.dots"]``: any key at all, written as a JSON string in brackets (``[""]``,
  ``["*"]``, ``["a[0]"]``).
* ``items[0]``: the element at index 0. ``items[*]``: any element of ``items``.
* ``*``: exactly one segment, any key or any index. ``a.*`` is everything strictly *below*
  ``a``: the keys (or elements) of ``a`` and what is inside them, but **not** ``a`` itself.
* ``**``: zero or more segments, keys or indices. ``**.id`` is the key ``id`` at any depth
  (the top level included); ``a.**`` is ``a`` itself and everything below it; ``**`` alone is
  the whole payload.
* ``:add,update,delete``: the kinds of change the rule concerns (default: all three).

A rule that matches a path also covers everything inside it: ``deny=["customer"]`` makes the
whole ``customer`` object read-only. A change is judged at the **original node** it touches:
the merge hands the guard an update, a replacement or a deletion of an element (or of anything
inside it) at the element's position in the payload as given, whatever deletions before it
shift it to in the result; only an appended or inserted element is judged at its new position
(in the original container). So ``deny=["items[1]"]`` protects the element the model was shown
at index 1, even when the same request deletes ``items[0]`` (the report still names result
positions for adds and updates, MERGE.md section 4). An item inserted into an array (MERGE.md
section 8) is an ``add`` at its result position: ``items[*]:add`` allows it.

How a change is checked
=======================

Every effective change is broken down into its effects on single payload nodes: the node it
targets gets the change's operation; a change that deletes or replaces a container *deletes*
every node inside the old value; a change that adds a container, or replaces a value by one,
*adds* every node inside the new value. (A container replaced by a container of the same kind
is compared first, and only the differences count.) So deleting ``items`` when
``items[*].price`` is read-only is refused, and so is replacing ``a`` by a number when
``a.b`` is read-only. An effect is *covered* by a rule when the rule matches the node or one of
its ancestors and the effect's operation is among the rule's operations.

* ``deny`` (read-only paths): a change with any effect covered by a deny rule is refused.
* ``allow`` (the only paths that may change): a change is refused unless every one of its
  effects is covered by an allow rule. ``allow=None`` means no allow list; ``allow=[]`` means
  nothing may change.
* Both: a change must be allowed and not denied.

Refusals are ``Finding``\\ s with code ``permission_denied`` (severity ``conflict``) whose
message names the concrete payload path, the operation and the rule; the merge records them as
conflicts and does not apply the change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agent_payload._jsondata import (
    JSON_TYPES,
    Link,
    container_positions,
    json_equal,
    materialize,
)
from agent_payload.errors import ConfigurationError
from agent_payload.guards._common import format_path, path_below, verb
from agent_payload.guards.rules import ALL_OPS, PathRule, RuleSet, _parse_rules, _State, parse_rule
from agent_payload.report import Change, Finding, PayloadPath

__all__ = [
    "ALL_OPS",
    "PathRule",
    "PermissionFinding",
    "Permissions",
    "parse_rule",
]


@dataclass(frozen=True, slots=True)
class PermissionFinding(Finding):
    """A ``permission_denied`` finding, with the concrete payload ``path`` it concerns, the
    ``op`` of the effect there and the ``rule`` (its text) that decided."""

    path: PayloadPath = ()
    op: str = "update"
    rule: str = ""


_Verdict = Callable[[RuleSet, _State, str, Any], tuple[bool, "PathRule | None"]]
_MISSING = object()


def effects(change: Change) -> Iterator[tuple[PayloadPath, str, int]]:
    """The node-level effects of ``change`` (see the module docstring), as
    ``(path, op, depth_below_change)`` triples. Provided for tests and tools; the guards walk
    the same structure with rule states instead."""
    for linked, op, _value in _effect_nodes(change):
        yield path_below(change.path, linked), op, _depth(linked)


def _depth(linked: Link) -> int:
    n = 0
    while linked is not None:
        linked = linked[0]
        n += 1
    return n


def _effect_nodes(change: Change) -> Iterator[tuple[Link, str, Any]]:
    """Yield ``(linked_path_below_change, op, value)`` for every affected node, iteratively.
    ``value`` is the node's value on the side that has it (old for deletes)."""
    for linked, op, old, new in _fine(change):
        yield linked, op, old if op == "delete" else new
        if op in ("delete", "update"):
            yield from _descendants(linked, old, "delete")
        if op in ("add", "update"):
            yield from _descendants(linked, new, "add")


def _fine(change: Change) -> Iterator[tuple[Link, str, Any, Any]]:
    """Break a change into fine changes: same-kind container replacements are compared and
    only their differences are kept."""
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


def _descendants(linked: Link, value: Any, op: str) -> Iterator[tuple[Link, str, Any]]:
    stack: list[tuple[Link, Any]] = [(linked, value)]
    while stack:
        here, node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                yield (here, key), op, child
                stack.append(((here, key), child))
        elif isinstance(node, list):
            for i, child in enumerate(node):
                yield (here, i), op, child
                stack.append(((here, i), child))


def _walk_verdicts(
    change: Change,
    ruleset: RuleSet,
    verdict: _Verdict,
) -> tuple[PayloadPath, str, PathRule | None] | None:
    """Walk the effects of ``change`` carrying rule states; return the first effect for which
    ``verdict(ruleset, state, op, value)`` returns a refusal ``(True, rule)``, as
    ``(path, op, rule)``.

    Below a node where no rule is alive, every descendant with the same operation gets the
    same verdict (it depends only on the rules covering the node), so the walk stops there.
    """
    state = ruleset.start()
    for segment in change.path:
        state = ruleset.step(state, segment)
    for linked, op, old, new in _fine(change):
        here = state
        for segment in materialize(linked):
            here = ruleset.step(here, segment)
        value = new if op == "add" else old
        refused, rule = verdict(ruleset, here, op, value)
        if refused:
            return path_below(change.path, linked), op, rule
        sides: list[tuple[Any, str]] = []
        if op in ("delete", "update"):
            sides.append((old, "delete"))
        if op in ("add", "update"):
            sides.append((new, "add"))
        for side_value, side_op in sides:
            found = _walk_side(linked, here, side_value, side_op, ruleset, verdict)
            if found is not None:
                path_linked, rule = found
                return path_below(change.path, path_linked), side_op, rule
    return None


def _walk_side(
    linked: Link,
    state: _State,
    value: Any,
    op: str,
    ruleset: RuleSet,
    verdict: _Verdict,
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
            if node and not ruleset.names_an_index_below(len(node)):
                containers = _container_indices(node)
                if containers is not None:
                    # Every element has the same state, so the same verdict: the first
                    # element is refused or none is (a million elements judged at once).
                    child_state = ruleset.step(here_state, 0)
                    refused, rule = verdict(ruleset, child_state, op, node[0])
                    if refused:
                        return (here, 0), rule
                    if RuleSet.alive(child_state):
                        for i in containers:
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


def _container_indices(items: list[Any]) -> Iterable[int] | None:
    """The indices of the dicts and lists among ``items`` (found at C speed), or None when an
    element is of another type (a subclass is judged element by element)."""
    return container_positions(items) if set(map(type, items)) <= JSON_TYPES else None


# --- Permissions ---------------------------------------------------------------------------


class Permissions:
    """A guard that refuses changes outside ``allow`` or inside ``deny`` (see the module
    docstring for the rule grammar and how a change is checked).

    >>> perms = Permissions(deny=["id", "items[*].sku"])
    >>> apply_change_request(payload, request, guards=[perms])   # doctest: +SKIP

    ``severity`` is the severity of the findings (``"conflict"``: refused; ``"warning"``: only
    recorded). ``describe()`` is the text the agent puts in the system prompt.
    """

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
        """True when a change with ``op`` at exactly ``path`` (no container contents involved)
        is permitted."""
        if op not in ALL_OPS:
            raise ConfigurationError(f"op must be add, update or delete, got {op!r}")
        if any(rule.covers(path, op) for rule in self.deny_rules):
            return False
        if self.allow_rules is None:
            return True
        return any(rule.covers(path, op) for rule in self.allow_rules)

    def check(self, change: Change) -> PermissionFinding | None:
        """The first violation of ``change`` as a finding, or None."""
        if self.deny_rules:
            found = _walk_verdicts(change, self._deny, _deny_verdict)
            if found is not None:
                path, op, rule = found
                return self._finding(change, path, op, rule, denied=True)
        if self.allow_rules is not None:
            found = _walk_verdicts(change, self._allow, _allow_verdict)
            if found is not None:
                path, op, rule = found
                return self._finding(change, path, op, rule, denied=False)
        return None

    def __call__(self, change: Change) -> Sequence[Finding]:
        finding = self.check(change)
        return [] if finding is None else [finding]

    def _finding(
        self,
        change: Change,
        path: PayloadPath,
        op: str,
        rule: PathRule | None,
        *,
        denied: bool,
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
        """What the model may change and may not, for the system prompt's permissions
        section."""
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
        full = [r for r in self.deny_rules if r.ops == ALL_OPS]
        partial = [r for r in self.deny_rules if r.ops != ALL_OPS]
        if full:
            listed = ", ".join(_describe_rule(r, allow=False) for r in full)
            lines.append(
                f"Read-only (do not add, change or delete them or anything inside them): {listed}."
            )
        if partial:
            listed = ", ".join(_describe_rule(r, allow=False) for r in partial)
            lines.append(f"Restricted (the kinds of change named are refused): {listed}.")
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
    """`` (this change of `a` would delete `a.b` inside it)`` when the effect is not at the
    change's own path."""
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
