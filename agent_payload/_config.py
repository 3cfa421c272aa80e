"""Checks of what the calling program passes, made when it is passed, so misuse is a
``ConfigurationError`` naming the argument before any model call; ``clip`` quotes a value."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import TypeAdapter

from agent_payload.errors import ConfigurationError

__all__ = [
    "check_guard",
    "check_guards",
    "check_number",
    "check_payload_type",
    "check_validators",
    "clip",
    "expect",
    "is_int",
    "read_scope_of",
]


def clip(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, ending in ``...`` when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def expect(ok: bool, where: str, expected: str, found: object) -> None:
    """``ConfigurationError("{where}: expected {expected}, found {found!r}")`` unless ``ok``."""
    if not ok:
        raise ConfigurationError(f"{where}: expected {expected}, found {found!r}")


def is_int(value: object, least: int = 0) -> bool:
    """An int (never a bool) of at least ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _found(value: object) -> str:
    return f"{clip(repr(value))} ({type(value).__name__})"


def check_payload_type(payload_type: Any, where: str = "payload_type") -> None:
    """Raise ``ConfigurationError`` unless ``payload_type`` is None or a type pydantic can
    validate (checked by building its ``TypeAdapter``)."""
    if payload_type is None:
        return
    try:
        TypeAdapter(payload_type)
    except Exception as exc:  # pydantic's schema errors, TypeError for a non-type
        raise ConfigurationError(
            f"{where}: expected a type pydantic can validate (a BaseModel subclass, list[Item], "
            f"a TypedDict, ...), found {_found(payload_type)}: {str(exc).splitlines()[0]}"
        ) from exc


def _as_sequence(value: Any, where: str, what: str) -> Sequence[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        hint = "; for a single one pass a list of it: [...]" if callable(value) else ""
        raise ConfigurationError(f"{where}: expected a list of {what}, found {_found(value)}{hint}")
    return value


def check_validators(validators: Any, where: str = "validators") -> tuple[Callable[..., Any], ...]:
    """``validators`` as a tuple, or ``ConfigurationError`` naming the first that is not
    callable (``validators[1]``)."""
    items = _as_sequence(validators, where, "validators, callables (payload) -> None")
    for n, validator in enumerate(items):
        if not callable(validator):
            raise ConfigurationError(
                f"{where}[{n}]: expected a callable (payload) -> None that raises "
                f"RetryWithFeedback to ask the model again, found {_found(validator)}"
            )
    return tuple(items)


def check_guard(guard: Any, where: str) -> Any:
    """``guard`` itself, or ``ConfigurationError`` unless it is a callable (change) -> findings."""
    if not callable(guard):
        raise ConfigurationError(
            f"{where}: expected a guard, a callable (change) -> findings, found "
            f"{_found(guard)}; build one with agent_payload.guards"
        )
    return guard


def check_guards(guards: Any, where: str = "guards") -> tuple[Any, ...]:
    """``guards`` as a tuple, or ``ConfigurationError`` naming the first that is not a guard."""
    items = _as_sequence(guards, where, "guards, callables (change) -> findings")
    return tuple(check_guard(g, f"{where}[{n}]") for n, g in enumerate(items))


def read_scope_of(guards: Sequence[Any], read_scope: Any, where: str) -> Any:
    """The read scope in effect: ``read_scope``, else the one among ``guards`` (a guard with
    ``project``); two different ones are a ``ConfigurationError``."""
    flat: list[Any] = []
    stack = list(reversed(guards))
    while stack:  # a GuardChain (combine_guards) holds its guards in ``guards``
        guard = stack.pop()
        inner = getattr(guard, "guards", None)
        if isinstance(inner, tuple) and not callable(getattr(guard, "project", None)):
            stack.extend(reversed(inner))
        else:
            flat.append(guard)
    scopes = [g for g in flat if callable(getattr(g, "project", None)) and g is not read_scope]
    if read_scope is not None:
        scopes.insert(0, read_scope)
    if len(scopes) > 1:
        raise ConfigurationError(
            f"{where}: {len(scopes)} read scopes given ({', '.join(map(repr, scopes))}); pass "
            "one, as read_scope= (it decides what the model sees and guards writes), with "
            "every include and exclude rule in it"
        )
    return scopes[0] if scopes else None


def check_number(
    value: Any,
    where: str,
    *,
    integer: bool = False,
    minimum: float | None = None,
    below: float | None = None,
) -> None:
    """Raise ``ConfigurationError`` unless ``value`` is an int (a finite int or float when not
    ``integer``; never a bool) with ``minimum <= value < below``."""
    kinds: tuple[type[int | float], ...] = (int,) if integer else (int, float)
    if (
        isinstance(value, kinds)
        and not isinstance(value, bool)
        and (not isinstance(value, float) or math.isfinite(value))
        and (minimum is None or value >= minimum)
        and (below is None or value < below)
    ):
        return
    bounds = [f">= {minimum:g}"] if minimum is not None else []
    bounds += [f"< {below:g}"] if below is not None else []
    expected = " ".join(["an int" if integer else "a number", " and ".join(bounds)]).rstrip()
    raise ConfigurationError(f"{where}: expected {expected}, found {_found(value)}")
