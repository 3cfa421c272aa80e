"""The object read from a reply -> ``AgentPayloadChangeRequest``: the one normaliser's findings
turned into the parser's errors or repairs, JSON-string buckets decoded, depth checked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, NoReturn, overload

from pydantic import ValidationError

from agent_payload._jsondata import JSON_TYPES, container_positions, kind_word
from agent_payload._normalise import Reactions, UnknownField, normalise_request, reasoning_text
from agent_payload._paths import format_payload_path
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import UnknownFieldError
from agent_payload.parse._errors import (
    _excerpt,
    _reply_error,
    _too_deep,
    _truncated,
    _where,
)
from agent_payload.parse._grammar import MAX_REPLY_DEPTH, _Damage
from agent_payload.parse._strict import _STRICT, _read_whole
from agent_payload.report import Problem


@dataclass(slots=True)
class _Normaliser(Reactions):
    """The parser's reactions (an error for the model, or a repair) to normaliser findings."""

    reply: str
    repairs: list[str] = field(default_factory=list)

    def normalise(self, obj: dict[str, Any]) -> AgentPayloadChangeRequest:
        read = normalise_request(obj, self, self.repairs)
        data: dict[str, Any] = dict(read.buckets)
        data["reasoning"] = reasoning_text(read.reasoning, self.repairs)
        depth = _depth(data)
        if depth > MAX_REPLY_DEPTH:
            _too_deep(self.reply, str(depth))
        try:
            return AgentPayloadChangeRequest.model_validate(data)
        except (ValidationError, RecursionError) as exc:  # pragma: no cover - JSON input
            _reply_error(
                self.reply,
                f"The change request read from the reply is not valid: {exc}",
                "your change request could not be read as JSON data.",
                cause=exc,
            )

    def spellings_differ(self, camel: str, snake: str) -> NoReturn:
        _reply_error(
            self.reply,
            f"The change request gives both {camel} and {snake}, with different content; which "
            "one was meant cannot be known, so neither is applied. Ask again with the feedback.",
            f"your change request gives both {camel} and {snake}, with different content. "
            f"Use only {camel}, and put everything for that bucket in it.",
            path=camel,
        )

    def not_an_object(self, wrapper: str, value: Any) -> NoReturn:
        _reply_error(
            self.reply,
            f"{wrapper}: expected the wrapped change request (an object), found "
            f"{kind_word(value)}. Ask again with the feedback.",
            f"{wrapper} must hold the change request object, not {kind_word(value)}.",
            path=wrapper,
        )

    def unknown(self, fields: Sequence[UnknownField]) -> NoReturn:
        problems = []
        parts = []
        for unknown in fields:
            name = unknown.name
            if unknown.is_wrapper:
                hint = (
                    f"{name} is a wrapper and cannot stand beside buckets: move its fields "
                    "to the top level"
                )
            elif unknown.suggestion:
                hint = f"did you mean {unknown.suggestion}?"
            else:
                hint = "it is not part of the format"
            path = format_payload_path((name,))
            parts.append(f"{path} ({hint})")
            message = (
                f"{name!r} is not a field of the change request ({hint}). The only top-level "
                "fields are newElements, updateElements, removeElements, replaceElements and "
                "reasoning; changes to the data go inside them."
            )
            problems.append(Problem("unknown_field", message, path, "unknown_field"))
        raise UnknownFieldError(
            "The change request has top-level fields that are not part of the format: "
            + ", ".join(parts)
            + ". Expected only newElements, updateElements, removeElements, replaceElements "
            "and reasoning; nothing was guessed. Ask again with the feedback.",
            reply=self.reply,
            problems=problems,
            fields=[f.name for f in fields],
        ) from None

    def text(self, name: str, value: str) -> Any:
        """A wrapper or bucket written as a JSON string (encoded twice), decoded; else kept."""
        stripped = value.strip()
        if stripped[:1] not in ("{", "["):
            return value
        if stripped[0] == "[":
            try:
                decoded = _STRICT.decode(stripped)
            except (ValueError, RecursionError):
                decoded = value  # an array in a string is read strictly or left as text
        else:
            try:
                decoded, repairs = _read_whole(stripped, context=name)
            except _Damage as damage:
                if damage.eof:
                    _truncated(self.reply, f"{name} holds a JSON string that is cut off")
                where = f"{_where(stripped, damage.pos)} of the string in {name}"
                near = _excerpt(stripped, damage.pos)
                hint = f" {damage.hint[0].upper()}{damage.hint[1:]}" if damage.hint else ""
                what = damage.what or f"nested more than {MAX_REPLY_DEPTH} levels deep"
                _reply_error(
                    self.reply,
                    f"{name}: holds a string that looks like JSON but cannot be read at "
                    f"{where}: {what} (near {near!r}). Ask again with the feedback.",
                    f"{name} must be a JSON object, not a string holding broken JSON ({what} "
                    f"at {where}; near: {near}).{hint}",
                    path=name,
                    cause=damage,
                )
            self.repairs.extend(repairs)
        if isinstance(decoded, (dict, list)):
            self.repairs.append(f"decoded {name} from a JSON string")
            return decoded
        return value

    def bucket(self, name: str, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            self.repairs.append(f"treated the empty string in {name} as absent")
            return None
        if isinstance(value, str):
            value = self.text(name, value)
        if value is None or isinstance(value, (dict, list)):
            return value
        _reply_error(
            self.reply,
            f"{name}: expected an object (or an array, for a payload whose root is an array), "
            f"found {kind_word(value)}. Ask again with the feedback.",
            f"{name} must be an object shaped like the payload (an array only when the "
            f"payload's root is an array), not {kind_word(value)}.",
            path=name,
        )


@overload
def _depth(value: Any) -> int: ...
@overload
def _depth(value: Any, plain_within: int) -> int | None: ...
def _depth(value: Any, plain_within: int | None = None) -> int | None:
    """How deeply ``value`` nests containers (``{}`` is 1, a primitive 0), a level at a time at
    C speed. ``plain_within``: None unless it is JSON data of the exact types (string keys, finite
    floats) of at most that many values (which also ends a cycle)."""
    depth = 0
    level = [value]
    budget = plain_within
    while True:
        kinds = set(map(type, level))
        if kinds <= JSON_TYPES:
            containers = [level[i] for i in container_positions(level)]
        elif budget is not None:
            return None
        else:  # a subclass of dict or list: asked one by one
            containers = [node for node in level if isinstance(node, (dict, list))]
        floats = (v for v in level if type(v) is float) if float in kinds else ()
        if budget is not None and not all(map(math.isfinite, floats)):
            return None
        if not containers:
            return depth
        depth += 1
        if budget is not None:
            budget -= sum(map(len, containers))
            keys = chain.from_iterable(node for node in containers if type(node) is dict)
            if budget < 0 or not set(map(type, keys)) <= {str}:
                return None
        level = list(
            chain.from_iterable(
                node.values() if isinstance(node, dict) else node for node in containers
            )
        )
