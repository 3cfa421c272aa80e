"""User callables (validators and hooks), sync or async, judged one way everywhere.

* ``is_async_callable``: an ``async def`` function, or an object whose ``__call__`` is one (a
  ``functools.partial`` of one included).
* ``require_sync``: the ``ConfigurationError`` raised at construction when a sync driver
  (``PayloadAgent``, ``ChangeRequestToolHandler.handle``) is given an async validator or hook:
  it could never await it, and dropping the coroutine would apply what it should reject.
* ``validator_problem``: what a validator's exception means. ``RetryWithFeedback`` is its
  feedback; ``ValueError`` and ``AssertionError`` are treated as pydantic treats them in its
  own validators: a validation problem sent back to the model with the exception's text
  (errors of this library, which also derive from ``ValueError``, propagate). Anything else
  propagates: a bug in the validator is not the model's to fix.
* ``drive``: run a judging generator (which yields the awaitables of async validators) to its
  result in sync code: an awaitable there is a ``ConfigurationError``, never dropped.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Generator, Iterable
from typing import Any, TypeVar

from agent_payload.errors import AgentPayloadError, ConfigurationError, RetryWithFeedback
from agent_payload.report import Problem

__all__ = ["drive", "is_async_callable", "require_sync", "validator_problem"]

T = TypeVar("T")


def is_async_callable(fn: object) -> bool:
    """True for a coroutine function, or a callable object / partial wrapping one."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the class's, not the instance's
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)


def require_sync(where: str, callables: Iterable[tuple[str, object]], fix: str) -> None:
    """Raise ``ConfigurationError`` naming the first async callable of ``callables``."""
    for name, fn in callables:
        if fn is not None and is_async_callable(fn):
            label = getattr(fn, "__qualname__", None) or type(fn).__name__
            raise ConfigurationError(
                f"{where}: {name} {label!r} is an async function, which {where} cannot await "
                f"(its check would be skipped and what it rejects applied); {fix}"
            )


def validator_problem(exc: BaseException) -> Problem | None:
    """The problem to send back for a validator's exception, or None to let it propagate."""
    if isinstance(exc, RetryWithFeedback):
        return Problem(kind="custom", message=exc.feedback, path=exc.path)
    if isinstance(exc, AgentPayloadError):
        return None
    if isinstance(exc, ValueError | AssertionError):
        text = str(exc).strip() or type(exc).__name__
        return Problem(kind="custom", message=text, path=getattr(exc, "path", None))
    return None


def drive(steps: Generator[Any, Any, T], where: str, fix: str) -> T:
    """Run ``steps`` to its return value in sync code. A yielded awaitable (an async
    validator, or a sync callable that returned a coroutine) cannot be awaited here: it is
    closed and ``ConfigurationError`` raised."""
    try:
        step = next(steps)
    except StopIteration as stop:
        result: T = stop.value
        return result
    close = getattr(step, "close", None)
    if callable(close):
        close()
    steps.close()
    raise ConfigurationError(
        f"{where}: a validator returned an awaitable ({type(step).__name__}), which {where} "
        f"cannot await (its check would be skipped); {fix}"
    )
