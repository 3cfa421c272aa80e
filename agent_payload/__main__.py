"""``python -m agent_payload``: the ``agent-payload`` command line."""

import sys

from agent_payload.cli import main

sys.exit(main())
