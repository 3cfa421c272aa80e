"""Typed payloads: an exact round trip, validation as part of the change, type-aware markers.

A payload with a type (a pydantic model, or JSON data with ``payload_type=``) is merged as its
JSON form (``model_dump(mode="json", by_alias=True)``) and validated back: ``check_round_trip``
refuses a type whose JSON form does not validate back to an equal value, and
``validate_merged`` makes what validation does (validators, union switches, carried secret and
excluded fields) part of the reported and judged change. What happens to each pydantic
feature: docs/typed.md. Modules: ``_inspect`` (the type), ``_carry`` (secret and excluded
fields), ``_validate`` (the round trip, ``validate_merged``), ``_reveal`` (files with secrets).
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
