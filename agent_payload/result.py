"""What a successful agent run returns: ``AgentResult`` (the payload, the change request that
was applied, the merge report, the attempts, the usage and the token counts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from agent_payload import _jsontext
from agent_payload._jsondata import json_data
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.report import Change, Finding, MergeReport
from agent_payload.usage import Usage, estimate_tokens

__all__ = ["AgentResult"]

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class AgentResult(Generic[P]):
    """What a successful run returns: the ``payload`` (of the kind given), the applied
    ``change_request`` and its ``report``, the ``attempts`` (model requests), their ``usage``
    and ``replies``; ``change_tokens``: the applied reply, counted as ``rewrite_tokens``."""

    payload: P
    change_request: AgentPayloadChangeRequest
    report: MergeReport
    reasoning: str | None
    attempts: int
    usage: Usage
    replies: tuple[str, ...]
    marker: str
    change_tokens: int
    repairs: tuple[str, ...] = ()
    confirmed: tuple[Finding, ...] = ()
    run_id: str = ""
    outlined: bool = False
    """True when the model was sent the payload's outline with the read tools."""
    reads: int = 0
    """How many read-tool calls were answered."""
    _rewrite_tokens: int | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def rewrite_tokens(self) -> int:
        """What a full rewrite of ``payload`` as minified JSON would cost in output tokens,
        counted when first read (~0.05 s per MB: off the event loop for a large payload)."""
        if self._rewrite_tokens is None:
            text = _jsontext.dumps(json_data(self.payload), separators=(",", ":"))
            object.__setattr__(self, "_rewrite_tokens", estimate_tokens(text))
        assert self._rewrite_tokens is not None
        return self._rewrite_tokens

    @property
    def changes(self) -> list[Change]:
        """The effective changes (``report.changes``)."""
        return self.report.changes

    @property
    def tokens_saved(self) -> int:
        """``rewrite_tokens - change_tokens`` (negative when the change request cost more)."""
        return self.rewrite_tokens - self.change_tokens
