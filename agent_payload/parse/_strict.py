"""Decoding at C speed: strict JSON first (no NaN, no overflowing float, no duplicate key), the
grammar reader only where strict JSON fails."""

from __future__ import annotations

import json
import re
from typing import Any, Final

from agent_payload._jsontext import NotJsonData, reject_constant, unique_object
from agent_payload.parse._grammar import (
    _LITERALS,
    _MAX_DIGITS,
    _PY_LITERALS,
    _WORD,
    _bare_word,
    _Damage,
    _Grammar,
)


def _finite_float(text: str) -> float:
    """A float literal; one too large for a float (``1e400``) or too long is not JSON data."""
    if len(text) > _MAX_DIGITS:
        raise NotJsonData(text)
    value = float(text)
    if value - value != 0.0:
        raise NotJsonData(text)
    return value


# Strict JSON that Python reads but that is not JSON data (NaN, 1e400, a duplicate key) raises
# NotJsonData: the grammar reader tells where and why.
_STRICT: Final = json.JSONDecoder(
    parse_constant=reject_constant, parse_float=_finite_float, object_pairs_hook=unique_object
)
_SUSPECT: Final = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


def _suspect(text: str, pos: int = 0, end: int | None = None) -> bool:
    """``_SUSPECT`` occurs in ``text[pos:end]``: a surrogate, written as an escape or as itself
    (an ASCII text with no ``\\u`` has none: a megabyte reply need not be searched)."""
    end = len(text) if end is None else end
    if text.isascii() and text.find("\\u", pos, end) == -1:
        return False
    return _SUSPECT.search(text, pos, end) is not None


# Can strict JSON start here? (A failed strict read raises an exception that costs more than
# the read: hostile prose of broken objects is sent to the grammar reader directly.)
_STRICT_START: Final = re.compile(
    r"""\{[ \t\n\r]*(?:\}|"[^"\\]*(?:\\.[^"\\]*)*"[ \t\n\r]*:[ \t\n\r]*"""
    r"""(?:["{\[\-0-9]|true|false|null))"""
)


def _strict_at(text: str, pos: int) -> tuple[Any, int]:
    """Strict JSON at ``pos`` (C speed): the value and its end, or None and where reading stopped.
    Read in growing windows: a failed ``raw_decode`` counts the lines of everything before it."""
    size = 512
    length = len(text)
    while True:
        end = min(length, pos + size)
        chunk = text[pos:end]
        try:
            value, stop = _STRICT.raw_decode(chunk)
        except json.JSONDecodeError as exc:
            cut = end < length and (
                exc.pos >= len(chunk) - 8 or exc.msg.startswith("Unterminated string")
            )
            if not cut:
                return None, pos + (exc.pos if exc.pos < len(chunk) - 8 else len(chunk))
            size *= 4
        except (ValueError, RecursionError):
            return None, pos + 1
        else:
            return value, pos + stop


def _read_object(text: str, pos: int, context: str | None = None) -> tuple[Any, int, list[str]]:
    """The object at ``pos``, its end and the repairs: strict JSON at C speed, else the grammar
    reader; raises ``_Damage`` (``resume``: past all that strict JSON read as one object)."""
    if _STRICT_START.match(text, pos) is None:
        value, end = None, pos + 1  # not strict JSON from its first member on: no C attempt
        bare = _BARE_FIRST_VALUE.match(text, pos)
        if bare is not None:
            _bare_first_value(text, pos, bare)
    else:
        value, end = _strict_at(text, pos)
    if value is not None and not _suspect(text, pos, end):
        return value, end, []
    grammar = _Grammar(text, context)
    try:
        value, stop = grammar.read_object(pos)
    except _Damage as damage:
        damage.resume = max(damage.pos, end, pos + 1)
        raise
    return value, stop, list(grammar.repairs)


# ``{"key": word`` with a bare word as the first value: the commonest damage of JSON-looking
# prose (``{"name": John}``), a whole grammar read for one error each. The key is a plain
# string (no escape, control character or surrogate: the grammar reads it as it stands), so
# the grammar would reach the word exactly as ``_bare_first_value`` does.
_READ_WORDS: Final = frozenset({*_LITERALS, *_PY_LITERALS})
_BARE_FIRST_VALUE: Final = re.compile(
    r'\{[ \t\n\r]*"[^"\\\x00-\x1f\ud800-\udfff]*"[ \t\n\r]*:[ \t\n\r]*(' + _WORD.pattern + ")"
)


def _bare_first_value(text: str, pos: int, bare: re.Match[str]) -> None:
    """Raise the damage that reading the whole object at ``pos`` would raise first for its bare
    first value ``bare``; return for a word the grammar reads or one at the end of the reply."""
    word = bare.group(1)
    if bare.end() < len(text) and word not in _READ_WORDS:
        damage = _bare_word(word, bare.start(1))
        damage.resume = max(damage.pos, pos + 1)
        raise damage


def _read_whole(text: str, context: str | None = None) -> tuple[Any, list[str]]:
    """``text`` as exactly one object; raises ``_Damage``."""
    try:
        value = _STRICT.decode(text)
    except (ValueError, RecursionError):
        pass
    else:
        if isinstance(value, dict) and not _suspect(text):
            return value, []
    grammar = _Grammar(text, context)
    return grammar.read_whole(), list(grammar.repairs)
