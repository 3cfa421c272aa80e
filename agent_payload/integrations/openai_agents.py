"""The change request as an OpenAI Agents SDK tool (``pip install 'agent-payload[agents]'``)::

    from agents import Agent, Runner
    from agent_payload import ChangeRequestToolHandler
    from agent_payload.integrations.openai_agents import change_request_tool

    handler = ChangeRequestToolHandler(invoice, payload_type=Invoice)
    agent = Agent(name="editor", instructions=..., tools=[change_request_tool(handler)])
    await Runner.run(agent, "Mark the invoice as paid")
    handler.payload                     # the payload after every good call

The tool's ``params_json_schema`` is the change request's schema for the handler's payload type
(sent with ``strict_json_schema=False``: strict mode cannot express a change request, see
``agent_payload.schema``). Each call's arguments go to ``await handler.ahandle`` (async
validators are awaited); its text is the tool's output. The calls of one model response share
one base (the payload that response was written against, README "Concurrent edits"): the turn
is the run's model request count (``ToolContext.usage.requests``), so a parallel call is
rebased over its siblings applied before it. The Responses and Chat Completions APIs have no
error flag on a function's output, so a refused call is told apart by its text (it starts by
saying nothing was applied and what to fix).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agent_payload.integrations._common import Same, read_specs, require, tool_spec
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
    """An Agents SDK ``FunctionTool`` applying the model's change requests through ``handler``.

    ``name`` defaults to the handler's tool name (and must equal it: the handler's corrections
    name the tool); ``description`` defaults to the handler's. Raises ``ConfigurationError``
    when ``openai-agents`` is not installed.
    """
    agents = require("agents", package="openai-agents", extra="agents")
    spec = tool_spec(
        handler, name=name, description=description, caller="openai_agents.change_request_tool"
    )

    async def invoke(context: Any, arguments: str) -> str:
        result = await handler.ahandle(arguments, turn=_turn(context))
        return result.content

    tool: FunctionTool = agents.FunctionTool(
        name=spec.name,
        description=spec.description,
        params_json_schema=spec.schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )
    return tool


def payload_tools(handler: ChangeRequestToolHandler) -> list[FunctionTool]:
    """The tools of a payload: ``change_request_tool(handler)`` and, when the handler is
    ``outlined`` (its payload over ``max_payload_tokens``), ``read_payload`` and
    ``find_in_payload`` answered by ``handler.read`` (give the model ``handler.prompt(task)``,
    which then carries the outline). Build them after ``prompt``: the list is fixed."""
    agents = require("agents", package="openai-agents", extra="agents")
    tools = [change_request_tool(handler)]
    for spec in read_specs(handler, "openai_agents.payload_tools"):
        tools.append(
            agents.FunctionTool(
                name=spec.name,
                description=spec.description,
                params_json_schema=spec.schema,
                on_invoke_tool=_reader(handler, spec.name),
                strict_json_schema=False,
            )
        )
    return tools


def _reader(handler: ChangeRequestToolHandler, name: str) -> Callable[[Any, str], Awaitable[str]]:
    async def read(context: Any, arguments: str) -> str:
        return handler.read(name, arguments).content

    return read


def _turn(context: Any) -> Any:
    """The model response a call came from: the run (its ``Usage``, one per run) and the
    number of model requests it made so far. None (the base unknown) when the context has no
    usage or the model counts no requests: every response of the run would share one key."""
    usage = getattr(context, "usage", None)
    requests = getattr(usage, "requests", None)
    if usage is None or not isinstance(requests, int) or requests <= 0:
        return None
    return ("openai-agents", Same(usage), requests)
