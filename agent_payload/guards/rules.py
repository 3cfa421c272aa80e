"""Path rules (grammar: :mod:`agent_payload.guards.permissions`): ``parse_rule`` turns a
rule's text into a :class:`PathRule`; a :class:`RuleSet` walks several rules at once down a
payload as a small NFA. Used by ``Permissions``, ``ReadScope`` and ``DataLossGuard(ignore=)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent_payload.errors import ConfigurationError
from agent_payload.report import PayloadPath

__all__ = ["ALL_OPS", "PathRule", "RuleSet", "parse_rule"]

ALL_OPS: frozenset[str] = frozenset({"add", "update", "delete"})

# Segment matchers: ("key", name), ("index", n), ("any", None), ("any_index", None), ("deep", None)
_Matcher = tuple[str, Any]
# A walk state: the NFA states of every rule, and the rules that matched the node or an ancestor.
_State = tuple[tuple[frozenset[int], ...], frozenset[int]]
_FORBIDDEN_IN_NAME = frozenset('.[]:*"')
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
class PathRule:
    """One parsed rule: ``text`` as written, the segment matchers, and the ``ops`` it concerns."""

    text: str
    matchers: tuple[_Matcher, ...]
    ops: frozenset[str] = ALL_OPS

    def start(self) -> frozenset[int]:
        return self._closure({0})

    def step(self, states: frozenset[int], segment: str | int) -> frozenset[int]:
        matchers = self.matchers
        nxt: set[int] = set()
        is_index = isinstance(segment, int)
        for i in states:
            if i >= len(matchers):
                continue
            kind, value = matchers[i]
            if kind == "deep":
                nxt.add(i)
            elif (
                kind == "any"
                or (kind == "any_index" and is_index)
                or (kind == "key" and not is_index and segment == value)
                or (kind == "index" and is_index and segment == value)
            ):
                nxt.add(i + 1)
        return self._closure(nxt) if nxt else frozenset()

    def _closure(self, states: Iterable[int]) -> frozenset[int]:
        """``states`` and those a ``**`` (zero or more segments) lets through without one."""
        out: set[int] = set()
        todo = list(states)
        while todo:
            i = todo.pop()
            if i not in out:
                out.add(i)
                if i < len(self.matchers) and self.matchers[i][0] == "deep":
                    todo.append(i + 1)
        return frozenset(out)

    def accepts(self, states: frozenset[int]) -> bool:
        return len(self.matchers) in states

    def matches(self, path: PayloadPath) -> bool:
        """True when the rule names exactly ``path`` (not merely one of its ancestors)."""
        states = self.start()
        for segment in path:
            states = self.step(states, segment)
            if not states:
                return False
        return self.accepts(states)

    def covers(self, path: PayloadPath, op: str = "update") -> bool:
        """True when the rule matches ``path`` or one of its ancestors and concerns ``op``."""
        return op in self.ops and bool(RuleSet((self,)).state_at(path)[1])


# --- parsing -------------------------------------------------------------------------------


def _error(rule: str, pos: int, expected: str) -> ConfigurationError:
    found = repr(rule[pos]) if pos < len(rule) else "the end of the rule"
    return ConfigurationError(
        f"bad path rule {rule!r} at position {pos}: expected {expected}, found {found}. "
        "Write keys as a.b, indices as items[0], any element as items[*], any key as a.*, any "
        'depth as **.id, other keys as ["key.with.dots"], and an optional :add,update,delete.'
    )


def _parse_bracket(rule: str, pos: int) -> tuple[_Matcher, int]:
    """The matcher of ``[...]`` at ``pos`` and the position after ``]``."""
    i = pos + 1
    if rule.startswith("*]", i):
        return ("any_index", None), i + 2
    number = _DIGITS.match(rule, i)
    if number is not None:
        digits, j = number.group(), number.end()
        if len(digits) > 1 and digits[0] == "0":
            raise _error(rule, i, "an index without leading zeros")
        if j >= len(rule) or rule[j] != "]":
            raise _error(rule, j, "']' after the index")
        return ("index", int(digits)), j + 1
    if i < len(rule) and rule[i] == '"':
        decoder = json.JSONDecoder()
        try:
            key, end = decoder.raw_decode(rule, i)
        except json.JSONDecodeError as exc:
            raise _error(rule, i, "a JSON string key in double quotes") from exc
        assert isinstance(key, str)  # raw_decode at '"' yields a str
        if end >= len(rule) or rule[end] != "]":
            raise _error(rule, end, "']' after the quoted key")
        return ("key", key), end + 1
    raise _error(rule, i, 'an index, "*" or a "quoted key" inside brackets')


def _parse_name(rule: str, pos: int) -> tuple[_Matcher, int]:
    """Parse a bare name, ``*`` or ``**`` at ``pos``."""
    for stars, kind in (("**", "deep"), ("*", "any")):
        if rule.startswith(stars, pos):
            end = pos + len(stars)
            if end < len(rule) and rule[end] not in ".[:":
                raise _error(rule, end, f"'.', '[' or ':' after '{stars}'")
            return (kind, None), end
    j = pos
    while j < len(rule) and rule[j] not in _FORBIDDEN_IN_NAME and not rule[j].isspace():
        j += 1
    if j == pos:
        raise _error(rule, pos, 'a key name, "*", "**" or "["')
    return ("key", rule[pos:j]), j


def parse_rule(text: str) -> PathRule:
    """Parse one rule (grammar: :mod:`agent_payload.guards.permissions`); raises
    ``ConfigurationError`` naming the position of the first problem."""
    if not isinstance(text, str):
        raise ConfigurationError(
            f"a path rule must be a string such as 'items[*].price', got {type(text).__name__}"
        )
    rule = text.strip()
    if not rule:
        raise ConfigurationError(
            "empty path rule: write a path such as 'items[*].price' (use '**' for everything)"
        )
    matcher, pos = (_parse_bracket if rule[0] == "[" else _parse_name)(rule, 0)
    matchers = [matcher]
    ops: frozenset[str] = ALL_OPS
    while pos < len(rule):
        char = rule[pos]
        if char == ".":
            matcher, pos = _parse_name(rule, pos + 1)
        elif char == "[":
            matcher, pos = _parse_bracket(rule, pos)
        elif char == ":":
            ops = _parse_ops(rule, pos + 1)
            pos = len(rule)
            break
        else:
            raise _error(rule, pos, "'.', '[' or ':'")
        matchers.append(matcher)
    return PathRule(text=rule, matchers=tuple(matchers), ops=ops)


def _parse_ops(rule: str, pos: int) -> frozenset[str]:
    ops: set[str] = set()
    offset = pos
    for word in rule[pos:].split(","):
        name = word.strip()
        if name not in ALL_OPS:
            at = offset + (len(word) - len(word.lstrip()))
            raise _error(rule, at, "an operation: add, update or delete")
        ops.add(name)
        offset += len(word) + 1
    return frozenset(ops)


def _parse_rules(rules: Iterable[str] | str | None, what: str) -> tuple[PathRule, ...]:
    if rules is None:
        return ()
    if isinstance(rules, str):
        raise ConfigurationError(
            f"{what} must be a list of path rules, got the string {rules!r}; "
            f"write {what}=[{rules!r}]"
        )
    return tuple(r if isinstance(r, PathRule) else parse_rule(r) for r in rules)


# --- the walk ------------------------------------------------------------------------------


class RuleSet:
    """Rules walked together down a payload, one cached ``_State`` per node."""

    __slots__ = ("_cache", "_indices", "_keys", "_other_key", "_start", "rules")

    _CACHE_SIZE = 65_536

    def __init__(self, rules: Sequence[PathRule]) -> None:
        self.rules = tuple(rules)
        states = tuple(rule.start() for rule in self.rules)
        covered = frozenset(i for i, r in enumerate(self.rules) if r.accepts(states[i]))
        self._start: _State = (states, covered)
        self._cache: dict[tuple[_State, type, str | int], _State] = {}
        # Segments that no rule names literally all step alike: one cache entry serves them.
        self._keys = frozenset(v for r in self.rules for k, v in r.matchers if k == "key")
        self._indices = frozenset(v for r in self.rules for k, v in r.matchers if k == "index")
        other = "\x00"
        while other in self._keys:
            other += "\x00"
        self._other_key = other

    def start(self) -> _State:
        return self._start

    def step(self, state: _State, segment: str | int) -> _State:
        if isinstance(segment, int):
            if segment not in self._indices:
                segment = -1
        elif segment not in self._keys:
            segment = self._other_key
        key = (state, type(segment), segment)
        cached = self._cache.get(key)
        if cached is None:
            if len(self._cache) >= self._CACHE_SIZE:
                self._cache.clear()
            cached = self._cache[key] = self._step(state, segment)
        return cached

    def _step(self, state: _State, segment: str | int) -> _State:
        states, covered = state
        new_states: list[frozenset[int]] = []
        new_covered = set(covered)
        for i, rule in enumerate(self.rules):
            current = states[i]
            if not current or i in covered:
                new_states.append(frozenset())
                continue
            nxt = rule.step(current, segment)
            if nxt and rule.accepts(nxt):
                new_covered.add(i)
                nxt = frozenset()
            new_states.append(nxt)
        return tuple(new_states), frozenset(new_covered)

    def state_at(self, path: PayloadPath) -> _State:
        """The walk state at ``path`` (no further than where every rule is dead)."""
        state = self._start
        for segment in path:
            if not RuleSet.alive(state):
                break
            state = self.step(state, segment)
        return state

    def names_an_index_below(self, length: int) -> bool:
        """True when a rule names a literal index of an array of ``length`` elements: else
        every element steps alike (one state for all of them, see ``step``)."""
        return any(0 <= index < length for index in self._indices)

    @staticmethod
    def alive(state: _State) -> bool:
        return any(state[0])

    def covering(self, state: _State, op: str) -> PathRule | None:
        for i in sorted(state[1]):
            if op in self.rules[i].ops:
                return self.rules[i]
        return None
