"""The data-loss guard: flag effective changes that look like content lost by accident (a long
text cut to ``...``, forty items to three, an object to ``"see above"``); the rules and
policies are in docs/guards.md. ``review`` sees the whole merge, where each deleted element is
its own change: it counts deletions against each container's size before the merge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agent_payload._config import check_number
from agent_payload._jsondata import Link, PathMap, json_data
from agent_payload._paths import lookup
from agent_payload.errors import ConfigurationError
from agent_payload.guards._common import format_path, json_size, path_below
from agent_payload.guards.rules import PathRule, RuleSet, _parse_rules
from agent_payload.report import Change, Finding, PayloadPath

__all__ = ["DATA_LOSS_RULES", "DataLossFinding", "DataLossGuard", "Policy"]

Policy = Literal["allow", "warn", "confirm", "reject"]
# policy -> (the findings' severity, the prompt's word for it, the advice in a finding)
_POLICIES: dict[str, tuple[Literal["warning", "confirm", "conflict"], str, str]] = {
    "warn": ("warning", "reported", "It was applied; make sure the task asked for it."),
    "confirm": (
        "confirm",
        "sent back to you to confirm",
        "If this is what the task asks for, confirm it; otherwise restore the content.",
    ),
    "reject": (
        "conflict",
        "refused",
        "This change was refused: write the complete value, and delete only what the task asks "
        "to delete.",
    ),
}

DATA_LOSS_RULES: tuple[str, ...] = (
    "string_cut",
    "truncation_marker",
    "placeholder",
    "array_shrunk",
    "object_keys_lost",
    "container_to_primitive",
    "wiped",
    "large_removal",
)

_TRUNCATION_SUFFIX = re.compile(
    r"(\.\.\.|…|\[\s*truncated\s*\]|\(\s*truncated\s*\)|\betc\.?|\band (?:many )?more"
    r"|\band so on)\s*[\])>]*\s*$",
    re.IGNORECASE,
)
_WHOLE_PLACEHOLDER = re.compile(
    r"^\s*(?:"
    r"(?:\.\.\.|…)+"
    r"|\[\s*(?:\.\.\.|…)[^\]]{0,80}\]"
    r"|\[\s*(?:truncated|omitted|snip|redacted|unchanged|same|rest\b[^\]]{0,60}"
    r"|remaining\b[^\]]{0,60}|\d+ more\b[^\]]{0,60})\s*\]"
    r"|<\s*(?:\.\.\.|…)?[^<>]{0,80}>"
    r"|\(\s*(?:\.\.\.|…|truncated|omitted|unchanged|rest\b[^)]{0,60}|remaining\b[^)]{0,60})\s*\)"
    r"|todo\b.{0,80}|tbd|fixme|placeholder|n/?a\b|etc\.?|and more|and so on"
    r"|(?:\.\.\.|…)\s*(?:rest|remaining|the rest|same|unchanged)\b.{0,80}"
    r"|(?:rest|remainder|remaining)\b.{0,40}\b(?:unchanged|omitted|as before|same)\b.{0,20}"
    r"|unchanged|same as before|as before|//\s*(?:\.\.\.|…).{0,80}|/\*\s*(?:\.\.\.|…).{0,80}"
    r")\s*$",
    re.IGNORECASE | re.DOTALL,
)
_CONTAINED_PLACEHOLDER = re.compile(
    r"\bTODO\b|\[\s*(?:\.\.\.|…)\s*\]|<\s*(?:\.\.\.|…)\s*>|\[\s*truncated\s*\]|\(\s*truncated\s*\)"
    r"|(?:\.\.\.|…)\s*(?:the )?(?:rest|remaining)\b|\brest (?:of [\w ]{1,40} )?unchanged\b"
    r"|\b(?:rest|remainder) omitted\b",
    re.IGNORECASE,
)
_TAIL = 200


@dataclass(frozen=True, slots=True)
class DataLossFinding(Finding):
    """A ``data_loss`` finding: the payload ``path``, the ``rule`` that fired and the sizes
    before and after (characters, elements or keys)."""

    path: PayloadPath = ()
    rule: str = ""
    before_size: int = 0
    after_size: int = 0


_Found = tuple[str, int, int, str]  # rule, size before, size after, detail


@dataclass(frozen=True, slots=True)
class _Hit:
    path: PayloadPath
    rule: str
    before: int
    after: int
    detail: str


def _nontrivial(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, dict | list):
        return bool(value)
    return True


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    if isinstance(value, list):
        return f"an array of {len(value)} elements"
    if isinstance(value, str):
        return f"a {len(value):,}-character text"
    return f"the value {_short(value)}"


def _short(value: Any, limit: int = 40) -> str:
    if isinstance(value, str):
        text = value if len(value) <= limit else value[: limit - 1] + "…"
        return json.dumps(text, ensure_ascii=False)
    if isinstance(value, dict | list):
        return "{...}" if isinstance(value, dict) else "[...]"
    return json.dumps(value)


class DataLossGuard:
    """Flag changes that look like accidental loss of content (see the module docstring): a
    ``Guard`` for ``apply_change_request(guards=[...])``, with ``review`` for the whole merge.
    ``ignore``: path rules where nothing is flagged; ``rules``: the rules that run (default:
    all of ``DATA_LOSS_RULES``)."""

    code = "data_loss"

    def __init__(
        self,
        policy: Policy = "warn",
        *,
        min_string_length: int = 100,
        max_string_cut: float = 0.7,
        max_array_shrink: float = 0.5,
        max_key_loss: float = 0.5,
        min_items: int = 2,
        min_keys: int = 2,
        large_removal_chars: int = 2000,
        rules: Iterable[str] | None = None,
        ignore: Iterable[str] | None = None,
    ) -> None:
        if policy not in ("allow", "warn", "confirm", "reject"):
            raise ConfigurationError(
                f"DataLossGuard policy must be 'allow', 'warn', 'confirm' or 'reject', "
                f"got {policy!r}"
            )
        for name, ratio in (
            ("max_string_cut", max_string_cut),
            ("max_array_shrink", max_array_shrink),
            ("max_key_loss", max_key_loss),
        ):
            check_number(ratio, f"DataLossGuard({name}=...)", minimum=0.0, below=1.0)
        for name, count in (
            ("min_string_length", min_string_length),
            ("min_items", min_items),
            ("min_keys", min_keys),
            ("large_removal_chars", large_removal_chars),
        ):
            check_number(count, f"DataLossGuard({name}=...)", integer=True, minimum=0)
        self.policy: Policy = policy
        self.min_string_length = min_string_length
        self.max_string_cut = max_string_cut
        self.max_array_shrink = max_array_shrink
        self.max_key_loss = max_key_loss
        self.min_items = min_items
        self.min_keys = min_keys
        self.large_removal_chars = large_removal_chars
        enabled = set(DATA_LOSS_RULES if rules is None else rules)
        unknown = enabled - set(DATA_LOSS_RULES)
        if unknown:
            raise ConfigurationError(
                f"unknown data-loss rules {sorted(unknown)}; known: {', '.join(DATA_LOSS_RULES)}"
            )
        self.rules = frozenset(enabled)
        self.ignore_rules: tuple[PathRule, ...] = _parse_rules(ignore, "ignore")
        self._ignore = RuleSet(self.ignore_rules)

    def __repr__(self) -> str:
        return f"DataLossGuard(policy={self.policy!r})"

    # -- Guard ------------------------------------------------------------------------------

    def __call__(self, change: Change) -> Sequence[Finding]:
        return self.check_change(change)

    def check_change(self, change: Change) -> list[DataLossFinding]:
        """The findings for one effective change (empty under policy ``allow``)."""
        if self.policy == "allow":
            return []
        return [self._finding(hit) for hit in self._scan(change) if not self._ignored(hit.path)]

    def review(
        self, before: Any, after: Any, changes: Sequence[Change], *, per_change: bool = True
    ) -> list[DataLossFinding]:
        """Findings for a whole merge (``changes``: the report's effective changes): each
        change's own findings (unless ``per_change=False``, for a guard that already ran in
        the merge) and one per container that separate deletions shrank past the thresholds."""
        if self.policy == "allow":
            return []
        before, after = json_data(before), json_data(after)
        findings: list[DataLossFinding] = []
        seen: set[tuple[PayloadPath, str]] = set()
        if per_change:
            for change in changes:
                for finding in self.check_change(change):
                    findings.append(finding)
                    seen.add((finding.path, finding.rule))
        # Count, never compare lengths: appended items do not make up for deleted ones.
        removed: dict[PayloadPath, int] = {}
        for change in changes:
            if change.op == "delete" and change.path:
                removed[change.path[:-1]] = removed.get(change.path[:-1], 0) + 1
        paths = PathMap(changes)
        for parent, count in removed.items():
            old = lookup(before, parent, None)
            now = paths.result_path(parent)
            new = None if now is None else lookup(after, now, None)
            hit = self._counted_hit(parent, old, new, count)
            if hit is not None and (hit.path, hit.rule) not in seen and not self._ignored(hit.path):
                seen.add((hit.path, hit.rule))
                findings.append(self._finding(hit))
        return findings

    def _counted_hit(self, path: PayloadPath, old: Any, new: Any, count: int) -> _Hit | None:
        """A container of ``old`` that lost ``count`` elements or keys through separate
        deletions (``new``: the container after the merge, for the message)."""
        rule = self._shrunk(old, count)
        if rule is None:
            return None
        now = ""
        if isinstance(new, list | dict):
            added = len(new) - (len(old) - count)
            now = f"; it now holds {len(new)} {'elements' if isinstance(new, list) else 'keys'}"
            if added > 0:
                now += f", {added} of them new"
        if rule == "array_shrunk":
            lost = f"an array of {len(old)} elements lost {count} of them"
            lost += f" ({_percent(count, len(old))}%)"
        else:
            lost = f"an object lost {count} of its {len(old)} keys"
        return _Hit(path, rule, len(old), len(old) - count, f"{lost} to separate deletions{now}")

    def _shrunk(self, old: Any, lost: int) -> str | None:
        """The rule that fires for an array or object of ``old`` losing ``lost`` of its items."""
        if isinstance(old, list):
            rule, least, most = "array_shrunk", self.min_items, self.max_array_shrink
        elif isinstance(old, dict):
            rule, least, most = "object_keys_lost", self.min_keys, self.max_key_loss
        else:
            return None
        return rule if rule in self.rules and len(old) >= least and lost > most * len(old) else None

    def describe(self) -> str:
        """A sentence for the system prompt (empty under policy ``allow``)."""
        if self.policy == "allow":
            return ""
        return (
            "Keep existing content complete: never shorten a text or replace it with '...', "
            "'etc.' or a placeholder, and do not drop elements or keys unless the task asks "
            f"for it. Suspected data loss is {_POLICIES[self.policy][1]}."
        )

    # -- internals --------------------------------------------------------------------------

    def _ignored(self, path: PayloadPath) -> bool:
        return bool(self.ignore_rules) and bool(self._ignore.state_at(path)[1])

    def _finding(self, hit: _Hit) -> DataLossFinding:
        severity, _, advice = _POLICIES[self.policy]
        where = format_path(hit.path)
        message = f"Possible data loss at `{where}` (rule {hit.rule}): {hit.detail}. {advice}"
        return DataLossFinding(
            code=self.code,
            message=message,
            severity=severity,
            path=hit.path,
            rule=hit.rule,
            before_size=hit.before,
            after_size=hit.after,
        )

    def _scan(self, change: Change) -> Iterator[_Hit]:
        if change.op == "add":
            return
        if change.op == "delete":
            found = self._removal(change.old)
            if found is not None:
                yield _Hit(change.path, *found)
            return
        stack: list[tuple[Link, Any, Any]] = [(None, change.old, change.new)]
        while stack:
            linked, old, new = stack.pop()
            if isinstance(old, dict) and isinstance(new, dict):
                if old.keys() - new.keys():
                    path = path_below(change.path, linked)
                    yield from self._container_hits(path, old, new)
                    for key, value in old.items():
                        found = None if key in new else self._removal(value)
                        if found is not None:
                            yield _Hit((*path, key), *found)
                for key, value in old.items():
                    if key in new:
                        stack.append(((linked, key), value, new[key]))
            elif isinstance(old, list) and isinstance(new, list):
                if len(new) < len(old):
                    path = path_below(change.path, linked)
                    yield from self._container_hits(path, old, new)
                    for i in range(len(new), len(old)):
                        found = self._removal(old[i])
                        if found is not None:
                            yield _Hit((*path, i), *found)
                for i in range(min(len(old), len(new))):
                    stack.append(((linked, i), old[i], new[i]))
            else:
                found = self._leaf(old, new)
                if found is not None:
                    yield _Hit(path_below(change.path, linked), *found)

    def _container_hits(self, path: PayloadPath, old: Any, new: Any) -> Iterator[_Hit]:
        if isinstance(old, list) and self._shrunk(old, len(old) - len(new)):
            shrunk = _percent(len(old) - len(new), len(old))
            detail = f"an array of {len(old)} elements shrank to {len(new)} ({shrunk}% fewer)"
            yield _Hit(path, "array_shrunk", len(old), len(new), detail)
        elif isinstance(old, dict):
            lost = [key for key in old if key not in new]
            if self._shrunk(old, len(lost)):
                sample = ", ".join(json.dumps(k, ensure_ascii=False) for k in lost[:5])
                more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
                detail = f"an object lost {len(lost)} of its {len(old)} keys ({sample}{more})"
                yield _Hit(path, "object_keys_lost", len(old), len(new), detail)

    def _removal(self, value: Any) -> _Found | None:
        if "large_removal" not in self.rules:
            return None
        full = json_size(value)
        if full < self.large_removal_chars:
            return None
        return "large_removal", full, 0, f"{_kind(value)} ({full:,} characters of JSON) was deleted"

    def _leaf(self, old: Any, new: Any) -> _Found | None:
        rules = self.rules
        if isinstance(old, dict | list) and isinstance(new, dict | list):
            return self._removal(old)  # replaced by a container of the other kind
        if isinstance(old, dict | list) and old:  # replaced by a primitive
            if "container_to_primitive" not in rules:
                return self._removal(old)
            detail = f"{_kind(old)} ({json_size(old):,} characters of JSON) was replaced by"
            return "container_to_primitive", len(old), 0, f"{detail} {_short(new)}"
        if _nontrivial(old) and (new is None or (isinstance(new, str) and not new.strip())):
            detail = f"{_kind(old)} was wiped to {_short(new)}"
            return ("wiped", json_size(old), json_size(new), detail) if "wiped" in rules else None
        if not isinstance(new, str) or not _nontrivial(old):
            return None
        old_text = old if isinstance(old, str) else None
        if _WHOLE_PLACEHOLDER.match(new) and not (
            old_text is not None and _WHOLE_PLACEHOLDER.match(old_text)
        ):
            is_marker = bool(_TRUNCATION_SUFFIX.fullmatch(new.strip()))
            rule = "truncation_marker" if is_marker else "placeholder"
            if rule in rules:
                detail = f"{_kind(old)} was replaced by the {rule.replace('_', ' ')} {_short(new)}"
                return rule, json_size(old), len(new), detail
        if old_text is None:
            return None
        before, after = len(old_text), len(new)
        text = f"a {before:,}-character text"
        match = _TRUNCATION_SUFFIX.search(new[-_TAIL:])
        if (
            "truncation_marker" in rules
            and match is not None
            and not _TRUNCATION_SUFFIX.search(old_text[-_TAIL:])
            and after - len(match.group(0)) < before
        ):
            detail = f"{text} was replaced by {after:,} characters ending in the truncation marker"
            return "truncation_marker", before, after, f"{detail} {match.group(0).strip()!r}"
        contained = _CONTAINED_PLACEHOLDER.search(new) if after <= before * 4 else None
        if (
            "placeholder" in rules
            and contained is not None
            and contained.group(0).lower() not in old_text.lower()
        ):
            return (
                "placeholder",
                before,
                after,
                f"{text} now holds the placeholder {contained[0]!r}",
            )
        if (
            "string_cut" in rules
            and before >= self.min_string_length
            and before - after > self.max_string_cut * before
        ):
            shorter = _percent(before - after, before)
            detail = f"{text} was cut to {after:,} characters ({shorter}% shorter)"
            return "string_cut", before, after, detail
        return None


def _percent(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole else 0
