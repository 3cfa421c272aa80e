"""agent_payload: let an LLM agent edit a large JSON payload with a compact change request.

The top level holds what a user imports on day one (the README's "Public API" table lists it);
everything else is imported from its module (``agent_payload.report``, ``.providers``,
``.prompts``, ``.tools``, ``.guards``, ...). Names that 0.1 exported here and 0.2 moved still
import from here for one release, with a ``DeprecationWarning`` naming the module.
"""

from __future__ import annotations

import importlib
from typing import Any

from agent_payload._deprecated import renamed
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

__version__ = "0.2.0"

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

_MOVED: dict[str, str] = {
    "Change": "agent_payload.report",
    "DEFAULT_MARKERS": "agent_payload.changes",
    "Finding": "agent_payload.report",
    "Hooks": "agent_payload.agent",
    "InvalidChangeRequestError": "agent_payload.errors",
    "Issue": "agent_payload.report",
    "LimitExceededError": "agent_payload.errors",
    "Limits": "agent_payload.merge",
    "MARKER": "agent_payload.changes",
    "MergeReport": "agent_payload.report",
    "MergeResult": "agent_payload.report",
    "Message": "agent_payload.providers",
    "Model": "agent_payload.providers",
    "ModelReply": "agent_payload.providers",
    "ModelRequest": "agent_payload.providers",
    "ModelRequestsBlockedError": "agent_payload.errors",
    "NoChangeRequestError": "agent_payload.errors",
    "ParsedReply": "agent_payload.parse",
    "Problem": "agent_payload.report",
    "PromptParts": "agent_payload.prompts",
    "REFERENCE_MARKER": "agent_payload.changes",
    "RefusalError": "agent_payload.errors",
    "ReplySyntaxError": "agent_payload.errors",
    "ToolResult": "agent_payload.tools",
    "TruncatedReplyError": "agent_payload.errors",
    "TurnRecord": "agent_payload.session",
    "UnknownFieldError": "agent_payload.errors",
    "Usage": "agent_payload.usage",
    "VersionedStore": "agent_payload.store",
    "anthropic_tool": "agent_payload.tools",
    "apply_if_version": "agent_payload.store",
    "change_request_schema": "agent_payload.schema",
    "check_version": "agent_payload.guards",
    "choose_marker": "agent_payload.merge",
    "combine_guards": "agent_payload.guards",
    "infer_model": "agent_payload.providers",
    "openai_tool": "agent_payload.tools",
    "parse_change_request_with_repairs": "agent_payload.parse",
    "render_confirm": "agent_payload.prompts",
    "render_correction": "agent_payload.prompts",
    "render_payload": "agent_payload.prompts",
    "render_prompt": "agent_payload.prompts",
    "responses_tool": "agent_payload.tools",
    "to_json_patch": "agent_payload.diff",
    "undo_change_request": "agent_payload.diff",
}
"""0.1's top-level names that live in a module now: importable from here until the next
release, with a ``DeprecationWarning``."""


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    renamed(f"agent_payload.{name}", f"from {module} import {name}", stacklevel=3)
    return getattr(importlib.import_module(module), name)
