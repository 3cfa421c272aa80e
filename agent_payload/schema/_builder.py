"""Deriving the four buckets of a change request from the payload's JSON Schema (``Builder``,
one pass per bucket with memoised ``$defs``) and wrapping them in the envelope with their
descriptions. See ``agent_payload.schema`` for what each bucket admits."""

from __future__ import annotations

import copy
from typing import Any

from agent_payload.schema._compact import free_name, hoist_repeats, strip_annotations

__all__ = ["ANY_CONTAINER", "INDEX_KEY_PATTERN", "Builder", "Schema", "envelope"]

INDEX_KEY_PATTERN = "^(0|[1-9][0-9]*)$"
"""Keys of an index map (MERGE.md section 7): decimal indices without sign or leading zero."""

_DROPPED_IN_PARTIALS = frozenset({"title", "default", "examples", "discriminator", "required"})
ANY_CONTAINER: dict[str, Any] = {"anyOf": [{"type": "object"}, {"type": "array"}]}

Schema = dict[str, Any]


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


def envelope(buckets: dict[str, Schema], defs: dict[str, Schema], marker: str) -> Schema:
    properties: dict[str, Any] = {
        name: {**sub, "description": _DESCRIPTIONS[name].format(marker=marker)}
        for name, sub in buckets.items()
    }
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


class Builder:
    """Derives the buckets from the payload's JSON Schema (one pass per mode, memoised defs)."""

    def __init__(
        self, payload_schema: Schema, marker: str, *, fields_always_present: bool = False
    ) -> None:
        payload_schema = strip_annotations(payload_schema)
        self.fields_always_present = fields_always_present
        self.marker = marker
        self.source_defs: dict[str, Schema] = dict(payload_schema.get("$defs", {}))
        self.root: Schema = {k: v for k, v in payload_schema.items() if k != "$defs"}
        # The marker and the placeholder are defined once in $defs and referenced.
        self.marker_name = free_name("DEL", self.source_defs)
        self.placeholder_name = free_name("KEEP", self.source_defs)
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
        buckets, used = hoist_repeats(buckets, used)
        return envelope(buckets, dict(sorted(used.items())), self.marker)

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
            return copy.deepcopy(root)
        return copy.deepcopy(ANY_CONTAINER)

    def _full_refs_needed(self) -> set[str]:
        """Original defs referenced (transitively) from anything built or from the root."""
        needed: set[str] = set()
        stack: list[Any] = [self.defs, self.root]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                name = self._ref_name(node)
                if name is not None and name not in needed:
                    needed.add(name)
                    stack.append(self.source_defs[name])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        return needed

    # -- helpers --

    def _resolve(self, schema: Schema) -> Schema:
        seen: set[str] = set()
        while (name := self._ref_name(schema)) is not None and name not in seen:
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

    def _array_or_map(self, element: Schema) -> Schema:
        """Where an array stands in updateElements and removeElements."""
        return {"anyOf": [{"type": "array", "items": element}, self._index_map(element)]}

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
        shared = self._ref_or_branches(schema, "update", self.update)
        if shared is not None:
            return shared
        if _is_object(schema):
            required = set(schema.get("required", ()))
            return self._partial_object(
                schema,
                lambda v, key=None: (
                    self.update(v) if key in required else self._slot(self.update(v))
                ),
                lambda extra: self._slot(self.update(extra)),
            )
        if _is_array(schema):
            element = _any_of([self.update(_items(schema)), self.placeholder, self.marker_schema])
            return self._array_or_map(element)
        return _leaf(schema)

    # -- removeElements: the same shape, leaves are markers --

    def remove(self, schema: Schema) -> Schema | None:
        """The removal partial, or None when nothing can be nested inside (a leaf type)."""
        name = self._ref_name(schema)
        if name is not None:
            if not self._can_hold(name):
                return None
            return self._via_def(schema, "remove", lambda s: self.remove(s) or {"type": "object"})
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
            return self._array_or_map(_any_of(options))
        if not schema:  # any JSON: a removal may nest anything
            return copy.deepcopy(ANY_CONTAINER)
        return None

    def _remove_slot(self, schema: Schema) -> Schema:
        inner = self.remove(schema)
        return self.marker_schema if inner is None else _any_of([self.marker_schema, inner])

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
        shared = self._ref_or_branches(schema, "new", self.new)
        if shared is not None:
            return shared
        if _is_object(schema):
            return self._partial_object(schema, self._new_property, self.new)
        if _is_array(schema):
            return self._new_array(schema)
        return _leaf(schema)

    def _new_array(self, schema: Schema, *, append: bool = True) -> Schema:
        """An array in newElements: items to append (``{}`` skipped), or an index map whose
        values insert whole items or descend into the element (section 8)."""
        items = _items(schema)
        whole = copy.deepcopy(items)
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

    def _ref_or_branches(self, schema: Schema, mode: str, transform: Any) -> Schema | None:
        """The partial of a ``$ref`` or of a union (None: ``schema`` is neither)."""
        if self._ref_name(schema) is not None:
            return self._via_def(schema, mode, transform)
        branches = _branches(schema)
        if branches is None:
            return None
        parts: list[Schema] = []
        for branch in branches:
            part = transform(branch)
            if part not in parts:
                parts.append(part)
        dropped = _DROPPED_IN_PARTIALS | {"anyOf", "oneOf", "allOf"}
        result = {k: v for k, v in schema.items() if k not in dropped}
        if not result:
            return _any_of(parts)
        result["anyOf"] = _any_of(parts).get("anyOf", parts)
        return result

    def _partial_object(self, schema: Schema, value: Any, extra: Any) -> Schema:
        """``value(sub, key)`` per property (None: the property is left out), ``extra(sub)``
        for free keys."""
        result: Schema = {"type": "object"}
        if "description" in schema:
            result["description"] = schema["description"]
        properties = schema.get("properties", {})
        if properties:
            built = {k: value(v, k) for k, v in properties.items()}
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
