"""The change request as an OpenAI Agents SDK ``FunctionTool`` (``pip install
'agent-payload[agents]'``; docs/frameworks.md). Calls go to ``await handler.ahandle``; the calls
of one model response share its base, the turn being the run's model request count. The APIs
have no error flag on a function's output: a refused call says so in its text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agent_payload.integrations._common import Same, ToolSpec, read_specs, require, tool_spec
from agent_payload.tools import ChangeRequestToolHandler

if TYPE_CHECKING:
    from agents import FunctionTool

__all__ = ["change_request_tool", "payload_tools"]


def change_request_tool(
    handler: ChangeRequestToolHandler,
    *,
    name: str | None = None,
    description: str | None = None,
) -> FunctionTool:
    """An Agents SDK ``FunctionTool`` applying the model's change requests through ``handler``
    (``name`` must be the handler's tool name; ``description`` replaces the handler's). Raises
    ``ConfigurationError`` when ``openai-agents`` is not installed."""
    agents = require("agents", package="openai-agents", extra="agents")
    spec = tool_spec(
        handler, name=name, description=description, caller="openai_agents.change_request_tool"
    )

    async def invoke(context: Any, arguments: str) -> str:
        result = await handler.ahandle(arguments, turn=_turn(context))
        return result.content

    return _function_tool(agents, spec, invoke)


def payload_tools(handler: ChangeRequestToolHandler) -> list[FunctionTool]:
    """``change_request_tool(handler)`` and, when the handler is ``outlined``, the read tools
    ``read_payload`` and ``find_in_payload`` answered by ``handler.read``. Build them after
    ``handler.prompt(task)`` (which then carries the outline): the list is fixed."""
    agents = require("agents", package="openai-agents", extra="agents")
    tools = [change_request_tool(handler)]
    for spec in read_specs(handler, "openai_agents.payload_tools"):
        tools.append(_function_tool(agents, spec, _reader(handler, spec.name)))
    return tools


def _function_tool(
    agents: Any, spec: ToolSpec, invoke: Callable[[Any, str], Awaitable[str]]
) -> FunctionTool:
    tool: FunctionTool = agents.FunctionTool(
        **spec.kwargs("params_json_schema"), on_invoke_tool=invoke, strict_json_schema=False
    )
    return tool


def _reader(handler: ChangeRequestToolHandler, name: str) -> Callable[[Any, str], Awaitable[str]]:
    async def read(context: Any, arguments: str) -> str:
        return handler.read(name, arguments).content

    return read


def _turn(context: Any) -> Any:
    """The model response a call came from: the run (its ``Usage``) and the number of model
    requests so far; None (base unknown) without a usage or a request count."""
    usage = getattr(context, "usage", None)
    requests = getattr(usage, "requests", None)
    if not isinstance(requests, int) or requests <= 0:  # no usage, or no request yet
        return None
    return ("openai-agents", Same(usage), requests)
