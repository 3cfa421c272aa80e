"""The narrow protocol between the agent and a model provider.

The agent builds a ``ModelRequest`` (provider-neutral messages plus the output mode) and gets a
``ModelReply`` back. Two protocols, one per way of calling:

* ``Model``: ``request(request) -> ModelReply``, what ``PayloadAgent`` (and ``BatchJob`` in
  batch mode) calls;
* ``AsyncModel``: ``async arequest(request) -> ModelReply``, what ``AsyncPayloadAgent`` (and
  ``BatchJob`` in concurrent mode) awaits.

Streaming (``PayloadAgent(stream=True)``) asks more of a model: ``StreamingModel``
(``stream_request(request, on_progress)``) and ``AsyncStreamingModel`` (``astream_request``),
which receive the reply in pieces, call ``on_progress(characters_so_far)`` as they arrive (the
async one awaits what it returns) and return the same ``ModelReply`` once the reply is whole; a
stream that breaks off is a retryable ``ProviderError``, never a partial reply.

Both carry ``model_name`` (the provider's name of the model, ``"gpt-5.4-mini"``) and
``provider`` (``"openai"``, ``"anthropic"``, ...). A model of your own implements the one its
agent calls. The adapters (``providers/openai.py``, ``providers/anthropic.py``) and
``agent_payload.testing.ScriptedModel`` implement both; an adapter built on a sync SDK client
raises ``ConfigurationError`` from ``arequest`` and the reverse (the client decides). Adapters
never retry transport errors themselves (the SDK client does, with its own settings) and map
SDK exceptions to ``ProviderError`` in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agent_payload._reply import DEFAULT_TOOL_NAME, OutputMode
from agent_payload.usage import Usage

__all__ = [
    "AsyncModel",
    "AsyncStreamingModel",
    "Message",
    "Model",
    "ModelReply",
    "ModelRequest",
    "OutputMode",
    "StreamingModel",
    "ToolCall",
    "ToolSpec",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model made: its id (echoed in the tool result), the tool's name and the
    arguments as JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model besides the change request (the read tools of outline
    mode): its name, its description and the JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Message:
    """One message. An ``assistant`` message may carry the ``tool_calls`` the model made (its
    ``content`` is then the text it wrote beside them, maybe empty); a ``tool`` message is the
    result of the call ``tool_call_id``. Each adapter maps both to its API's shape."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    stable_prefix: int = 0
    """How many characters at the start of ``content`` stay the same across the attempts of a
    run and across tasks on the same payload (the payload block of the first user message; 0:
    none). An adapter that marks prompt-cache breakpoints (Anthropic) sends that start as a
    content block of its own, marked; the text the model reads is ``content`` either way."""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request to the model. ``messages`` starts with the system message."""

    messages: tuple[Message, ...]
    output_mode: OutputMode = "text"
    schema: Mapping[str, Any] | None = None
    """JSON Schema of the change request (tool input / structured output); None in text mode."""
    tool_name: str = DEFAULT_TOOL_NAME
    tool_description: str = "Apply a change request to the payload."
    max_tokens: int | None = None
    temperature: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Passed through to the SDK call as keyword arguments."""
    prompt_caching: bool = True
    """Mark the stable start of the request for the provider's prompt cache: Anthropic
    ``cache_control`` breakpoints on the system prompt and on the payload block (a user
    message's ``stable_prefix``). OpenAI caches prompt prefixes by itself and has nothing to
    mark."""
    prompt_cache_key: str | None = None
    """OpenAI's ``prompt_cache_key`` (Chat Completions and Responses), which routes requests
    sharing a prefix to the same cache; not sent when None. Anthropic has none (ignored)."""
    tools: tuple[ToolSpec, ...] = ()
    """Tools offered besides the change request (outline mode's read tools). In ``"text"``
    mode the model may call one or answer with text; in ``"tool"`` mode it must call a tool,
    the change-request tool (offered first) or one of these."""


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What came back, normalised across providers.

    ``text`` is the reply text in text mode, or the tool call's arguments (a JSON string) in tool
    and structured modes. ``finish_reason`` is the provider's own value (``stop``, ``length``,
    ``tool_calls``, ``end_turn``, ``max_tokens``, ``refusal``, ...); ``truncated`` is True when
    it says the reply was cut by a token limit. ``refusal`` holds a refusal text when the
    provider reports one separately.
    """

    text: str
    finish_reason: str | None = None
    truncated: bool = False
    refusal: str | None = None
    usage: Usage = field(default_factory=Usage)
    model_name: str | None = None
    """The model that answered, as the provider names it (``None`` when it does not say)."""
    raw: Any = None
    tool_calls: tuple[ToolCall, ...] = ()
    """Every tool call of the reply when the request offered ``tools`` (empty otherwise). In
    tool mode ``text`` holds only a call of the change-request tool, never a read's arguments."""


@runtime_checkable
class Model(Protocol):
    """A model ``PayloadAgent`` can talk to: ``request`` sends one request and waits."""

    @property
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    def request(self, request: ModelRequest) -> ModelReply: ...


@runtime_checkable
class AsyncModel(Protocol):
    """A model ``AsyncPayloadAgent`` can talk to: ``arequest`` is awaited."""

    @property
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    async def arequest(self, request: ModelRequest) -> ModelReply: ...


@runtime_checkable
class StreamingModel(Protocol):
    """A ``Model`` that can stream its reply (``PayloadAgent(stream=True)``)."""

    @property
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    def stream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply: ...


@runtime_checkable
class AsyncStreamingModel(Protocol):
    """An ``AsyncModel`` that can stream its reply (``AsyncPayloadAgent(stream=True)``)."""

    @property
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    async def astream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply: ...
