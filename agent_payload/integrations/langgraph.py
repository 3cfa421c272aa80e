"""The payload in LangGraph state, checkpointed with the thread, and the tool editing it
(``pip install 'agent-payload[langgraph]'``; guide and parallel calls: docs/frameworks.md)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, TypedDict

from pydantic import BaseModel, ConfigDict

from agent_payload import outline as _outline
from agent_payload import prompts as _prompts
from agent_payload._jsondata import json_data
from agent_payload.changes import MARKER
from agent_payload.errors import ConfigurationError, UsageError
from agent_payload.guards.versions import payload_version
from agent_payload.integrations._common import require
from agent_payload.tools import DEFAULT_TOOL_NAME, ChangeRequestToolHandler, openai_tool
from agent_payload.usage import estimate_tokens

_graph, _channels, _errors, _types, _prebuilt, _typing = (
    require(f"langgraph.{name}", package="langgraph", extra="langgraph")
    for name in (
        "graph.message",
        "channels.base",
        "errors",
        "types",
        "prebuilt",
        "_internal._typing",
    )
)
_lc_tools = require("langchain_core.tools", package="langchain-core", extra="langgraph")
_lc_messages = require("langchain_core.messages", package="langchain-core", extra="langgraph")
_LG_MISSING: Any = _typing.MISSING
_BaseChannel: Any = _channels.BaseChannel
_BaseTool: Any = _lc_tools.BaseTool

__all__ = [
    "EDIT",
    "PayloadChannel",
    "PayloadState",
    "change_request_tool",
    "payload_message",
    "payload_prompt",
    "read_tools",
]

EDIT: Final = "agent_payload_edit"
"""The key of the one-key dict a call's ``Command`` writes to the payload key."""
_TURNS_KEPT: Final = 64
_HISTORY: Final = 256
_MISSING: Final[Any] = object()
_FIXED = ("payload", "versions", "history")


class PayloadChannel(_BaseChannel):  # type: ignore[misc]
    """The payload key's channel: holds the payload (JSON data); a plain write replaces it,
    the edits of ``change_request_tool`` are combined per step."""

    __slots__ = ("value",)

    def __init__(self, typ: Any = Any, key: str = "") -> None:
        super().__init__(typ, key)
        self.value: Any = _MISSING

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PayloadChannel)

    def __hash__(self) -> int:
        return hash(PayloadChannel)

    @property
    def ValueType(self) -> Any:
        return self.typ

    UpdateType = ValueType

    def copy(self) -> PayloadChannel:
        return self.from_checkpoint(self.checkpoint())

    def checkpoint(self) -> Any:
        return _LG_MISSING if self.value is _MISSING else self.value

    def from_checkpoint(self, checkpoint: Any) -> PayloadChannel:
        new = PayloadChannel(self.typ, self.key)
        if checkpoint is not _LG_MISSING:
            new.value = checkpoint
        return new

    def get(self) -> Any:
        if self.value is _MISSING:
            raise _errors.EmptyChannelError()
        return self.value

    def is_available(self) -> bool:
        return self.value is not _MISSING

    def update(self, values: Sequence[Any]) -> bool:
        if not values:
            return False
        edits: dict[str, list[dict[str, Any]]] = {}
        value = self.value
        for item in values:
            edit = item.get(EDIT) if isinstance(item, dict) and len(item) == 1 else None
            if isinstance(edit, dict):
                edits.setdefault(str(edit["turn"]), []).append(edit)
            else:
                value = json_data(item)
        if len(edits) > 1:
            raise _errors.InvalidUpdateError(
                f"state key {self.key!r}: the change-request tool calls of {len(edits)} model "
                "messages edited the payload in one step; run their tool nodes one after the "
                "other (each message's calls are combined, two messages' are not)"
            )
        for turn, group in edits.items():
            current = payload_version({} if value is _MISSING else value)
            bases = {str(e["version"]) for e in group}
            if bases != {current}:
                raise _errors.InvalidUpdateError(
                    f"state key {self.key!r}: the tool calls of message {turn!r} were written "
                    f"against payload version {sorted(bases)} but the payload is version "
                    f"{current}; nothing was applied"
                )
            value = max(group, key=lambda e: int(e["step"]))["payload"]
        self.value = value
        return True


class PayloadState(TypedDict):
    """A graph state with the chat (``messages``) and the payload (JSON data, ``payload``):
    for a ``StateGraph`` and LangChain's ``create_agent(state_schema=...)``. For
    ``create_react_agent`` add ``remaining_steps: RemainingSteps`` (``langgraph.managed``)."""

    messages: Annotated[list[Any], _graph.add_messages]
    payload: Annotated[Any, PayloadChannel()]


@dataclass
class _Turn:
    """The calls of one ``AIMessage``: a handler over the payload it saw, its calls of this tool
    in order (id, arguments), each judged call's answer by id."""

    message: str
    handler: ChangeRequestToolHandler
    version: str
    calls: list[tuple[str, Any]]
    answers: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    alock: asyncio.Lock = field(default_factory=asyncio.Lock)  # bound to a loop on first wait

    def due(self, call_id: str, arguments: Any) -> list[tuple[str, Any]]:
        """The calls to judge now, in the message's order: those before ``call_id`` not judged
        yet, then ``call_id`` itself (with the arguments it was given)."""
        ids = [c for c, _ in self.calls]
        before = self.calls[: ids.index(call_id)] if call_id in ids else []
        due = [(c, a) for c, a in before if c not in self.answers]
        return due + ([] if call_id in self.answers else [(call_id, arguments)])


class _Turns:
    """The tool's last ``_TURNS_KEPT`` turn records, and the confirmations a guard asked for by
    payload version (the model confirms with the same call in its next message)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # ``get`` makes a turn, whose handler reads _confirming
        self._turns: OrderedDict[tuple[str, str], _Turn] = OrderedDict()
        self._confirming: OrderedDict[str, Any] = OrderedDict()

    def handler(self, settings: _Options, payload: Any, version: str) -> ChangeRequestToolHandler:
        handler = settings.handler(payload)
        with self._lock:
            handler._confirming = self._confirming.get(version)  # the handler's own record
        return handler

    def asked(self, handler: ChangeRequestToolHandler) -> None:
        """After a call: keep the confirmation it asked for, if any."""
        if handler._confirming is not None:
            with self._lock:
                _keep(self._confirming, payload_version(handler.payload), handler._confirming)

    def get(self, key: tuple[str, str], make: Callable[[], _Turn]) -> _Turn:
        with self._lock:
            turn = self._turns.get(key)
            if turn is None:
                _keep(self._turns, key, turn := make())
            else:
                self._turns.move_to_end(key)
            return turn


def _keep(records: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    """``records[key] = value``, the oldest records beyond ``_TURNS_KEPT`` dropped."""
    records[key] = value
    while len(records) > _TURNS_KEPT:
        records.popitem(last=False)


@dataclass(frozen=True, slots=True)
class _Options:
    state_key: str
    name: str
    marker: str
    options: dict[str, Any]

    def handler(self, payload: Any) -> ChangeRequestToolHandler:
        return ChangeRequestToolHandler(
            payload,
            marker=self.marker,
            name=self.name,
            versions=False,
            history=_HISTORY,
            **self.options,
        )


class _Injected(BaseModel):
    """What ``ToolNode`` injects: the graph state (the model never sees these)."""

    state: Annotated[dict[str, Any], _prebuilt.InjectedState]


class PayloadStateTool(_BaseTool):  # type: ignore[misc]
    """Applies the model's change requests to the payload in the graph state."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    settings: _Options
    turns: _Turns

    def get_input_schema(self, config: Any = None) -> Any:
        return _Injected  # ToolNode reads the injected arguments from here

    def _to_args_and_kwargs(self, tool_input: Any, tool_call_id: Any) -> Any:
        args, kwargs = super()._to_args_and_kwargs(tool_input, tool_call_id)
        return args, {**kwargs, "tool_call_id": tool_call_id}

    def _run(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> Any:
        turn, call_id, arguments = self._turn(kwargs)
        with turn.lock:
            for due_id, due_arguments in turn.due(call_id, arguments):
                result = turn.handler.handle(due_arguments, base_version=0)
                turn.answers[due_id] = self._command(turn, due_id, result)
            return turn.answers[call_id]

    async def _arun(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> Any:
        turn, call_id, arguments = self._turn(kwargs)
        async with turn.alock:
            for due_id, due_arguments in turn.due(call_id, arguments):
                result = await turn.handler.ahandle(due_arguments, base_version=0)
                turn.answers[due_id] = self._command(turn, due_id, result)
            return turn.answers[call_id]

    def _turn(self, kwargs: dict[str, Any]) -> tuple[_Turn, str, dict[str, Any]]:
        state = kwargs.pop("state", None)
        call_id = kwargs.pop("tool_call_id", None)
        key = self.settings.state_key
        where = f"langgraph.change_request_tool ({self.name!r})"
        if not isinstance(state, dict) or call_id is None:
            raise UsageError(
                f"{where}: no graph state; the tool reads the payload from LangGraph state, "
                "so run it in a ToolNode (create_react_agent, create_agent) with a tool call "
                "(an AIMessage's tool_calls entry)"
            )
        if key not in state:
            raise UsageError(
                f"{where}: the graph state has no {key!r} key (keys: {sorted(state)}); use "
                f"PayloadState (or a state with a {key!r} key of PayloadChannel) and put the "
                f"payload in the input: {{'messages': [...], {key!r}: payload}}"
            )
        payload = json_data(state[key])
        version = payload_version(payload)
        message, calls = _message_of(state.get("messages") or (), str(call_id), self.name)

        def make() -> _Turn:
            handler = self.turns.handler(self.settings, payload, version)
            return _Turn(message, handler, version, calls)

        return self.turns.get((message, version), make), str(call_id), kwargs

    def _command(self, turn: _Turn, call_id: str, result: Any) -> Any:
        self.turns.asked(turn.handler)
        message = _lc_messages.ToolMessage(
            content=result.content,
            name=self.name,
            tool_call_id=call_id,
            status="error" if result.is_error else "success",
        )
        update: dict[str, Any] = {"messages": [message]}
        if not result.is_error:
            edit = {
                "turn": turn.message,
                "version": turn.version,
                "step": result.version,
                "call": call_id,
                "request": result.change_request.to_wire(),
                "payload": json_data(result.payload),
            }
            update[self.settings.state_key] = {EDIT: edit}
        return _types.Command(update=update)


def _message_of(messages: Sequence[Any], call_id: str, name: str) -> tuple[str, list[Any]]:
    """The message that made the call ``call_id``: its id (its calls' ids when it has none)
    and its calls of the tool ``name`` (id, arguments) in order; the call's own id and no calls
    when no message in the state made it."""
    for message in reversed(messages):
        calls = [c for c in getattr(message, "tool_calls", None) or () if isinstance(c, dict)]
        ids = [str(c.get("id")) for c in calls]
        if call_id in ids:
            mine = [(str(c.get("id")), c.get("args") or {}) for c in calls if c.get("name") == name]
            return str(getattr(message, "id", None) or "|".join(ids)), mine
    return call_id, []


def change_request_tool(
    state_key: str = "payload",
    *,
    name: str | None = None,
    description: str | None = None,
    **handler_options: Any,
) -> Any:
    """A LangChain tool for LangGraph's ``ToolNode`` editing the payload in the graph state
    under ``state_key``: a ``Command`` updating it and answering the call (``status="error"``,
    nothing applied, when refused). ``handler_options``: ``ChangeRequestToolHandler``'s
    (``marker`` defaults to ``"DELETE"``, fixed: the tool's description names it)."""
    caller = "langgraph.change_request_tool"
    if not isinstance(state_key, str) or not state_key or state_key == "messages":
        raise ConfigurationError(
            f"{caller}: state_key must name the state key holding the payload (not "
            f"'messages'), found {state_key!r}"
        )
    allowed = set(inspect.signature(ChangeRequestToolHandler).parameters) - {*_FIXED, "name"}
    unknown = sorted(set(handler_options) - allowed)
    if unknown:
        fixed = [k for k in unknown if k in _FIXED]
        raise ConfigurationError(
            f"{caller}: unknown option(s) {unknown}; expected ChangeRequestToolHandler's "
            f"options {sorted(allowed)}"
            + (f" ({fixed}: set by the tool, the payload comes from the state)" if fixed else "")
        )
    marker = handler_options.pop("marker", None) or MARKER
    tool_name = name or DEFAULT_TOOL_NAME
    if description is not None and (not isinstance(description, str) or not description.strip()):
        raise ConfigurationError(f"{caller}: description must be a non-empty string")
    definition = openai_tool(
        handler_options.get("payload_type"), marker=marker, name=tool_name, base_version=False
    )["function"]
    settings = _Options(state_key, tool_name, marker, handler_options)
    # the options checked now (the payload comes with each message; its type is checked above)
    probe = {k: v for k, v in handler_options.items() if k != "payload_type"}
    _Options(state_key, tool_name, marker, probe).handler({})
    return PayloadStateTool(
        name=tool_name,
        description=description or str(definition["description"]),
        args_schema=dict(definition["parameters"]),
        handle_tool_error=False,
        settings=settings,
        turns=_Turns(),
    )


def _settings(tool: Any) -> _Options:
    """The options of ``change_request_tool``'s ``tool`` (the defaults without one)."""
    if tool is None:
        return _Options("payload", DEFAULT_TOOL_NAME, MARKER, {})
    settings = getattr(tool, "settings", None)
    if not isinstance(settings, _Options):
        raise UsageError(
            f"expected a tool made by agent_payload.integrations.langgraph.change_request_tool, "
            f"found {type(tool).__name__}"
        )
    return settings


def _shown(state: Any, settings: _Options, where: str) -> Any:
    """The state's payload as the model may see it (JSON data, the read scope applied)."""
    values = state if isinstance(state, dict) else vars(state)
    if settings.state_key not in values:
        raise UsageError(
            f"{where}: the graph state has no {settings.state_key!r} key (keys: {sorted(values)})"
        )
    shown = json_data(values[settings.state_key])
    scope = settings.options.get("read_scope")
    return shown if scope is None else scope.project(shown)


def read_tools(tool: Any = None, *, max_payload_tokens: int) -> list[Any]:
    """Outline mode's read tools (``read_payload``, ``find_in_payload``) over the state's
    payload, for the model shown an outline by ``payload_message(..., max_payload_tokens=)``
    (the same budget): add them to the ``ToolNode`` and the model's tools beside ``tool``."""
    settings = _settings(tool)
    if isinstance(max_payload_tokens, bool) or not isinstance(max_payload_tokens, int):
        raise ConfigurationError(
            f"read_tools: max_payload_tokens must be a whole number, found {max_payload_tokens!r}"
        )

    class PayloadReadTool(_BaseTool):  # type: ignore[misc]
        """Answers a read of the payload in the graph state (``outline.answer``)."""

        def get_input_schema(self, config: Any = None) -> Any:
            return _Injected

        def _run(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> str:
            state = kwargs.pop("state", None)
            if not isinstance(state, dict):
                raise UsageError(f"{self.name}: no graph state; run it in a ToolNode")
            shown = _shown(state, settings, self.name)
            return _outline.answer(
                self.name, kwargs, shown, max_payload_tokens, count=estimate_tokens
            )

    PayloadReadTool.__module__ = __name__
    specs = _outline.tool_specs(budget=max_payload_tokens)
    return [
        PayloadReadTool(name=name, description=text, args_schema=schema)
        for name, text, schema in specs
    ]


def payload_message(
    state: Any,
    tool: Any = None,
    *,
    instructions: str | None = None,
    max_payload_tokens: int | None = None,
) -> Any:
    """The system message showing the state's current payload (``tool``'s state key, marker,
    name and read scope; the defaults without one) and how to edit it, ``instructions`` added;
    longer than ``max_payload_tokens``, its outline instead (to be read with ``read_tools``).
    Render it on every turn (``payload_prompt``)."""
    settings = _settings(tool)
    shown = _shown(state, settings, "payload_message")
    outlined = None
    if max_payload_tokens is not None and _outline.exceeds(
        shown, max_payload_tokens, count=estimate_tokens
    ):
        outlined = _outline.outline(shown, max_payload_tokens, count=estimate_tokens)
    parts = _prompts.render_prompt(
        shown if shown is not None else {},
        "Make the changes the user asks for in the conversation; the payload above is its "
        "current version, with every change made so far.",
        marker=settings.marker,
        payload_type=settings.options.get("payload_type"),
        extra_instructions=instructions,
        output_mode="tool",
        tool_name=settings.name,
        outline=outlined,
        outline_budget=max_payload_tokens or 0,
        max_reads=_outline.DEFAULT_MAX_READS,
    )
    return _lc_messages.SystemMessage(content=parts.system + "\n" + parts.user)


def payload_prompt(
    tool: Any = None,
    *,
    instructions: str | None = None,
    max_payload_tokens: int | None = None,
) -> Callable[[Any], list[Any]]:
    """A ``prompt`` for ``create_react_agent`` (or a function for LangChain's ``create_agent``
    middleware): each turn, ``payload_message`` of the state then the chat's messages."""

    def prompt(state: Any) -> list[Any]:
        message = payload_message(
            state, tool, instructions=instructions, max_payload_tokens=max_payload_tokens
        )
        messages = state["messages"] if isinstance(state, dict) else state.messages
        return [message, *messages]

    return prompt
