"""Human-readable rendering for the command line and ``agent_payload.render``: payload paths,
values, the diff from a report's ``changes`` and its issues, in colour when asked."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from agent_payload import _jsontext
from agent_payload._paths import format_payload_path
from agent_payload.report import Change, MergeReport

__all__ = [
    "Style",
    "format_payload_path",
    "format_value",
    "render_changes",
    "render_issues",
    "summarize",
    "use_color",
]


def use_color(stream: TextIO, *, no_color: bool = False) -> bool:
    """True when ANSI colour should be written to ``stream``: a terminal, without
    ``no_color`` (``--no-color``) or ``NO_COLOR`` (https://no-color.org) set."""
    if no_color or os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):
        return False


@dataclass
class Style:
    """ANSI styling that collapses to plain text when colour is off."""

    color: bool

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)


def format_value(value: Any, *, width: int = 80) -> str:
    """Compact one-line JSON for a value, shortened with an ellipsis past ``width`` chars
    (numbers read from a file as the file writes them)."""
    try:
        text = _jsontext.dumps(value, separators=(", ", ": "), literals=True)
    except (TypeError, ValueError):
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=repr)
        except (TypeError, ValueError):
            text = repr(value)
    if width > 1 and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def render_changes(
    changes: Iterable[Change], *, style: Style | None = None, width: int = 80
) -> list[str]:
    """One line per change: ``+ path: new``, ``- path: old``, ``~ path: old -> new``."""
    style = style or Style(False)
    lines: list[str] = []
    for change in changes:
        where = format_payload_path(change.path)
        if change.op == "add":
            lines.append(style.green(f"+ {where}: {format_value(change.new, width=width)}"))
        elif change.op == "delete":
            lines.append(style.red(f"- {where}: {format_value(change.old, width=width)}"))
        else:
            old = format_value(change.old, width=max(20, width // 2))
            new = format_value(change.new, width=max(20, width // 2))
            lines.append(style.yellow(f"~ {where}: {old} -> {new}"))
    return lines


def render_issues(report: MergeReport, *, style: Style | None = None) -> list[str]:
    """Warnings then conflicts: ``warning <code> at <change-request path>: <message>``."""
    style = style or Style(False)
    lines: list[str] = []
    for kind, issues, paint in (
        ("warning", report.warnings, style.yellow),
        ("conflict", report.conflicts, style.red),
    ):
        for issue in issues:
            where = issue.path or "(change request)"
            lines.append(f"{paint(f'{kind} {issue.code}')} at {where}: {issue.message}")
    return lines


def summarize(report: MergeReport) -> str:
    """One line: ``3 changes (1 added, 1 updated, 1 deleted); 1 warning; 0 conflicts``."""
    counts = {"add": 0, "update": 0, "delete": 0}
    for change in report.changes:
        counts[change.op] = counts.get(change.op, 0) + 1
    total = len(report.changes)
    parts = [
        f"{_plural(total, 'change')} "
        f"({counts['add']} added, {counts['update']} updated, {counts['delete']} deleted)",
        _plural(len(report.warnings), "warning"),
        _plural(len(report.conflicts), "conflict"),
    ]
    return "; ".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
