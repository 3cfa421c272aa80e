"""User callables (validators, hooks, commits, models), sync or async, judged in one place:
``require_sync`` refuses an ``async def`` up front where nothing can await it; ``drive`` (sync:
an awaitable is refused) and ``adrive`` (async: awaited) run generators of ``Call`` steps."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Generator, Iterable
from typing import Any, NamedTuple, TypeVar

from agent_payload.errors import AgentPayloadError, ConfigurationError, ModelReplyError
from agent_payload.report import Problem

__all__ = [
    "Call",
    "adrive",
    "advance",
    "close",
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
    if isinstance(exc, ModelReplyError):  # RetryWithFeedback, or another reply error
        return Problem(kind="custom", message=exc.feedback, path=getattr(exc, "path", None) or "")
    if isinstance(exc, AgentPayloadError):
        return None
    if isinstance(exc, ValueError | AssertionError):
        text = str(exc).strip() or type(exc).__name__
        return Problem(kind="custom", message=text, path=getattr(exc, "path", None) or "")
    return None


class Call(NamedTuple):
    """A step of a driven generator: call ``fn(*args)`` (``what``: its name in errors)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    what: str


def close(awaitable: object) -> None:
    """Close an awaitable that will never be awaited (no "never awaited" warning)."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def _refused(outcome: object, where: str, what: str, fix: str, why: str = "") -> Exception:
    close(outcome)
    return ConfigurationError(
        f"{where}: {what} returned an awaitable ({type(outcome).__name__}), which {where} "
        f"cannot await{why}; {fix}"
    )


def drive(steps: Generator[Any, Any, T], where: str, fix: str) -> T:
    """Run ``steps`` to its return value in sync code, making each ``Call``; an awaitable
    cannot be awaited here, so it is closed and ``ConfigurationError`` raised."""
    value: Any = None
    error: BaseException | None = None
    with contextlib.closing(steps):
        while True:
            done, step = advance(steps, value, error)
            if done:
                return step  # type: ignore[no-any-return]
            if not isinstance(step, Call):
                raise _refused(step, where, "a validator", fix, " (its check would be skipped)")
            value, error = None, None
            try:
                value = step.fn(*step.args)
            except Exception as exc:
                error = exc
            else:
                if inspect.isawaitable(value):
                    error = _refused(value, where, step.what, fix)


_WORKER_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_WORKER_LOCK = threading.Lock()


def worker() -> concurrent.futures.ThreadPoolExecutor:
    """The one worker thread of offloaded work (it holds the GIL: more would not help)."""
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
    """One step of a driven generator: ``(True, result)`` when it returned, else ``(False,
    what it yielded)`` (StopIteration must not cross a thread's future)."""
    try:
        if error is not None:
            return False, steps.throw(error)
        return False, steps.send(value)
    except StopIteration as stop:
        return True, stop.value


async def adrive(steps: Generator[Any, Any, T], offload: bool) -> T:
    """``drive`` in async code: each awaitable (yielded, or returned by a ``Call``) is awaited;
    the steps themselves (parse, merge, validation) run in the worker thread when ``offload``."""
    value: Any = None
    error: BaseException | None = None
    with contextlib.closing(steps):
        while True:
            if offload:
                done, out = await off_loop(advance, steps, value, error)
            else:
                done, out = advance(steps, value, error)
            if done:
                return out  # type: ignore[no-any-return]
            value, error = None, None
            try:
                value = out.fn(*out.args) if isinstance(out, Call) else out
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:  # the callable's error goes back into the steps
                error = exc
