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
``agent_payload.schema``). Each call's arguments go to ``handler.handle``; its text is the tool's
output. The Responses and Chat Completions APIs have no error flag on a function's output, so a
refused call is told apart by its text (it starts by saying nothing was applied and what to fix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_payload.integrations._common import handle, require, tool_spec
from agent_payload.tools import ChangeRequestToolHandler

if TYPE_CHECKING:
    from agents import FunctionTool

__all__ = ["change_request_tool"]


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
        return handle(handler, arguments).content

    tool: FunctionTool = agents.FunctionTool(
        name=spec.name,
        description=spec.description,
        params_json_schema=spec.schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )
    return tool
