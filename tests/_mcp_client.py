"""The real MCP client on a server process started over stdio, for the MCP tests."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any


@asynccontextmanager
async def connect(path: Path, *options: str) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, get_default_environment

    # The SDK starts the server with a minimal environment: PYTHONPATH is passed on so that the
    # server runs the agent_payload under test (a worktree), not the installed one.
    env = {**get_default_environment(), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agent_payload.mcp", str(path), *options], env=env
    )
    async with Client(params) as client:
        yield client
