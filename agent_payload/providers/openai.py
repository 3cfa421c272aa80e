# Over 650 lines (672): two adapters (Chat Completions and Responses) sharing one base, with
# the tool-call mapping of each API beside its request builder, and their streamed calls (the
# stream readers themselves live in openai_stream.py).
"""OpenAI adapters: Chat Completions (``OpenAIChatModel``) and the Responses API
(``OpenAIResponsesModel``), on the user's own ``openai.OpenAI`` / ``openai.AsyncOpenAI`` client.

The client keeps its auth, ``base_url`` (any OpenAI-compatible server: vLLM, Ollama, a LiteLLM
proxy), proxies, timeout and transport retries (``max_retries``): this module never retries.
SDK exceptions become ``ProviderError`` (chained) in one place, ``map_openai_errors``, used by the
sync and the async call sites.

Output modes (``ModelRequest.output_mode``):

* ``"text"``: the reply's message text.
* ``"tool"``: one function tool whose parameters are ``ModelRequest.schema``, forced with
  ``tool_choice``; the call's ``arguments`` (a JSON string) become ``ModelReply.text``.
* ``"json_schema"``: structured outputs (Chat: ``response_format={"type": "json_schema", ...}``;
  Responses: ``text.format``); the message text is the JSON.

Prompt caching: OpenAI caches the longest prefix a request shares with a recent one by
itself; the agent keeps that prefix long (system prompt, payload, then the task).
``ModelRequest.prompt_cache_key`` (``PayloadAgent(prompt_cache_key=)``) is sent as
``prompt_cache_key`` to both APIs when set. ``Usage.cached_input_tokens`` is the usage's
``cached_tokens`` (counted in ``input_tokens``, as OpenAI counts it) and
``Usage.cache_write_input_tokens`` its ``cache_write_tokens`` where the server reports them.

Streaming (``stream_request`` / ``astream_request``, for ``PayloadAgent(stream=True)``): the
same call with ``stream=True`` (Chat Completions also asks for the usage chunk with
``stream_options``); ``providers.openai_stream`` gathers the events into the object
``parse_reply`` reads, so the ``ModelReply`` is the one the plain call gives.

``strict: true`` is never sent (the change-request schema cannot be strict:
``agent_payload.schema``); the Responses API, strict unless told otherwise, gets ``strict:
false``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Literal

from agent_payload._reply import is_truncation
from agent_payload.errors import ConfigurationError, ProviderError
from agent_payload.providers._common import (
    ResponseShape,
    SdkErrors,
    StreamProgress,
    check_client_kind,
    ensure_requests_allowed,
    missing_sdk,
    model_name_argument,
    not_an_api_response,
    split_system,
)
from agent_payload.providers.base import Message, ModelReply, ModelRequest, ToolCall
from agent_payload.providers.openai_stream import ChatStreamReader, ResponsesStreamReader
from agent_payload.usage import Usage

try:
    import openai
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessage,
        ChatCompletionMessageFunctionToolCall,
        ChatCompletionToolMessageParam,
    )
    from openai.types.completion_usage import CompletionUsage, PromptTokensDetails
    from openai.types.responses import FunctionToolParam, Response, ResponseUsage
    from openai.types.responses.response_input_param import FunctionCallOutput
    from openai.types.responses.response_usage import InputTokensDetails
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_sdk("openai", _exc) from _exc

# The SDK's own param types, for ``agent_payload.tools`` (which imports them only while type
# checking: without the extra they are ``Any`` to a type checker, plain dicts at run time).
OpenAIToolParam = ChatCompletionFunctionToolParam
OpenAIToolMessageParam = ChatCompletionToolMessageParam
ResponsesToolParam = FunctionToolParam
ResponsesToolOutputParam = FunctionCallOutput

__all__ = ["OpenAIChatModel", "OpenAIResponsesModel", "build_openai_client", "map_openai_errors"]

PROVIDER = "openai"

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


_ERRORS = SdkErrors(
    provider=PROVIDER,
    api="OpenAI",
    client_class="openai.OpenAI",
    expected_server="an OpenAI-compatible server",
    timeout=openai.APITimeoutError,
    connection=openai.APIConnectionError,
    status=openai.APIStatusError,
    validation=openai.APIResponseValidationError,
    base=openai.OpenAIError,
)


def map_openai_errors(model: str, client: Any = None) -> AbstractContextManager[None]:
    """Map the openai SDK's exceptions raised inside the block to ``ProviderError`` (chained).

    Used around every SDK call, sync and async alike (a ``with`` around an ``await`` works).
    """
    return _ERRORS.mapped(model, client)


def build_openai_client(*, async_client: bool = False, **kwargs: Any) -> Any:
    """An ``openai.OpenAI`` (or ``AsyncOpenAI``) configured from the environment by the SDK
    (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ...); ``kwargs`` go to the client."""
    cls = openai.AsyncOpenAI if async_client else openai.OpenAI
    try:
        return cls(**kwargs)
    except openai.OpenAIError as exc:
        raise ConfigurationError(
            f"Could not build an {cls.__name__} client from the environment: {exc} Set "
            "OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server), or pass "
            "your own client."
        ) from exc


class _OpenAIModel(ABC):
    """What both OpenAI adapters share: the client check, options, the blocking switch and the
    sync/async calls (each adapter supplies ``build_params``, ``_create`` and ``parse_reply``)."""

    _api = "OpenAI"

    def __init__(
        self,
        client: Any,
        model_name: str | None = None,
        **defaults: Any,
    ) -> None:
        model_name = model_name_argument(type(self).__name__, model_name, defaults)
        if isinstance(client, openai.AsyncOpenAI):
            self._is_async = True
        elif isinstance(client, openai.OpenAI):
            self._is_async = False
        else:
            raise ConfigurationError(
                f"{type(self).__name__}(client=...): expected an openai.OpenAI or "
                f"openai.AsyncOpenAI client, got {type(client).__module__}."
                f"{type(client).__qualname__}. Build one with openai.OpenAI(api_key=..., "
                "base_url=...) or use agent_payload.providers.infer_model('openai:MODEL')."
            )
        if not isinstance(model_name, str) or not model_name:
            raise ConfigurationError(
                f"{type(self).__name__}(model_name=...): expected a model name such as "
                f"'gpt-4.1-mini', got {model_name!r}."
            )
        self.client = client
        self.model_name = model_name
        self.defaults: dict[str, Any] = dict(defaults)

    @property
    def provider(self) -> str:
        return PROVIDER

    @property
    def is_async(self) -> bool:
        return self._is_async

    def _check_sync(self, wanted_async: bool) -> None:
        check_client_kind(
            type(self).__name__,
            self.model_name,
            is_async=self._is_async,
            wanted_async=wanted_async,
            sync_client="openai.OpenAI",
            async_client="openai.AsyncOpenAI",
        )
        ensure_requests_allowed(self.client.base_url, provider=PROVIDER, model=self.model_name)

    def _shape(self, kind: str) -> ResponseShape:
        return ResponseShape(
            provider=PROVIDER,
            api=self._api,
            model=self.model_name,
            kind=kind,
            expected_server=_ERRORS.expected_server,
        )

    @staticmethod
    def _usage(
        shape: ResponseShape, usage: object, names: tuple[str, str, str], details: type
    ) -> Usage:
        """``Usage`` of one call: input and output tokens (``names``), and the cache reads and
        writes of the input details (``names[0]`` with ``_details``; 0 where not reported)."""
        inputs, outputs, details_name = names
        found = shape.field(
            usage, details_name, f"usage.{details_name}", details, "an object", optional=True
        )
        where = f"usage.{details_name}"
        return Usage(
            shape.tokens(usage, inputs, f"usage.{inputs}"),
            shape.tokens(usage, outputs, f"usage.{outputs}"),
            1,
            cached_input_tokens=shape.tokens(found, "cached_tokens", f"{where}.cached_tokens"),
            cache_write_input_tokens=shape.tokens(
                found, "cache_write_tokens", f"{where}.cache_write_tokens"
            ),
        )

    def _cache_params(self, request: ModelRequest) -> dict[str, Any]:
        """``prompt_cache_key`` when the request sets one (both APIs name it so)."""
        if request.prompt_cache_key is None:
            return {}
        return {"prompt_cache_key": request.prompt_cache_key}

    def _named_schema(self, request: ModelRequest, schema: dict[str, Any]) -> dict[str, Any]:
        """The schema of ``"json_schema"`` output as both APIs name it (Chat:
        ``response_format.json_schema``; Responses: ``text.format``, beside ``type``)."""
        return {
            "name": request.tool_name,
            "description": request.tool_description,
            "schema": schema,
            "strict": False,
        }

    @abstractmethod
    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for the API call (pure; public for tests)."""

    @abstractmethod
    def parse_reply(self, result: object, request: ModelRequest) -> ModelReply:
        """A ``ModelReply`` from the API call's result (pure; public for tests)."""

    @abstractmethod
    def _create(self, params: dict[str, Any]) -> Any:
        """Call the API with ``params`` (a coroutine on an async client)."""

    def request(self, request: ModelRequest) -> ModelReply:
        self._check_sync(wanted_async=False)
        params = self.build_params(request)
        with map_openai_errors(self.model_name, self.client):
            result = self._create(params)
        return self.parse_reply(result, request)

    async def arequest(self, request: ModelRequest) -> ModelReply:
        self._check_sync(wanted_async=True)
        params = self.build_params(request)
        with map_openai_errors(self.model_name, self.client):
            result = await self._create(params)
        return self.parse_reply(result, request)

    def _stream_params(self, request: ModelRequest) -> dict[str, Any]:
        return {**self.build_params(request), "stream": True}

    @abstractmethod
    def _reader(self) -> ChatStreamReader | ResponsesStreamReader:
        """A fresh reader of this API's event stream (``providers.openai_stream``)."""

    def stream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply:
        """``request`` with the reply streamed (``stream=True``): ``on_progress(characters)``
        after each piece; the ``ModelReply`` once it is whole (a broken stream: a retryable
        ``ProviderError``)."""
        self._check_sync(wanted_async=False)
        params = self._stream_params(request)
        progress, reader = StreamProgress(on_progress), self._reader()
        with map_openai_errors(self.model_name, self.client):
            stream = self._create(params)
        with stream, _ERRORS.streamed(self.model_name, progress):
            for event in stream:
                progress.add(reader.feed(event))
            result = reader.result()
        return self.parse_reply(result, request)

    async def astream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply:
        """``stream_request`` on an async client (an awaitable from ``on_progress`` is awaited)."""
        self._check_sync(wanted_async=True)
        params = self._stream_params(request)
        progress, reader = StreamProgress(on_progress), self._reader()
        with map_openai_errors(self.model_name, self.client):
            stream = await self._create(params)
        async with stream:
            with _ERRORS.streamed(self.model_name, progress):
                async for event in stream:
                    outcome = progress.add(reader.feed(event))
                    if inspect.isawaitable(outcome):
                        await outcome
                result = reader.result()
        return self.parse_reply(result, request)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_name={self.model_name!r}, async={self._is_async})"


class OpenAIChatModel(_OpenAIModel):
    """A ``Model`` on the Chat Completions API (``client.chat.completions.create``).

    ``defaults`` are passed to every call (``ModelRequest.extra`` overrides them).
    ``max_tokens_param`` names the limit parameter: ``"max_completion_tokens"`` (OpenAI's
    current name, required by reasoning models) or ``"max_tokens"`` (older compatible servers).
    """

    def __init__(
        self,
        client: Any,
        model_name: str | None = None,
        *,
        max_tokens_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        **defaults: Any,
    ) -> None:
        super().__init__(client, model_name, **defaults)
        self.max_tokens_param = max_tokens_param

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for ``chat.completions.create`` (pure; public for tests)."""
        params: dict[str, Any] = {
            "model": self.model_name,
            "messages": [_chat_message(m) for m in request.messages],
        }
        if request.max_tokens is not None:
            params[self.max_tokens_param] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        schema = dict(request.schema) if request.schema is not None else _ANY_OBJECT
        if request.output_mode == "tool":
            function: dict[str, Any] = {
                "name": request.tool_name,
                "description": request.tool_description,
                "parameters": schema,
            }
            params["tools"] = [{"type": "function", "function": function}]
            params["tool_choice"] = {"type": "function", "function": {"name": request.tool_name}}
        elif request.output_mode == "json_schema":
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": self._named_schema(request, schema),
            }
        params.update(self._cache_params(request))
        if request.tools:  # outline mode's read tools, after the change-request tool
            params.setdefault("tools", []).extend(
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            )
            if request.output_mode == "tool":
                params["tool_choice"] = "required"
        params.update(self.defaults)
        params.update(request.extra)
        return params

    def parse_reply(self, completion: object, request: ModelRequest) -> ModelReply:
        """A ``ModelReply`` from a ``ChatCompletion`` (pure; public for tests)."""
        if not isinstance(completion, ChatCompletion):
            raise not_an_api_response(
                provider=PROVIDER,
                api="OpenAI",
                model=self.model_name,
                kind="chat.completion",
                result=completion,
            )
        if not completion.choices:
            raise ProviderError(
                f"OpenAI model {self.model_name!r}: the chat completion {completion.id!r} has no "
                "choices; expected one. Try again, or check the server behind base_url.",
                provider=PROVIDER,
                status_code=200,
                retryable=True,
            )
        shape = self._shape("chat completion")
        with shape.guarded():
            return self._read_completion(completion, request, shape)

    def _read_completion(
        self, completion: ChatCompletion, request: ModelRequest, shape: ResponseShape
    ) -> ModelReply:
        choices = shape.items(completion, "choices", "choices", "choice objects")
        choice = choices[0]
        message = shape.field(
            choice, "message", "choices[0].message", ChatCompletionMessage, "a message object"
        )
        where = "choices[0].message"
        text = shape.field(message, "content", f"{where}.content", str, "text", optional=True)
        text = text or ""
        calls: list[Any] = []
        if request.output_mode == "tool" or request.tools:
            calls = (
                shape.field(
                    message, "tool_calls", f"{where}.tool_calls", list, "an array", optional=True
                )
                or []
            )
        if request.output_mode == "tool":
            functions = [
                call.function
                for call in calls
                if isinstance(call, ChatCompletionMessageFunctionToolCall)
            ]
            chosen = next((f for f in functions if f.name == request.tool_name), None)
            if chosen is None and functions and not request.tools:
                chosen = functions[0]
            if chosen is not None:
                text = shape.field(
                    chosen, "arguments", f"{where}.tool_calls[].function.arguments", str, "text"
                )
        refusal = shape.field(message, "refusal", f"{where}.refusal", str, "text", optional=True)
        finish = shape.field(
            choice, "finish_reason", "choices[0].finish_reason", str, "text", optional=True
        )
        usage = shape.field(
            completion, "usage", "usage", CompletionUsage, "a usage object", optional=True
        )
        model = shape.field(completion, "model", "model", str, "text", optional=True)
        tool_calls: tuple[ToolCall, ...] = ()
        if request.tools:
            tool_calls = tuple(
                ToolCall(call.id, call.function.name, call.function.arguments)
                for call in calls
                if isinstance(call, ChatCompletionMessageFunctionToolCall)
            )
        return ModelReply(
            text=text,
            tool_calls=tool_calls,
            finish_reason=finish,
            truncated=is_truncation(finish),
            refusal=refusal or None,
            usage=self._usage(
                shape,
                usage,
                ("prompt_tokens", "completion_tokens", "prompt_tokens_details"),
                PromptTokensDetails,
            ),
            model_name=model,
            raw=completion,
        )

    def _create(self, params: dict[str, Any]) -> Any:
        return self.client.chat.completions.create(**params)

    def _stream_params(self, request: ModelRequest) -> dict[str, Any]:
        params = super()._stream_params(request)
        params.setdefault("stream_options", {"include_usage": True})  # else no usage comes
        return params

    def _reader(self) -> ChatStreamReader:
        return ChatStreamReader()


class OpenAIResponsesModel(_OpenAIModel):
    """A ``Model`` on the Responses API (``client.responses.create``).

    The leading system message becomes ``instructions``; the others go to ``input``.
    ``defaults`` are passed to every call (e.g. ``store=False``, ``reasoning={...}``);
    ``ModelRequest.extra`` overrides them. ``finish_reason`` is the response's ``status``
    (``"completed"``) or, for an incomplete response, its ``incomplete_details.reason``
    (``"max_output_tokens"`` marks a truncated reply).
    """

    _api = "OpenAI Responses"

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for ``responses.create`` (pure; public for tests)."""
        system, rest = split_system(request.messages)
        params: dict[str, Any] = {
            "model": self.model_name,
            "input": [item for m in rest for item in _responses_items(m)],
        }
        if system is not None:
            params["instructions"] = system
        if request.max_tokens is not None:
            params["max_output_tokens"] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        schema = dict(request.schema) if request.schema is not None else _ANY_OBJECT
        if request.output_mode == "tool":
            params["tools"] = [
                {
                    "type": "function",
                    "name": request.tool_name,
                    "description": request.tool_description,
                    "parameters": schema,
                    "strict": False,
                }
            ]
            params["tool_choice"] = {"type": "function", "name": request.tool_name}
        elif request.output_mode == "json_schema":
            params["text"] = {
                "format": {"type": "json_schema", **self._named_schema(request, schema)}
            }
        params.update(self._cache_params(request))
        if request.tools:  # outline mode's read tools, after the change-request tool
            params.setdefault("tools", []).extend(
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                    "strict": False,
                }
                for t in request.tools
            )
            if request.output_mode == "tool":
                params["tool_choice"] = "required"
        params.update(self.defaults)
        params.update(request.extra)
        return params

    def parse_reply(self, response: object, request: ModelRequest) -> ModelReply:
        """A ``ModelReply`` from a ``Response`` (pure; public for tests)."""
        if not isinstance(response, Response):
            raise not_an_api_response(
                provider=PROVIDER,
                api="OpenAI",
                model=self.model_name,
                kind="response",
                result=response,
            )
        shape = self._shape("response")
        with shape.guarded():
            return self._read_response(response, request, shape)

    def _read_response(
        self, response: Response, request: ModelRequest, shape: ResponseShape
    ) -> ModelReply:
        texts: list[str] = []
        refusals: list[str] = []
        arguments: str | None = None
        calls: list[ToolCall] = []
        for n, item in enumerate(shape.items(response, "output", "output", "output items")):
            kind = shape.field(item, "type", f"output[{n}].type", str, "text")
            if kind == "message":
                parts = shape.items(item, "content", f"output[{n}].content", "content parts")
                for m, part in enumerate(parts):
                    where = f"output[{n}].content[{m}]"
                    part_kind = shape.field(part, "type", f"{where}.type", str, "text")
                    if part_kind == "output_text":
                        texts.append(shape.field(part, "text", f"{where}.text", str, "text"))
                    elif part_kind == "refusal":
                        refusals.append(
                            shape.field(part, "refusal", f"{where}.refusal", str, "text")
                        )
            elif kind == "function_call" and (request.output_mode == "tool" or request.tools):
                name = shape.field(item, "name", f"output[{n}].name", str, "text")
                call_arguments = shape.field(
                    item, "arguments", f"output[{n}].arguments", str, "text"
                )
                if request.tools:
                    call_id = shape.field(item, "call_id", f"output[{n}].call_id", str, "text")
                    calls.append(ToolCall(call_id, name, call_arguments))
                if request.output_mode == "tool" and (
                    name == request.tool_name or (arguments is None and not request.tools)
                ):
                    arguments = call_arguments
        status = shape.field(response, "status", "status", str, "text", optional=True)
        details = response.incomplete_details
        reason = (
            shape.field(details, "reason", "incomplete_details.reason", str, "text", optional=True)
            if details is not None
            else None
        )
        if status == "incomplete" and reason:
            finish: str | None = reason
        else:
            finish = status
        usage = shape.field(
            response, "usage", "usage", ResponseUsage, "a usage object", optional=True
        )
        model = shape.field(response, "model", "model", str, "text", optional=True)
        return ModelReply(
            text=arguments if arguments is not None else "".join(texts),
            tool_calls=tuple(calls),
            finish_reason=finish,
            truncated=is_truncation(reason),
            refusal="\n".join(refusals) or None,
            usage=self._usage(
                shape,
                usage,
                ("input_tokens", "output_tokens", "input_tokens_details"),
                InputTokensDetails,
            ),
            model_name=model,
            raw=response,
        )

    def _create(self, params: dict[str, Any]) -> Any:
        return self.client.responses.create(**params)

    def _reader(self) -> ResponsesStreamReader:
        return ResponsesStreamReader()


def _chat_message(message: Message) -> dict[str, Any]:
    """One message in the Chat Completions shape (tool calls and tool results included)."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


def _responses_items(message: Message) -> list[dict[str, Any]]:
    """One message as Responses input items: a tool call is a ``function_call`` item (after
    the text written beside it, if any), a tool result a ``function_call_output`` item."""
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.content,
            }
        ]
    items: list[dict[str, Any]] = []
    if message.content or not message.tool_calls:
        items.append({"role": message.role, "content": message.content})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        }
        for call in message.tool_calls
    )
    return items
