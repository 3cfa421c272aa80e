"""The pure merge engine: apply a change request to a payload (MERGE.md is the contract).

``apply_change_request(payload, change_request)`` returns a ``MergeResult`` holding the merged
payload and a report of effective changes, warnings (auto-corrections that
were applied) and conflicts (parts of the request that were not applied). No I/O, no SDK.

How it works, in short:

* The change request is normalised (wrappers unwrapped, snake_case accepted, unknown fields
  reported), checked to be JSON data, and copied.
* Default mode copies the payload once, checking that it is JSON data on the way (a copy
  specialised to dict/list, several times faster than ``copy.deepcopy``), then edits that copy
  in place. The result shares no mutable object with either input.
* ``share=True`` copies only the containers on the paths the request walks and shares every
  other subtree with the input: its cost follows the size of the request, not of the payload.
* The walk goes wherever the request goes, with an explicit stack of generators instead of
  recursion, so payloads and requests nested 10,000 levels deep (or deeper, up to
  :attr:`Limits.max_depth`) never meet Python's recursion limit.

The parts, in reading order:

* ``_apply``: ``apply_change_request`` (options, payload intake, guard passes, typed results)
  and ``ineffective_parts``;
* ``_request``: the change request normalised (wrappers, snake_case, unknown fields);
* ``_limits``: ``Limits``, ``DEFAULT_LIMITS`` and the errors for inputs beyond them;
* ``_markers``: the DELETE markers, ``choose_marker``, ``dump_payload``;
* ``_root``, ``_objects``, ``_arrays``, ``_walk``: the walk (the root; object nodes; array
  nodes, index maps and insertion; the site being merged and committing one change);
* ``_messages``: the report and every message the model reads about its request;
* ``_nodes``: value kinds, index keys, small words for messages;
* ``_reconcile``: pydantic validation errors as payload paths and messages.
"""

from agent_payload._jsondata import format_request_path
from agent_payload._normalise import WRAPPERS
from agent_payload._paths import format_payload_path
from agent_payload.merge._apply import apply_change_request, ineffective_parts
from agent_payload.merge._apply import merge_checked as merge_checked  # the judge, per attempt
from agent_payload.merge._limits import DEFAULT_LIMITS, Limits
from agent_payload.merge._markers import (
    choose_marker,
    dump_payload,
    is_library_marker,
    payload_holds_string,
)
from agent_payload.merge._nodes import _is_index_map as _is_index_map  # the diff reads it
from agent_payload.merge._rebase import Applied, rebase_change_request
from agent_payload.merge._reconcile import list_validation_errors, validation_errors

__all__ = [
    "DEFAULT_LIMITS",
    "WRAPPERS",
    "Applied",
    "Limits",
    "apply_change_request",
    "choose_marker",
    "dump_payload",
    "format_payload_path",
    "format_request_path",
    "ineffective_parts",
    "is_library_marker",
    "list_validation_errors",
    "payload_holds_string",
    "rebase_change_request",
    "validation_errors",
]
