"""Which JSON Schemas OpenAI's strict mode accepts (``is_strict_compatible``), and the envelope
with its fields required and nullable that ``change_request_schema(strict=True)`` tries. The
provider adapters ask ``is_strict_compatible`` for their ``strict="auto"``."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["is_strict_compatible", "strict_envelope"]


def is_strict_compatible(schema: object) -> bool:
    """True when ``schema`` fits OpenAI's strict structured outputs / strict function calling:
    every object lists all its properties in ``required`` and sets ``additionalProperties: false``,
    and no ``patternProperties`` or schema-less value (``{}`` / ``true``) appears.

    The adapters use it for ``strict="auto"``: a schema that strict mode cannot express is sent
    with ``strict: false`` instead of being rejected by the API.
    """
    return _strict_ok(schema, in_properties=False)


def _strict_ok(node: object, *, in_properties: bool) -> bool:
    if isinstance(node, bool):
        return False
    if not isinstance(node, dict):
        return True
    if not in_properties and not node:
        return False  # {} admits anything: strict mode needs a type
    if "patternProperties" in node:
        return False
    properties = node.get("properties")
    is_object = node.get("type") == "object" or (
        isinstance(node.get("type"), list) and "object" in node["type"]
    )
    if is_object or isinstance(properties, dict):
        if node.get("additionalProperties") is not False:
            return False
        names = set(properties) if isinstance(properties, dict) else set()
        if set(node.get("required", [])) != names:
            return False
    for key, value in node.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            if not all(_strict_ok(sub, in_properties=False) for sub in value.values()):
                return False
        elif key in ("items", "additionalProperties", "not"):
            if key == "additionalProperties" and value is False:
                continue
            if not _strict_ok(value, in_properties=False):
                return False
        elif key in ("oneOf", "allOf", "prefixItems"):
            return False  # not in OpenAI's strict subset (anyOf is)
        elif key == "anyOf" and not all(
            _strict_ok(sub, in_properties=False) for sub in value if isinstance(value, list)
        ):
            return False
    return True


def strict_envelope(schema: dict[str, Any]) -> dict[str, Any]:
    """The envelope with its fields required and nullable (what strict mode wants)."""
    result = copy.deepcopy(schema)
    properties: dict[str, Any] = result["properties"]
    for name, sub in list(properties.items()):
        properties[name] = {"anyOf": [sub, {"type": "null"}]}
    result["required"] = list(properties)
    return result
