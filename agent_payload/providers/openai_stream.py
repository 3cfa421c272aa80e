"""The OpenAI APIs' event streams read into the ``ChatCompletion`` / ``Response`` the adapters
already parse (pure readers; the adapters drive them, sync or async)."""

from __future__ import annotations

from typing import Any

from agent_payload.providers._common import StreamBroken, missing_sdk

try:
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_sdk("openai", _exc) from _exc

__all__ = ["ChatStreamReader", "ResponsesStreamReader", "chat_tool_call"]


def chat_tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A function call in the Chat Completions shape (an assistant message's ``tool_calls``)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class ChatStreamReader:
    """Chat Completions chunks into one ``ChatCompletion``: content and refusal joined, tool
    calls gathered by ``index``, the last ``finish_reason``, the usage chunk."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.texts: dict[str, list[str]] = {"content": [], "refusal": []}
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None

    def feed(self, chunk: Any) -> str:
        if not self.head:
            self.head = {
                "id": getattr(chunk, "id", None) or "",
                "created": getattr(chunk, "created", None) or 0,
                "model": getattr(chunk, "model", None),
            }
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        added: list[str] = []
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue  # n > 1: the adapter reads the first choice, as without streaming
            delta = choice.delta
            if delta is not None:
                added += self._delta(delta)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
        return "".join(added)

    def _delta(self, delta: Any) -> list[str]:
        added: list[str] = []
        for key, pieces in self.texts.items():
            piece = getattr(delta, key, None)
            if piece:
                pieces.append(piece)
                added.append(piece)
        for call in getattr(delta, "tool_calls", None) or []:
            entry = self.calls.setdefault(
                call.index, {"id": None, "type": "function", "name": "", "arguments": ""}
            )
            entry["id"] = entry["id"] or call.id
            function = call.function
            if function is not None:
                entry["name"] = entry["name"] or function.name or ""
                if function.arguments:
                    entry["arguments"] += function.arguments
                    added.append(function.arguments)
        return added

    def result(self) -> ChatCompletion:
        if self.finish_reason is None:
            raise StreamBroken("the stream ended before a chunk with a finish_reason")
        message: dict[str, Any] = {"role": "assistant"}
        message.update((key, "".join(pieces) or None) for key, pieces in self.texts.items())
        if self.calls:
            message["tool_calls"] = [
                chat_tool_call(call["id"] or f"call_{index}", call["name"], call["arguments"])
                for index, call in sorted(self.calls.items())
            ]
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        usage = self.usage.to_dict() if self.usage is not None else None
        return ChatCompletion.construct(
            **self.head, object="chat.completion", choices=[choice], usage=usage
        )


_TERMINAL = ("response.completed", "response.incomplete")
_DELTAS = (
    "response.output_text.delta",
    "response.refusal.delta",
    "response.function_call_arguments.delta",
)


class ResponsesStreamReader:
    """Responses events into the ``Response`` of the terminal event (``response.completed`` or
    ``.incomplete``), its output rebuilt from ``output_item.done`` when a server leaves it out."""

    def __init__(self) -> None:
        self.response: Response | None = None
        self.items: dict[int, Any] = {}

    def feed(self, event: Any) -> str:
        kind = getattr(event, "type", None)
        if kind in _DELTAS:
            return str(event.delta or "")
        if kind == "response.output_item.done":
            self.items[event.output_index] = event.item
        elif kind in _TERMINAL:
            self.response = event.response
        elif kind == "response.failed":
            error = getattr(event.response, "error", None)
            raise StreamBroken(f"response.failed: {getattr(error, 'message', None) or error}")
        elif kind == "error":
            raise StreamBroken(f"error event: {getattr(event, 'message', None) or event}")
        return ""

    def result(self) -> Response:
        response = self.response
        if response is None:
            raise StreamBroken("the stream ended before response.completed")
        if getattr(response, "output", None) is None:
            response = response.model_copy()
            response.output = [self.items[n] for n in sorted(self.items)]
        return response
