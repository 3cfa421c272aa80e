"""The judge's answer (``Verdict``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_payload import prompts as _prompts
from agent_payload._reply import DEFAULT_TOOL_NAME
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import ModelReplyError
from agent_payload.report import Change, Finding, MergeReport, Problem

__all__ = ["Reply", "Stage", "Status", "Verdict"]

Status = Literal["accepted", "problems", "confirm"]
Stage = Literal[
    "truncated", "refusal", "parse", "merge", "validation", "validator", "confirm", "accepted"
]
Reply = str | Mapping[str, Any] | AgentPayloadChangeRequest | None
"""A reply as a surface has it: the reply text, tool-call arguments (JSON text or a decoded
mapping), an already parsed request, or ``None`` (a tool call without arguments)."""


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
    change_request: AgentPayloadChangeRequest | None = None
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
