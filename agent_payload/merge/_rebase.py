"""Rebasing a late change request over the requests applied since its base (MERGE.md section 9):
a *shadow* tree follows the base's array elements through the applied requests, so each effect is
anchored in base coordinates and every base position maps to the current payload."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent_payload._jsondata import Link, describe, format_request_path, json_equal, materialize
from agent_payload._paths import format_payload_path
from agent_payload.changes import DEFAULT_MARKERS, AgentPayloadChangeRequest
from agent_payload.errors import ConcurrentChangeError, MergeConflictError
from agent_payload.merge._limits import Limits, _check_limits, _check_root
from agent_payload.merge._markers import _validate_markers
from agent_payload.merge._messages import _strict_message
from agent_payload.merge._nodes import _ARR, _OBJ, _SAME, _is_index_map
from agent_payload.merge._request import _normalise_request
from agent_payload.merge._root import _Merger
from agent_payload.report import ChangeOp, Issue, MergeReport

__all__ = ["Applied", "rebase_change_request"]

Path = tuple[str | int, ...]
END: Final = -1  # an insertion anchored at the end of an array (an append)
_UNKNOWN: Final[Any] = object()  # an effect inside content set since: its value is not compared
_GONE: Final[Any] = object()  # the value a deletion leaves


@dataclass(frozen=True, slots=True)
class Applied:
    """One request applied since the base, with the DELETE markers it was merged with."""

    change_request: Any
    markers: frozenset[str] = DEFAULT_MARKERS


@dataclass(frozen=True, slots=True)
class _New:
    """An array item inserted since the base, before base element ``anchor`` (or at END)."""

    anchor: int


class _Shadow:
    """A base node followed through the applied requests: an array's base identities in current
    order (``None``: untouched), the nodes below, and ``opaque`` once its content was set."""

    __slots__ = ("ids", "kids", "opaque", "where")

    def __init__(self) -> None:
        self.ids: list[int | _New] | None = None
        self.kids: dict[str | int, _Shadow] = {}
        self.opaque = False
        self.where: dict[int, int] | None = None

    def kid(self, key: str | int) -> _Shadow:
        node = self.kids.get(key)
        if node is None:
            node = self.kids[key] = _Shadow()
        return node

    def current(self, i: int) -> int | None:
        """Where base element ``i`` stands now (None: deleted since)."""
        if self.ids is None:
            return i
        if self.where is None:
            self.where = {b: n for n, b in enumerate(self.ids) if type(b) is int}
        return self.where.get(i)


@dataclass(frozen=True, slots=True)
class _Effect:
    kind: str  # "set" | "delete" | "insert"
    path: Path  # in base coordinates; an insertion's is its array's
    anchor: int = END  # insertions: the base element they go before
    value: Any = _UNKNOWN  # set: the new value
    old: Any = None
    request_path: str = ""  # the late request's effects: the entry that asked for it


class _Tracer(_Merger):
    """The merge, recording each applied change: (op, original path, request link, Change)."""

    def __init__(self, markers: frozenset[str], limits: Limits, owned: dict[int, Any]) -> None:
        super().__init__(
            markers=markers, share=True, guard=None, limits=limits, report=MergeReport()
        )
        self.layouts = {}
        self.trace: list[tuple[ChangeOp, Path, Link, Any, Any]] = []
        self.owned = owned

    def owned_child(self, value: Any, kind: int) -> Any:
        """Share mode's copy, made once per rebase (no long array copied again per request)."""
        if id(value) in self.owned:
            return value
        child = super().owned_child(value, kind)
        self.owned[id(child)] = child  # held, so its id cannot be reused meanwhile
        return child

    def commit(
        self, op: ChangeOp, plink: Link, old: Any, new: Any, rlink: Link, glink: Link = _SAME
    ) -> bool:
        if not super().commit(op, plink, old, new, rlink, glink):
            return False
        change = self.report.changes[-1]
        self.trace.append(
            (op, materialize(plink if glink is _SAME else glink), rlink, change.old, change.new)
        )
        return True


def _merge(
    state: Any, request: Any, markers: frozenset[str], limits: Limits, owned: dict[int, Any]
) -> tuple[Any, _Tracer, Any]:
    normal = _normalise_request(request, limits)
    tracer = _Tracer(markers, limits, owned)
    tracer.report.reasoning = normal.reasoning
    tracer.report.conflicts.extend(normal.issues)
    root = tracer.owned_child(state, _OBJ if type(state) is dict else _ARR)
    return tracer.merge_root(root, normal.buckets), tracer, normal


class _Rebase:
    def __init__(self, base: Any) -> None:
        self.root = _Shadow()
        self.state = base

    # --- base coordinates -----------------------------------------------------------------

    def locate(self, path: Path) -> tuple[Path, _New | None, bool]:
        """``path`` (current coordinates) in base coordinates: (base path, the inserted item it
        lies in, whether it lies inside content set since); truncated at such an item."""
        node = self.root
        out: list[str | int] = []
        for part in path:
            if node.opaque:
                return tuple(out), None, True
            if type(part) is int and node.ids is not None:
                ident = node.ids[part]
                if isinstance(ident, _New):
                    return tuple(out), ident, False
                part = ident
            out.append(part)
            node = node.kid(part)
        return tuple(out), None, False

    def node(self, base_path: Path) -> _Shadow:
        node = self.root
        for part in base_path:
            node = node.kid(part)
        return node

    def current_path(self, base_path: Path) -> tuple[Path, bool]:
        """A base path now: (path, True), or (its nearest ancestor still there, False)."""
        node = self.root
        out: list[str | int] = []
        data = self.state
        for part in base_path:
            if node.opaque:
                return tuple(out), False
            if type(part) is int:
                j = node.current(part)
                if j is None or type(data) is not list or j >= len(data):
                    return tuple(out), False
                out.append(j)
                data = data[j]
            else:
                if type(data) is not dict or part not in data:
                    return tuple(out), False
                out.append(part)
                data = data[part]
            node = node.kid(part)
        return tuple(out), True

    # --- effects --------------------------------------------------------------------------

    def effects(self, tracer: _Tracer, late: bool) -> list[_Effect]:
        """One merge's effects in base coordinates (an applied one also moves the shadow)."""
        pending: dict[Path, list[int | _New]] = {}
        layouts = tracer.layouts or {}
        for opath, (length, deleted, counts, final) in layouts.items():
            if not deleted and not counts and final == length:
                continue  # no element moved: positions stay (a one-field edit costs nothing)
            bpath, inside, opaque = self.locate(opath)
            if inside is not None or opaque:
                continue
            node = self.node(bpath)
            old: list[int | _New] = node.ids if node.ids is not None else list(range(length))
            gone = set(deleted)
            ids: list[int | _New] = []
            for i in range(length + 1):
                if i in counts:
                    anchor = next((b for b in old[i:] if type(b) is int), END)
                    ids.extend(_New(anchor) for _ in range(counts[i]))
                if i < length and i not in gone:
                    ids.append(old[i])
            ids.extend(_New(END) for _ in range(final - len(ids)))
            pending[bpath] = ids
        out: list[_Effect] = []
        opened: list[Path] = []
        for op, gpath, rlink, old_value, new_value in tracer.trace:
            rpath = format_request_path(materialize(rlink)) if late else ""
            if op == "add" and gpath and type(gpath[-1]) is int:
                bpath, inside, opaque = self.locate(gpath[:-1])
                if inside is None and not opaque:
                    layout = pending.get(bpath)
                    token = layout[gpath[-1]] if layout is not None else _New(END)
                    anchor = token.anchor if isinstance(token, _New) else END
                    out.append(_Effect("insert", bpath, anchor, request_path=rpath))
                    continue
            else:
                bpath, inside, opaque = self.locate(gpath)
            if inside is not None:
                out.append(_Effect("insert", bpath, inside.anchor, request_path=rpath))
            elif opaque:
                out.append(_Effect("set", bpath, request_path=rpath))
            elif op == "delete":
                out.append(_Effect("delete", bpath, END, _GONE, old_value, rpath))
                if bpath and type(bpath[-1]) is str:  # a key: what is added there later is new
                    opened.append(bpath)
            else:
                out.append(_Effect("set", bpath, END, new_value, old_value, rpath))
                opened.append(bpath)
        if not late:
            for bpath, ids in pending.items():
                node = self.node(bpath)
                node.ids, node.where = ids, None
            for bpath in opened:
                node = self.node(bpath)
                node.opaque, node.ids, node.where = True, None, None
                node.kids.clear()
        return out


def _prefix(a: Path, b: Path) -> bool:
    return len(a) <= len(b) and b[: len(a)] == a


def _collide(a: _Effect, b: _Effect) -> bool:
    if a.kind == "insert" and b.kind == "insert":
        return False
    if a.kind == "insert":
        a, b = b, a
    if b.kind == "insert":
        return _prefix(a.path, b.path) or (b.anchor != END and a.path == (*b.path, b.anchor))
    if a.path == b.path:
        if a.kind == "delete" and b.kind == "delete":
            return False
        same = a.kind == b.kind == "set" and a.value is not _UNKNOWN and b.value is not _UNKNOWN
        return not (same and json_equal(a.value, b.value))
    return _prefix(a.path, b.path) or _prefix(b.path, a.path)


def _show(v: Any) -> str:
    text = json.dumps(v, ensure_ascii=False)
    return text if len(text) <= 80 else describe(v)


def _what(e: _Effect) -> str:
    where = format_payload_path(e.path) + " (as you saw it)"
    if e.kind == "insert":
        at = "at its end" if e.anchor == END else f"before its element {e.anchor}"
        return f"inserted items into the array at {where}, {at}"
    if e.kind == "delete":
        return f"deleted {where}, which was {_show(e.old)}"
    if e.value is _UNKNOWN:
        return f"changed {where}"
    if e.old is None:
        return f"set {where} to {_show(e.value)}"
    return f"changed {where} from {_show(e.old)} to {_show(e.value)}"


def rebase_change_request(
    base: Any,
    applied: Sequence[Any],
    change_request: Any,
    *,
    markers: Iterable[str] = DEFAULT_MARKERS,
    limits: Limits | None = None,
) -> AgentPayloadChangeRequest:
    """``change_request``, written against ``base``, rebased over ``applied`` (the requests
    applied to ``base`` since, in order): its positions mapped to the current payload, as
    MERGE.md section 9 says. ``applied`` items are change requests (merged with ``markers``)
    or :class:`Applied` records carrying their own markers.

    Raises :class:`~agent_payload.errors.ConcurrentChangeError` (one ``concurrent_change``
    conflict per colliding entry) when the request collides with what was applied since, and
    :class:`~agent_payload.errors.MergeConflictError` when it conflicts with its own base.
    Pure: no I/O, no input is mutated."""
    limits = _check_limits(limits)
    active = _validate_markers(markers)
    base = {} if base is None else base
    _check_root(base)
    rebase = _Rebase(base)
    theirs: list[_Effect] = []
    state = base
    owned: dict[int, Any] = {}  # the containers this rebase copied (edited in place after)
    for item in applied:
        step = item if isinstance(item, Applied) else Applied(item, active)
        step_markers = _validate_markers(step.markers)
        state, tracer, _ = _merge(state, step.change_request, step_markers, limits, owned)
        theirs.extend(rebase.effects(tracer, late=False))
    rebase.state = state

    _, tracer, normal = _merge(base, change_request, active, limits, {})
    report = tracer.report
    if report.conflicts:
        raise MergeConflictError(
            "The change request conflicts with the payload it was written against (before "
            "any rebase): " + _strict_message(report),
            report=report,
        )
    ours = _Rebase(base).effects(tracer, late=True)  # base coordinates as they are
    collisions: dict[str, tuple[_Effect, _Effect]] = {}
    for mine in ours:
        if mine.request_path in collisions:
            continue
        other = next((t for t in theirs if _collide(mine, t)), None)
        if other is not None:
            collisions[mine.request_path] = (mine, other)
    if collisions:
        raise _concurrent_error(rebase, collisions, normal.reasoning)
    buckets = _Rewrite(rebase, active).request(normal.buckets, base, state)
    wire: dict[str, Any] = {k: v for k, v in buckets.items() if v is not None}
    if normal.reasoning is not None:
        wire["reasoning"] = normal.reasoning
    return AgentPayloadChangeRequest.model_validate(wire)


def _concurrent_error(
    rebase: _Rebase, collisions: Mapping[str, tuple[_Effect, _Effect]], reasoning: str | None
) -> ConcurrentChangeError:
    report = MergeReport(reasoning=reasoning)
    for rpath, (mine, other) in collisions.items():
        inserts_before = mine.kind == "insert" and mine.anchor != END
        path = (*mine.path, mine.anchor) if inserts_before else mine.path
        current, exists = rebase.current_path(path)
        if exists:
            now = f"it is now at {format_payload_path(current)}"
        else:
            now = f"{format_payload_path(path)} (as you saw it) no longer exists"
        message = (
            f"Since the payload you were shown, another edit {_what(other)}; this entry "
            f"touches the same place ({now}). Nothing of your request was applied. Read the "
            "current value and write a new change request against the current payload."
        )
        report.conflicts.append(Issue("concurrent_change", rpath, message, current))
    first = next(iter(report.conflicts))
    more = len(report.conflicts) - 1
    return ConcurrentChangeError(
        f"{first.path}: {first.message}" + (f" (and {more} more)" if more else ""), report=report
    )


class _Rewrite:
    """The late request's buckets with every position mapped to the current payload (entries
    whose element was deleted since by an equal deletion, or that change nothing, dropped)."""

    def __init__(self, rebase: _Rebase, markers: frozenset[str]) -> None:
        self.rebase = rebase
        self.markers = markers

    def marker(self, v: Any) -> bool:
        return type(v) is str and v in self.markers

    def request(self, buckets: Mapping[str, Any], s0: Any, sn: Any) -> dict[str, Any]:
        root = self.rebase.root
        out: dict[str, Any] = {}
        for name in ("updateElements", "removeElements", "newElements", "replaceElements"):
            v = buckets.get(name)
            if name == "newElements" and type(v) in (dict, list):
                v = self.new(v, s0, sn, root)
            elif name != "replaceElements" and type(v) in (dict, list):
                v = self.walk(v, s0, sn, root, remove=name == "removeElements")
            if name in buckets:
                out[name] = v
        return out

    def descends(self, v: Any, c: Any) -> bool:
        return (type(c) is dict and type(v) is dict and bool(v)) or (
            type(c) is list and (type(v) is list or _is_index_map(v))
        )

    def walk(self, v: Any, s0: Any, sn: Any, node: _Shadow, *, remove: bool) -> Any:
        """updateElements (or, ``remove``, removeElements) below ``node``, mapped."""
        if type(s0) is dict and type(v) is dict:
            obj: dict[str, Any] = {}
            for k, item in v.items():
                if k not in s0:
                    if not remove:
                        obj[k] = item  # added literally (no effect elsewhere to map)
                    continue
                if self.marker(item):
                    if k in sn:
                        obj[k] = item
                elif self.descends(item, s0[k]):
                    if k in (sn if type(sn) is dict else {}):
                        sub = self.walk(item, s0[k], sn[k], node.kid(k), remove=remove)
                        if sub is not None:
                            obj[k] = sub
                elif not remove:
                    obj[k] = item
            return obj or None
        if type(s0) is list and (type(v) is list or _is_index_map(v)):
            positional = type(v) is list
            entries = (
                [(i, item) for i, item in enumerate(v[: len(s0)])]
                if positional
                else [(int(k), item) for k, item in v.items() if int(k) < len(s0)]
            )
            mapped: dict[int, Any] = {}
            for i, item in entries:
                if type(item) is dict and not item:
                    continue
                j = node.current(i)
                if j is None or type(sn) is not list or j >= len(sn):
                    continue
                if self.marker(item):
                    mapped[j] = item
                elif self.descends(item, s0[i]):
                    sub = self.walk(item, s0[i], sn[j], node.kid(i), remove=remove)
                    if sub is not None:
                        mapped[j] = sub
                elif not remove:
                    mapped[j] = item
            appended = v[len(s0) :] if positional and not remove else []
            if not positional:
                return {str(j): mapped[j] for j in sorted(mapped)} or None
            if not mapped and not appended:
                return None
            size = max(mapped) + 1 if mapped else 0
            if appended:
                size = len(sn) if type(sn) is list else size
            return [mapped.get(j, {}) for j in range(size)] + list(appended)
        return v

    def new(self, n: Any, s0: Any, sn: Any, node: _Shadow) -> Any:
        if type(s0) is dict and type(n) is dict:
            obj: dict[str, Any] = {}
            for k, item in n.items():
                c = s0.get(k, _GONE)
                descend = (type(c) is dict and type(item) is dict) or (
                    type(c) is list and _is_index_map(item)
                )
                if not descend:
                    obj[k] = item
                elif type(sn) is dict and k in sn:
                    sub = self.new(item, c, sn[k], node.kid(k))
                    if sub is not None:
                        obj[k] = sub
            return obj or None
        if type(s0) is list and _is_index_map(n):
            mapped: dict[int, Any] = {}
            size = len(sn) if type(sn) is list else 0
            for key, item in n.items():
                i = int(key)
                if type(item) is list:
                    j = size if i == len(s0) else node.current(i)
                    if j is not None:
                        mapped[j] = item
                elif i < len(s0):
                    j = node.current(i)
                    if j is not None and j < size:
                        sub = self.new(item, s0[i], sn[j], node.kid(i))
                        if sub is not None:
                            mapped[j] = sub
            return {str(j): mapped[j] for j in sorted(mapped)} or None
        return n
