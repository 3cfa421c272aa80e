"""Outline mode in ``ChangeRequestToolHandler`` (issue 29): whether the payload it shows is over
``max_payload_tokens``, the read tools' definitions in each API's shape, their answers (the
agent's own ``outline.answer``) and how a correction writes current values. A mixin: the handler
holds the state."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, cast

from agent_payload import outline as _outline
from agent_payload.errors import UsageError
from agent_payload.usage import estimate_tokens

if TYPE_CHECKING:
    from agent_payload._intake import Prepared
    from agent_payload.changes import AgentPayloadChangeRequest
    from agent_payload.providers.anthropic import AnthropicToolParam
    from agent_payload.providers.openai import OpenAIToolParam, ResponsesToolParam
    from agent_payload.tools import ToolResult

__all__ = ["OutlineReads"]


class OutlineReads:
    """The handler's outline mode (see ``ChangeRequestToolHandler``)."""

    payload: Any
    read_scope: Any
    name: str
    max_payload_tokens: int | None
    max_reads: int
    reads: int
    _lock: threading.Lock
    _outlined: tuple[Any, bool] | None

    @property
    def version(self) -> int:
        raise NotImplementedError

    def _tool_result(self, content: str, is_error: bool) -> ToolResult:
        """A ``ToolResult`` of this handler (its payload and version) with ``content``."""
        raise NotImplementedError

    def handle(
        self,
        arguments: str | Mapping[str, Any] | AgentPayloadChangeRequest,
        *,
        base_version: int | None = None,
        turn: Hashable | None = None,
    ) -> ToolResult:
        raise NotImplementedError

    async def ahandle(
        self,
        arguments: str | Mapping[str, Any] | AgentPayloadChangeRequest,
        *,
        base_version: int | None = None,
        turn: Hashable | None = None,
    ) -> ToolResult:
        raise NotImplementedError

    def _current(self) -> Prepared:
        raise NotImplementedError

    def shown(self) -> Any:
        """The payload as the model may see it (JSON data, read scope applied)."""
        return self._current().shown_json

    @property
    def outlined(self) -> bool:
        """True when the payload the model may see is larger than ``max_payload_tokens``: the
        prompt carries its outline and the read tools are offered."""
        budget = self.max_payload_tokens
        if budget is None:
            return False
        shown = self.shown()
        if self._outlined is None or self._outlined[0] is not shown:
            self._outlined = (shown, _outline.exceeds(shown, budget, count=estimate_tokens))
        return self._outlined[1]

    def read_tool_specs(self) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        """``(name, description, JSON Schema)`` of ``read_payload`` and ``find_in_payload``
        when the handler is ``outlined``; ``()`` when the payload fits."""
        if not self.outlined or self.max_payload_tokens is None:
            return ()
        return _outline.tool_specs(budget=self.max_payload_tokens)

    def openai_read_tools(self) -> list[OpenAIToolParam]:
        """The read tools as Chat Completions function tools (``[]`` when not ``outlined``)."""
        return [
            cast(
                "OpenAIToolParam",
                {"type": "function", "function": {"name": n, "description": d, "parameters": p}},
            )
            for n, d, p in self.read_tool_specs()
        ]

    def responses_read_tools(self) -> list[ResponsesToolParam]:
        """The read tools as Responses API function tools (``[]`` when not ``outlined``)."""
        return [
            cast(
                "ResponsesToolParam",
                {"type": "function", "name": n, "description": d, "parameters": p, "strict": False},
            )
            for n, d, p in self.read_tool_specs()
        ]

    def anthropic_read_tools(self) -> list[AnthropicToolParam]:
        """The read tools as Anthropic tools (``[]`` when not ``outlined``)."""
        return [
            cast("AnthropicToolParam", {"name": n, "description": d, "input_schema": p})
            for n, d, p in self.read_tool_specs()
        ]

    def read(self, name: str, arguments: str | Mapping[str, Any]) -> ToolResult:
        """Answer one ``read_payload`` or ``find_in_payload`` call (``outline.answer``, the
        agent's own reads, on the payload the model may see, within ``max_payload_tokens``);
        a bad call, or one past ``max_reads``, is an ``is_error`` result saying why. Nothing
        changes."""
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
                text = _outline.answer(name, args, self.shown(), budget, count=estimate_tokens)
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
        """One call of any of the handler's tools, by name: the change-request tool
        (``handle``) or a read tool (``read``); another name is an ``is_error`` result."""
        if name == self.name:
            return self.handle(arguments, base_version=base_version, turn=turn)
        if name in _outline.READ_TOOLS:
            return self.read(name, arguments)
        return self._unknown(name)

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
        if name in _outline.READ_TOOLS:
            return self.read(name, arguments)
        return self._unknown(name)

    def _unknown(self, name: str) -> ToolResult:
        names = [self.name, *(spec[0] for spec in self.read_tool_specs())]
        return self._tool_result(
            f"Error: there is no tool {_outline_echo(name)}; the tools are {', '.join(names)}.",
            True,
        )

    def render_current(self) -> Callable[[Any], str] | None:
        """How a correction writes a current value: within half ``max_payload_tokens``
        (complete when it fits, else outlined, ``outline.value_text``) when the handler is
        ``outlined``; None (in full) otherwise."""
        budget = self.max_payload_tokens
        if budget is None or not self.outlined:
            return None
        half = max(budget // 2, _outline.MIN_PAYLOAD_TOKENS)

        def render(value: Any) -> str:
            return _outline.value_text(value, half, count=estimate_tokens)

        return render


def _outline_echo(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")
