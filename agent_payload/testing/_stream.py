"""The server-sent events ``FakeProviderServer`` streams for a settled ``Reply``: the body
``testing.wire`` builds, in each API's events (pure; the HTTP side is ``testing.server``)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from agent_payload.testing.script import CHUNK_CHARS, Api, FakeRequest, Reply
from agent_payload.testing.wire import BUILDERS, error_body

__all__ = ["CHUNK_CHARS", "error_event", "stream_events"]


def _pieces(text: str) -> list[str]:
    return [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]


def _frame(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (``event:`` line when named, one ``data:`` line)."""
    line = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {line}\n\n".encode()


def stream_events(reply: Reply, request: FakeRequest) -> list[bytes]:
    """The events (each a whole server-sent event) answering ``request`` with ``reply``."""
    body = BUILDERS[request.api](reply, request)
    return _STREAMS[request.api](body, request)


# --- Chat Completions ----------------------------------------------------------------------------


def _chat_events(completion: dict[str, Any], request: FakeRequest) -> list[bytes]:
    options = request.body.get("stream_options") if isinstance(request.body, dict) else None
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    choice = completion["choices"][0]
    message = choice["message"]

    keys = ("id", "created", "model", "system_fingerprint")
    base = {**{key: completion[key] for key in keys}, "object": "chat.completion.chunk"}
    usage: dict[str, Any] = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        delta_choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _frame({**base, "choices": [delta_choice], **usage})

    first = "" if message["content"] is not None else None  # null beside tool calls, refusals
    events = [chunk({"role": "assistant", "content": first, "refusal": None})]
    events += [chunk({"content": piece}) for piece in _pieces(message["content"] or "")]
    events += [chunk({"refusal": piece}) for piece in _pieces(message["refusal"] or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(function["arguments"])
        ]
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append(_frame({**base, "choices": [], "usage": completion["usage"]}))
    events.append(_frame("[DONE]"))
    return events


# --- Responses -----------------------------------------------------------------------------------


def _responses_events(response: dict[str, Any], request: FakeRequest) -> list[bytes]:
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(_frame({"type": kind, "sequence_number": len(events), **fields}, kind))

    unknown_yet = dict.fromkeys(("usage", "completed_at", "incomplete_details"))
    started = {**response, **unknown_yet, "status": "in_progress", "output": []}
    emit("response.created", response=started)
    emit("response.in_progress", response=started)
    for n, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": n}
        calling = item["type"] == "function_call"
        empty: dict[str, Any] = {"arguments": ""} if calling else {"content": []}
        added = {**item, **empty, "status": "in_progress"}
        emit("response.output_item.added", output_index=n, item=added)
        if calling:
            for piece in _pieces(item["arguments"]):
                emit("response.function_call_arguments.delta", **where, delta=piece)
            done = {"name": item["name"], "arguments": item["arguments"]}
            emit("response.function_call_arguments.done", **where, **done)
        else:
            for m, part in enumerate(item["content"]):
                at = {**where, "content_index": m}
                key = "refusal" if part["type"] == "refusal" else "text"
                kind = "refusal" if key == "refusal" else "output_text"
                logprobs: dict[str, Any] = {} if key == "refusal" else {"logprobs": []}
                emit("response.content_part.added", **at, part={**part, key: "", **logprobs})
                for piece in _pieces(part[key]):
                    emit(f"response.{kind}.delta", **at, delta=piece, **logprobs)
                emit(f"response.{kind}.done", **at, **{key: part[key]}, **logprobs)
                emit("response.content_part.done", **at, part=part)
        emit("response.output_item.done", output_index=n, item=item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    emit(final, response=response)
    return events


# --- Anthropic Messages --------------------------------------------------------------------------


def _anthropic_events(message: dict[str, Any], request: FakeRequest) -> list[bytes]:
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(_frame({"type": kind, **fields}, kind))

    usage = message["usage"]
    stop = ("stop_reason", "stop_sequence", "stop_details")  # told in message_delta
    start_usage = {**usage, "output_tokens": min(1, usage["output_tokens"])}
    emit(
        "message_start",
        message={**message, **dict.fromkeys(stop), "content": [], "usage": start_usage},
    )
    emit("ping")
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            arguments = json.dumps(block["input"]) if block["input"] else ""
            for piece in _pieces(arguments):
                delta = {"type": "input_json_delta", "partial_json": piece}
                emit("content_block_delta", index=index, delta=delta)
        else:
            emit("content_block_start", index=index, content_block={**block, "text": ""})
            for piece in _pieces(block["text"]):
                delta = {"type": "text_delta", "text": piece}
                emit("content_block_delta", index=index, delta=delta)
        emit("content_block_stop", index=index)
    emit("message_delta", delta={key: message[key] for key in stop}, usage=copy.deepcopy(usage))
    emit("message_stop")
    return events


_STREAMS: dict[Api, Callable[[dict[str, Any], FakeRequest], list[bytes]]] = {
    "chat.completions": _chat_events,
    "responses": _responses_events,
    "messages": _anthropic_events,
}


def error_event(api: Api, message: str, *, sequence_number: int = 0) -> bytes:
    """The event an API sends when it fails mid-stream: its error body (Anthropic's
    ``overloaded_error``) as a ``data:`` line (Chat Completions) or an ``error`` event."""
    if api == "responses":
        data = {"type": "error", "code": "server_error", "message": message, "param": None}
        return _frame({**data, "sequence_number": sequence_number}, "error")
    if api == "messages":
        return _frame(error_body(api, 529, message), "error")
    return _frame(error_body(api, 500, message))
