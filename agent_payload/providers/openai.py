"""OpenAI adapters: Chat Completions (``OpenAIChatModel``) and the Responses API
(``OpenAIResponsesModel``) on the user's own ``openai.OpenAI`` / ``openai.AsyncOpenAI`` client,
which keeps its auth, ``base_url``, timeout and retries (this module never retries). Output
modes and streaming: docs/agent.md; prompt caching (``prompt_cache_key``): docs/outline.md.
"""

from __future__ import annotations

from abc import abstractmethod
from contextlib import AbstractContextManager
from typing import Any, Literal

from agent_payload._reply import is_truncation
from agent_payload.errors import ConfigurationError, ProviderError
from agent_payload.providers._common import (
    Adapter,
    ResponseShape,
    SdkErrors,
    missing_sdk,
    split_system,
)
from agent_payload.providers.base import Message, ModelReply, ModelRequest, ToolCall
from agent_payload.providers.openai_stream import (
    ChatStreamReader,
    ResponsesStreamReader,
    chat_tool_call,
)
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

_ERRORS = SdkErrors(
    provider=PROVIDER,
    api="OpenAI",
    client_class="openai.OpenAI",
    expected_server="an OpenAI-compatible server",
    sdk=openai,
    base=openai.OpenAIError,
)


def map_openai_errors(model: str, client: Any = None) -> AbstractContextManager[None]:
    """Map the openai SDK's exceptions raised inside the block (sync or async calls) to
    ``ProviderError`` (chained)."""
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


class _OpenAIModel(Adapter):
    """What both OpenAI adapters share: the client, the request parameters, the usage."""

    provider = PROVIDER
    _errors = _ERRORS
    _api = "OpenAI"
    _sync_client = "openai.OpenAI"
    _async_client = "openai.AsyncOpenAI"
    _build_hint = "openai.OpenAI(api_key=..., base_url=...)"
    _example_model = "gpt-4.1-mini"
    max_tokens_param: str

    def _client_is_async(self, client: Any) -> bool | None:
        if isinstance(client, openai.AsyncOpenAI):
            return True
        return False if isinstance(client, openai.OpenAI) else None

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for the API call (pure; public for tests)."""
        params = self._messages(request)
        if request.max_tokens is not None:
            params[self.max_tokens_param] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        schema = dict(request.schema) if request.schema is not None else {"type": "object"}
        forced = request.output_mode == "tool"
        tools = [self._tool(request.tool_name, request.tool_description, schema)] if forced else []
        tools += [self._tool(t.name, t.description, dict(t.parameters)) for t in request.tools]
        if tools:  # the change-request tool first, then outline mode's reads
            params["tools"] = tools
        if forced:
            params["tool_choice"] = "required" if request.tools else self._forced(request.tool_name)
        elif request.output_mode == "json_schema":
            named = {"name": request.tool_name, "description": request.tool_description}
            params.update(self._structured({**named, "schema": schema, "strict": False}))
        if request.prompt_cache_key is not None:
            params["prompt_cache_key"] = request.prompt_cache_key
        params.update(self.defaults)
        params.update(request.extra)
        return params

    @abstractmethod
    def _messages(self, request: ModelRequest) -> dict[str, Any]:
        """The model and the messages, in this API's shape."""

    @abstractmethod
    def _tool(self, name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
        """A function tool in this API's shape."""

    @abstractmethod
    def _forced(self, name: str) -> dict[str, Any]:
        """The ``tool_choice`` forcing the function ``name``."""

    @abstractmethod
    def _structured(self, named: dict[str, Any]) -> dict[str, Any]:
        """The parameters asking for JSON output of the schema ``named``."""

    _usage_names: tuple[str, str, str]
    """The usage's input and output tokens and input details (cache reads and writes)."""
    _usage_types: tuple[type, type]
    """The types of the usage and of its input details."""

    def _usage(self, shape: ResponseShape, result: object) -> Usage:
        inputs, outputs, details_name = self._usage_names
        usage_type, details_type = self._usage_types
        usage = shape.field(result, "usage", "usage", usage_type, "a usage object", optional=True)
        where = f"usage.{details_name}"
        found = shape.field(usage, details_name, where, details_type, "an object", optional=True)
        return Usage(
            shape.tokens(usage, inputs),
            shape.tokens(usage, outputs),
            1,
            cached_input_tokens=shape.tokens(found, "cached_tokens", where),
            cache_write_input_tokens=shape.tokens(found, "cache_write_tokens", where),
        )

    def _stream_params(self, request: ModelRequest) -> dict[str, Any]:
        return {**self.build_params(request), "stream": True}

    def _open_stream(self, params: dict[str, Any]) -> Any:
        return self._create(params)


class OpenAIChatModel(_OpenAIModel):
    """A ``Model`` on the Chat Completions API (``client.chat.completions.create``).

    ``defaults`` are passed to every call (``ModelRequest.extra`` overrides them).
    ``max_tokens_param`` names the limit parameter: ``"max_completion_tokens"`` (OpenAI's
    current name, required by reasoning models) or ``"max_tokens"`` (older compatible servers).
    """

    _result_type = ChatCompletion
    _result_kind = "chat.completion"
    _usage_names = ("prompt_tokens", "completion_tokens", "prompt_tokens_details")
    _usage_types = (CompletionUsage, PromptTokensDetails)

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

    def _messages(self, request: ModelRequest) -> dict[str, Any]:
        return {"model": self.model_name, "messages": [_chat_message(m) for m in request.messages]}

    def _tool(self, name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
        function = {"name": name, "description": description, "parameters": parameters}
        return {"type": "function", "function": function}

    def _forced(self, name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name}}

    def _structured(self, named: dict[str, Any]) -> dict[str, Any]:
        return {"response_format": {"type": "json_schema", "json_schema": named}}

    def _read(
        self, completion: ChatCompletion, request: ModelRequest, shape: ResponseShape
    ) -> ModelReply:
        if not completion.choices:
            raise ProviderError(
                f"OpenAI model {self.model_name!r}: the chat completion {completion.id!r} has no "
                "choices; expected one. Try again, or check the server behind base_url.",
                provider=PROVIDER,
                status_code=200,
                retryable=True,
            )
        choice = shape.items(completion, "choices", "choices", "choice objects")[0]
        where = "choices[0].message"
        message = shape.field(choice, "message", where, ChatCompletionMessage, "a message object")
        text = shape.text(message, "content", where, optional=True) or ""
        calls: list[Any] = []
        if request.output_mode == "tool" or request.tools:
            at = f"{where}.tool_calls"
            calls = shape.field(message, "tool_calls", at, list, "an array", optional=True) or []
        functions = [c for c in calls if isinstance(c, ChatCompletionMessageFunctionToolCall)]
        if request.output_mode == "tool":
            chosen = next((c for c in functions if c.function.name == request.tool_name), None)
            if chosen is None and functions and not request.tools:
                chosen = functions[0]
            if chosen is not None:
                text = shape.text(chosen.function, "arguments", f"{where}.tool_calls[].function")
        refusal = shape.text(message, "refusal", where, optional=True)
        finish = shape.text(choice, "finish_reason", "choices[0]", optional=True)
        tool_calls: tuple[ToolCall, ...] = ()
        if request.tools:
            tool_calls = tuple(
                ToolCall(c.id, c.function.name, c.function.arguments) for c in functions
            )
        return ModelReply(
            text=text,
            tool_calls=tool_calls,
            finish_reason=finish,
            truncated=is_truncation(finish),
            refusal=refusal or None,
            usage=self._usage(shape, completion),
            model_name=shape.text(completion, "model", optional=True),
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

    The leading system message becomes ``instructions``; ``defaults`` are passed to every call
    (e.g. ``store=False``; ``ModelRequest.extra`` overrides them). ``finish_reason`` is the
    ``status``, or an incomplete response's ``incomplete_details.reason``
    (``"max_output_tokens"`` marks a truncated reply).
    """

    _api = "OpenAI Responses"
    _result_type = Response
    _result_kind = "response"
    _usage_names = ("input_tokens", "output_tokens", "input_tokens_details")
    _usage_types = (ResponseUsage, InputTokensDetails)
    max_tokens_param = "max_output_tokens"

    def _messages(self, request: ModelRequest) -> dict[str, Any]:
        system, rest = split_system(request.messages)
        items = [item for m in rest for item in _responses_items(m)]
        params: dict[str, Any] = {"model": self.model_name, "input": items}
        if system is not None:
            params["instructions"] = system
        return params

    def _tool(self, name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "function",
            "name": name,
            "description": description,
            "parameters": parameters,
            "strict": False,
        }

    def _forced(self, name: str) -> dict[str, Any]:
        return {"type": "function", "name": name}

    def _structured(self, named: dict[str, Any]) -> dict[str, Any]:
        return {"text": {"format": {"type": "json_schema", **named}}}

    def _read(self, response: Response, request: ModelRequest, shape: ResponseShape) -> ModelReply:
        texts: list[str] = []
        refusals: list[str] = []
        arguments: str | None = None
        calls: list[ToolCall] = []
        for n, item in enumerate(shape.items(response, "output", "output", "output items")):
            kind = shape.text(item, "type", f"output[{n}]")
            if kind == "message":
                parts = shape.items(item, "content", f"output[{n}].content", "content parts")
                for m, part in enumerate(parts):
                    where = f"output[{n}].content[{m}]"
                    part_kind = shape.text(part, "type", where)
                    if part_kind == "output_text":
                        texts.append(shape.text(part, "text", where))
                    elif part_kind == "refusal":
                        refusals.append(shape.text(part, "refusal", where))
            elif kind == "function_call" and (request.output_mode == "tool" or request.tools):
                name = shape.text(item, "name", f"output[{n}]")
                call_arguments = shape.text(item, "arguments", f"output[{n}]")
                if request.tools:
                    call_id = shape.text(item, "call_id", f"output[{n}]")
                    calls.append(ToolCall(call_id, name, call_arguments))
                if request.output_mode == "tool" and (
                    name == request.tool_name or (arguments is None and not request.tools)
                ):
                    arguments = call_arguments
        status = shape.text(response, "status", optional=True)
        reason = shape.text(
            response.incomplete_details, "reason", "incomplete_details", optional=True
        )
        return ModelReply(
            text=arguments if arguments is not None else "".join(texts),
            tool_calls=tuple(calls),
            finish_reason=reason if status == "incomplete" and reason else status,
            truncated=is_truncation(reason),
            refusal="\n".join(refusals) or None,
            usage=self._usage(shape, response),
            model_name=shape.text(response, "model", optional=True),
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
            "tool_calls": [chat_tool_call(c.id, c.name, c.arguments) for c in message.tool_calls],
        }
    return {"role": message.role, "content": message.content}


def _responses_items(message: Message) -> list[dict[str, Any]]:
    """One message as Responses input items: a tool call is a ``function_call`` item (after
    the text written beside it, if any), a tool result a ``function_call_output`` item."""
    if message.role == "tool":
        output = {"call_id": message.tool_call_id, "output": message.content}
        return [{"type": "function_call_output", **output}]
    items: list[dict[str, Any]] = []
    if message.content or not message.tool_calls:
        items.append({"role": message.role, "content": message.content})
    items.extend(
        {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
        for c in message.tool_calls
    )
    return items
