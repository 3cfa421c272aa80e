"""Offline test helpers shipped to users (guide: docs/testing.md): ``ScriptedModel`` (a
``Model`` answering from a script, no HTTP), ``FakeProviderServer`` (a real HTTP server on
127.0.0.1 speaking enough of the OpenAI and Anthropic APIs for the real SDKs, with scripted
replies and faults) and ``block_model_requests`` (real model requests refused). This module
owns the request switch (``ALLOW_MODEL_REQUESTS`` is an attribute users assign) and installs
it as the adapters' request gate, so the adapters never import this package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from agent_payload.providers._common import environment_allows_requests, set_request_gate
from agent_payload.testing.script import FakeRequest, Fault, Reply, ScriptItem
from agent_payload.testing.scripted import ScriptedModel, ScriptExhaustedError
from agent_payload.testing.server import FakeProviderServer

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "FakeProviderServer",
    "FakeRequest",
    "Fault",
    "Reply",
    "ScriptExhaustedError",
    "ScriptItem",
    "ScriptedModel",
    "block_model_requests",
    "model_requests_allowed",
]

# --- the switch that forbids real model requests -------------------------------------------------

ALLOW_MODEL_REQUESTS: bool = True
"""Set to False (e.g. in a ``conftest.py``) to forbid requests to non-loopback model servers
for the whole process; ``block_model_requests()`` does the same for a block."""


def model_requests_allowed() -> bool:
    """True unless ``ALLOW_MODEL_REQUESTS`` is False, ``block_model_requests()`` is active, or the
    environment says ``AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0`` (read at each call)."""
    return ALLOW_MODEL_REQUESTS and environment_allows_requests()


@contextlib.contextmanager
def block_model_requests(block: bool = True) -> Iterator[None]:
    """Forbid (or, with ``block=False``, allow) real model requests inside the block, process-wide
    (threads and event loops started inside included); works as a decorator too."""
    global ALLOW_MODEL_REQUESTS
    previous = ALLOW_MODEL_REQUESTS
    ALLOW_MODEL_REQUESTS = not block
    try:
        yield
    finally:
        ALLOW_MODEL_REQUESTS = previous


set_request_gate(model_requests_allowed)
