"""The change request as a LangChain ``BaseTool`` (``pip install 'agent-payload[langchain]'``;
docs/frameworks.md). Invoked with a tool call it returns a ``ToolMessage`` with the handler's
text, ``status="error"`` for a refused call (the tool raises ``ToolException`` and handles it
itself, so LangGraph's ``ToolNode`` passes it on). The calls of one ``AIMessage`` share its
base: the turn is the parent run of the tool runs.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from agent_payload import _callables
from agent_payload.integrations._common import read_specs, require, tool_spec
from agent_payload.tools import ChangeRequestToolHandler

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["change_request_tool", "payload_tools"]


@functools.cache
def _tool_class() -> type[BaseTool]:
    tools = require("langchain_core.tools", package="langchain-core", extra="langchain")
    pydantic = require("pydantic", package="pydantic", extra="langchain")

    class PayloadTool(tools.BaseTool):  # type: ignore[misc, name-defined]
        """One of a handler's tools (the change request, or a read), called by its name."""

        model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)

        handler: ChangeRequestToolHandler
        handle_tool_error: bool = True

        def _run(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> str:
            if self.name == self.handler.name:
                _callables.require_sync(
                    "langchain.change_request_tool (invoked synchronously)",
                    [("the handler's validator", v) for v in self.handler.validators],
                    "invoke it with await tool.ainvoke(...) (in LangGraph: await "
                    "graph.ainvoke(...))",
                )
            return self._content(self.handler.call(self.name, kwargs, turn=_turn(run_manager)))

        async def _arun(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> str:
            result = await self.handler.acall(self.name, kwargs, turn=_turn(run_manager))
            return self._content(result)

        def _content(self, result: Any) -> str:
            if result.is_error:
                raise tools.ToolException(result.content)
            return str(result.content)

    PayloadTool.__module__ = __name__
    return PayloadTool


def payload_tools(handler: ChangeRequestToolHandler) -> list[BaseTool]:
    """``change_request_tool(handler)`` and, when the handler is ``outlined``, the read tools
    ``read_payload`` and ``find_in_payload`` answered by ``handler.read`` (a bad read: a
    ``ToolMessage`` with ``status="error"``). Build them after ``handler.prompt(task)`` (which
    then carries the outline): the list is fixed."""
    tools = [change_request_tool(handler)]
    for spec in read_specs(handler, "langchain.payload_tools"):
        tools.append(_tool_class()(**spec.kwargs("args_schema"), handler=handler))
    return tools


def change_request_tool(
    handler: ChangeRequestToolHandler,
    *,
    name: str | None = None,
    description: str | None = None,
) -> BaseTool:
    """A LangChain ``BaseTool`` applying the model's change requests through ``handler``
    (``name`` must be the handler's tool name; ``description`` replaces the handler's). Raises
    ``ConfigurationError`` when ``langchain-core`` is not installed."""
    cls = _tool_class()
    spec = tool_spec(
        handler, name=name, description=description, caller="langchain.change_request_tool"
    )
    return cls(**spec.kwargs("args_schema"), handler=handler)


def _turn(run_manager: Any) -> Any:
    """The run the tool was invoked from (one per ``AIMessage`` in a ``ToolNode``), or None."""
    parent = getattr(run_manager, "parent_run_id", None)
    return None if parent is None else ("langchain", parent)
