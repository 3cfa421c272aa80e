"""Typed payloads: an exact round trip, validation as part of the change, type-aware markers.

A payload with a type (a pydantic model instance, or a dict/list with ``payload_type=``) is
merged as its JSON form (``model_dump(mode="json", by_alias=True)``) and validated back. This
module makes that round trip exact, or refuses the type up front, and makes what validation
does part of the change that is reported and judged:

* :func:`check_round_trip` (called before any request by the agent, ``apply_change_request``,
  the tool handler and sessions): the payload's JSON form must validate back to an equal
  value. Secret and excluded fields are carried through (see the table); anything else that
  does not come back equal raises :class:`~agent_payload.errors.ConfigurationError` naming the
  field and why.
* :func:`validate_merged`: validates the merged JSON, restores the carried fields, then diffs
  the validated result against the input (``diff_payloads``): *those* changes become the
  report's changes (validators' side effects and union switches included), every one not
  already judged by the merge is judged by the guard, a change the type would silently drop or
  turn back into the old value goes back as a correction.
* :func:`type_strings`: every string value the type admits (``enum``, ``Literal``, ``const``
  anywhere in its schema), which the active DELETE marker must never be.
* :func:`clean_loc`: a validation error's location as a payload path (union branch tags such
  as ``pets[0].dog.meows`` removed).

What happens to each pydantic feature
-------------------------------------

====================================================  ==========================================
Feature                                               What happens
====================================================  ==========================================
``SecretStr`` / ``SecretBytes`` / ``Secret[T]``       The model sees ``"**********"``. The real
                                                      value is restored from the input after
                                                      validation (array shifts followed). A
                                                      request that writes the field (or
                                                      replaces its object with another value
                                                      there) is refused: "a secret, set it in
                                                      code". A dict payload with a type holding
                                                      secrets is refused (``ConfigurationError``:
                                                      its JSON form cannot hold the secret).
``Field(exclude=True)``                               Not shown, not in the JSON form; restored
                                                      from the input after validation (also when
                                                      its object is updated or replaced whole). A
                                                      request that names it is refused. Dict
                                                      payloads: refused as for secrets.
``field_serializer`` / ``model_serializer``           Kept when the JSON form validates back to an
                                                      equal value (a ``Decimal`` written as text);
                                                      otherwise ``ConfigurationError`` naming the
                                                      field.
split ``validation_alias`` / ``serialization_alias``  ``ConfigurationError`` naming the field and
                                                      both keys (the dump's key is not read back).
``AliasChoices``                                      Fine when the dumped key is one of the
                                                      choices (or the name, with
                                                      ``validate_by_name``); else
                                                      ``ConfigurationError``.
``validate_by_alias=False``                           Fine for fields without an alias;
                                                      ``ConfigurationError`` for an aliased field
                                                      (its dumped key is the alias).
``alias_generator`` (``to_camel``) / ``alias=``       Fine: dumped and validated by alias.
``@computed_field``                                   Shown (read-only); removed before
                                                      validation, so ``extra="forbid"`` models
                                                      work. An edit of it is a correction: "it is
                                                      computed; change what it derives from".
discriminated / plain unions                          A switch of branch is reported with what it
                                                      drops or adds (``pets[0].vaccinations``
                                                      deleted) and every guard judges that.
                                                      Errors name payload paths (no branch tags).
validators (``field_validator``, ``model_validator``)  Their side effects (a recomputed subtotal,
                                                      a normalised string) are changes in the
                                                      report, judged by the guards, rebuilt by
                                                      ``to_json_patch`` and undo.
defaults                                              DELETE of a field with a default that equals
                                                      its current value is a correction (nothing
                                                      would change); otherwise reported as the
                                                      update to the default.
``extra="ignore"``                                    A key the model writes that the type drops
                                                      is a correction naming it.
====================================================  ==========================================
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic.types import _SecretBase

from agent_payload._jsondata import describe, format_payload_path, json_data, json_equal
from agent_payload.errors import ConfigurationError, PayloadValidationError
from agent_payload.report import Change, Guard, Issue, MergeReport, PayloadPath

__all__ = [
    "check_round_trip",
    "clean_loc",
    "dump_json",
    "normalize",
    "type_strings",
    "validate_merged",
]

_MISSING: Any = object()


# --- the type, inspected -------------------------------------------------------------------


def _type_name(payload_type: Any) -> str:
    return str(getattr(payload_type, "__name__", None) or payload_type)


@functools.lru_cache(maxsize=256)
def _adapter_cached(payload_type: Any) -> TypeAdapter[Any]:
    return TypeAdapter(payload_type)


def adapter(payload_type: Any) -> TypeAdapter[Any]:
    """A (cached when the type is hashable) ``TypeAdapter`` for ``payload_type``."""
    try:
        return _adapter_cached(payload_type)
    except TypeError:  # an unhashable type expression
        return TypeAdapter(payload_type)


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
    if config.get("validate_by_alias", True):
        va = info.validation_alias
        if isinstance(va, str):
            keys.add(va)
        elif va is not None and hasattr(va, "choices"):
            for choice in va.choices:
                if isinstance(choice, str):
                    keys.add(choice)
                elif hasattr(choice, "path") and len(choice.path) == 1:
                    keys.add(str(choice.path[0]))
        elif va is not None and hasattr(va, "path"):
            if len(va.path) == 1:
                keys.add(str(va.path[0]))
        else:
            keys.add(info.alias or name)
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


def _static_check(payload_type: Any) -> None:
    try:
        problems = _static_problems(payload_type)
    except TypeError:  # unhashable type expression
        problems = _static_problems.__wrapped__(payload_type)
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
    if payload_type is None:
        return frozenset()
    try:
        return _type_strings(payload_type)
    except TypeError:
        return _type_strings.__wrapped__(payload_type)


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


# --- opaque fields (secrets, excluded) -----------------------------------------------------


def _is_secret(value: Any) -> bool:
    return isinstance(value, _SecretBase)


@dataclasses.dataclass(frozen=True, slots=True)
class _Opaque:
    path: PayloadPath  # JSON path of the field (its key included)
    owner_class: Any
    name: str  # the attribute name on the owner
    kind: str  # "secret" | "excluded"
    value: Any


def _opaque_fields(root: Any) -> list[_Opaque]:
    """Secret and excluded fields of a typed value, with their JSON paths (iterative)."""
    found: list[_Opaque] = []
    stack: list[tuple[Any, PayloadPath]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if _is_model_class(type(node)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            for name, info in _fields(type(node)).items():
                value = getattr(node, name, _MISSING)
                if value is _MISSING:
                    continue
                key = _json_key(name, info)
                if info.exclude is True:
                    found.append(_Opaque((*path, key), type(node), name, "excluded", value))
                elif _is_secret(value):
                    found.append(_Opaque((*path, key), type(node), name, "secret", value))
                else:
                    stack.append((value, (*path, key)))
        elif isinstance(node, list | tuple):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
        elif isinstance(node, dict):
            stack.extend((v, (*path, k)) for k, v in node.items() if isinstance(k, str))
    return found


def _child(node: Any, part: str | int) -> Any:
    if _is_model_class(type(node)):
        for name, info in _fields(type(node)).items():
            if _json_key(name, info) == part:
                return getattr(node, name, _MISSING)
        return _MISSING
    if isinstance(node, list | tuple) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    if isinstance(node, dict) and part in node:
        return node[part]
    return _MISSING


def _set_field(node: Any, name: str, value: Any) -> None:
    object.__setattr__(node, name, value)
    fields_set = getattr(node, "__pydantic_fields_set__", None)
    if isinstance(fields_set, set):
        fields_set.add(name)


# --- index maps: original paths -> result paths --------------------------------------------


class _PathMap:
    """Maps a path in the input to the same node's path in the merged result, following array
    deletions and additions recorded in a merge report (deletes carry original paths, adds and
    updates result paths)."""

    def __init__(self, changes: Sequence[Change]) -> None:
        self.deleted: dict[PayloadPath, set[int]] = {}
        self.added: dict[PayloadPath, set[int]] = {}
        self.written: list[PayloadPath] = []  # result paths set whole (add / update)
        self.removed: list[PayloadPath] = []  # original paths deleted
        for change in changes:
            if change.path and isinstance(change.path[-1], int):
                table = self.deleted if change.op == "delete" else self.added
                if change.op != "update":
                    table.setdefault(change.path[:-1], set()).add(change.path[-1])
            (self.removed if change.op == "delete" else self.written).append(change.path)

    def result_path(self, original: PayloadPath) -> PayloadPath | None:
        """None when the node (or an ancestor) was deleted."""
        if any(original[: len(p)] == p for p in self.removed):
            return None
        out: list[str | int] = []
        for depth, part in enumerate(original):
            if isinstance(part, int):
                deleted = self.deleted.get(original[:depth], set())
                added = self.added.get(tuple(out), set())
                j = part - sum(1 for d in deleted if d < part)
                index = -1
                while j >= 0:
                    index += 1
                    if index not in added:
                        j -= 1
                out.append(index)
            else:
                out.append(part)
        return tuple(out)

    def touches(self, path: PayloadPath) -> str | None:
        """``"below"`` when a written path is ``path`` or below it, ``"above"`` when one is a
        proper prefix of it (its container set whole), else None."""
        kind = None
        for written in self.written:
            if written[: len(path)] == path:
                return "below"
            if path[: len(written)] == written:
                kind = "above"
        return kind


def _lookup(data: Any, path: PayloadPath) -> tuple[bool, Any]:
    for part in path:
        if _has(data, part):
            data = data[part]
        else:
            return False, None
    return True, data


def _opaque_refusals(
    original: Any,
    before_json: Any,
    merged_json: Any,
    changes: Sequence[Change],
    type_name: str,
) -> list[tuple[PayloadPath, str]]:
    """The requests that write (or delete) a secret or excluded field of ``original``."""
    refusals: list[tuple[PayloadPath, str]] = []
    paths = _PathMap(changes)
    for opaque in _opaque_fields(original):
        target = paths.result_path(opaque.path)
        touch: str | None = "below"
        if target is None:
            if opaque.path not in paths.removed:
                continue  # deleted with its object
            target = opaque.path
        else:
            touch = paths.touches(target)
        where = format_payload_path(target)
        if opaque.kind == "secret":
            had, old_shown = _lookup(before_json, opaque.path)
            has, new_shown = _lookup(merged_json, target)
            if touch is not None and not (had and has and new_shown == old_shown):
                refusals.append(
                    (
                        target,
                        f"{where} is a secret field of {type_name}: its value is hidden from "
                        f"you (shown as {describe(old_shown)}) and cannot be written or deleted "
                        "here. Leave it out of the change (the application sets secrets in "
                        "code).",
                    )
                )
        elif touch == "below":
            refusals.append(
                (
                    target,
                    f"{where} is excluded from {type_name}'s JSON form (exclude=True): it is "
                    "not shown and cannot be changed by a change request. Leave it out of the "
                    "change.",
                )
            )
    return refusals


def _restore_opaque(original: Any, validated: Any, changes: Sequence[Change]) -> None:
    """Put the input's secret and excluded values back into ``validated`` (in place), at the
    paths their objects have after the merge (array shifts followed)."""
    paths = _PathMap(changes)
    for opaque in _opaque_fields(original):
        target = paths.result_path(opaque.path)
        if target is None:
            continue  # deleted with its object
        parent = validated
        for part in target[:-1]:
            parent = _child(parent, part)
            if parent is _MISSING:
                break
        if parent is _MISSING or not isinstance(parent, opaque.owner_class):
            continue  # the object became another type: nothing to carry
        _set_field(parent, opaque.name, opaque.value)


# --- computed fields -----------------------------------------------------------------------


def _strip_computed(payload_type: Any, data: Any) -> Any:
    """``data`` without the keys of computed fields (they are output only: a model with
    ``extra="forbid"`` would refuse them). Copies only the dicts it changes."""
    try:
        has = _has_computed(payload_type)
    except TypeError:
        has = _has_computed.__wrapped__(payload_type)
    if not has:
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


# --- the round trip, checked up front ------------------------------------------------------


def _first_difference(a: Any, b: Any, path: PayloadPath = ()) -> PayloadPath | None:
    """The first path where two typed values differ (fields, elements, keys)."""
    stack: list[tuple[Any, Any, PayloadPath]] = [(a, b, path)]
    while stack:
        x, y, p = stack.pop()
        if _is_model_class(type(x)) and type(x) is type(y):
            for name in _fields(type(x)):
                stack.append((getattr(x, name, None), getattr(y, name, None), (*p, name)))
            if getattr(x, "__pydantic_extra__", None) != getattr(y, "__pydantic_extra__", None):
                return p
            continue
        if isinstance(x, list | tuple) and isinstance(y, list | tuple) and len(x) == len(y):
            stack.extend((u, v, (*p, i)) for i, (u, v) in enumerate(zip(x, y, strict=True)))
            continue
        if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
            stack.extend((x[k], y[k], (*p, k)) for k in x)
            continue
        try:
            same = bool(x == y)
        except Exception:
            same = False
        if not same:
            return p
    return None


def _why(payload_type: Any, path: PayloadPath) -> str:
    """A guess at the feature that breaks the round trip at ``path`` (attribute names)."""
    for cls in _model_classes(payload_type):
        decorators = getattr(cls, "__pydantic_decorators__", None)
        if decorators is None:
            continue
        if path and isinstance(path[-1], str):
            for dec in decorators.field_serializers.values():
                if path[-1] in dec.info.fields:
                    return (
                        f"{cls.__name__}.{path[-1]} has a field_serializer whose JSON form "
                        "does not validate back to the same value"
                    )
        if decorators.model_serializers:
            return f"{cls.__name__} has a model_serializer whose output does not validate back"
    return "its JSON form validates back to a different value"


def check_round_trip(payload: Any, payload_type: Any = None) -> None:
    """Refuse, before any request, a typed payload whose JSON form does not validate back to
    an equal value (:class:`~agent_payload.errors.ConfigurationError` naming the field and
    why). ``payload``: a pydantic model instance (its class is the type when ``payload_type``
    is None) or JSON data with ``payload_type``. Untyped payloads pass. Secret and excluded
    fields of a model instance are carried through (see the module docstring); a dict
    payload whose type holds any is refused (its JSON form cannot hold them)."""
    if payload_type is None:
        if not isinstance(payload, BaseModel):
            return
        payload_type = type(payload)
    if isinstance(payload_type, dict):  # a JSON Schema: nothing to round-trip
        return
    name = _type_name(payload_type)
    _static_check(payload_type)
    ta = adapter(payload_type)
    if isinstance(payload, BaseModel):
        original = payload
        dumped = json_data(payload)
    else:
        dumped = {} if payload is None else payload
        try:
            original = ta.validate_python(_strip_computed(payload_type, dumped))
        except ValidationError:
            return  # reported by the caller's own type check, with the payload's paths
        carried = _opaque_fields(original)
        if carried:
            kinds = {"secret": "a secret", "excluded": "exclude=True"}
            where = ", ".join(
                f"{format_payload_path(o.path)} ({kinds[o.kind]})" for o in carried[:5]
            )
            raise ConfigurationError(
                f"payload type {name}: a dict payload cannot carry {where} through its JSON "
                "form (a secret is written as '**********', an excluded field not at all), so "
                "the result would lose it. Pass the model instance instead of a dict."
            )
        dumped = ta.dump_python(original, mode="json", by_alias=True)
    try:
        again = ta.validate_python(_strip_computed(payload_type, dumped))
    except ValidationError as exc:
        errors = validation_errors(exc, dumped)
        detail = "; ".join(f"{format_payload_path(p) or 'the root'}: {m}" for p, m in errors[:5])
        raise ConfigurationError(
            f"payload type {name} cannot round-trip: the payload's own JSON form does not "
            f"validate back ({detail}). Every attempt would fail whatever the model writes. "
            "Make the type's JSON form valid input (serializers, aliases, extra='forbid' with "
            "extra keys), or pass a payload_type that reads it."
        ) from exc
    if isinstance(payload, BaseModel):
        for opaque in _opaque_fields(original):
            parent = again
            for part in opaque.path[:-1]:
                parent = _child(parent, part)
                if parent is _MISSING:
                    break
            if parent is not _MISSING and isinstance(parent, opaque.owner_class):
                _set_field(parent, opaque.name, opaque.value)
    redumped = ta.dump_python(again, mode="json", by_alias=True)
    differs = _first_difference(original, again)
    if differs is None and json_equal(redumped, dumped):
        return
    at: PayloadPath = differs or ()
    raise ConfigurationError(
        f"payload type {name} cannot round-trip at {format_payload_path(at) or 'the root'}: "
        f"{_why(payload_type, at)}, so the merged payload would silently lose data. Make "
        "the field's JSON form validate back to the same value, exclude it (exclude=True: "
        "carried through untouched), or use a type that round-trips."
    )


def normalize(payload: Any, payload_type: Any) -> Any:
    """JSON data given with a type, as its validated JSON form (by alias): the starting point of
    a typed edit, so that defaults and coercions the input lacked are not reported as changes
    of the model's. Models and untyped payloads come back as they are."""
    if payload_type is None or isinstance(payload, BaseModel) or isinstance(payload_type, dict):
        return payload
    data = {} if payload is None else payload
    ta = adapter(payload_type)
    value = ta.validate_python(_strip_computed(payload_type, data))
    return ta.dump_python(value, mode="json", by_alias=True)


# --- validation as part of the change ------------------------------------------------------


def _loosely_equal(a: Any, b: Any) -> bool:
    """The same scalar in another spelling (``"1"`` and ``1``, ``1.0`` and ``1``)."""
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return str(a).strip().lower() == str(b).strip().lower() or (
        isinstance(a, int | float) and isinstance(b, int | float) and a == b
    )


def diff_changes(before: Any, after: Any, aligned_by: Sequence[Change] = ()) -> list[Change]:
    """The effective changes that turn ``before`` into ``after`` (JSON data), as the merge
    reports them: a ``delete`` at its path in ``before``, an ``add`` or ``update`` at its path in
    ``after``, finest first (object keys and array elements one by one), so every guard sees
    each value that changes. ``to_json_patch`` of the result rebuilds ``after`` exactly.

    Arrays are aligned as the merge changed them (``aligned_by``: the merge's own changes, whose
    element deletions and additions say which original element each result element is), or by
    position when validation changed an array's length on its own. Iterative: any depth."""
    paths = _PathMap(aligned_by)
    out: list[Change] = []
    stack: list[tuple[Any, Any, PayloadPath, PayloadPath]] = [(before, after, (), ())]
    while stack:
        b, a, opath, rpath = stack.pop()
        if json_equal(b, a):
            continue
        todo: list[tuple[Any, Any, PayloadPath, PayloadPath]] = []
        if isinstance(b, dict) and isinstance(a, dict):
            for key, value in b.items():
                if key not in a:
                    out.append(Change("delete", (*opath, key), value, None))
                else:
                    todo.append((value, a[key], (*opath, key), (*rpath, key)))
            for key, value in a.items():
                if key not in b:
                    out.append(Change("add", (*rpath, key), None, value))
        elif isinstance(b, list) and isinstance(a, list):
            deleted = {i for i in paths.deleted.get(opath, set()) if 0 <= i < len(b)}
            added = {j for j in paths.added.get(rpath, set()) if 0 <= j < len(a)}
            kept_b = [i for i in range(len(b)) if i not in deleted]
            kept_a = [j for j in range(len(a)) if j not in added]
            if len(kept_b) != len(kept_a):  # validation changed the length: by position
                n = min(len(b), len(a))
                deleted, added = set(range(n, len(b))), set(range(n, len(a)))
                kept_b, kept_a = list(range(n)), list(range(n))
            out.extend(Change("delete", (*opath, i), b[i], None) for i in sorted(deleted))
            todo.extend(
                (b[i], a[j], (*opath, i), (*rpath, j)) for i, j in zip(kept_b, kept_a, strict=True)
            )
            out.extend(Change("add", (*rpath, j), None, a[j]) for j in sorted(added))
        else:
            out.append(Change("update", rpath, b, a))
        stack.extend(reversed(todo))
    return out


def _key(change: Change) -> tuple[str, PayloadPath]:
    return change.op, change.path


def validate_merged(
    payload_type: Any,
    *,
    original: Any,
    before_json: Any,
    merged_json: Any,
    report: MergeReport,
    guard: Guard | None = None,
) -> tuple[Any, Any]:
    """Validate the merged JSON as ``payload_type`` and make the report describe the result.

    Returns ``(value, validated_json)``: the validated value (a model instance for a model
    type) and its JSON form by alias. Raises
    :class:`~agent_payload.errors.PayloadValidationError` (payload paths, union tags removed)
    when the merged data does not validate, when a change would be lost (a key the type
    ignores), turned back into the old value (a computed field, a default), or writes a secret
    or excluded field. When validation changed anything, ``report.changes`` becomes the diff of
    the input and the validated result; changes not already judged by the merge are judged by
    ``guard`` (``conflict`` findings are added to ``report.conflicts``, the others to
    ``report.warnings``). ``original``: the input value (a model instance carries its secret and
    excluded fields through).
    """
    name = _type_name(payload_type)
    value = _validate(payload_type, name, original, before_json, merged_json, report)
    validated_json = adapter(payload_type).dump_python(value, mode="json", by_alias=True)
    if json_equal(validated_json, merged_json):
        return value, validated_json
    refusals = _lost_changes(payload_type, name, report.changes, validated_json)
    if refusals:
        raise PayloadValidationError(
            f"The merged payload does not fit {name}: "
            + "; ".join(f"{format_payload_path(p) or 'the root'}: {m}" for p, m in refusals[:10]),
            errors=refusals,
            payload=merged_json,
        )
    changes = diff_changes(before_json, validated_json, report.changes)
    if guard is not None:
        _judge_side_effects(name, changes, report, guard)
    report.changes[:] = changes
    return value, validated_json


def _validate(
    payload_type: Any,
    name: str,
    original: Any,
    before_json: Any,
    merged_json: Any,
    report: MergeReport,
) -> Any:
    """The merged JSON validated as the type, secret and excluded fields carried through from
    ``original`` (a request writing them is refused first)."""
    carries = original is not None and _is_model_class(type(original))
    if carries:
        refusals = _opaque_refusals(original, before_json, merged_json, report.changes, name)
        if refusals:
            raise PayloadValidationError(
                f"The change request writes fields of {name} it cannot change: "
                + "; ".join(m for _, m in refusals[:10]),
                errors=refusals,
                payload=merged_json,
            )
    prepared = _strip_computed(payload_type, merged_json)
    try:
        value = adapter(payload_type).validate_python(prepared)
    except ValidationError as exc:
        errors = validation_errors(exc, merged_json)
        raise PayloadValidationError(
            f"The merged payload does not validate as {name}: "
            + "; ".join(f"{format_payload_path(p) or 'the root'}: {m}" for p, m in errors[:10])
            + ". Change the request so the result fits the type's fields and types.",
            errors=errors,
            payload=merged_json,
        ) from exc
    if carries:
        _restore_opaque(original, value, report.changes)
    return value


def _lost_changes(
    payload_type: Any, name: str, changes: Sequence[Change], validated_json: Any
) -> list[tuple[PayloadPath, str]]:
    """The merge's changes that validation drops (a key the type ignores), turns back into the
    old value (a computed field, a validator) or makes a no-op (deleting a field to its
    default), each with the correction for the model."""
    refusals: list[tuple[PayloadPath, str]] = []
    paths = _PathMap(changes)
    for change in changes:
        at: PayloadPath | None = change.path
        if change.op == "delete" and change.path:  # an original path: where is it now?
            parent = paths.result_path(change.path[:-1])
            at = None if parent is None else (*parent, change.path[-1])
        present, now = (False, None) if at is None else _lookup(validated_json, at)
        where = format_payload_path(change.path) or "the root"
        if change.op != "delete" and not present:
            refusals.append(
                (
                    change.path,
                    f"{where} is not a field of {name}: the type drops it, so this change "
                    "would be lost. Use the field names of the schema.",
                )
            )
        elif change.op == "update" and present and json_equal(now, change.old):
            if json_equal(now, change.new) or _loosely_equal(change.new, change.old):
                continue
            if _computed_at(payload_type, change.path):
                why = (
                    "it is a computed field: validation recomputes it from other fields. "
                    "Change the fields it is computed from instead"
                )
            else:
                why = (
                    f"validation turns it back into {describe(now)} (a validator or the "
                    "field's type). Write a value the type keeps, or leave the field out"
                )
            refusals.append((change.path, f"changing {where} does nothing: {why}."))
        elif (
            change.op == "delete"
            and change.path
            and isinstance(change.path[-1], str)
            and present
            and json_equal(now, change.old)
        ):
            refusals.append(
                (
                    change.path,
                    f"deleting {where} does nothing: {name} gives it the default "
                    f"{describe(now)}, which is its current value. Set the value you want "
                    "instead, or leave the field out.",
                )
            )
    return refusals


def _judge_side_effects(
    name: str, changes: Sequence[Change], report: MergeReport, guard: Guard
) -> None:
    """Ask ``guard`` about each change validation made that the merge did not already judge
    (a union switch, a validator, a default); its findings join the report."""
    judged = {_key(c): c for c in report.changes}
    for change in changes:
        seen = judged.get(_key(change))
        if (
            seen is not None
            and json_equal(seen.old, change.old)
            and json_equal(seen.new, change.new)
        ):
            continue
        for finding in guard(change):
            where = format_payload_path(change.path) or "the root"
            message = (
                f"validation as {name} also {_verb(change.op)} {where} (a union switch, a "
                f"validator or a default): {finding.message}"
            )
            issue = Issue(finding.code, where, message, change.path, finding.severity)
            (report.conflicts if finding.severity == "conflict" else report.warnings).append(issue)


def _verb(op: str) -> str:
    return {"add": "adds", "update": "changes", "delete": "deletes"}.get(op, op)
