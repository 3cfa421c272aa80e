"""Keeping the change-request schema small: annotations stripped (``title``, ``default``,
``examples``) and every repeated sub-schema defined once in ``$defs`` and referenced."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["free_name", "hoist_repeats", "strip_annotations"]

Schema = dict[str, Any]

_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SCHEMA_ONE = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
)
_ANNOTATION_KEYS = frozenset({"title", "default", "examples"})


def strip_annotations(schema: Any) -> Any:
    """A copy of a JSON Schema without ``title``, ``default`` and ``examples`` keywords (they
    repeat the property names or the data and cost tokens); properties so named are kept."""
    if not isinstance(schema, dict):
        return copy.deepcopy(schema)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ANNOTATION_KEYS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: strip_annotations(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [strip_annotations(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = strip_annotations(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


_HOIST_MIN = 40
"""Shortest repeated sub-schema (minified characters) worth a ``$defs`` entry."""


def hoist_repeats(
    buckets: dict[str, Schema], defs: dict[str, Schema]
) -> tuple[dict[str, Schema], dict[str, Schema]]:
    """Define every sub-schema that occurs more than once (and is long enough to gain) once in
    ``$defs`` and refer to it: a 200-field model repeats a handful of field types hundreds of
    times across the buckets. Largest first, so nested repeats collapse with their parent."""

    def text(node: Any) -> str:
        return json.dumps(node, sort_keys=True, separators=(",", ":"))

    counts: dict[str, int] = {}

    def count(node: Any, top: bool) -> None:
        if not isinstance(node, dict):
            return
        if not top and "$ref" not in node:
            key = text(node)
            if len(key) >= _HOIST_MIN:
                counts[key] = counts.get(key, 0) + 1
        for k, v in node.items():
            if k in _SCHEMA_MAPS and isinstance(v, dict):
                for sub in v.values():
                    count(sub, False)
            elif k in _SCHEMA_LISTS and isinstance(v, list):
                for sub in v:
                    count(sub, False)
            elif k in _SCHEMA_ONE and isinstance(v, dict):
                count(v, False)

    for bucket in buckets.values():
        count(bucket, True)
    for sub in defs.values():
        count(sub, True)
    repeated = sorted((k for k, n in counts.items() if n > 1), key=len, reverse=True)
    if not repeated:
        return buckets, defs
    names: dict[str, str] = {}
    taken = set(defs)
    for index, key in enumerate(repeated):
        name = free_name(f"T{index}", taken)
        taken.add(name)
        names[key] = name

    def rewrite(node: Any, top: bool) -> Any:
        if not isinstance(node, dict):
            return node
        if not top:
            name = names.get(text(node)) if "$ref" not in node else None
            if name is not None:
                return {"$ref": f"#/$defs/{name}"}
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k in _SCHEMA_MAPS and isinstance(v, dict):
                out[k] = {n: rewrite(sub, False) for n, sub in v.items()}
            elif k in _SCHEMA_LISTS and isinstance(v, list):
                out[k] = [rewrite(sub, False) for sub in v]
            elif k in _SCHEMA_ONE and isinstance(v, dict):
                out[k] = rewrite(v, False)
            else:
                out[k] = v
        return out

    new_defs = {name: rewrite(sub, True) for name, sub in defs.items()}
    for key, name in names.items():
        new_defs[name] = rewrite(json.loads(key), True)
    return {k: rewrite(v, True) for k, v in buckets.items()}, new_defs


def free_name(base: str, taken: Mapping[str, Any] | set[str]) -> str:
    name = base
    while name in taken:
        name = "_" + name
    return name
