"""The JSON Schema of a change request, derived from the payload type, for tool definitions and
structured outputs: what each bucket admits and how it stays compact is in docs/typed.md.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import TypeAdapter

from agent_payload.changes import MARKER
from agent_payload.errors import ConfigurationError
from agent_payload.schema._builder import (
    ANY_CONTAINER,
    INDEX_KEY_PATTERN,
    Builder,
    Schema,
    envelope,
)

__all__ = ["INDEX_KEY_PATTERN", "MAX_SCHEMA_DEPTH", "change_request_schema"]


def change_request_schema(payload_type: Any = None, *, marker: str = MARKER) -> dict[str, Any]:
    """The JSON Schema of a change request for payloads of ``payload_type``: a pydantic
    model class, any type pydantic's ``TypeAdapter`` accepts, a dict holding the payload's own
    JSON Schema (local ``$defs`` refs only), or None for any JSON. ``marker``: the DELETE
    marker the model is told to use. Raises ``ConfigurationError`` for a type without a
    schema or a schema nested deeper than ``MAX_SCHEMA_DEPTH``."""
    if not isinstance(marker, str) or not marker:
        raise ConfigurationError(
            f"change_request_schema(marker=...): expected a non-empty string such as "
            f"'DELETE', got {marker!r}."
        )
    if payload_type is None:
        buckets = ("newElements", "updateElements", "removeElements", "replaceElements")
        return envelope({name: copy.deepcopy(ANY_CONTAINER) for name in buckets}, {}, marker)
    if isinstance(payload_type, dict):
        _check_depth(payload_type)
        return Builder(payload_type, marker).build()  # the builder works on a copy
    return Builder(_payload_json_schema(payload_type), marker, fields_always_present=True).build()


MAX_SCHEMA_DEPTH = 200
"""Deepest nesting (of JSON objects and arrays) accepted in a payload JSON Schema given as a
dict; pydantic's schemas stay shallow (nested models are ``$defs``)."""


def _check_depth(schema: Schema) -> None:
    """Refuse a schema nested deeper than ``MAX_SCHEMA_DEPTH`` (iteratively: no RecursionError)."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise ConfigurationError(
                f"change_request_schema(payload_type=<dict>): the JSON Schema is nested deeper "
                f"than {MAX_SCHEMA_DEPTH} levels; expected a schema that names repeated or "
                "recursive parts in $defs. Move deep parts into $defs and refer to them."
            )
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _payload_json_schema(payload_type: Any) -> Schema:
    try:
        result: Schema = TypeAdapter(payload_type).json_schema(ref_template="#/$defs/{model}")
    except Exception as exc:
        raise ConfigurationError(
            f"change_request_schema({payload_type!r}): pydantic cannot derive a JSON Schema "
            f"from this type ({exc}). Pass a pydantic model class, a type pydantic accepts "
            "(list[Item], a TypedDict, ...), or None for any JSON."
        ) from exc
    return result
