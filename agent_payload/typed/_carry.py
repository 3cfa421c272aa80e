"""Fields carried through the merge (secrets, excluded fields: refused when written, restored
after validation) and where an original path lands in the result (``_PathMap``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pydantic.types import _SecretBase

from agent_payload._jsondata import describe, format_payload_path
from agent_payload.report import Change, PayloadPath
from agent_payload.typed._inspect import _fields, _has, _is_model_class, _json_key

_MISSING: Any = object()


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
