"""What a merge reports: effective changes, warnings, conflicts (data, no logic).

Paths come in two kinds:

* payload paths: tuples of keys and indices, ``("items", 3, "price")``;
* change-request paths: strings written as MERGE.md section 6 says,
  ``updateElements.items[3].price``, ``updateElements["a.b"]``, ``updateElements.items["150"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from agent_payload._config import check_guard
from agent_payload._paths import format_payload_path
from agent_payload.errors import ConfigurationError

__all__ = [
    "Change",
    "Finding",
    "Guard",
    "GuardChain",
    "Issue",
    "MergeReport",
    "MergeResult",
    "PayloadPath",
    "Problem",
    "ask_guard",
]

PayloadPath = tuple[str | int, ...]
ChangeOp = Literal["add", "update", "delete"]

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Change:
    """One effective change.

    ``path`` is where it happened: for ``delete`` the path in the original payload, for
    ``add``/``update`` the path in the result. ``old`` is absent (``None``) for an add, ``new``
    for a delete; values are independent copies.
    """

    op: ChangeOp
    path: PayloadPath
    old: Any = None
    new: Any = None


@dataclass(frozen=True, slots=True)
class Issue:
    """A warning (applied with an auto-correction) or a conflict (not applied).

    ``path`` is the change-request path where it arose; ``message`` says what was expected,
    what was found and what to do instead; it is written to be shown to the model.
    ``payload_path`` is the payload path concerned, when there is one. ``severity`` is set when
    the issue comes from a guard's :class:`Finding` (``"warning"``, ``"confirm"`` or
    ``"conflict"``), else ``None``.
    """

    code: str
    path: str
    message: str
    payload_path: PayloadPath | None = None
    severity: str | None = None


@dataclass(slots=True)
class MergeReport:
    changes: list[Change] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)
    conflicts: list[Issue] = field(default_factory=list)
    reasoning: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing in the request was refused."""
        return not self.conflicts

    @property
    def changed(self) -> bool:
        return bool(self.changes)


@dataclass(frozen=True, slots=True)
class MergeResult(Generic[P]):
    """The merged payload (same kind as given) and the report."""

    payload: P
    report: MergeReport


@dataclass(frozen=True, slots=True)
class Finding:
    """What a guard says of one change: ``severity`` ``"conflict"`` refuses it (not applied),
    ``"warning"`` lets it through and records it, ``"confirm"`` lets it through but asks the
    agent to have the model confirm it."""

    code: str
    message: str
    severity: Literal["warning", "conflict", "confirm"] = "conflict"


# A guard is asked about every effective change before it is applied. It returns the findings
# for that change (empty: nothing to say). The change it is given names the original node the
# change touches: an update, replacement or deletion of an element (or of anything inside it) at
# the element's position in the payload as given; an appended element at its new position.
Guard = Callable[[Change], Sequence[Finding]]


def ask_guard(guard: Guard, change: Change) -> list[Finding]:
    """The findings of ``guard`` for ``change``, checked: anything but a list (or other
    iterable) of ``Finding`` (``None``, a string, a bare ``Finding``) is a ``ConfigurationError``
    naming the guard and the change, instead of a raw ``TypeError`` in the middle of a merge."""
    findings: Any = guard(change)
    if isinstance(findings, Finding):
        bad: Any = findings
    elif findings is None or isinstance(findings, str | bytes | dict):
        bad = findings
    else:
        try:
            items = list(findings)
        except TypeError:
            bad = findings
        else:
            wrong = [f for f in items if not isinstance(f, Finding)]
            if not wrong:
                return items
            bad = wrong[0]
    name = getattr(guard, "__qualname__", None) or type(guard).__name__
    where = format_payload_path(change.path)
    raise ConfigurationError(
        f"guard {name} returned {bad!r} for the {change.op} at {where}; a guard must return a "
        "list of agent_payload.Finding, [] when it has nothing to say"
    )


class GuardChain:
    """Asks every guard about each change and returns all their findings, in order.
    ``describe()`` joins the guards' own descriptions (those that have one)."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        flat: list[Guard] = []
        for n, guard in enumerate(guards):
            if isinstance(guard, GuardChain):
                flat.extend(guard.guards)
            elif guard is not None:
                flat.append(check_guard(guard, f"combine_guards: guard {n + 1}"))
        self.guards: tuple[Guard, ...] = tuple(flat)

    def __call__(self, change: Change) -> Sequence[Finding]:
        findings: list[Finding] = []
        for guard in self.guards:
            findings.extend(ask_guard(guard, change))
        return findings

    def review(
        self, before: Any, after: Any, changes: Sequence[Change], *, per_change: bool = True
    ) -> list[Finding]:
        """Every member's whole-merge ``review`` (those that have one), in order."""
        findings: list[Finding] = []
        for guard in self.guards:
            review = getattr(guard, "review", None)
            if callable(review):
                findings.extend(review(before, after, changes, per_change=per_change))
        return findings

    def describe(self) -> str:
        parts: list[str] = []
        for guard in self.guards:
            describe = getattr(guard, "describe", None)
            if callable(describe):
                text = describe()
                if isinstance(text, str) and text.strip():
                    parts.append(text.strip())
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"GuardChain({list(self.guards)!r})"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing to tell the model in a correction.

    ``kind``: ``parse`` | ``truncated`` | ``refusal`` | ``no_change_request`` (prose, no JSON)
    | ``unknown_field`` | ``conflict`` |
    ``validation`` | ``guard`` | ``custom``. ``path`` is a change-request path (conflicts) or a
    payload path written ``items[3].price`` (validation), ``""`` when there is none (``None``
    given is read as ``""``); ``current`` is the current value of the payload subtree concerned
    when there is one (``has_current`` tells None from absent).
    """

    kind: str
    message: str
    path: str = ""
    code: str | None = None
    current: Any = None
    has_current: bool = False

    def __init__(
        self,
        kind: str,
        message: str,
        path: str | None = "",
        code: str | None = None,
        current: Any = None,
        has_current: bool = False,
    ) -> None:
        # Written out (not generated) so that 0.1's ``path=None`` is still accepted: the
        # attribute is always a str.
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "path", path or "")
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "current", current)
        object.__setattr__(self, "has_current", has_current)
