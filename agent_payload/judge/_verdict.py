"""The judge's answer (``Verdict``), and what each surface does with each kind of answer
(``SURFACES``, the README table)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_payload import prompts as _prompts
from agent_payload._reply import DEFAULT_TOOL_NAME
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import ModelReplyError
from agent_payload.report import Change, Finding, MergeReport, Problem

__all__ = ["SURFACES", "Reply", "Stage", "Status", "Verdict", "surface_table"]

Status = Literal["accepted", "problems", "confirm"]
Stage = Literal[
    "truncated", "refusal", "parse", "merge", "validation", "validator", "confirm", "accepted"
]
Reply = str | Mapping[str, Any] | AgentPayloadChangeRequest[Any] | None
"""A reply as a surface has it: the reply text, tool-call arguments (JSON text or a decoded
mapping), an already parsed request, or ``None`` (a tool call without arguments)."""

SURFACES: dict[str, dict[Status, str]] = {
    "PayloadAgent (text and tool mode)": {
        "accepted": "returns the `AgentResult` (payload, change request, report, repairs, "
        "confirmed findings)",
        "problems": "sends `verdict.feedback()` as the next attempt's correction (a second "
        "refusal stops with `RefusalError`); nothing applied",
        "confirm": "sends the before/after (`render_confirm`); the same payload on the next "
        "attempt is accepted as confirmed",
    },
    "ChangeRequestToolHandler.handle": {
        "accepted": "returns a `ToolResult` with the new payload and a summary of the changes; "
        "the handler keeps the payload",
        "problems": "returns an `is_error` `ToolResult` with `verdict.feedback()` (earlier "
        "calls kept); payload unchanged",
        "confirm": "cannot ask mid-call: returns an `is_error` `ToolResult` with the "
        "before/after; the same call again is accepted as confirmed",
    },
    "PayloadSession.send": {
        "accepted": "records the turn (through its agent) and moves to the new payload",
        "problems": "as the agent (the session calls it); on failure the session is unchanged",
        "confirm": "as the agent",
    },
    "MCP server and framework tools": {
        "accepted": "as the tool handler (they call it); the MCP server then writes the file "
        "atomically",
        "problems": "as the tool handler, marked as an error where the framework can (MCP "
        "error result, `ModelRetry`, `ToolMessage(status='error')`); the file is untouched",
        "confirm": "as the tool handler",
    },
    "PayloadStore.edit": {
        "accepted": "applies the change request at the version the run read (rebased over the "
        "edits committed since) and returns the `AgentResult` with the payload stored; a "
        "collision (`concurrent_change`) is a correction, as `problems`",
        "problems": "as the agent; the next reply is judged against the payload as it is then "
        "(after a collision, the current version); nothing stored",
        "confirm": "as the agent",
    },
    "BatchJob (batch and concurrent)": {
        "accepted": "the item is `done` with the payload, change request and report (it runs "
        "the agent's own run state)",
        "problems": "the correction goes into the next round, as the agent would send it; out "
        "of retries the item is `failed` with the last problems",
        "confirm": "the before/after goes into the next round, as the agent would send it",
    },
}
"""What each surface does with each kind of verdict: the README table "What each surface does
with a reply" is checked against this (``tests/test_judge.py``)."""


def surface_table() -> str:
    """``SURFACES`` as the Markdown table of the README section "What each surface does with
    a reply" (a test checks that the README holds exactly this)."""
    lines = [
        "| surface | `accepted` | `problems` | `confirm` |",
        "| --- | --- | --- | --- |",
    ]
    for surface, row in SURFACES.items():
        cells = " | ".join(row[status] for status in ("accepted", "problems", "confirm"))
        lines.append(f"| {surface} | {cells} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judge's answer for one reply.

    ``status``: ``accepted`` (``payload`` is the new payload, of the kind given; ``report`` the
    merge report, ``change_request`` what was applied, ``repairs`` what the parser fixed,
    ``confirmations`` the findings the model confirmed), ``problems`` (``problems`` to send
    back; nothing applied), or ``confirm`` (``confirmations``: the changes to confirm, as
    ``(change, finding)`` with before/after as the model may see them; ``payload_json`` the
    result to pass as ``confirming=`` with the next reply). ``stage`` is the step that decided;
    ``error`` the ``ModelReplyError`` class a surface that raises should use, ``message`` a
    one-line account for that error, ``cause`` the exception behind it when there was one.
    """

    status: Status
    stage: Stage
    marker: str
    problems: tuple[Problem, ...] = ()
    payload: Any = None
    payload_json: Any = None
    change_request: AgentPayloadChangeRequest[Any] | None = None
    report: MergeReport | None = None
    repairs: tuple[str, ...] = ()
    confirmations: tuple[tuple[Change, Finding], ...] = ()
    error: type[ModelReplyError] = ModelReplyError
    message: str = ""
    cause: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def codes(self) -> tuple[str, ...]:
        """The problem codes (``kind`` when a problem has no code), in order."""
        return tuple(p.code or p.kind for p in self.problems)

    def feedback(
        self,
        *,
        output_mode: Any = "text",
        tool_name: str = DEFAULT_TOOL_NAME,
        earlier_calls_kept: bool = False,
        render_current: Callable[[Any], str] | None = None,
        payload_changed: bool = False,
    ) -> str:
        """The text to send back to the model: the correction for ``problems``, the
        before/after for ``confirm`` (``""`` for an accepted reply). ``render_current``: how
        the current value of a problem's subtree is written (outline mode keeps it within
        its budget; see ``prompts.render_correction``). ``payload_changed``: the payload is
        no longer the one first shown (a run judging against a newer one since a collision)."""
        if self.status == "confirm":
            return _prompts.render_confirm(
                self.confirmations, marker=self.marker, output_mode=output_mode, tool_name=tool_name
            )
        if self.status == "accepted":
            return ""
        return _prompts.render_correction(
            self.problems,
            marker=self.marker,
            reply_was_truncated=self.stage == "truncated",
            output_mode=output_mode,
            tool_name=tool_name,
            earlier_calls_kept=earlier_calls_kept,
            render_current=render_current,
            payload_changed=payload_changed,
        )
