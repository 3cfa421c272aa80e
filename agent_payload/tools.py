"""Tool calls, for frameworks that own the model loop: the change request as a tool definition
in each API's shape, and ``ChangeRequestToolHandler``, which judges each call against the
payload it keeps and rebases late calls. Guide: docs/tools-and-sessions.md."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
import weakref
from collections.abc import Callable, Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast

from agent_payload import _callables, _intake
from agent_payload import outline as _outline
from agent_payload import prompts as _prompts
from agent_payload import schema as _schema_module
from agent_payload._bases import BASE_VERSION, Arguments, Bases, split_base_version
from agent_payload._config import (
    check_guard,
    check_guards,
    check_payload_type,
    check_validators,
    clip,
    is_int,
    read_scope_of,
)
from agent_payload._handler_reads import (
    OutlineReads,
    anthropic_shape,
    openai_shape,
    responses_shape,
)
from agent_payload._reply import DEFAULT_TOOL_NAME
from agent_payload.changes import MARKER, AgentPayloadChangeRequest
from agent_payload.errors import ConfigurationError, UsageError
from agent_payload.judge import Judge, Verdict
from agent_payload.report import Change, Guard, MergeReport, Problem

if TYPE_CHECKING:
    # The SDKs' param types (plain dicts at run time), so ``tools=[openai_tool()]`` type-checks.
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

T = TypeVar("T")


def tool_description(marker: str = MARKER, *, base_version: bool = True) -> str:
    """What the tool does, for the model (with the optional ``base_version`` argument)."""
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


def _tool(
    shape: Callable[[str, str, dict[str, Any]], T],
    payload_type: Any,
    marker: str,
    name: str,
    description: str | None,
    base_version: bool,
) -> T:
    schema = _schema_module.change_request_schema(payload_type, marker=marker)
    if base_version:  # the schema builder's may be shared: never changed in place
        version = {"type": "integer", "minimum": 0, "description": _BASE_DESCRIPTION}
        schema = {**schema, "properties": {**schema["properties"], BASE_VERSION: version}}
    text = description or tool_description(marker, base_version=base_version)
    return shape(name, text, schema)


def openai_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
    base_version: bool = True,
) -> OpenAIToolParam:
    """The change request as an OpenAI Chat Completions function tool."""
    return _tool(openai_shape, payload_type, marker, name, description, base_version)


def responses_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
    base_version: bool = True,
) -> ResponsesToolParam:
    """The change request as an OpenAI Responses API function tool (``"strict": false``)."""
    return _tool(responses_shape, payload_type, marker, name, description, base_version)


def anthropic_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
    base_version: bool = True,
) -> AnthropicToolParam:
    """The change request as an Anthropic tool."""
    return _tool(anthropic_shape, payload_type, marker, name, description, base_version)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One tool call's outcome: the handler's ``payload`` and ``version`` after it, the text
    for the model (``content``), the ``report`` and ``change_request`` (as applied; None when
    unreadable), the ``problems`` to fix, and the ``base_version`` when known."""

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


def _short(value: Any) -> str:
    return clip(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


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
    """Applies change-request tool calls, one at a time, to a payload it keeps between calls
    (docs/tools-and-sessions.md); a call that cannot be fully applied applies nothing. The
    options are ``PayloadAgent``'s; ``marker``: ``"DELETE"`` unless the data or the task holds
    it; ``history``: how many versions back a late call may be written, ``versions=False``: no
    version in the prompt, tool and results (docs/concurrency.md).
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
        if not is_int(history):
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
        self.payload: Any = self._prepared.payload
        self.payload_type = self._prepared.payload_type
        # True only for a host that owns the payload and never mutates it (the MCP server):
        # a merge then shares what it does not touch instead of copying the whole payload.
        self._share_merge = False
        self.marker = self._prepared.marker
        self._marker_given = marker is not None
        self._marker_fixed = marker is not None  # given, or handed out in a tool or prompt
        self.guards = tuple(guards)
        self.permissions = permissions
        self.read_scope = read_scope
        self.validators = tuple(validators)
        self.name = name
        self.results: list[ToolResult] = []
        """Every call's result, in order."""
        self._confirming: Any = None  # the payload JSON the last call asked to confirm
        self.history = history
        self.versions = bool(versions)
        self._bases = Bases(history)
        self.max_payload_tokens = _outline.resolve_max_payload_tokens(
            max_payload_tokens, None, "ChangeRequestToolHandler: "
        )
        if not is_int(max_reads):
            raise ConfigurationError(
                "ChangeRequestToolHandler(max_reads=...): expected how many read_payload and "
                f"find_in_payload calls to answer per task, a whole number 0 or more; found "
                f"{max_reads!r}"
            )
        self.max_reads = max_reads
        self.reads = 0
        """Read calls answered since the last ``prompt()`` or applied call."""
        self._outlined: tuple[Any, bool] | None = None  # (payload shown, outlined) last decided
        self._lock = threading.Lock()
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    # -- tool definitions -----------------------------------------------------------------

    def openai_tool(self) -> OpenAIToolParam:
        """``openai_tool`` for this handler's payload type, marker and name."""
        return self._tool(openai_shape)

    def responses_tool(self) -> ResponsesToolParam:
        """``responses_tool`` for this handler's payload type, marker and name."""
        return self._tool(responses_shape)

    def anthropic_tool(self) -> AnthropicToolParam:
        """``anthropic_tool`` for this handler's payload type, marker and name."""
        return self._tool(anthropic_shape)

    def _tool(self, shape: Callable[[str, str, dict[str, Any]], T]) -> T:
        self._marker_fixed = True  # handed out: the marker may no longer change
        return _tool(shape, self.payload_type, self.marker, self.name, None, self.versions)

    def prompt(
        self,
        task: str,
        *,
        rules_text: str | Sequence[str] | None = None,
        extra_instructions: str | None = None,
        read_only: str | Sequence[str] | None = None,
    ) -> _prompts.PromptParts:
        """The system prompt and first user message of a tool loop over this handler. A task
        holding the marker makes it pick another: call it before the tool definitions, which
        fix the marker. ``read_only=`` is refused: use ``permissions=``."""
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
        shown, budget = self.shown(), self.max_payload_tokens
        outline = _outline.outline(shown, budget) if budget is not None and self.outlined else None
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
        """The judge of the next call (with ``base_version``, of a call written against it)."""
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

    def turn(self) -> contextlib.AbstractContextManager[int]:
        """A block whose calls (one model response's) share one base, the version yielded."""
        return self._bases.turn()

    def handle(
        self,
        arguments: Arguments,
        *,
        base_version: int | None = None,
        turn: Hashable | None = None,
    ) -> ToolResult:
        """Apply one tool call's arguments (JSON text or mapping), rebased from its base, the
        first known of: ``base_version``, a ``turn()`` block, ``turn`` (a hashable naming the
        model response), the model's ``base_version`` argument (none: the current payload)."""
        where, fix = (
            "ChangeRequestToolHandler.handle",
            "call await handler.ahandle(arguments) instead",
        )
        _callables.require_sync(where, [("validator", v) for v in self.validators], fix)
        with self._lock:
            return self._keep(
                _callables.drive(self._handle(arguments, base_version, turn), where, fix)
            )

    async def ahandle(
        self,
        arguments: Arguments,
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
        self, arguments: Arguments, base_version: int | None, turn: Hashable | None
    ) -> Generator[Any, Any, ToolResult]:
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
        return Problem(
            kind="conflict",
            code="concurrent_change",
            message=f"this call was written against version {base} of the payload, which has "
            f"changed {self.version - base} times since: more than this tool keeps (the last "
            f"{self.history} versions), so its positions cannot be mapped to the payload as it "
            f"is now (version {self.version}, shown here). Write the change again against it.",
            current=self.shown(),
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
        """``confirm`` is an error result: the same call again is accepted as confirmed."""
        accepted = verdict.status == "accepted"
        version = self.version + 1 if accepted else self.version
        if accepted:
            self._confirming = None
            assert verdict.report is not None
            content = self._summary(verdict.report, base)
        elif verdict.status == "confirm":
            self._confirming = verdict.payload_json
            content = verdict.feedback(output_mode="tool", tool_name=self.name)
        else:
            content = verdict.feedback(
                output_mode="tool",
                tool_name=self.name,
                earlier_calls_kept=any(not r.is_error for r in self.results),
                render_current=self.render_current(),
            )
        if self.versions:
            now = f"version {version} ({BASE_VERSION} of calls written against it)"
            content += f"\nThe payload is now {now}."
        return ToolResult(
            payload=verdict.payload if accepted else self.payload,
            content=content,
            is_error=not accepted,
            report=verdict.report,
            change_request=verdict.change_request,
            problems=() if accepted else verdict.problems,
            version=version,
            base_version=base,
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
