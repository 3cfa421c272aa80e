"""agent_payload: let an LLM agent edit a large JSON payload with a compact change request."""

from agent_payload.changes import (
    DEFAULT_MARKERS,
    MARKER,
    REFERENCE_MARKER,
    AgentPayloadChangeRequest,
)
from agent_payload.errors import (
    AgentPayloadError,
    ConfigurationError,
    InvalidChangeRequestError,
    InvalidPayloadError,
    LimitExceededError,
    MergeConflictError,
    ModelReplyError,
    ModelRequestsBlockedError,
    NoChangeRequestError,
    PayloadValidationError,
    ProviderError,
    RefusalError,
    ReplySyntaxError,
    RetriesExhaustedError,
    RetryWithFeedback,
    StalePayloadError,
    TruncatedReplyError,
    UnknownFieldError,
    UsageError,
)
from agent_payload.report import Change, Finding, Issue, MergeReport, MergeResult, Problem
from agent_payload.usage import Usage

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MARKERS",
    "MARKER",
    "REFERENCE_MARKER",
    "AgentPayloadChangeRequest",
    "AgentPayloadError",
    "Change",
    "ConfigurationError",
    "Finding",
    "InvalidChangeRequestError",
    "InvalidPayloadError",
    "Issue",
    "LimitExceededError",
    "MergeConflictError",
    "MergeReport",
    "MergeResult",
    "ModelReplyError",
    "ModelRequestsBlockedError",
    "NoChangeRequestError",
    "PayloadValidationError",
    "Problem",
    "ProviderError",
    "RefusalError",
    "ReplySyntaxError",
    "RetriesExhaustedError",
    "RetryWithFeedback",
    "StalePayloadError",
    "TruncatedReplyError",
    "UnknownFieldError",
    "Usage",
    "UsageError",
    "__version__",
]
