"""The errors the parser raises, with the problems sent back to the model, and the pointers
into the reply they use (line and column; an excerpt with ``⟶`` marking the spot)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from agent_payload.errors import (
    ModelReplyError,
    NoChangeRequestError,
    RefusalError,
    ReplySyntaxError,
    TruncatedReplyError,
)
from agent_payload.report import Problem


def _raise(
    cls: type[ModelReplyError],
    message: str,
    problems: Sequence[Problem],
    *,
    reply: str,
    cause: BaseException | None = None,
    **extra: Any,
) -> NoReturn:
    raise cls(message, reply=reply, problems=problems, **extra) from cause


def _truncated(reply: str, why: str, *, cause: BaseException | None = None) -> NoReturn:
    _raise(
        TruncatedReplyError,
        f"The reply was cut off: {why}. A truncated change request is never applied; ask "
        "again (the feedback asks for a smaller change request) or raise the output token "
        "limit.",
        [
            Problem(
                kind="truncated",
                message="your reply ended before its JSON object was complete, so none of it "
                "was used.",
            )
        ],
        reply=reply,
        cause=cause,
    )


def _refuse(reply: str, why: str) -> NoReturn:
    _raise(
        RefusalError,
        f"The model refused: {why}; the reply holds no change request. Ask again with the "
        "feedback, or check that the task is one the model may do.",
        [
            Problem(
                kind="refusal",
                code="refusal",
                message="your reply declined the task and held no change request. The task "
                "is an edit of the JSON data shown: reply with the change request that does "
                'it, or with {"reasoning": "<why nothing should change>"} if nothing should '
                "change.",
            )
        ],
        reply=reply,
    )


def _no_request(reply: str, why: str) -> NoReturn:
    _raise(
        NoChangeRequestError,
        f"The reply holds no change request: {why}. Expected one JSON object with the "
        "optional fields newElements, updateElements, removeElements, replaceElements and "
        "reasoning; ask again with the feedback.",
        [
            Problem(
                kind="no_change_request",
                message=f"{why}. Reply with the change request itself: one JSON object "
                "with the optional fields newElements, updateElements, removeElements, "
                "replaceElements and reasoning ({} if nothing should change).",
            )
        ],
        reply=reply,
    )


def _syntax(
    reply: str,
    message: str,
    model_message: str,
    *,
    path: str | None = None,
    cause: BaseException | None = None,
) -> NoReturn:
    _raise(
        ReplySyntaxError,
        message,
        [Problem(kind="parse", message=model_message, path=path)],
        reply=reply,
        cause=cause,
    )


def _field_path(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"[{json.dumps(name)}]"


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"


def _excerpt(text: str, pos: int, before: int = 30, after: int = 20) -> str:
    """A short look at ``text`` around ``pos``: ``…"qty": 3, ⟶}}`` (⟶ marks the spot)."""
    start = max(0, pos - before)
    head = ("…" if start else "") + text[start:pos]
    tail = text[pos : pos + after] + ("…" if pos + after < len(text) else "")
    shown = head + "⟶" + tail
    return shown.replace("\r", "").replace("\n", "⏎").replace("\t", " ")
