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
from typing import Any

from agent_payload._jsondata import Link, json_data, materialize
from agent_payload._jsontext import dumps
from agent_payload.errors import ConfigurationError, InvalidPayloadError, StalePayloadError
from agent_payload.guards._common import format_path

__all__ = ["check_version", "payload_version"]


def payload_version(payload: Any) -> str:
    """The SHA-256 hex digest of ``payload``'s canonical JSON (any depth; keys that are
    numbers, bools or null written as ``json.dumps`` writes them). Raises
    ``InvalidPayloadError`` (with the path) for what it cannot hash: data that is not JSON, a
    cycle, an integer longer than Python writes as text, a model that cannot be dumped."""
    try:
        data = json_data(payload)
    except Exception as exc:  # pydantic's serialisation errors, a failing serializer
        raise InvalidPayloadError(
            f"the payload ({type(payload).__name__}) cannot be dumped to JSON for its "
            f"version: {exc}"
        ) from exc
    options: dict[str, Any] = {"sort_keys": True, "separators": (",", ":"), "allow_nan": False}
    try:
        text = json.dumps(data, ensure_ascii=False, **options)
    except (RecursionError, TypeError, ValueError):
        _check(data)  # raises InvalidPayloadError naming the path of what json.dumps refused
        text = dumps(data, **options)  # too deep for json.dumps
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _check(data: Any) -> None:
    """Raise ``InvalidPayloadError`` at the first place (keys sorted) that is not hashable
    JSON, walked without recursion; a container met again while open is a cycle."""
    stack: list[tuple[Any, Link, bool]] = [(data, None, False)]  # (node, path, closing)
    open_ids: set[int] = set()
    while stack:
        item, linked, closing = stack.pop()
        if closing:
            open_ids.discard(id(item))
        elif not isinstance(item, dict | list):
            _check_scalar(item, linked)
        elif id(item) in open_ids:
            path = materialize(linked)
            raise InvalidPayloadError(
                f"the payload contains itself at {format_path(path)} (a cycle); JSON data is a "
                "tree: copy the shared part instead of linking it",
                path=path,
            )
        else:
            open_ids.add(id(item))
            stack.append((item, linked, True))
            if isinstance(item, list):
                stack.extend((item[n], (linked, n), False) for n in range(len(item) - 1, -1, -1))
                continue
            try:
                keys = sorted(item)
            except TypeError as exc:
                path = materialize(linked)
                raise InvalidPayloadError(
                    f"the object at {format_path(path)} mixes key types that cannot be "
                    "sorted; JSON keys are strings: convert them",
                    path=path,
                ) from exc
            for key in reversed(keys):
                _check_key(key, linked)
                stack.append((item[key], (linked, key), False))


def _check_key(key: Any, linked: Link) -> None:
    if isinstance(key, str) or key is None or isinstance(key, bool | int) or _finite(key):
        return
    path = materialize(linked)
    raise InvalidPayloadError(
        f"payload key {key!r} at {format_path(path)} is a {type(key).__name__}; JSON keys "
        "are strings: convert it or pass a pydantic model",
        path=path,
    )


def _check_scalar(value: Any, linked: Link) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            int.__repr__(value)
            return
        except ValueError as exc:  # more digits than int -> str converts
            path = materialize(linked)
            raise InvalidPayloadError(
                f"payload value at {format_path(path)} is an integer of about "
                f"{int(value.bit_length() * 0.30103) + 1:,} digits, more than Python writes as "
                f"text (sys.get_int_max_str_digits() is {sys.get_int_max_str_digits()}), so it "
                "cannot be hashed or sent as JSON; store it as a string",
                path=path,
            ) from exc
    if isinstance(value, str) or value is None or isinstance(value, bool) or _finite(value):
        return
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
