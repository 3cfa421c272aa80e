"""What the two agents' drivers share around the pure ``RunState``: the tenacity controller of
a run (``retrying``: the attempts, the token budget, ``is_last``), the hooks (``Hooks``, called
sync or awaited), and the run's lines on the ``agent_payload`` logger."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from pydantic import BaseModel
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    Retrying,
    retry_all,
    retry_if_exception,
    stop_after_attempt,
    wait_none,
)
from tenacity.stop import stop_base

from agent_payload._loop import RunState
from agent_payload.errors import (
    AgentPayloadError,
    ConfigurationError,
    ModelReplyError,
    RetriesExhaustedError,
)
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.report import Problem
from agent_payload.result import AgentResult

__all__ = [
    "Hooks",
    "RunLog",
    "acall",
    "call",
    "exhausted",
    "is_last",
    "log_failure",
    "logger",
    "more_nodes_than",
    "retry_is_last",
    "retrying",
]

logger = logging.getLogger("agent_payload")
logger.addHandler(logging.NullHandler())  # a library logs nothing unless the app configures it


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks of a run (all optional). See the module docstring for when each is called."""

    on_request: Callable[[int, ModelRequest, bool], Any] | None = None
    on_response: Callable[[int, ModelReply, bool], Any] | None = None
    on_retry: Callable[[int, Sequence[Problem], bool], Any] | None = None
    on_success: Callable[[AgentResult[Any]], Any] | None = None
    on_error: Callable[[BaseException, int], Any] | None = None
    on_progress: Callable[[int, int], Any] | None = None


@overload
def retrying(
    policy: int | Retrying | AsyncRetrying, state: RunState, kind: type[Retrying]
) -> Retrying: ...
@overload
def retrying(
    policy: int | Retrying | AsyncRetrying, state: RunState, kind: type[AsyncRetrying]
) -> AsyncRetrying: ...
def retrying(
    policy: int | Retrying | AsyncRetrying,
    state: RunState,
    kind: type[Retrying] | type[AsyncRetrying],
) -> Retrying | AsyncRetrying:
    """A fresh retry controller for one run of an agent whose ``max_retries`` is ``policy``:
    ours (``policy`` + 1 attempts, no waiting) or a copy of the user's, whose ``retry``
    condition is combined (and) with ours, whose ``stop`` also stops on the token budget, and
    which never reraises (we wrap ``RetryError``)."""
    ours = retry_if_exception(state.should_retry)
    if isinstance(policy, int):
        return kind(
            stop=_StopWhen(stop_after_attempt(policy + 1), state),
            wait=wait_none(),
            retry=ours,
            reraise=False,
        )
    options: dict[str, Any] = {
        "stop": _StopWhen(policy.stop, state),
        "wait": policy.wait,
        "retry": retry_all(ours, policy.retry),
        "before": policy.before,
        "after": policy.after,
        "before_sleep": policy.before_sleep,
        "reraise": False,
        "retry_error_cls": RetryError,
        "retry_error_callback": None,
    }
    if isinstance(policy, kind):
        return policy.copy(**options)
    return kind(**options)


class _StopWhen(stop_base):
    """Stop when the policy's ``stop`` says so or the run's token budget is spent."""

    def __init__(self, stop: Callable[[RetryCallState], Any], state: RunState) -> None:
        self.stop = stop
        self.state = state

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.state.over_budget() or bool(self.stop(retry_state))


def is_last(retrying: Retrying | AsyncRetrying, retry_state: RetryCallState) -> bool:
    try:
        verdict = retrying.stop(retry_state)
    except Exception:  # a time-based stop cannot answer before the attempt's outcome
        return False
    if inspect.isawaitable(verdict):
        close = getattr(verdict, "close", None)
        if callable(close):
            close()
        return False
    return bool(verdict)


def retry_is_last(
    retrying: Retrying | AsyncRetrying,
    retry_state: RetryCallState,
    state: RunState,
    error: ModelReplyError,
) -> bool:
    """After a reply that could not be used (logged here): True when no attempt follows."""
    last = is_last(retrying, retry_state) or not state.should_retry(error)
    logger.info(
        "[run %s] attempt %d: reply not usable, asking again: %s",
        state.run_id,
        state.attempt,
        error,
        extra={"run_id": state.run_id},
    )
    return last


def exhausted(state: RunState) -> RetriesExhaustedError:
    """The error of a run out of attempts or tokens (logged here)."""
    error = state.exhausted()
    error.run_id = state.run_id
    logger.info("[run %s] %s", state.run_id, error, extra={"run_id": state.run_id})
    return error


def log_failure(state: RunState, error: AgentPayloadError) -> None:
    """Log a run's failure and record on the error what the run spent."""
    if error.attempts is None:
        error.attempts = state.attempt
        error.usage = state.usage
    if error.run_id is None:
        error.run_id = state.run_id
    logger.info(
        "[run %s] run failed after %d attempt(s): %s",
        state.run_id,
        state.attempt,
        error,
        extra={"run_id": state.run_id},
    )


def more_nodes_than(payload: Any, limit: int) -> bool:
    """True when ``payload`` holds more than ``limit`` values (a bounded walk: it stops at
    ``limit``; a pydantic model counts its fields and their values)."""
    count = 0
    stack = [payload]
    while stack:
        value = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, BaseModel):
            stack.extend(value.__dict__.values())
    return False


class RunLog:
    """The ``agent_payload`` logger with the run's id on every record (``record.run_id``)."""

    def __init__(self, state: RunState) -> None:
        self.extra = {"run_id": state.run_id}

    def debug(self, message: str, *args: Any) -> None:
        logger.debug("[run %s] " + message, self.extra["run_id"], *args, extra=self.extra)


def hooks_named(hook_sets: Sequence[Hooks | None], name: str) -> list[Callable[..., Any]]:
    found = []
    for hooks in hook_sets:
        hook = getattr(hooks, name, None) if hooks is not None else None
        if hook is not None:
            found.append(hook)
    return found


def call(hook_sets: Sequence[Hooks | None], name: str, *args: Any) -> None:
    for hook in hooks_named(hook_sets, name):
        outcome = hook(*args)
        if inspect.isawaitable(outcome):  # a sync-looking hook that returned a coroutine
            close = getattr(outcome, "close", None)
            if callable(close):
                close()
            raise ConfigurationError(
                f"PayloadAgent: the hook {name} returned an awaitable, which PayloadAgent "
                "cannot await; use AsyncPayloadAgent, or make it a plain function"
            )


async def acall(hook_sets: Sequence[Hooks | None], name: str, *args: Any) -> None:
    for hook in hooks_named(hook_sets, name):
        outcome = hook(*args)
        if inspect.isawaitable(outcome):
            await outcome
