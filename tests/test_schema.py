"""The change request's JSON Schema (``agent_payload.schema``), checked with a small validator.

The validator below implements the JSON Schema keywords the schema module emits (and the ones
pydantic emits for the payload types used here); it fails loudly on any other keyword, so a
schema that relied on something it does not check cannot pass silently.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, Optional

import pytest
from pydantic import BaseModel, ConfigDict

from agent_payload.changes import BUCKETS
from agent_payload.errors import ConfigurationError
from agent_payload.schema import (
    MAX_SCHEMA_DEPTH,
    change_request_schema,
)

VECTORS = Path(__file__).parent / "vectors"

# --- a small JSON Schema validator ---------------------------------------------------------------

_ANNOTATIONS = {"title", "description", "default", "examples", "format", "$defs", "discriminator"}
_CHECKED = {
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "items",
    "prefixItems",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
}


def _type_ok(kind: str, value: Any) -> bool:
    return {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "null": value is None,
    }[kind]


def errors(
    schema: Any, value: Any, root: dict[str, Any] | None = None, path: str = "$"
) -> list[str]:
    """Every violation of ``schema`` by ``value`` (empty when valid)."""
    root = root if root is not None else schema
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: no value allowed here"]
    unknown = set(schema) - _CHECKED - _ANNOTATIONS
    if unknown:
        raise AssertionError(f"the test validator does not know {sorted(unknown)} at {path}")
    found: list[str] = []
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        found += errors(root["$defs"][name], value, root, path)
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_type_ok(k, value) for k in kinds):
            return [*found, f"{path}: expected {kinds}, found {json.dumps(value)[:60]}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        found.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "anyOf" in schema and all(errors(s, value, root, path) for s in schema["anyOf"]):
        found.append(f"{path}: matches no anyOf branch")
    if "oneOf" in schema:
        matching = sum(1 for s in schema["oneOf"] if not errors(s, value, root, path))
        if matching != 1:
            found.append(f"{path}: matches {matching} oneOf branches")
    for sub in schema.get("allOf", []):
        found += errors(sub, value, root, path)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        for name in schema.get("required", []):
            if name not in value:
                found.append(f"{path}: missing required {name!r}")
        for key, item in value.items():
            matched = False
            if key in properties:
                matched = True
                found += errors(properties[key], item, root, f"{path}.{key}")
            for pattern, sub in patterns.items():
                if re.search(pattern, key):
                    matched = True
                    found += errors(sub, item, root, f"{path}[{key!r}]")
            if not matched and "additionalProperties" in schema:
                found += errors(schema["additionalProperties"], item, root, f"{path}.{key}")
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        for index, item in enumerate(value):
            if index < len(prefix):
                found += errors(prefix[index], item, root, f"{path}[{index}]")
            elif "items" in schema:
                found += errors(schema["items"], item, root, f"{path}[{index}]")
        if len(value) < schema.get("minItems", 0):
            found.append(f"{path}: too few items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(f"{path}: too many items")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            found.append(f"{path}: string too short")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            found.append(f"{path}: string too long")
    if _type_ok("number", value):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{path}: below minimum")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{path}: above maximum")
    return found


def valid(schema: dict[str, Any], value: Any) -> bool:
    return not errors(schema, value)


def test_validator_catches_what_it_checks() -> None:
    """The validator itself rejects type, enum, required, additional and pattern violations (so
    the tests below are not vacuous)."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"enum": ["x"]}},
        "required": ["a"],
        "patternProperties": {"^[0-9]+$": {"type": "string"}},
        "additionalProperties": False,
    }
    assert valid(schema, {"a": 1, "b": "x", "7": "s"})
    assert not valid(schema, {"a": True})
    assert not valid(schema, {"a": 1, "b": "y"})
    assert not valid(schema, {"b": "x"})
    assert not valid(schema, {"a": 1, "zz": 1})
    assert not valid(schema, {"a": 1, "7": 7})
    with pytest.raises(AssertionError, match="does not know"):
        errors({"if": {}}, 1)


# --- payload types -------------------------------------------------------------------------------


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


class Line(BaseModel):
    sku: str
    qty: int = 1
    tags: list[str] = []


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Address(BaseModel):
    street: str
    city: str


class Invoice(BaseModel):
    id: int
    customer: Optional[str] = None  # noqa: UP045 (Optional on purpose: the pydantic anyOf form)
    address: Address | None = None
    lines: list[Line]
    meta: dict[str, int] = {}
    color: Color = Color.RED
    tree: Node | None = None
    kind: Literal["a", "b"] = "a"
    grid: list[list[int]] = []


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


@pytest.fixture(scope="module")
def invoice_schema() -> dict[str, Any]:
    return change_request_schema(Invoice)


# --- what the schema accepts ---------------------------------------------------------------------


ACCEPTED: list[dict[str, Any]] = [
    {},
    {"reasoning": "nothing to do"},
    {"updateElements": {"customer": "Ada", "address": {"city": "Paris"}}},
    {"updateElements": {"customer": "DELETE", "address": {"city": "Oslo"}}},
    {"updateElements": {"address": "DELETE", "lines": [{"qty": "DELETE"}]}},
    {"updateElements": {"customer": None}},
    {"updateElements": {"lines": [{}, {"qty": 3}, "DELETE"]}},
    {"updateElements": {"lines": {"150": {"qty": 3}, "0": "DELETE", "7": {}}}},
    {"updateElements": {"lines": [{}, {"tags": {"2": "sale"}}]}},
    {"updateElements": {"lines": [{"tags": [{}, "DELETE", "new"]}]}},
    {"updateElements": {"meta": {"views": 3, "old": "DELETE"}}},
    {"updateElements": {"color": "blue", "kind": "b"}},
    {"updateElements": {"tree": {"children": [{}, {"children": {"0": {"name": "x"}}}]}}},
    {"updateElements": {"grid": [{}, [{}, 5, "DELETE"]]}},
    {"updateElements": {"grid": {"3": {"1": 9}}}},
    {"removeElements": {"customer": "DELETE", "lines": [{}, "DELETE"]}},
    {"removeElements": {"lines": {"4": {"tags": ["DELETE"]}}}},
    {"removeElements": {"tree": {"children": {"1": "DELETE"}}}},
    {"newElements": {"lines": [{"sku": "X"}, {}], "meta": {"views": 1}}},
    {"newElements": {"tree": {"children": [{"name": "x"}]}}},
    {"newElements": {"lines": {"2": [{"sku": "X"}, {"sku": "Y", "qty": 2}], "5": []}}},
    {"newElements": {"lines": {"0": {"tags": {"1": ["sale"]}}, "1": {"tags": ["new"]}}}},
    {"newElements": {"grid": {"0": {"2": [7, 8]}, "1": [[1, 2]]}}},
    {"newElements": {"tree": {"children": {"0": {"children": {"0": [{"name": "n"}]}}}}}},
    {"replaceElements": {"lines": [{"sku": "A", "qty": 2}], "address": None}},
    {"replaceElements": {"address": {"street": "1 Main", "city": "Oslo"}}},
]


@pytest.mark.parametrize("request_", ACCEPTED)
def test_accepts_the_format(invoice_schema: dict[str, Any], request_: dict[str, Any]) -> None:
    """Deep partials, {} placeholders, the marker where a key or element may be deleted, index
    maps where arrays stand, nested models, dicts, enums, nested arrays and recursion are all
    accepted."""
    assert errors(invoice_schema, request_) == []


REJECTED: list[tuple[dict[str, Any], str]] = [
    ({"updateElements": {"address": 5}}, "a number where an object is required"),
    ({"updateElements": {"lines": 5}}, "a number where an array is required"),
    ({"updateElements": {"id": "DELETE"}}, "DELETE on a required field (cannot validate)"),
    ({"removeElements": {"lines": "DELETE"}}, "removing a required field"),
    ({"newElements": {"customer": "Ada"}}, "a model's field always exists: that is an update"),
    ({"updateElements": {"lines": [{"qty": "three"}]}}, "a string where an integer stands"),
    ({"updateElements": {"lines": {"01": {"qty": 1}}}}, "an index map key with a leading 0"),
    ({"updateElements": {"lines": {"first": {"qty": 1}}}}, "a non-index key in an index map"),
    ({"updateElements": {"customer": "__DELETE__"} | {"id": "__DELETE__"}}, "another marker"),
    ({"updateElements": {"colour": "red"}}, "a key the payload type does not have"),
    ({"updateElements": {"color": "green"}}, "a value outside the enum"),
    ({"updateElements": {"address": {"zip": "1"}}}, "an unknown nested key"),
    ({"removeElements": {"customer": "yes"}}, "a removal leaf that is not the marker"),
    ({"removeElements": {"id": {"x": "DELETE"}}}, "nested removals under a number"),
    ({"replaceElements": {"address": {"street": "Main"}}}, "a partial in replaceElements"),
    ({"replaceElements": {"lines": [{}]}}, "a placeholder in replaceElements"),
    ({"newElements": {"lines": {"0": "X"}}}, "a primitive in a newElements index map"),
    ({"newElements": {"lines": {"0": [{"qty": 1}]}}}, "an inserted item that is not whole"),
    ({"newElements": {"lines": {"0": {"colour": 1}}}}, "an unknown key inside an element"),
    ({"newElements": {"lines": {"01": [{"sku": "X"}]}}}, "a newElements key with a leading 0"),
    ({"newElements": {"grid": {"0": {"a": [1]}}}}, "a plain object into an array element"),
    ({"newElements": {"lines": {"0": {"tags": {"0": "x"}}}}}, "a primitive to insert"),
    ({"updateElement": {"id": 1}}, "an unknown top-level field"),
    ({"reasoning": 5}, "reasoning that is not a string"),
]


@pytest.mark.parametrize(("request_", "why"), REJECTED)
def test_rejects_what_the_format_does_not_allow(
    invoice_schema: dict[str, Any], request_: dict[str, Any], why: str
) -> None:
    """The schema is not a blank cheque: wrong kinds, bad index keys, foreign markers, unknown
    keys and partial values where full ones are required are rejected."""
    assert errors(invoice_schema, request_), why


def test_marker_is_configurable() -> None:
    """``marker=`` replaces "DELETE" everywhere a marker may stand (and only that string)."""
    schema = change_request_schema(Invoice, marker="__DELETE__")
    assert valid(
        schema, {"updateElements": {"lines": [{}, "__DELETE__"], "customer": "__DELETE__"}}
    )
    assert not valid(schema, {"updateElements": {"lines": [{}, "DELETE"]}})
    assert "__DELETE__" in schema["properties"]["updateElements"]["description"]


def test_bad_marker_is_a_configuration_error() -> None:
    """An empty marker cannot stand anywhere: ConfigurationError says what is expected."""
    with pytest.raises(ConfigurationError, match="non-empty string"):
        change_request_schema(Invoice, marker="")


def test_envelope_shape(invoice_schema: dict[str, Any]) -> None:
    """The envelope has exactly the four buckets and reasoning, none required, nothing else."""
    assert invoice_schema["type"] == "object"
    assert set(invoice_schema["properties"]) == {*BUCKETS, "reasoning"}
    assert invoice_schema["additionalProperties"] is False
    assert "required" not in invoice_schema


def test_recursive_model_stays_finite() -> None:
    """A recursive model is expressed through $defs refs (the schema is finite and deep
    requests validate at any depth)."""
    schema = change_request_schema(Node)
    assert len(json.dumps(schema)) < 20_000
    deep: dict[str, Any] = {"name": "leaf"}
    for _ in range(30):
        deep = {"children": [{}, deep]}
    assert valid(schema, {"updateElements": deep})
    deep["children"][1] = 7
    assert not valid(schema, {"updateElements": deep})


def test_list_payload() -> None:
    """For an array payload, updateElements/removeElements are arrays or index maps and
    replaceElements is the whole array with full items."""
    schema = change_request_schema(list[Line])
    assert valid(schema, {"updateElements": [{}, {"qty": 2}, "DELETE"]})
    assert valid(schema, {"updateElements": {"12": {"sku": "Z"}}})
    assert valid(schema, {"removeElements": {"3": "DELETE"}})
    assert valid(schema, {"newElements": [{"sku": "N"}]})
    assert valid(schema, {"newElements": {"1": [{"sku": "N"}], "0": {"tags": ["t"]}}})
    assert not valid(schema, {"newElements": {"1": {"sku": 5}}})
    assert valid(schema, {"replaceElements": [{"sku": "A"}]})
    assert not valid(schema, {"replaceElements": [{"qty": 1}]})
    assert not valid(schema, {"updateElements": {"sku": "A"}})


def test_extra_allow_keeps_free_keys() -> None:
    """A model with extra="allow" keeps free keys in the partials; the default forbids them."""
    loose = change_request_schema(Loose)
    assert valid(loose, {"updateElements": {"anything": [1, 2]}})
    strict_model = change_request_schema(Address)
    assert not valid(strict_model, {"updateElements": {"anything": 1}})


def test_any_json_when_no_type() -> None:
    """Without a payload type every bucket is an object or an array."""
    schema = change_request_schema(None)
    assert valid(schema, {"updateElements": {"a": {"b": [{}, "DELETE"]}}})
    assert valid(schema, {"updateElements": [{}, 1]})
    assert not valid(schema, {"updateElements": "x"})


def test_schema_dict_as_payload_type() -> None:
    """A JSON Schema dict can stand for the payload type (for payloads without a pydantic
    model); pydantic's own schema gives the same result as the class, except in newElements:
    a model's fields are always present in its JSON form, so newElements leaves out the fields
    that cannot hold anything new; a hand-written schema promises no such thing."""
    from_dict = change_request_schema(Invoice.model_json_schema())
    from_class = change_request_schema(Invoice)
    for request_ in [*ACCEPTED, *(r for r, _ in REJECTED)]:
        if "newElements" not in request_:
            assert valid(from_dict, request_) == valid(from_class, request_), request_
    assert valid(from_dict, {"newElements": {"customer": "Ada"}})
    assert not valid(from_class, {"newElements": {"customer": "Ada"}})


def test_too_deep_schema_is_a_configuration_error() -> None:
    """A hand-written schema nested hundreds of levels deep is refused with a
    ConfigurationError (never a RecursionError)."""
    deep: dict[str, Any] = {"type": "integer"}
    for _ in range(MAX_SCHEMA_DEPTH):
        deep = {"type": "object", "properties": {"n": deep}}
    with pytest.raises(ConfigurationError, match="deeper than"):
        change_request_schema(deep)
    shallow: dict[str, Any] = {"type": "integer"}
    for _ in range(40):
        shallow = {"type": "object", "properties": {"n": shallow}}
    assert valid(change_request_schema(shallow), {"updateElements": {"n": {"n": "DELETE"}}})


def test_untranslatable_type_is_a_configuration_error() -> None:
    """A type pydantic cannot describe gives a ConfigurationError naming the type."""

    class Opaque:
        pass

    with pytest.raises(ConfigurationError, match="Opaque"):
        change_request_schema(Opaque)


def test_fresh_dict_each_call(invoice_schema: dict[str, Any]) -> None:
    """Callers may mutate the result (e.g. to add a description) without affecting others."""
    first = change_request_schema(Invoice)
    first["properties"]["updateElements"]["type"] = "broken"
    assert change_request_schema(Invoice) == invoice_schema


# --- strict mode ---------------------------------------------------------------------------------


# --- the vectors: every clean change request validates against a schema of its payload -----------


def _infer(value: Any) -> dict[str, Any]:
    """A JSON Schema describing ``value`` (objects closed, arrays typed by their items)."""
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: _infer(v) for k, v in value.items()}}
    if isinstance(value, list):
        items: dict[str, Any] = {}
        for item in value:
            items = _union(items, _infer(item)) if items else _infer(item)
        return {"type": "array", "items": items}
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int | float):
        return {"type": "number"}
    return {"type": "string"}


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The least schema (of the kinds ``_infer`` makes) admitting what ``a`` or ``b`` admits."""
    if not a:
        return b
    if not b:
        return a
    branches_a = a.get("anyOf", [a])
    branches_b = b.get("anyOf", [b])
    merged: list[dict[str, Any]] = []
    for branch in [*branches_a, *branches_b]:
        same = next((m for m in merged if m["type"] == branch["type"]), None)
        if same is None:
            merged.append(branch)
        elif branch["type"] == "object":
            props = dict(same["properties"])
            for key, sub in branch["properties"].items():
                props[key] = _union(props[key], sub) if key in props else sub
            merged[merged.index(same)] = {"type": "object", "properties": props}
        elif branch["type"] == "array":
            merged[merged.index(same)] = {
                "type": "array",
                "items": _union(same["items"], branch["items"]),
            }
    return merged[0] if len(merged) == 1 else {"anyOf": merged}


def _clean_cases() -> list[Any]:
    cases = []
    for file in sorted(VECTORS.glob("*.json")):
        for case in json.loads(file.read_text()):
            request = case["change_request"]
            text = json.dumps(request)
            if (
                ('"DELETE"' in text and '"__DELETE__"' in text)  # one marker per call
                or case.get("raises")
                or case["expected"] == case["payload"]  # asks nothing (empty containers, nulls)
                or case["name"].startswith("ours/deep/")  # see test_too_deep_schema_...
                or case.get("options")
                or case["warnings"]
                or case["conflicts"]
                or not isinstance(request, dict)
                or not set(request) <= {*BUCKETS, "reasoning"}
                or not isinstance(case["payload"], dict | list)
            ):
                continue
            cases.append(pytest.param(case, id=case["name"]))
    return cases


CLEAN_CASES = _clean_cases()


def test_there_are_clean_vectors() -> None:
    """The vector test below is not vacuous: it runs over many cases."""
    assert len(CLEAN_CASES) >= 100


@pytest.mark.parametrize("case", CLEAN_CASES)
def test_vector_requests_validate(case: dict[str, Any]) -> None:
    """Every change request the merge applies without warnings or conflicts validates against
    the schema derived from its payload's type (inferred from the payload and the result)."""
    payload_schema = _union(_infer(case["payload"]), _infer(case["expected"]))
    text = json.dumps(case["change_request"])
    marker = "__DELETE__" if '"__DELETE__"' in text else "DELETE"
    schema = change_request_schema(payload_schema, marker=marker)
    assert errors(schema, case["change_request"]) == []
