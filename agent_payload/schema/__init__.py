"""The JSON Schema of a change request, derived from the payload type.

``change_request_schema(Invoice)`` describes a change request for an ``Invoice`` as the
model must write it (MERGE.md), for tool definitions and structured outputs::

    {"type": "object", "additionalProperties": false,
     "properties": {"newElements": ..., "updateElements": ..., "removeElements": ...,
                    "replaceElements": ..., "reasoning": {"type": "string"}},
     "$defs": {...}}

Each bucket is derived from the payload's JSON Schema (pydantic's, with its ``$defs``; recursive
models stay recursive through ``$ref``):

* ``updateElements``: a *deep partial*: no property is required; where a property stands, the
  marker (``"DELETE"``, or the one given) may stand instead; where an array stands, either a
  positional array whose items are the element's partial, a ``{}`` placeholder or the marker,
  or an *index map* (an object whose keys match ``^(0|[1-9][0-9]*)$``, same values).
* ``removeElements``: the same shape, but its leaves are only the marker (or ``{}`` in arrays).
* ``newElements``: a deep partial without markers; array items are whole elements (they are
  appended), ``{}`` placeholders allowed (they are skipped). Where an array stands, an index map
  may stand instead (MERGE.md section 8): a list of whole elements inserts them, an element's
  ``newElements`` partial adds inside it (an index map again if the element is an array).
* ``replaceElements``: the payload's top-level keys with their full (non-partial) types, each
  optional; for an array payload, the whole array.
* ``reasoning``: a string.

Objects of the payload type that do not declare ``additionalProperties`` (pydantic's default
``extra="ignore"``) get ``additionalProperties: false`` in the partials, so the model does not
invent keys; ``extra="allow"`` and ``dict[str, V]`` keep their free keys. ``Optional[X]``,
unions, enums, literals, nested and recursive models, lists, tuples and dicts are handled;
``discriminator`` is dropped from the partials (a partial need not carry the discriminator
field). ``payload_type=None`` means any JSON: each bucket is an object or an array.

Compact by construction (a schema is sent with every tool-mode attempt; ``bench/schema.py``
measures it at 1.3-1.8x the payload's own schema for a 200-field and a 20x10 nested model):

* ``title``, ``default`` and ``examples`` are stripped everywhere (full copies included);
* the marker (``$defs/DEL``) and the ``{}`` placeholder (``$defs/KEEP``) are defined once and
  referenced, and so is every other sub-schema that repeats (``$defs/T0``, ``T1``, ...: a
  200-field model repeats a handful of field types hundreds of times);
* the marker is admitted only where a deletion can validate: an optional property (not in
  ``required``), an array element, a free (dict) key. ``removeElements`` does not name a
  required property except to remove something inside it;
* for pydantic types, whose JSON form always holds every field, ``newElements`` leaves out the
  fields that cannot hold anything new (a new value for a string field is an update); a JSON
  Schema given as a dict promises no such thing and keeps them.

The payload's own JSON Schema is shown in the user message in ``"text"`` mode only: in tool
and ``json_schema`` modes this schema, sent beside the messages, already carries the types.

Strict modes
------------

OpenAI's strict structured outputs and function calling (``strict: true``) cannot express a
change request: its partials have optional properties (required-and-nullable ones would make
the model write ``null``, which sets values), index maps need ``patternProperties`` and free
keys free-form values. So the schema is never strict: the adapters send ``strict: false``
where an API needs the flag (OpenAI's Responses API is strict unless told otherwise), and
``agent_payload.parse`` with the correction loop catch what slips through.
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

__all__ = [
    "INDEX_KEY_PATTERN",
    "MAX_SCHEMA_DEPTH",
    "change_request_schema",
]


def change_request_schema(payload_type: Any = None, *, marker: str = MARKER) -> dict[str, Any]:
    """The JSON Schema of a change request for payloads of ``payload_type``.

    ``payload_type``: a pydantic model class, or any type pydantic's ``TypeAdapter`` accepts
    (``list[Item]``, a ``TypedDict``, ...), or a dict holding the payload's own JSON Schema
    (local ``$defs`` refs only), or None for any JSON. ``marker`` is the DELETE
    marker the model is told to use. A fresh dict on each call.
    """
    if not isinstance(marker, str) or not marker:
        raise ConfigurationError(
            f"change_request_schema(marker=...): expected a non-empty string such as "
            f"'DELETE', got {marker!r}."
        )
    if isinstance(payload_type, dict):
        _check_depth(payload_type)
        schema = Builder(copy.deepcopy(payload_type), marker).build()
    elif payload_type is None:
        schema = envelope(
            {
                "newElements": copy.deepcopy(ANY_CONTAINER),
                "updateElements": copy.deepcopy(ANY_CONTAINER),
                "removeElements": copy.deepcopy(ANY_CONTAINER),
                "replaceElements": copy.deepcopy(ANY_CONTAINER),
            },
            {},
            marker,
        )
    else:
        schema = Builder(
            _payload_json_schema(payload_type), marker, fields_always_present=True
        ).build()
    return schema


MAX_SCHEMA_DEPTH = 200
"""Deepest nesting (of JSON objects and arrays) accepted in a payload JSON Schema given as a
dict; pydantic's schemas stay shallow (nested models are ``$defs``)."""


def _check_depth(schema: Schema) -> None:
    """Refuse a hand-written schema nested deeper than ``MAX_SCHEMA_DEPTH`` (iteratively, so a
    hostile schema gives a ConfigurationError, never a RecursionError)."""
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
