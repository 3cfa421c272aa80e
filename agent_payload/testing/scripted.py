"""``ScriptedModel``: a ``Model`` answering from a script, with no HTTP at all (and the
``ScriptExhaustedError`` every fake raises when its script runs out)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.testing.script import CHUNK_CHARS
from agent_payload.usage import Usage, length_estimate

__all__ = ["ScriptExhaustedError", "ScriptedModel", "estimate_tokens"]


class ScriptExhaustedError(AssertionError):
    """A test double ran out of script: a test failure, hence an ``AssertionError``."""


ScriptedReply: TypeAlias = "str | ModelReply | BaseException"


def estimate_tokens(text: str) -> int:
    """Fake usage numbers: ``usage.length_estimate`` (4 characters a token), at least 1."""
    return max(1, length_estimate(text))


class ScriptedModel:
    """A ``Model`` (sync, async and streaming) answering from a script, each ``ModelRequest``
    recorded in ``requests``; thread-safe. ``replies``: a sequence (a ``str`` reply text, a
    ``ModelReply``, an exception to raise) or a function of the request returning one of the
    first two. Running out raises ``ScriptExhaustedError``."""

    def __init__(
        self,
        replies: Sequence[ScriptedReply] | Callable[[ModelRequest], str | ModelReply],
        *,
        model_name: str = "scripted",
        provider: str = "test",
    ) -> None:
        if isinstance(replies, str):
            raise TypeError(
                "ScriptedModel(replies): expected a sequence of replies, got one str; "
                "wrap it in a list: ScriptedModel([reply])."
            )
        self._function = replies if callable(replies) else None
        self._script: deque[ScriptedReply] = deque(() if callable(replies) else replies)
        self.model_name = model_name
        self.provider = provider
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []
        """Every request received, in order (also the ones answered with an exception)."""

    @property
    def remaining(self) -> int:
        """Replies left in a list script (0 for a function script)."""
        with self._lock:
            return len(self._script)

    def request(self, request: ModelRequest) -> ModelReply:
        """Record ``request`` and return the next scripted reply (or raise the scripted error)."""
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            if self._function is None and not self._script:
                raise ScriptExhaustedError(
                    f"ScriptedModel {self.model_name!r}: request #{number} arrived but the "
                    f"script held only {number - 1} replies; add more replies to the script "
                    "or check why the code under test asked again."
                )
            item: object = self._script.popleft() if self._function is None else None
        if self._function is not None:  # called outside the lock
            item = self._function(request)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelReply):
            return item
        if isinstance(item, str):
            prompt = "".join(message.content for message in request.messages)
            return ModelReply(
                text=item,
                finish_reason="stop",
                usage=Usage(estimate_tokens(prompt), estimate_tokens(item), 1),
                model_name=self.model_name,
            )
        raise TypeError(
            f"ScriptedModel {self.model_name!r}: reply #{number} is a {type(item).__name__}; "
            "expected a str, a ModelReply or an exception."
        )

    async def arequest(self, request: ModelRequest) -> ModelReply:
        """The same as ``request`` (yields to the event loop once, like a real call would)."""
        await asyncio.sleep(0)
        return self.request(request)

    def stream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply:
        """``request``, as if streamed: ``on_progress`` is told the characters of the reply
        text so far, ``CHUNK_CHARS`` more each time."""
        reply = self.request(request)
        for characters in _pieces(reply):
            if on_progress is not None:
                on_progress(characters)
        return reply

    async def astream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply:
        """``stream_request`` for ``AsyncPayloadAgent`` (an awaitable ``on_progress`` awaited)."""
        reply = await self.arequest(request)
        for characters in _pieces(reply):
            outcome = on_progress(characters) if on_progress is not None else None
            if inspect.isawaitable(outcome):
                await outcome
        return reply


def _pieces(reply: ModelReply) -> list[int]:
    """The running character counts of a reply streamed ``CHUNK_CHARS`` at a time."""
    size = len(reply.text or reply.refusal or "")
    return [*range(CHUNK_CHARS, size, CHUNK_CHARS), size] if size else []
