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
    """What a successful run returns.

    ``payload`` is the updated payload, of the kind given (dict, list, or the same pydantic
    class); ``change_request`` the request that was applied; ``report`` the merge report
    (effective changes, warnings); ``attempts`` how many model requests the run made;
    ``usage`` the tokens summed over all of them; ``replies`` every raw reply text in order.
    ``rewrite_tokens`` estimates what a full rewrite of the result (minified JSON) would have
    cost in output tokens (counted when first read), ``change_tokens`` what the applied reply
    cost, counted the same way (see ``agent_payload.usage.estimate_tokens``). ``marker`` is the
    DELETE marker that was active; ``repairs`` what the parser had to fix in the applied
    reply; ``confirmed`` the guard findings the model confirmed; ``run_id`` the run's id
    (``run(..., run_id=)`` or a fresh one; also on the ``agent_payload`` log records as
    ``run_id`` and on a failed run's error).
    """

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
    """True when the payload was too large for ``max_payload_tokens`` and the model was sent
    its outline (``agent_payload.outline``) with the read tools."""
    reads: int = 0
    """How many read-tool calls (``read_payload``, ``find_in_payload``) were answered."""
    _rewrite_tokens: int | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def rewrite_tokens(self) -> int:
        """What a full rewrite of ``payload`` as minified JSON would cost in output tokens.

        Counted when first read, then kept: the count writes and tokenizes the whole payload
        (about 0.05 s per MB), which a run does not need. On an event loop, read it for a
        payload of megabytes in a worker thread (``asyncio.to_thread``)."""
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
