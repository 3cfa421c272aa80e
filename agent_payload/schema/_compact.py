"""Keeping the change-request schema small: annotations stripped (``title``, ``default``,
``examples``) and every repeated sub-schema defined once in ``$defs`` and referenced."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["free_name", "hoist_repeats", "map_subschemas", "strip_annotations"]

Schema = dict[str, Any]

_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SCHEMA_ONE = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
)
_ANNOTATION_KEYS = frozenset({"title", "default", "examples"})


def map_subschemas(
    schema: Schema, transform: Callable[[Any], Any], other: Callable[[Any], Any] = lambda v: v
) -> Schema:
    """``schema`` with ``transform`` applied to each direct sub-schema, ``other`` to the rest."""
    out: Schema = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: transform(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [transform(sub) for sub in value]
        else:
            out[key] = transform(value) if key in _SCHEMA_ONE else other(value)
    return out


def _subschemas(schema: Schema) -> Iterator[Any]:
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            yield from value.values()
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            yield from value
        elif key in _SCHEMA_ONE:
            yield value


def strip_annotations(schema: Any) -> Any:
    """A deep copy of a JSON Schema without ``title``, ``default`` and ``examples`` keywords
    (they repeat the property names or the data and cost tokens); properties so named stay."""
    if not isinstance(schema, dict):
        return copy.deepcopy(schema)
    kept = {k: v for k, v in schema.items() if k not in _ANNOTATION_KEYS}
    return map_subschemas(kept, strip_annotations, copy.deepcopy)


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
        for sub in _subschemas(node):
            count(sub, False)

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
        return map_subschemas(node, lambda sub: rewrite(sub, False))

    new_defs = {name: rewrite(sub, True) for name, sub in defs.items()}
    for key, name in names.items():
        new_defs[name] = rewrite(json.loads(key), True)
    return {k: rewrite(v, True) for k, v in buckets.items()}, new_defs


def free_name(base: str, taken: Mapping[str, Any] | set[str]) -> str:
    name = base
    while name in taken:
        name = "_" + name
    return name
