"""The errors the parser raises, with the problems sent back to the model, and the pointers
into the reply they use (line and column; an excerpt with ``⟶`` marking the spot)."""

from __future__ import annotations

from typing import NoReturn

from agent_payload.errors import (
    ModelReplyError,
    NoChangeRequestError,
    RefusalError,
    ReplySyntaxError,
    TruncatedReplyError,
)
from agent_payload.parse._grammar import MAX_REPLY_DEPTH
from agent_payload.report import Problem


def _reply_error(
    reply: str,
    message: str,
    model_message: str,
    *,
    path: str = "",
    cause: BaseException | None = None,
    cls: type[ModelReplyError] = ReplySyntaxError,
    kind: str = "parse",
    code: str | None = None,
) -> NoReturn:
    """Raise ``cls`` (``message`` for the caller) with one problem for the model."""
    problems = [Problem(kind, model_message, path, code)]
    raise cls(message, reply=reply, problems=problems) from cause


def _truncated(reply: str, why: str, *, cause: BaseException | None = None) -> NoReturn:
    _reply_error(
        reply,
        f"The reply was cut off: {why}. A truncated change request is never applied; ask "
        "again (the feedback asks for a smaller change request) or raise the output token "
        "limit.",
        "your reply ended before its JSON object was complete, so none of it was used.",
        cause=cause,
        cls=TruncatedReplyError,
        kind="truncated",
    )


def _refuse(reply: str, why: str) -> NoReturn:
    _reply_error(
        reply,
        f"The model refused: {why}; the reply holds no change request. Ask again with the "
        "feedback, or check that the task is one the model may do.",
        "your reply declined the task and held no change request. The task is an edit of the "
        "JSON data shown: reply with the change request that does it, or with "
        '{"reasoning": "<why nothing should change>"} if nothing should change.',
        cls=RefusalError,
        kind="refusal",
        code="refusal",
    )


def _no_request(reply: str, why: str) -> NoReturn:
    _reply_error(
        reply,
        f"The reply holds no change request: {why}. Expected one JSON object with the "
        "optional fields newElements, updateElements, removeElements, replaceElements and "
        "reasoning; ask again with the feedback.",
        f"{why}. Reply with the change request itself: one JSON object with the optional "
        "fields newElements, updateElements, removeElements, replaceElements and reasoning "
        "({} if nothing should change).",
        cls=NoChangeRequestError,
        kind="no_change_request",
    )


def _too_deep(
    reply: str, levels: str, where: str = "", also: str = "", cause: BaseException | None = None
) -> NoReturn:
    """The change request nests deeper than ``MAX_REPLY_DEPTH`` (``where``: in the reply)."""
    _reply_error(
        reply,
        f"The change request{f' {where} of the reply' if where else ''} is nested {levels} "
        f"levels deep; at most {MAX_REPLY_DEPTH} levels are read. Ask again with the feedback.",
        f"your change request is nested {levels} levels deep{f' ({where})' if where else ''}; "
        f"at most {MAX_REPLY_DEPTH} levels can be read. Change deep values with fewer levels: "
        f"replace a whole subtree higher up with replaceElements, or split the edit.{also}",
        cause=cause,
    )


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
