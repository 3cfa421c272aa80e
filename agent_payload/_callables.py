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
* ``adrive``: the same in async code (``AsyncPayloadAgent``, ``ChangeRequestToolHandler.ahandle``):
  each awaitable is awaited, and the pure steps run in the one ``worker()`` thread when asked
  (``off_loop``), so a large payload never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Generator, Iterable
from typing import Any, TypeVar

from agent_payload.errors import AgentPayloadError, ConfigurationError, RetryWithFeedback
from agent_payload.report import Problem

__all__ = [
    "adrive",
    "advance",
    "drive",
    "is_async_callable",
    "off_loop",
    "require_sync",
    "validator_problem",
    "worker",
]

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


_WORKER_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_WORKER_LOCK = threading.Lock()


def worker() -> concurrent.futures.ThreadPoolExecutor:
    """The one worker thread of offloaded work, shared by every async agent. One thread, not
    asyncio's default pool: the work is pure Python and holds the GIL, so more threads add no
    throughput but each one more competitor the event loop's thread must wait behind."""
    global _WORKER_POOL
    with _WORKER_LOCK:
        if _WORKER_POOL is None:
            _WORKER_POOL = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="agent_payload"
            )
        return _WORKER_POOL


async def off_loop(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in the worker thread (with the caller's context variables)."""
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(worker(), functools.partial(context.run, function, *args))


def advance(
    steps: Generator[Any, Any, Any], value: Any, error: BaseException | None
) -> tuple[bool, Any]:
    """One step of a generator driven from outside (a judging generator, an agent's
    attempt): ``(True, result)`` when it returned, else ``(False, what it yielded)``
    (StopIteration must not cross a thread's future)."""
    try:
        if error is not None:
            return False, steps.throw(error)
        return False, steps.send(value)
    except StopIteration as stop:
        return True, stop.value


async def adrive(steps: Generator[Any, Any, Any], offload: bool) -> Any:
    """Run a judging generator to its result: its steps (parse, merge, validation) in a worker
    thread when ``offload``; each awaitable it yields (an async validator) awaited here."""
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            if offload:
                done, out = await off_loop(advance, steps, value, error)
            else:
                done, out = advance(steps, value, error)
            if done:
                return out
            value, error = None, None
            try:
                value = await out
            except Exception as exc:  # the validator's error goes back into the judge
                error = exc
    finally:
        steps.close()
