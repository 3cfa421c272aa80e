"""Fields carried through the merge (secrets, excluded fields: refused when written, restored
after validation) and where an original path lands in the result (``PathMap``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Final

from pydantic.types import _SecretBase

from agent_payload._jsondata import PathMap, describe
from agent_payload._paths import format_payload_path, lookup
from agent_payload.report import Change, PayloadPath
from agent_payload.typed._inspect import _fields, _is_model_class, _json_key

_MISSING: Any = object()


# --- opaque fields (secrets, excluded) -----------------------------------------------------


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
                elif isinstance(value, _SecretBase):
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


def _put_back(root: Any, opaque: _Opaque, owner: PayloadPath) -> None:
    """Set ``opaque``'s value on the object at ``owner`` in the typed value ``root`` (nothing
    when the object is gone or became another type)."""
    for part in owner:
        root = _child(root, part)
        if root is _MISSING:
            return
    if isinstance(root, opaque.owner_class):
        object.__setattr__(root, opaque.name, opaque.value)
        fields_set = getattr(root, "__pydantic_fields_set__", None)
        if isinstance(fields_set, set):
            fields_set.add(opaque.name)


_KINDS: Final = {"secret": "a secret", "excluded": "exclude=True"}


def _listed(fields: Sequence[_Opaque]) -> str:
    """The first five of ``fields`` named for a message: ``a.b (a secret), c (exclude=True)``."""
    return ", ".join(f"{format_payload_path(o.path)} ({_KINDS[o.kind]})" for o in fields[:5])


def _lookup(data: Any, path: PayloadPath) -> tuple[bool, Any]:
    found = lookup(data, path, _MISSING)
    return (False, None) if found is _MISSING else (True, found)


_MOVE_FIX: Final = (
    "Secrets and excluded fields are not shown to you, so they cannot be moved or written by "
    "the model: an element holding them moves only unchanged (delete it with the marker and "
    "insert it exactly as shown with newElements, or reorder whole elements exactly as shown "
    "in replaceElements), and its other fields change in place with updateElements. Never "
    "copy a secret as shown (the application sets secrets in code)."
)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _positional(paths: PathMap, target: PayloadPath) -> bool:
    """True when a path written whole (an add or update) covers ``target`` through an array
    position: the element there is new content, not the original by identity."""
    for written in paths.written:
        if target[: len(written)] == written and any(
            isinstance(part, int) for part in target[max(len(written) - 1, 0) :]
        ):
            return True
    return False


class _Carry:
    """Where each hidden value of the input goes in the result (``moves``: the field and its
    owner's result path), and the refusals: an owner kept in place keeps its values (writing
    them is refused); a displaced owner goes to the one new node equal to its JSON form."""

    def __init__(
        self,
        original: Any,
        before_json: Any,
        merged_json: Any,
        changes: Sequence[Change],
        name: str,
    ) -> None:
        self.moves: list[tuple[_Opaque, PayloadPath]] = []
        self.refusals: list[tuple[PayloadPath, str]] = []
        self.paths = PathMap(changes)
        self.before_json, self.merged_json, self.name = before_json, merged_json, name
        owners: dict[PayloadPath, list[_Opaque]] = {}
        for opaque in _opaque_fields(original):
            owners.setdefault(opaque.path[:-1], []).append(opaque)
        displaced: list[tuple[PayloadPath, list[_Opaque], bool]] = []  # (path, fields, deleted)
        for owner, fields in owners.items():
            target = self.paths.result_path(owner)
            if target is None or _positional(self.paths, target):
                displaced.append((owner, fields, target is None))
                continue
            for opaque in fields:
                self._check_in_place(opaque, (*target, opaque.path[-1]))
                self.moves.append((opaque, target))
        if displaced:
            self._match_displaced(displaced)

    def owners(self) -> set[PayloadPath]:
        return {target for _, target in self.moves}

    def _check_in_place(self, opaque: _Opaque, target: PayloadPath) -> None:
        """An owner kept in place: writing or deleting its hidden field is refused."""
        where = format_payload_path(target)
        paths = self.paths
        touch = "below" if paths.result_path(opaque.path) is None else paths.touches(target)
        if opaque.kind == "secret":
            had, old_shown = _lookup(self.before_json, opaque.path)
            has, new_shown = _lookup(self.merged_json, target)
            if touch is None or (had and has and new_shown == old_shown):
                return
            why = (
                f"{where} is a secret field of {self.name}: its value is hidden from you (shown "
                f"as {describe(old_shown)}) and cannot be written or deleted here. Leave it out "
                "of the change (the application sets secrets in code)."
            )
        elif touch == "below":
            why = (
                f"{where} is excluded from {self.name}'s JSON form (exclude=True): it is not "
                "shown and cannot be changed by a change request. Leave it out of the change."
            )
        else:
            return
        self.refusals.append((target, why))

    def _match_displaced(self, displaced: list[tuple[PayloadPath, list[_Opaque], bool]]) -> None:
        """Each displaced owner to the one new node equal to its JSON form, or a refusal."""
        new_nodes: dict[str, list[PayloadPath]] = {}
        for path in _new_objects(self.paths, self.merged_json):
            new_nodes.setdefault(_canonical(_lookup(self.merged_json, path)[1]), []).append(path)
        claims: dict[PayloadPath, int] = {}
        wanted: list[tuple[PayloadPath, list[_Opaque], bool, list[PayloadPath]]] = []
        for owner, fields, deleted in displaced:
            found, shown = _lookup(self.before_json, owner)
            matches = new_nodes.get(_canonical(shown), []) if found else []
            for match in matches:
                claims[match] = claims.get(match, 0) + 1
            wanted.append((owner, fields, deleted, matches))
        for owner, fields, deleted, matches in wanted:
            if len(matches) == 1 and claims[matches[0]] == 1:
                self.moves.extend((opaque, matches[0]) for opaque in fields)
                continue
            if (not matches and deleted) or all(o.value is None for o in fields):
                continue  # deleted with its element and not re-inserted, or nothing to carry
            if not matches:
                why = "comes back changed or not at all (a rewrite)"
            elif len(matches) > 1:
                why = "is inserted more than once (a copy)"
            else:
                why = "cannot be told apart from another element with the same fields"
            names = ", ".join(sorted({str(o.path[-1]) for o in fields}))
            self.refusals.append(
                (
                    owner,
                    f"{format_payload_path(owner)} holds fields of {self.name} you were not shown "
                    f"({names}); this request moves it, but it {why}, so they cannot follow it. "
                    f"{_MOVE_FIX}",
                )
            )


def _new_objects(paths: PathMap, merged_json: Any) -> list[PayloadPath]:
    """Result paths of every object inside content the request wrote whole (adds and
    updates), each once (iterative)."""
    out: dict[PayloadPath, None] = {}  # in the order found, each once
    for written in paths.written:
        found, node = _lookup(merged_json, written)
        if not found:
            continue
        stack: list[tuple[Any, PayloadPath]] = [(node, written)]
        while stack:
            value, at = stack.pop()
            if isinstance(value, dict):
                out[at] = None
                stack.extend((v, (*at, k)) for k, v in value.items())
            elif isinstance(value, list):
                stack.extend((v, (*at, i)) for i, v in enumerate(value))
    return list(out)


def _restore_opaque(validated: Any, carry: _Carry, type_name: str) -> list[tuple[PayloadPath, str]]:
    """Put the input's secret and excluded values where ``carry`` says (in place), and return
    the refusals of secrets the validated result holds that no original brought: the model
    wrote them (the mask included), which is never stored."""
    for opaque, target in carry.moves:
        _put_back(validated, opaque, target)
    owners = carry.owners()
    refusals = []
    for opaque in _opaque_fields(validated):
        if opaque.kind == "secret" and opaque.path[:-1] not in owners and _masked(opaque.value):
            refusals.append(
                (
                    opaque.path,
                    f"{format_payload_path(opaque.path)} is a secret field of {type_name} in "
                    f'content you wrote, holding the mask "{MASK}": that is how a hidden '
                    f"value is shown, never a value to store. {_MOVE_FIX}",
                )
            )
    return refusals


MASK: Final = "**********"
"""How pydantic shows a secret's value in JSON (``SecretStr``, ``SecretBytes``, ``Secret``)."""


def _masked(secret: Any) -> bool:
    """True when a secret holds the mask itself (the model copied what it was shown)."""
    value = secret.get_secret_value()
    return bool(value == MASK or value == MASK.encode())
