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
(schema from ``agent_payload.schema.change_request_schema``). ``handle`` reads the arguments
with the tolerant parser, applies them with the merge and returns a ``ToolResult``: the new
payload and the tool-result ``content`` for the model (a short summary of what changed; or, marked
``is_error``, the parse errors, conflicts or validation errors to fix, and nothing applied). The
handler keeps the current payload for the next call. It does no I/O, so it serves sync and async
loops alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from agent_payload import _loop
from agent_payload import merge as _merge
from agent_payload import parse as _parse
from agent_payload import prompts as _prompts
from agent_payload.changes import MARKER, AgentPayloadChangeRequest
from agent_payload.errors import ModelReplyError, PayloadValidationError, UsageError
from agent_payload.report import Change, Guard, MergeReport, Problem

__all__ = [
    "DEFAULT_TOOL_NAME",
    "ChangeRequestToolHandler",
    "ToolResult",
    "anthropic_tool",
    "openai_tool",
    "responses_tool",
    "summarize_changes",
    "tool_description",
]

DEFAULT_TOOL_NAME = "apply_change_request"


def tool_description(marker: str = MARKER) -> str:
    """What the tool does, in words for the model (names the active DELETE marker)."""
    return (
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


def _schema(payload_type: Any, marker: str, strict: bool) -> tuple[dict[str, Any], bool]:
    """The tool's input schema, and whether OpenAI's strict mode may be asked for: only when
    ``strict`` is wanted and the schema fits it (OpenAI answers 400 otherwise; change-request
    schemas fall back to non-strict, see ``agent_payload.schema``)."""
    from agent_payload import schema as _schema_module

    schema = _schema_module.change_request_schema(payload_type, marker=marker, strict=strict)
    return schema, strict and _schema_module.is_strict_compatible(schema)


def openai_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
    strict: bool = False,
) -> dict[str, Any]:
    """The change request as an OpenAI Chat Completions function tool
    (``{"type": "function", "function": {...}}``)."""
    parameters, use_strict = _schema(payload_type, marker, strict)
    function: dict[str, Any] = {
        "name": name,
        "description": description or tool_description(marker),
        "parameters": parameters,
    }
    if use_strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def responses_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
    strict: bool = False,
) -> dict[str, Any]:
    """The change request as an OpenAI Responses API function tool (flat:
    ``{"type": "function", "name": ..., "parameters": ..., "strict": ...}``)."""
    parameters, use_strict = _schema(payload_type, marker, strict)
    return {
        "type": "function",
        "name": name,
        "description": description or tool_description(marker),
        "parameters": parameters,
        "strict": use_strict,
    }


def anthropic_tool(
    payload_type: Any = None,
    *,
    marker: str = MARKER,
    name: str = DEFAULT_TOOL_NAME,
    description: str | None = None,
) -> dict[str, Any]:
    """The change request as an Anthropic tool (``{"name", "description", "input_schema"}``)."""
    return {
        "name": name,
        "description": description or tool_description(marker),
        "input_schema": _schema(payload_type, marker, False)[0],
    }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call.

    ``payload`` is the handler's payload after the call (unchanged when ``is_error``);
    ``content`` the tool-result text for the model; ``report`` the merge report (None when the
    arguments could not be read); ``change_request`` the parsed request (None likewise);
    ``problems`` what the model must fix when ``is_error``.
    """

    payload: Any
    content: str
    is_error: bool
    report: MergeReport | None = None
    change_request: AgentPayloadChangeRequest[Any] | None = None
    problems: tuple[Problem, ...] = field(default_factory=tuple)

    @property
    def changes(self) -> list[Change]:
        """The effective changes (empty when nothing was applied)."""
        return [] if self.report is None or self.is_error else list(self.report.changes)

    def openai_message(self, tool_call_id: str) -> dict[str, Any]:
        """The Chat Completions message answering the tool call (``role: "tool"``)."""
        return {"role": "tool", "tool_call_id": tool_call_id, "content": self.content}

    def responses_item(self, call_id: str) -> dict[str, Any]:
        """The Responses API input item answering the call (``function_call_output``)."""
        return {"type": "function_call_output", "call_id": call_id, "output": self.content}

    def anthropic_block(self, tool_use_id: str) -> dict[str, Any]:
        """The Anthropic ``tool_result`` content block (goes in the next user message)."""
        return {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": self.content,
            "is_error": self.is_error,
        }


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summarize_changes(changes: Sequence[Change], *, limit: int = 20) -> str:
    """One line per effective change (``update items[2].qty: 3 -> 5``), at most ``limit``."""
    lines = []
    for change in changes[:limit]:
        where = _prompts.format_payload_path(change.path) or "(root)"
        if change.op == "update":
            lines.append(f"- update {where}: {_short(change.old)} -> {_short(change.new)}")
        elif change.op == "add":
            lines.append(f"- add {where}: {_short(change.new)}")
        else:
            lines.append(f"- delete {where} (was {_short(change.old)})")
    if len(changes) > limit:
        lines.append(f"- ... and {len(changes) - limit} more")
    return "\n".join(lines)


class ChangeRequestToolHandler:
    """Applies change-request tool calls to a payload it keeps between calls.

    ``payload``: a dict, a list, ``None`` or a pydantic model (kept as that class).
    ``payload_type``: the pydantic type (or any type ``TypeAdapter`` accepts) the payload must
    validate against; defaults to the model's class. ``marker``: the DELETE marker the model is
    told about (default: ``merge.choose_marker(payload)``: ``"DELETE"`` unless the data holds
    it); the merge runs with that marker alone. ``guards``: checked for every effective change
    (a ``conflict`` finding refuses the call). ``validators``: called with each merged payload;
    raising ``RetryWithFeedback`` refuses the call with its feedback.

    A call that cannot be fully applied applies nothing: the result is ``is_error`` and its
    ``content`` tells the model what to fix, with the current values concerned.
    """

    def __init__(
        self,
        payload: Any,
        *,
        payload_type: Any = None,
        marker: str | None = None,
        guards: Sequence[Guard] = (),
        validators: Sequence[Callable[[Any], object]] = (),
        name: str = DEFAULT_TOOL_NAME,
    ) -> None:
        _merge.apply_change_request(payload, None)  # checks the payload (errors before a call)
        self.payload: Any = payload
        if payload_type is None and isinstance(payload, BaseModel):
            payload_type = type(payload)
        self.payload_type = payload_type
        self.marker = marker if marker is not None else _merge.choose_marker(_as_json(payload))
        self.guards = tuple(guards)
        self.validators = tuple(validators)
        self.name = name
        self.results: list[ToolResult] = []
        """Every call's result, in order."""
        self._adapter: TypeAdapter[Any] | None = None

    # -- tool definitions -----------------------------------------------------------------

    def openai_tool(self, *, strict: bool = False) -> dict[str, Any]:
        """``openai_tool`` for this handler's payload type, marker and name."""
        return openai_tool(self.payload_type, marker=self.marker, name=self.name, strict=strict)

    def responses_tool(self, *, strict: bool = False) -> dict[str, Any]:
        """``responses_tool`` for this handler's payload type, marker and name."""
        return responses_tool(self.payload_type, marker=self.marker, name=self.name, strict=strict)

    def anthropic_tool(self) -> dict[str, Any]:
        """``anthropic_tool`` for this handler's payload type, marker and name."""
        return anthropic_tool(self.payload_type, marker=self.marker, name=self.name)

    # -- calls ----------------------------------------------------------------------------

    def handle(
        self, arguments: str | Mapping[str, Any] | AgentPayloadChangeRequest[Any]
    ) -> ToolResult:
        """Apply one tool call's arguments (the JSON text, or the already decoded mapping)."""
        result = self._handle(arguments)
        self.results.append(result)
        if not result.is_error:
            self.payload = result.payload
        return result

    def _handle(
        self, arguments: str | Mapping[str, Any] | AgentPayloadChangeRequest[Any]
    ) -> ToolResult:
        if isinstance(arguments, AgentPayloadChangeRequest):
            request = arguments
        else:
            if arguments is None:  # a call without arguments: the model's error
                arguments = ""
            elif not isinstance(arguments, str | Mapping):
                raise UsageError(
                    "ChangeRequestToolHandler.handle: expected the tool call's arguments as a "
                    f"JSON string or a mapping, found {type(arguments).__name__}; pass "
                    "tool_call.function.arguments (OpenAI) or block.input (Anthropic)"
                )
            text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
            try:
                request = _parse.parse_change_request(text)
            except ModelReplyError as exc:
                problems = tuple(exc.problems) or (Problem(kind="parse", message=str(exc)),)
                return self._error(problems, None, None)
        # Every guard in turn; ``confirm`` findings become warnings (a tool call has no
        # confirmation round of its own), so the recorded ones are not used.
        guard = _loop.recording_guard(self.guards, [])
        try:
            merged = _merge.apply_change_request(
                self.payload, request, markers=frozenset({self.marker}), guard=guard
            )
        except PayloadValidationError as exc:
            return self._error(_validation_problems(exc.errors, exc.payload), None, request)
        report = merged.report
        if report.conflicts:
            problems = _loop.conflict_problems(
                report.conflicts, _as_json(self.payload), whole_root=False
            )
            return self._error(problems, report, request)
        if self.payload_type is not None and not isinstance(merged.payload, BaseModel):
            try:
                self._type_adapter().validate_python(merged.payload)
            except ValidationError as exc:
                errors = _loop.validation_errors(exc)
                return self._error(_validation_problems(errors, merged.payload), report, request)
        for validator in self.validators:
            try:
                validator(merged.payload)
            except ModelReplyError as exc:
                problem = Problem(
                    kind="custom", message=exc.feedback, path=getattr(exc, "path", None)
                )
                return self._error((problem,), report, request)
        return ToolResult(
            payload=merged.payload,
            content=self._summary(report),
            is_error=False,
            report=report,
            change_request=request,
        )

    def _summary(self, report: MergeReport) -> str:
        if not report.changes:
            text = "Applied: nothing changed (the payload already had these values)."
        else:
            count = len(report.changes)
            plural = "change" if count == 1 else "changes"
            text = f"Applied {count} {plural}:\n{summarize_changes(report.changes)}"
        if report.warnings:
            notes = "\n".join(f"- {w.code} at {w.path}: {w.message}" for w in report.warnings[:5])
            text += f"\nNotes (applied with an adjustment):\n{notes}"
        return text + "\nCall the tool again for further changes, or reply when the task is done."

    def _error(
        self,
        problems: Sequence[Problem],
        report: MergeReport | None,
        request: AgentPayloadChangeRequest[Any] | None,
    ) -> ToolResult:
        content = _prompts.render_correction(
            problems,
            marker=self.marker,
            output_mode="tool",
            tool_name=self.name,
            earlier_calls_kept=True,
        )
        return ToolResult(
            payload=self.payload,
            content=content,
            is_error=True,
            report=report,
            change_request=request,
            problems=tuple(problems),
        )

    def _type_adapter(self) -> TypeAdapter[Any]:
        if self._adapter is None:
            self._adapter = TypeAdapter(self.payload_type)
        return self._adapter


def _as_json(payload: Any) -> Any:
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    return {} if payload is None else payload


def _validation_problems(
    errors: Sequence[tuple[Sequence[str | int], str]], data: Any
) -> tuple[Problem, ...]:
    """Validation problems with the current values of the payload (never the whole of it)."""
    return _loop.validation_problems(errors, _as_json(data), whole_root=False)
