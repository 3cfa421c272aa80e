"""agent_payload: let an LLM agent edit a large JSON payload with a compact change request.
The top level holds what a user imports on day one; the rest is imported from its module."""

from __future__ import annotations

from agent_payload.agent import AsyncPayloadAgent, PayloadAgent
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.diff import diff_payloads
from agent_payload.errors import (
    AgentPayloadError,
    ConfigurationError,
    InvalidPayloadError,
    MergeConflictError,
    ModelReplyError,
    PayloadValidationError,
    ProviderError,
    RetriesExhaustedError,
    RetryWithFeedback,
    StalePayloadError,
    UsageError,
)
from agent_payload.guards import DataLossGuard, Permissions, ReadScope, payload_version
from agent_payload.merge import apply_change_request
from agent_payload.parse import parse_change_request
from agent_payload.result import AgentResult
from agent_payload.session import AsyncPayloadSession, PayloadSession
from agent_payload.tools import ChangeRequestToolHandler

__version__ = "0.3.0.dev0"

__all__ = [
    "AgentPayloadChangeRequest",
    "AgentPayloadError",
    "AgentResult",
    "AsyncPayloadAgent",
    "AsyncPayloadSession",
    "ChangeRequestToolHandler",
    "ConfigurationError",
    "DataLossGuard",
    "InvalidPayloadError",
    "MergeConflictError",
    "ModelReplyError",
    "PayloadAgent",
    "PayloadSession",
    "PayloadValidationError",
    "Permissions",
    "ProviderError",
    "ReadScope",
    "RetriesExhaustedError",
    "RetryWithFeedback",
    "StalePayloadError",
    "UsageError",
    "__version__",
    "apply_change_request",
    "diff_payloads",
    "parse_change_request",
    "payload_version",
]
