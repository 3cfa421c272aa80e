"""An MCP server that lets any MCP host edit a JSON file with change requests
(``agent-payload mcp invoice.json``; docs/mcp.md): ``read_payload``, ``find_in_payload``,
``apply_change_request`` (judged by the tool handler, the file written atomically) and
``undo_last_change``. Writers of one file share its lock and journal (``_journal``)."""

from agent_payload import _paths
from agent_payload.mcp._editor import Outcome, PayloadFileEditor
from agent_payload.mcp._server import build_server, serve

__all__ = ["Outcome", "PayloadFileEditor", "build_server", "parse_path", "serve"]


def parse_path(text: str) -> list[str | int]:
    """``items[3].price`` -> ``["items", 3, "price"]``, the library's one path grammar (``""``,
    ``(root)`` and ``$`` are the root); ``ValueError`` says what was expected."""
    return list(_paths.parse_path(text))
