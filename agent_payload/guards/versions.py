"""Optimistic concurrency: a payload's version (``payload_version``: the SHA-256 of its
canonical JSON, keys sorted, no white space, UTF-8; ``1`` and ``1.0`` differ) and
``check_version``, which ``agent_payload.store`` builds on (``apply_if_version``,
``VersionedStore``).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from json.encoder import encode_basestring
from typing import Any

from agent_payload._jsondata import Link, json_data, materialize
from agent_payload.errors import ConfigurationError, InvalidPayloadError, StalePayloadError
from agent_payload.guards._common import format_path

__all__ = ["check_version", "payload_version"]

_VALUE, _TEXT, _CLOSE = 0, 1, 2
# The walk writes values as ``json.dumps(value, ensure_ascii=False)`` does, through the
# functions it ends in (``json.dumps`` builds an encoder per call: too slow per node).
_WORDS = {None: "null", True: "true", False: "false"}


def payload_version(payload: Any) -> str:
    """The SHA-256 hex digest of ``payload``'s canonical JSON (any depth; keys that are
    numbers, bools or null written as ``json.dumps`` writes them). Raises
    ``InvalidPayloadError`` (with the path) for what it cannot hash: data that is not JSON, a
    cycle, an integer longer than Python writes as text, a model that cannot be dumped."""
    data = _dump(payload)
    try:
        text = json.dumps(
            data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except RecursionError:
        return _iterative_version(data)
    except (TypeError, ValueError) as exc:
        _iterative_version(data)  # raises InvalidPayloadError naming the path
        raise AssertionError(f"the walk found nothing json.dumps refused: {exc}") from exc
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _key_text(key: Any, linked: Link) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int) or _finite(key):
        return json.dumps(key)
    path = materialize(linked)
    raise InvalidPayloadError(
        f"payload key {key!r} at {format_path(path)} is a {type(key).__name__}; JSON keys "
        "are strings: convert it or pass a pydantic model",
        path=path,
    )


def _iterative_version(data: Any) -> str:
    """The same digest as the fast path, written without recursion (for any depth)."""
    pieces: list[str] = []  # the canonical text, as the fast path holds it whole
    # A value to write, a text to emit, or the end of a container (which leaves ``open_ids``:
    # a container met again while open is a cycle).
    stack: list[tuple[int, Any, Link]] = [(_VALUE, data, None)]
    open_ids: set[int] = set()
    while stack:
        what, item, linked = stack.pop()
        if what == _TEXT:
            text: str = item
        elif what == _CLOSE:
            container, text = item
            open_ids.discard(container)
        elif isinstance(item, dict | list) and id(item) in open_ids:
            path = materialize(linked)
            raise InvalidPayloadError(
                f"the payload contains itself at {format_path(path)} (a cycle); JSON data is a "
                "tree: copy the shared part instead of linking it",
                path=path,
            )
        elif isinstance(item, dict):
            open_ids.add(id(item))
            stack.append((_CLOSE, (id(item), "}"), linked))
            try:
                keys = sorted(item)
            except TypeError as exc:
                path = materialize(linked)
                raise InvalidPayloadError(
                    f"the object at {format_path(path)} mixes key types that cannot be "
                    "sorted; JSON keys are strings: convert them",
                    path=path,
                ) from exc
            last = len(keys) - 1
            for n, key in enumerate(reversed(keys)):
                stack.append((_VALUE, item[key], (linked, key)))
                prefix = encode_basestring(_key_text(key, linked)) + ":"
                if n != last:
                    prefix = "," + prefix
                stack.append((_TEXT, prefix, linked))
            text = "{"
        elif isinstance(item, list):
            open_ids.add(id(item))
            stack.append((_CLOSE, (id(item), "]"), linked))
            for n in range(len(item) - 1, -1, -1):
                stack.append((_VALUE, item[n], (linked, n)))
                if n:
                    stack.append((_TEXT, ",", linked))
            text = "["
        else:
            text = _scalar(item, linked)
        pieces.append(text)
    return hashlib.sha256("".join(pieces).encode("utf-8", "surrogatepass")).hexdigest()


def _scalar(value: Any, linked: Link) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return int.__repr__(value)
        except ValueError as exc:  # more digits than int -> str converts
            path = materialize(linked)
            raise InvalidPayloadError(
                f"payload value at {format_path(path)} is an integer of about "
                f"{int(value.bit_length() * 0.30103) + 1:,} digits, more than Python writes as "
                f"text (sys.get_int_max_str_digits() is {sys.get_int_max_str_digits()}), so it "
                "cannot be hashed or sent as JSON; store it as a string",
                path=path,
            ) from exc
    if isinstance(value, str):
        return encode_basestring(value)
    if value is None or isinstance(value, bool):
        return _WORDS[value]
    if _finite(value):
        return float.__repr__(value)
    path = materialize(linked)
    if isinstance(value, float):
        raise InvalidPayloadError(
            f"payload value {value!r} at {format_path(path)} is not a JSON number; "
            "replace it with null or a string",
            path=path,
        )
    raise InvalidPayloadError(
        f"payload value at {format_path(path)} is a {type(value).__name__}, which is not JSON "
        "data; convert it (or pass a pydantic model, which is dumped in JSON mode)",
        path=path,
    )


def _finite(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def _dump(payload: Any) -> Any:
    """``json_data``, with a model that cannot be dumped as ``InvalidPayloadError``."""
    try:
        return json_data(payload)
    except Exception as exc:  # pydantic's serialisation errors, a failing serializer
        raise InvalidPayloadError(
            f"the payload ({type(payload).__name__}) cannot be dumped to JSON for its "
            f"version: {exc}"
        ) from exc


def check_version(payload: Any, expected: str) -> str:
    """Raise ``StalePayloadError`` unless ``payload`` is at version ``expected``; return it."""
    check_expected(expected, "check_version(expected=...)")
    actual = payload_version(payload)
    if actual != expected:
        raise StalePayloadError(
            f"the payload is not the version it was read at: expected version "
            f"{expected[:12]}..., found {actual[:12]}... (someone changed it since); nothing "
            "was applied. Reload the payload and run the task again on the current version.",
            expected=expected,
            actual=actual,
        )
    return actual


def check_expected(expected: object, where: str) -> None:
    """A version is the hex string ``payload_version`` returned; anything else is misuse."""
    if not isinstance(expected, str):
        raise ConfigurationError(
            f"{where}: expected the version string that payload_version() or "
            f"VersionedStore.get() returned, found {expected!r}"
        )
