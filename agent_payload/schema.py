"""The JSON Schema of a change request, derived from the payload type.

``change_request_schema(Invoice)`` describes ``AgentPayloadChangeRequest[Invoice]`` as the
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

Where strict modes cannot express the format
---------------------------------------------

OpenAI's strict structured outputs and strict function calling (``strict: true``) require
every object to list all its properties in ``required`` and to set ``additionalProperties:
false``; optional fields must be written as required-and-nullable, and ``patternProperties``
and free-form values (``{}``, ``additionalProperties: {...}``) are not accepted. The change
request cannot be expressed that way without changing its meaning:

* **Deep partials** (every payload type): a partial's properties are optional by design. A
  required-but-nullable property would make the model write ``null`` for every key it does not
  change, and in the merge ``null`` *sets the value to null*. So no bucket of a typed payload
  fits strict mode.
* **Index maps**: an object keyed by indices needs ``patternProperties``.
* **Free keys** (``dict[str, V]``, ``extra="allow"``) need ``additionalProperties: {...}``.
* **Any JSON** (``payload_type=None``, ``Any`` fields): schema-less values.

Therefore ``strict=True`` returns the **non-strict** schema (the same dict as ``strict=False``)
whenever any of the above occurs, which is the case for every payload type; it differs only
in that the envelope's five fields are then listed as required-and-nullable when, and only
when, the whole schema would be strict-compatible (never, in practice). Use
``is_strict_compatible(schema)`` to decide the ``strict`` flag you send. The provider adapters
agree on one default, ``strict=False``: ``strict: true`` is never sent (OpenAI's Responses API,
strict unless told otherwise, gets ``strict: false``), so OpenAI treats this schema as guidance
(structured outputs without the strict guarantee; function calling with the schema as a hint),
Anthropic's ``tool_use`` takes it as it is, and no model or compatible server rejects it;
``agent_payload.parse`` + the correction loop catch what slips through. ``strict="auto"`` (both
adapters) sends ``strict: true`` exactly when ``is_strict_compatible`` says so.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from agent_payload.changes import MARKER
from agent_payload.providers._common import strict_compatible

__all__ = [
    "INDEX_KEY_PATTERN",
    "MAX_SCHEMA_DEPTH",
    "change_request_schema",
    "is_strict_compatible",
]

INDEX_KEY_PATTERN = "^(0|[1-9][0-9]*)$"
"""Keys of an index map (MERGE.md section 7): decimal indices without sign or leading zero."""

_DROPPED_IN_PARTIALS = frozenset({"title", "default", "examples", "discriminator", "required"})
_ANY_CONTAINER: dict[str, Any] = {"anyOf": [{"type": "object"}, {"type": "array"}]}

Schema = dict[str, Any]


def is_strict_compatible(schema: object) -> bool:
    """True when ``schema`` fits OpenAI's strict mode (all properties required,
    ``additionalProperties: false`` everywhere, no ``patternProperties`` or schema-less values).
    """
    return strict_compatible(schema)


def change_request_schema(
    payload_type: Any = None, *, marker: str = MARKER, strict: bool = False
) -> dict[str, Any]:
    """The JSON Schema of a change request for payloads of ``payload_type``.

    ``payload_type``: a pydantic model class, or any type pydantic's ``TypeAdapter`` accepts
    (``list[Item]``, a ``TypedDict``, ...), or a dict holding the payload's own JSON Schema
    (local ``$defs`` refs only), or None for any JSON. ``marker`` is the DELETE
    marker the model is told to use. ``strict``: see "Where strict modes cannot express the
    format" in the module docstring (a schema strict mode cannot express is returned
    non-strict). A fresh dict on each call.
    """
    if not isinstance(marker, str) or not marker:
        from agent_payload.errors import ConfigurationError

        raise ConfigurationError(
            f"change_request_schema(marker=...): expected a non-empty string such as "
            f"'DELETE', got {marker!r}."
        )
    if isinstance(payload_type, dict):
        _check_depth(payload_type)
        schema = _Builder(copy.deepcopy(payload_type), marker).build()
    elif payload_type is None:
        schema = _envelope(
            {
                "newElements": copy.deepcopy(_ANY_CONTAINER),
                "updateElements": copy.deepcopy(_ANY_CONTAINER),
                "removeElements": copy.deepcopy(_ANY_CONTAINER),
                "replaceElements": copy.deepcopy(_ANY_CONTAINER),
            },
            {},
            marker,
        )
    else:
        schema = _Builder(
            _payload_json_schema(payload_type), marker, fields_always_present=True
        ).build()
    if strict:
        tightened = _strict_envelope(schema)
        if strict_compatible(tightened):
            return tightened
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
            from agent_payload.errors import ConfigurationError

            raise ConfigurationError(
                f"change_request_schema(payload_type=<dict>): the JSON Schema is nested deeper "
                f"than {MAX_SCHEMA_DEPTH} levels; expected a schema that names repeated or "
                "recursive parts in $defs. Move deep parts into $defs and refer to them."
            )
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _payload_json_schema(payload_type: Any) -> Schema:
    from pydantic import TypeAdapter

    from agent_payload.errors import ConfigurationError

    try:
        result: Schema = TypeAdapter(payload_type).json_schema(ref_template="#/$defs/{model}")
    except Exception as exc:
        raise ConfigurationError(
            f"change_request_schema({payload_type!r}): pydantic cannot derive a JSON Schema "
            f"from this type ({exc}). Pass a pydantic model class, a type pydantic accepts "
            "(list[Item], a TypedDict, ...), or None for any JSON."
        ) from exc
    return result


def _strict_envelope(schema: Schema) -> Schema:
    """The envelope with its fields required and nullable (what strict mode wants)."""
    result = copy.deepcopy(schema)
    properties: dict[str, Any] = result["properties"]
    for name, sub in list(properties.items()):
        properties[name] = {"anyOf": [sub, {"type": "null"}]}
    result["required"] = list(properties)
    return result


_DESCRIPTIONS = {
    "newElements": (
        "Additions: a partial of the payload holding only the new keys/items. Where an array "
        'stands, an index map inserts: {{"2": [items]}} puts the items before original element '
        '2 (the length as key: at the end); {{"2": {{...}}}} adds inside element 2.'
    ),
    "updateElements": (
        "Surgical updates: a partial of the payload holding only what changes. In arrays, "
        "{{}} keeps an element; an object keyed by indices (an index map, e.g. "
        '{{"150": {{...}}}}) may stand instead of an array. "{marker}" deletes a key or element.'
    ),
    "removeElements": (
        'Deletions: a partial of the payload whose leaves are "{marker}"; in arrays, {{}} keeps '
        "an element; an index map may stand instead of an array."
    ),
    "replaceElements": "Whole-value replacement of top-level keys (full values, taken literally).",
    "reasoning": "Why these changes (free text, never merged).",
}


def _envelope(buckets: dict[str, Schema], defs: dict[str, Schema], marker: str) -> Schema:
    properties: dict[str, Any] = {}
    for name, sub in buckets.items():
        described = dict(sub)
        described["description"] = _DESCRIPTIONS[name].format(marker=marker)
        properties[name] = described
    properties["reasoning"] = {"type": "string", "description": _DESCRIPTIONS["reasoning"]}
    schema: Schema = {
        "title": "AgentPayloadChangeRequest",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if defs:
        schema["$defs"] = defs
    return schema


class _Builder:
    """Derives the buckets from the payload's JSON Schema (one pass per mode, memoised defs)."""

    def __init__(
        self, payload_schema: Schema, marker: str, *, fields_always_present: bool = False
    ) -> None:
        payload_schema = _strip_annotations(payload_schema)
        self.fields_always_present = fields_always_present
        self.marker = marker
        self.source_defs: dict[str, Schema] = dict(payload_schema.get("$defs", {}))
        self.root: Schema = {k: v for k, v in payload_schema.items() if k != "$defs"}
        # The marker and the placeholder are defined once in $defs and referenced.
        self.marker_name = _free_name("DEL", self.source_defs)
        self.placeholder_name = _free_name("KEEP", self.source_defs)
        self.marker_schema: Schema = {"$ref": f"#/$defs/{self.marker_name}"}
        self.placeholder: Schema = {"$ref": f"#/$defs/{self.placeholder_name}"}
        self.defs: dict[str, Schema] = {}
        self._done: set[str] = set()
        self._removable: dict[str, bool] = {}

    # -- entry --

    def build(self) -> Schema:
        root = self._resolve(self.root)
        buckets: dict[str, Schema] = {
            "newElements": self.new(self.root),
            "updateElements": self.update(self.root),
        }
        removal = self.remove(self.root)
        buckets["removeElements"] = removal if removal is not None else {"type": "object"}
        buckets["replaceElements"] = self._replace_schema(root)
        used = dict(self.defs)
        for name in self._full_refs_needed():
            used.setdefault(name, self.source_defs[name])
        used[self.marker_name] = {"type": "string", "enum": [self.marker]}
        used[self.placeholder_name] = {
            "type": "object",
            "properties": {},
            "additionalProperties": False,
        }
        buckets, used = _hoist_repeats(buckets, used)
        return _envelope(buckets, dict(sorted(used.items())), self.marker)

    def _replace_schema(self, root: Schema) -> Schema:
        if _is_object(root):
            properties = {k: copy.deepcopy(v) for k, v in root.get("properties", {}).items()}
            result: Schema = {"type": "object", "properties": properties}
            extra = root.get("additionalProperties")
            if extra is None and properties:
                result["additionalProperties"] = False
            elif extra is not None:
                result["additionalProperties"] = copy.deepcopy(extra)
            return result
        if _is_array(root):
            return _strip_title(copy.deepcopy(root))
        return copy.deepcopy(_ANY_CONTAINER)

    def _full_refs_needed(self) -> set[str]:
        """Original defs referenced (transitively) from anything built or from the root."""
        needed: set[str] = set()
        stack: list[Any] = [self.defs, self.root]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and ref.startswith("#/$defs/"):
                    name = ref[len("#/$defs/") :]
                    if name in self.source_defs and name not in needed:
                        needed.add(name)
                        stack.append(self.source_defs[name])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        return needed

    # -- helpers --

    def _resolve(self, schema: Schema) -> Schema:
        seen: set[str] = set()
        while "$ref" in schema and isinstance(schema["$ref"], str):
            name = schema["$ref"].removeprefix("#/$defs/")
            if name in seen or name not in self.source_defs:
                break
            seen.add(name)
            schema = self.source_defs[name]
        return schema

    def _ref_name(self, schema: Schema) -> str | None:
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/") :]
            if name in self.source_defs:
                return name
        return None

    def _via_def(self, schema: Schema, mode: str, build: Any) -> Schema:
        """``{"$ref": D}`` -> ``{"$ref": D__mode}``, building the def once (recursion-safe)."""
        name = self._ref_name(schema)
        assert name is not None
        if not self._can_hold(name):  # an enum or other leaf: its partial is itself
            return {k: v for k, v in schema.items() if k not in _DROPPED_IN_PARTIALS}
        target = f"{name}__{mode}"
        if target not in self._done:
            self._done.add(target)
            self.defs[target] = {}  # placeholder while building (recursive types)
            self.defs[target] = build(self.source_defs[name])
        result = {k: v for k, v in schema.items() if k not in _DROPPED_IN_PARTIALS}
        result["$ref"] = f"#/$defs/{target}"
        return result

    def _slot(self, partial: Schema) -> Schema:
        """Where a property or element stands in updateElements: its partial or the marker."""
        return _any_of([partial, self.marker_schema])

    def _index_map(self, value: Schema) -> Schema:
        return {
            "type": "object",
            "patternProperties": {INDEX_KEY_PATTERN: value},
            "additionalProperties": False,
        }

    def _object_extra(self, schema: Schema, transform: Any) -> Any:
        """additionalProperties of a partial: false unless the type has free keys."""
        extra = schema.get("additionalProperties")
        if extra is None:
            return False if schema.get("properties") else {}
        if extra is False:
            return False
        if extra is True:
            return {}
        return transform(extra)

    # -- updateElements: the deep partial with markers, placeholders and index maps --

    def update(self, schema: Schema) -> Schema:
        if self._ref_name(schema) is not None:
            return self._via_def(schema, "update", self.update)
        combined = self._combinator(schema, self.update)
        if combined is not None:
            return combined
        if _is_object(schema):
            required = set(schema.get("required", ()))
            return self._partial_object(
                schema,
                lambda v, key=None: (
                    self.update(v) if key in required else self._slot(self.update(v))
                ),
                self.update_extra,
            )
        if _is_array(schema):
            element = _any_of([self.update(_items(schema)), self.placeholder, self.marker_schema])
            positional = {"type": "array", "items": element}
            return {"anyOf": [positional, self._index_map(element)]}
        return _leaf(schema)

    def update_extra(self, extra: Schema) -> Schema:
        return self._slot(self.update(extra))

    # -- removeElements: the same shape, leaves are markers --

    def remove(self, schema: Schema) -> Schema | None:
        """The removal partial, or None when nothing can be nested inside (a leaf type)."""
        name = self._ref_name(schema)
        if name is not None:
            if not self._can_hold(name):
                return None
            return self._via_def(schema, "remove", self._remove_body)
        return self._remove_inner(schema)

    def _remove_body(self, schema: Schema) -> Schema:
        result = self._remove_inner(schema)
        return result if result is not None else {"type": "object"}

    def _remove_inner(self, schema: Schema) -> Schema | None:
        if self._ref_name(schema) is not None:
            return self.remove(schema)
        branches = _branches(schema)
        if branches is not None:
            parts = [p for p in (self.remove(b) for b in branches) if p is not None]
            if not parts:
                return None
            return _any_of(parts)
        if _is_object(schema):
            required = set(schema.get("required", ()))

            def prop(v: Schema, key: str | None = None) -> Schema | None:
                if key in required:  # cannot be deleted: only what is inside it may be
                    return self.remove(v)
                return self._remove_slot(v)

            return self._partial_object(schema, prop, self._remove_slot)
        if _is_array(schema):
            options = [self.marker_schema, self.placeholder]
            inner = self.remove(_items(schema))
            if inner is not None:
                options.append(inner)
            element = _any_of(options)
            return {"anyOf": [{"type": "array", "items": element}, self._index_map(element)]}
        if not schema:  # any JSON: a removal may nest anything
            return copy.deepcopy(_ANY_CONTAINER)
        return None

    def _remove_slot(self, schema: Schema) -> Schema:
        inner = self.remove(schema)
        if inner is None:
            return self.marker_schema
        return _any_of([self.marker_schema, inner])

    def _can_hold(self, name: str) -> bool:
        """Whether def ``name`` can be (or contain at its top) an object or array."""
        if name in self._removable:
            return self._removable[name]
        self._removable[name] = True  # assume so while recursing
        value = self._holds(self.source_defs[name], set())
        self._removable[name] = value
        return value

    def _holds(self, schema: Schema, seen: set[str]) -> bool:
        name = self._ref_name(schema)
        if name is not None:
            if name in seen:
                return True
            return self._holds(self.source_defs[name], seen | {name})
        branches = _branches(schema)
        if branches is not None:
            return any(self._holds(b, seen) for b in branches)
        return _is_object(schema) or _is_array(schema) or not schema

    # -- newElements: a deep partial without markers; appended and inserted items are whole --

    def new(self, schema: Schema) -> Schema:
        if self._ref_name(schema) is not None:
            return self._via_def(schema, "new", self.new)
        combined = self._combinator(schema, self.new)
        if combined is not None:
            return combined
        if _is_object(schema):
            return self._partial_object(schema, self._new_property, self.new)
        if _is_array(schema):
            return self._new_array(schema)
        return _leaf(schema)

    def _new_array(self, schema: Schema, *, append: bool = True) -> Schema:
        """An array in newElements: items to append (``{}`` skipped), or an index map whose
        values insert whole items or descend into the element (section 8)."""
        items = _items(schema)
        whole = _strip_title(copy.deepcopy(items))
        values: list[Schema] = [{"type": "array", "items": copy.deepcopy(whole)}]
        if self._ref_name(items) is None and _is_array(items):
            values.append(self._new_array(items, append=False))  # into an array: a map only
        elif self._holds(items, set()):
            values.append(self.new(items))
        index_map = self._index_map(_any_of(values))
        if not append:
            return index_map
        appended = {"type": "array", "items": _any_of([whole, self.placeholder])}
        return {"anyOf": [appended, index_map]}

    def _new_property(self, schema: Schema, key: str | None = None) -> Schema | None:
        """A declared property in newElements. A pydantic model's fields are always present in
        its JSON form, so a field that cannot hold an object or array has nothing to add (a
        new value for it is an update): it is left out."""
        if self.fields_always_present and not self._holds(schema, set()):
            return None
        return self.new(schema)

    # -- shared shapes --

    def _combinator(self, schema: Schema, transform: Any) -> Schema | None:
        branches = _branches(schema)
        if branches is None:
            return None
        parts: list[Schema] = []
        for branch in branches:
            part = transform(branch)
            if part not in parts:
                parts.append(part)
        result = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "allOf")}
        result = {k: v for k, v in result.items() if k not in _DROPPED_IN_PARTIALS}
        if not result:
            return _any_of(parts)
        result["anyOf"] = _any_of(parts).get("anyOf", parts)
        return result

    def _partial_object(self, schema: Schema, value: Any, extra: Any) -> Schema:
        """``value(sub)`` or ``value(sub, key)`` per property (None: the property is left
        out), ``extra(sub)`` for free keys."""
        result: Schema = {"type": "object"}
        if "description" in schema:
            result["description"] = schema["description"]
        properties = schema.get("properties", {})
        if properties:
            built = {k: _call(value, v, k) for k, v in properties.items()}
            result["properties"] = {k: v for k, v in built.items() if v is not None}
        patterns = schema.get("patternProperties")
        if isinstance(patterns, dict):
            result["patternProperties"] = {k: extra(v) for k, v in patterns.items()}
        result["additionalProperties"] = self._object_extra(schema, extra)
        return result


def _any_of(options: list[Schema]) -> Schema:
    """``anyOf`` of ``options``, flattening bare nested ``anyOf``s and dropping duplicates."""
    flat: list[Schema] = []
    for option in options:
        nested = option.get("anyOf") if set(option) == {"anyOf"} else None
        for item in nested if isinstance(nested, list) else [option]:
            if item not in flat:
                flat.append(item)
    return flat[0] if len(flat) == 1 else {"anyOf": flat}


def _branches(schema: Schema) -> list[Schema] | None:
    kinds = schema.get("type")
    if isinstance(kinds, list) and len(kinds) > 1:  # {"type": ["object", "null"]} and the like
        rest = {k: v for k, v in schema.items() if k != "type"}
        return [
            {**rest, "type": kind} if kind in ("object", "array") else {"type": kind}
            for kind in kinds
            if isinstance(kind, str)
        ]
    for key in ("anyOf", "oneOf", "allOf"):
        value = schema.get(key)
        if isinstance(value, list) and value:
            return [b for b in value if isinstance(b, dict)]
    return None


def _types(schema: Schema) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return set()


def _is_object(schema: Schema) -> bool:
    types = _types(schema)
    if types and types != {"object"} and types != {"object", "null"}:
        return False
    return "object" in types or "properties" in schema or "additionalProperties" in schema


def _is_array(schema: Schema) -> bool:
    types = _types(schema)
    return types in ({"array"}, {"array", "null"}) or (
        not types and ("items" in schema or "prefixItems" in schema)
    )


def _items(schema: Schema) -> Schema:
    items = schema.get("items")
    prefix = schema.get("prefixItems")
    if isinstance(prefix, list) and prefix:
        options = [p for p in prefix if isinstance(p, dict)]
        if isinstance(items, dict) and items:
            options.append(items)
        return options[0] if len(options) == 1 else {"anyOf": options}
    return items if isinstance(items, dict) else {}


def _leaf(schema: Schema) -> Schema:
    return {k: copy.deepcopy(v) for k, v in schema.items() if k not in _DROPPED_IN_PARTIALS}


def _strip_title(schema: Schema) -> Schema:
    schema.pop("title", None)
    return schema


def _call(function: Any, sub: Schema, key: str) -> Any:
    try:
        return function(sub, key)
    except TypeError:
        return function(sub)


def _free_name(base: str, taken: Mapping[str, Any] | set[str]) -> str:
    name = base
    while name in taken:
        name = "_" + name
    return name


_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SCHEMA_ONE = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
)
_ANNOTATION_KEYS = frozenset({"title", "default", "examples"})


def _strip_annotations(schema: Any) -> Any:
    """A copy of a JSON Schema without ``title``, ``default`` and ``examples`` keywords (they
    repeat the property names or the data and cost tokens); properties so named are kept."""
    if not isinstance(schema, dict):
        return copy.deepcopy(schema)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ANNOTATION_KEYS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _strip_annotations(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_strip_annotations(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _strip_annotations(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


_HOIST_MIN = 40
"""Shortest repeated sub-schema (minified characters) worth a ``$defs`` entry."""


def _hoist_repeats(
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
        name = _free_name(f"T{index}", taken)
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
