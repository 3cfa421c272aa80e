"""Which payload a tool call was written against (its base) and what was applied since: the
bookkeeping of ``ChangeRequestToolHandler`` for concurrent edits (MERGE.md section 9). Pure;
the handler holds the lock around it."""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Final

from agent_payload._config import is_int
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import UsageError
from agent_payload.merge import Applied
from agent_payload.report import Problem

__all__ = ["BASE_VERSION", "Bases", "split_base_version"]

BASE_VERSION: Final = "base_version"
"""The optional tool argument naming the payload version a call was written against."""
TURNS_KEPT: Final = 256
"""How many ``turn`` keys are remembered (the oldest is forgotten first)."""
_IN_TURN: contextvars.ContextVar[tuple[Bases, int] | None] = contextvars.ContextVar(
    "agent_payload_turn", default=None
)
"""Inside ``Bases.turn()``: those bases and the version current when the block began."""

Arguments = str | Mapping[str, Any] | AgentPayloadChangeRequest


class Bases:
    """The payload's version (0 as given, one more per applied call), the last ``history``
    payloads with the request applied to each, and the base of each ``turn`` key seen."""

    def __init__(self, history: int) -> None:
        self.version = 0
        self.past: deque[tuple[Any, Applied]] = deque(maxlen=history)
        """Version ``version - len(past) + n``'s payload and the request that made the next."""
        self.turns: OrderedDict[Hashable, int] = OrderedDict()
        """The base version of each ``turn`` key seen (its first call's)."""

    def advance(self, payload: Any, request: AgentPayloadChangeRequest, marker: str) -> None:
        """``request`` (merged with ``marker``) was applied to ``payload``, the current version."""
        self.past.append((payload, Applied(request, frozenset({marker}))))
        self.version += 1

    def kept(self, version: int) -> tuple[Any, list[Applied]] | None:
        """The payload of a kept earlier ``version`` and the requests applied since, or None."""
        first = self.version - len(self.past)
        if not first <= version < self.version:
            return None
        past = list(self.past)[version - first :]
        return past[0][0], [applied for _, applied in past]

    @contextlib.contextmanager
    def turn(self) -> Iterator[int]:
        token = _IN_TURN.set((self, self.version))
        try:
            yield self.version
        finally:
            _IN_TURN.reset(token)

    def base(
        self, where: str, base_version: int | None, turn: Hashable | None, asked: Any
    ) -> int | Problem | None:
        """A call's base version (None: the current payload), or the problem for a bad one."""
        if base_version is not None:
            if not is_int(base_version) or base_version > self.version:
                raise UsageError(
                    f"{where}: base_version={base_version!r} is not a version of this handler's "
                    f"payload (0 to {self.version}); pass the handler.version read when the model "
                    "was sent the request this call answers"
                )
            return int(base_version)
        block = _IN_TURN.get()
        if block is not None and block[0] is self:
            return block[1]
        if turn is not None:
            base = self.turns.setdefault(turn, self.version)
            self.turns.move_to_end(turn)  # the least recently seen is forgotten first
            while len(self.turns) > TURNS_KEPT:
                self.turns.popitem(last=False)
            return base
        if asked is None:
            return None
        if not is_int(asked) or asked > self.version:
            return Problem(
                kind="conflict",
                code="base_version",
                path=BASE_VERSION,
                message=f"{BASE_VERSION} {json.dumps(asked)} is not a version of this payload: "
                f"it must be one that the prompt or a result of this tool stated, 0 to "
                f"{self.version} (the payload is now version {self.version}). Send the call "
                f"again with the version your change was written against, or leave "
                f"{BASE_VERSION} out if it is written against version {self.version}.",
            )
        return int(asked)


def split_base_version(arguments: Arguments) -> tuple[Arguments, Any]:
    """The arguments without the ``base_version`` the model may pass (JSON text is decoded
    only when it holds one), and that version (None when absent)."""
    mapping: Any = arguments
    if isinstance(arguments, str):
        if BASE_VERSION not in arguments:
            return arguments, None
        try:
            mapping = json.loads(arguments)
        except ValueError:
            return arguments, None  # the judge reports the syntax
    if not isinstance(mapping, Mapping) or BASE_VERSION not in mapping:
        return arguments, None
    rest = {k: v for k, v in mapping.items() if k != BASE_VERSION}
    return rest, mapping[BASE_VERSION]
