"""Change requests computed from payload pairs (the cheapest in minified characters), merges
exported as RFC 6902, undo; a guide: docs/tools-and-sessions.md.

Correct for any data: a string that is a marker is never written where the merge reads markers,
and a value that must become ``{}`` is set whole (``{}`` in updateElements keeps a value)."""

from __future__ import annotations

from agent_payload._jsondata import json_equal
from agent_payload.diff._data import MAX_DIFF_DEPTH
from agent_payload.diff._encode import diff_payloads, undo_change_request
from agent_payload.diff._patch import json_pointer, to_json_patch

__all__ = [
    "MAX_DIFF_DEPTH",
    "diff_payloads",
    "json_equal",
    "json_pointer",
    "to_json_patch",
    "undo_change_request",
]
