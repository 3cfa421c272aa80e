"""Outline mode in ``ChangeRequestToolHandler`` (a mixin: the handler holds the state): the
read tools and how a correction writes current values; and each API's tool definition shape,
which all the handler's tools share. Guide: docs/outline.md."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, cast

from agent_payload import outline as _outline
from agent_payload._config import clip
from agent_payload.errors import UsageError

if TYPE_CHECKING:
    from agent_payload._intake import Prepared
    from agent_payload.providers.anthropic import AnthropicToolParam
    from agent_payload.providers.openai import OpenAIToolParam, ResponsesToolParam
    from agent_payload.tools import ToolResult

__all__ = ["OutlineReads", "anthropic_shape", "openai_shape", "responses_shape"]


def openai_shape(name: str, description: str, parameters: dict[str, Any]) -> OpenAIToolParam:
    """A Chat Completions function tool."""
    function = {"name": name, "description": description, "parameters": parameters}
    return cast("OpenAIToolParam", {"type": "function", "function": function})


def responses_shape(name: str, description: str, parameters: dict[str, Any]) -> ResponsesToolParam:
    """A Responses API function tool (flat; not strict: the API is strict unless told)."""
    tool = {"type": "function", "name": name, "description": description, "parameters": parameters}
    return cast("ResponsesToolParam", {**tool, "strict": False})


def anthropic_shape(name: str, description: str, parameters: dict[str, Any]) -> AnthropicToolParam:
    """An Anthropic tool."""
    tool = {"name": name, "description": description, "input_schema": parameters}
    return cast("AnthropicToolParam", tool)


class OutlineReads:
    """The handler's outline mode."""

    name: str
    max_payload_tokens: int | None
    max_reads: int
    reads: int
    _lock: threading.Lock
    _outlined: tuple[Any, bool] | None
    handle: Callable[..., ToolResult]
    ahandle: Callable[..., Awaitable[ToolResult]]
    _tool_result: Callable[[str, bool], ToolResult]
    _current: Callable[[], Prepared]

    def shown(self) -> Any:
        """The payload as the model may see it (JSON data, read scope applied)."""
        return self._current().shown_json

    @property
    def outlined(self) -> bool:
        """True when the payload shown is over ``max_payload_tokens``: outline and read tools."""
        budget = self.max_payload_tokens
        if budget is None:
            return False
        shown = self.shown()
        if self._outlined is None or self._outlined[0] is not shown:
            self._outlined = (shown, _outline.exceeds(shown, budget))
        return self._outlined[1]

    def read_tool_specs(self) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        """``(name, description, schema)`` of the read tools when ``outlined``, else ``()``."""
        if not self.outlined or self.max_payload_tokens is None:
            return ()
        return _outline.tool_specs(budget=self.max_payload_tokens)

    def openai_read_tools(self) -> list[OpenAIToolParam]:
        """The read tools as Chat Completions function tools (``[]`` when not ``outlined``)."""
        return [openai_shape(*spec) for spec in self.read_tool_specs()]

    def responses_read_tools(self) -> list[ResponsesToolParam]:
        """The read tools as Responses API function tools (``[]`` when not ``outlined``)."""
        return [responses_shape(*spec) for spec in self.read_tool_specs()]

    def anthropic_read_tools(self) -> list[AnthropicToolParam]:
        """The read tools as Anthropic tools (``[]`` when not ``outlined``)."""
        return [anthropic_shape(*spec) for spec in self.read_tool_specs()]

    def read(self, name: str, arguments: str | Mapping[str, Any]) -> ToolResult:
        """Answer one ``read_payload`` or ``find_in_payload`` call (a bad one, or one past
        ``max_reads``, is an ``is_error`` result saying why)."""
        if name not in _outline.READ_TOOLS:
            raise UsageError(
                f"ChangeRequestToolHandler.read: {name!r} is not a read tool; the read tools are "
                f"{_outline.READ_PAYLOAD} and {_outline.FIND_IN_PAYLOAD} (call(name, arguments) "
                "dispatches any tool of the handler)"
            )
        budget = self.max_payload_tokens or _outline.DEFAULT_MAX_PAYLOAD_TOKENS
        with self._lock:
            if self.reads >= self.max_reads:
                text = (
                    f"Error: no more reads: {self.max_reads} were answered for this task. Send "
                    f"your change with {self.name} now, using what you have read."
                )
            else:
                self.reads += 1
                args = arguments if isinstance(arguments, str | Mapping) else {}
                text = _outline.answer(name, args, self.shown(), budget)
                if self.reads == self.max_reads:
                    text += "\n\n" + _outline.last_read_note(self.max_reads)
        return self._tool_result(text, text.startswith("Error:"))

    def call(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        *,
        base_version: int | None = None,
        turn: Hashable | None = None,
    ) -> ToolResult:
        """One call of any of the handler's tools, by name (an unknown one: ``is_error``)."""
        if name == self.name:
            return self.handle(arguments, base_version=base_version, turn=turn)
        if name in _outline.READ_TOOLS:
            return self.read(name, arguments)
        names = [self.name, *(spec[0] for spec in self.read_tool_specs())]
        text = f"Error: there is no tool {clip(name)!r}; the tools are {', '.join(names)}."
        return self._tool_result(text, True)

    async def acall(
        self,
        name: str,
        arguments: str | Mapping[str, Any],
        *,
        base_version: int | None = None,
        turn: Hashable | None = None,
    ) -> ToolResult:
        """``call`` for async loops (the change request through ``ahandle``)."""
        if name == self.name:
            return await self.ahandle(arguments, base_version=base_version, turn=turn)
        return self.call(name, arguments)

    def render_current(self) -> Callable[[Any], str] | None:
        """How a correction writes a current value when ``outlined``: within half the budget
        (None: in full)."""
        budget = self.max_payload_tokens
        return _outline.current_renderer(budget) if budget is not None and self.outlined else None
