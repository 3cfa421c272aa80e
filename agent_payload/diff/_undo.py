"""Undo: ``undo_change_request(before, after)`` is the change request that restores ``before``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from agent_payload.changes import MARKER, AgentPayloadChangeRequest
from agent_payload.diff._encode import diff_payloads
from agent_payload.report import MergeResult


def undo_change_request(
    before: Any,
    after: Any,
    *,
    marker: str = MARKER,
    markers: Collection[str] | None = None,
) -> AgentPayloadChangeRequest:
    """The change request that turns the merged payload back into ``before``.

    ``after`` is the merged payload or the ``MergeResult``. Applying the returned request to
    the merged payload (with markers holding ``marker``) gives back ``before``: it is
    ``diff_payloads(after, before)``, with a reasoning that says so."""
    merged = after.payload if isinstance(after, MergeResult) else after
    return diff_payloads(
        merged, before, marker=marker, markers=markers, reasoning="Undo the previous change."
    )
