"""How a model replies: the words the prompts, the parser, the tool surfaces and the provider
adapters share, defined once here at the bottom of the layers (data, no logic beyond lookups).

* ``OutputMode`` (its values: ``OUTPUT_MODES``): ``text`` (JSON in the text reply, every
  model), ``tool`` (a forced tool call whose input is the change request) or ``json_schema``
  (structured outputs).
* ``DEFAULT_TOOL_NAME``: the name of the change-request tool when none is given.
* ``TRUNCATION_FINISH_REASONS`` / ``REFUSAL_FINISH_REASONS``: the providers' finish / stop
  reasons that mean the reply was cut off by a token limit, or refused; ``is_truncation`` and
  ``is_refusal`` compare a reason with them (lower-cased, surrounding blanks ignored).
"""

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
"""The values of ``OutputMode``, for checks and command-line choices."""

DEFAULT_TOOL_NAME: Final = "apply_change_request"
"""The change-request tool's name when the caller gives none."""

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
