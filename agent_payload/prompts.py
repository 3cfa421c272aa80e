# Over 600 lines (674): one loader and one render function per template, kept beside each other;
# ``render_prompt`` (81 lines) is one keyword per option of the system and user templates.
"""Load and render the prompt templates in ``prompts/``.

The templates are plain text files the model reads. In an installed wheel they live in the
package (``agent_payload/prompts``, force-included from the top-level ``prompts/`` folder); in a
source checkout or an editable install they are read from the repository's ``prompts/`` folder.
Rendering uses ``string.Template.substitute``: a variable a template names and the renderer does
not give raises ``KeyError``, so a template and its renderer cannot drift apart silently.

What is rendered:

* ``render_prompt(payload, task, ...)`` -> ``PromptParts(system, user)``: the format's
  instructions naming the one DELETE marker active for the call (plus optional rules: write
  permissions, read-only paths, extra instructions) and the user message: the payload's JSON
  Schema (when a pydantic type is known), the payload as fenced DATA with ``/* n */`` index
  comments before the elements of long arrays, the task, and the reply contract.
* ``render_correction(problems, ...)``: the message sent after a reply that could not be used.
* ``render_confirm(changes, ...)``: asks the model once to confirm changes that may lose data.
* ``render_payload(payload, ...)``: the annotated JSON alone; ``strip_index_comments`` undoes
  the annotation (the parser and the merge never see it).
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
from agent_payload import errors as _errors
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
arrays (about 45% fewer o200k tokens than ``indent=2``, whose cost ``indent=1`` shares); an int
is the usual pretty layout with that many spaces per level."""

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
    """Where templates are looked for, in order: the installed package, then the checkout."""
    return [resources.files(_PACKAGE) / _FOLDER, _SOURCE_FOLDER]


@functools.cache
def load_template(name: str) -> str:
    """The text of template ``name`` (``"system"`` or ``"system.txt"``).

    Read from the installed package (``agent_payload/prompts``) when it holds the file, else
    from the source checkout's top-level ``prompts/`` folder (editable installs).
    """
    filename = name if name.endswith(".txt") else f"{name}.txt"
    if "/" in filename or "\\" in filename or filename.startswith("."):
        raise ConfigurationError(
            f"template name {name!r}: expected a bare file name such as 'system', found a path"
        )
    tried: list[str] = []
    for root in _template_roots():
        candidate = root / filename
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
        tried.append(str(candidate))
    raise ConfigurationError(
        f"prompt template {filename!r} not found (looked in: {', '.join(tried)}); "
        "reinstall agent-payload, or run from a checkout that has the prompts/ folder"
    )


def _render(name: str, **values: str) -> str:
    """Substitute ``values`` into template ``name`` strictly (a missing variable raises)."""
    return Template(load_template(name)).substitute(values)


def _render_split(name: str, end_line: str, **values: str) -> tuple[str, str]:
    """Template ``name`` rendered as ``_render`` does, in two pieces: up to the end of the
    line starting with ``end_line`` and the blank lines after it, and the rest (``("", text)``
    when no line starts so). The pieces joined are exactly ``_render(name, **values)``: each
    ``$name`` sits within one line, so substituting the pieces apart changes nothing."""
    lines = load_template(name).splitlines(keepends=True)
    for n, line in enumerate(lines):
        if line.startswith(end_line):
            end = n + 1
            while end < len(lines) and not lines[end].strip():
                end += 1
            head, rest = "".join(lines[:end]), "".join(lines[end:])
            return Template(head).substitute(values), Template(rest).substitute(values)
    return "", Template("".join(lines)).substitute(values)


# --- payload rendering --------------------------------------------------------------------


_to_data = json_data
"""JSON data of ``payload`` (``_jsondata.json_data``: a pydantic model by alias)."""


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


class _Renderer:
    """Writes JSON data with index comments.

    ``indent=None`` (the default layout): compact JSON, except that the keys of a root object,
    the elements of a root array and the elements of annotated arrays of containers stand one
    per line (indented one space per such level), so every ``/*n*/`` starts a line. An annotated
    array of plain values stays on one line: ``[/*0*/"a",/*1*/"b",...]``. ``indent=k``: the
    usual pretty layout with ``k`` spaces per level, as ``json.dumps(indent=k)``.

    Iterative, so payloads nested thousands of levels deep (which the merge accepts) render too.
    A container below the root with no annotated array inside and nothing unusual (checked by
    ``_jsondata.plain_size``) is written by ``json.dumps`` at C speed, in the same layout.
    """

    def __init__(self, indent: int | None, threshold: float, *, fast: bool = True) -> None:
        self.indent = indent
        self.threshold = threshold
        self.annotated = False
        self.fast = fast  # False: walk every value (the tests' reference for the fast path)

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
        """A container below the root that ``_jsondata.plain_size`` passed (no annotated array
        inside), written by ``json.dumps`` with the same layout as the walk's. ``big``: the
        sizes of its containers of over ``_PIECE_VALUES`` values (see ``_compact``)."""
        if self.indent is None:
            return _compact(value, big)
        # (an indent makes json.dumps pure Python: it lets other threads in as it goes)
        text = json.dumps(value, ensure_ascii=False, indent=self.indent, check_circular=False)
        return text.replace("\n", "\n" + " " * (self.indent * depth)) if depth else text

    def _newline(self, depth: int, *, closing: bool) -> str:
        """The line break before an item of a broken container at ``depth``, or before its
        closing bracket."""
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
    """Compact JSON of plain data, as ``json.dumps`` writes it, one C call per piece of about
    ``_PIECE_VALUES`` values: the C encoder holds the GIL for a whole call, so one call for
    megabytes would stall another thread (the event loop of an ``AsyncPayloadAgent`` whose
    worker thread renders) for as long. ``big``: the size of each container over that many
    values (``_jsondata.plain_size``); the others are written whole, several per call."""
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
    """JSON text in which no string can close one of the prompt's fences: ``</payload`` (also
    ``</schema``, ``</task``) is written ``<\\/payload``, a valid JSON escape for the same
    string. Outside strings JSON has no ``<``, so only string content is touched."""
    return _FENCE_CLOSE.sub(r"<\\/", json_text)


def _render_json(
    value: Any, *, indent: int | None, index_threshold: int | None
) -> tuple[str, bool]:
    threshold = math.inf if index_threshold is None else index_threshold
    renderer = _Renderer(indent, threshold)
    text = renderer.render(_to_data(value))
    return _escape_fences(text), renderer.annotated


def render_payload(
    payload: Any,
    *,
    index_threshold: int | None = DEFAULT_INDEX_THRESHOLD,
    indent: int | None = DEFAULT_INDENT,
) -> str:
    """The payload as JSON for the model, with ``/* n */`` before each element of arrays longer
    than ``index_threshold`` (``None``: never). ``indent=None`` renders compact JSON.

    The comments are a display aid: ``strip_index_comments`` of the result parses to data equal
    to the payload. A pydantic model is dumped in JSON mode. Raises ``InvalidPayloadError``
    (naming the path) for anything that is not JSON data.
    """
    return _render_json(payload, indent=indent, index_threshold=index_threshold)[0]


_STRING_OR_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|/\*\d+\*/ ?', re.DOTALL)


def strip_index_comments(text: str) -> str:
    """Remove the ``/* n */`` index comments that ``render_payload`` wrote (never inside
    strings), giving back plain JSON."""
    return _STRING_OR_COMMENT.sub(lambda m: m.group(1) or "", text)


# --- schema -------------------------------------------------------------------------------


def _strip_titles(schema: Any) -> Any:
    """A copy of a JSON Schema without ``title`` keywords (pydantic writes one per field; they
    repeat the property names and cost tokens). Properties named ``title`` are kept."""
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
    """The two messages of the first request: the system prompt and the user message.

    ``user`` starts with the payload block (the payload's schema, the payload, ending with
    its closing tag) and goes on with the task: ``user[:payload_end]`` is the same for every
    task on the same payload, so a provider's prompt cache can reuse it (``payload_block`` and
    ``task_block`` are the two pieces; the agent sends them as two content blocks, the first
    marked for the cache, see ``PayloadAgent(prompt_caching=)``).
    """

    system: str
    user: str
    payload_end: int = 0

    @property
    def payload_block(self) -> str:
        """The stable start of ``user``: the payload block."""
        return self.user[: self.payload_end]

    @property
    def task_block(self) -> str:
        """The rest of ``user``: the task and how to reply."""
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
    """The rules section of a system prompt: ``text`` (a sequence is shown as a list), then
    every guard's ``describe()`` (what the caller's guards enforce: write permissions,
    read-only paths, the read scope); None when there is nothing to say."""
    parts = [text if text is None or isinstance(text, str) else "\n".join(f"* {t}" for t in text)]
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
    """The system prompt: the format's instructions naming ``marker``, plus the optional rules
    (write permissions, read-only paths, extra instructions) when given."""
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
    """The system prompt and the user message for one call.

    ``payload``: dict, list or pydantic model instance (dumped in JSON mode). ``marker``: the one
    DELETE marker active for the call; by default the one the agent and
    ``ChangeRequestToolHandler`` pick (``"DELETE"`` unless the data, the task or a string the
    type admits holds it), so a prompt rendered without ``marker`` agrees with the tool and the
    merge. In a tool loop use ``handler.prompt(task)``.
    ``payload_type``: a pydantic model class (or a type pydantic can describe) whose JSON Schema
    is shown; when omitted and ``payload`` is a model instance, its class is used.
    ``permissions``/``read_only``: what may be changed and which paths may not (a text, or a
    sequence of rules shown as a list); ``extra_instructions``: added to the system prompt.
    ``index_threshold``/``indent``: see ``render_payload``. ``output_mode``/``tool_name``: how
    the model is told to reply; the payload's JSON Schema is shown in ``"text"`` mode only (in
    the other modes the change-request schema sent beside the messages carries it).
    ``outline``: the payload's outline (``agent_payload.outline``) to send instead of the
    payload, which is then not rendered; the message says it is an outline of more than
    ``outline_budget`` tokens and that up to ``max_reads`` reads show the rest.
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
    # The schema goes out once: in tool and json_schema modes the change-request schema (sent
    # as the tool's parameters or the response format) already carries the payload's types.
    if payload_type is not None and output_mode == "text":
        schema_json = json.dumps(
            payload_schema(payload_type), ensure_ascii=False, separators=(",", ":")
        )
        schema = _render("schema", schema=_escape_fences(schema_json))
    reply = _reply_contract(output_mode, marker, tool_name)
    if outline is not None:  # the outline block is the stable prefix, as the payload's is
        head, tail = _render_split(
            "outline_user",
            "</payload>",
            schema=schema,
            budget=str(outline_budget),
            max_reads=str(max_reads),
            outline=outline,
            task=task.strip(),
            reply=reply,
        )
        return PromptParts(system=system, user=head + tail.rstrip() + "\n", payload_end=len(head))
    text, annotated = _render_json(payload, indent=indent, index_threshold=index_threshold)
    # The payload block first and the task after it, rendered apart so that the payload
    # block is a stable prefix (prompt caching) and its end is known exactly.
    head, tail = _render_split(
        "user",
        "</payload>",
        schema=schema,
        index_note=_render("index_note").rstrip("\n") if annotated else "",
        payload=text,
        task=task.strip(),
        reply=reply,
    )
    return PromptParts(system=system, user=head + tail.rstrip() + "\n", payload_end=len(head))


# --- correction and confirmation ----------------------------------------------------------


def _problem_text(
    problem: Problem,
    *,
    indent: int | None,
    index_threshold: int | None,
    render_current: Callable[[Any], str] | None = None,
) -> str:
    label = _PROBLEM_LABELS.get(problem.kind, _PROBLEM_LABELS["custom"])
    head = f"- {label}"
    if problem.code and problem.code != problem.kind:
        head += f" ({problem.code})"
    if problem.path:
        head += f" at {problem.path}"
    text = f"{head}: {problem.message.strip()}"
    if problem.has_current:
        if render_current is not None:
            current = render_current(problem.current)
        else:
            current = render_payload(
                problem.current, index_threshold=index_threshold, indent=indent
            )
        # A validation error is found in the payload the change request would have produced:
        # what is shown is that proposed value, not the payload's current one.
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
    """The message sent after a reply that could not be used.

    Lists each problem (its kind, code and path, and the current value of the payload subtree
    concerned when ``problem.has_current``), asks for a smaller change request when the reply
    was cut off (``reply_was_truncated`` or a problem of kind ``truncated``), says that the
    previous change request was discarded, and asks for a complete new one naming ``marker``.

    ``earlier_calls_kept``: for a tool loop in which earlier calls were applied
    (``ChangeRequestToolHandler``): the message says they are kept and asks again only for what
    the failed call was meant to change, so an obedient model does not apply them twice.

    ``render_current``: how a problem's current value is written (default: ``render_payload``);
    outline mode passes one that keeps it within the budget.

    A ``concurrent_change`` problem (the request collided with an edit committed since,
    MERGE.md section 9), or ``payload_changed`` (the run judges against a newer payload since
    such a collision), says the payload is no longer as first shown.
    """
    reply = _reply_contract(output_mode, marker, tool_name)
    items = [
        _problem_text(
            p, indent=indent, index_threshold=index_threshold, render_current=render_current
        )
        for p in problems
    ]
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


def _parse_feedback(problems: Sequence[Problem], truncated: bool) -> str:
    return render_correction(problems, reply_was_truncated=truncated)


# The parser's errors carry only their problems: their ``feedback`` is rendered here.
_errors.install_feedback_renderer(_parse_feedback)


def _short_json(value: Any) -> str:
    text = json.dumps(_to_data(value), ensure_ascii=False, separators=(",", ":"), default=repr)
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
    """Ask the model once to confirm changes that may lose data.

    ``suspects``: pairs of an effective change and why it is suspicious (a guard's ``Finding``,
    a report ``Issue`` or a text). Each is shown with its payload path, the value before and the
    value after (values longer than 400 characters of JSON are shortened). The model confirms
    by sending the same change request again, or sends a corrected, complete one.
    """
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
