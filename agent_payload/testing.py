"""Test helpers shipped to users (in the spirit of ``structlog.testing``).

Three tools, all offline:

* ``ScriptedModel`` — a ``Model`` that answers from a script (a list of replies, or a function of
  the ``ModelRequest``) and records every request. For testing code that drives
  ``PayloadAgent`` without HTTP::

      model = ScriptedModel(['{"updateElements": {"name": "Ada"}}'])
      result = PayloadAgent(model).run({"name": "Bob"}, "rename to Ada")
      assert model.requests[0].messages[0].role == "system"

* ``FakeProviderServer`` — a real HTTP server on ``127.0.0.1`` (a free port, a thread per
  connection) that speaks enough of the OpenAI Chat Completions (``POST /v1/chat/completions``),
  OpenAI Responses (``POST /v1/responses``) and Anthropic Messages (``POST /v1/messages``) APIs for
  the **real** SDKs to parse its answers. Point a client at it and script the replies, including
  faults::

      with FakeProviderServer(["{}", Fault.status(429), '{"reasoning": "ok"}']) as server:
          client = openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=1)
          ...
          assert len(server.requests) == 3

  A script item is a ``str`` (the reply text: plain content, or the arguments of the forced tool
  call when the request forces one), a ``Reply`` (explicit kind: tool call, refusal, truncation,
  usage) or a ``Fault``. Items are consumed one per HTTP request, so the SDK's own retries consume
  items too. Instead of (or after) the queue, ``handler=`` is a function of the ``FakeRequest``
  (the parsed body plus helpers) returning an item: use it when replies must match requests, e.g.
  for many concurrent agents.

  Faults (``Fault.…``): ``status(code)`` an HTTP error with the provider's error body and
  ``retry-after-ms: 1`` (so SDK retries do not sleep); ``delay(seconds, then=None)`` answer late
  (or never: the connection is closed), to trip the client's timeout; ``reset()`` the
  connection is reset (TCP RST) in the middle of the body; ``not_json()`` a 200 whose body is not
  JSON (an HTML error page by default); ``cut_short()`` a 200 whose body stops before its
  ``Content-Length``; ``malformed(transform)`` a 200 whose JSON body is a good answer changed
  by ``transform`` (``"message": null``, no ``content``, ``"output": null`` ...). Refusals and
  truncation are replies, not faults: ``Reply.refusal()``, ``Reply.truncated(text)``.

* ``block_model_requests()`` — while active (or while ``ALLOW_MODEL_REQUESTS`` is False, or the
  environment has ``AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0``), the provider adapters raise
  ``ModelRequestsBlockedError`` for any client whose base URL is not a loopback address. The
  fake server on 127.0.0.1 stays usable. Put it in a ``conftest.py``::

      @pytest.fixture(autouse=True)
      def _no_real_models():
          with block_model_requests():
              yield

This module imports no SDK at import time; ``FakeProviderServer.openai_client()`` and
``.anthropic_client()`` import theirs when called.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import itertools
import json
import os
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeAlias

from agent_payload._fakebatch import BatchFakes, Route
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.usage import Usage

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "FakeProviderServer",
    "FakeRequest",
    "Fault",
    "Reply",
    "ScriptExhaustedError",
    "ScriptItem",
    "ScriptedModel",
    "block_model_requests",
    "model_requests_allowed",
]

# --- the switch that forbids real model requests -------------------------------------------------

_ENV_SWITCH = "AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS"
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})

ALLOW_MODEL_REQUESTS: bool = True
"""Set to False (e.g. in a ``conftest.py``) to forbid requests to non-loopback model servers
for the whole process; ``block_model_requests()`` does the same for a block."""


def model_requests_allowed() -> bool:
    """True unless ``ALLOW_MODEL_REQUESTS`` is False, ``block_model_requests()`` is active, or the
    environment says ``AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0`` (read at each call)."""
    env = os.environ.get(_ENV_SWITCH, "").strip().lower()
    return ALLOW_MODEL_REQUESTS and env not in _FALSE_WORDS


@contextlib.contextmanager
def block_model_requests(block: bool = True) -> Iterator[None]:
    """Forbid (or, with ``block=False``, allow) real model requests inside the block.

    Process-wide (it sets ``ALLOW_MODEL_REQUESTS`` and restores it on exit), so it covers
    threads and event loops started inside. Works as a decorator too.
    """
    global ALLOW_MODEL_REQUESTS
    previous = ALLOW_MODEL_REQUESTS
    ALLOW_MODEL_REQUESTS = not block
    try:
        yield
    finally:
        ALLOW_MODEL_REQUESTS = previous


# --- ScriptedModel -------------------------------------------------------------------------------


class ScriptExhaustedError(AssertionError):
    """A test double was asked for more replies than its script holds (a test failure, not an
    error of the library, hence an ``AssertionError``)."""


ScriptedReply: TypeAlias = "str | ModelReply | BaseException"


def _estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token) for fake usage numbers."""
    return max(1, (len(text) + 3) // 4)


class ScriptedModel:
    """A ``Model`` that answers from a script and records each ``ModelRequest`` in ``requests``.

    ``replies`` is either a sequence consumed in order — a ``str`` (the reply text), a
    ``ModelReply`` (returned as is) or an exception (raised, e.g. ``ProviderError``) — or a
    function of the ``ModelRequest`` returning a ``str`` or ``ModelReply`` (or raising). A ``str``
    becomes ``ModelReply(text, finish_reason="stop")`` with usage estimated from the lengths.
    Running out of replies raises ``ScriptExhaustedError``. Works with both agents:
    ``request`` and ``arequest`` share the script. Thread-safe.
    """

    def __init__(
        self,
        replies: Sequence[ScriptedReply] | Callable[[ModelRequest], str | ModelReply],
        *,
        name: str = "scripted",
        provider: str = "test",
    ) -> None:
        self._function: Callable[[ModelRequest], str | ModelReply] | None
        self._script: deque[ScriptedReply]
        if callable(replies):
            self._function = replies
            self._script = deque()
        else:
            if isinstance(replies, str):
                raise TypeError(
                    "ScriptedModel(replies): expected a sequence of replies, got one str; "
                    "wrap it in a list: ScriptedModel([reply])."
                )
            self._function = None
            self._script = deque(replies)
        self._name = name
        self._provider = provider
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []
        """Every request received, in order (also the ones answered with an exception)."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def remaining(self) -> int:
        """Replies left in a list script (0 for a function script)."""
        with self._lock:
            return len(self._script)

    def request(self, request: ModelRequest) -> ModelReply:
        """Record ``request`` and return the next scripted reply (or raise the scripted error)."""
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            if self._function is None:
                if not self._script:
                    raise ScriptExhaustedError(
                        f"ScriptedModel {self._name!r}: request #{number} arrived but the script "
                        f"held only {number - 1} replies; add more replies to the script or "
                        "check why the code under test asked again."
                    )
                item: ScriptedReply = self._script.popleft()
            else:
                item = ""  # replaced below, outside the lock
        if self._function is not None:
            item = self._function(request)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelReply):
            return item
        if isinstance(item, str):
            prompt = "".join(message.content for message in request.messages)
            return ModelReply(
                text=item,
                finish_reason="stop",
                usage=Usage(_estimate_tokens(prompt), _estimate_tokens(item), 1),
                model=self._name,
            )
        raise TypeError(
            f"ScriptedModel {self._name!r}: reply #{number} is a {type(item).__name__}; "
            "expected a str, a ModelReply or an exception."
        )

    async def arequest(self, request: ModelRequest) -> ModelReply:
        """The same as ``request`` (yields to the event loop once, like a real call would)."""
        await asyncio.sleep(0)
        return self.request(request)


# --- FakeProviderServer: script items ------------------------------------------------------------

ReplyKind = Literal["auto", "text", "tool_call", "refusal"]


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model answer for ``FakeProviderServer``.

    ``kind="auto"`` (what a bare ``str`` means): the arguments of a tool call when the request
    forces a tool (OpenAI ``tool_choice`` naming a function or ``"required"``, Anthropic
    ``tool_choice`` ``tool``/``any``), the message content otherwise (structured-output requests
    included). ``length_limited`` marks the reply as cut by the token limit (``finish_reason
    "length"``, Responses ``status "incomplete"`` with ``max_output_tokens``, ``stop_reason
    "max_tokens"``). Token counts default to an estimate from the lengths.
    """

    text: str = ""
    kind: ReplyKind = "auto"
    length_limited: bool = False
    tool_name: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    @classmethod
    def message(
        cls,
        text: str,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> Reply:
        """Plain assistant text, even when the request forces a tool."""
        return cls(text=text, kind="text", input_tokens=input_tokens, output_tokens=output_tokens)

    @classmethod
    def tool_call(
        cls,
        arguments: str | Mapping[str, Any],
        *,
        name: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> Reply:
        """A tool call with these arguments (a JSON string, or a mapping dumped to JSON); ``name``
        defaults to the forced tool, else the first tool offered."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return cls(
            text=text,
            kind="tool_call",
            tool_name=name,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )

    @classmethod
    def refusal(
        cls,
        text: str = "I'm sorry, but I can't help with that.",
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> Reply:
        """A refusal: OpenAI ``message.refusal`` / a Responses ``refusal`` content part /
        Anthropic ``stop_reason "refusal"``."""
        return cls(
            text=text, kind="refusal", input_tokens=input_tokens, output_tokens=output_tokens
        )

    @classmethod
    def truncated(
        cls,
        text: str,
        *,
        kind: ReplyKind = "auto",
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> Reply:
        """A reply cut by the output token limit (``text`` is what got out)."""
        return cls(
            text=text,
            kind=kind,
            length_limited=True,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )


FaultKind = Literal["status", "delay", "reset", "not_json", "cut_short", "malformed"]


@dataclass(frozen=True, slots=True)
class Fault:
    """An injected transport fault for one HTTP request (see the module docstring)."""

    kind: FaultKind
    status_code: int = 200
    seconds: float = 0.0
    then: Reply | str | None = None
    body: str | None = None
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    transform: Callable[[dict[str, Any]], Any] | None = None

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
        """A 200 whose body is not JSON. With ``content_type="application/json"`` the SDK's JSON
        decoding fails; with a non-JSON type (the default, like a proxy's error page) the SDK
        hands back the raw text."""
        return cls(kind="not_json", body=body, content_type=content_type)

    @classmethod
    def malformed(
        cls, transform: Callable[[dict[str, Any]], Any], *, then: Reply | str = "{}"
    ) -> Fault:
        """A 200 whose JSON body is a well-formed answer (to ``then``, in the request's API)
        passed through ``transform``: a shape the adapters do not understand, such as
        ``lambda body: {**body, "output": None}``. ``transform`` gets a copy it may change in
        place (return it) or replace."""
        return cls(kind="malformed", then=then, transform=transform)

    @classmethod
    def cut_short(cls) -> Fault:
        """A 200 whose body ends (cleanly closed connection) before its ``Content-Length``."""
        return cls(kind="cut_short")


ScriptItem: TypeAlias = "str | Reply | Fault"

Api = Literal["chat.completions", "responses", "messages", "unknown"]

_API_PATHS: dict[str, Api] = {
    "/v1/chat/completions": "chat.completions",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}


# --- FakeProviderServer: what was received -------------------------------------------------------


def _content_text(content: Any) -> str:
    """Text of a message ``content`` in any of the three APIs' shapes."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(filter(None, (_content_text(part) for part in content)))
    if isinstance(content, dict):
        for key in ("text", "output", "content", "refusal"):
            if key in content:
                return _content_text(content[key])
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
    def model(self) -> str:
        body = self.body if isinstance(self.body, dict) else {}
        return str(body.get("model", "fake-model"))

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
        body = self.body if isinstance(self.body, dict) else {}
        out: list[tuple[str, str]] = []
        if self.api == "messages" and body.get("system") is not None:
            out.append(("system", _content_text(body["system"])))
        if self.api == "responses":
            if body.get("instructions") is not None:
                out.append(("system", _content_text(body["instructions"])))
            items = body.get("input", [])
            if isinstance(items, str):
                items = [{"role": "user", "content": items}]
        else:
            items = body.get("messages", [])
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                role = str(item.get("role") or item.get("type") or "user")
                text = _content_text(item.get("content", item))
                out.append((role, text))
        return out

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
        body = self.body if isinstance(self.body, dict) else {}
        names: list[str] = []
        for tool in body.get("tools") or []:
            if isinstance(tool, dict):
                function = tool.get("function")
                name = function.get("name") if isinstance(function, dict) else tool.get("name")
                if isinstance(name, str):
                    names.append(name)
        return names

    @property
    def forced_tool(self) -> str | None:
        """The tool the request forces the model to call, or None."""
        body = self.body if isinstance(self.body, dict) else {}
        choice = body.get("tool_choice")
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
        body = self.body if isinstance(self.body, dict) else {}
        response_format = body.get("response_format")
        text_config = body.get("text")
        output_config = body.get("output_config")
        for config in (
            response_format,
            text_config.get("format") if isinstance(text_config, dict) else None,
            output_config.get("format") if isinstance(output_config, dict) else None,
        ):
            if isinstance(config, dict) and config.get("type") == "json_schema":
                return "json_schema"
        return "text"


Handler: TypeAlias = Callable[[FakeRequest], "str | Reply | Fault"]


# --- FakeProviderServer: building answers --------------------------------------------------------

_ids = itertools.count(1)


def _new_id(prefix: str) -> str:
    return f"{prefix}{next(_ids):06d}fake"


def _resolve(item: str | Reply, request: FakeRequest) -> Reply:
    """The reply with its kind settled (``text``/``tool_call``/``refusal``) and the tool name."""
    reply = item if isinstance(item, Reply) else Reply(text=item)
    kind: ReplyKind = reply.kind
    if kind == "auto":
        kind = "tool_call" if request.forced_tool is not None else "text"
    name = None
    if kind == "tool_call":
        name = reply.tool_name or request.forced_tool or (request.tools or ["tool"])[0]
    return Reply(
        reply.text, kind, reply.length_limited, name, reply.input_tokens, reply.output_tokens
    )


def _usage_numbers(reply: Reply, request: FakeRequest) -> tuple[int, int]:
    input_tokens = reply.input_tokens
    if input_tokens is None:
        input_tokens = _estimate_tokens(request.text)
    output_tokens = reply.output_tokens
    if output_tokens is None:
        output_tokens = _estimate_tokens(reply.text)
    return input_tokens, output_tokens


def _chat_completion(reply: Reply, request: FakeRequest) -> dict[str, Any]:
    input_tokens, output_tokens = _usage_numbers(reply, request)
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    finish_reason = "stop"
    if reply.kind == "tool_call":
        message["tool_calls"] = [
            {
                "id": _new_id("call_"),
                "type": "function",
                "function": {"name": reply.tool_name, "arguments": reply.text},
            }
        ]
        finish_reason = "stop" if request.forced_tool else "tool_calls"
    elif reply.kind == "refusal":
        message["refusal"] = reply.text
    else:
        message["content"] = reply.text
    if reply.length_limited:
        finish_reason = "length"
    return {
        "id": _new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": "fp_fake",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
    }


def _response(reply: Reply, request: FakeRequest) -> dict[str, Any]:
    body = request.body if isinstance(request.body, dict) else {}
    input_tokens, output_tokens = _usage_numbers(reply, request)
    item_status = "incomplete" if reply.length_limited else "completed"
    output: list[dict[str, Any]]
    if reply.kind == "tool_call":
        output = [
            {
                "type": "function_call",
                "id": _new_id("fc_"),
                "call_id": _new_id("call_"),
                "name": reply.tool_name,
                "arguments": reply.text,
                "status": item_status,
            }
        ]
    else:
        part: dict[str, Any]
        if reply.kind == "refusal":
            part = {"type": "refusal", "refusal": reply.text}
        else:
            part = {"type": "output_text", "text": reply.text, "annotations": []}
        output = [
            {
                "type": "message",
                "id": _new_id("msg_"),
                "status": item_status,
                "role": "assistant",
                "content": [part],
            }
        ]
    now = time.time()
    return {
        "id": _new_id("resp_"),
        "object": "response",
        "created_at": now,
        "completed_at": None if reply.length_limited else now,
        "status": "incomplete" if reply.length_limited else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if reply.length_limited else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": request.model,
        "output": output,
        "parallel_tool_calls": True,
        "temperature": body.get("temperature"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": None,
        "text": body.get("text") or {"format": {"type": "text"}},
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def _anthropic_message(reply: Reply, request: FakeRequest) -> dict[str, Any]:
    input_tokens, output_tokens = _usage_numbers(reply, request)
    content: list[dict[str, Any]] = []
    stop_reason = "end_turn"
    stop_details: dict[str, Any] | None = None
    if reply.kind == "tool_call":
        try:
            arguments = json.loads(reply.text)
        except ValueError:
            arguments = None
        if isinstance(arguments, dict):
            content.append(
                {
                    "type": "tool_use",
                    "id": _new_id("toolu_"),
                    "name": reply.tool_name,
                    "input": arguments,
                }
            )
            stop_reason = "tool_use"
        elif reply.length_limited:
            # A tool call cut by max_tokens: the API returns the block with what it has.
            content.append(
                {"type": "tool_use", "id": _new_id("toolu_"), "name": reply.tool_name, "input": {}}
            )
        else:
            # Tool input is always an object in this API; anything else is sent as text.
            content.append({"type": "text", "text": reply.text, "citations": None})
    elif reply.kind == "refusal":
        if reply.text:
            content.append({"type": "text", "text": reply.text, "citations": None})
        stop_reason = "refusal"
        stop_details = {"type": "refusal", "category": None, "explanation": reply.text}
    else:
        content.append({"type": "text", "text": reply.text, "citations": None})
    if reply.length_limited:
        stop_reason = "max_tokens"
    return {
        "id": _new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "stop_details": stop_details,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


_BUILDERS: dict[Api, Callable[[Reply, FakeRequest], dict[str, Any]]] = {
    "chat.completions": _chat_completion,
    "responses": _response,
    "messages": _anthropic_message,
}
"""The response body of each API for a settled ``Reply``."""

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    if api == "messages":
        kind = _ANTHROPIC_ERROR_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = {429: "rate_limit_exceeded", 401: "invalid_request_error"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


# --- FakeProviderServer: the HTTP side -----------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, fake: FakeProviderServer) -> None:
        self.fake = fake
        self.open_sockets: set[socket.socket] = set()
        self.abort_sockets: set[socket.socket] = set()
        self.threads: set[threading.Thread] = set()
        self.sockets_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _RequestHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._run, args=(request, client_address), daemon=True, name="fake-provider"
        )
        with self.sockets_lock:
            self.open_sockets.add(request)
            self.threads.add(thread)
        thread.start()

    def _run(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.sockets_lock:
                self.threads.discard(threading.current_thread())

    def shutdown_request(self, request: Any) -> None:
        with self.sockets_lock:
            self.open_sockets.discard(request)
            abort = request in self.abort_sockets
            self.abort_sockets.discard(request)
        if abort:
            request.close()  # SO_LINGER 0 is set: the close sends a TCP RST
        else:
            super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return  # the client went away (timeout, reset): expected in fault tests
        if exc is not None:
            self.fake.errors.append(exc)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "FakeProviderServer/1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests read server.requests instead

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path, _, query = self.path.partition("?")
        api: Api = _API_PATHS.get(path, "unknown") if self.command == "POST" else "unknown"
        fake = self.server.fake
        if api == "unknown":
            headers = {k.lower(): v for k, v in self.headers.items()}
            route = fake._batches.route(self.command, path, query, headers, raw)
            if route is not None:  # the batch APIs (agent_payload._fakebatch)
                fake._record(
                    api=api, method=self.command, path=path, headers=headers, body=body, raw=raw
                )
                self._send_route(route)
                return
        request = fake._record(
            api=api,
            method=self.command,
            path=path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw=raw,
        )
        if api == "unknown":
            self._send_json(
                404,
                _error_body(
                    "chat.completions", 404, f"FakeProviderServer: no route {self.command} {path}"
                ),
                {"x-should-retry": "false"},
            )
            return
        try:
            item = fake._next_item(request)
        except Exception as exc:  # a script error must reach the test, not hang the client
            fake.errors.append(exc)
            self._send_json(
                500,
                _error_body(api, 500, f"FakeProviderServer script error: {exc}"),
                {"x-should-retry": "false"},
            )
            return
        self._answer(item, request)

    def _answer(self, item: str | Reply | Fault, request: FakeRequest) -> None:
        if isinstance(item, Fault):
            self._fault(item, request)
            return
        if not isinstance(item, str | Reply):
            exc = TypeError(
                f"FakeProviderServer: script item for request #{request.index} is a "
                f"{type(item).__name__}; expected a str, a Reply or a Fault."
            )
            self.server.fake.errors.append(exc)
            self._send_json(
                500, _error_body(request.api, 500, str(exc)), {"x-should-retry": "false"}
            )
            return
        self._send_json(200, _BUILDERS[request.api](_resolve(item, request), request))

    def _fault(self, fault: Fault, request: FakeRequest) -> None:
        if fault.kind == "status":
            message = fault.body or f"FakeProviderServer injected HTTP {fault.status_code}"
            self._send_json(
                fault.status_code,
                _error_body(request.api, fault.status_code, message),
                dict(fault.headers),
            )
        elif fault.kind == "delay":
            self.server.fake._stopping.wait(fault.seconds)
            if fault.then is None or self.server.fake._stopping.is_set():
                self.close_connection = True
                return
            with contextlib.suppress(OSError):
                self._answer(fault.then, request)
        elif fault.kind == "malformed" and fault.transform is not None:
            body = _BUILDERS[request.api](_resolve(fault.then or "{}", request), request)
            self._send_json(200, fault.transform(copy.deepcopy(body)))
        elif fault.kind == "not_json":
            data = (fault.body or "").encode()
            self._send_raw(200, data, fault.content_type, {})
        elif fault.kind in ("reset", "cut_short"):
            data = json.dumps(_BUILDERS[request.api](_resolve("{}", request), request)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            if fault.kind == "reset":
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                with self.server.sockets_lock:
                    self.server.abort_sockets.add(self.connection)

    def _send_route(self, route: Route) -> None:
        fault = route.fault
        if fault is None:
            self._send_raw(route.status, route.body, route.content_type, {})
        elif fault.kind == "status":
            message = fault.body or f"FakeProviderServer injected HTTP {fault.status_code}"
            body = _error_body("chat.completions", fault.status_code, message)
            self._send_json(fault.status_code, body, dict(fault.headers))
        elif fault.kind == "delay":
            self.server.fake._stopping.wait(fault.seconds)
            if route.after is not None and not self.server.fake._stopping.is_set():
                with contextlib.suppress(OSError):
                    self._send_route(route.after)
            else:
                self.close_connection = True
        else:  # reset, cut_short, not_json: the connection drops without an answer
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with self.server.sockets_lock:
                self.server.abort_sockets.add(self.connection)

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers or {})

    def _send_raw(
        self, status: int, data: bytes, content_type: str, headers: Mapping[str, str]
    ) -> None:
        request_id = _new_id("req_")
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("x-request-id", request_id)
        self.send_header("request-id", request_id)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One default SSL context for every client the fake server builds (the server speaks
    plain HTTP; the SDK's HTTP client still wants a context, and each costs ~0.2 s to build)."""
    return ssl.create_default_context()


class FakeProviderServer:
    """A fake OpenAI + Anthropic HTTP server on 127.0.0.1 for the real SDKs (see module doc).

    ``replies``: script items consumed one per HTTP request; ``handler``: a function of the
    ``FakeRequest`` returning an item, used when the queue is empty (or always, without a queue).
    With neither left, the server answers HTTP 500 with ``x-should-retry: false`` and records a
    ``ScriptExhaustedError`` in ``errors``. The server starts at construction; use it as a
    context manager or call ``close()``. Thread-safe: ``add()`` may be called while it serves.
    """

    def __init__(
        self,
        replies: Iterable[ScriptItem] = (),
        *,
        handler: Handler | None = None,
    ) -> None:
        if isinstance(replies, str):
            raise TypeError(
                "FakeProviderServer(replies): expected a sequence of script items, got one str; "
                "wrap it in a list."
            )
        self._queue: deque[ScriptItem] = deque(replies)
        self._handler = handler
        self._lock = threading.Lock()
        self._requests: list[FakeRequest] = []
        self._stopping = threading.Event()
        self.errors: list[BaseException] = []
        """Script errors (exhausted script, a handler that raised, a bad item), in order."""
        self.batch_polls = 0
        """Batch APIs: retrieves that answer "in progress" before a batch ends."""
        self.batch_expire: Callable[[int], bool] = lambda number: False
        """Batch APIs: ``batch_expire(n)`` True makes the n-th batch (1-based) expire."""
        self.batch_faults: dict[str, list[Fault]] = {}
        """Batch APIs: faults per operation (``upload``, ``create``, ``retrieve``, ``results``);
        a ``create`` fault is sent after the batch was created (``agent_payload._fakebatch``)."""
        self._batch_requests: list[FakeRequest] = []
        self._batches = BatchFakes(self)
        self._server = _Server(self)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        """The root URL (``http://127.0.0.1:PORT``)."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    # -- addresses and clients --

    @property
    def openai_base_url(self) -> str:
        """``base_url`` for ``openai.OpenAI`` / ``AsyncOpenAI`` (``.../v1``)."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """``base_url`` for ``anthropic.Anthropic`` / ``AsyncAnthropic`` (the root)."""
        return self.url

    base_url = openai_base_url

    def openai_client(self, *, async_client: bool = False, **kwargs: Any) -> Any:
        """An ``openai.OpenAI`` (or ``AsyncOpenAI``) pointed here; ``kwargs`` go to the client
        (defaults: ``api_key="test"``, ``max_retries=2``, ``timeout=10``, and an HTTP client
        sharing one SSL context: building a fresh one costs ~0.2 s per client)."""
        import openai  # noqa: TID251 (testing helper)

        kwargs.setdefault("api_key", "test")
        kwargs.setdefault("max_retries", 2)
        kwargs.setdefault("timeout", 10.0)
        if "http_client" not in kwargs:
            http = openai.DefaultAsyncHttpxClient if async_client else openai.DefaultHttpxClient
            kwargs["http_client"] = http(verify=_ssl_context())
        cls = openai.AsyncOpenAI if async_client else openai.OpenAI
        return cls(base_url=self.openai_base_url, **kwargs)

    def anthropic_client(self, *, async_client: bool = False, **kwargs: Any) -> Any:
        """An ``anthropic.Anthropic`` (or ``AsyncAnthropic``) pointed here (same defaults)."""
        import anthropic  # noqa: TID251 (testing helper)

        kwargs.setdefault("api_key", "test")
        kwargs.setdefault("max_retries", 2)
        kwargs.setdefault("timeout", 10.0)
        if "http_client" not in kwargs:
            http = (
                anthropic.DefaultAsyncHttpxClient if async_client else anthropic.DefaultHttpxClient
            )
            kwargs["http_client"] = http(verify=_ssl_context())
        cls = anthropic.AsyncAnthropic if async_client else anthropic.Anthropic
        return cls(base_url=self.anthropic_base_url, **kwargs)

    # -- scripting --

    def add(self, *items: ScriptItem) -> None:
        """Append items to the reply queue."""
        with self._lock:
            self._queue.extend(items)

    @property
    def remaining(self) -> int:
        """Items left in the queue."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[FakeRequest]:
        """A snapshot of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def batch_requests(self) -> list[FakeRequest]:
        """The request lines of every batch that ended, in the order they were answered (each a
        ``FakeRequest`` of the line's API, with the line's body)."""
        with self._lock:
            return list(self._batch_requests)

    @property
    def batches_created(self) -> int:
        """How many batches were created (OpenAI and Anthropic), faulted answers included."""
        return sum(
            1
            for r in self.requests
            if r.method == "POST" and r.path in ("/v1/batches", "/v1/messages/batches")
        )

    def _record_batch(self, *, api: Api, body: Any) -> FakeRequest:
        with self._lock:
            request = FakeRequest(
                index=len(self._batch_requests),
                api=api,
                method="POST",
                path="(batch line)",
                headers={},
                body=body,
                raw=b"",
            )
            self._batch_requests.append(request)
            return request

    def _record(self, **fields: Any) -> FakeRequest:
        with self._lock:
            request = FakeRequest(index=len(self._requests), **fields)
            self._requests.append(request)
            return request

    def _next_item(self, request: FakeRequest) -> ScriptItem:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self._handler is not None:
            return self._handler(request)
        raise ScriptExhaustedError(
            f"FakeProviderServer: request #{request.index} ({request.method} {request.path}) "
            "arrived but the script is empty; add replies or a handler."
        )

    # -- lifecycle --

    def close(self) -> None:
        """Stop serving, wake delayed answers, close open connections, join the threads."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._server.sockets_lock:
            sockets = list(self._server.open_sockets)
            threads = list(self._server.threads)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(timeout=5)
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeProviderServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = f"requests={len(self.requests)}, remaining={self.remaining}"
        return f"FakeProviderServer({self.url!r}, {counts})"
