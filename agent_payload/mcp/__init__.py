"""An MCP server that lets any MCP host (Claude Desktop, IDE agents, ...) edit a JSON file with
change requests (``pip install 'agent-payload[mcp]'``)::

    agent-payload mcp invoice.json --deny id --hide customer.tax_id
    python -m agent_payload.mcp invoice.json          # the same

It speaks MCP over stdio with the official ``mcp`` SDK and serves three tools:

* ``read_payload`` (optional ``path``): the payload as the model may see it (keys hidden by
  ``--hide`` left out; ``/*n*/`` index comments before the elements of long arrays), or the
  value at ``path`` (``items[3]``, ``customer.address``).
* ``apply_change_request``: the change request as the arguments (its input schema is the change
  request's schema, for ``--payload-schema`` when given). Judged by
  ``ChangeRequestToolHandler`` with the permissions (``--allow``/``--deny``) and the read scope
  as guards; when it applies, the file is written atomically (``agent_payload._files``), keeping
  its indentation. A refused call is an MCP error result with the handler's text and leaves the
  file byte-identical.
* ``undo_last_change``: writes back the exact bytes the file had before the last change.

Optimistic version check: the server remembers the file's bytes as the model last saw them
(``read_payload``) or as it last wrote them. If someone else edits the file meanwhile, a change
(or an undo) is refused with a message telling the model to read the payload again; nothing is
overwritten. The check runs again just before each atomic replace; it is not a lock (an editor
writing in the same instant can still race it).

Tool descriptions teach the format with the system prompt's own text. Logs go to stderr only.
"""

from agent_payload.mcp._editor import Outcome, PayloadFileEditor, parse_path
from agent_payload.mcp._server import build_server, serve

__all__ = ["Outcome", "PayloadFileEditor", "build_server", "parse_path", "serve"]
