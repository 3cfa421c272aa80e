"""Token usage, summed over attempts (data, no logic beyond addition).

``input_tokens`` counts every input token of the requests, cached or not (OpenAI's
``prompt_tokens`` / ``input_tokens``; for Anthropic, ``input_tokens`` plus
``cache_read_input_tokens`` plus ``cache_creation_input_tokens``). Two parts of it are also
reported on their own: ``cached_input_tokens``, read from the provider's prompt cache (OpenAI's
``cached_tokens``, Anthropic's ``cache_read_input_tokens``; billed at a fraction of the price),
and ``cache_write_input_tokens``, written to it (Anthropic's ``cache_creation_input_tokens``,
billed a little above the price; OpenAI reports none). So the uncached input is
``input_tokens - cached_input_tokens - cache_write_input_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cached_input_tokens: int = 0
    """Part of ``input_tokens`` read from the provider's prompt cache."""
    cache_write_input_tokens: int = 0
    """Part of ``input_tokens`` written to the provider's prompt cache (Anthropic)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """``input_tokens`` neither read from nor written to the prompt cache."""
        return self.input_tokens - self.cached_input_tokens - self.cache_write_input_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_write_input_tokens + other.cache_write_input_tokens,
        )
