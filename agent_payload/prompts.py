"""Load and render the prompt templates in ``prompts/`` (plain text the model reads).

``render_prompt`` gives the system prompt and the user message of a call, ``render_correction``
the message after a reply that could not be used, ``render_confirm`` the request to confirm
changes that may lose data, ``render_payload`` the payload as annotated JSON. Templates are
rendered with ``string.Template.substitute``, so a template and its renderer cannot drift apart.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template
from typing import Any

from pydantic import BaseModel, TypeAdapter

from agent_payload import _jsondata
from agent_payload._intake import marker_for
from agent_payload._jsondata import json_data
from agent_payload._jsontext import JsonNumber
from agent_payload._paths import format_payload_path
from agent_payload._reply import DEFAULT_TOOL_NAME, OutputMode
from agent_payload.changes import MARKER
from agent_payload.errors import ConfigurationError, InvalidPayloadError
from agent_payload.report import Change, Finding, Issue, PayloadPath, Problem
from agent_payload.schema._compact import map_subschemas

__all__ = [
    "DEFAULT_INDENT",
    "DEFAULT_INDEX_THRESHOLD",
    "DEFAULT_TOOL_NAME",
    "ConfirmItem",
    "OutputMode",
    "PromptParts",
    "format_payload_path",
    "guard_rules",
    "load_template",
    "payload_schema",
    "render_confirm",
    "render_correction",
    "render_payload",
    "render_prompt",
    "render_system",
    "strip_index_comments",
]

DEFAULT_INDEX_THRESHOLD = 8
"""Arrays longer than this are shown with a ``/* n */`` comment before each element."""

DEFAULT_INDENT: int | None = None
"""Layout of the rendered payload: ``None`` is compact JSON with a line per element of long
arrays (about 45% fewer tokens than ``indent=2``); an int, the pretty layout."""

_PACKAGE = "agent_payload"
_FOLDER = "prompts"
_SOURCE_FOLDER = Path(__file__).resolve().parent.parent / _FOLDER

_PROBLEM_LABELS: dict[str, str] = {
    "parse": "Unreadable reply",
    "truncated": "Reply cut off",
    "refusal": "No change request",
    "no_change_request": "No change request",
    "unknown_field": "Unknown field",
    "conflict": "Not applied",
    "validation": "Invalid result",
    "guard": "Refused",
    "custom": "Problem",
}

_CONFIRM_VALUE_CHARS = 400
"""Before/after values longer than this (as JSON) are shortened in the confirm message."""


# --- templates ----------------------------------------------------------------------------


def _template_roots() -> list[Traversable]:
    return [resources.files(_PACKAGE) / _FOLDER, _SOURCE_FOLDER]


@functools.cache
def load_template(name: str) -> str:
    """The text of template ``name`` (``"system"`` or ``"system.txt"``): from the installed
    package, else from the source checkout's ``prompts/`` folder (editable installs)."""
    filename = name if name.endswith(".txt") else f"{name}.txt"
    if "/" in filename or "\\" in filename or filename.startswith("."):
        raise ConfigurationError(
            f"template name {name!r}: expected a bare file name such as 'system', found a path"
        )
    candidates = [root / filename for root in _template_roots()]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    raise ConfigurationError(
        f"prompt template {filename!r} not found (looked in: {', '.join(map(str, candidates))}); "
        "reinstall agent-payload, or run from a checkout that has the prompts/ folder"
    )


def _render(name: str, **values: str) -> str:
    """Substitute ``values`` into template ``name`` strictly (a missing variable raises)."""
    return Template(load_template(name)).substitute(values)


def _render_split(name: str, end_line: str, **values: str) -> tuple[str, str]:
    """``_render`` in two pieces: up to the line starting with ``end_line`` and the blank
    lines after it, and the rest (``("", text)`` when there is no such line)."""
    text = load_template(name)
    found = re.search(f"^{re.escape(end_line)}.*\\n?(?:\\s*\\n)?", text, re.MULTILINE)
    end = found.end() if found else 0
    return Template(text[:end]).substitute(values), Template(text[end:]).substitute(values)


# --- payload rendering --------------------------------------------------------------------


class _Frame:
    """One container being written by ``_Renderer`` (an explicit stack: no recursion limit)."""

    __slots__ = ("annotate", "broken", "depth", "index", "items", "key", "kind", "value")

    def __init__(self, value: Any, key: str | int | None, depth: int) -> None:
        self.value = value
        self.key = key  # the key or index under which this container sits in its parent
        self.depth = depth  # how many line-broken containers enclose its items
        self.kind = "{" if isinstance(value, dict) else "["
        self.items: Iterator[tuple[str | int, Any]] = (
            iter(value.items()) if isinstance(value, dict) else enumerate(value)
        )
        self.index = 0
        self.annotate = False
        self.broken = False


@dataclass
class _Renderer:
    """Writes JSON data with index comments, iteratively (any depth renders).

    ``indent=None``: compact JSON, but the items of the root and of annotated arrays of
    containers stand one per line, so every ``/*n*/`` starts a line; ``indent=k``: the pretty
    layout. A plain container below the root is written by ``json.dumps`` (C speed).
    """

    indent: int | None
    threshold: float
    fast: bool = True  # False: walk every value (the tests' reference for the fast path)
    annotated: bool = False

    def render(self, root: Any) -> str:
        out: list[str] = []
        stack: list[_Frame] = []
        seen: set[int] = set()
        sep = ": " if self.indent is not None else ":"

        def path(key: str | int | None = None) -> PayloadPath:
            keys = [f.key for f in stack[1:]] + ([] if key is None else [key])
            return tuple(k for k in keys if k is not None)

        def begin(value: Any, key: str | int | None, depth: int) -> None:
            if not isinstance(value, (dict, list)):
                out.append(self.scalar(value, path(key) if stack else ()))
                return
            if not value:
                out.append("{}" if isinstance(value, dict) else "[]")
                return
            if stack and self.fast:
                big: dict[int, int] = {}
                if _jsondata.plain_size(value, self.threshold, big, _PIECE_VALUES) is not None:
                    out.append(self.plain(value, depth, big))  # no comment inside: C speed
                    return
            if id(value) in seen:
                where = path(key) if stack else ()
                raise InvalidPayloadError(
                    f"payload at {format_payload_path(where)}: expected a tree of JSON data, "
                    "found a container that contains itself (a cycle)",
                    path=where,
                )
            seen.add(id(value))
            frame = _Frame(value, key if stack else None, depth)
            is_root = not stack
            if isinstance(value, list):
                frame.annotate = len(value) > self.threshold
                self.annotated |= frame.annotate
                frame.broken = (
                    self.indent is not None
                    or is_root
                    or (frame.annotate and any(isinstance(v, (dict, list)) for v in value))
                )
            else:
                frame.broken = self.indent is not None or is_root
            out.append(frame.kind)
            stack.append(frame)

        begin(root, None, 0)
        while stack:
            frame = stack[-1]
            inner_depth = frame.depth + frame.broken
            entry = next(frame.items, None)
            if entry is None:
                stack.pop()
                seen.discard(id(frame.value))
                if frame.broken:
                    out.append(self._newline(frame.depth, closing=True))
                out.append("}" if frame.kind == "{" else "]")
                continue
            key, item = entry
            if frame.index:
                out.append(",")
            if frame.broken:
                out.append(self._newline(frame.depth, closing=False))
            frame.index += 1
            if frame.kind == "{":
                if not isinstance(key, str):
                    where = path()
                    raise InvalidPayloadError(
                        f"payload at {format_payload_path(where)}: expected string keys, "
                        f"found the {type(key).__name__} key {key!r}",
                        path=where,
                    )
                out.append(json.dumps(key, ensure_ascii=False) + sep)
            elif frame.annotate:
                out.append(f"/*{key}*/ " if self.indent is not None else f"/*{key}*/")
            begin(item, key, inner_depth)
        return "".join(out)

    def plain(self, value: Any, depth: int, big: dict[int, int]) -> str:
        """A container with no annotated array inside, by ``json.dumps`` in the same layout."""
        if self.indent is None:
            return _compact(value, big)
        # (an indent makes json.dumps pure Python: it lets other threads in as it goes)
        text = json.dumps(value, ensure_ascii=False, indent=self.indent, check_circular=False)
        return text.replace("\n", "\n" + " " * (self.indent * depth)) if depth else text

    def _newline(self, depth: int, *, closing: bool) -> str:
        """The line break before an item of a broken container, or before its bracket."""
        if self.indent is None:  # the root's items start at column 0
            return "\n" + " " * (max(depth - 1, 0) if closing else depth)
        return "\n" + " " * (self.indent * (depth if closing else depth + 1))

    def scalar(self, value: Any, path: PayloadPath) -> str:
        if value is None or isinstance(value, (bool, str)):
            return json.dumps(value, ensure_ascii=False)
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidPayloadError(
                    f"payload at {format_payload_path(path)}: expected a finite number, found "
                    f"{value!r}; JSON has no NaN or infinity",
                    path=path,
                )
            if type(value) is JsonNumber:  # read from a file: shown as it is written there
                return value.literal
            return json.dumps(value)
        raise InvalidPayloadError(
            f"payload at {format_payload_path(path)}: expected JSON data (dict, list, str, "
            f"int, float, bool, None), found {type(value).__name__}; pass a pydantic model to "
            "get JSON-mode dumping",
            path=path,
        )


_PIECE_VALUES = 20_000
"""``_compact`` writes a larger subtree in pieces of about this many values (a few ms each)."""

_dump_compact = functools.partial(
    json.dumps, ensure_ascii=False, separators=(",", ":"), check_circular=False
)


def _compact(value: dict[str, Any] | list[Any], big: dict[int, int]) -> str:
    """Compact JSON of plain data, one C call per piece of about ``_PIECE_VALUES`` values (one
    call holds the GIL, stalling an event loop meanwhile). ``big``: the size of each container
    over that many values (``_jsondata.plain_size``)."""
    size = big.get(id(value))
    if size is None:
        return _dump_compact(value)
    pairs = list(value.items()) if isinstance(value, dict) else None
    children: list[Any] = value if isinstance(value, list) else [child for _, child in pairs or ()]
    step = max(1, len(children) * _PIECE_VALUES // size)
    parts: list[str] = []
    start = 0

    def flush(end: int) -> None:
        if end > start:
            chunk = children[start:end] if pairs is None else dict(pairs[start:end])
            parts.append(_dump_compact(chunk)[1:-1])

    for i, child in enumerate(children):
        if id(child) in big:
            flush(i)
            head = "" if pairs is None else _dump_compact(pairs[i][0]) + ":"
            parts.append(head + _compact(child, big))
            start = i + 1
        elif i + 1 - start >= step:
            flush(i + 1)
            start = i + 1
    flush(len(children))
    return ("[" if pairs is None else "{") + ",".join(parts) + ("]" if pairs is None else "}")


_FENCE_CLOSE = re.compile(r"</(?=payload|schema|task)", re.IGNORECASE)


def _escape_fences(json_text: str) -> str:
    """JSON text in which no string closes a fence: ``</payload`` is written ``<\\/payload``
    (the same JSON string; outside strings JSON has no ``<``)."""
    return _FENCE_CLOSE.sub(r"<\\/", json_text)


def _render_json(
    value: Any, *, indent: int | None, index_threshold: int | None
) -> tuple[str, bool]:
    threshold = math.inf if index_threshold is None else index_threshold
    renderer = _Renderer(indent, threshold)
    text = renderer.render(json_data(value))
    return _escape_fences(text), renderer.annotated


def render_payload(
    payload: Any,
    *,
    index_threshold: int | None = DEFAULT_INDEX_THRESHOLD,
    indent: int | None = DEFAULT_INDENT,
) -> str:
    """The payload as JSON for the model, with ``/* n */`` before each element of arrays longer
    than ``index_threshold`` (``None``: never); ``strip_index_comments`` removes them.
    ``InvalidPayloadError`` (naming the path) for anything that is not JSON data."""
    return _render_json(payload, indent=indent, index_threshold=index_threshold)[0]


_STRING_OR_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|/\*\d+\*/ ?', re.DOTALL)


def strip_index_comments(text: str) -> str:
    """Remove the ``/* n */`` index comments that ``render_payload`` wrote (never inside
    strings), giving back plain JSON."""
    return _STRING_OR_COMMENT.sub(lambda m: m.group(1) or "", text)


# --- schema -------------------------------------------------------------------------------


def _strip_titles(schema: Any) -> Any:
    """A JSON Schema without its ``title`` keywords (they repeat the property names)."""
    if not isinstance(schema, dict):
        return schema
    kept = {k: v for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    return map_subschemas(kept, _strip_titles)


def payload_schema(payload_type: Any) -> dict[str, Any]:
    """The JSON Schema shown to the model for ``payload_type`` (a pydantic model class or any
    type pydantic can describe), without ``title`` keywords."""
    try:
        if isinstance(payload_type, type) and issubclass(payload_type, BaseModel):
            schema = payload_type.model_json_schema()
        else:
            schema = TypeAdapter(payload_type).json_schema()
    except Exception as exc:
        raise ConfigurationError(
            f"payload_type {payload_type!r}: expected a pydantic model class or a type pydantic "
            f"can describe as JSON Schema, but the schema could not be built ({exc})"
        ) from exc
    result: dict[str, Any] = _strip_titles(schema)
    return result


# --- the prompt ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromptParts:
    """The system prompt and the user message of the first request. ``user[:payload_end]``
    (``payload_block``: the schema and the payload) is the same for every task on the payload,
    so a provider's prompt cache can reuse it; ``task_block`` is the rest."""

    system: str
    user: str
    payload_end: int = 0

    @property
    def payload_block(self) -> str:
        return self.user[: self.payload_end]

    @property
    def task_block(self) -> str:
        return self.user[self.payload_end :]


def _lines(value: str | Sequence[str]) -> str:
    """A text as given, or a sequence of items as a bulleted list."""
    if isinstance(value, str):
        return value.strip()
    return "\n".join(f"* {item}" for item in value)


def _check_marker(marker: str) -> None:
    if not isinstance(marker, str) or not marker:
        raise ConfigurationError(f"marker: expected a non-empty string, found {marker!r}")


def _reply_contract(output_mode: OutputMode, marker: str, tool_name: str) -> str:
    """The closing instruction: how to reply, the fields, the marker."""
    _check_marker(marker)
    if output_mode == "tool":
        return _render("reply_tool", marker=marker, tool_name=tool_name).strip()
    if output_mode in ("text", "json_schema"):
        return _render("reply_text", marker=marker).strip()
    raise ConfigurationError(
        f"output_mode: expected 'text', 'tool' or 'json_schema', found {output_mode!r}"
    )


def guard_rules(text: str | Sequence[str] | None, guards: Sequence[Any]) -> str | None:
    """The rules section of a system prompt: ``text`` (a sequence as a list), then every
    guard's ``describe()``; None when there is nothing to say."""
    parts = [text if text is None or isinstance(text, str) else _lines(text)]
    for guard in guards:
        describe = getattr(guard, "describe", None)
        said = describe() if callable(describe) else None
        parts.append(said.strip() if isinstance(said, str) else None)
    rules = "\n".join(part for part in parts if part)
    return rules or None


def render_system(
    *,
    marker: str = MARKER,
    permissions: str | Sequence[str] | None = None,
    read_only: str | Sequence[str] | None = None,
    extra_instructions: str | None = None,
) -> str:
    """The system prompt: the format's instructions naming ``marker``, plus the rules given."""
    _check_marker(marker)
    sections = ""
    if permissions:
        sections += _render("permissions", permissions=_lines(permissions))
    if read_only:
        sections += _render("read_only", read_only=_lines(read_only))
    if extra_instructions and extra_instructions.strip():
        sections += _render("extra", extra_instructions=extra_instructions.strip())
    return _render("system", marker=marker, sections=sections).rstrip() + "\n"


def render_prompt(
    payload: Any,
    task: str,
    *,
    marker: str | None = None,
    payload_type: Any = None,
    permissions: str | Sequence[str] | None = None,
    read_only: str | Sequence[str] | None = None,
    extra_instructions: str | None = None,
    index_threshold: int | None = DEFAULT_INDEX_THRESHOLD,
    indent: int | None = DEFAULT_INDENT,
    output_mode: OutputMode = "text",
    tool_name: str = DEFAULT_TOOL_NAME,
    outline: str | None = None,
    outline_budget: int = 0,
    max_reads: int = 0,
) -> PromptParts:
    """The system prompt and the user message for one call (in a tool loop use
    ``handler.prompt(task)``).

    ``marker``: the DELETE marker of the call (default: ``"DELETE"`` unless the data, the task
    or a string the type admits holds it, as the agent and the tool handler pick it).
    ``payload_type``: a type whose JSON Schema is shown (in ``"text"`` mode; default: a model
    payload's class). ``permissions``/``read_only``: a text or a list of rules. ``outline``:
    sent instead of the payload (an outline of over ``outline_budget`` tokens, read with up to
    ``max_reads`` reads).
    """
    if not isinstance(task, str) or not task.strip():
        raise ConfigurationError(f"task: expected a non-empty string, found {task!r}")
    if payload_type is None and isinstance(payload, BaseModel):
        payload_type = type(payload)
    if marker is None:
        marker = marker_for(payload, payload_type, task)
    system = render_system(
        marker=marker,
        permissions=permissions,
        read_only=read_only,
        extra_instructions=extra_instructions,
    )
    schema = ""
    # In tool and json_schema modes the change-request schema carries the payload's types.
    if payload_type is not None and output_mode == "text":
        schema_json = _dump_compact(payload_schema(payload_type))
        schema = _render("schema", schema=_escape_fences(schema_json))
    reply = _reply_contract(output_mode, marker, tool_name)
    values: dict[str, str]
    if outline is not None:  # the outline block is the stable prefix, as the payload's is
        template = "outline_user"
        values = {"budget": str(outline_budget), "max_reads": str(max_reads), "outline": outline}
    else:
        text, annotated = _render_json(payload, indent=indent, index_threshold=index_threshold)
        note = _render("index_note").rstrip("\n") if annotated else ""
        template, values = "user", {"index_note": note, "payload": text}
    # The payload block, then the task: rendered apart, so the block's end is known exactly.
    head, tail = _render_split(
        template,
        "</payload>",
        schema=schema,
        task=task.strip(),
        reply=reply,
        **values,
    )
    return PromptParts(system=system, user=head + tail.rstrip() + "\n", payload_end=len(head))


# --- correction and confirmation ----------------------------------------------------------


def _problem_text(problem: Problem, render_current: Callable[[Any], str]) -> str:
    label = _PROBLEM_LABELS.get(problem.kind, _PROBLEM_LABELS["custom"])
    head = f"- {label}"
    if problem.code and problem.code != problem.kind:
        head += f" ({problem.code})"
    if problem.path:
        head += f" at {problem.path}"
    text = f"{head}: {problem.message.strip()}"
    if problem.has_current:
        current = render_current(problem.current)
        # a validation error's value is the one the request proposed, not the payload's
        shown = (
            "The value your change request gave it (not applied):"
            if problem.kind == "validation"
            else "Its current value in the payload:"
        )
        text += f"\n  {shown}\n  " + current.replace("\n", "\n  ")
    return text


def render_correction(
    problems: Sequence[Problem],
    *,
    marker: str = MARKER,
    reply_was_truncated: bool = False,
    index_threshold: int | None = DEFAULT_INDEX_THRESHOLD,
    indent: int | None = DEFAULT_INDENT,
    output_mode: OutputMode = "text",
    tool_name: str = DEFAULT_TOOL_NAME,
    earlier_calls_kept: bool = False,
    render_current: Callable[[Any], str] | None = None,
    payload_changed: bool = False,
) -> str:
    """The message sent after a reply that could not be used: each problem (with the current
    subtree when ``problem.has_current``, written by ``render_current``, default
    ``render_payload``), the advice for a cut-off reply, and a request for a complete new one.

    ``earlier_calls_kept``: a tool loop whose earlier calls stay applied (ask again only for
    what failed). ``payload_changed`` or a ``concurrent_change`` problem: say the payload
    changed since it was shown.
    """
    reply = _reply_contract(output_mode, marker, tool_name)
    if render_current is None:
        render_current = functools.partial(
            render_payload, index_threshold=index_threshold, indent=indent
        )
    items = [_problem_text(p, render_current) for p in problems]
    truncated = reply_was_truncated or any(p.kind == "truncated" for p in problems)
    if not items and not truncated:
        raise ConfigurationError(
            "render_correction: expected at least one Problem (or reply_was_truncated=True), "
            "found none; a correction must tell the model what went wrong"
        )
    return (
        _render(
            "correction_call"
            if earlier_calls_kept
            else "correction_concurrent"
            if payload_changed or any(p.code == "concurrent_change" for p in problems)
            else "correction",
            problems="\n".join(items) + "\n\n" if items else "",
            truncation=_render("truncated") if truncated else "",
            reply=reply,
        ).rstrip()
        + "\n"
    )


def _short_json(value: Any) -> str:
    text = json.dumps(json_data(value), ensure_ascii=False, separators=(",", ":"), default=repr)
    if len(text) > _CONFIRM_VALUE_CHARS:
        text = text[:_CONFIRM_VALUE_CHARS] + f"… ({len(text)} characters in all)"
    return text


ConfirmReason = Finding | Issue | str
ConfirmItem = tuple[Change, ConfirmReason]


def render_confirm(
    suspects: Sequence[ConfirmItem],
    *,
    marker: str = MARKER,
    output_mode: OutputMode = "text",
    tool_name: str = DEFAULT_TOOL_NAME,
) -> str:
    """Ask the model once to confirm changes that may lose data. ``suspects``: pairs of a
    change and why it is suspicious (a ``Finding``, an ``Issue`` or a text), each shown with its
    path and the values before and after; the model confirms by sending the same request."""
    reply = _reply_contract(output_mode, marker, tool_name)
    pairs = list(suspects)
    if not pairs:
        raise ConfigurationError(
            "render_confirm: expected at least one suspicious change, found none; "
            "only ask the model to confirm when a guard flagged a change"
        )
    blocks = []
    for change, why in pairs:
        reason = why if isinstance(why, str) else why.message
        lines = [f"- {change.op} at {format_payload_path(change.path)}: {reason.strip()}"]
        if change.op != "add":
            lines.append(f"  before: {_short_json(change.old)}")
        after = "(deleted)" if change.op == "delete" else _short_json(change.new)
        lines.append(f"  after: {after}")
        blocks.append("\n".join(lines))
    return _render("confirm", changes="\n".join(blocks), reply=reply).rstrip() + "\n"
