"""RFC 6902 export: ``to_json_patch`` turns a merge's effective changes into a JSON Patch,
and ``json_pointer`` writes a payload path as an RFC 6901 pointer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent_payload.diff._data import _dumps
from agent_payload.errors import ConfigurationError
from agent_payload.report import Change, MergeReport, MergeResult


def json_pointer(path: Sequence[str | int]) -> str:
    """The RFC 6901 JSON Pointer of a payload path (``~`` and ``/`` escaped)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _changes_of(source: MergeResult[Any] | MergeReport | Sequence[Change]) -> list[Change]:
    if isinstance(source, MergeResult):
        return list(source.report.changes)
    if isinstance(source, MergeReport):
        return list(source.changes)
    if isinstance(source, Sequence) and not isinstance(source, str | bytes):
        changes = list(source)
        if all(isinstance(ch, Change) for ch in changes):
            return changes
    raise ConfigurationError(
        "to_json_patch(changes=...): expected a MergeResult, a MergeReport or a list of "
        f"Change (the report's changes), found {type(source).__name__}"
    )


def _path_key(path: Sequence[str | int]) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in path)


def to_json_patch(
    before: Any, changes: MergeResult[Any] | MergeReport | Sequence[Change], *, test: bool = False
) -> list[dict[str, Any]]:
    """An RFC 6902 JSON Patch doing exactly what a merge did: ``jsonpatch.apply_patch(before,
    patch)`` equals the merged payload. ``changes``: the merge's result, its report or the
    report's ``changes`` (``before`` is not read: it names the patch's other end). Removes come
    first (deepest and highest index first), then replaces and adds in ascending path order;
    ``test=True`` puts a ``test`` of the old value before each remove and replace."""
    del before  # the report's paths and values are all that is needed
    changes = _changes_of(changes)
    ops: list[dict[str, Any]] = []
    deletes = [ch for ch in changes if ch.op == "delete"]
    writes = [ch for ch in changes if ch.op != "delete"]
    deletes.sort(key=lambda ch: _path_key(ch.path), reverse=True)
    writes.sort(key=lambda ch: _path_key(ch.path))
    for ch in deletes + writes:
        pointer = json_pointer(ch.path)
        if test and ch.op != "add":
            ops.append({"op": "test", "path": pointer, "value": _copy(ch.old)})
        if ch.op == "delete":
            ops.append({"op": "remove", "path": pointer})
        else:
            op = "replace" if ch.op == "update" else "add"
            ops.append({"op": op, "path": pointer, "value": _copy(ch.new)})
    return ops


def _copy(value: Any) -> Any:
    return json.loads(_dumps(value))
