"""Private helpers for JSON data: copy-and-validate, equality, paths, previews.

Everything here is iterative (explicit stacks), so data nested 10,000 levels deep or more never
meets Python's recursion limit. The copy is the hot path of the default merge mode: it copies
dicts and lists and checks the JSON types in the same pass, and tracks no path; when it finds
something wrong it raises ``_Bad`` and :func:`locate_problem` walks again, slowly, to say where.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_
from typing import TYPE_CHECKING, Any, Final

from agent_payload._jsontext import JsonNumber
from agent_payload._paths import counted, format_payload_path

if TYPE_CHECKING:
    from agent_payload.report import Change, PayloadPath

__all__ = [
    "JSON_TYPES",
    "Link",
    "PathMap",
    "Problem",
    "container_positions",
    "copy_tree",
    "describe",
    "format_request_path",
    "json_data",
    "json_equal",
    "locate_problem",
    "materialize",
    "not_json_message",
    "plain_size",
]

Link = tuple[Any, str | int] | None
"""A path as a linked list ``(parent_link, key)``; ``None`` is the root. Cheap to extend."""


def json_data(value: Any) -> Any:
    """The one way a payload becomes JSON data: a pydantic model (anything with
    ``model_dump`` that is not a dict or a list) dumped in JSON mode by alias, the form the
    merge accepts and validates back; anything else (``None`` too) as given."""
    if isinstance(value, dict | list) or value is None:
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True)
    return value


class _Bad(Exception):
    """Raised by the fast copy when the data is not JSON or exceeds a limit (no path known)."""


@dataclass(slots=True)
class Problem:
    """What :func:`locate_problem` found: ``kind`` is ``type``, ``key``, ``float``, ``cycle``,
    ``depth`` or ``nodes``; ``path`` the parts leading to it; ``detail`` a short description."""

    kind: str
    path: tuple[str | int, ...]
    detail: str
    value: int = 0


class PathMap:
    """Where a node of the payload before a merge stands after it, from the merge's changes
    (a delete names an original path, an add or update a result path)."""

    def __init__(self, changes: Iterable[Change]) -> None:
        self.deleted: dict[PayloadPath, list[int]] = {}  # original parent -> positions, sorted
        self.added: dict[PayloadPath, list[int]] = {}  # result parent -> positions, sorted
        self.written: list[PayloadPath] = []  # result paths set whole (add / update)
        self.removed: set[PayloadPath] = set()  # original paths deleted
        for change in changes:
            path = change.path
            if path and isinstance(path[-1], int) and change.op != "update":
                table = self.deleted if change.op == "delete" else self.added
                table.setdefault(path[:-1], []).append(path[-1])
            if change.op == "delete":
                self.removed.add(path)
            else:
                self.written.append(path)
        for table in (self.deleted, self.added):
            for parent, positions in table.items():
                table[parent] = sorted(set(positions))

    def result_path(self, original: PayloadPath) -> PayloadPath | None:
        """None when the node (or an ancestor) was deleted. An index shifts down by the
        deletions before it, then up by each item added at or before the place it reached."""
        if any(original[:n] in self.removed for n in range(len(original) + 1)):
            return None
        out: list[str | int] = []
        for n, part in enumerate(original):
            if isinstance(part, int):
                gone = self.deleted.get(original[:n])
                part -= bisect_left(gone, part) if gone else 0
                for added in self.added.get(tuple(out), ()):
                    if added > part:
                        break
                    part += 1
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


def materialize(link: Link) -> tuple[str | int, ...]:
    """The tuple of parts of a linked path."""
    parts: list[str | int] = []
    while link is not None:
        link, key = link
        parts.append(key)
    parts.reverse()
    return tuple(parts)


# --- copy -----------------------------------------------------------------------------------


def _plain_scalar(v: Any) -> Any:
    """A subclass of str/int/float (an enum member) as the plain value, else ``_Bad``; a
    ``JsonNumber`` is kept (it is written back as it was read)."""
    if type(v) is JsonNumber:
        return v
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, int):
        return int.__int__(v)
    if isinstance(v, float):
        f = float.__float__(v)
        if math.isfinite(f):
            return f
    raise _Bad


_CONTAINER_TYPES: Final = frozenset({dict, list})
JSON_TYPES: Final = frozenset({dict, list, str, int, float, bool, type(None)})
"""The exact types of JSON data (a subclass of one of them is not in it)."""


def container_positions(items: Sequence[Any]) -> Iterator[int]:
    """The positions of the dicts and lists (exactly those types) among ``items``, at C speed."""
    return compress(range(len(items)), map(_CONTAINER_TYPES.__contains__, map(type, items)))


_FAST_DEPTH = 100  # levels the recursive fast copy goes down before the explicit stack
_PLAIN_SCALARS = frozenset({str, int, bool, type(None)})


class _Slow(Exception):
    """The fast copy met something unusual (a subclass, a bad value, great depth, a limit)."""


def _scalars_only(items: list[Any]) -> bool:
    """Whether a list of exact JSON types holds no container; ``_Slow`` for anything else (a
    subclass, NaN or an infinity), all at C speed."""
    kinds = set(map(type, items))
    if kinds <= _PLAIN_SCALARS:
        return True
    floats = compress(items, map(is_, map(type, items), repeat(float)))
    if not kinds <= JSON_TYPES or (float in kinds and not all(map(math.isfinite, floats))):
        raise _Slow
    return False


def _fast_copier(max_nodes: int) -> Callable[[Any], Any]:
    """The fast copy: recursive, specialised to plain dicts and lists (C-level ``dict.copy``
    and slicing, then a loop that checks types and copies nested containers); anything
    unusual raises ``_Slow``."""
    budget = max_nodes - 1

    def copy_dict(src: dict[Any, Any], depth: int) -> dict[str, Any]:
        nonlocal budget
        if depth >= _FAST_DEPTH:
            raise _Slow
        budget -= len(src)
        dst = src.copy()
        for k, v in src.items():
            t = type(v)
            if t is str:
                pass
            elif t is dict:
                dst[k] = copy_dict(v, depth + 1)
            elif t is list:
                if set(map(type, v)) <= _PLAIN_SCALARS:
                    budget -= len(v)
                    dst[k] = v[:]
                else:
                    dst[k] = copy_list(v, depth + 1)
            elif not (t is int or t is bool or v is None or (t is float and v - v == 0.0)):
                raise _Slow
            if type(k) is not str:
                raise _Slow
        if budget < 0:
            raise _Slow
        return dst

    def copy_list(src: list[Any], depth: int) -> list[Any]:
        nonlocal budget
        if depth >= _FAST_DEPTH:
            raise _Slow
        budget -= len(src)
        if budget < 0:
            raise _Slow
        if _scalars_only(src):
            return src[:]
        dst = src[:]
        for i in container_positions(src):  # only the containers need a copy of their own
            v = src[i]
            dst[i] = copy_dict(v, depth + 1) if type(v) is dict else copy_list(v, depth + 1)
        return dst

    def copy_root(root: Any) -> Any:
        return copy_dict(root, 1) if type(root) is dict else copy_list(root, 1)

    return copy_root


def plain_size(
    root: Any, max_list: float = math.inf, big: dict[int, int] | None = None, over: int = 0
) -> int | None:
    """The number of values in ``root`` (itself included) when it is JSON data of the exact
    types, at most ``_FAST_DEPTH`` levels deep, with no list longer than ``max_list`` (data
    ``json.dumps`` writes as it is); ``None``: not sure, a slower walk must look. ``big`` is
    filled with the size of each container holding more than ``over`` values, by ``id``."""

    def plain_dict(src: dict[Any, Any], depth: int) -> int:
        if depth >= _FAST_DEPTH:
            raise _Slow
        size = 1 + len(src)
        for k, v in src.items():
            t = type(v)
            if t is str or t is int or t is bool or v is None:
                pass
            elif t is dict:
                size += plain_dict(v, depth + 1) - 1
            elif t is list:
                size += plain_list(v, depth + 1) - 1
            elif not (t is float and v - v == 0.0):
                raise _Slow
            if type(k) is not str:
                raise _Slow
        if big is not None and size > over:
            big[id(src)] = size
        return size

    def plain_list(src: list[Any], depth: int) -> int:
        if depth >= _FAST_DEPTH or len(src) > max_list:
            raise _Slow
        size = 1 + len(src)
        if not _scalars_only(src):
            for i in container_positions(src):
                v = src[i]
                inner = plain_dict(v, depth + 1) if type(v) is dict else plain_list(v, depth + 1)
                size += inner - 1
        if big is not None and size > over:
            big[id(src)] = size
        return size

    t = type(root)
    try:
        if t is dict:
            return plain_dict(root, 1)
        return plain_list(root, 1) if t is list else None
    except (_Slow, RecursionError):
        return None


def copy_tree(root: Any, max_depth: int, max_nodes: int) -> Any:
    """An independent copy of JSON data ``root``, checked on the way: ``_Bad`` (no path) for
    data that is not JSON, nesting deeper than ``max_depth`` (a cycle too) or more than
    ``max_nodes`` values. Subclasses (a str enum) are copied as the plain types. The fast copy
    does the common case; anything unusual starts over with the general copy (any depth)."""
    t = type(root)
    if (t is dict or t is list) and max_depth >= _FAST_DEPTH:
        try:
            return _fast_copier(max_nodes)(root)
        except (_Slow, RecursionError):
            pass
    return _copy_general(root, max_depth, max_nodes)


def _copy_general(root: Any, max_depth: int, max_nodes: int) -> Any:
    """The general copy: an explicit stack, subclasses converted, any depth."""
    if not isinstance(root, dict | list):
        return None if root is None else _plain_scalar(root)
    new_root: Any = {} if isinstance(root, dict) else []
    nodes = 1
    stack: list[tuple[Any, Any, int]] = [(root, new_root, 1)]
    while stack:
        src, dst, depth = stack.pop()
        if depth > max_depth:
            raise _Bad
        nodes += len(src)
        if nodes > max_nodes:
            raise _Bad
        in_dict = type(dst) is dict
        if not in_dict:
            dst.extend(src)  # the places; each is written below
        for k, v in src.items() if in_dict else enumerate(src):
            if in_dict and type(k) is not str:
                if not isinstance(k, str):
                    raise _Bad
                k = str.__str__(k)
            t = type(v)
            if t is str or t is int or v is None or t is bool or (t is float and v - v == 0.0):
                dst[k] = v
            elif isinstance(v, dict | list):
                dst[k] = {} if isinstance(v, dict) else []
                stack.append((v, dst[k], depth + 1))
            else:
                dst[k] = _plain_scalar(v)
    return new_root


def _type_name(v: Any) -> str:
    t = type(v)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def _scalar_problem(v: Any) -> str | None:
    """Why scalar ``v`` is not JSON data (None: it is)."""
    if v is None or isinstance(v, str | bool | int):
        return None
    if isinstance(v, float):
        if math.isfinite(v):
            return None
        return f"the float {v!r}, which JSON cannot represent"
    if isinstance(v, tuple):
        return "a tuple (use a list)"
    if isinstance(v, set | frozenset):
        return f"a {type(v).__name__} (use a list)"
    return f"a value of type {_type_name(v)}"


def not_json_message(problem: Problem, subject: str, where: str) -> str:
    """The one message for data that is not JSON (``problem``: from :func:`locate_problem`,
    not a limit); ``subject`` names the input (``The payload``), ``where`` the path."""
    if problem.kind == "cycle":
        return (
            f"{subject} holds a cycle at {where}: a container that contains itself. JSON data "
            "is a tree; break the cycle first."
        )
    return (
        f"{subject} holds {problem.detail} at {where}; expected JSON data (dict with string "
        "keys, list, str, int, finite float, bool, None). Convert it first, or pass a pydantic "
        "model to have it dumped in JSON mode."
    )


def _items(v: Any) -> Any:
    return iter(v.items()) if isinstance(v, dict) else iter(enumerate(v))


def locate_problem(root: Any, max_depth: int, max_nodes: int) -> Problem | None:
    """Walk ``root`` depth first with its path and say what :func:`copy_tree` refused."""
    if not isinstance(root, dict | list):
        why = _scalar_problem(root)
        return None if why is None else Problem("type", (), why)
    nodes = 1
    path: list[str | int] = []
    on_path = {id(root)}
    stack: list[tuple[Any, int, bool]] = [(_items(root), id(root), isinstance(root, dict))]
    while stack:
        it, _, in_dict = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            _, cid, _ = stack.pop()
            on_path.discard(cid)
            if path:
                path.pop()
            continue
        key, v = nxt
        if in_dict and not isinstance(key, str):
            return Problem(
                "key", (*path, key), f"the key {key!r} of type {_type_name(key)} (keys are strings)"
            )
        nodes += 1
        if nodes > max_nodes:
            return Problem("nodes", (*path, key), "", nodes)
        if isinstance(v, dict | list):
            if id(v) in on_path:
                return Problem("cycle", (*path, key), "a container that contains itself")
            if len(stack) + 1 > max_depth:
                return Problem("depth", (*path, key), "", len(stack) + 1)
            on_path.add(id(v))
            path.append(key)
            stack.append((_items(v), id(v), isinstance(v, dict)))
            continue
        why = _scalar_problem(v)
        if why is not None:
            return Problem("type" if not isinstance(v, float) else "float", (*path, key), why)
    return None


# --- equality -------------------------------------------------------------------------------


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``True`` differs from ``1``, ``1`` equals ``1.0``, key order is ignored."""
    stack = [(a, b)]
    pop = stack.pop
    push = stack.append
    while stack:
        a, b = pop()
        if a is b:
            continue
        if isinstance(a, dict):
            if not isinstance(b, dict) or len(a) != len(b):
                return False
            for k, v in a.items():
                if k not in b:
                    return False
                push((v, b[k]))
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            stack.extend(zip(a, b, strict=True))
        elif isinstance(b, dict | list):
            return False
        elif isinstance(a, bool) or isinstance(b, bool):
            if not (isinstance(a, bool) and isinstance(b, bool) and a == b):
                return False
        elif isinstance(a, str) or isinstance(b, str):
            if not (isinstance(a, str) and isinstance(b, str) and a == b):
                return False
        elif a is None or b is None or a != b:
            return False
    return True


# --- paths ----------------------------------------------------------------------------------


def _key_text(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def format_request_path(parts: Sequence[str | int]) -> str:
    """A change-request path as MERGE.md section 6 writes it, ``""`` for no part:
    ``["updateElements", "items", 3, "a.b"]`` is ``updateElements.items[3]["a.b"]``."""
    return format_payload_path(parts, root="")


def display_path(link: Link, head: int = 8, tail: int = 16) -> str:
    """A payload path for a message, given as a link: whole when short, else its first and
    last parts around "…"."""
    parts = materialize(link)
    if len(parts) <= head + tail + 1:
        return format_payload_path(parts)
    return (
        format_payload_path(parts[:head])
        + f"…({len(parts) - head - tail} more levels)…"
        + format_payload_path(("x", *parts[-tail:]))[1:]
    )


# --- previews -------------------------------------------------------------------------------


def describe(v: Any, limit: int = 60) -> str:
    """A short, shallow description of a value for messages (never walks deep data)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        text = v if len(v) <= limit else v[:limit] + "…"
        return f"the string {_key_text(text)}"
    if isinstance(v, int | float):
        return f"the number {v!r}"
    if isinstance(v, dict):
        if not v:
            return "an empty object {}"
        keys = list(v)[:4]
        shown = ", ".join(_key_text(k if len(k) <= 30 else k[:30] + "…") for k in keys)
        more = ", …" if len(v) > 4 else ""
        return f"an object with {counted(len(v), 'key')} ({shown}{more})"
    if isinstance(v, list):
        if not v:
            return "an empty array []"
        return f"an array of {counted(len(v), 'item')}"
    return f"a value of type {_type_name(v)}"


def kind_word(v: Any) -> str:
    """``an object`` / ``an array`` / ``a primitive``-style noun for messages."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    return "a number"
