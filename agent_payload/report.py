"""What a merge reports (effective changes, warnings, conflicts), the guards' findings and the
problems told to the model. Payload paths are tuples (``("items", 3, "price")``), change-request
paths strings (``updateElements.items[3].price``, MERGE.md section 6)."""

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
    """One effective change: ``path`` in the original payload for a ``delete``, in the result
    for an ``add``/``update``; ``old`` is None for an add, ``new`` for a delete (copies)."""

    op: ChangeOp
    path: PayloadPath
    old: Any = None
    new: Any = None


@dataclass(frozen=True, slots=True)
class Issue:
    """A warning (applied with an auto-correction) or a conflict (not applied): ``path`` is
    the change-request path, ``message`` is written for the model, ``payload_path`` the payload
    path concerned (if any), ``severity`` the guard ``Finding``'s, else None."""

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
    """What a guard says of one change: a ``"conflict"`` refuses it, a ``"warning"`` is
    recorded, a ``"confirm"`` asks the model to confirm it."""

    code: str
    message: str
    severity: Literal["warning", "conflict", "confirm"] = "conflict"


# A guard is asked about every effective change before it is applied; the change names the
# element it touches at its position in the payload as given (an appended one at its new one).
Guard = Callable[[Change], Sequence[Finding]]


def ask_guard(guard: Guard, change: Change) -> list[Finding]:
    """The findings of ``guard`` for ``change``; anything but an iterable of ``Finding`` is a
    ``ConfigurationError`` naming the guard and the change."""
    findings: Any = guard(change)
    bad: Any = findings
    if findings is not None and not isinstance(findings, Finding | str | bytes | dict):
        try:
            items = list(findings)
        except TypeError:
            pass
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
        return [finding for guard in self.guards for finding in ask_guard(guard, change)]

    def _methods(self, name: str) -> list[Callable[..., Any]]:
        """The members' methods called ``name`` (those that have one), in order."""
        found = (getattr(guard, name, None) for guard in self.guards)
        return [method for method in found if callable(method)]

    def review(
        self, before: Any, after: Any, changes: Sequence[Change], *, per_change: bool = True
    ) -> list[Finding]:
        """Every member's whole-merge ``review`` (those that have one), in order."""
        return [
            finding
            for review in self._methods("review")
            for finding in review(before, after, changes, per_change=per_change)
        ]

    def describe(self) -> str:
        texts = [describe() for describe in self._methods("describe")]
        return "\n".join(t.strip() for t in texts if isinstance(t, str) and t.strip())

    def __repr__(self) -> str:
        return f"GuardChain({list(self.guards)!r})"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing to tell the model in a correction (``kind``: ``parse``, ``conflict``,
    ``validation``, ``guard``, ...; ``current``: the value concerned, if ``has_current``)."""

    kind: str
    message: str
    path: str = ""
    code: str | None = None
    current: Any = None
    has_current: bool = False
