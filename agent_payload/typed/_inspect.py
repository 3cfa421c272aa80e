"""The payload type inspected: its adapter, model classes and fields, the strings it admits,
its computed fields, and validation error locations as payload paths."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from agent_payload._jsondata import json_data
from agent_payload.errors import ConfigurationError
from agent_payload.report import PayloadPath

_T = TypeVar("_T")

# --- the type, inspected -------------------------------------------------------------------


def _type_name(payload_type: Any) -> str:
    return str(getattr(payload_type, "__name__", None) or payload_type)


@functools.lru_cache(maxsize=256)
def _adapter(payload_type: Any) -> TypeAdapter[Any]:
    return TypeAdapter(payload_type)


def adapter(payload_type: Any) -> TypeAdapter[Any]:
    """A (cached when the type is hashable) ``TypeAdapter`` for ``payload_type``."""
    return _cached(_adapter, payload_type)


def dump_json(value: Any, payload_type: Any = None) -> Any:
    """The JSON form of a typed value: JSON mode, by alias (what the merge and the model see)."""
    if isinstance(value, BaseModel):
        return json_data(value)
    if payload_type is None:
        return value
    return adapter(payload_type).dump_python(value, mode="json", by_alias=True)


def _json_key(name: str, info: FieldInfo) -> str:
    """The key a field has in the JSON form (``by_alias=True``)."""
    return info.serialization_alias or info.alias or name


def _read_keys(cls: Any, name: str, info: FieldInfo) -> set[str]:
    """The keys validation reads a field from."""
    config: Mapping[str, Any] = getattr(cls, "model_config", None) or getattr(
        cls, "__pydantic_config__", {}
    )
    keys: set[str] = set()
    va = info.validation_alias
    by_alias = config.get("validate_by_alias", True)
    if by_alias and not (isinstance(va, str) or hasattr(va, "choices") or hasattr(va, "path")):
        keys.add(info.alias or name)
    elif by_alias:  # a name, AliasChoices or AliasPath: keys of one part only
        for choice in getattr(va, "choices", [va]):
            if isinstance(choice, str):
                keys.add(choice)
            elif len(getattr(choice, "path", ())) == 1:
                keys.add(str(choice.path[0]))
    if config.get("validate_by_name", False) or config.get("populate_by_name", False):
        keys.add(name)
    return keys


def _fields(cls: Any) -> dict[str, FieldInfo]:
    fields = getattr(cls, "__pydantic_fields__", None)
    return dict(fields) if isinstance(fields, dict) else {}


def _computed_keys(cls: Any) -> set[str]:
    computed = getattr(cls, "__pydantic_computed_fields__", None) or {}
    return {info.alias or name for name, info in computed.items()}


def _is_model_class(tp: Any) -> bool:
    return isinstance(tp, type) and (
        issubclass(tp, BaseModel) or hasattr(tp, "__pydantic_fields__")
    )


def _model_classes(payload_type: Any) -> list[Any]:
    """Every pydantic model (and pydantic dataclass) class reachable from the type."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = [payload_type]
    while stack:
        tp = stack.pop()
        if id(tp) in seen:
            continue
        seen.add(id(tp))
        if _is_model_class(tp):
            found.append(tp)
            stack.extend(info.annotation for info in _fields(tp).values())
            continue
        stack.extend(a for a in typing.get_args(tp) if not isinstance(a, str | int | float))
        if typing.is_typeddict(tp):
            stack.extend(typing.get_type_hints(tp, include_extras=True).values())
        elif dataclasses.is_dataclass(tp) and isinstance(tp, type):
            stack.extend(f.type for f in dataclasses.fields(tp) if not isinstance(f.type, str))
    return found


@functools.lru_cache(maxsize=256)
def _static_problems(payload_type: Any) -> tuple[str, ...]:
    """Fields whose dumped key validation does not read back (aliases)."""
    problems: list[str] = []
    for cls in _model_classes(payload_type):
        for name, info in _fields(cls).items():
            if info.exclude is True:
                continue
            key = _json_key(name, info)
            read = _read_keys(cls, name, info)
            if key not in read:
                problems.append(
                    f"{cls.__name__}.{name}: its JSON form writes the key {key!r} "
                    f"(serialization alias) but validation reads it only from "
                    f"{sorted(read) or 'no key'} (validation_alias / AliasChoices / "
                    "validate_by_alias=False), so an edited payload could not validate back. "
                    "Give the field one alias for both (alias=...), or let validation read "
                    f"{key!r} (AliasChoices({key!r}, ...) or validate_by_name=True)"
                )
    return tuple(problems)


def _cached(function: functools._lru_cache_wrapper[_T], payload_type: Any) -> _T:
    """``function(payload_type)`` through its ``lru_cache`` when the type is hashable."""
    try:
        return function(payload_type)
    except TypeError:  # an unhashable type expression
        return function.__wrapped__(payload_type)


def _static_check(payload_type: Any) -> None:
    problems = _cached(_static_problems, payload_type)
    if problems:
        raise ConfigurationError(
            f"payload type {_type_name(payload_type)} cannot round-trip through JSON: "
            + "; ".join(problems)
            + "."
        )


@functools.lru_cache(maxsize=256)
def _has_computed(payload_type: Any) -> bool:
    return any(_computed_keys(cls) for cls in _model_classes(payload_type))


def type_strings(payload_type: Any) -> frozenset[str]:
    """Every string value the type admits explicitly: ``enum`` and ``const`` values anywhere
    in its JSON Schema (``Literal``, ``Enum``), validation and serialization forms. The DELETE
    marker must be none of these. A type without a schema gives the empty set."""
    return frozenset() if payload_type is None else _cached(_type_strings, payload_type)


@functools.lru_cache(maxsize=256)
def _type_strings(payload_type: Any) -> frozenset[str]:
    out: set[str] = set()
    schemas: list[Any] = []
    if isinstance(payload_type, dict):
        schemas.append(payload_type)
    else:
        for mode in ("validation", "serialization"):
            try:
                schemas.append(adapter(payload_type).json_schema(mode=mode))
            except Exception:  # a type pydantic cannot describe: nothing to avoid
                continue
    stack = schemas
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "enum" and isinstance(value, list):
                    out.update(v for v in value if isinstance(v, str))
                elif key == "const" and isinstance(value, str):
                    out.add(value)
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return frozenset(out)


# --- validation error locations ------------------------------------------------------------


def _has(node: Any, part: Any) -> bool:
    """Whether ``part`` names a key of the dict or an index of the list ``node``."""
    if isinstance(node, dict):
        return isinstance(part, str) and part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def clean_loc(loc: Sequence[str | int], data: Any) -> tuple[str | int, ...]:
    """A pydantic error location as a payload path: union branch tags (``dog`` in
    ``pets.0.dog.meows``, ``Cat``, ``int``, ``function-after[...]``) are dropped by walking
    ``data``, the value that was validated. A key that the data lacks is kept when it is the
    last part (a missing field)."""
    out: list[str | int] = []
    node = data
    last = len(loc) - 1
    for i, part in enumerate(loc):
        if _has(node, part):
            out.append(part)
            node = node[part]
        elif isinstance(part, str) and (i < last or not isinstance(node, dict)):
            continue  # a union branch tag, not a part of the payload
        else:
            out.append(part)
            node = None
    return tuple(out)


def validation_errors(exc: ValidationError, data: Any) -> list[tuple[PayloadPath, str]]:
    """``(payload path, message)`` per error, paths cleaned, duplicates dropped."""
    out: list[tuple[PayloadPath, str]] = []
    for err in exc.errors(include_url=False):
        item = (clean_loc(tuple(err["loc"]), data), str(err["msg"]))
        if item not in out:
            out.append(item)
    return out


# --- computed fields -----------------------------------------------------------------------


def _strip_computed(payload_type: Any, data: Any) -> Any:
    """``data`` without the keys of computed fields (they are output only: a model with
    ``extra="forbid"`` would refuse them). Copies only the dicts it changes."""
    if not _cached(_has_computed, payload_type):
        return data
    return _strip(payload_type, data, 0)


def _strip(tp: Any, data: Any, depth: int) -> Any:
    if depth > 200:
        return data
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _strip(typing.get_args(tp)[0], data, depth + 1)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            data = _strip(arg, data, depth + 1)
        return data
    if _is_model_class(tp) and isinstance(data, dict):
        drop = _computed_keys(tp) - {_json_key(n, i) for n, i in _fields(tp).items()}
        out = {k: v for k, v in data.items() if k not in drop}
        for name, info in _fields(tp).items():
            key = _json_key(name, info)
            if key in out:
                out[key] = _strip(info.annotation, out[key], depth + 1)
        return out
    if origin in (list, tuple, set, frozenset, Sequence) and isinstance(data, list):
        args = tuple(a for a in typing.get_args(tp) if a is not Ellipsis)
        if not args:
            return data
        return [_strip(args[min(i, len(args) - 1)], v, depth + 1) for i, v in enumerate(data)]
    if origin in (dict, Mapping) and isinstance(data, dict):
        args = typing.get_args(tp)
        if len(args) == 2:
            return {k: _strip(args[1], v, depth + 1) for k, v in data.items()}
    return data


def _computed_at(payload_type: Any, path: PayloadPath) -> bool:
    """Whether ``path``'s last key names a computed field of any model of the type."""
    if not path or not isinstance(path[-1], str):
        return False
    try:
        classes = _model_classes(payload_type)
    except Exception:
        return False
    return any(path[-1] in _computed_keys(cls) for cls in classes)
