"""Read scope: which object keys the model sees (arrays whole, an element out of scope as
``{}``, ``[]`` or ``null``), and the write protection that follows (docs/guards.md). Requests
are judged on the request and the projection alone, never on hidden data (no oracle).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from agent_payload._jsondata import json_data
from agent_payload.errors import ConfigurationError
from agent_payload.guards._common import format_path, verb
from agent_payload.guards.permissions import PermissionFinding, _walk_verdicts
from agent_payload.guards.rules import ALL_OPS, PathRule, RuleSet, _parse_rules, _State
from agent_payload.report import Change, Finding, PayloadPath

__all__ = ["ReadScope"]


def _rules(rules: Iterable[str] | None, what: str) -> tuple[PathRule, ...]:
    out = _parse_rules(rules, what)
    for rule in out:
        if rule.ops != ALL_OPS:
            raise ConfigurationError(
                f"read scope rule {rule.text!r} has an operation suffix; read scopes select "
                "what the model sees, so write the path alone (e.g. 'customer.email')"
            )
    return out


class ReadScope:
    """Select which object keys the model sees (``project``); a ``Guard`` protecting the rest."""

    code = "permission_denied"

    def __init__(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> None:
        self.include_rules: tuple[PathRule, ...] | None = (
            None if include is None else _rules(include, "include")
        )
        self.exclude_rules: tuple[PathRule, ...] = _rules(exclude, "exclude")
        self._n_include = len(self.include_rules or ())
        self._rules = RuleSet((*(self.include_rules or ()), *self.exclude_rules))

    def __repr__(self) -> str:
        include = None if self.include_rules is None else [r.text for r in self.include_rules]
        return f"ReadScope(include={include!r}, exclude={[r.text for r in self.exclude_rules]!r})"

    # -- the decision -----------------------------------------------------------------------

    def _hidden(self, state: _State, value: Any) -> tuple[bool, PathRule | None]:
        """Whether the node (holding ``value``) is out of scope, and the exclude rule that hides
        it (None: not included)."""
        states, covered = state
        n = self._n_include
        for i in sorted(covered):
            if i >= n:
                return True, self._rules.rules[i]
        if self.include_rules is None:
            return False, None
        if any(i < n for i in covered):
            return False, None
        if isinstance(value, dict | list) and any(states[i] for i in range(n)):
            return False, None
        return True, None

    def _verdict(
        self, ruleset: RuleSet, state: _State, op: str, value: Any
    ) -> tuple[bool, PathRule | None]:
        return self._hidden(state, value)

    def visible(self, path: PayloadPath, value: Any = None) -> bool:
        """Whether the node at ``path`` (holding ``value``) is in scope (array elements too)."""
        return not self._hidden(self._rules.state_at(path), value)[0]

    # -- the view ---------------------------------------------------------------------------

    def project(self, payload: Any) -> Any:
        """The payload as the model sees it: a new value holding only what is in scope (a
        pydantic model is dumped in JSON mode first); it shares nothing with the input."""
        data = json_data(payload)
        if not isinstance(data, dict | list):
            return data
        root: Any = {} if isinstance(data, dict) else []
        stack: list[tuple[Any, Any, _State]] = [(data, root, self._rules.start())]
        while stack:
            source, target, state = stack.pop()
            if isinstance(source, dict):
                for key, value in source.items():
                    child = self._rules.step(state, key)
                    if self._hidden(child, value)[0]:
                        continue
                    target[key] = self._shell(value, child, stack)
            else:
                for index, value in enumerate(source):
                    child = self._rules.step(state, index)
                    if self._hidden(child, value)[0]:
                        target.append(_emptied(value))
                    else:
                        target.append(self._shell(value, child, stack))
        return root

    @staticmethod
    def _shell(value: Any, state: _State, stack: list[tuple[Any, Any, _State]]) -> Any:
        if isinstance(value, dict | list):
            shell: Any = {} if isinstance(value, dict) else []
            stack.append((value, shell, state))
            return shell
        return value

    # -- the guard --------------------------------------------------------------------------

    def guard(self) -> ReadScope:
        """The write guard for this scope (the scope itself)."""
        return self

    def check(self, change: Change) -> PermissionFinding | None:
        """The first out-of-scope node ``change`` would touch, as a finding, or None."""
        found = _walk_verdicts(change, self._rules, self._verdict)
        if found is None:
            return None
        path, op, rule = found
        # The message goes to the model: it names only what the model asked to change, never
        # the hidden path below it or the rule that hides it (``path``/``rule`` on the finding
        # keep them for the program).
        asked = tuple(change.path)
        if tuple(path) == asked:
            message = (
                f"`{format_path(asked)}` is outside the part of the payload you were shown, so "
                f"you may not {verb(op)} it. This change was not applied; change only what you "
                "were shown."
            )
        else:
            message = (
                f"`{format_path(asked)}` holds content you were not shown, so you may not "
                f"{verb(change.op)} it as a whole. This change was not applied; change only the "
                "keys you were shown inside it."
            )
        return PermissionFinding(
            code=self.code,
            message=message,
            severity="conflict",
            path=path,
            op=op,
            rule=rule.text if rule is not None else "read scope",
        )

    def named_outside(
        self, request: Mapping[str, Any], shown: Any
    ) -> list[tuple[tuple[str | int, ...], PayloadPath]]:
        """Every entry of ``request`` (wire form) naming a path outside the scope, as (its
        request path, the payload path), judged on ``request`` and ``shown`` (the projection
        the model saw) only. ``{}`` placeholders name nothing; nothing below an entry listed."""
        found: list[tuple[tuple[str | int, ...], PayloadPath]] = []
        for bucket in _BUCKETS:
            value = request.get(bucket)
            if not isinstance(value, dict | list):
                continue
            stack: list[tuple[tuple[str | int, ...], PayloadPath, Any, Any, _State]] = [
                ((bucket,), (), value, shown, self._rules.start())
            ]
            while stack:
                rparts, ppath, node, seen, state = stack.pop()
                for rpart, ppart, child, child_seen in _named(bucket, node, seen):
                    if bucket in _PLACEHOLDING and child == {}:
                        continue
                    child_state = self._rules.step(state, ppart)
                    at = (*rparts, rpart)
                    if self._hidden(child_state, child)[0]:
                        found.append((at, (*ppath, ppart)))
                    elif isinstance(child, dict | list) and RuleSet.alive(child_state):
                        stack.append((at, (*ppath, ppart), child, child_seen, child_state))
        return sorted(found, key=lambda item: [str(p) for p in item[0]])

    def __call__(self, change: Change) -> Sequence[Finding]:
        finding = self.check(change)
        return [] if finding is None else [finding]

    def describe(self) -> str:
        """The read-scope paragraph for the system prompt."""
        if self.include_rules is None and not self.exclude_rules:
            return ""
        text = (
            "You see only part of the payload: objects show only the keys in your scope. "
            "Arrays are shown whole, each element at its real index; an element shown as {}, "
            "[] or null may hold content you cannot see. Keys you were not shown exist and "
            "are read-only: do not add, change or delete them, and do not delete or replace "
            "a container that holds them."
        )
        if self.include_rules is not None:
            text += " Do not add keys outside what you were shown."
        return text


_BUCKETS = ("updateElements", "newElements", "removeElements", "replaceElements")
_PLACEHOLDING = ("updateElements", "removeElements")


def _index(key: str) -> bool:
    """A decimal index key of an index map (MERGE.md section 7)."""
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0") and len(key) < 20


def _named(bucket: str, node: Any, seen: Any) -> Iterator[tuple[str | int, str | int, Any, Any]]:
    """The entries of a request node: (request part, payload part, value, shown value there).
    ``seen`` (the projection there) decides whether a dict is an index map and where
    newElements appends."""
    seen_list = seen if isinstance(seen, list) else None
    if isinstance(node, dict):
        over_array = seen_list is not None and all(_index(k) for k in node)
        for key, child in node.items():
            if not over_array:
                yield key, key, child, seen.get(key) if isinstance(seen, dict) else None
                continue
            i = int(key)
            below = seen_list[i] if seen_list is not None and i < len(seen_list) else None
            if bucket == "newElements" and isinstance(child, list):  # items inserted before i
                for item in child:
                    yield key, i, item, None
            else:
                yield key, i, child, below
    else:
        start = len(seen_list) if bucket == "newElements" and seen_list is not None else 0
        for i, child in enumerate(node):
            below = seen_list[i] if seen_list is not None and i < len(seen_list) else None
            yield i, start + i, child, None if start else below


def _emptied(value: Any) -> Any:
    """An out-of-scope array element as shown: ``{}``, ``[]`` or ``null``."""
    return {} if isinstance(value, dict) else [] if isinstance(value, list) else None
