"""Typed payloads (docs/typed.md): the JSON form (by alias) must validate back to an equal
value (``check_round_trip``), and what validation does to a merged payload is part of the
reported, judged change (``validate_merged``).
"""

from agent_payload.typed._inspect import clean_loc, dump_json, type_strings, validation_errors
from agent_payload.typed._validate import check_round_trip, normalize, validate_merged

__all__ = [
    "check_round_trip",
    "clean_loc",
    "dump_json",
    "normalize",
    "type_strings",
    "validate_merged",
    "validation_errors",
]
