"""What the two agents share around the pure ``RunState``: one run's attempts as steps
(``Run.attempt``, carried out by ``_callables.drive`` or ``adrive``), its tenacity controller
(``retrying``), its hooks and its lines on the ``agent_payload`` logger."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from logging import DEBUG, INFO
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

from agent_payload import _callables
from agent_payload._callables import Call
from agent_payload._loop import Commit, RunState
from agent_payload.errors import AgentPayloadError, ConcurrentChangeError, ModelReplyError
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.report import Problem
from agent_payload.result import AgentResult

__all__ = ["SYNC", "Hooks", "Run", "logger", "more_nodes_than", "retrying"]

logger = logging.getLogger("agent_payload")
logger.addHandler(logging.NullHandler())  # a library logs nothing unless the app configures it

SYNC = ("PayloadAgent", "use AsyncPayloadAgent, or make it a plain function")
"""``_callables.drive``'s ``where`` and ``fix`` for the sync agent."""


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks of a run (all optional; when each is called: docs/agent.md)."""

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
    """A fresh retry controller for one run: ours (``policy`` + 1 attempts, no waiting) or a
    copy of the user's, its ``retry`` and-ed with ours, its ``stop`` also stopping on the token
    budget, never reraising (we wrap ``RetryError``)."""
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


@dataclass
class _StopWhen(stop_base):
    """Stop when the policy's ``stop`` says so or the run's token budget is spent."""

    stop: Callable[[RetryCallState], Any]
    state: RunState

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.state.over_budget() or bool(self.stop(retry_state))


def more_nodes_than(payload: Any, limit: int) -> bool:
    """True when ``payload`` holds more than ``limit`` values (the walk stops at ``limit``)."""
    stack = [payload]
    for _ in range(limit + 1):
        if not stack:
            return False
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, BaseModel):
            stack.extend(value.__dict__.values())
    return True


@dataclass(frozen=True, slots=True)
class Run:
    """One run of an agent as steps (``attempt``, ``hooks``) whose calls of the model, the
    hooks and ``commit`` are ``Call``s: the driver alone decides whether they are awaited."""

    state: RunState
    hook_sets: Sequence[Hooks | None]
    retrying: Retrying | AsyncRetrying
    ask: Callable[[ModelRequest, Run], Any]
    model_name: str
    commit: Commit | None

    def hooks(self, name: str, *args: Any) -> Generator[Call, Any, None]:
        for hooks in self.hook_sets:
            hook = getattr(hooks, name, None) if hooks is not None else None
            if hook is not None:
                yield Call(hook, args, f"the hook {name}")

    def call(self, name: str, *args: Any) -> None:
        """The hooks called ``name``, in sync code."""
        _callables.drive(self.hooks(name, *args), *SYNC)

    async def acall(self, name: str, *args: Any) -> None:
        """The hooks called ``name``, in async code (an ``async def`` one awaited)."""
        await _callables.adrive(self.hooks(name, *args), offload=False)

    def attempt(self, retry_state: RetryCallState) -> Generator[Any, Any, AgentResult[Any]]:
        """One attempt: the request, the reads, the judgement and the commit."""
        state = self.state
        request = state.next_request()
        last = self._is_last(retry_state)
        self._log("attempt %d: requesting %s", state.attempt, self.model_name, level=DEBUG)
        reply = yield from self._exchange(request, last)
        while (follow := state.read_turn(reply)) is not None:
            self._log("attempt %d: answered read %d", state.attempt, state.reads_used, level=DEBUG)
            reply = yield from self._exchange(follow, last)
        try:
            result: AgentResult[Any] = yield from state.judge_steps(reply)
            if self.commit is not None:
                try:
                    committed = yield Call(self.commit, (result,), "commit=")
                except ConcurrentChangeError as exc:
                    state.collided(exc)
                result = result if committed is None else committed
        except ModelReplyError as exc:
            last = self._is_last(retry_state) or not state.should_retry(exc)
            self._log("attempt %d: reply not usable, asking again: %s", state.attempt, exc)
            yield from self.hooks("on_retry", state.attempt, exc.problems, last)
            raise
        return result

    def _exchange(self, request: ModelRequest, last: bool) -> Generator[Any, Any, ModelReply]:
        attempt = self.state.attempt
        yield from self.hooks("on_request", attempt, request, last)
        reply: ModelReply = yield Call(self.ask, (request, self), "the model")
        yield from self.hooks("on_response", attempt, reply, last)
        return reply

    def _is_last(self, retry_state: RetryCallState) -> bool:
        """True when the policy's ``stop`` says no attempt follows (False when it cannot tell)."""
        try:
            verdict = self.retrying.stop(retry_state)
        except Exception:
            return False
        if inspect.isawaitable(verdict):
            _callables.close(verdict)
            return False
        return bool(verdict)

    def failed(self, error: BaseException) -> AgentPayloadError:
        """The error the run raises, with what the run spent; logged."""
        state = self.state
        failure = state.exhausted() if isinstance(error, RetryError) else error
        assert isinstance(failure, AgentPayloadError)
        if failure is not error:
            failure.__cause__ = state.last_error or error
        if failure.attempts is None:
            failure.attempts, failure.usage = state.attempt, state.usage
        if failure.run_id is None:
            failure.run_id = state.run_id
        self._log("run failed after %d attempt(s): %s", state.attempt, failure)
        return failure

    def _log(self, message: str, *args: Any, level: int = INFO) -> None:
        run_id = self.state.run_id
        logger.log(level, "[run %s] " + message, run_id, *args, extra={"run_id": run_id})
