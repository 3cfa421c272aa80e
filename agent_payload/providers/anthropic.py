"""Anthropic adapter: the Messages API (``AnthropicModel``) on the user's own
``anthropic.Anthropic`` / ``anthropic.AsyncAnthropic`` client (or a Bedrock / Vertex / Foundry
client with the same ``messages.create``), which keeps its auth, timeout and retries.
Output modes and streaming: docs/agent.md; the ``cache_control`` breakpoints: docs/outline.md.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from agent_payload._reply import is_refusal, is_truncation
from agent_payload.errors import ConfigurationError
from agent_payload.providers._common import (
    Adapter,
    ResponseShape,
    SdkErrors,
    StreamBroken,
    missing_sdk,
    split_system,
)
from agent_payload.providers.base import Message, ModelReply, ModelRequest, ToolCall
from agent_payload.usage import Usage

try:
    import anthropic
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import ToolParam, ToolResultBlockParam
    from anthropic.types import Usage as AnthropicUsage
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_sdk("anthropic", _exc) from _exc

# The SDK's own param types, for ``agent_payload.tools`` (type checking only; see openai.py).
AnthropicToolParam = ToolParam
AnthropicToolResultParam = ToolResultBlockParam

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicModel",
    "build_anthropic_client",
    "map_anthropic_errors",
]

PROVIDER = "anthropic"

DEFAULT_MAX_TOKENS = 8192
"""``max_tokens`` when neither the adapter nor the request sets one (the API requires it)."""

_ERRORS = SdkErrors(
    provider=PROVIDER,
    api="Anthropic",
    client_class="anthropic.Anthropic",
    expected_server="the Anthropic API",
    sdk=anthropic,
    base=anthropic.AnthropicError,
    missing_credentials="Set ANTHROPIC_API_KEY or pass api_key= to anthropic.Anthropic(...).",
)


def map_anthropic_errors(model: str, client: Any = None) -> AbstractContextManager[None]:
    """Map the anthropic SDK's exceptions raised inside the block (sync or async calls) to
    ``ProviderError`` (chained)."""
    return _ERRORS.mapped(model, client)


def build_anthropic_client(*, async_client: bool = False, **kwargs: Any) -> Any:
    """An ``anthropic.Anthropic`` (or ``AsyncAnthropic``) configured from the environment by the
    SDK (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``, ...); ``kwargs`` go to the client."""
    cls = anthropic.AsyncAnthropic if async_client else anthropic.Anthropic
    try:
        return cls(**kwargs)
    except anthropic.AnthropicError as exc:
        raise ConfigurationError(
            f"Could not build an {cls.__name__} client from the environment: {exc} Set "
            "ANTHROPIC_API_KEY, or pass your own client."
        ) from exc


MAX_CACHE_BREAKPOINTS = 4
"""Anthropic accepts at most this many ``cache_control`` breakpoints in one request."""

CACHE_CONTROL: Mapping[str, str] = {"type": "ephemeral"}
"""The breakpoint put on the system prompt and on the payload block (the 5-minute cache)."""


def _cached_blocks(message: Message) -> list[dict[str, Any]]:
    """``message.content`` as text blocks: its stable start, marked for the cache, then the rest."""
    cut = min(message.stable_prefix, len(message.content))
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": message.content[:cut], "cache_control": dict(CACHE_CONTROL)}
    ]
    if message.content[cut:]:
        blocks.append({"type": "text", "text": message.content[cut:]})
    return blocks


class AnthropicModel(Adapter):
    """A ``Model`` on the Messages API (``client.messages.create``); ``"json_schema"`` output is
    a forced tool, strict tool use is never asked for. ``max_tokens`` is sent when the request
    sets none (the API requires one); ``defaults`` go to every call (``ModelRequest.extra``
    overrides them)."""

    provider = PROVIDER
    _errors = _ERRORS
    _api = "Anthropic"
    _sync_client = "anthropic.Anthropic"
    _async_client = "anthropic.AsyncAnthropic"
    _build_hint = "anthropic.Anthropic(api_key=...)"
    _example_model = "claude-sonnet-4-6"
    _result_type = AnthropicMessage
    _result_kind = "message"

    def __init__(
        self,
        client: Any,
        model_name: str | None = None,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        **defaults: Any,
    ) -> None:
        super().__init__(client, model_name, **defaults)
        self.max_tokens = max_tokens

    def _client_is_async(self, client: Any) -> bool | None:
        if isinstance(client, anthropic.AsyncAnthropic):
            return True
        if isinstance(client, anthropic.Anthropic):
            return False
        create = getattr(getattr(client, "messages", None), "create", None)
        if create is None or not hasattr(client, "base_url"):
            return None
        return inspect.iscoroutinefunction(create)

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for ``messages.create`` (pure; public for tests)."""
        system, rest = split_system(request.messages)
        caching = request.prompt_caching
        breakpoints = MAX_CACHE_BREAKPOINTS - (1 if caching and system is not None else 0)
        messages: list[dict[str, Any]] = []
        for m in rest:
            if m.role == "tool" or m.tool_calls:  # outline mode's reads
                _append_tool_message(messages, m)
            elif caching and m.stable_prefix > 0 and breakpoints > 0:
                breakpoints -= 1
                messages.append({"role": m.role, "content": _cached_blocks(m)})
            else:
                messages.append({"role": m.role, "content": m.content})
        params: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": request.max_tokens if request.max_tokens is not None else self.max_tokens,
            "messages": messages,
        }
        if system is not None:
            params["system"] = (
                [{"type": "text", "text": system, "cache_control": dict(CACHE_CONTROL)}]
                if caching
                else system
            )
        forced = request.output_mode in ("tool", "json_schema")
        schema = request.schema if request.schema is not None else {"type": "object"}
        tools = [(request.tool_name, request.tool_description, schema)] if forced else []
        tools += [(t.name, t.description, t.parameters) for t in request.tools]  # outline's reads
        if tools:
            params["tools"] = [
                {"name": name, "description": text, "input_schema": dict(parameters)}
                for name, text, parameters in tools
            ]
        if forced:
            choice = (
                {"type": "any"} if request.tools else {"type": "tool", "name": request.tool_name}
            )
            params["tool_choice"] = {**choice, "disable_parallel_tool_use": True}
        params.update(self.defaults)
        params.update(request.extra)
        if request.temperature is not None:  # this SDK version has no such parameter
            extra_body = dict(params.get("extra_body") or {})
            extra_body.setdefault("temperature", request.temperature)
            params["extra_body"] = extra_body
        return params

    def _read(
        self, message: AnthropicMessage, request: ModelRequest, shape: ResponseShape
    ) -> ModelReply:
        texts: list[str] = []
        tool_input: str | None = None
        calls: list[ToolCall] = []
        forced = request.output_mode in ("tool", "json_schema")
        for n, block in enumerate(shape.items(message, "content", "content", "content blocks")):
            kind = shape.text(block, "type", f"content[{n}]")
            if kind == "text":
                texts.append(shape.text(block, "text", f"content[{n}]"))
            elif kind == "tool_use" and (request.tools or forced):
                name = shape.text(block, "name", f"content[{n}]")
                block_id = shape.text(block, "id", f"content[{n}]") if request.tools else ""
                if request.tools or tool_input is None or name == request.tool_name:
                    arguments = shape.field(
                        block, "input", f"content[{n}].input", dict, "an object"
                    )
                    dumped = json.dumps(arguments, ensure_ascii=False)
                    if request.tools:
                        calls.append(ToolCall(block_id, name, dumped))
                    if forced and (name == request.tool_name or not request.tools):
                        tool_input = dumped
        text = "".join(texts)
        stop = shape.text(message, "stop_reason", optional=True)
        refusal: str | None = None
        if is_refusal(stop):
            details = message.stop_details
            explanation = details.explanation if details is not None else None
            refusal = text or explanation or "The model refused (stop_reason 'refusal')."
        usage = shape.field(message, "usage", "usage", AnthropicUsage, "a usage object")
        cache_write = shape.tokens(usage, "cache_creation_input_tokens")
        cache_read = shape.tokens(usage, "cache_read_input_tokens")
        # Anthropic's input_tokens leaves out the cache reads and writes: Usage counts them in.
        inputs = shape.tokens(usage, "input_tokens", optional=False) + cache_write + cache_read
        model = shape.text(message, "model", optional=True)
        return ModelReply(
            text=tool_input if tool_input is not None else text,
            tool_calls=tuple(calls),
            finish_reason=stop,
            truncated=is_truncation(stop),
            refusal=refusal,
            usage=Usage(
                inputs,
                shape.tokens(usage, "output_tokens", optional=False),
                1,
                cached_input_tokens=cache_read,
                cache_write_input_tokens=cache_write,
            ),
            model_name=model,
            raw=message,
        )

    def _create(self, params: dict[str, Any]) -> Any:
        return self.client.messages.create(**params)

    def _open_stream(self, params: dict[str, Any]) -> Any:
        return self.client.messages.stream(**params)

    def _reader(self) -> _MessageStreamReader:
        return _MessageStreamReader()


class _MessageStreamReader:
    """Counts a ``messages.stream``'s pieces (the SDK assembles the message ``message_stop``
    carries: without one, the stream broke off)."""

    def __init__(self) -> None:
        self.message: Any = None

    def feed(self, event: Any) -> str:
        kind = getattr(event, "type", None)
        if kind == "content_block_delta":
            delta = event.delta
            return str(getattr(delta, "text", None) or getattr(delta, "partial_json", None) or "")
        if kind == "message_stop":
            self.message = event.message
        return ""

    def result(self) -> Any:
        if self.message is None:
            raise StreamBroken("the stream ended before message_stop")
        return self.message


def _append_tool_message(out: list[dict[str, Any]], m: Message) -> None:
    """Add an assistant message with tool calls (``tool_use`` blocks after its text, if any)
    or a tool result (a ``tool_result`` block of a user message; consecutive results share
    one, as the Messages API requires) to ``out``."""
    if m.role == "tool":
        block = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
        last = out[-1]["content"] if out and out[-1]["role"] == "user" else None
        if isinstance(last, list) and all(b.get("type") == "tool_result" for b in last):
            last.append(block)
        else:
            out.append({"role": "user", "content": [block]})
        return
    blocks: list[dict[str, Any]] = []
    if m.content:
        blocks.append({"type": "text", "text": m.content})
    for call in m.tool_calls:
        try:
            arguments = json.loads(call.arguments) if call.arguments else {}
        except ValueError:
            arguments = {}
        block = {"type": "tool_use", "id": call.id, "name": call.name}
        blocks.append({**block, "input": arguments if isinstance(arguments, dict) else {}})
    out.append({"role": "assistant", "content": blocks})
