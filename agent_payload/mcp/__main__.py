"""``python -m agent_payload.mcp PAYLOAD_FILE [options]``: the same as ``agent-payload mcp``."""

import sys

from agent_payload.cli import main

if __name__ == "__main__":
    sys.exit(main(["mcp", *sys.argv[1:]]))
