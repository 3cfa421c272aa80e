"""Outlines of payloads larger than the model's context, and the read tools that show the rest
(pure; docs/outline.md): ``outline(data, budget)`` picks the most detailed of ``LEVELS`` that
fits, ``answer(name, arguments, data, budget)`` answers one ``read_payload`` or
``find_in_payload`` call with a text for the model (a bad call gets an error text, never an
exception). Paths are ``agent_payload._paths``'s."""

from __future__ import annotations

from agent_payload._paths import PathSyntaxError, parse_path
from agent_payload.outline._reads import (
    answer,
    current_renderer,
    find,
    last_read_note,
    not_applied_note,
    read,
    tool_specs,
    value_text,
)
from agent_payload.outline._shape import (
    CONTEXT_SHARE,
    DEFAULT_MAX_PAYLOAD_TOKENS,
    DEFAULT_MAX_READS,
    FIND_IN_PAYLOAD,
    FIND_LIMIT,
    LEVELS,
    MIN_PAYLOAD_TOKENS,
    MODEL_CONTEXT_TOKENS,
    READ_PAYLOAD,
    READ_TOOLS,
    Level,
    context_window,
    default_max_payload_tokens,
    exceeds,
    outline,
    resolve_max_payload_tokens,
)
from agent_payload.outline._shape import (
    _render as _render,
)

__all__ = [
    "CONTEXT_SHARE",
    "DEFAULT_MAX_PAYLOAD_TOKENS",
    "DEFAULT_MAX_READS",
    "FIND_IN_PAYLOAD",
    "FIND_LIMIT",
    "LEVELS",
    "MIN_PAYLOAD_TOKENS",
    "MODEL_CONTEXT_TOKENS",
    "READ_PAYLOAD",
    "READ_TOOLS",
    "Level",
    "PathSyntaxError",
    "answer",
    "context_window",
    "current_renderer",
    "default_max_payload_tokens",
    "exceeds",
    "find",
    "last_read_note",
    "not_applied_note",
    "outline",
    "parse_path",
    "read",
    "resolve_max_payload_tokens",
    "tool_specs",
    "value_text",
]
