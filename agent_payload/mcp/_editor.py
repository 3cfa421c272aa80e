"""The JSON file the MCP server edits: reading it as the model may see it, applying a change
request with the handler's verdict, the optimistic version check, and undo. No MCP here: the
server (``agent_payload.mcp._server``) only turns these results into tool results."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, Final

from agent_payload import prompts as _prompts
from agent_payload._files import atomic_write_text, json_file_text, json_layout, loads_json_file
from agent_payload._reply import DEFAULT_TOOL_NAME
from agent_payload.errors import (
    AgentPayloadError,
    ConfigurationError,
    FileWriteError,
    RetryWithFeedback,
)
from agent_payload.guards import Permissions, ReadScope
from agent_payload.merge import choose_marker
from agent_payload.schema import change_request_schema
from agent_payload.tools import ChangeRequestToolHandler, ToolResult

__all__ = ["Outcome", "PayloadFileEditor", "parse_path"]

READ_TOOL = "read_payload"
APPLY_TOOL = DEFAULT_TOOL_NAME
UNDO_TOOL = "undo_last_change"


@dataclass(frozen=True, slots=True)
class Outcome:
    """A tool's answer: the text for the model and whether it is an error (nothing changed)."""

    text: str
    is_error: bool = False


class _FileProblem(Exception):
    """The file cannot be read as a JSON payload right now (the message says why)."""


def _decode(path: Path, data: bytes) -> Any:
    """The file's JSON, read exactly by the library's one reader (``_files``)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _FileProblem(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); JSON files must be UTF-8"
        ) from exc
    try:
        return loads_json_file(text)
    except json.JSONDecodeError as exc:
        raise _FileProblem(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


# --- paths --------------------------------------------------------------------------------

_PATH_TOKEN = re.compile(r'\.?([^.\[\]"]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def parse_path(text: str) -> list[str | int]:
    """A payload path written as the library writes it (``items[3].price``, ``["a.b"].c``)
    as its segments; ``""`` is the root. Raises ``ValueError`` saying what was expected."""
    segments: list[str | int] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _PATH_TOKEN.match(text, pos)
        if match is None or (match.group(1) is not None and pos > 0 and text[pos] != "."):
            raise ValueError(
                f"path {text!r}: cannot read it at character {pos + 1}; expected keys joined "
                'by dots and indices in brackets, such as items[3].price or ["a.b"].c'
            )
        if match.group(1) is not None:
            segments.append(match.group(1))
        elif match.group(2) is not None:
            segments.append(int(match.group(2)))
        else:
            segments.append(json.loads(match.group(3)))
        pos = match.end()
    return segments


def _subtree(data: Any, segments: Sequence[str | int], text: str) -> Any:
    node = data
    for depth, segment in enumerate(segments):
        where = _prompts.format_payload_path(segments[:depth]) or "the root"
        if isinstance(node, dict) and isinstance(segment, str):
            if segment not in node:
                raise ValueError(f"path {text!r}: {where} has no key {segment!r} you can see")
            node = node[segment]
        elif isinstance(node, list) and isinstance(segment, int):
            if segment >= len(node):
                raise ValueError(
                    f"path {text!r}: {where} is an array of {len(node)} elements "
                    f"(indices 0 to {len(node) - 1}); there is no element {segment}"
                )
            node = node[segment]
        elif isinstance(node, list):
            raise ValueError(
                f"path {text!r}: {where} is an array; address its elements by index, "
                f"as in {_prompts.format_payload_path([*segments[:depth], 0])}"
            )
        elif isinstance(node, dict):
            raise ValueError(
                f"path {text!r}: {where} is an object; address its keys by name, "
                f'as in ["{segment}"]'
            )
        else:
            raise ValueError(f"path {text!r}: {where} is a plain value, with nothing inside")
    return node


def _has_long_array(value: Any, threshold: int) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            if len(node) > threshold:
                return True
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())
    return False


# --- the editor ---------------------------------------------------------------------------


class PayloadFileEditor:
    """Edits one JSON file with change requests, one call at a time.

    ``allow``/``deny``: write-permission rules (``agent_payload.guards.Permissions``);
    ``hide``: read-scope exclusions (``ReadScope(exclude=...)``: hidden keys are neither shown
    nor writable); ``payload_schema``: a JSON Schema the payload must keep matching (the
    change request's tool schema is derived from it). Raises ``ConfigurationError`` when the
    file cannot be read, is not JSON, or does not match ``payload_schema``, or a rule is
    malformed.

    Optimistic concurrency: the editor remembers the file's bytes as the model last saw them
    (read_payload) or as it last wrote them. A change request or an undo finds the file
    different (someone else edited it meanwhile) and is refused, the file left as it is.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] = (),
        hide: Sequence[str] = (),
        payload_schema: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        data = self._read_bytes_or_fail()
        try:
            payload = _decode(self.path, data)
        except _FileProblem as exc:
            raise ConfigurationError(str(exc)) from exc
        self.marker = choose_marker(payload)
        try:  # the handler's own check of the payload (kind, depth, values), before serving
            ChangeRequestToolHandler(payload, marker=self.marker)
        except AgentPayloadError as exc:
            raise ConfigurationError(f"{self.path}: {exc}") from exc
        try:
            self.permissions = (
                Permissions(allow=allow, deny=deny) if allow is not None or deny else None
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"allow/deny rules: {exc}") from exc
        try:
            self.read_scope = ReadScope(exclude=hide) if hide else None
        except ConfigurationError as exc:
            raise ConfigurationError(f"hide rules: {exc}") from exc
        self.payload_schema = dict(payload_schema) if payload_schema is not None else None
        self._schema_validator = self._make_validator(self.payload_schema)
        if self._schema_validator is not None:
            errors = self._schema_errors(payload, for_model=False)
            if errors:
                raise ConfigurationError(
                    f"{self.path} does not match the payload schema: {errors[0]}; fix the file "
                    "or the schema before serving it"
                )
        self._seen = data
        self._history: list[tuple[bytes, bytes]] = []

    # -- what the model is told -------------------------------------------------------------

    def guards(self) -> list[Any]:
        return [g for g in (self.permissions, self.read_scope) if g is not None]

    def _rules_text(self) -> str | None:
        parts = [g.describe().strip() for g in self.guards()]
        text = "\n".join(p for p in parts if p)
        return text or None

    def apply_description(self) -> str:
        """The format's instructions (the system prompt's text) and how to call the tool."""
        system = _prompts.render_system(marker=self.marker, permissions=self._rules_text())
        reply = Template(_prompts.load_template("reply_tool"))
        reply_text = reply.substitute(tool_name=APPLY_TOOL, marker=self.marker).strip()
        return (
            f"Edit the JSON file {self.path.name} with a change request. Call {READ_TOOL} "
            "first to see the payload; the file is written after each call that applies, and "
            f"{UNDO_TOOL} reverts the last one. A call that cannot be fully applied applies "
            "nothing and says what to fix.\n\n" + system.strip() + "\n\n" + reply_text
        )

    def read_description(self) -> str:
        note = _prompts.load_template("index_note").strip()
        scope = self.read_scope.describe() if self.read_scope is not None else ""
        return (
            f"Return the JSON payload of the file {self.path.name} as you may see it, as "
            f"compact JSON. {note} Optional path (such as items[3] or customer.address): "
            "return only the value there, as the same JSON with positions counted inside it."
            + (f" {scope}" if scope else "")
        )

    def undo_description(self) -> str:
        return (
            f"Revert the last change {APPLY_TOOL} wrote to {self.path.name}, restoring the "
            "file exactly as it was before it (repeat to go further back). Refused when the "
            "file was edited by someone else since."
        )

    def apply_schema(self) -> dict[str, Any]:
        """The input schema of the apply tool: the change request's schema for the payload
        (for ``payload_schema``, else any JSON)."""
        return change_request_schema(self.payload_schema, marker=self.marker)

    @staticmethod
    def read_schema() -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Optional: the part of the payload to return, such as "
                    'items[3].price or ["a.b"].c; leave out for the whole payload.',
                }
            },
            "additionalProperties": False,
        }

    # -- the tools --------------------------------------------------------------------------

    def read(self, path: str | None = None) -> Outcome:
        """The payload (or the value at ``path``) as the model may see it."""
        if path is not None and not isinstance(path, str):
            return Outcome(f"path: expected a string such as items[3], found {path!r}", True)
        try:
            data = self._read_bytes()
            payload = _decode(self.path, data)
        except _FileProblem as exc:
            return Outcome(f"Cannot read the payload: {exc}.", True)
        self._seen = data
        view = self.read_scope.project(payload) if self.read_scope is not None else payload
        if path:
            try:
                view = _subtree(view, parse_path(path), path)
            except ValueError as exc:
                return Outcome(f"{exc}. Nothing else was done.", True)
        threshold = _prompts.DEFAULT_INDEX_THRESHOLD
        text = _prompts.render_payload(view, index_threshold=threshold)
        if _has_long_array(view, threshold):
            text += "\n\n" + _prompts.load_template("index_note").strip()
        return Outcome(text)

    def apply(self, arguments: Mapping[str, Any] | str) -> Outcome:
        """Judge one change request; write the file atomically when it applies."""
        try:
            data = self._read_bytes()
        except _FileProblem as exc:
            return Outcome(f"Nothing was applied: {exc}.", True)
        if data != self._seen:
            return Outcome(self._stale_text("Nothing was applied"), True)
        try:
            payload = _decode(self.path, data)
        except _FileProblem as exc:
            return Outcome(f"Nothing was applied: {exc}.", True)
        try:
            handler = ChangeRequestToolHandler(
                payload,
                marker=self.marker,
                guards=self.guards(),
                validators=[self._validate] if self._schema_validator is not None else [],
                name=APPLY_TOOL,
            )
        except AgentPayloadError as exc:  # the file was changed into something not editable
            return Outcome(f"Nothing was applied: {self.path.name} cannot be edited: {exc}", True)
        result = handler.handle(arguments)
        if result.is_error:
            return Outcome(self._error_text(result), True)
        if not result.changes:
            return Outcome(result.content)
        new = json_file_text(result.payload, json_layout(data.decode("utf-8-sig"))).encode()
        written = self._write(data, new)
        if written is not None:
            return written
        self._history.append((data, new))
        return Outcome(f"Saved to {self.path.name}. {result.content}")

    def undo(self) -> Outcome:
        """Restore the file as it was before the last change written here."""
        if not self._history:
            return Outcome(f"There is no change of yours to undo in {self.path.name}.", True)
        before, after = self._history[-1]
        try:
            data = self._read_bytes()
        except _FileProblem as exc:
            return Outcome(f"Nothing was undone: {exc}.", True)
        if data != after:
            return Outcome(self._stale_text("Nothing was undone"), True)
        written = self._write(data, before, "Nothing was undone")
        if written is not None:
            return written
        self._history.pop()
        left = len(self._history)
        more = (
            f"{left} earlier change{'s' if left != 1 else ''} can still be undone"
            if left
            else "no earlier change of yours is left to undo"
        )
        return Outcome(f"Undone: {self.path.name} is as it was before your last change ({more}).")

    # -- helpers ----------------------------------------------------------------------------

    def _error_text(self, result: ToolResult) -> str:
        """The handler's correction; under a read scope, without the current values it shows
        (they are whole subtrees of the file, hidden keys included: until the handler projects
        them itself, the model reads them with read_payload, which applies the scope)."""
        if self.read_scope is None or not any(p.has_current for p in result.problems):
            return result.content
        problems = [
            dataclasses.replace(p, current=None, has_current=False) for p in result.problems
        ]
        return (
            _prompts.render_correction(
                problems,
                marker=self.marker,
                output_mode="tool",
                tool_name=APPLY_TOOL,
                earlier_calls_kept=True,
            )
            + f"(Call {READ_TOOL} with a path to see the current values concerned.)\n"
        )

    def _stale_text(self, what: str) -> str:
        return (
            f"{what}: {self.path.name} changed on disk since you last read it (someone else "
            f"edited it, version {_digest(self._seen)} -> {_digest(self._current_or_empty())}). "
            f"The file was left as it is. Call {READ_TOOL} to see the current payload, then "
            "send your change again."
        )

    def _current_or_empty(self) -> bytes:
        try:
            return self._read_bytes()
        except _FileProblem:
            return b""

    def _write(
        self, expected: bytes, new: bytes, what: str = "Nothing was applied"
    ) -> Outcome | None:
        """Write ``new`` if the file still holds ``expected`` (checked again just before the
        atomic replace); an ``Outcome`` when it could not."""
        try:
            if self._read_bytes() != expected:
                return Outcome(self._stale_text(what), True)
            atomic_write_text(self.path, new.decode("utf-8"))
        except (_FileProblem, FileWriteError) as exc:
            return Outcome(f"{what}: {exc}.", True)
        self._seen = new
        return None

    def _read_bytes(self) -> bytes:
        try:
            return self.path.read_bytes()
        except OSError as exc:
            raise _FileProblem(f"cannot read {self.path}: {exc.strerror or exc}") from exc

    def _read_bytes_or_fail(self) -> bytes:
        try:
            return self._read_bytes()
        except _FileProblem as exc:
            raise ConfigurationError(str(exc)) from exc

    @staticmethod
    def _make_validator(schema: Mapping[str, Any] | None) -> Any:
        if schema is None:
            return None
        try:
            import jsonschema
        except ImportError as exc:
            raise ConfigurationError(
                "--payload-schema needs the jsonschema package; install it with "
                "pip install 'agent-payload[mcp]'"
            ) from exc
        cls = jsonschema.validators.validator_for(schema)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(
                f"the payload schema is not a valid JSON Schema: {exc.message}"
            ) from exc
        validator = cls(schema)
        _check_refs(validator, schema)
        return validator

    def _schema_errors(self, payload: Any, *, for_model: bool = True) -> list[str]:
        from referencing.exceptions import Unresolvable

        try:
            errors = sorted(
                self._schema_validator.iter_errors(payload), key=lambda e: list(e.absolute_path)
            )
        except Unresolvable as exc:  # a $ref the startup check could not see (under a $id)
            raise ConfigurationError(
                f"the payload schema's reference cannot be resolved ({exc}); fix the schema"
            ) from exc
        out = []
        for error in errors[:5]:
            path = list(error.absolute_path)
            where = _prompts.format_payload_path(path) or "(root)"
            if self.read_scope is None or not for_model:
                out.append(f"at {where}: {error.message}")
            elif not self.read_scope.visible(tuple(path)):
                out.append("in a part of the payload you cannot see")
            else:  # the schema's rule, never the data (it may hold keys the model cannot see)
                rule = json.dumps(error.validator_value, ensure_ascii=False)
                rule = rule if len(rule) <= 200 else rule[:197] + "..."
                out.append(f"at {where}: the schema's {error.validator!r} rule ({rule}) fails")
        return out

    def _validate(self, payload: Any) -> None:
        errors = self._schema_errors(payload)
        if errors:
            raise RetryWithFeedback(
                "The result would not match the payload's JSON Schema: " + "; ".join(errors)
            )


_NOT_SCHEMAS: Final = frozenset({"enum", "const", "default", "examples"})


def _check_refs(validator: Any, schema: Any) -> None:
    """Every ``$ref`` of the payload schema resolves (remote ones are never fetched), or a
    ``ConfigurationError`` naming it and where it stands: found at startup, not as a
    traceback or as a raw error in a tool result. A subschema with its own ``$id`` is left to
    validation (its references resolve against it)."""
    from referencing.exceptions import Unresolvable

    resolver = validator._resolver  # jsonschema's resolver for this schema (4.18+)
    stack: list[tuple[Any, list[str | int]]] = [(schema, [])]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            if at and "$id" in node:
                continue
            ref = node.get("$ref")
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except Unresolvable as exc:
                    where = "/".join(str(p) for p in at) or "(root)"
                    raise ConfigurationError(
                        f"the payload schema's $ref {ref!r} at {where} cannot be resolved "
                        f"({type(exc).__name__}: {exc}); point it at a definition inside the "
                        "schema (remote references are not fetched)"
                    ) from exc
            stack.extend((v, [*at, k]) for k, v in node.items() if k not in _NOT_SCHEMAS)
        elif isinstance(node, list):
            stack.extend((v, [*at, i]) for i, v in enumerate(node))
