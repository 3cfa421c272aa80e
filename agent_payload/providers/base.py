"""The narrow protocol between the agent and a model provider: a ``ModelRequest``
(provider-neutral messages, the output mode) in, a ``ModelReply`` out, through the ``Model``
protocol the agent calls (``AsyncModel``, ``StreamingModel``...: docs/agent.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agent_payload._reply import DEFAULT_TOOL_NAME, OutputMode
from agent_payload.usage import Usage


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model made: its id (echoed in the result), the tool, its JSON arguments."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered besides the change request (outline mode's reads), its arguments' schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Message:
    """One message: an ``assistant`` one may carry the ``tool_calls`` the model made (beside its
    text, maybe empty); a ``tool`` one is the result of the call ``tool_call_id``."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    stable_prefix: int = 0
    """How many characters at the start of ``content`` stay the same across attempts and tasks
    on the payload (the payload block); Anthropic marks that start as a cache breakpoint."""
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
    """Mark the stable start for the prompt cache (Anthropic ``cache_control`` breakpoints)."""
    prompt_cache_key: str | None = None
    """OpenAI's ``prompt_cache_key`` (not sent when None; Anthropic ignores it)."""
    tools: tuple[ToolSpec, ...] = ()
    """Tools offered besides the change request (outline mode's read tools); in ``"tool"``
    mode the model must call one of them or the change-request tool (offered first)."""


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What came back, normalised across providers: ``text`` is the reply text, or the
    change-request tool call's arguments (JSON) in tool mode; ``finish_reason`` the provider's
    own value, ``truncated`` whether it says a token limit cut the reply; ``refusal`` a refusal
    text the provider reports apart."""

    text: str
    finish_reason: str | None = None
    truncated: bool = False
    refusal: str | None = None
    usage: Usage = field(default_factory=Usage)
    model_name: str | None = None
    """The model that answered, as the provider names it (``None`` when it does not say)."""
    raw: Any = None
    tool_calls: tuple[ToolCall, ...] = ()
    """Every tool call of the reply when the request offered ``tools`` (empty otherwise)."""


class _Named(Protocol):
    """``model_name``: the provider's name of the model; ``provider``: ``"openai"``, ..."""

    @property
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str: ...


@runtime_checkable
class Model(_Named, Protocol):
    """A model ``PayloadAgent`` can talk to: ``request`` sends one request and waits."""

    def request(self, request: ModelRequest) -> ModelReply: ...


@runtime_checkable
class AsyncModel(_Named, Protocol):
    """A model ``AsyncPayloadAgent`` can talk to: ``arequest`` is awaited."""

    async def arequest(self, request: ModelRequest) -> ModelReply: ...


@runtime_checkable
class StreamingModel(_Named, Protocol):
    """A ``Model`` that can stream its reply: ``on_progress(characters so far)`` as the pieces
    arrive, the same ``ModelReply`` once it is whole (a broken stream: a retryable
    ``ProviderError``, never a partial reply)."""

    def stream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply: ...


@runtime_checkable
class AsyncStreamingModel(_Named, Protocol):
    """An ``AsyncModel`` that can stream its reply (it awaits what ``on_progress`` returns)."""

    async def astream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply: ...
