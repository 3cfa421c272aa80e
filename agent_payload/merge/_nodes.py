"""Value kinds, index keys (MERGE.md section 7) and small words shared by the walk and messages."""

from __future__ import annotations

from typing import Any, Final

from agent_payload._jsondata import Link, materialize

_MISSING: Final[Any] = object()
_SAME: Final[Any] = object()
_OBJ: Final = 1
_ARR: Final = 2
_PRIM: Final = 3
_BAD: Final = 4
_SCALAR_TYPES: Final = frozenset({str, int, float, bool, type(None)})


def _kind(v: Any) -> int:
    t = type(v)
    if t is dict:
        return _OBJ
    if t is list:
        return _ARR
    if t in _SCALAR_TYPES:
        return _PRIM
    if isinstance(v, dict):
        return _OBJ
    if isinstance(v, list):
        return _ARR
    if isinstance(v, str | int | float):
        return _PRIM
    return _BAD


def _is_index(key: str) -> bool:
    """A decimal index: ASCII digits, no sign, no leading zero except ``"0"`` (section 7)."""
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0")


def _is_index_map(v: Any) -> bool:
    return type(v) is dict and bool(v) and all(_is_index(k) for k in v)


def _fits(kind: int, v: Any) -> bool:
    """``v`` may descend into a container of ``kind``: an object into an object, an array or an
    index map into an array."""
    return type(v) is dict if kind == _OBJ else (type(v) is list or _is_index_map(v))


def _index_below(key: str, length: int) -> int | None:
    """The index a decimal key names if it is below ``length`` (no huge int parsing)."""
    if len(key) > len(str(length)):
        return None
    i = int(key)
    return i if i < length else None


def _is_empty_container(v: Any) -> bool:
    return (type(v) is dict or type(v) is list) and not v


def _in_update(rlink: Link) -> bool:
    """True when a change-request link lies in updateElements (its root part)."""
    parts = materialize(rlink)
    return bool(parts) and parts[0] == "updateElements"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _elements(length: int) -> str:
    """``"3 elements (indices 0 to 2)"``: the size of an array, for messages."""
    return f"{_plural(length, 'element')}{f' (indices 0 to {length - 1})' if length else ''}"
