"""Optimistic concurrency: a payload's version and applying a change only to that version.

``payload_version(payload)`` is the SHA-256 (hex) of the payload's canonical JSON: keys sorted,
no white space, non-ASCII characters as they are (UTF-8), pydantic models dumped in JSON mode.
Two payloads that serialise the same have the same version, whatever their key order;
``1`` and ``1.0`` serialise differently and so have different versions.

A run remembers the version of the payload it started from; before its change request is
applied to the *stored* payload, ``check_version(stored, expected)`` raises
``StalePayloadError`` if someone else changed it meanwhile, so no edit is overwritten.
``agent_payload.store`` builds on these: ``apply_if_version`` does both in one call;
``VersionedStore`` keeps a payload in memory and makes the check and the write one atomic step.
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

_CHUNK = 1 << 16
_VALUE, _TEXT, _CLOSE = 0, 1, 2
# The walk writes each value as ``json.dumps(value, ensure_ascii=False)`` writes it, through
# the functions json.dumps itself ends in (a call of json.dumps builds an encoder each time,
# the most of what a node of a deep payload cost): ``encode_basestring`` for strings,
# ``int.__repr__`` and ``float.__repr__`` for numbers.
_WORDS = {None: "null", True: "true", False: "false"}


def payload_version(payload: Any) -> str:
    """The SHA-256 hex digest of ``payload``'s canonical JSON (see the module docstring).

    Any depth works. Raises ``InvalidPayloadError`` (with the path) for data it cannot hash: not
    JSON (a set, a datetime, NaN, a key that is not a string, number, bool or null), a cycle, an
    integer longer than Python writes as text (``sys.get_int_max_str_digits()``, 4,300 digits by
    default), a pydantic model that cannot be dumped. Keys that are numbers, bools or null are
    written as ``json.dumps`` writes them."""
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
    if (
        key is None
        or isinstance(key, bool | int)
        or (isinstance(key, float) and math.isfinite(key))
    ):
        return json.dumps(key)
    path = materialize(linked)
    raise InvalidPayloadError(
        f"payload key {key!r} at {format_path(path)} is a {type(key).__name__}; JSON keys "
        "are strings: convert it or pass a pydantic model",
        path=path,
    )


def _iterative_version(data: Any) -> str:
    """The same digest as the fast path, written without recursion (for any depth)."""
    digest = hashlib.sha256()
    buffer: list[str] = []
    size = 0
    # The stack holds a value to write (with its linked path), a text to emit, or the end of a
    # container (its closing text; the container leaves ``open`` then: a value met again while
    # it is open is a cycle).
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
        buffer.append(text)
        size += len(text)
        if size >= _CHUNK:
            digest.update("".join(buffer).encode("utf-8", "surrogatepass"))
            buffer.clear()
            size = 0
    digest.update("".join(buffer).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


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
    if isinstance(value, float) and math.isfinite(value):
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


def _dump(payload: Any) -> Any:
    """``json_data`` (by alias, the one dump helper), with a model that cannot be dumped
    reported as ``InvalidPayloadError`` rather than pydantic's own error."""
    try:
        return json_data(payload)
    except Exception as exc:  # pydantic's serialisation errors, a failing serializer
        raise InvalidPayloadError(
            f"the payload ({type(payload).__name__}) cannot be dumped to JSON for its "
            f"version: {exc}"
        ) from exc


def check_version(payload: Any, expected: str) -> str:
    """Raise ``StalePayloadError`` unless ``payload`` is at version ``expected``; return the
    version otherwise."""
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
