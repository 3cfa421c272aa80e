"""The human-readable diff, public: what the CLI prints (``format_diff``), for your own logs and
UIs, with its line-level pieces (``render_changes``, ``render_issues``, ``summarize``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent_payload._render import Style, render_changes, render_issues, summarize
from agent_payload.prompts import format_payload_path
from agent_payload.report import Change, MergeReport

__all__ = [
    "Style",
    "format_diff",
    "format_payload_path",
    "render_changes",
    "render_issues",
    "summarize",
]


def format_diff(
    changes: Iterable[Change] | MergeReport | Any,
    *,
    color: bool = False,
    width: int = 80,
    issues: bool = False,
) -> str:
    """The diff as text, one line per change: ``+ path: new``, ``- path: old``, ``~ path: old
    -> new``, values cut to ``width`` characters, in ANSI colours when ``color``.

    ``changes``: a list of ``Change``, a ``MergeReport``, or a result with a ``report``;
    ``issues``: the report's warnings and conflicts first."""
    report = changes if isinstance(changes, MergeReport) else getattr(changes, "report", None)
    if report is None and not isinstance(changes, Iterable):
        raise TypeError(
            f"format_diff: expected changes, a MergeReport or a result with .report, found "
            f"{type(changes).__name__}"
        )
    style = Style(color)
    lines: list[str] = []
    if isinstance(report, MergeReport):
        if issues:
            lines += render_issues(report, style=style)
        lines += render_changes(report.changes, style=style, width=width)
    elif isinstance(changes, Iterable):
        lines += render_changes(list(changes), style=style, width=width)
    return "\n".join(lines)
