"""The change request as a first-class tool in the agent frameworks people use.

Each module imports its framework only when called and raises ``ConfigurationError`` naming
the extra to install when it is missing:

* ``agent_payload.integrations.openai_agents.change_request_tool(handler)``: an OpenAI Agents
  SDK ``FunctionTool`` (``pip install 'agent-payload[agents]'``).
* ``agent_payload.integrations.pydantic_ai.change_request_tool(handler)``: a pydantic-ai
  ``Tool`` (``pip install 'agent-payload[pydantic-ai]'``); also with a function of the run
  context returning the handler, for a payload per run held in the agent's ``deps``.
* ``agent_payload.integrations.langchain.change_request_tool(handler)``: a LangChain
  ``BaseTool`` that works in LangGraph's ``ToolNode`` (``pip install
  'agent-payload[langchain]'``).
* ``agent_payload.integrations.langgraph.change_request_tool(state_key="payload", ...)``: the
  payload in LangGraph state, checkpointed with the thread (``pip install
  'agent-payload[langgraph]'``); it builds a handler per model message (imported on import).

Each takes a ``ChangeRequestToolHandler`` (the payload holder with its payload type, marker,
guards and validators) and calls only its public ``handle``/``ahandle`` (the async tools await
async validators) and tool-definition methods, so every framework gets exactly the handler's
verdicts. Each call is passed with the model response it came from (``turn=``: the Agents
SDK's run and request count, pydantic-ai's run id and step, the parent run of a LangChain tool),
so the parallel calls of one response share its base (README "Concurrent edits"). The tool's
JSON schema is the change request's schema for the handler's payload type, the result text is
the handler's (a summary of what changed, or the problems to fix with nothing applied), and a
refused call is marked as an
error where the framework has a way to say so. The MCP server is ``agent_payload.mcp``.
"""
