"""The MCP server over stdio (the official ``mcp`` SDK, v2 ``MCPServer``)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import secrets
import sys
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from agent_payload import __version__
from agent_payload.errors import ConfigurationError
from agent_payload.mcp._editor import (
    APPLY_TOOL,
    FIND_TOOL,
    READ_TOOL,
    UNDO_TOOL,
    Outcome,
    PayloadFileEditor,
)

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["build_server", "serve"]

logger = logging.getLogger("agent_payload.mcp")

_TOO_DEEP = f"__agent_payload_too_deep_{secrets.token_hex(8)}__"
"""The one argument a too-deep tool call is rewritten to (unguessable: per process)."""
_SDK_DEPTH = 200
"""pydantic-core's JSON nesting limit: the SDK drops a deeper message without an answer."""


def build_server(editor: PayloadFileEditor) -> MCPServer[Any]:
    """An ``MCPServer`` serving ``read_payload``, ``apply_change_request`` and
    ``undo_last_change`` on the editor's file. Run it with ``.run("stdio")``."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise ConfigurationError(
            f"the MCP server needs the mcp package (v2), which is not installed ({exc}); "
            "install it with pip install 'agent-payload[mcp]'"
        ) from exc
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from mcp_types import Tool as MCPTool

    class PayloadServer(MCPServer[Any]):
        """Lists the three tools with the change request's own input schema and hands each
        call's raw arguments to the editor (MCPServer's function tools would drop the keys a
        function does not name, and the handler must see exactly what the model wrote)."""

        async def list_tools(self) -> list[MCPTool]:
            reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
            undoes = ToolAnnotations(
                read_only_hint=False, destructive_hint=True, open_world_hint=False
            )
            applies = undoes.model_copy(update={"idempotent_hint": False})
            no_arguments = {"type": "object", "properties": {}, "additionalProperties": False}
            return [
                MCPTool(name=name, description=text, input_schema=schema, annotations=hints)
                for name, text, schema, hints in (
                    (READ_TOOL, editor.read_description(), editor.read_schema(), reads),
                    (FIND_TOOL, editor.find_description(), editor.find_schema(), reads),
                    (APPLY_TOOL, editor.apply_description(), editor.apply_schema(), applies),
                    (UNDO_TOOL, editor.undo_description(), no_arguments, undoes),
                )
            ]

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            if isinstance(arguments, Mapping) and _TOO_DEEP in arguments:
                outcome = Outcome(
                    f"The arguments of this {name} call are nested more than about "
                    f"{_SDK_DEPTH - 5} levels deep, more than the MCP transport reads; nothing "
                    "was read or applied. Send a flatter change request (replace a deep "
                    "subtree in several calls, or write it less deeply).",
                    True,
                )
            else:
                outcome = _call(editor, name, arguments)
            if name not in (READ_TOOL, FIND_TOOL):
                logger.info("%s: %s", name, "refused" if outcome.is_error else "done")
            return CallToolResult(
                content=[TextContent(type="text", text=outcome.text)],
                structured_content=(
                    {"version": outcome.version} if outcome.version is not None else None
                ),
                is_error=outcome.is_error,
            )

        async def run_stdio_async(self) -> None:
            """stdin read through ``_depth_checked`` (the SDK drops a too-deep call unanswered)."""
            from mcp.server.stdio import stdio_server

            stdin = _stdin_lines()
            async with stdio_server(stdin=stdin) as (read, write):  # type: ignore[arg-type]
                low = self._lowlevel_server
                await low.run(read, write, low.create_initialization_options())

    return PayloadServer(
        name="agent-payload",
        title=f"agent-payload: {editor.path.name}",
        version=__version__,
        instructions=(
            f"Edits the JSON file {editor.path.name} with change requests: {READ_TOOL} shows "
            f"it (outlined beyond about {editor.max_read_tokens} tokens: read parts of it), "
            f"{FIND_TOOL} finds texts or numbers in it, {APPLY_TOOL} changes it (only what "
            f"changes), {UNDO_TOOL} reverts the last change. Each result ends with the file's "
            "version: pass the version your change request was written against as its "
            "base_version."
        ),
        log_level="INFO",
    )


def _call(editor: PayloadFileEditor, name: str, arguments: Any) -> Outcome:
    """One tool call handed to the editor with the arguments as the model wrote them."""
    from mcp.server.mcpserver.exceptions import ToolError

    arguments = arguments if isinstance(arguments, Mapping) else {}
    if name == READ_TOOL:
        extra = sorted(set(arguments) - {"path", "start", "end", "keys"})
        if extra:
            names = ", ".join(repr(e)[:60] for e in extra[:10])
            return Outcome(
                f"{READ_TOOL} takes only path, start, end and keys (all optional); unknown "
                f"argument(s): {names}",
                True,
            )
        return editor.read(
            arguments.get("path"),
            start=arguments.get("start"),
            end=arguments.get("end"),
            keys=arguments.get("keys"),
        )
    if name == FIND_TOOL:
        return editor.find(arguments)
    if name == APPLY_TOOL:
        return editor.apply(dict(arguments))
    if name == UNDO_TOOL:
        return editor.undo()
    raise ToolError(
        f"Unknown tool {name[:60]!r}; this server has {READ_TOOL}, {FIND_TOOL}, {APPLY_TOOL} "
        f"and {UNDO_TOOL}"
    )


class _KeptOpen(io.TextIOWrapper):
    """stdin as UTF-8 text whose close leaves the process's stdin open."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


async def _stdin_lines() -> AsyncIterator[str]:
    import anyio

    source = anyio.wrap_file(_KeptOpen(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    async for line in source:
        yield _depth_checked(line)


def _depth_checked(line: str) -> str:
    """``line`` as it came, or, for a tool call nested deeper than the SDK reads, the same
    call with its arguments replaced by ``{_TOO_DEEP: true}`` (answered with an error)."""
    if line.count("{") + line.count("[") < _SDK_DEPTH:
        return line
    from mcp_types import jsonrpc_message_adapter

    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
        return line
    except ValueError as exc:
        if "recursion limit" not in str(exc):
            return line
    try:  # the standard library reads deeper than pydantic-core (to the recursion limit)
        message = json.loads(line)
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict) and isinstance(message.get("params"), dict):
        if message.get("method") != "tools/call" or "id" not in message:
            return line
        message["params"]["arguments"] = {_TOO_DEEP: True}
        return json.dumps(message) + "\n"
    ident = _JSON_ID.search(line)
    name = _TOOL_NAME.search(line)
    if ident is None or name is None or '"tools/call"' not in line:
        return line
    return (
        f'{{"jsonrpc": "2.0", "id": {ident.group(1)}, "method": "tools/call", '
        f'"params": {{"name": {name.group(1)}, "arguments": {{"{_TOO_DEEP}": true}}}}}}\n'
    )


# The request's id and tool name, read where the nesting is still shallow: a JSON-RPC request
# is one object whose "id", "method" and "params.name" come before or beside the arguments.
_JSON_ID: Final = re.compile(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_TOOL_NAME: Final = re.compile(r'"name"\s*:\s*("(?:[^"\\]|\\.)*")')


def serve(editor: PayloadFileEditor) -> None:
    """Serve the editor's file over stdio until the client closes the connection. Logs go to
    stderr only (stdout is the protocol)."""
    server = build_server(editor)
    logger.info("serving %s over stdio", json.dumps(str(editor.path)))
    server.run("stdio")
