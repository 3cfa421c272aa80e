"""Compute change requests from payload pairs; export merges as RFC 6902; undo merges.

This package owns the public names; its modules: ``_encode`` (``diff_payloads``: the
encoding of change requests), ``_align`` (the alignment of arrays), ``_context`` (candidate
encodings and their costs), ``_data`` (JSON helpers), ``_patch``
(``to_json_patch``, ``json_pointer``), ``_undo`` (``undo_change_request``).

* ``diff_payloads(old, new)`` returns an ``AgentPayloadChangeRequest`` that turns ``old`` into
  ``new`` under MERGE.md, choosing the cheaper encoding wherever there is a choice (fewest
  characters of minified JSON, a close proxy for tokens): a positional update with ``{}``
  placeholders or an index map, a descent into a subtree or setting it whole, appending
  through ``newElements`` or past the end of ``updateElements``, inserting through a
  ``newElements`` index map (MERGE.md section 8), ``replaceElements`` for top-level keys (or
  the whole array at an array root).
* ``to_json_patch(before, result)`` turns a merge's effective changes into an RFC 6902 JSON
  Patch that gives exactly the merged payload when applied to ``before``.
* ``undo_change_request(before, after)`` is the change request that restores ``before``.

Markers in the data. A change request written by ``diff_payloads`` is meant to be merged with
``markers`` holding ``marker`` (the default ``DEFAULT_MARKERS`` holds ``"DELETE"``). Strings
that are markers of the merge (``markers``, by default ``DEFAULT_MARKERS`` plus ``marker``) are
never written where the merge would read them as markers: such a value is written literally,
through ``newElements`` on an existing key, ``replaceElements``, or inside added content (a
whole subtree set at its nearest object key, which the merge takes literally). So the diff is
correct for any data, with the default markers; a marker that the data does not hold (for
example ``merge.choose_marker(new)``, merged with ``markers={that_marker}``) only makes it
cheaper when the data holds marker strings.

``{}`` as data: an update value ``{}`` changes nothing on an existing key, so a value that
must become ``{}`` is set whole (the key is removed in ``removeElements`` and given again in
``updateElements``, which the merge takes literally), or its keys are deleted one by one,
whichever is cheaper.

Arrays. The old and new elements are aligned by a longest common subsequence of element keys
(``marshal`` bytes of each element, or canonical JSON for data holding subclasses of the JSON
types): common prefix and suffix first, then patience anchors (elements unique on both sides,
their longest increasing run found by patience sorting, O(n log n)) splitting the rest into
regions, each small region solved exactly by dynamic programming; a work budget proportional
to the input bounds the whole. Between two matched elements the leftovers are paired in order.
Each pair that differs is changed in place, or deleted and inserted again when that is cheaper
(or the only way: a container of the other kind, ``{}`` over a primitive, a marker string as
the new element); unpaired originals are deleted by their original position; unpaired new
elements are inserted before the next kept original through a ``newElements`` index map
(MERGE.md section 8), or appended (a ``newElements`` list, or past the end of a positional
``updateElements``). So an insertion in the middle costs the inserted items, a move one
deletion plus the moved value, and a reorder the same per moved element. The element-by-element
(positional) alignment is tried too when few positions differ, and the cheaper wins. One key
of an index map either inserts before element k or descends into it: when both are wanted,
the insertion takes the key of a deleted original in between, or element k is written without
``newElements`` (or deleted and inserted again).

Not every pair has a change request: the root cannot change kind (an object payload stays an
object), and ``None`` stands for ``{}`` as it does in the merge. Payloads may be as deep as
the merge accepts (``merge.Limits``; every walk over a whole payload is iterative); what is
limited is the request: a change that needs a request nested deeper than ``MAX_DIFF_DEPTH``
levels (the path to it, plus the depth of the value written there) is refused with
``LimitExceededError`` naming where, because ``AgentPayloadChangeRequest`` holds about 250
levels (pydantic ``JsonValue``) and a deeper request could not be returned, validated or
serialised. The recursion of the diff follows only what changed and stops at that depth, so it
never meets Python's recursion limit.
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
