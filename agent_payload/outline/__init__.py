"""Outlines of payloads larger than the model's context, and the reads that show the rest (pure).

When the payload as the user message would carry it is larger than ``max_payload_tokens``
(read scope applied), the agent sends an **outline** instead: the tree's shape within the
budget, and offers the model two read tools, ``read_payload`` and ``find_in_payload``, whose
answers this module computes. Everything here is a function of the data the model may see (the
read scope's projection, so a hidden path reads as absent) and of the budget; nothing does I/O.

The notation is the payload's own JSON with comments that are not data:

* ``/*n*/`` before an array element gives its position (as in the full payload);
* ``{/*12 keys*/}``, ``[/*50000 elements*/]`` stand for a container whose content is not shown;
* ``/*3 to 49998 not shown (49996 elements)*/`` marks elements left out of an array (an object:
  ``/*keys 40 to 199 not shown (160 keys)*/``, by position in the object);
* ``"text…"/*cut: 12000 characters in all*/`` is the beginning of a longer string.

``outline(data, budget)`` picks the most detailed of ``LEVELS`` whose text fits the budget
(counted with ``agent_payload.usage.estimate_tokens`` unless ``count`` is given): deeper
levels, more elements, more keys and longer strings first. ``answer(name, arguments, data,
budget)`` answers one read-tool call with a text for the model: the subtree (at its original
positions, outlined the same way when it does not fit) or the paths where a text or number
occurs; a bad call gets a precise error text, never an exception.

Paths are written as in the prompts and corrections: ``lines[3].sku``, ``customer.address``,
``["key.with.dots"]``; the whole payload is ``""`` or ``(root)``. A bare name is always a key
(``stats.2024`` is the key ``"2024"``).
"""

from __future__ import annotations

from agent_payload._paths import PathSyntaxError, parse_path
from agent_payload.outline._reads import (
    answer,
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
