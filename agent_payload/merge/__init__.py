"""The pure merge engine (no I/O): ``apply_change_request`` merges a change request into a
payload and reports effective changes, warnings and conflicts; docs/MERGE.md is the contract. The
walk is ``_root``, ``_objects`` and ``_arrays``; ``_messages`` holds every text the model reads."""

from agent_payload._jsondata import format_request_path
from agent_payload._normalise import WRAPPERS
from agent_payload._paths import format_payload_path
from agent_payload.merge._apply import (
    apply_change_request,
    ineffective_parts,
    list_validation_errors,
    validation_errors,
)
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
