"""What a test scripts for ``FakeProviderServer`` (``Reply``, ``Fault``, a ``Handler``) and
what the server received (``FakeRequest``, read in any of the three APIs' shapes)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypedDict, Unpack

from agent_payload.outline import FIND_IN_PAYLOAD, READ_PAYLOAD

__all__ = [
    "API_PATHS",
    "CHUNK_CHARS",
    "Api",
    "FakeRequest",
    "Fault",
    "FaultKind",
    "Handler",
    "Reply",
    "ReplyKind",
    "ScriptItem",
    "Tokens",
    "content_text",
]

ReplyKind = Literal["auto", "text", "tool_call", "refusal"]

CHUNK_CHARS = 16
"""Characters of text (or tool-call arguments) per piece of a streamed reply: per delta event
of ``FakeProviderServer``'s streams, per ``on_progress`` call of ``ScriptedModel``'s."""


class Tokens(TypedDict, total=False):
    """The token counts a ``Reply`` constructor takes (see ``Reply``)."""

    input_tokens: int | None
    output_tokens: int | None
    cached_input_tokens: int
    cache_write_input_tokens: int


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model answer for ``FakeProviderServer``. ``kind="auto"`` (a bare ``str``):
    a tool call's arguments when the request forces a tool, else the message content.
    ``length_limited``: cut by the token limit. Token counts default to an estimate from the
    lengths; ``cached_input_tokens`` / ``cache_write_input_tokens`` are part of ``input_tokens``.
    ``calls``: the calls of a reply that makes several (``Reply.tool_calls``)."""

    text: str = ""
    kind: ReplyKind = "auto"
    length_limited: bool = False
    tool_name: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    calls: tuple[Reply, ...] = ()

    @classmethod
    def message(cls, text: str, **tokens: Unpack[Tokens]) -> Reply:
        """Plain assistant text, even when the request forces a tool."""
        return cls(text=text, kind="text", **tokens)

    @classmethod
    def tool_call(
        cls,
        arguments: str | Mapping[str, Any],
        *,
        name: str | None = None,
        **tokens: Unpack[Tokens],
    ) -> Reply:
        """A tool call with these arguments (a JSON string, or a mapping dumped to JSON); ``name``
        defaults to the forced tool, else the first tool offered."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return cls(text=text, kind="tool_call", tool_name=name, **tokens)

    @classmethod
    def tool_calls(
        cls, calls: Sequence[Reply | str | Mapping[str, Any]], **tokens: Unpack[Tokens]
    ) -> Reply:
        """Several tool calls in one response, in order, in each API's own shape. Each is a
        ``Reply.tool_call(...)`` or the arguments alone (a JSON string or a mapping) of a call of
        the forced tool, else the first tool offered."""
        if isinstance(calls, str | Mapping) or not calls:
            raise TypeError(
                "Reply.tool_calls: expected a non-empty list of calls (Reply.tool_call(...), "
                f"or each call's arguments), found {calls!r}"
            )
        items = [c if isinstance(c, Reply) else cls.tool_call(c) for c in calls]
        for item in items:
            if item.kind != "tool_call" or item.calls:
                raise TypeError(
                    f"Reply.tool_calls: each call must be a Reply.tool_call(...), found {item!r}"
                )
        text = "\n".join(item.text for item in items)
        return cls(text=text, kind="tool_call", calls=tuple(items), **tokens)

    @classmethod
    def read_payload(cls, path: str, *, start: int | None = None, end: int | None = None) -> Reply:
        """A call of outline mode's ``read_payload`` tool (in each API's wire format)."""
        arguments = {"path": path, "start": start, "end": end}
        return cls.tool_call(_given(arguments), name=READ_PAYLOAD)

    @classmethod
    def find_in_payload(
        cls, text: str | None = None, *, number: float | None = None, path: str | None = None
    ) -> Reply:
        """A call of outline mode's ``find_in_payload`` tool (``text`` or ``number``)."""
        arguments = {"text": text, "number": number, "path": path}
        return cls.tool_call(_given(arguments), name=FIND_IN_PAYLOAD)

    @classmethod
    def refusal(
        cls, text: str = "I'm sorry, but I can't help with that.", **tokens: Unpack[Tokens]
    ) -> Reply:
        """A refusal: OpenAI ``message.refusal`` / a Responses ``refusal`` content part /
        Anthropic ``stop_reason "refusal"``."""
        return cls(text=text, kind="refusal", **tokens)

    @classmethod
    def truncated(cls, text: str, *, kind: ReplyKind = "auto", **tokens: Unpack[Tokens]) -> Reply:
        """A reply cut by the output token limit (``text`` is what got out)."""
        return cls(text=text, kind=kind, length_limited=True, **tokens)


def _given(arguments: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in arguments.items() if value is not None}


FaultKind = Literal[
    "status",
    "delay",
    "reset",
    "not_json",
    "cut_short",
    "malformed",
    "stream_cut",
    "stream_error",
    "trickle",
]


@dataclass(frozen=True, slots=True)
class Fault:
    """An injected transport fault for one HTTP request, made by the constructors below."""

    kind: FaultKind
    status_code: int = 200
    seconds: float = 0.0
    then: Reply | str | None = None
    body: str | None = None
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    transform: Callable[[dict[str, Any]], Any] | None = None
    after: int = 0
    """``stream_cut`` / ``stream_error``: events sent before the fault."""
    clean: bool = False
    """``stream_cut``: end the HTTP body properly instead of resetting the connection."""

    @classmethod
    def status(
        cls,
        status_code: int,
        *,
        retry_after_ms: int | None = 1,
        message: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Fault:
        """An HTTP error with the provider's JSON error body. ``retry-after-ms`` (1 by default)
        keeps the SDK's retry sleep short; ``None`` leaves it out (the SDK backs off ~0.5 s)."""
        extra = dict(headers or {})
        if retry_after_ms is not None:
            extra.setdefault("retry-after-ms", str(retry_after_ms))
        return cls(
            kind="status", status_code=status_code, body=message, headers=tuple(extra.items())
        )

    @classmethod
    def delay(cls, seconds: float, *, then: Reply | str | None = None) -> Fault:
        """Wait ``seconds`` (cut short when the server closes), then answer with ``then`` — or,
        when ``then`` is None, close the connection without an answer."""
        return cls(kind="delay", seconds=seconds, then=then)

    @classmethod
    def reset(cls) -> Fault:
        """Send the status line, headers and half the body, then reset the connection (RST)."""
        return cls(kind="reset")

    @classmethod
    def not_json(
        cls,
        body: str = "<html><body><h1>502 Bad Gateway</h1></body></html>",
        *,
        content_type: str = "text/html",
    ) -> Fault:
        """A 200 whose body is not JSON: with ``content_type="application/json"`` the SDK's
        decoding fails; with another type (a proxy's error page) it hands back the raw text."""
        return cls(kind="not_json", body=body, content_type=content_type)

    @classmethod
    def malformed(
        cls, transform: Callable[[dict[str, Any]], Any], *, then: Reply | str = "{}"
    ) -> Fault:
        """A 200 whose JSON body is a good answer (to ``then``) passed through ``transform`` (it
        gets a copy, to change and return or replace), e.g. ``lambda b: {**b, "output": None}``."""
        return cls(kind="malformed", then=then, transform=transform)

    @classmethod
    def stream_cut(cls, after: int = 3, *, then: Reply | str = "{}", clean: bool = False) -> Fault:
        """A streamed answer (to ``then``) whose connection is reset after its first ``after``
        events (``clean=True``: the body just ends there); ``reset()`` to a request that does
        not stream."""
        return cls(kind="stream_cut", after=after, then=then, clean=clean)

    @classmethod
    def stream_error(
        cls, after: int = 3, *, message: str | None = None, then: Reply | str = "{}"
    ) -> Fault:
        """A streamed answer (to ``then``) that sends the API's own error event after its first
        ``after`` events and ends there; to a request that does not stream, an HTTP 500 with
        that message (``x-should-retry: false``)."""
        return cls(kind="stream_error", after=after, then=then, body=message)

    @classmethod
    def trickle(cls, seconds: float, *, then: Reply | str = "{}") -> Fault:
        """A slow server: a streamed answer (to ``then``) whose events come ``seconds`` apart;
        to a request that does not stream, the whole answer after as long as they would take."""
        return cls(kind="trickle", seconds=seconds, then=then)

    @classmethod
    def cut_short(cls) -> Fault:
        """A 200 whose body ends (cleanly closed connection) before its ``Content-Length``."""
        return cls(kind="cut_short")


ScriptItem: TypeAlias = "str | Reply | Fault"

Api = Literal["chat.completions", "responses", "messages", "unknown"]

API_PATHS: dict[str, Api] = {
    "/v1/chat/completions": "chat.completions",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}


# --- FakeProviderServer: what was received -------------------------------------------------------


def content_text(content: Any) -> str:
    """Text of a message ``content`` in any of the three APIs' shapes."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if content and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            # text blocks are one text in pieces (a cache breakpoint between two of them)
            return "".join(content_text(part) for part in content)
        return "\n".join(filter(None, (content_text(part) for part in content)))
    if isinstance(content, dict):
        for key in ("text", "output", "content", "refusal"):
            if key in content:
                return content_text(content[key])
        if "input" in content:  # Anthropic tool_use
            return json.dumps(content["input"])
        if "arguments" in content:  # Responses function_call item
            return str(content["arguments"])
    return ""


@dataclass(frozen=True, slots=True)
class FakeRequest:
    """One HTTP request the fake server received."""

    index: int
    """0-based arrival number."""
    api: Api
    method: str
    path: str
    headers: Mapping[str, str]
    """Lower-cased header names."""
    body: Any
    """The parsed JSON body (None when it was not JSON)."""
    raw: bytes = field(repr=False)

    @property
    def _json(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}

    @property
    def model_name(self) -> str:
        """The model the request names (``"fake-model"`` when it names none)."""
        return str(self._json.get("model", "fake-model"))

    @property
    def stream(self) -> bool:
        """True when the request asks for an event stream (``"stream": true``)."""
        return self._json.get("stream") is True

    @property
    def retry_count(self) -> int:
        """The SDK's ``x-stainless-retry-count`` header (0 on a first attempt)."""
        try:
            return int(self.headers.get("x-stainless-retry-count", "0"))
        except ValueError:
            return 0

    @property
    def messages(self) -> list[tuple[str, str]]:
        """``(role, text)`` of every message, system first, in any of the three APIs' shapes."""
        body = self._json
        system = body.get({"messages": "system", "responses": "instructions"}.get(self.api, ""))
        out = [("system", content_text(system))] if system is not None else []
        items = body.get("input", []) if self.api == "responses" else body.get("messages", [])
        if isinstance(items, str) and self.api == "responses":  # an input may be one text
            items = [{"role": "user", "content": items}]
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                role = str(item.get("role") or item.get("type") or "user")
                text = content_text(item.get("content", item))
                out.append((role, text))
        return out

    @property
    def cache_controls(self) -> list[str]:
        """Where the request carries an Anthropic ``cache_control`` breakpoint, in order:
        ``"system[0]"``, ``"messages[0].content[0]"``, ``"tools[0]"``, ``"cache_control"``
        (the top-level one); ``[]`` when there is none."""
        body = self._json
        found = ["cache_control"] if body.get("cache_control") is not None else []
        for key in ("tools", "system", "messages"):
            items = body.get(key)
            for n, item in enumerate(items if isinstance(items, list) else []):
                if not isinstance(item, dict):
                    continue
                if item.get("cache_control") is not None:
                    found.append(f"{key}[{n}]")
                content = item.get("content")
                for m, block in enumerate(content if isinstance(content, list) else []):
                    if isinstance(block, dict) and block.get("cache_control") is not None:
                        found.append(f"{key}[{n}].content[{m}]")
        return found

    @property
    def prompt_cache_key(self) -> str | None:
        """OpenAI's ``prompt_cache_key`` as sent (None when absent)."""
        key = self._json.get("prompt_cache_key")
        return key if isinstance(key, str) else None

    @property
    def text(self) -> str:
        """All message text joined by newlines (handy for ``handler`` functions)."""
        return "\n".join(text for _, text in self.messages)

    @property
    def last_user_text(self) -> str:
        """The text of the last user message (tool results count as user turns)."""
        for role, text in reversed(self.messages):
            if role in ("user", "tool", "function_call_output"):
                return text
        return ""

    @property
    def tools(self) -> list[str]:
        """Names of the tools offered."""
        names: list[str] = []
        for tool in self._json.get("tools") or []:
            if isinstance(tool, dict):
                function = tool.get("function")
                name = function.get("name") if isinstance(function, dict) else tool.get("name")
                if isinstance(name, str):
                    names.append(name)
        return names

    @property
    def forced_tool(self) -> str | None:
        """The tool the request forces the model to call, or None."""
        choice = self._json.get("tool_choice")
        tools = self.tools
        if isinstance(choice, dict):
            kind = choice.get("type")
            if kind == "function":
                function = choice.get("function")
                name = function.get("name") if isinstance(function, dict) else choice.get("name")
                return str(name) if name else None
            if kind == "tool":
                return str(choice.get("name"))
            if kind == "any" and tools:
                return tools[0]
        if choice == "required" and tools:
            return tools[0]
        return None

    @property
    def output_mode(self) -> Literal["text", "tool", "json_schema"]:
        """How the request asks for the answer: a forced tool, a JSON schema, or text."""
        if self.forced_tool is not None:
            return "tool"
        body = self._json
        nested = (body.get("text"), body.get("output_config"))  # Responses, Anthropic
        formats = [
            body.get("response_format"),
            *(c.get("format") for c in nested if isinstance(c, dict)),
        ]
        if any(isinstance(f, dict) and f.get("type") == "json_schema" for f in formats):
            return "json_schema"
        return "text"


Handler: TypeAlias = Callable[[FakeRequest], "str | Reply | Fault"]
