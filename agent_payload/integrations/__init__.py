"""The change request as a tool of the agent frameworks (OpenAI Agents SDK, pydantic-ai,
LangChain, LangGraph state): each module imports its framework when called (a missing one is a
``ConfigurationError`` naming the extra) and calls only the ``ChangeRequestToolHandler``'s
public methods, so every framework gets exactly the handler's verdicts. Guide:
docs/frameworks.md; the MCP server is ``agent_payload.mcp``.
"""
