"""The JSON file the MCP server edits: reads as the model may see it, change requests judged
by the handler (rebased over the writes since their version, MERGE.md section 9), and undo.
No MCP here: ``_server`` turns these outcomes into tool results."""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from agent_payload import outline as _outline
from agent_payload import prompts as _prompts
from agent_payload._filelock import locked
from agent_payload._files import json_file_chunks, loads_json_file
from agent_payload._intake import prepare, project
from agent_payload._jsondata import json_equal
from agent_payload._paths import PathNotFound, echo, lookup, parse_path
from agent_payload._reply import DEFAULT_TOOL_NAME
from agent_payload.errors import (
    AgentPayloadError,
    ConcurrentChangeError,
    ConfigurationError,
    FileWriteError,
    RetryWithFeedback,
)
from agent_payload.guards import Permissions, ReadScope
from agent_payload.judge._problems import conflict_problems
from agent_payload.mcp._file import FileProblem, decode, load, write_unchanged
from agent_payload.mcp._journal import (
    VERSIONS_KEPT,
    Tap,
    Versions,
    differences,
    digest,
)
from agent_payload.mcp._schema import PayloadSchema
from agent_payload.mcp._undo import UNDO_KEPT, Undo, inverse, keep, revert, undo_of
from agent_payload.report import Problem
from agent_payload.schema import change_request_schema
from agent_payload.tools import ChangeRequestToolHandler

__all__ = ["Outcome", "PayloadFileEditor"]

READ_TOOL = _outline.READ_PAYLOAD
FIND_TOOL = _outline.FIND_IN_PAYLOAD
APPLY_TOOL = DEFAULT_TOOL_NAME
UNDO_TOOL = "undo_last_change"
BASE_VERSION = "base_version"
DEFAULT_MAX_READ_TOKENS: Final = 20_000
"""``--max-read-tokens``: the most tokens one read, find or correction shows; beyond, an
outline (``agent_payload.outline``)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """A tool's answer: the text for the model, whether it is an error (nothing changed), and
    the file's version the text shows (None when it shows none)."""

    text: str
    is_error: bool = False
    version: str | None = None


# --- versions -----------------------------------------------------------------------------


def _version_line(version: str, note: str = "") -> str:
    """The last line of a result: the file's version it shows, and what to do with it."""
    note = note or f"pass it as {BASE_VERSION} with a change request written against it"
    return f"\n\n(version {version}: {note})"


_AS_IS = "the file as it is now"
_NOW = f"{_AS_IS}; the current values above are from it"
_CONCURRENT_IN_SCOPE = (
    "Since the version you wrote against, another change request changed what this entry "
    "touches. Nothing of your request was applied. Read the current value with "
    f"{READ_TOOL} and write a new change request against the current payload."
)


def _split(arguments: Mapping[str, Any] | str) -> tuple[Any, str | Outcome | None]:
    """The request and its ``base_version`` (None: not given; an ``Outcome``: not a string)."""
    request: Any = arguments
    if isinstance(arguments, str):
        try:
            request = json.loads(arguments)
        except ValueError:
            return arguments, None  # the handler says what is wrong with it
        if not isinstance(request, dict):
            return arguments, None
    if not isinstance(request, Mapping) or BASE_VERSION not in request:
        return request, None
    base = request[BASE_VERSION]
    request = {k: v for k, v in request.items() if k != BASE_VERSION}
    if base is None or (isinstance(base, str) and base.strip()):
        return request, base.strip() if isinstance(base, str) else None
    return request, Outcome(
        f"Nothing was applied: {BASE_VERSION} must be the version string that {READ_TOOL} (or "
        f"a previous result) showed, such as {digest(b'')!r}; found {json.dumps(base)}.",
        True,
    )


# --- the editor ---------------------------------------------------------------------------


class PayloadFileEditor:
    """Edits one JSON file with change requests, one call at a time (docs/mcp.md).

    ``allow``/``deny``: write-permission rules; ``hide``: read-scope exclusions (neither shown
    nor writable); ``payload_schema``: a JSON Schema the payload must keep matching. Raises
    ``ConfigurationError`` when the file cannot be read, is not JSON or does not match the
    schema, or a rule is malformed. Every result that shows the payload names its version; a
    change request is rebased from its ``base_version`` (default: the last one shown) over the
    journal's writes since, or sent back with what changed.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] = (),
        hide: Sequence[str] = (),
        payload_schema: Mapping[str, Any] | None = None,
        max_read_tokens: int | None = None,
    ) -> None:
        self.path = Path(path)
        budget = DEFAULT_MAX_READ_TOKENS if max_read_tokens is None else max_read_tokens
        if (
            isinstance(budget, bool)
            or not isinstance(budget, int)
            or budget < _outline.MIN_PAYLOAD_TOKENS
        ):
            raise ConfigurationError(
                f"max_read_tokens: expected a whole number of tokens >= "
                f"{_outline.MIN_PAYLOAD_TOKENS}, found {max_read_tokens!r}"
            )
        self.max_read_tokens = budget
        self._versions = Versions(self.path, "")  # its marker is chosen below
        try:
            self._last, _, _, payload = load(self.path, self._versions)
        except FileProblem as exc:
            raise ConfigurationError(str(exc)) from exc
        self.payload_schema = dict(payload_schema) if payload_schema is not None else None
        try:  # checked as every surface checks a payload (kind, depth, values), before serving;
            # the marker avoids the strings the schema admits (the task is the client's)
            self.marker = self._versions.marker = prepare(payload, self.payload_schema).marker
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
        self._schema = PayloadSchema(payload_schema) if payload_schema is not None else None
        errors = self._schema.errors(payload) if self._schema is not None else []
        if errors:
            raise ConfigurationError(
                f"{self.path} does not match the payload schema: {errors[0]}; fix the file or "
                "the schema before serving it"
            )
        self._history: list[Undo] = []  # newest last

    # -- what the model is told -------------------------------------------------------------

    def guards(self) -> list[Any]:
        return [g for g in (self.permissions, self.read_scope) if g is not None]

    def apply_description(self) -> str:
        """The format's instructions (the system prompt's text) and how to call the tool."""
        rules = _prompts.guard_rules(None, self.guards())
        system = _prompts.render_system(marker=self.marker, permissions=rules)
        reply_text = _prompts._reply_contract("tool", self.marker, APPLY_TOOL)
        return (
            f"Edit the JSON file {self.path.name} with a change request. Call {READ_TOOL} "
            "first to see the payload; the file is written after each call that applies, and "
            f"{UNDO_TOOL} reverts the last one. A call that cannot be fully applied applies "
            "nothing and says what to fix.\n\n"
            f"Versions: every result that shows the payload ends with its version. Pass the "
            f"version of the payload your request was written against as {BASE_VERSION} "
            "(optional; default: the version this session last showed you). Positions in "
            "your request are read in that version; if the file was edited since (by you or "
            "someone else), your request is moved over those edits, or sent back with the "
            "current values when it touches what they changed.\n\n"
            + system.strip()
            + "\n\n"
            + reply_text
        )

    def read_description(self) -> str:
        note = _prompts.load_template("index_note").strip()
        scope = self.read_scope.describe() if self.read_scope is not None else ""
        return (
            f"Return the JSON payload of the file {self.path.name} as you may see it, as "
            f"compact JSON, followed by its version (pass it to {APPLY_TOOL} as "
            f"{BASE_VERSION}). {note} Optional path (such as items[3] or customer.address): "
            "return only the value there, as the same JSON with positions counted inside it. "
            f"An answer is at most about {self.max_read_tokens} tokens: a larger value comes "
            "back as an OUTLINE (/*n*/ gives a position, [/*5000 elements*/] and {/*12 keys*/} "
            "stand for what is not shown); then read a part: a path, start and end (end "
            "excluded) for a range of an array's elements, keys to show only those keys of each "
            f'element ({{"path": "events", "start": 10, "end": 70, "keys": '
            f'["title", "start"]}}), or find it with {FIND_TOOL}.' + (f" {scope}" if scope else "")
        )

    def find_description(self) -> str:
        return (
            self._read_specs()[1][1]
            + f" The answer ends with the file's version (pass it to {APPLY_TOOL} as "
            f"{BASE_VERSION})."
        )

    def _read_specs(self) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        return _outline.tool_specs(budget=self.max_read_tokens)

    def find_schema(self) -> dict[str, Any]:
        return dict(self._read_specs()[1][2])

    def undo_description(self) -> str:
        return (
            f"Revert the last change {APPLY_TOOL} wrote to {self.path.name} (repeat to go "
            f"further back, up to the last {UNDO_KEPT} changes, fewer when they are large: "
            "the server keeps in memory only the request that reverts each, not copies of the "
            "file). When nobody else wrote the file since, it is restored as it was before "
            "that change; when other change requests were applied since, only what "
            "yours changed is put back. Refused when someone else changed the same values "
            "since, or edited the file by other means."
        )

    def apply_schema(self) -> dict[str, Any]:
        """The input schema of the apply tool: the change request's schema for the payload
        (for ``payload_schema``, else any JSON), plus the optional ``base_version``."""
        schema = change_request_schema(self.payload_schema, marker=self.marker)
        schema["properties"] = {
            **schema.get("properties", {}),
            BASE_VERSION: {
                "type": "string",
                "description": f"Optional: the version ({READ_TOOL} and every result show it) "
                "of the payload this request was written against.",
            },
        }
        return schema

    def read_schema(self) -> dict[str, Any]:
        """The outline reads' schema (``path``, ``start``, ``end``, ``keys``), path optional."""
        schema = dict(self._read_specs()[0][2])
        properties = dict(schema["properties"])
        properties["path"] = {
            "type": "string",
            "description": "Optional: the part of the payload to return, such as "
            'items[3].price or ["a.b"].c; leave out for the whole payload.',
        }
        schema["properties"] = properties
        schema.pop("required", None)
        return schema

    # -- the tools --------------------------------------------------------------------------

    def read(
        self,
        path: str | None = None,
        *,
        start: Any = None,
        end: Any = None,
        keys: Any = None,
    ) -> Outcome:
        """The payload (or the value at ``path``; ``start``/``end``: a range of it; ``keys``:
        only those keys of each element) as the model may see it, and its version: as JSON when
        it fits ``max_read_tokens``, else outlined (``outline.answer``, the agent's reads)."""
        if path is not None and not isinstance(path, str):
            return Outcome(
                f"path: expected a string such as items[3], found {echo(repr(path))}", True
            )
        loaded = self._load()
        if isinstance(loaded, Outcome):
            return loaded
        version, view = loaded
        budget = self.max_read_tokens
        if start is None and end is None and keys is None:
            try:
                node = lookup(view, parse_path(path or ""))
            except (ValueError, PathNotFound) as exc:
                return Outcome(f"{exc} Nothing else was done.", True, version)
            if not _outline.exceeds(node, budget):
                self._last = version
                text, annotated = _prompts._render_json(
                    node,
                    indent=_prompts.DEFAULT_INDENT,
                    index_threshold=_prompts.DEFAULT_INDEX_THRESHOLD,
                )
                if annotated:
                    text += "\n\n" + _prompts.load_template("index_note").strip()
                return Outcome(text + _version_line(version), version=version)
        given = {"path": path or "", "start": start, "end": end, "keys": keys}
        arguments = {k: v for k, v in given.items() if v is not None}
        return self._answer(READ_TOOL, arguments, version, view)

    def find(self, arguments: Mapping[str, Any]) -> Outcome:
        """Where texts or numbers occur in the payload the model may see (``find_in_payload``:
        ``text``, ``number``, ``path``), within ``max_read_tokens``, and its version."""
        loaded = self._load()
        return (
            loaded if isinstance(loaded, Outcome) else self._answer(FIND_TOOL, arguments, *loaded)
        )

    def _load(self) -> tuple[str, Any] | Outcome:
        """The file's version (remembered as shown) and the payload as the model may see it."""
        try:
            version, _, _, payload = load(self.path, self._versions)
        except FileProblem as exc:
            return Outcome(f"Cannot read the payload: {exc}.", True)
        return version, project(self.read_scope, payload)

    def _answer(self, name: str, arguments: Mapping[str, Any], version: str, view: Any) -> Outcome:
        text = _outline.answer(name, arguments, view, self.max_read_tokens)
        if text.startswith("Error:"):
            return Outcome(text + " Nothing else was done.", True, version)
        self._last = version
        return Outcome(text + _version_line(version), version=version)

    def apply(self, arguments: Mapping[str, Any] | str) -> Outcome:
        """Judge one change request against its base version, rebased over what was written
        since; write the file atomically (and the journal) when it applies."""
        request, base = _split(arguments)
        if isinstance(base, Outcome):
            return base
        return self._locked("Nothing was applied", self._apply, request, base or self._last)

    def undo(self) -> Outcome:
        """Revert the last change written here: the exact bytes of before when the file is as
        it left it, else its inverse rebased over the change requests applied since."""
        if not self._history:
            return Outcome(f"There is no change of yours to undo in {self.path.name}.", True)
        return self._locked("Nothing was undone", self._undo)

    def _locked(self, what: str, step: Callable[..., Outcome], *args: Any) -> Outcome:
        try:
            with locked(self.path):
                return step(*args)
        except FileWriteError as exc:  # the lock file cannot be opened
            return Outcome(f"{what}: {exc}.", True)

    # -- under the lock ---------------------------------------------------------------------

    def _apply(self, request: Any, base: str) -> Outcome:
        try:
            current, exact, layout, payload = load(self.path, self._versions)
        except FileProblem as exc:
            return Outcome(f"Nothing was applied: {exc}.", True)
        moved = since = ""
        count = 0
        if base != current and isinstance(request, Mapping):
            rebased = self._rebase(request, base, current, payload)
            if isinstance(rebased, Outcome):
                return rebased
            request, count = rebased
        if count:
            since = f"{count} change request{'s' if count != 1 else ''}"
            moved = (
                f"Your request was written against version {base}, and {since} "
                f"{'were' if count != 1 else 'was'} applied since (by you or others): its "
                "positions were moved to the current payload, and they are the ones named "
                "below. "
            )
        handler = self._handler(payload)
        if isinstance(handler, Outcome):
            return handler
        result = handler.handle(request)
        if result.is_error:
            text = self._correction(result.problems, result.content)
            return Outcome(moved + text + _version_line(current, _NOW), True, current)
        if not result.changes:
            return Outcome(
                moved + result.content + _version_line(current, _AS_IS),
                version=current,
            )
        # What the journal and undo need is taken now; then the old payload is let go before
        # the new text is built.
        undo = undo_of(current, payload, result.payload, exact)
        replayed = self._versions.replayed(payload, result.payload, result.change_request)
        merged, content = result.payload, result.content
        del payload, handler, result
        new = Tap(json_file_chunks(merged, layout))
        del merged  # let go once its text is built: the text is written in pieces
        written = self._write(current, new, "Nothing was applied")
        if written is not None:
            return written
        after = self._last = self._versions.remember(new)[0]
        self._versions.append(current, after, replayed)
        keep(self._history, dataclasses.replace(undo, after=after))
        note = (
            f"it also holds the {since} applied since version {base}: call {READ_TOOL} "
            "before writing positions against it"
            if since
            else "the payload you were shown with this change; pass it as "
            f"{BASE_VERSION} with your next change request"
        )
        return Outcome(
            f"Saved to {self.path.name}. {moved}{content}".rstrip() + _version_line(after, note),
            version=after,
        )

    def _rebase(
        self, request: Mapping[str, Any], base: str, current: str, payload: Any
    ) -> tuple[dict[str, Any], int] | Outcome:
        """``request`` rebased from ``base`` over the journal's writes since, with their count."""
        base_data = self._versions.shown(base)
        if base_data is None:
            return Outcome(
                f"Nothing was applied: {BASE_VERSION} {echo(repr(base))} is not a version this "
                f"server showed you (it remembers the last {VERSIONS_KEPT}, fewer of a large "
                f"file). Call {READ_TOOL} to see the current payload (version {current}), then "
                "send your change again against it.",
                True,
                current,
            )
        base_payload = decode(self.path, base_data)
        if json_equal(base_payload, payload):  # the same JSON (reformatted, or changed back)
            return dict(request), 0
        entries = self._versions.journal.since(base, current)
        if entries == "older":
            return Outcome(
                f"Nothing was applied: more change requests were applied since version {base}, "
                f"which your request was written against, than this server can move it over. "
                f"Call {READ_TOOL} to see the current payload (version {current}), then send "
                "your change again against it.",
                True,
                current,
            )
        if isinstance(entries, str):
            return Outcome(self._outside_text(base, base_payload, current, payload), True, current)
        try:
            rebased = self._versions.rebase(base_payload, entries, request)
        except ConcurrentChangeError as exc:
            problems = conflict_problems(exc.report.conflicts, payload)
            if self.read_scope is not None:  # the other edit's values may be hidden ones
                problems = tuple(
                    dataclasses.replace(p, message=_CONCURRENT_IN_SCOPE) for p in problems
                )
            text = self._correction(problems, payload=payload) + _version_line(current, _NOW)
            return Outcome(text, True, current)
        except AgentPayloadError as exc:  # wrong on its own base: judged there, as any request
            handler = self._handler(base_payload)
            if isinstance(handler, Outcome):
                return handler
            judged = handler.handle(request)
            text = (
                self._correction(judged.problems, judged.content)
                if judged.is_error
                else f"Nothing was applied: {exc}\n"
            )
            return Outcome(
                f"(Judged against version {base}, which your request was written against.)\n"
                + text
                + _version_line(current, _AS_IS),
                True,
                current,
            )
        return rebased.to_wire(), len(entries)

    def _undo(self) -> Outcome:
        last = self._history[-1]
        try:
            current, _, layout, payload = load(self.path, self._versions)
            replaced = [(tuple(p), v) for p, v in loads_json_file(last.old)]
        except FileProblem as exc:
            return Outcome(f"Nothing was undone: {exc}.", True)
        if current == last.after:  # nobody wrote since
            target, request = inverse(payload, replaced, self.marker)
            exact = last.exact
            new = zlib.decompress(exact) if exact else Tap(json_file_chunks(target, layout))
        else:
            reverted = revert(self._versions, last, replaced, current, payload, self.path)
            if isinstance(reverted, str):
                self._history.clear()  # what made it impossible stays: never promise it again
                return Outcome(reverted, True, current)
            target, request = reverted
            new = Tap(json_file_chunks(target, layout))
        written = self._write(current, new, "Nothing was undone")
        if written is not None:
            return written
        restored = self._last = self._versions.remember(new)[0]
        self._versions.append(current, restored, self._versions.replayed(payload, target, request))
        self._versions.cancel((last.before, last.after), (current, restored))
        self._history.pop()
        left = len(self._history)
        more = (
            f"{left} earlier change{'s' if left != 1 else ''} can still be undone"
            if left
            else "no earlier change of yours is left to undo"
        )
        how = (
            "is as it was before your last change"
            if current == last.after
            else "has back the values your last change replaced (the changes made by others "
            "since are kept)"
        )
        return Outcome(
            f"Undone: {self.path.name} {how} ({more})." + _version_line(restored, _AS_IS),
            version=restored,
        )

    # -- helpers ----------------------------------------------------------------------------

    def _handler(self, payload: Any) -> ChangeRequestToolHandler | Outcome:
        """The handler judging a request against ``payload`` (corrections in half the budget)."""
        try:
            handler = ChangeRequestToolHandler(
                payload,
                marker=self.marker,
                guards=self.guards(),
                validators=[self._validate] if self._schema is not None else [],
                name=APPLY_TOOL,
                versions=False,  # the server numbers the file's versions itself
                max_payload_tokens=self.max_read_tokens,  # corrections within half of it
            )
        except AgentPayloadError as exc:  # the file was changed into something not editable
            return Outcome(f"Nothing was applied: {self.path.name} cannot be edited: {exc}", True)
        # The payload was read from the file for this call and is never mutated: the merge
        # shares what it does not touch (one file's worth in memory, not two).
        handler._share_merge = True
        return handler

    def _correction(
        self, problems: Sequence[Problem], content: str | None = None, payload: Any = None
    ) -> str:
        """The handler's correction ``content``, else one rendered over ``payload``; under a
        read scope without current values (``read_payload`` applies the scope)."""
        hide = self.read_scope is not None and any(p.has_current for p in problems)
        if content is not None and not hide:
            return content
        budget, render = self.max_read_tokens, None
        if hide:
            problems = [dataclasses.replace(p, current=None, has_current=False) for p in problems]
        elif _outline.exceeds(payload, budget):
            render = _outline.current_renderer(budget)
        text = _prompts.render_correction(
            problems,
            marker=self.marker,
            output_mode="tool",
            tool_name=APPLY_TOOL,
            earlier_calls_kept=True,
            render_current=render,
        )
        if hide:
            text += f"(Call {READ_TOOL} with a path to see the current values concerned.)\n"
        return text

    def _outside_text(self, base: str, base_payload: Any, current: str, payload: Any) -> str:
        scope = self.read_scope
        changed, count = differences(project(scope, base_payload), project(scope, payload))
        what = ", ".join(changed) + (f" (and {count - len(changed)} more)" if count > 5 else "")
        return (
            f"Nothing was applied: {self.path.name} was changed by someone else since version "
            f"{base}, which your request was written against, by means other than a change "
            "request (an editor, a script), so your request cannot be moved over that edit. "
            f"What differs from the version you saw: {what or 'a part you cannot see'}. Call "
            f"{READ_TOOL} to see the current payload (version {current}), then send your "
            "change again against it."
        )

    def _write(self, expected: str, new: bytes | Tap, what: str) -> Outcome | None:
        """Write ``new`` if the file is still version ``expected`` (else an ``Outcome``)."""
        try:
            if write_unchanged(self.path, expected, new):
                return None
        except (FileProblem, FileWriteError) as exc:
            return Outcome(f"{what}: {exc}.", True)
        return Outcome(
            f"{what}: {self.path.name} was changed by someone else just now (by a program that "
            f"does not take its lock). Call {READ_TOOL} to see the current payload, then try "
            "again.",
            True,
        )

    def _validate(self, payload: Any) -> None:
        assert self._schema is not None
        errors = self._schema.errors(payload, self.read_scope)
        if errors:
            raise RetryWithFeedback(
                "The result would not match the payload's JSON Schema: " + "; ".join(errors)
            )
