"""Change requests computed from payload pairs; merges exported as RFC 6902; undo.

A guide: docs/tools-and-sessions.md. Modules: ``_encode`` (``diff_payloads``: the cheapest
encoding in minified characters), ``_align`` (array alignment), ``_context`` (candidate
encodings and costs), ``_data`` (JSON helpers), ``_patch`` (``to_json_patch``), ``_undo``.

Strings that are markers of the merge are never written where the merge would read them as
markers (they go through ``newElements`` on an existing key, ``replaceElements`` or inside added
content), and a value that must become ``{}`` is set whole (``{}`` in updateElements keeps a
value), so the diff is correct for any data. A change needing a request nested deeper than
``MAX_DIFF_DEPTH`` raises ``LimitExceededError``: ``AgentPayloadChangeRequest`` holds about 250
levels.
"""

from __future__ import annotations

from agent_payload._jsondata import json_equal
from agent_payload.diff._data import MAX_DIFF_DEPTH
from agent_payload.diff._encode import diff_payloads
from agent_payload.diff._patch import json_pointer, to_json_patch
from agent_payload.diff._undo import undo_change_request

__all__ = [
    "MAX_DIFF_DEPTH",
    "diff_payloads",
    "json_equal",
    "json_pointer",
    "to_json_patch",
    "undo_change_request",
]
