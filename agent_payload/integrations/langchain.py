"""The change request as a LangChain tool (``pip install 'agent-payload[langchain]'``)::

    from agent_payload import ChangeRequestToolHandler
    from agent_payload.integrations.langchain import change_request_tool

    handler = ChangeRequestToolHandler(invoice, payload_type=Invoice)
    tool = change_request_tool(handler)
    model = ChatOpenAI(model="gpt-5.4-mini").bind_tools([tool])  # or ToolNode([tool])
    message = tool.invoke(ai_message.tool_calls[0])              # a ToolMessage
    handler.payload                                              # after every good call

The tool is a ``langchain_core`` ``BaseTool`` whose ``args_schema`` is the change request's JSON
schema for the handler's payload type (a dict: LangChain passes the model's arguments through
unvalidated, and the handler's parser and merge judge them). Invoked with a tool call it returns a
``ToolMessage`` holding the handler's text; a refused call has ``status="error"`` (the tool raises
``ToolException`` and handles it itself, so LangGraph's ``ToolNode`` passes the message on as it
is). Sync and async invocation both work (``ainvoke`` awaits async validators); calls on one
handler run one at a time. The calls of one ``AIMessage`` run by LangGraph's ``ToolNode`` (or
any runnable that invokes the tool with callbacks) share one base, the payload that message was
written against (README "Concurrent edits"): the turn is the parent run of the tool runs.
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
            result = self.handler.call(self.name, kwargs, turn=_turn(run_manager))
            if result.is_error:
                raise tools.ToolException(result.content)
            return result.content

        async def _arun(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> str:
            result = await self.handler.acall(self.name, kwargs, turn=_turn(run_manager))
            if result.is_error:
                raise tools.ToolException(result.content)
            return result.content

    PayloadTool.__module__ = __name__
    return PayloadTool


def payload_tools(handler: ChangeRequestToolHandler) -> list[BaseTool]:
    """The tools of a payload: ``change_request_tool(handler)`` and, when the handler is
    ``outlined`` (its payload over ``max_payload_tokens``), ``read_payload`` and
    ``find_in_payload`` answered by ``handler.read`` (a bad read is a ``ToolMessage`` with
    ``status="error"``). Give the model ``handler.prompt(task)``, which then carries the
    outline; build the tools after it (the list is fixed)."""
    tools = [change_request_tool(handler)]
    cls = _tool_class()
    for spec in read_specs(handler, "langchain.payload_tools"):
        tools.append(
            cls(
                name=spec.name,
                description=spec.description,
                args_schema=spec.schema,
                handler=handler,
            )
        )
    return tools


def change_request_tool(
    handler: ChangeRequestToolHandler,
    *,
    name: str | None = None,
    description: str | None = None,
) -> BaseTool:
    """A LangChain ``BaseTool`` applying the model's change requests through ``handler``.

    ``name`` defaults to the handler's tool name (and must equal it: the handler's corrections
    name the tool); ``description`` defaults to the handler's. Raises ``ConfigurationError``
    when ``langchain-core`` is not installed.
    """
    cls = _tool_class()
    spec = tool_spec(
        handler, name=name, description=description, caller="langchain.change_request_tool"
    )
    return cls(
        name=spec.name,
        description=spec.description,
        args_schema=spec.schema,
        handler=handler,
    )


def _turn(run_manager: Any) -> Any:
    """The run the tool was invoked from (``ToolNode`` runs the calls of one ``AIMessage``
    under one run); None when invoked on its own."""
    parent = getattr(run_manager, "parent_run_id", None)
    return None if parent is None else ("langchain", parent)
