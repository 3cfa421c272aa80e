"""An MCP server that lets any MCP host (Claude Desktop, IDE agents, ...) edit a JSON file with
change requests (``pip install 'agent-payload[mcp]'``)::

    agent-payload mcp invoice.json --deny id --hide customer.tax_id
    python -m agent_payload.mcp invoice.json          # the same

It speaks MCP over stdio with the official ``mcp`` SDK and serves three tools:

* ``read_payload`` (optional ``path``): the payload as the model may see it (keys hidden by
  ``--hide`` left out; ``/*n*/`` index comments before the elements of long arrays), or the
  value at ``path`` (``items[3]``, ``customer.address``), and the file's version.
* ``apply_change_request``: the change request as the arguments (its input schema is the change
  request's schema, for ``--payload-schema`` when given), plus an optional ``base_version``.
  Judged by ``ChangeRequestToolHandler`` with the permissions (``--allow``/``--deny``) and the
  read scope as guards; when it applies, the file is written atomically
  (``agent_payload._files``), keeping its indentation. A refused call is an MCP error result
  with the handler's text and leaves the file byte-identical.
* ``undo_last_change``: writes back the exact bytes the file had before the last change (or,
  when other change requests were applied since, reverts only what it did).

Several writers on one file (README: "Several writers on one file"): every check-and-write holds
the file's lock (``agent_payload._filelock``, ``.<name>.lock``) and is recorded in the journal
all servers of the file share (``agent_payload.mcp._journal``, ``.<name>.journal``). A request
written against an older version (``base_version``, default: the one this server last showed)
is rebased over the requests applied since (MERGE.md section 9) or sent back with
``concurrent_change``; an outside edit, which no journal line explains, is a collision for
every request older than it.

Tool descriptions teach the format with the system prompt's own text. Logs go to stderr only.
"""

from agent_payload import _paths
from agent_payload.mcp._editor import Outcome, PayloadFileEditor
from agent_payload.mcp._server import build_server, serve

__all__ = ["Outcome", "PayloadFileEditor", "build_server", "parse_path", "serve"]


def parse_path(text: str) -> list[str | int]:
    """``items[3].price`` -> ``["items", 3, "price"]``, the library's one path grammar (``""``,
    ``(root)`` and ``$`` are the root); ``ValueError`` says what was expected."""
    return list(_paths.parse_path(text))
