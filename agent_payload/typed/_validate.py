"""The round trip checked up front (``check_round_trip``, ``normalize``) and validation as
part of the change (``validate_merged``, ``diff_changes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from agent_payload._jsondata import PathMap, describe, json_data, json_equal
from agent_payload._paths import format_payload_path
from agent_payload.errors import ConfigurationError, PayloadValidationError
from agent_payload.report import Change, Guard, Issue, MergeReport, PayloadPath
from agent_payload.typed._carry import (
    _Carry,
    _listed,
    _lookup,
    _opaque_fields,
    _put_back,
    _restore_opaque,
)
from agent_payload.typed._inspect import (
    _computed_at,
    _fields,
    _is_model_class,
    _model_classes,
    _static_check,
    _strip_computed,
    _type_name,
    adapter,
    validation_errors,
)

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
    an equal value (``ConfigurationError`` naming the field and why). ``payload``: a model
    instance (its class is the type when ``payload_type`` is None) or JSON data with
    ``payload_type``; untyped payloads pass. A dict payload whose type holds secret or
    excluded fields is refused (its JSON form cannot hold them)."""
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
            raise ConfigurationError(
                f"payload type {name}: a dict payload cannot carry {_listed(carried)} through "
                "its JSON form (a secret is written as '**********', an excluded field not at "
                "all), so the result would lose it. Pass the model instance instead of a dict."
            )
        dumped = ta.dump_python(original, mode="json", by_alias=True)
    try:
        again = ta.validate_python(_strip_computed(payload_type, dumped))
    except ValidationError as exc:
        errors = validation_errors(exc, dumped)
        detail = "; ".join(f"{format_payload_path(p)}: {m}" for p, m in errors[:5])
        raise ConfigurationError(
            f"payload type {name} cannot round-trip: the payload's own JSON form does not "
            f"validate back ({detail}). Every attempt would fail whatever the model writes. "
            "Make the type's JSON form valid input (serializers, aliases, extra='forbid' with "
            "extra keys), or pass a payload_type that reads it."
        ) from exc
    if isinstance(payload, BaseModel):
        for opaque in _opaque_fields(original):
            _put_back(again, opaque, opaque.path[:-1])
    redumped = ta.dump_python(again, mode="json", by_alias=True)
    differs = _first_difference(original, again)
    if differs is None and json_equal(redumped, dumped):
        return
    at: PayloadPath = differs or ()
    raise ConfigurationError(
        f"payload type {name} cannot round-trip at {format_payload_path(at)}: "
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
    """The effective changes that turn ``before`` into ``after`` as the merge reports them
    (deletes at ``before``'s paths, adds and updates at ``after``'s, finest first), so every
    guard sees each value that changes. Arrays are aligned as ``aligned_by`` (the merge's
    changes) changed them, or by position when validation changed a length on its own."""
    paths = PathMap(aligned_by)
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
    """Validate the merged JSON as ``payload_type``; return ``(value, validated_json)`` (the
    value and its JSON form by alias). Raises ``PayloadValidationError`` (payload paths) when
    it does not validate, or when a change would be lost, turned back (a computed field, a
    default) or writes a secret or excluded field. When validation changed anything,
    ``report.changes`` becomes the diff of input and result, and ``guard`` judges the changes
    the merge did not. ``original``: the input (a model carries its hidden fields through)."""
    name = _type_name(payload_type)
    carry = None
    if original is not None and _is_model_class(type(original)):
        carry = _Carry(original, before_json, merged_json, report.changes, name)
        if carry.refusals:  # a request writing a secret or excluded field
            raise _opaque_error(name, carry.refusals, merged_json)
    try:
        value = adapter(payload_type).validate_python(_strip_computed(payload_type, merged_json))
    except ValidationError as exc:
        errors = validation_errors(exc, merged_json)
        raise PayloadValidationError(
            f"The merged payload does not validate as {name}: "
            + "; ".join(f"{format_payload_path(p)}: {m}" for p, m in errors[:10])
            + ". Change the request so the result fits the type's fields and types.",
            errors=errors,
            payload=merged_json,
        ) from exc
    refusals = [] if carry is None else _restore_opaque(value, carry, name)
    if refusals:
        raise _opaque_error(name, refusals, merged_json)
    validated_json = adapter(payload_type).dump_python(value, mode="json", by_alias=True)
    if json_equal(validated_json, merged_json):
        return value, validated_json
    refusals = _lost_changes(payload_type, name, report.changes, validated_json)
    if refusals:
        raise PayloadValidationError(
            f"The merged payload does not fit {name}: "
            + "; ".join(f"{format_payload_path(p)}: {m}" for p, m in refusals[:10]),
            errors=refusals,
            payload=merged_json,
        )
    changes = diff_changes(before_json, validated_json, report.changes)
    if guard is not None:
        _judge_side_effects(name, changes, report, guard)
    report.changes[:] = changes
    return value, validated_json


def _opaque_error(
    name: str, refusals: list[tuple[PayloadPath, str]], merged_json: Any
) -> PayloadValidationError:
    return PayloadValidationError(
        f"The change request writes fields of {name} it cannot change: "
        + "; ".join(m for _, m in refusals[:10]),
        errors=refusals,
        payload=merged_json,
    )


def _lost_changes(
    payload_type: Any, name: str, changes: Sequence[Change], validated_json: Any
) -> list[tuple[PayloadPath, str]]:
    """The merge's changes that validation drops (a key the type ignores), turns back into the
    old value (a computed field, a validator) or makes a no-op (deleting a field to its
    default), each with the correction for the model."""
    refusals: list[tuple[PayloadPath, str]] = []
    paths = PathMap(changes)
    for change in changes:
        at: PayloadPath | None = change.path
        if change.op == "delete" and change.path:  # an original path: where is it now?
            parent = paths.result_path(change.path[:-1])
            at = None if parent is None else (*parent, change.path[-1])
        present, now = (False, None) if at is None else _lookup(validated_json, at)
        where = format_payload_path(change.path)
        if change.op != "delete" and not present:
            why = (
                f"{where} is not a field of {name}: the type drops it, so this change would be "
                "lost. Use the field names of the schema."
            )
        elif not present or not json_equal(now, change.old):
            continue
        elif change.op == "update":
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
            why = f"changing {where} does nothing: {why}."
        elif change.op == "delete" and change.path and isinstance(change.path[-1], str):
            why = (
                f"deleting {where} does nothing: {name} gives it the default {describe(now)}, "
                "which is its current value. Set the value you want instead, or leave the field "
                "out."
            )
        else:
            continue
        refusals.append((change.path, why))
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
            where = format_payload_path(change.path)
            message = (
                f"validation as {name} also {_VERBS[change.op]} {where} (a union switch, a "
                f"validator or a default): {finding.message}"
            )
            issue = Issue(finding.code, where, message, change.path, finding.severity)
            (report.conflicts if finding.severity == "conflict" else report.warnings).append(issue)


_VERBS = {"add": "adds", "update": "changes", "delete": "deletes"}
