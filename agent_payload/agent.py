"""``PayloadAgent`` and ``AsyncPayloadAgent``: hand over a payload and a task, get back the
updated payload. Both drive ``_drive.Run`` around the pure ``RunState`` of ``_loop``. Guide:
docs/agent.md.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from tenacity import AsyncRetrying, RetryError, Retrying

from agent_payload import _callables
from agent_payload import prompts as _prompts
from agent_payload._config import (
    check_guard,
    check_guards,
    check_payload_type,
    check_validators,
    expect,
    is_int,
    read_scope_of,
)
from agent_payload._drive import SYNC, Hooks, Run
from agent_payload._drive import more_nodes_than as _more_nodes_than
from agent_payload._drive import retrying as _retrying
from agent_payload._loop import Commit, RunSettings, RunState, Validator
from agent_payload._reply import OUTPUT_MODES, OutputMode
from agent_payload.errors import AgentPayloadError, ConfigurationError
from agent_payload.guards.permissions import Permissions
from agent_payload.guards.versions import check_version
from agent_payload.outline import DEFAULT_MAX_READS, resolve_max_payload_tokens
from agent_payload.providers import as_model, infer_model
from agent_payload.providers.base import (
    AsyncModel,
    AsyncStreamingModel,
    Model,
    ModelReply,
    ModelRequest,
    StreamingModel,
)
from agent_payload.report import Guard, Problem
from agent_payload.result import AgentResult
from agent_payload.telemetry import run_trace
from agent_payload.usage import estimate_tokens

if TYPE_CHECKING:
    from agent_payload.guards import ReadScope

    SdkClient = Any
    """An ``openai`` / ``anthropic`` SDK client (sync or async), given with ``model_name``."""

__all__ = [
    "OFFLOAD_NODES",
    "AgentResult",
    "AsyncPayloadAgent",
    "Hooks",
    "PayloadAgent",
    "Validator",
    "estimate_tokens",
]


P = TypeVar("P")
M = TypeVar("M", bound=Model | AsyncModel)


OFFLOAD_NODES = 20_000
"""``AsyncPayloadAgent``: payloads with more values than this (about 200 KB of JSON) are
rendered, parsed and merged in a worker thread (``offload_nodes=``)."""


def _resolve_model(
    model: Any,
    model_name: str | None,
    *,
    async_client: bool,
    api: Literal["chat", "responses"] | None,
    stream: object,
) -> Any:
    """The agent's model, checked to be sync or async as the agent is, and to stream if asked."""
    agent, fix, wanted, streaming, a = (  # ``a``: the prefix of the async methods
        ("AsyncPayloadAgent", "PayloadAgent", AsyncModel, AsyncStreamingModel, "a")
        if async_client
        else ("PayloadAgent", "AsyncPayloadAgent", Model, StreamingModel, "")
    )
    expect(api in (None, "chat", "responses"), "api", "'chat' or 'responses'", api)
    expect(isinstance(stream, bool), "stream", "True or False", stream)
    known = as_model(model) if model_name is None else None
    if known is not None:
        if api is not None:
            raise ConfigurationError(
                "api: applies to an OpenAI SDK client or an 'openai:MODEL' string; a Model is "
                "used as it is (drop api=)"
            )
        if not isinstance(known, wanted):
            raise ConfigurationError(
                f"model: {agent} calls {a}request() on its model (the {wanted.__name__} protocol), "
                f"which {type(model).__qualname__} does not have; use {fix} with it"
            )
    elif not isinstance(model, str) and model_name is None:
        raise ConfigurationError(
            f"model: expected a Model, a 'provider:MODEL' string or an SDK client with "
            f"model_name= (for example PayloadAgent(openai.OpenAI(), model_name='gpt-4.1-mini'))"
            f", found {type(model).__module__}.{type(model).__qualname__} without model_name"
        )
    else:  # ``async_client`` applies to a string (an SDK client is sync or async itself)
        known = infer_model(model, model_name, async_client=async_client, api=api)
    is_async = getattr(known, "is_async", None)
    if isinstance(is_async, bool) and is_async != async_client:
        kind, prefix = ("an async", "") if is_async else ("a sync", "Async")
        raise ConfigurationError(
            f"{agent}: the model {known.model_name!r} wraps {kind} SDK client; use {fix} with "
            f"it, or build this agent on openai.{prefix}OpenAI / anthropic.{prefix}Anthropic"
        )
    if stream and not isinstance(known, streaming):
        raise ConfigurationError(
            f"stream=True: the model {known.model_name!r} ({type(known).__qualname__}) cannot "
            f"stream its reply (it has no {a}stream_request()); use an OpenAI or Anthropic SDK "
            "client, or drop stream=True"
        )
    return known


def _check_options(output_mode: Any, max_retries: Any, budget: Any, offload: Any) -> None:
    """``ConfigurationError`` for an option of the wrong kind (before any request)."""
    modes = ", ".join(OUTPUT_MODES)
    expect(output_mode in OUTPUT_MODES, "output_mode", f"one of {modes}", output_mode)
    if isinstance(max_retries, bool) or not isinstance(max_retries, int | Retrying | AsyncRetrying):
        raise ConfigurationError(
            f"max_retries: expected an int >= 0 or a tenacity Retrying/AsyncRetrying, "
            f"found {type(max_retries).__name__}"
        )
    negative = isinstance(max_retries, int) and max_retries < 0
    expect(not negative, "max_retries", "an int >= 0", max_retries)
    expect(budget is None or is_int(budget, 1), "token_budget", "a positive int or None", budget)
    expect(offload is None or is_int(offload, 0), "offload_nodes", "an int >= 0 or None", offload)


class _BaseAgent(Generic[M]):
    """Configuration shared by the sync and async agents (no I/O); ``M``: the model protocol."""

    _async_client = False
    _ask: Callable[[ModelRequest, Run], Any]  # one model request: each agent's own

    def __init__(
        self,
        model: M | str | SdkClient,
        *,
        model_name: str | None = None,
        api: Literal["chat", "responses"] | None = None,
        output_mode: OutputMode = "text",
        max_retries: int | Retrying | AsyncRetrying = 2,
        temperature: float | None = None,
        max_tokens: int | None = None,
        guards: Sequence[Guard] = (),
        permissions: Permissions | Guard | None = None,
        read_scope: ReadScope | None = None,
        rules_text: str | Sequence[str] | None = None,
        read_only: str | Sequence[str] | None = None,
        validators: Sequence[Validator] = (),
        extra_instructions: str | None = None,
        token_budget: int | None = None,
        request_options: Mapping[str, Any] | None = None,
        hooks: Hooks | None = None,
        on_request: Callable[[int, ModelRequest, bool], Any] | None = None,
        on_response: Callable[[int, ModelReply, bool], Any] | None = None,
        on_retry: Callable[[int, Sequence[Problem], bool], Any] | None = None,
        on_success: Callable[[AgentResult[Any]], Any] | None = None,
        on_error: Callable[[BaseException, int], Any] | None = None,
        on_progress: Callable[[int, int], Any] | None = None,
        stream: bool = False,
        offload_nodes: int | None = OFFLOAD_NODES,
        prompt_caching: bool = True,
        prompt_cache_key: str | None = None,
        max_payload_tokens: int | Literal["auto"] | None = "auto",
        max_reads: int = DEFAULT_MAX_READS,
    ) -> None:
        _check_options(output_mode, max_retries, token_budget, offload_nodes)
        expect(isinstance(prompt_caching, bool), "prompt_caching", "True or False", prompt_caching)
        key_ok = isinstance(prompt_cache_key, str | None) and prompt_cache_key != ""
        expect(key_ok, "prompt_cache_key", "a non-empty string or None", prompt_cache_key)
        expect(is_int(max_reads, 1), "max_reads", "an int >= 1", max_reads)
        self.offload_nodes = offload_nodes
        self.prompt_caching = prompt_caching
        self.prompt_cache_key = prompt_cache_key
        self.max_reads = max_reads
        self.model: M = _resolve_model(
            model, model_name, async_client=self._async_client, api=api, stream=stream
        )
        self.stream = stream
        self.max_payload_tokens = resolve_max_payload_tokens(
            max_payload_tokens, self.model.model_name, ""
        )
        self.output_mode: OutputMode = output_mode
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        all_guards = list(check_guards(guards, "guards"))
        if permissions is not None:
            all_guards.append(check_guard(permissions, "permissions"))
        if read_only:  # a deny rule per path, enforced and stated in the prompt
            paths = [read_only] if isinstance(read_only, str) else list(read_only)
            try:
                all_guards.append(Permissions(deny=paths))
            except ConfigurationError as exc:
                raise ConfigurationError(f"read_only: {exc}") from exc
        self.read_scope = read_scope_of(all_guards, read_scope, "read_scope")
        if read_scope is not None and not any(g is read_scope for g in all_guards):
            if not callable(getattr(read_scope, "project", None)):
                raise ConfigurationError(
                    f"read_scope: expected an object with project(payload) (such as "
                    f"agent_payload.guards.ReadScope), found {type(read_scope).__name__}"
                )
            all_guards.append(check_guard(read_scope, "read_scope"))
        self.guards: tuple[Guard, ...] = tuple(all_guards)
        self.rules_text = _prompts.guard_rules(rules_text, all_guards)
        """The rules of the system prompt: ``rules_text``, then every guard's ``describe()``."""
        self.read_only = read_only
        self.validators: tuple[Validator, ...] = check_validators(validators, "validators")
        self.extra_instructions = extra_instructions
        self.token_budget = token_budget
        self.request_options: Mapping[str, Any] = dict(request_options or {})
        given = (on_request, on_response, on_retry, on_success, on_error, on_progress)
        fields = dataclasses.fields(Hooks)  # in the order of ``given``
        chosen: dict[str, Any] = {f.name: h for f, h in zip(fields, given, strict=True) if h}
        self.hooks = dataclasses.replace(hooks or Hooks(), **chosen)
        if not self._async_client:
            self._require_sync(self.validators, self.hooks)

    def _require_sync(self, validators: Sequence[Validator], hooks: Hooks | None) -> None:
        """The sync agent cannot await: an async validator or hook is refused up front."""
        named: list[tuple[str, object]] = [("validator", v) for v in validators]
        if hooks is not None:
            named += [(f.name, getattr(hooks, f.name)) for f in dataclasses.fields(hooks)]
        _callables.require_sync(type(self).__name__, named, fix=SYNC[1])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model.provider}:{self.model.model_name}, "
            f"output_mode={self.output_mode!r}, max_retries={self.max_retries!r})"
        )

    def start_run(
        self,
        payload: Any,
        task: str,
        payload_type: Any,
        validators: Sequence[Validator],
        extra_instructions: str | None,
        expected_version: str | None = None,
        run_id: str | None = None,
    ) -> RunState:
        """One run's state with this agent's settings (``run``'s, and ``BatchJob``'s rounds)."""
        check_payload_type(payload_type, "run(payload_type=...)")
        validators = check_validators(validators, "run(validators=...)")
        if expected_version is not None:
            check_version(payload, expected_version)
        extra = "\n\n".join(e for e in (self.extra_instructions, extra_instructions) if e)
        settings = RunSettings(
            output_mode=self.output_mode,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            extra=self.request_options,
            payload_type=payload_type,
            validators=(*self.validators, *validators),
            guards=self.guards,
            read_scope=self.read_scope,
            rules_text=self.rules_text,
            extra_instructions=extra or None,
            token_budget=self.token_budget,
            prompt_caching=self.prompt_caching,
            prompt_cache_key=self.prompt_cache_key,
            max_payload_tokens=self.max_payload_tokens,
            max_reads=self.max_reads,
        )
        state = RunState(payload, task, settings)
        state.run_id = run_id or uuid.uuid4().hex
        return state

    def _run(
        self,
        state: RunState,
        started: int,
        hooks: Hooks | None,
        commit: Commit | None,
        retrying: Retrying | AsyncRetrying,
    ) -> Run:
        hook_sets = (run_trace(self.model, state, started), self.hooks, hooks)
        return Run(state, hook_sets, retrying, self._ask, self.model.model_name, commit)


class PayloadAgent(_BaseAgent[Model]):
    """Edit payloads with a model: a sync SDK client (with ``model_name=``), a
    ``"openai:MODEL"`` / ``"anthropic:MODEL"`` string (the key from the environment), or any
    ``Model`` (``testing.ScriptedModel`` in tests). Every option is described in docs/agent.md;
    hooks (``on_request``, ``on_response``, ``on_retry``, ``on_success``, ``on_error``,
    ``on_progress``) are keyword callables or a ``Hooks``. ``max_retries``: corrections after
    the first attempt, or a tenacity ``Retrying``. ``read_only``: paths the model may not change.
    ``validators``: ``(payload) -> None`` callables; raise ``RetryWithFeedback``, ``ValueError``
    or ``AssertionError`` to have the model try again. Misuse: ``ConfigurationError``.
    """

    def run(
        self,
        payload: P,
        task: str,
        *,
        payload_type: Any = None,
        validators: Sequence[Validator] = (),
        extra_instructions: str | None = None,
        expected_version: str | None = None,
        run_id: str | None = None,
        hooks: Hooks | None = None,
        commit: Commit | None = None,
    ) -> AgentResult[P]:
        """Apply ``task`` to ``payload`` and return the updated copy (the same kind); the
        caller's payload is never modified.

        Raises ``RetriesExhaustedError`` (no usable change request within the retries or the
        token budget), ``RefusalError`` (refused twice), ``ProviderError`` (transport), and
        before any request ``InvalidPayloadError`` / ``LimitExceededError``, or
        ``StalePayloadError`` when ``payload`` is no longer ``expected_version``.

        ``run_id`` tags the run (default: a uuid4 hex); ``hooks``: this run's own, called after
        the agent's. ``commit(result)``: called before the run returns (what it returns, if not
        ``None``, is returned); a ``ConcurrentChangeError`` it raises goes back to the model as
        a correction, the next reply judged against the error's ``current`` payload.
        """
        self._require_sync(validators, hooks)
        started = time.time_ns()
        state = self.start_run(
            payload, task, payload_type, validators, extra_instructions, expected_version, run_id
        )
        retrying = _retrying(self.max_retries, state, Retrying)
        run = self._run(state, started, hooks, commit, retrying)
        try:
            for attempt in retrying:
                with attempt:
                    result: AgentResult[Any] = _callables.drive(
                        run.attempt(attempt.retry_state), *SYNC
                    )
        except (RetryError, AgentPayloadError) as exc:
            error = run.failed(exc)
            run.call("on_error", error, state.attempt)
            raise error from error.__cause__
        run.call("on_success", result)
        return result

    def _ask(self, request: ModelRequest, run: Run) -> ModelReply:
        """One model request, streamed when the agent streams."""
        if not self.stream:
            return self.model.request(request)
        model: StreamingModel = self.model  # type: ignore[assignment]  # checked at __init__
        return model.stream_request(
            request, functools.partial(run.call, "on_progress", run.state.attempt)
        )


class AsyncPayloadAgent(_BaseAgent[AsyncModel]):
    """``PayloadAgent`` for async clients (``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic``,
    or any ``AsyncModel``). Same options; ``max_retries`` may be an ``AsyncRetrying``; hooks
    and validators may be coroutine functions. Safe to run many times concurrently."""

    _async_client = True

    async def run(
        self,
        payload: P,
        task: str,
        *,
        payload_type: Any = None,
        validators: Sequence[Validator] = (),
        extra_instructions: str | None = None,
        expected_version: str | None = None,
        run_id: str | None = None,
        hooks: Hooks | None = None,
        commit: Commit | None = None,
    ) -> AgentResult[P]:
        """The async twin of ``PayloadAgent.run``: validators, hooks and ``commit`` may be
        ``async def``. A payload of more than ``offload_nodes`` values (``None``: never) is
        rendered, parsed, merged and validated in a worker thread (sync validators too), so the
        event loop keeps serving other tasks."""
        limit = self.offload_nodes
        offload = limit is not None and _more_nodes_than(payload, limit)
        started = time.time_ns()
        args = (payload, task, payload_type, validators, extra_instructions, expected_version)
        start = functools.partial(self.start_run, *args, run_id)
        state = await _callables.off_loop(start) if offload else start()
        retrying = _retrying(self.max_retries, state, AsyncRetrying)
        run = self._run(state, started, hooks, commit, retrying)
        try:
            async for attempt in retrying:
                with attempt:
                    result: AgentResult[Any] = await _callables.adrive(
                        run.attempt(attempt.retry_state), offload
                    )
        except (RetryError, AgentPayloadError) as exc:
            error = run.failed(exc)
            await run.acall("on_error", error, state.attempt)
            raise error from error.__cause__
        await run.acall("on_success", result)
        return result

    async def _ask(self, request: ModelRequest, run: Run) -> ModelReply:
        """One model request, streamed when the agent streams."""
        if not self.stream:
            return await self.model.arequest(request)
        model: AsyncStreamingModel = self.model  # type: ignore[assignment]  # checked at __init__
        return await model.astream_request(
            request, functools.partial(run.acall, "on_progress", run.state.attempt)
        )
