# ``_BaseAgent.__init__`` is 86 lines: it checks and stores one keyword per documented option.
"""``PayloadAgent`` and ``AsyncPayloadAgent``: hand over a payload and a task, get back the
updated payload, with the model's mistakes corrected or reported and nothing lost.

Both are thin drivers around the pure ``RunState`` of ``agent_payload._loop`` (every decision
is made there, once): each attempt asks the state for the next request, sends it with the
model, and gives the reply back to the state, which returns the result or raises the
``ModelReplyError`` that the next attempt will correct. tenacity runs the attempts
(``Retrying`` / ``AsyncRetrying``, no sleeping by default).

What is retried: only problems with the model's reply (``ModelReplyError``: syntax, truncation,
a first refusal, conflicts, validation errors, a user validator's ``RetryWithFeedback``, a guard
asking for confirmation). Transport failures (429, 5xx, timeouts) are the SDK's business: they
surface at once as ``ProviderError`` and are not retried again here.

Hooks are plain keyword callables (or a ``Hooks`` object, per agent or per ``run(hooks=)``); in
``AsyncPayloadAgent`` a hook or a validator may also be a coroutine function (awaited), while
``PayloadAgent`` refuses one with ``ConfigurationError`` when it is given (it could not await
it, and a dropped validator would apply what it should reject):

* ``on_request(attempt, request, is_last)`` before each model request;
* ``on_response(attempt, reply, is_last)`` after it;
* ``on_retry(attempt, problems, is_last)`` after an attempt whose reply could not be used;
  ``is_last`` is True when no further attempt will follow (the run is about to fail);
* ``on_success(result)`` and ``on_error(error, attempts)`` once per run;
* ``on_progress(attempt, characters)`` with ``stream=True``, as the reply arrives: the
  characters of the reply received so far in this request (text, refusal or tool-call
  arguments). The reply is judged only once it is whole; a stream that breaks off is a
  retryable ``ProviderError`` and nothing of it is applied.

``is_last`` is True when the retry policy's ``stop`` says no attempt follows this one (exact
for attempt-count and token-budget stops; False when a time-based stop cannot tell yet).
Everything is also logged on the ``agent_payload`` logger (DEBUG per request, INFO per retry
and when a run fails; the error itself is raised to the caller).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryError,
    Retrying,
)

from agent_payload import _callables
from agent_payload import prompts as _prompts
from agent_payload._config import (
    check_guard,
    check_guards,
    check_payload_type,
    check_validators,
    read_scope_of,
)
from agent_payload._drive import Hooks
from agent_payload._drive import RunLog as _RunLog
from agent_payload._drive import acall as _acall
from agent_payload._drive import call as _call
from agent_payload._drive import exhausted as _exhausted
from agent_payload._drive import is_last as _is_last
from agent_payload._drive import log_failure as _log_failure
from agent_payload._drive import more_nodes_than as _more_nodes_than
from agent_payload._drive import retry_is_last as _retry_is_last
from agent_payload._drive import retrying as _retrying
from agent_payload._loop import Commit, RunSettings, RunState, Validator
from agent_payload._reply import OUTPUT_MODES, OutputMode
from agent_payload.errors import (
    AgentPayloadError,
    ConcurrentChangeError,
    ConfigurationError,
    ModelReplyError,
)
from agent_payload.guards.permissions import Permissions
from agent_payload.guards.versions import check_version
from agent_payload.outline import (
    DEFAULT_MAX_READS,
    resolve_max_payload_tokens,
)
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
T = TypeVar("T")
M = TypeVar("M", bound=Model | AsyncModel)


OFFLOAD_NODES = 20_000
"""``AsyncPayloadAgent``: payloads with more values than this (about 200 KB of JSON) are
rendered, parsed and merged in a worker thread (``offload_nodes=``)."""


def _resolve_model(
    model: Any,
    model_name: str | None,
    *,
    async_client: bool,
    api: Literal["chat", "responses"] | None = None,
) -> Any:
    """A ``Model`` (``AsyncModel`` for ``AsyncPayloadAgent``) as is; an SDK client (with
    ``model_name``) or a ``"provider:MODEL"`` string (a client built from the environment; async
    for ``AsyncPayloadAgent``) through ``providers.infer_model`` (``api`` chooses Chat
    Completions or the Responses API for OpenAI)."""
    if api is not None and api not in ("chat", "responses"):
        raise ConfigurationError(f"api: expected 'chat' or 'responses', found {api!r}")
    known = as_model(model) if model_name is None else None
    if known is not None:
        if api is not None:
            raise ConfigurationError(
                "api: applies to an OpenAI SDK client or an 'openai:MODEL' string; a Model is "
                "used as it is (drop api=)"
            )
        wanted, method, other = (
            (AsyncModel, "arequest", "PayloadAgent")
            if async_client
            else (Model, "request", "AsyncPayloadAgent")
        )
        if not isinstance(known, wanted):
            agent = "AsyncPayloadAgent" if async_client else "PayloadAgent"
            raise ConfigurationError(
                f"model: {agent} calls {method}() on its model (the {wanted.__name__} protocol), "
                f"which {type(model).__qualname__} does not have; use {other} with it"
            )
        return known
    if not isinstance(model, str) and model_name is None:
        raise ConfigurationError(
            f"model: expected a Model, a 'provider:MODEL' string or an SDK client with "
            f"model_name= (for example PayloadAgent(openai.OpenAI(), model_name='gpt-4.1-mini'))"
            f", found {type(model).__module__}.{type(model).__qualname__} without model_name"
        )
    if isinstance(model, str):
        return infer_model(model, model_name, async_client=async_client, api=api)
    return infer_model(model, model_name, api=api)


def _check_options(
    output_mode: Any, max_retries: Any, token_budget: Any, offload_nodes: Any
) -> None:
    """``ConfigurationError`` for an option of the wrong kind (before any request)."""
    if output_mode not in OUTPUT_MODES:
        raise ConfigurationError(
            f"output_mode: expected one of {', '.join(OUTPUT_MODES)}, found {output_mode!r}"
        )
    if isinstance(max_retries, bool) or not isinstance(max_retries, int | Retrying | AsyncRetrying):
        raise ConfigurationError(
            f"max_retries: expected an int >= 0 or a tenacity Retrying/AsyncRetrying, "
            f"found {type(max_retries).__name__}"
        )
    if isinstance(max_retries, int) and max_retries < 0:
        raise ConfigurationError(f"max_retries: expected an int >= 0, found {max_retries}")
    if token_budget is not None and (
        isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1
    ):
        raise ConfigurationError(
            f"token_budget: expected a positive int or None, found {token_budget!r}"
        )
    if offload_nodes is not None and (
        isinstance(offload_nodes, bool) or not isinstance(offload_nodes, int) or offload_nodes < 0
    ):
        raise ConfigurationError(
            f"offload_nodes: expected an int >= 0 or None, found {offload_nodes!r}"
        )


def _guards_and_rules(
    guards: Sequence[Guard],
    permissions: Any,
    read_scope: Any,
    rules_text: str | Sequence[str] | None,
    read_only: str | Sequence[str] | None = None,
) -> tuple[list[Guard], Any, str | None]:
    """Every guard of the agent (``permissions``, ``read_only`` and ``read_scope`` included,
    each checked), the read scope in effect (``read_scope=`` or one passed in ``guards=``) and
    the rules text of the system prompt (``rules_text``, then each guard's ``describe()``)."""
    all_guards = list(check_guards(guards, "guards"))
    if permissions is not None:
        all_guards.append(check_guard(permissions, "permissions"))
    if read_only:
        all_guards.append(_read_only_guard(read_only))
    given = read_scope
    read_scope = read_scope_of(all_guards, read_scope, "read_scope")
    if given is not None and not any(g is given for g in all_guards):
        if not callable(getattr(read_scope, "project", None)):
            raise ConfigurationError(
                f"read_scope: expected an object with project(payload) (such as "
                f"agent_payload.guards.ReadScope), found {type(read_scope).__name__}"
            )
        all_guards.append(check_guard(read_scope, "read_scope"))
    return all_guards, read_scope, _prompts.guard_rules(rules_text, all_guards)


def _read_only_guard(read_only: str | Sequence[str]) -> Permissions:
    """``read_only=`` as what it promises (issue 30): a deny rule per path, enforced like
    ``Permissions(deny=...)`` and stated in the prompt by that guard's ``describe()``."""
    paths = [read_only] if isinstance(read_only, str) else list(read_only)
    try:
        return Permissions(deny=paths)
    except ConfigurationError as exc:
        raise ConfigurationError(f"read_only: {exc}") from exc


class _BaseAgent(Generic[M]):
    """Configuration shared by the sync and async agents (no I/O). ``M`` is the model protocol
    the agent calls: ``Model`` (``request``) or ``AsyncModel`` (``arequest``)."""

    _async_client = False

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
        self.offload_nodes = offload_nodes
        if not isinstance(prompt_caching, bool):
            raise ConfigurationError(
                f"prompt_caching: expected True or False, found {prompt_caching!r}"
            )
        if prompt_cache_key is not None and (
            not isinstance(prompt_cache_key, str) or not prompt_cache_key
        ):
            raise ConfigurationError(
                f"prompt_cache_key: expected a non-empty string or None, found {prompt_cache_key!r}"
            )
        self.prompt_caching = prompt_caching
        self.prompt_cache_key = prompt_cache_key
        if isinstance(max_reads, bool) or not isinstance(max_reads, int) or max_reads < 1:
            raise ConfigurationError(f"max_reads: expected an int >= 1, found {max_reads!r}")
        self.max_reads = max_reads
        self.model: M = _resolve_model(model, model_name, async_client=self._async_client, api=api)
        is_async = getattr(self.model, "is_async", None)
        if isinstance(is_async, bool) and is_async != self._async_client:
            kind, fix = (
                ("an async", "AsyncPayloadAgent") if is_async else ("a sync", "PayloadAgent")
            )
            prefix = "" if is_async else "Async"
            raise ConfigurationError(
                f"{type(self).__name__}: the model {self.model.model_name!r} wraps {kind} SDK "
                f"client; use {fix} with it, or build this agent on openai.{prefix}OpenAI / "
                f"anthropic.{prefix}Anthropic"
            )
        self.max_payload_tokens: int | None = _payload_budget(max_payload_tokens, self.model)
        self.output_mode: OutputMode = output_mode
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        all_guards, read_scope, rules = _guards_and_rules(
            guards, permissions, read_scope, rules_text, read_only
        )
        self.guards: tuple[Guard, ...] = tuple(all_guards)
        self.read_scope = read_scope
        self.rules_text = rules
        """The rules of the system prompt: ``rules_text``, then every guard's ``describe()``."""
        self.read_only = read_only
        self.validators: tuple[Validator, ...] = check_validators(validators, "validators")
        self.extra_instructions = extra_instructions
        self.token_budget = token_budget
        self.request_options: Mapping[str, Any] = dict(request_options or {})
        base = hooks or Hooks()
        self.hooks = Hooks(
            on_request=on_request or base.on_request,
            on_response=on_response or base.on_response,
            on_retry=on_retry or base.on_retry,
            on_success=on_success or base.on_success,
            on_error=on_error or base.on_error,
            on_progress=on_progress or base.on_progress,
        )
        self.stream = _check_stream(stream, self.model, self._async_client)
        if not self._async_client:
            self._require_sync(self.validators, self.hooks)

    def _require_sync(self, validators: Sequence[Validator], hooks: Hooks | None) -> None:
        """The sync agent cannot await: an async validator or hook is a
        ``ConfigurationError`` (issue 18), never a coroutine dropped with a warning."""
        named: list[tuple[str, object]] = [("validator", v) for v in validators]
        if hooks is not None:
            named += [(f.name, getattr(hooks, f.name)) for f in dataclasses.fields(hooks)]
        _callables.require_sync(
            type(self).__name__, named, "use AsyncPayloadAgent, or make it a plain function"
        )

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
        """The state of one run with this agent's settings (the payload prepared and checked,
        the marker chosen): what ``run`` drives attempt by attempt, and ``BatchJob`` round by
        round."""
        # Misuse and a stale payload are refused before any token is spent.
        check_payload_type(payload_type, "run(payload_type=...)")
        validators = check_validators(validators, "run(validators=...)")
        if expected_version is not None:
            check_version(payload, expected_version)
        extra = self.extra_instructions
        if extra_instructions:
            extra = f"{extra}\n\n{extra_instructions}" if extra else extra_instructions
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
            extra_instructions=extra,
            token_budget=self.token_budget,
            prompt_caching=self.prompt_caching,
            prompt_cache_key=self.prompt_cache_key,
            max_payload_tokens=self.max_payload_tokens,
            max_reads=self.max_reads,
        )
        state = RunState.start(payload, task, settings)
        state.run_id = run_id or uuid.uuid4().hex
        return state


def _check_stream(stream: object, model: Any, async_client: bool) -> bool:
    """``stream`` checked: a bool, and True only for a model that can stream."""
    if not isinstance(stream, bool):
        raise ConfigurationError(f"stream: expected True or False, found {stream!r}")
    wanted, method = (
        (AsyncStreamingModel, "astream_request")
        if async_client
        else (StreamingModel, "stream_request")
    )
    if stream and not isinstance(model, wanted):
        raise ConfigurationError(
            f"stream=True: the model {model.model_name!r} ({type(model).__qualname__}) cannot "
            f"stream its reply (it has no {method}()); use an OpenAI or Anthropic SDK client, "
            "or drop stream=True"
        )
    return stream


def _payload_budget(value: int | str | None, model: Model) -> int | None:
    """``max_payload_tokens`` resolved (``outline.resolve_max_payload_tokens``)."""
    return resolve_max_payload_tokens(value, model.model_name, "")


class PayloadAgent(_BaseAgent[Model]):
    """Edit payloads with a model through a sync client (``openai.OpenAI``,
    ``anthropic.Anthropic`` with ``model_name=``), a ``"openai:MODEL"`` /
    ``"anthropic:MODEL"`` string (a client built from the environment's API key), or any
    ``Model`` (``request``; ``agent_payload.testing.ScriptedModel`` in tests).

    Options:

    * ``output_mode``: ``"text"`` (JSON in the reply; every model), ``"tool"`` (a forced tool
      call whose input schema is the change request's), ``"json_schema"`` (OpenAI structured
      outputs; see ``agent_payload.schema`` for what strict mode cannot express).
    * ``max_retries`` (default 2): corrections after the first attempt, or a tenacity
      ``Retrying`` (its ``stop``/``wait``/``before``/``after``/``before_sleep`` are used, its
      ``retry`` condition is and-ed with ours). ``token_budget``: stop once that many tokens
      (input plus output, summed over attempts) are spent.
    * ``temperature``, ``max_tokens``, ``request_options`` (extra keyword arguments for the
      SDK call): passed through on every request.
    * ``prompt_caching`` (default True): mark the system prompt and the payload block for the
      provider's prompt cache (Anthropic ``cache_control`` breakpoints; OpenAI caches by itself
      and needs no marks). ``prompt_cache_key``: OpenAI's ``prompt_cache_key`` on every request
      (Chat Completions and Responses), for a higher cache hit rate across runs on one payload.
      Cached input is reported in ``result.usage.cached_input_tokens``.
    * ``guards``: ``Guard`` callables asked about every effective change (a finding of severity
      ``conflict`` sends the request back to the model, ``confirm`` asks the model once to
      confirm it, ``warning`` is recorded in the report); a guard with ``review(before, after,
      changes, per_change=False)`` is also asked about the whole merge. ``permissions``: one
      more guard (``agent_payload.guards.Permissions``). ``read_scope``: an object with
      ``project(payload)`` (``agent_payload.guards.ReadScope``): the model sees only the
      projection, corrections never show it more, and the scope guards writes. Every guard's
      ``describe()`` text, after ``rules_text`` (extra text for the prompt's rules section),
      goes into the system prompt's rules.
      ``read_only``: paths (rules like ``"id"`` or ``"items[*].sku"``) the model may not add,
      change or delete: enforced as ``Permissions(deny=read_only)`` and stated in the prompt. A
      ``ReadScope`` passed in ``guards`` is the read scope too (it hides what it guards).
    * ``validators``: ``(payload) -> None`` callables run on every merged payload (of the kind
      returned: the dict or list for dict/list payloads, the model instance for pydantic
      payloads); raise ``RetryWithFeedback``, ``ValueError`` or ``AssertionError`` (as in
      pydantic's own validators) to have the model try again with that message. Any other
      exception propagates (a bug in the validator is not the model's to fix).
    * ``api``: ``"chat"`` (default) or ``"responses"`` for an OpenAI client or string.
    * ``stream`` (default False): receive each reply as a stream through the SDK (Chat
      Completions, Responses, Anthropic ``messages.stream``), so a long change request from a
      slow server never waits out a read timeout in silence; ``on_progress(attempt,
      characters)`` hears of every piece. The reply is judged when whole, exactly as without
      streaming; a stream that breaks off is a retryable ``ProviderError``.
    * ``offload_nodes`` (``AsyncPayloadAgent``): see ``AsyncPayloadAgent.run``.
    * ``extra_instructions``: added to the system prompt. Hooks: see the module docstring.
    * ``max_payload_tokens`` (default ``"auto"``: a quarter of the model's context window when
      its name is known, else ``outline.DEFAULT_MAX_PAYLOAD_TOKENS``, 24,000; ``None``: never):
      when the payload as the user message would carry it (read scope applied) counts more
      tokens than this, the model is sent an **outline** of it within the budget
      (``agent_payload.outline``) and may call the read tools ``read_payload`` and
      ``find_in_payload`` (each answer within the budget too) before it sends the change
      request, which is judged exactly as in full mode. ``max_reads`` (default
      ``outline.DEFAULT_MAX_READS``, 8): read calls per run; one more ends the run with
      ``ReadsExhaustedError``, the payload unchanged. Reads are not attempts; their tokens
      count in ``usage`` and ``token_budget``; ``AgentResult.reads`` counts them and
      ``AgentResult.outlined`` says the outline was sent. Hooks ``on_request`` and
      ``on_response`` are called for read requests too.
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
        """Apply ``task`` to ``payload`` and return the updated copy (the same kind: dict,
        list, or the same pydantic class). The caller's payload is never modified.

        Raises ``RetriesExhaustedError`` when no usable change request came within the retry
        policy or the token budget, ``RefusalError`` when the model refused twice,
        ``ProviderError`` for transport failures (not retried here), ``InvalidPayloadError`` /
        ``LimitExceededError`` for a payload that cannot be edited (before any request).

        ``expected_version`` (from ``guards.payload_version``): the version the caller read the
        payload at; if ``payload`` is no longer that version, ``StalePayloadError`` is raised
        before any request. Commit the result with ``VersionedStore.replace(result.payload,
        expected_version=...)`` so an edit made meanwhile is never overwritten.

        ``run_id`` tags the run (default: a fresh uuid4 hex): ``AgentResult.run_id``, the
        ``run_id`` attribute of the log records and of a failed run's error. ``hooks``: this
        run's own hooks, called after the agent's (to tag logs per request, say).

        ``commit``: called with the accepted result before the run returns (a store writing
        it at the version the run read: ``PayloadStore.edit``); what it returns is returned
        (``None``: the result as is). A ``ConcurrentChangeError`` it raises (the request
        collided with an edit committed since, MERGE.md section 9) goes back to the model as
        a correction within the retries, like any other, and the next reply is judged against
        the error's ``current`` payload.
        """
        self._require_sync(validators, hooks)
        started = time.time_ns()
        state = self.start_run(
            payload, task, payload_type, validators, extra_instructions, expected_version, run_id
        )
        retrying = _retrying(self.max_retries, state, Retrying)
        hook_sets = (run_trace(self.model, state, started), self.hooks, hooks)
        try:
            for attempt in retrying:
                with attempt:
                    steps = _attempt(state, self.model.model_name, retrying, attempt, commit)

                    def do(step: _Step) -> Any:
                        kind, value = step
                        if kind == "hook":
                            return _call(hook_sets, *value)
                        if kind == "ask":
                            return self._ask(value, state.attempt, hook_sets)
                        if kind == "read":
                            return state.read_turn(value)
                        if kind == "judge":
                            return state.judge(value)
                        return state.commit(value, commit)  # type: ignore[arg-type]

                    result: AgentResult[Any] = _run_steps(steps, do)
        except RetryError as exc:
            error = _exhausted(state)
            _call(hook_sets, "on_error", error, state.attempt)
            raise error from (state.last_error or exc)
        except AgentPayloadError as exc:
            _log_failure(state, exc)
            _call(hook_sets, "on_error", exc, state.attempt)
            raise
        _call(hook_sets, "on_success", result)
        return result

    def _ask(
        self, request: ModelRequest, attempt: int, hook_sets: Sequence[Hooks | None]
    ) -> ModelReply:
        """One model request, streamed when the agent streams (``on_progress`` as it comes)."""
        if not self.stream:
            return self.model.request(request)

        def progress(characters: int) -> None:
            _call(hook_sets, "on_progress", attempt, characters)

        model: StreamingModel = self.model  # type: ignore[assignment]  # checked at __init__
        return model.stream_request(request, progress)


class AsyncPayloadAgent(_BaseAgent[AsyncModel]):
    """``PayloadAgent`` for async clients (``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic``,
    or any ``AsyncModel``, whose ``arequest`` is awaited). Same options; ``max_retries`` may be an
    ``AsyncRetrying``; hooks may be coroutine functions. Safe to run many times concurrently:
    each run has its own state and retry controller."""

    _async_client = True

    def _offload(self, payload: Any) -> bool:
        limit = self.offload_nodes
        return limit is not None and _more_nodes_than(payload, limit)

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
        """The async twin of ``PayloadAgent.run`` (same result, same errors; validators and
        hooks may be ``async def``, and are awaited).

        A payload of more than ``offload_nodes`` values (default ``OFFLOAD_NODES``; ``None``
        never, ``0`` always) is rendered, and every reply parsed, merged and validated, in a
        worker thread (one thread shared by all async agents: the work holds the GIL, so more
        threads would only make the loop wait longer), so the event loop keeps serving other
        tasks meanwhile; sync validators then run in that thread too. ``commit`` may be an
        ``async def`` (awaited)."""
        offload = self._offload(payload)
        started = time.time_ns()
        start = functools.partial(
            self.start_run,
            payload,
            task,
            payload_type,
            validators,
            extra_instructions,
            expected_version,
            run_id,
        )
        state = await _callables.off_loop(start) if offload else start()
        retrying = _retrying(self.max_retries, state, AsyncRetrying)
        hook_sets = (run_trace(self.model, state, started), self.hooks, hooks)
        try:
            async for attempt in retrying:
                with attempt:
                    steps = _attempt(state, self.model.model_name, retrying, attempt, commit)

                    async def do(step: _Step) -> Any:
                        kind, value = step
                        if kind == "hook":
                            return await _acall(hook_sets, *value)
                        if kind == "ask":
                            return await self._ask(value, state.attempt, hook_sets)
                        if kind == "read":
                            if offload:
                                return await _callables.off_loop(state.read_turn, value)
                            return state.read_turn(value)
                        if kind == "judge":
                            return await _callables.adrive(state.judge_steps(value), offload)
                        return await _acommit(state, value, commit)  # type: ignore[arg-type]

                    result: AgentResult[Any] = await _arun_steps(steps, do)
        except RetryError as exc:
            error = _exhausted(state)
            await _acall(hook_sets, "on_error", error, state.attempt)
            raise error from (state.last_error or exc)
        except AgentPayloadError as exc:
            _log_failure(state, exc)
            await _acall(hook_sets, "on_error", exc, state.attempt)
            raise
        await _acall(hook_sets, "on_success", result)
        return result

    async def _ask(
        self, request: ModelRequest, attempt: int, hook_sets: Sequence[Hooks | None]
    ) -> ModelReply:
        """One model request, streamed when the agent streams (``on_progress`` awaited)."""
        if not self.stream:
            return await self.model.arequest(request)

        async def progress(characters: int) -> None:
            await _acall(hook_sets, "on_progress", attempt, characters)

        model: AsyncStreamingModel = self.model  # type: ignore[assignment]  # checked at __init__
        return await model.astream_request(request, progress)


# --- one attempt, for both drivers ----------------------------------------------------------

_Step = tuple[str, Any]
"""What an attempt asks its driver to do: ``("hook", (name, *args))``, ``("ask", request)``
(the model's reply), ``("read", reply)`` (the next read request, or None), ``("judge",
reply)`` (the result, or the ``ModelReplyError`` to correct), ``("commit", result)``."""


def _attempt(
    state: RunState,
    model_name: str,
    retrying: Retrying | AsyncRetrying,
    attempt: Any,
    commit: Commit | None,
) -> Generator[_Step, Any, AgentResult[Any]]:
    """One attempt of a run, the same for ``PayloadAgent`` and ``AsyncPayloadAgent``: the
    request, the reads, the judgement and the commit, as steps their drivers carry out (sync,
    or awaited and partly in the worker thread)."""
    log = _RunLog(state)
    request = state.next_request()
    last = _is_last(retrying, attempt.retry_state)
    yield "hook", ("on_request", state.attempt, request, last)
    log.debug("attempt %d: requesting %s", state.attempt, model_name)
    reply = yield "ask", request
    yield "hook", ("on_response", state.attempt, reply, last)
    while (follow := (yield "read", reply)) is not None:
        log.debug("attempt %d: answered read %d", state.attempt, state.reads_used)
        yield "hook", ("on_request", state.attempt, follow, last)
        reply = yield "ask", follow
        yield "hook", ("on_response", state.attempt, reply, last)
    try:
        result: AgentResult[Any] = yield "judge", reply
        if commit is not None:
            result = yield "commit", result
    except ModelReplyError as exc:
        last = _retry_is_last(retrying, attempt.retry_state, state, exc)
        yield "hook", ("on_retry", state.attempt, exc.problems, last)
        raise
    return result


def _run_steps(steps: Generator[_Step, Any, T], do: Callable[[_Step], Any]) -> T:
    """Carry out ``steps`` in sync code: each step's value (or exception) goes back in."""
    value: Any = None
    error: BaseException | None = None
    while True:
        done, step = _callables.advance(steps, value, error)
        if done:
            return step  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = do(step)
        except BaseException as exc:
            error = exc


async def _arun_steps(steps: Generator[_Step, Any, T], do: Callable[[_Step], Awaitable[Any]]) -> T:
    """``_run_steps`` in async code: each step is awaited."""
    value: Any = None
    error: BaseException | None = None
    while True:
        done, step = _callables.advance(steps, value, error)
        if done:
            return step  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = await do(step)
        except BaseException as exc:
            error = exc


async def _acommit(state: RunState, result: AgentResult[Any], commit: Commit) -> AgentResult[Any]:
    """``RunState.commit`` for the async agent: an ``async def`` commit is awaited."""
    try:
        committed = commit(result)
        if inspect.isawaitable(committed):
            committed = await committed
    except ConcurrentChangeError as exc:
        state.collided(exc)
    return result if committed is None else committed
