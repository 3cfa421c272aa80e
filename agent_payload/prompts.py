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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template
from typing import Any

from pydantic import BaseModel, TypeAdapter

from agent_payload.changes import MARKER
from agent_payload.errors import ConfigurationError, InvalidPayloadError
from agent_payload.report import Change, Finding, Issue, PayloadPath, Problem

__all__ = [
    "DEFAULT_INDENT",
    "DEFAULT_INDEX_THRESHOLD",
    "PromptBuilder",
    "PromptParts",
    "format_payload_path",
    "load_template",
    "payload_schema",
    "render_confirm",
    "render_correction",
    "render_payload",
    "render_prompt",
    "strip_index_comments",
]

DEFAULT_INDEX_THRESHOLD = 8
"""Arrays longer than this are shown with a ``/* n */`` comment before each element."""

DEFAULT_INDENT: int | None = 1
"""Indentation of the rendered payload (``None``: compact). One space per level costs about the
same as compact JSON in o200k tokens while keeping the structure readable; see the README."""

_PACKAGE = "agent_payload"
_FOLDER = "prompts"
_SOURCE_FOLDER = Path(__file__).resolve().parent.parent / _FOLDER

_PROBLEM_LABELS: dict[str, str] = {
    "parse": "Unreadable reply",
    "truncated": "Reply cut off",
    "refusal": "No change request",
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


# --- payload rendering --------------------------------------------------------------------


def _to_data(payload: Any) -> Any:
    """JSON data of ``payload``: a pydantic model is dumped in JSON mode, the rest as given."""
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    return payload


def format_payload_path(path: Sequence[str | int]) -> str:
    """A payload path written like ``items[3].price`` (``["a.b"]`` for keys that are not
    identifiers); the root is written ``(root)``."""
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out) or "(root)"


class _Renderer:
    def __init__(self, indent: int | None, threshold: int) -> None:
        self.indent = indent
        self.threshold = threshold
        self.annotated = False

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
            return json.dumps(value)
        raise InvalidPayloadError(
            f"payload at {format_payload_path(path)}: expected JSON data (dict, list, str, "
            f"int, float, bool, None), found {type(value).__name__}; pass a pydantic model to "
            "get JSON-mode dumping",
            path=path,
        )

    def render(self, value: Any, path: PayloadPath, level: int, seen: set[int]) -> str:
        if isinstance(value, dict):
            if not value:
                return "{}"
            items = []
            with self._enter(value, path, seen):
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise InvalidPayloadError(
                            f"payload at {format_payload_path(path)}: expected string keys, "
                            f"found the {type(key).__name__} key {key!r}",
                            path=path,
                        )
                    sep = ": " if self.indent is not None else ":"
                    rendered = self.render(item, (*path, key), level + 1, seen)
                    items.append(json.dumps(key, ensure_ascii=False) + sep + rendered)
            return self._wrap("{", "}", items, level)
        if isinstance(value, list):
            if not value:
                return "[]"
            annotate = len(value) > self.threshold
            self.annotated |= annotate
            items = []
            with self._enter(value, path, seen):
                for index, item in enumerate(value):
                    rendered = self.render(item, (*path, index), level + 1, seen)
                    if annotate:
                        rendered = f"/* {index} */ {rendered}"
                    items.append(rendered)
            return self._wrap("[", "]", items, level)
        return self.scalar(value, path)

    def _wrap(self, open_: str, close: str, items: list[str], level: int) -> str:
        if self.indent is None:
            return open_ + ",".join(items) + close
        inner = "\n" + " " * (self.indent * (level + 1))
        outer = "\n" + " " * (self.indent * level)
        return open_ + inner + ("," + inner).join(items) + outer + close

    def _enter(self, value: Any, path: PayloadPath, seen: set[int]) -> _Visit:
        return _Visit(value, path, seen)


class _Visit:
    """Guards against cycles while a container is being rendered."""

    def __init__(self, value: Any, path: PayloadPath, seen: set[int]) -> None:
        self.key = id(value)
        self.path = path
        self.seen = seen

    def __enter__(self) -> None:
        if self.key in self.seen:
            raise InvalidPayloadError(
                f"payload at {format_payload_path(self.path)}: expected a tree of JSON data, "
                "found a container that contains itself (a cycle)",
                path=self.path,
            )
        self.seen.add(self.key)

    def __exit__(self, *exc: object) -> None:
        self.seen.discard(self.key)


def _render_json(
    value: Any, *, indent: int | None, index_threshold: int | None
) -> tuple[str, bool]:
    threshold = index_threshold if index_threshold is not None else math.inf
    renderer = _Renderer(indent, int(threshold) if threshold != math.inf else 2**62)
    text = renderer.render(_to_data(value), (), 0, set())
    # A payload string cannot close the <payload> fence: "</payload" is written "<\/payload"
    # (a valid JSON escape for the same string). Outside strings JSON has no "<".
    text = re.sub(r"</(?=payload)", r"<\\/", text, flags=re.IGNORECASE)
    return text, renderer.annotated


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


_STRING_OR_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|/\* \d+ \*/ ?', re.DOTALL)


def strip_index_comments(text: str) -> str:
    """Remove the ``/* n */`` index comments that ``render_payload`` wrote (never inside
    strings), giving back plain JSON."""
    return _STRING_OR_COMMENT.sub(lambda m: m.group(1) or "", text)


# --- schema -------------------------------------------------------------------------------

_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SCHEMA_ONE = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
)


def _strip_titles(schema: Any) -> Any:
    """A copy of a JSON Schema without ``title`` keywords (pydantic writes one per field; they
    repeat the property names and cost tokens). Properties named ``title`` are kept."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_strip_titles(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _strip_titles(value)
        else:
            out[key] = value
    return out


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
    """The two messages of the first request: the system prompt and the user message."""

    system: str
    user: str


def _lines(value: str | Sequence[str]) -> str:
    """A text as given, or a sequence of items as a bulleted list."""
    if isinstance(value, str):
        return value.strip()
    return "\n".join(f"* {item}" for item in value)


def _check_marker(marker: str) -> None:
    if not isinstance(marker, str) or not marker:
        raise ConfigurationError(f"marker: expected a non-empty string, found {marker!r}")


def render_system(
    *,
    marker: str = MARKER,
    permissions: str | Sequence[str] | None = None,
    read_only: str | Sequence[str] | None = None,
    extra_instructions: str | None = None,
) -> str:
    """The system prompt: the format's instructions naming ``marker``, plus the optional rules."""
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
    marker: str = MARKER,
    payload_type: Any = None,
    permissions: str | Sequence[str] | None = None,
    read_only: str | Sequence[str] | None = None,
    extra_instructions: str | None = None,
    index_threshold: int | None = DEFAULT_INDEX_THRESHOLD,
    indent: int | None = DEFAULT_INDENT,
) -> PromptParts:
    """The system prompt and the user message for one call.

    ``payload``: dict, list or pydantic model instance (dumped in JSON mode). ``marker``: the one
    DELETE marker active for the call (the agent picks one the payload's data does not hold).
    ``payload_type``: a pydantic model class (or a type pydantic can describe) whose JSON Schema
    is shown; when omitted and ``payload`` is a model instance, its class is used.
    ``permissions``/``read_only``: what may be changed and which paths may not (a text, or a
    sequence of rules shown as a list); ``extra_instructions``: added to the system prompt.
    """
    if not isinstance(task, str) or not task.strip():
        raise ConfigurationError(f"task: expected a non-empty string, found {task!r}")
    system = render_system(
        marker=marker,
        permissions=permissions,
        read_only=read_only,
        extra_instructions=extra_instructions,
    )
    if payload_type is None and isinstance(payload, BaseModel):
        payload_type = type(payload)
    schema = ""
    if payload_type is not None:
        schema_json = json.dumps(
            payload_schema(payload_type), ensure_ascii=False, separators=(",", ":")
        )
        schema = _render("schema", schema=schema_json)
    text, annotated = _render_json(payload, indent=indent, index_threshold=index_threshold)
    index_note = (
        " A /* n */ comment before an array element gives its position; it is not data."
        if annotated
        else ""
    )
    user = _render(
        "user",
        schema=schema,
        index_note=index_note,
        payload=text,
        task=task.strip(),
        marker=marker,
    )
    return PromptParts(system=system, user=user.rstrip() + "\n")


# --- correction and confirmation ----------------------------------------------------------


def _problem_text(problem: Problem, *, indent: int | None, index_threshold: int | None) -> str:
    label = _PROBLEM_LABELS.get(problem.kind, _PROBLEM_LABELS["custom"])
    head = f"- {label}"
    if problem.code and problem.code != problem.kind:
        head += f" ({problem.code})"
    if problem.path:
        head += f" at {problem.path}"
    text = f"{head}: {problem.message.strip()}"
    if problem.has_current:
        current = render_payload(problem.current, index_threshold=index_threshold, indent=indent)
        text += "\n  Its current value in the payload:\n  " + current.replace("\n", "\n  ")
    return text


def render_correction(
    problems: Sequence[Problem],
    *,
    marker: str = MARKER,
    reply_was_truncated: bool = False,
    index_threshold: int | None = DEFAULT_INDEX_THRESHOLD,
    indent: int | None = DEFAULT_INDENT,
) -> str:
    """The message sent after a reply that could not be used: each problem (with its path and,
    when known, the current value of the subtree concerned), advice for a smaller reply when it
    was cut off, the active marker, and the request for a complete new change request (the
    previous one is discarded)."""
    _check_marker(marker)
    items = [_problem_text(p, indent=indent, index_threshold=index_threshold) for p in problems]
    truncated = reply_was_truncated or any(p.kind == "truncated" for p in problems)
    if not items:
        items = ["- Problem: the reply could not be used."]
    return (
        _render(
            "correction",
            problems="\n".join(items),
            truncation=_render("truncated") if truncated else "",
            marker=marker,
        ).rstrip()
        + "\n"
    )


def _short_json(value: Any) -> str:
    text = json.dumps(_to_data(value), ensure_ascii=False, separators=(",", ":"), default=repr)
    if len(text) > _CONFIRM_VALUE_CHARS:
        text = text[:_CONFIRM_VALUE_CHARS] + f"… ({len(text)} characters in all)"
    return text


ConfirmItem = tuple[Change, Finding | Issue | str]


def render_confirm(
    suspects: Sequence[ConfirmItem] | Mapping[Change, Finding | Issue | str],
    *,
    marker: str = MARKER,
) -> str:
    """Ask the model once to confirm changes that may lose data.

    ``suspects``: pairs of an effective change and why it is suspicious (a guard's ``Finding``,
    a report ``Issue`` or a text). Each is shown with its payload path, the value before and the
    value after (long values shortened). The model confirms by sending the same change request
    again, or sends a corrected one.
    """
    _check_marker(marker)
    pairs = list(suspects.items()) if isinstance(suspects, Mapping) else list(suspects)
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
        lines.append(
            f"  after: {'(deleted)' if change.op == 'delete' else _short_json(change.new)}"
        )
        blocks.append("\n".join(lines))
    return _render("confirm", changes="\n".join(blocks), marker=marker).rstrip() + "\n"


# --- builder ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromptBuilder:
    """The rendering options of one agent, held together.

    ``build(payload, task)`` gives the first request's messages; ``correction(problems)`` and
    ``confirm(suspects)`` the follow-ups, all naming the same marker. ``with_marker(m)`` returns
    a copy for a call whose payload needs another marker.
    """

    marker: str = MARKER
    payload_type: Any = None
    permissions: str | Sequence[str] | None = None
    read_only: str | Sequence[str] | None = None
    extra_instructions: str | None = None
    index_threshold: int | None = DEFAULT_INDEX_THRESHOLD
    indent: int | None = DEFAULT_INDENT

    def with_marker(self, marker: str) -> PromptBuilder:
        """A copy of this builder with another active marker."""
        _check_marker(marker)
        return PromptBuilder(
            marker=marker,
            payload_type=self.payload_type,
            permissions=self.permissions,
            read_only=self.read_only,
            extra_instructions=self.extra_instructions,
            index_threshold=self.index_threshold,
            indent=self.indent,
        )

    def system(self) -> str:
        """The system prompt alone (it depends only on the options)."""
        return render_system(
            marker=self.marker,
            permissions=self.permissions,
            read_only=self.read_only,
            extra_instructions=self.extra_instructions,
        )

    def build(self, payload: Any, task: str) -> PromptParts:
        """The system prompt and user message for ``payload`` and ``task``."""
        return render_prompt(
            payload,
            task,
            marker=self.marker,
            payload_type=self.payload_type,
            permissions=self.permissions,
            read_only=self.read_only,
            extra_instructions=self.extra_instructions,
            index_threshold=self.index_threshold,
            indent=self.indent,
        )

    def correction(self, problems: Sequence[Problem], *, reply_was_truncated: bool = False) -> str:
        """The correction message for ``problems``."""
        return render_correction(
            problems,
            marker=self.marker,
            reply_was_truncated=reply_was_truncated,
            index_threshold=self.index_threshold,
            indent=self.indent,
        )

    def confirm(
        self, suspects: Sequence[ConfirmItem] | Mapping[Change, Finding | Issue | str]
    ) -> str:
        """The confirmation request for ``suspects``."""
        return render_confirm(suspects, marker=self.marker)
