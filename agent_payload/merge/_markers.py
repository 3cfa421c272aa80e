"""DELETE markers (checked, recognised, chosen: MERGE.md section 1) and the payload as the merge
sees it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from itertools import chain, count
from typing import Any, Final

from pydantic import BaseModel

from agent_payload._jsondata import _FAST_DEPTH, json_data, plain_size
from agent_payload.changes import DEFAULT_MARKERS, MARKER, REFERENCE_MARKER
from agent_payload.errors import ConfigurationError
from agent_payload.merge._limits import Limits, _check_limits, _check_root, _checked_copy


def _validate_markers(markers: Iterable[str]) -> frozenset[str]:
    if isinstance(markers, str):
        markers = (markers,)
    try:
        items = list(markers)
    except TypeError as exc:
        raise ConfigurationError(
            f"markers must be an iterable of strings, e.g. {{'DELETE'}}; found {markers!r}."
        ) from exc
    for m in items:
        if not isinstance(m, str) or not m:
            raise ConfigurationError(
                f"Every DELETE marker must be a non-empty string; found {m!r} in markers. "
                "Pass e.g. markers={'DELETE'} (or an empty set for no marker)."
            )
    return frozenset(items)


_FRESH_MARKER: Final = re.compile(r"__DELETE_[0-9a-f]{8}__")


def is_library_marker(value: Any) -> bool:
    """True for a string equal to one of the library's DELETE markers: ``"DELETE"``,
    ``"__DELETE__"`` or a fresh ``"__DELETE_<8 hex>__"`` (whichever is active)."""
    return type(value) is str and (value in DEFAULT_MARKERS or bool(_FRESH_MARKER.fullmatch(value)))


def _marker_inside(value: Any, markers: frozenset[str]) -> tuple[tuple[str | int, ...], str] | None:
    """The first library marker (or active marker) found as a string value inside ``value``,
    with its path relative to ``value``; None when there is none. Iterative, any depth."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        v, at = stack.pop()
        t = type(v)
        if t is str:
            if v in markers or is_library_marker(v):
                return at, v
        elif t is dict:
            stack.extend((child, (*at, k)) for k, child in reversed(v.items()))
        elif t is list:
            stack.extend((child, (*at, i)) for i, child in reversed(list(enumerate(v))))
    return None


def dump_payload(payload: Any, *, limits: Limits | None = None, copy: bool = True) -> Any:
    """The payload as JSON data, as the merge sees it (and prompts should show it): ``None``
    becomes ``{}``, a pydantic model is dumped in JSON mode by alias, dicts and lists are checked
    and copied. ``copy=False`` returns a dict or list that already is plain JSON data within
    ``limits`` itself (the caller must not mutate it)."""
    limits = _check_limits(limits)
    if payload is None:
        return {}
    if isinstance(payload, BaseModel):
        return json_data(payload)
    _check_root(payload)
    if not copy and limits.max_depth >= _FAST_DEPTH:
        size = plain_size(payload)
        if size is not None and size <= limits.max_nodes:
            return payload
    return _checked_copy(payload, limits)


def _strings_holding(payload: Any, part: str) -> set[str]:
    """The string values (not keys) of the payload's data in which ``part`` occurs: each
    container visited once, iteratively, no call per value (asked of every payload)."""
    data = json_data(payload) if isinstance(payload, BaseModel) else payload
    if isinstance(data, str):
        return {data} if part in data else set()
    held: set[str] = set()
    seen: set[int] = set()
    containers = (dict, list)
    stack = [data] if isinstance(data, containers) else []
    while stack:  # only containers are stacked; each visited once
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        for child in v.values() if isinstance(v, dict) else v:
            if isinstance(child, str):
                if part in child:
                    held.add(child)
            elif isinstance(child, containers):
                stack.append(child)
    return held


def payload_holds_string(payload: Any, value: str) -> bool:
    """True when ``value`` occurs as a string value (keys do not count) anywhere in the
    payload's data (a pydantic model dumped first); any depth, and a cycle does not hang it."""
    return value in _strings_holding(payload, value)


def choose_marker(payload: Any, *, avoid: Iterable[str] = ()) -> str:
    """The one DELETE marker to activate for this payload (MERGE.md section 1):
    ``"DELETE"``, else ``"__DELETE__"``, else a fresh, deterministic ``"__DELETE_<hex>__"``, the
    first that the payload's data does not hold as a string.

    ``avoid``: texts the marker must not occur in, typically the task (one that asks for the
    value ``"DELETE"`` must not have that string active as the marker)."""
    held = _strings_holding(payload, "DELETE")
    texts = [text for text in avoid if "DELETE" in text]
    fresh = (f"__DELETE_{hashlib.sha256(str(n).encode()).hexdigest()[:8]}__" for n in count())
    return next(
        candidate
        for candidate in chain((MARKER, REFERENCE_MARKER), fresh)
        if candidate not in held and not any(candidate in text for text in texts)
    )
