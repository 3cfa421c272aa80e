"""The MCP server over stdio (the official ``mcp`` SDK, v2 ``MCPServer``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent_payload import __version__
from agent_payload.errors import ConfigurationError
from agent_payload.mcp._editor import APPLY_TOOL, READ_TOOL, UNDO_TOOL, Outcome, PayloadFileEditor

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["build_server", "serve"]

logger = logging.getLogger("agent_payload.mcp")


def _require_mcp() -> None:
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            f"the MCP server needs the mcp package (v2), which is not installed ({exc}); "
            "install it with pip install 'agent-payload[mcp]'"
        ) from exc


def build_server(editor: PayloadFileEditor) -> MCPServer[Any]:
    """An ``MCPServer`` serving ``read_payload``, ``apply_change_request`` and
    ``undo_last_change`` on the editor's file. Run it with ``.run("stdio")``."""
    _require_mcp()
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult, TextContent
    from mcp_types import Tool as MCPTool

    class PayloadServer(MCPServer[Any]):
        """Lists the three tools with the change request's own input schema and hands each
        call's raw arguments to the editor (MCPServer's function tools would drop the keys a
        function does not name, and the handler must see exactly what the model wrote)."""

        async def list_tools(self) -> list[MCPTool]:
            return _tools(editor)

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            outcome = _call(editor, name, arguments)
            if name != READ_TOOL:
                logger.info("%s: %s", name, "refused" if outcome.is_error else "done")
            return CallToolResult(
                content=[TextContent(type="text", text=outcome.text)],
                structured_content=(
                    {"version": outcome.version} if outcome.version is not None else None
                ),
                is_error=outcome.is_error,
            )

    return PayloadServer(
        name="agent-payload",
        title=f"agent-payload: {editor.path.name}",
        version=__version__,
        instructions=(
            f"Edits the JSON file {editor.path.name} with change requests: {READ_TOOL} shows "
            f"it, {APPLY_TOOL} changes it (only what changes), {UNDO_TOOL} reverts the last "
            "change. Each result ends with the file's version: pass the version your change "
            "request was written against as its base_version."
        ),
        log_level="INFO",
    )


def _tools(editor: PayloadFileEditor) -> list[Any]:
    """The three tools as MCP lists them, with the editor's descriptions and schemas."""
    from mcp_types import Tool as MCPTool
    from mcp_types import ToolAnnotations

    return [
        MCPTool(
            name=READ_TOOL,
            description=editor.read_description(),
            input_schema=editor.read_schema(),
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        ),
        MCPTool(
            name=APPLY_TOOL,
            description=editor.apply_description(),
            input_schema=editor.apply_schema(),
            annotations=ToolAnnotations(
                read_only_hint=False,
                destructive_hint=True,
                idempotent_hint=False,
                open_world_hint=False,
            ),
        ),
        MCPTool(
            name=UNDO_TOOL,
            description=editor.undo_description(),
            input_schema={"type": "object", "properties": {}, "additionalProperties": False},
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=True, open_world_hint=False
            ),
        ),
    ]


def _call(editor: PayloadFileEditor, name: str, arguments: Any) -> Outcome:
    """One tool call handed to the editor with the arguments as the model wrote them."""
    from mcp.server.mcpserver.exceptions import ToolError

    arguments = arguments if isinstance(arguments, Mapping) else {}
    if name == READ_TOOL:
        extra = sorted(set(arguments) - {"path"})
        if extra:
            return Outcome(
                f"{READ_TOOL} takes only an optional path; unknown argument(s): {', '.join(extra)}",
                True,
            )
        return editor.read(arguments.get("path"))
    if name == APPLY_TOOL:
        return editor.apply(dict(arguments))
    if name == UNDO_TOOL:
        return editor.undo()
    raise ToolError(
        f"Unknown tool {name!r}; this server has {READ_TOOL}, {APPLY_TOOL} and {UNDO_TOOL}"
    )


def serve(editor: PayloadFileEditor) -> None:
    """Serve the editor's file over stdio until the client closes the connection. Logs go to
    stderr only (stdout is the protocol)."""
    server = build_server(editor)
    logger.info("serving %s over stdio", json.dumps(str(editor.path)))
    server.run("stdio")
