"""Several guards asked as one: ``combine_guards`` (``GuardChain`` is in ``report``: the merge
uses it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent_payload.report import Change, Finding, GuardChain

__all__ = ["GuardChain", "combine_guards"]

_GuardLike = Callable[[Change], Sequence[Finding]]


def combine_guards(*guards: _GuardLike | None) -> GuardChain:
    """One guard that asks each of ``guards`` (None entries skipped) about every change."""
    return GuardChain([g for g in guards if g is not None])
