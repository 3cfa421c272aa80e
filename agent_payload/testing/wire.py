"""The JSON bodies ``FakeProviderServer`` answers with, per API: a settled ``Reply`` as a
response (``BUILDERS``) and the error body. Pure; the HTTP side is ``testing.server``."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

from agent_payload.testing.script import Api, FakeRequest, Reply, ReplyKind
from agent_payload.testing.scripted import estimate_tokens

__all__ = ["BUILDERS", "error_body", "new_id", "resolve_reply"]

_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    return f"{prefix}{next(_ids):06d}fake"


def resolve_reply(item: str | Reply, request: FakeRequest) -> Reply:
    """The reply with its kind settled (``text``/``tool_call``/``refusal``) and the tool name."""
    reply = item if isinstance(item, Reply) else Reply(text=item)
    kind: ReplyKind = reply.kind
    if kind == "auto":
        kind = "tool_call" if request.forced_tool is not None else "text"
    name = None
    calls = reply.calls
    if kind == "tool_call":
        default = request.forced_tool or (request.tools or ["tool"])[0]
        name = reply.tool_name or default
        calls = tuple(dataclasses.replace(c, tool_name=c.tool_name or default) for c in calls)
    return dataclasses.replace(reply, kind=kind, tool_name=name, calls=calls)


def _calls(reply: Reply) -> tuple[Reply, ...]:
    """The tool calls of a settled ``tool_call`` reply (itself when it makes one)."""
    return reply.calls or (reply,)


def _usage_numbers(reply: Reply, request: FakeRequest) -> tuple[int, int]:
    """Input tokens (cache reads and writes included) and output tokens of the reply."""
    input_tokens = reply.input_tokens
    if input_tokens is None:
        cached = reply.cached_input_tokens + reply.cache_write_input_tokens
        input_tokens = max(estimate_tokens(request.text), cached)
    output_tokens = reply.output_tokens
    return input_tokens, estimate_tokens(reply.text) if output_tokens is None else output_tokens


def _cache_details(reply: Reply) -> dict[str, int]:
    """OpenAI's input token details: the cache reads and writes (counted in the input)."""
    return {
        "cached_tokens": reply.cached_input_tokens,
        "cache_write_tokens": reply.cache_write_input_tokens,
    }


def _chat_completion(reply: Reply, request: FakeRequest) -> dict[str, Any]:
    input_tokens, output_tokens = _usage_numbers(reply, request)
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    finish_reason = "stop"
    if reply.kind == "tool_call":
        message["tool_calls"] = [
            {
                "id": new_id("call_"),
                "type": "function",
                "function": {"name": call.tool_name, "arguments": call.text},
            }
            for call in _calls(reply)
        ]
        finish_reason = "stop" if request.forced_tool else "tool_calls"
    elif reply.kind == "refusal":
        message["refusal"] = reply.text
    else:
        message["content"] = reply.text
    if reply.length_limited:
        finish_reason = "length"
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model_name,
        "system_fingerprint": "fp_fake",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "prompt_tokens_details": {**_cache_details(reply), "audio_tokens": 0},
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
                "id": new_id("fc_"),
                "call_id": new_id("call_"),
                "name": call.tool_name,
                "arguments": call.text,
                "status": item_status,
            }
            for call in _calls(reply)
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
                "id": new_id("msg_"),
                "status": item_status,
                "role": "assistant",
                "content": [part],
            }
        ]
    now = time.time()
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": now,
        "completed_at": None if reply.length_limited else now,
        "status": "incomplete" if reply.length_limited else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if reply.length_limited else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": request.model_name,
        "output": output,
        "parallel_tool_calls": True,
        "temperature": body.get("temperature"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": None,
        "text": body.get("text") or {"format": {"type": "text"}},
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": _cache_details(reply),
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
        for call in _calls(reply):
            try:
                arguments = json.loads(call.text)
            except ValueError:
                arguments = None
            if isinstance(arguments, dict) or reply.length_limited:
                # (cut by max_tokens, the call still comes, with what input it has)
                block = {"type": "tool_use", "id": new_id("toolu_"), "name": call.tool_name}
                content.append({**block, "input": arguments if isinstance(arguments, dict) else {}})
                stop_reason = "tool_use"
            else:
                # Tool input is always an object in this API; anything else is sent as text.
                content.append({"type": "text", "text": call.text, "citations": None})
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
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.model_name,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "stop_details": stop_details,
        "usage": {
            # Anthropic's input_tokens leaves out the cache reads and writes
            "input_tokens": max(
                0, input_tokens - reply.cached_input_tokens - reply.cache_write_input_tokens
            ),
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": reply.cache_write_input_tokens,
            "cache_read_input_tokens": reply.cached_input_tokens,
        },
    }


BUILDERS: dict[Api, Callable[[Reply, FakeRequest], dict[str, Any]]] = {
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


def error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    if api == "messages":
        kind = _ANTHROPIC_ERROR_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = {429: "rate_limit_exceeded", 401: "invalid_request_error"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}
