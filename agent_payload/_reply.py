"""How a model replies: the words the prompts, the parser, the tool surfaces and the provider
adapters share (output modes, the default tool name, the finish reasons of a cut-off or refused
reply), defined once at the bottom of the layers."""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "DEFAULT_TOOL_NAME",
    "OUTPUT_MODES",
    "REFUSAL_FINISH_REASONS",
    "TRUNCATION_FINISH_REASONS",
    "OutputMode",
    "is_refusal",
    "is_truncation",
]

OutputMode = Literal["text", "tool", "json_schema"]
"""``text``: JSON in the text reply (default, every model). ``tool``: a forced tool call whose
input is the change request. ``json_schema``: OpenAI structured outputs."""

OUTPUT_MODES: Final[tuple[str, ...]] = get_args(OutputMode)

DEFAULT_TOOL_NAME: Final = "apply_change_request"

TRUNCATION_FINISH_REASONS: Final[frozenset[str]] = frozenset(
    {"length", "max_tokens", "max_output_tokens", "model_context_window_exceeded"}
)
"""Finish/stop reasons (compared lower-cased) meaning the reply was cut off by a token limit:
OpenAI Chat's ``length``, the Responses API's ``max_output_tokens``, Anthropic's ``max_tokens``
and ``model_context_window_exceeded``."""

REFUSAL_FINISH_REASONS: Final[frozenset[str]] = frozenset(
    {"refusal", "content_filter", "safety", "prohibited_content", "blocklist", "spii", "recitation"}
)
"""Finish/stop reasons (compared lower-cased) meaning the provider or the model refused."""


def _norm(reason: str | None) -> str | None:
    return reason.strip().lower() if isinstance(reason, str) else None


def is_truncation(finish_reason: str | None) -> bool:
    """True when ``finish_reason`` says the reply was cut off by a token limit."""
    return _norm(finish_reason) in TRUNCATION_FINISH_REASONS


def is_refusal(finish_reason: str | None) -> bool:
    """True when ``finish_reason`` says the provider or the model refused."""
    return _norm(finish_reason) in REFUSAL_FINISH_REASONS
