"""The one change-request normaliser (the parser's and the merge's): wrappers unwrapped when
no bucket stands beside them, snake_case bucket names read as camelCase (both spellings with
the same content read as one), any other top-level field unknown (reported with the nearest
valid name, never data). It decides; each layer reacts through its ``Reactions`` (the parser
raises ``ModelReplyError`` for the model, the merge reports a conflict). See MERGE.md.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent_payload._jsondata import json_equal, kind_word
from agent_payload.changes import BUCKETS, WIRE_NAMES

__all__ = [
    "BUCKET_SPELLINGS",
    "CAMEL_TO_SNAKE",
    "FIELDS",
    "KNOWN",
    "SNAKE_TO_CAMEL",
    "WRAPPERS",
    "Normalised",
    "Reactions",
    "UnknownField",
    "absent",
    "near_bucket",
    "normalise_request",
    "reasoning_text",
    "suggest",
]

WRAPPERS: Final[tuple[str, ...]] = (
    "payloadChangeRequest",
    "changeRequest",
    "change_request",
    "payload_change_request",
)  # keys that wrap a whole change request
FIELDS: Final[tuple[str, ...]] = (*BUCKETS, "reasoning")  # in wire (camelCase) spelling
CAMEL_TO_SNAKE: Final[dict[str, str]] = {
    wire: py for py, wire in WIRE_NAMES.items() if wire in BUCKETS
}
SNAKE_TO_CAMEL: Final[dict[str, str]] = {snake: camel for camel, snake in CAMEL_TO_SNAKE.items()}
BUCKET_SPELLINGS: Final[frozenset[str]] = frozenset((*BUCKETS, *CAMEL_TO_SNAKE.values()))
KNOWN: Final[frozenset[str]] = frozenset((*BUCKET_SPELLINGS, "reasoning"))  # wrappers aside


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


_SHAPE_NAMES: Final[tuple[str, ...]] = tuple({_norm(n) for n in (*KNOWN, *WRAPPERS)})
# Each accepted field name, normalised -> its camelCase spelling.
_BY_NORM: Final[dict[str, str]] = {
    _norm(n): (n if n in FIELDS else WIRE_NAMES.get(n, n)) for n in KNOWN
}


# A model repeats its misspellings (a batch job judges the same one for many items): the
# difflib searches are remembered (pure functions of one string).
@functools.lru_cache(maxsize=1024)
def suggest(name: str) -> str | None:
    """The valid top-level field closest to ``name`` (camelCase), if one is close enough."""
    exact = _BY_NORM.get(_norm(name))
    if exact is not None:
        return exact
    close = difflib.get_close_matches(_norm(name), list(_BY_NORM), n=1, cutoff=0.6)
    return _BY_NORM[close[0]] if close else None


@functools.lru_cache(maxsize=1024)
def near_bucket(key: str) -> bool:
    """``key`` is a bucket or wrapper name in some spelling, or a near miss of one (not of
    ``reasoning``): an object holding it is meant as a change request."""
    norm = _norm(key)
    if norm in _SHAPE_NAMES and norm != "reasoning":
        return True
    if len(norm) > 40:
        return False
    close = difflib.get_close_matches(norm, _SHAPE_NAMES, 1, 0.8)
    return bool(close) and close[0] != "reasoning"


def absent(value: object) -> bool:
    """A bucket given as ``null``, ``{}`` or ``[]`` asks for nothing: it counts as absent."""
    return value is None or value == {} or value == []


@dataclass(frozen=True, slots=True)
class UnknownField:
    """A top-level field that is not part of the format (``beside``: the wrapper it stood by)."""

    name: str
    beside: str | None = None

    @property
    def is_wrapper(self) -> bool:
        """A wrapper that could not be unwrapped, because buckets stand beside it."""
        return self.name in WRAPPERS

    @property
    def suggestion(self) -> str | None:
        """The valid field (camelCase) closest to the name, if one is close enough."""
        return None if self.is_wrapper else suggest(self.name)


@dataclass(frozen=True, slots=True)
class Normalised:
    """The top level read: the buckets (camelCase, ``None`` when absent, left out when the two
    spellings differ) and the reasoning as given."""

    buckets: dict[str, Any]
    reasoning: Any


class Reactions:
    """How a layer reacts to what ``normalise_request`` finds (by default: values as given,
    findings ignored)."""

    def text(self, name: str, value: str) -> Any:
        """A string given for the wrapper or bucket ``name`` (the parser decodes JSON text)."""
        return value

    def bucket(self, name: str, value: Any) -> Any:
        """The value of the bucket ``name`` (given in the spelling ``name``), checked."""
        return value

    def not_an_object(self, wrapper: str, value: Any) -> None:
        """The wrapper ``wrapper`` holds no object: none of it is read (its siblings are)."""

    def unknown(self, fields: Sequence[UnknownField]) -> None:
        """Top-level fields that are not part of the format (none of them is data)."""

    def spellings_differ(self, camel: str, snake: str) -> None:
        """Both spellings of one bucket, with different content: neither is applied."""


def normalise_request(
    obj: dict[str, Any], react: Reactions, repairs: list[str] | None = None
) -> Normalised:
    """The top level of the change request ``obj``; what was normalised is appended to
    ``repairs`` in words."""
    notes: list[str] = [] if repairs is None else repairs
    obj, unknown = _unwrap(obj, react, notes)
    unknown += [UnknownField(k) for k in obj if k not in KNOWN]
    if unknown:
        react.unknown(unknown)
    buckets: dict[str, Any] = {}
    for camel in BUCKETS:
        snake = CAMEL_TO_SNAKE[camel]
        has_camel = camel in obj and not absent(obj[camel])
        has_snake = snake in obj and not absent(obj[snake])
        if has_camel and has_snake:
            value = react.bucket(camel, obj[camel])
            other = react.bucket(snake, obj[snake])
            if not json_equal(value, other):
                react.spellings_differ(camel, snake)
                continue
            notes.append(f"read {snake} and {camel}, which hold the same, as one")
        elif has_snake:
            notes.append(f"renamed {snake} to {camel}")
            value = react.bucket(camel, obj[snake])
        else:
            value = react.bucket(camel, obj.get(camel))
        buckets[camel] = value
    return Normalised(buckets, obj.get("reasoning"))


def _unwrap(
    obj: dict[str, Any], react: Reactions, repairs: list[str]
) -> tuple[dict[str, Any], list[UnknownField]]:
    """Unwrap wrappers while the top level has no bucket of its own; the fields beside each
    wrapper (other than reasoning and absent buckets) are unknown."""
    outer_unknown: list[UnknownField] = []
    while True:
        own = [k for k in obj if k in BUCKET_SPELLINGS and not absent(obj[k])]
        wrappers = [k for k in WRAPPERS if k in obj]
        if own or not wrappers:
            return obj, outer_unknown
        name = wrappers[0]
        inner = obj[name]
        if isinstance(inner, str):
            inner = react.text(name, inner)
        if inner is None:
            inner = {}
        if not isinstance(inner, dict):
            react.not_an_object(name, inner)  # reported: the wrapper is not read
            return {k: v for k, v in obj.items() if k != name}, outer_unknown
        repairs.append(f"unwrapped {name}")
        new = dict(inner)
        for key, value in obj.items():
            if key == name:
                continue
            if key == "reasoning":
                if new.get("reasoning") is None:
                    new["reasoning"] = value
            elif key not in BUCKET_SPELLINGS:  # an absent bucket beside the wrapper is nothing
                outer_unknown.append(UnknownField(key, beside=name))
        obj = new


def reasoning_text(value: Any, repairs: list[str] | None = None) -> str | None:
    """``reasoning`` as text: a string as given, a list of strings joined by lines, anything
    else as JSON text (each conversion appended to ``repairs`` in words)."""
    if value is None or isinstance(value, str):
        return value
    notes: list[str] = [] if repairs is None else repairs
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        notes.append("joined reasoning from a list of strings")
        return "\n".join(value)
    notes.append(f"converted reasoning from {kind_word(value)} to text")
    return json.dumps(value, ensure_ascii=False)
