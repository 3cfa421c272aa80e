"""Tool-call handlers, for frameworks that own the model loop.

The change request becomes a tool the model calls; this module gives the tool definition in
the shape each API wants and a handler that applies a call's arguments to the payload it holds::

    handler = ChangeRequestToolHandler(invoice, payload_type=Invoice)
    tools = [handler.openai_tool()]           # or .responses_tool() / .anthropic_tool()
    ...                                       # the model calls the tool
    result = handler.handle(tool_call.function.arguments)
    messages.append(result.openai_message(tool_call.id))
    handler.payload                           # the current payload, after every good call

``openai_tool``, ``responses_tool`` and ``anthropic_tool`` build definitions without a handler
(schema from ``agent_payload.schema.change_request_schema``). ``handle`` has the arguments
judged by ``agent_payload.judge.Judge`` (the agent's own pipeline) and returns a
``ToolResult``: the new payload and the tool-result ``content`` for the model (a short summary
of what changed; or, marked ``is_error``, the parse errors, conflicts or validation errors to
fix, or the before/after of a change a guard wants confirmed, and nothing applied). The
handler keeps the current payload for the next call. It does no I/O, so it serves sync and async
loops alike (``await handler.ahandle(arguments)`` also awaits ``async def`` validators).

Concurrent edits (README "Concurrent edits", MERGE.md section 9): the handler numbers its payload
versions (``handler.version``, stated in the prompt and in every tool result) and keeps the
requests applied since each of the last ``history`` versions. A call written against an earlier
version (``handle(arguments, base_version=v)``, a ``with handler.turn():`` block, a ``turn`` key
shared by the calls of one model response, or the ``base_version`` argument the model passes
back; the bookkeeping is ``agent_payload._bases``) is rebased over what was applied since and
then judged like any call, or sent back with ``concurrent_change``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
import weakref
from collections.abc import Callable, Generator, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from agent_payload import _callables, _intake
from agent_payload import outline as _outline
from agent_payload import prompts as _prompts
from agent_payload import schema as _schema_module
from agent_payload._bases import BASE_VERSION, Bases, split_base_version
from agent_payload._config import (
    check_guard,
    check_guards,
    check_payload_type,
    check_validators,
    read_scope_of,
)
from agent_payload._handler_reads import OutlineReads
from agent_payload._reply import DEFAULT_TOOL_NAME
from agent_payload.changes import MARKER, AgentPayloadChangeRequest
from agent_payload.errors import ConfigurationError, UsageError
from agent_payload.judge import Judge, Verdict
from agent_payload.report import Change, Guard, MergeReport, Problem
from agent_payload.usage import estimate_tokens

if TYPE_CHECKING:
    # The SDKs' own param types (plain dicts at run time; Any to a type checker without the
    # extra), so ``messages.create(tools=[openai_tool()])`` passes ``mypy --strict``.
    from agent_payload.providers.anthropic import AnthropicToolParam, AnthropicToolResultParam
    from agent_payload.providers.openai import (
        OpenAIToolMessageParam,
        OpenAIToolParam,
        ResponsesToolOutputParam,
        ResponsesToolParam,
    )

__all__ = [
    "BASE_VERSION",
    "DEFAULT_TOOL_NAME",
    "ChangeRequestToolHandler",
    "ToolResult",
    "anthropic_tool",
    "openai_tool",
    "responses_tool",
    "summarize_changes",
    "tool_description",
]


def tool_description(marker: str = MARKER, *, base_version: bool = True) -> str:
    """What the tool does, in words for the model (names the active DELETE marker; with
    ``base_version``, the optional argument naming the payload version a call was written
    against)."""
    text = (
        "Edit the JSON payload by sending only what changes. newElements: keys to add and "
        'items to append; an object of indices such as {"2": [items]} inserts the items before '
        'original element 2 ({"2": {...}} adds inside it). '
        "updateElements: values to change (partial, same shape as the payload); in arrays, {} "
        f'keeps an element and "{marker}" removes it; an object of indices such as '
        '{"12": {...}} addresses elements by position. '
        f'removeElements: what to delete, marked "{marker}". replaceElements: whole new values '
        "for top-level keys. reasoning: why. Send one call with every change; do not repeat "
        "unchanged data."
    )
    if base_version:
        text += (
            " base_version: the payload version your change was written against (the prompt "
            "and every result of this tool state the current one); calls sent together in one "
            "message pass the same one, with positions as you saw them."
        )
    return text


_BASE_DESCRIPTION: Final = (
    "The payload version this change was written against (the prompt and every result of this "
    "tool state the current version). Positions are read in that version; edits applied since "
    "are taken into account."
)


def _schema(payload_type: Any, marker: str, base_version: bool) -> dict[str, Any]:
    """The tool's input schema (never strict: see ``agent_payload.schema``), with the optional
    ``base_version`` argument when the handler numbers versions."""
    schema = _schema_module.change_request_schema(payload_type, marker=marker)
    if not base_version:
        return schema
    schema = dict(schema)  # the schema builder's may be shared: never changed in place
    version: dict[str, Any] = {"type": "integer", "minimum": 0, "description": _BASE_DESCRIPTION}
    schema["properties"] = {**schema["properties"], BASE_VERSION: version}
    return schema


def openai_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
    base_version: bool = True,
) -> OpenAIToolParam:
    """The change request as an OpenAI Chat Completions function tool
    (``{"type": "function", "function": {...}}``; typed as the SDK's
    ``ChatCompletionFunctionToolParam``)."""
    function: dict[str, Any] = {
        "name": name,
        "description": description or tool_description(marker, base_version=base_version),
        "parameters": _schema(payload_type, marker, base_version),
    }
    return cast("OpenAIToolParam", {"type": "function", "function": function})


def responses_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
    base_version: bool = True,
) -> ResponsesToolParam:
    """The change request as an OpenAI Responses API function tool (flat:
    ``{"type": "function", "name": ..., "parameters": ..., "strict": false}``: the API is
    strict unless told otherwise; typed as the SDK's ``FunctionToolParam``)."""
    tool = {
        "type": "function",
        "name": name,
        "description": description or tool_description(marker, base_version=base_version),
        "parameters": _schema(payload_type, marker, base_version),
        "strict": False,
    }
    return cast("ResponsesToolParam", tool)


def anthropic_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
    base_version: bool = True,
) -> AnthropicToolParam:
    """The change request as an Anthropic tool (``{"name", "description", "input_schema"}``;
    typed as the SDK's ``ToolParam``)."""
    tool = {
        "name": name,
        "description": description or tool_description(marker, base_version=base_version),
        "input_schema": _schema(payload_type, marker, base_version),
    }
    return cast("AnthropicToolParam", tool)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call.

    ``payload`` is the handler's payload after the call (unchanged when ``is_error``);
    ``content`` the tool-result text for the model; ``report`` the merge report (None when the
    arguments could not be read); ``change_request`` the parsed request (None likewise);
    ``problems`` what the model must fix when ``is_error``. ``version``: the handler's payload
    version after the call (stated in ``content``); ``base_version``: the version the call was
    written against when it was known (``None``: judged against the payload as it stood); an
    accepted late call's ``change_request`` is the rebased one, as applied.
    """

    payload: Any
    content: str
    is_error: bool
    report: MergeReport | None = None
    change_request: AgentPayloadChangeRequest | None = None
    problems: tuple[Problem, ...] = field(default_factory=tuple)
    version: int = 0
    base_version: int | None = None

    @property
    def changes(self) -> list[Change]:
        """The effective changes (empty when nothing was applied)."""
        return [] if self.report is None or self.is_error else list(self.report.changes)

    def openai_message(self, tool_call_id: str) -> OpenAIToolMessageParam:
        """The Chat Completions message answering the tool call (``role: "tool"``)."""
        message = {"role": "tool", "tool_call_id": tool_call_id, "content": self.content}
        return cast("OpenAIToolMessageParam", message)

    def responses_item(self, call_id: str) -> ResponsesToolOutputParam:
        """The Responses API input item answering the call (``function_call_output``)."""
        item = {"type": "function_call_output", "call_id": call_id, "output": self.content}
        return cast("ResponsesToolOutputParam", item)

    def anthropic_block(self, tool_use_id: str) -> AnthropicToolResultParam:
        """The Anthropic ``tool_result`` content block (goes in the next user message)."""
        block = {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": self.content,
            "is_error": self.is_error,
        }
        return cast("AnthropicToolResultParam", block)


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summarize_changes(changes: Sequence[Change], *, limit: int = 20) -> str:
    """One line per effective change (``update items[2].qty: 3 -> 5``), at most ``limit``."""
    lines = []
    for change in changes[:limit]:
        where = _prompts.format_payload_path(change.path)
        if change.op == "update":
            lines.append(f"- update {where}: {_short(change.old)} -> {_short(change.new)}")
        elif change.op == "add":
            lines.append(f"- add {where}: {_short(change.new)}")
        else:
            lines.append(f"- delete {where} (was {_short(change.old)})")
    if len(changes) > limit:
        lines.append(f"- ... and {len(changes) - limit} more")
    return "\n".join(lines)


class ChangeRequestToolHandler(OutlineReads):
    """Applies change-request tool calls to a payload it keeps between calls.

    ``payload``: a dict, a list, ``None`` or a pydantic model (kept as that class).
    ``payload_type``: the pydantic type (or any type ``TypeAdapter`` accepts) the payload must
    validate against; defaults to the model's class. ``marker``: the DELETE marker the model is
    told about (default: ``"DELETE"`` unless the data or a string the type admits holds it;
    ``prompt(task)`` also avoids the task); the merge runs with that marker alone. ``guards``:
    checked for every effective change (a ``conflict`` finding refuses the call; a ``confirm``
    one returns the before/after as an error result, and the same call again confirms it).
    ``permissions``: one more guard.
    ``read_scope``: a ``ReadScope``; a guard too, and no text returned to the model shows what
    it hides. ``validators``: called with each merged payload (a dict or list, or the pydantic
    model instance); raising ``RetryWithFeedback``, ``ValueError`` or ``AssertionError``
    refuses the call with its message; ``async def`` validators need ``ahandle``.
    ``prompt(task)`` renders the system prompt and user message that name this handler's
    marker and tool. ``history``: how many earlier payload versions a late call may be written
    against (default 32; each is kept in memory until ``history`` calls were applied after it);
    a call against an older version is sent back (``concurrent_change``) with the current
    payload. ``versions``: whether the prompt, the tool definition and every result state the
    payload version and take it back as the ``base_version`` argument (default True; False for a
    host that numbers versions itself, such as the MCP server: the argument is then an unknown
    field, and ``handle(..., base_version=)`` still works).

    ``max_payload_tokens`` (default ``"auto"``: ``outline.DEFAULT_MAX_PAYLOAD_TOKENS``, 24,000;
    an int; ``None``: never outline), as in ``PayloadAgent``: when the payload as the prompt would
    carry it (read scope applied) is larger, the handler is ``outlined``: ``prompt(task)`` sends
    its outline, the read tools (``openai_read_tools()``... and ``read(name, arguments)``, or
    ``call(name, arguments)`` for any of the tools) show the rest, at most ``max_reads`` reads
    (default 8) per task (counted again from ``prompt()`` and after each applied call), and every
    correction shows the subtree concerned within half the budget.

    Calls on one handler run one at a time (``handle`` under a lock, ``ahandle`` under an
    asyncio lock per event loop): each is judged against the payload the previous one left.

    Every call is judged by ``agent_payload.judge.Judge``, like the agent's replies (README:
    "What each surface does with a reply"). A call that cannot be fully applied applies
    nothing: the result is ``is_error`` and its ``content`` tells the model what to fix, with
    the current values concerned.
    """

    def _tool_result(self, content: str, is_error: bool) -> ToolResult:
        return ToolResult(
            payload=self.payload, content=content, is_error=is_error, version=self.version
        )

    def __init__(
        self,
        payload: Any,
        *,
        payload_type: Any = None,
        marker: str | None = None,
        guards: Sequence[Guard] = (),
        validators: Sequence[Callable[[Any], object]] = (),
        name: str = DEFAULT_TOOL_NAME,
        permissions: Guard | None = None,
        read_scope: Any = None,
        history: int = 32,
        versions: bool = True,
        max_payload_tokens: int | Literal["auto"] | None = "auto",
        max_reads: int = _outline.DEFAULT_MAX_READS,
    ) -> None:
        if not isinstance(history, int) or isinstance(history, bool) or history < 0:
            raise ConfigurationError(
                "ChangeRequestToolHandler(history=...): expected how many earlier payload "
                f"versions to keep, a whole number 0 or more; found {history!r}"
            )
        check_payload_type(payload_type, "ChangeRequestToolHandler(payload_type=...)")
        guards = check_guards(guards, "ChangeRequestToolHandler(guards=...)")
        validators = check_validators(validators, "ChangeRequestToolHandler(validators=...)")
        if permissions is not None:
            check_guard(permissions, "ChangeRequestToolHandler(permissions=...)")
        if read_scope is not None:
            check_guard(read_scope, "ChangeRequestToolHandler(read_scope=...)")
        read_scope = read_scope_of(guards, read_scope, "ChangeRequestToolHandler(read_scope=...)")
        self._prepared = _intake.prepare(
            payload, payload_type, marker=marker, read_scope=read_scope
        )
        """The current payload prepared (checked once, then moved along by each applied call)."""
        self.payload: Any = self._prepared.payload
        self.payload_type = self._prepared.payload_type
        # True only for a host that owns the payload and never mutates it (the MCP server):
        # a merge then shares what it does not touch instead of copying the whole payload.
        self._share_merge = False
        self.marker = self._prepared.marker
        self._marker_given = marker is not None
        self._marker_fixed = marker is not None
        """True once the marker may no longer change: given by the caller, or handed out in a
        tool definition or a prompt (``prompt(task)`` may pick one that avoids the task until
        then)."""
        self.guards = tuple(guards)
        self.permissions = permissions
        self.read_scope = read_scope
        self.validators = tuple(validators)
        self.name = name
        self.results: list[ToolResult] = []
        """Every call's result, in order."""
        self._confirming: Any = None
        """The payload JSON shown for confirmation by the last call (None: nothing pending)."""
        self.history = history
        self.versions = bool(versions)
        self._bases = Bases(history)
        self.max_payload_tokens = _outline.resolve_max_payload_tokens(
            max_payload_tokens, None, "ChangeRequestToolHandler: "
        )
        if not isinstance(max_reads, int) or isinstance(max_reads, bool) or max_reads < 0:
            raise ConfigurationError(
                "ChangeRequestToolHandler(max_reads=...): expected how many read_payload and "
                f"find_in_payload calls to answer per task, a whole number 0 or more; found "
                f"{max_reads!r}"
            )
        self.max_reads = max_reads
        self.reads = 0
        """Read calls answered since the last ``prompt()`` or applied call."""
        self._outlined: tuple[Any, bool] | None = None
        """The payload shown when ``outlined`` was last decided, and the decision."""
        self._lock = threading.Lock()
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    # -- tool definitions -----------------------------------------------------------------

    def openai_tool(self) -> OpenAIToolParam:
        """``openai_tool`` for this handler's payload type, marker and name."""
        self._marker_fixed = True
        return openai_tool(
            self.payload_type,
            marker=self.marker,
            name=self.name,
            base_version=self.versions,
        )

    def responses_tool(self) -> ResponsesToolParam:
        """``responses_tool`` for this handler's payload type, marker and name."""
        self._marker_fixed = True
        return responses_tool(
            self.payload_type,
            marker=self.marker,
            name=self.name,
            base_version=self.versions,
        )

    def anthropic_tool(self) -> AnthropicToolParam:
        """``anthropic_tool`` for this handler's payload type, marker and name."""
        self._marker_fixed = True
        return anthropic_tool(
            self.payload_type, marker=self.marker, name=self.name, base_version=self.versions
        )

    def prompt(
        self,
        task: str,
        *,
        rules_text: str | Sequence[str] | None = None,
        extra_instructions: str | None = None,
        read_only: str | Sequence[str] | None = None,
    ) -> _prompts.PromptParts:
        """The system prompt and the first user message for a tool loop over this handler:
        the current payload, its schema, the task, and the instruction to call this tool,
        naming this handler's marker, and the payload's version (the tool description, the
        prompt and the merge agree).
        With a ``read_scope`` the payload shown is its projection (what the judge lets the
        model see). The rules section states what the handler enforces (every guard's
        ``describe()``: ``permissions``, ``read_scope``, ``guards``), after ``rules_text``.

        A task that holds the marker (``"DELETE the first line"`` with ``"DELETE"``) makes
        the handler pick a marker that avoids it, as the agent does (so the model can still
        write that text as a value); call ``prompt`` before the tool definitions, which fix
        the marker. A marker given to the constructor or already handed out in a tool
        definition is not changed: ``ConfigurationError``.

        ``read_only=`` is refused (a prompt cannot enforce it): give the handler
        ``permissions=Permissions(deny=[...])``, which enforces and states it."""
        if read_only is not None:
            raise ConfigurationError(
                "ChangeRequestToolHandler.prompt(read_only=...) would only be words in the "
                "prompt; pass permissions=Permissions(deny=[...]) to the handler instead: it "
                "refuses those changes and the prompt states them"
            )
        if self.marker in task:
            better = _intake.marker_for(self._current().payload_json, self.payload_type, task)
            if self._marker_fixed:
                how = (
                    "it was given to the handler"
                    if self._marker_given
                    else "a tool definition or prompt naming it was already handed out; call "
                    "prompt(task) first, before openai_tool()/responses_tool()/anthropic_tool()"
                )
                raise ConfigurationError(
                    f"ChangeRequestToolHandler.prompt: the task holds the handler's DELETE "
                    f"marker {self.marker!r}, so the model could not write that text as a value, "
                    f"and the marker cannot change ({how}); build the handler with "
                    f"marker=choose_marker(payload, avoid=(task,)) (here {better!r})."
                )
            self.marker = better
        self._marker_fixed = True
        shown = self.shown()
        budget = self.max_payload_tokens
        outline = None
        if budget is not None and self.outlined:
            outline = _outline.outline(shown, budget, count=estimate_tokens)
        self.reads = 0
        parts = _prompts.render_prompt(
            shown,
            task,
            marker=self.marker,
            payload_type=self.payload_type,
            permissions=_prompts.guard_rules(rules_text, self.judge().guards),
            extra_instructions=extra_instructions,
            output_mode="tool",
            tool_name=self.name,
            outline=outline,
            outline_budget=budget or 0,
            max_reads=self.max_reads,
        )
        if not self.versions:
            return parts
        version = (
            f" The payload shown is version {self.version}: calls written against it pass "
            f"{BASE_VERSION} {self.version}."
        )
        return dataclasses.replace(parts, user=parts.user + version)

    # -- calls ----------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The payload's version: 0 as given, one more after each applied call."""
        return self._bases.version

    def judge(self, base_version: int | None = None) -> Judge:
        """The judge of the next call (the current payload and this handler's options); with
        ``base_version`` (a kept earlier version), the judge of a call written against it,
        which rebases it over the requests applied since (MERGE.md section 9)."""
        late: dict[str, Any] = {}
        if base_version is not None and base_version != self.version:
            kept = self._bases.kept(base_version)
            if kept is None:
                raise UsageError(
                    f"ChangeRequestToolHandler.judge: version {base_version} is not kept (kept: "
                    f"{self.version - len(self._bases.past)} to {self.version})"
                )
            late = {"base": kept[0], "applied": kept[1]}
        # The judge reads the payload as prepared, without a copy of its own (peak memory).
        return Judge(
            self.payload,
            marker=self.marker,
            validators=self.validators,
            guards=self.guards,
            permissions=self.permissions,
            read_scope=self.read_scope,
            prepared=self._current(),
            share=self._share_merge,
            **late,
        )

    def _current(self) -> _intake.Prepared:
        """The current payload as prepared (prepared again if ``payload`` was replaced)."""
        if self._prepared.payload is not self.payload:
            self._prepared = self._prepared.moved_to(self.payload)
        return self._prepared

    @contextlib.contextmanager
    def turn(self) -> Iterator[int]:
        """A block whose calls share one base: the version current when it begins (yielded).
        For the calls of one model response in a loop of your own, however they reach the
        handler (``handle``, a framework tool's ``invoke``, threads or tasks started inside)::

            with handler.turn():
                results = [tool.invoke(call) for call in ai_message.tool_calls]
        """
        with self._bases.turn() as version:
            yield version

    def handle(
        self,
        arguments: str | Mapping[str, Any] | AgentPayloadChangeRequest,
        *,
        base_version: int | None = None,
        turn: Hashable | None = None,
    ) -> ToolResult:
        """Apply one tool call's arguments (the JSON text, or the already decoded mapping).

        Which payload the call was written against (its base), first known wins:
        ``base_version`` (a ``handler.version`` the caller read when it sent the model the
        request this call answers); a ``with handler.turn():`` block around the call;
        ``turn``, any hashable naming the model response the call came from (the calls of one
        response share the version current at the first of them; the framework tools pass
        it); the ``base_version`` argument the model passed back. None of them: the current payload
        (as if no other call had been applied since the model saw it). An earlier base: the
        call is rebased over what was applied since, then judged; a collision is sent back.

        An async validator cannot be awaited here: ``ConfigurationError`` (use ``ahandle``)."""
        _callables.require_sync(
            "ChangeRequestToolHandler.handle",
            [("validator", v) for v in self.validators],
            "call await handler.ahandle(arguments) instead",
        )
        with self._lock:
            result = _callables.drive(
                self._handle(arguments, base_version, turn),
                "ChangeRequestToolHandler.handle",
                "call await handler.ahandle(arguments) instead",
            )
            return self._keep(result)

    async def ahandle(
        self,
        arguments: str | Mapping[str, Any] | AgentPayloadChangeRequest,
        *,
        base_version: int | None = None,
        turn: Hashable | None = None,
    ) -> ToolResult:
        """``handle`` for async loops: the same judge, with async validators awaited."""
        async with self._async_lock():
            result: ToolResult = await _callables.adrive(
                self._handle(arguments, base_version, turn), offload=False
            )
            return self._keep(result)

    def _async_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._lock:
            lock = self._async_locks.get(loop)
            if lock is None:
                lock = self._async_locks[loop] = asyncio.Lock()
            return lock

    def _keep(self, result: ToolResult) -> ToolResult:
        self.results.append(result)
        if not result.is_error:
            self.reads = 0
            assert result.change_request is not None
            self._bases.advance(self.payload, result.change_request, self.marker)
            self._prepared = self._prepared.moved_to(result.payload, merged=True)
            self.payload = self._prepared.payload
        return result

    def _handle(
        self,
        arguments: str | Mapping[str, Any] | AgentPayloadChangeRequest,
        base_version: int | None = None,
        turn: Hashable | None = None,
    ) -> Generator[Any, Any, ToolResult]:
        """One call: its base, the judge's steps (``Judge.steps``, which yield an async
        validator's awaitable to the driver), then the verdict as a tool result."""
        if arguments is not None and not isinstance(
            arguments, str | Mapping | AgentPayloadChangeRequest
        ):
            raise UsageError(
                "ChangeRequestToolHandler.handle: expected the tool call's arguments as a "
                f"JSON string or a mapping, found {type(arguments).__name__}; pass "
                "tool_call.function.arguments (OpenAI) or block.input (Anthropic)"
            )
        asked = None
        if self.versions:
            arguments, asked = split_base_version(arguments)
        base = self._bases.base("ChangeRequestToolHandler.handle", base_version, turn, asked)
        if isinstance(base, Problem):
            return self._result(self._refused(base), None)
        if base is not None and base != self.version and self._bases.kept(base) is None:
            return self._result(self._refused(self._too_old(base)), base)
        pending = {} if self._confirming is None else {"confirming": self._confirming}
        verdict = yield from self.judge(base).steps(arguments, **pending)
        return self._result(verdict, base)

    def _too_old(self, base: int) -> Problem:
        shown = self.shown()
        return Problem(
            kind="conflict",
            code="concurrent_change",
            message=f"this call was written against version {base} of the payload, which has "
            f"changed {self.version - base} times since: more than this tool keeps (the last "
            f"{self.history} versions), so its positions cannot be mapped to the payload as it "
            f"is now (version {self.version}, shown here). Write the change again against it.",
            current=shown,
            has_current=True,
        )

    def _refused(self, problem: Problem) -> Verdict:
        return Verdict(
            status="problems",
            stage="merge",
            marker=self.marker,
            problems=(problem,),
            message=f"the call was not applied: {problem.message}",
        )

    def _result(self, verdict: Verdict, base: int | None) -> ToolResult:
        """Map the judge's verdict to a tool result (a tool call cannot be asked to confirm
        mid-call: ``confirm`` is an error result showing before/after; the same call again is
        accepted as confirmed)."""
        if verdict.status == "accepted":
            self._confirming = None
            assert verdict.report is not None
            return ToolResult(
                payload=verdict.payload,
                content=self._summary(verdict.report, base) + self._version_line(self.version + 1),
                is_error=False,
                report=verdict.report,
                change_request=verdict.change_request,
                version=self.version + 1,
                base_version=base,
            )
        if verdict.status == "confirm":
            self._confirming = verdict.payload_json
            content = verdict.feedback(output_mode="tool", tool_name=self.name)
        else:
            content = verdict.feedback(
                output_mode="tool",
                tool_name=self.name,
                # "changes from earlier calls are kept" only once a call was applied (issue 18)
                earlier_calls_kept=any(not r.is_error for r in self.results),
                render_current=self.render_current(),
            )
        return ToolResult(
            payload=self.payload,
            content=content + self._version_line(self.version),
            is_error=True,
            report=verdict.report,
            change_request=verdict.change_request,
            problems=verdict.problems,
            version=self.version,
            base_version=base,
        )

    def _version_line(self, version: int) -> str:
        if not self.versions:
            return ""
        return (
            f"\nThe payload is now version {version} ({BASE_VERSION} of calls written against it)."
        )

    def _summary(self, report: MergeReport, base: int | None = None) -> str:
        late = ""
        if base is not None and base < self.version:
            since = self.version - base
            calls = "1 call was" if since == 1 else f"{since} calls were"
            late = (
                f" (written against version {base}; {calls} applied since, so the positions "
                "below are the payload's as it is now)"
            )
        if not report.changes:
            text = "Applied: nothing changed (the payload already had these values)."
        else:
            count = len(report.changes)
            plural = "change" if count == 1 else "changes"
            text = f"Applied {count} {plural}{late}:\n{summarize_changes(report.changes)}"
        if report.warnings:
            notes = "\n".join(f"- {w.code} at {w.path}: {w.message}" for w in report.warnings[:5])
            text += f"\nNotes (applied with an adjustment):\n{notes}"
        return text + "\nCall the tool again for further changes, or reply when the task is done."
