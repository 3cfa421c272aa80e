"""Several guards asked as one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agent_payload._config import check_guard
from agent_payload.report import Change, Finding, ask_guard

__all__ = ["GuardChain", "combine_guards"]

_GuardLike = Callable[[Change], Sequence[Finding]]


class GuardChain:
    """Asks every guard about each change and returns all their findings, in order.
    ``describe()`` joins the guards' own descriptions (those that have one)."""

    def __init__(self, guards: Sequence[_GuardLike]) -> None:
        flat: list[_GuardLike] = []
        for n, guard in enumerate(guards):
            if isinstance(guard, GuardChain):
                flat.extend(guard.guards)
            elif guard is not None:
                flat.append(check_guard(guard, f"combine_guards: guard {n + 1}"))
        self.guards: tuple[_GuardLike, ...] = tuple(flat)

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


def combine_guards(*guards: _GuardLike | None) -> GuardChain:
    """One guard that asks each of ``guards`` (None entries skipped) about every change."""
    return GuardChain([g for g in guards if g is not None])
