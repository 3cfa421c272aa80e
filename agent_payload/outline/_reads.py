"""The read tools of outline mode (pure): their descriptions (``tool_specs``) and the answers
to ``read_payload`` and ``find_in_payload`` calls, each a text for the model."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agent_payload import prompts as _prompts
from agent_payload._paths import (
    PathNotFound,
    PathSyntaxError,
    counted,
    echo,
    kind_of,
    lookup,
    parse_path,
    show_path,
)
from agent_payload.outline._shape import (
    FIND_IN_PAYLOAD,
    FIND_LIMIT,
    FULL,
    LEVELS,
    MIN_PAYLOAD_TOKENS,
    READ_PAYLOAD,
    Count,
    _fit,
)
from agent_payload.usage import estimate_tokens


class _ReadError(Exception):
    """A read that cannot be answered; the message goes to the model as the tool result."""


# --- the tools -------------------------------------------------------------------------------


ToolText = tuple[str, str, dict[str, Any]]
MAX_NEEDLES = 20
"""The most texts (or numbers) one find_in_payload call looks for."""
MAX_KEYS = 50
"""The most keys one read_payload call shows of each element."""


def tool_specs(*, budget: int, limit: int = FIND_LIMIT) -> tuple[ToolText, ...]:
    """``(name, description, JSON Schema of the arguments)`` of the two read tools."""
    read_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": 'Where to read: lines[3], customer.address, "" for the root.',
            },
            "start": {
                "type": "integer",
                "minimum": 0,
                "description": "First position to read (arrays; objects: keys in order).",
            },
            "end": {
                "type": "integer",
                "minimum": 0,
                "description": "Position after the last one to read (exclusive).",
            },
            "keys": {
                "type": "array",
                "items": {"type": "string"},
                "description": 'Show only these keys of each element read (e.g. ["title", '
                '"start"] over events, start 10, end 70).',
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    find_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "text": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}, "maxItems": MAX_NEEDLES},
                ],
                "description": "Text to find in keys and string values (case-insensitive); "
                "a list finds each of several texts in one call.",
            },
            "number": {
                "anyOf": [
                    {"type": "number"},
                    {"type": "array", "items": {"type": "number"}, "maxItems": MAX_NEEDLES},
                ],
                "description": "A number to find (equal values); a list finds several.",
            },
            "path": {
                "type": "string",
                "description": "Search only inside this path (default: the whole payload).",
            },
        },
        "additionalProperties": False,
    }
    read_text = _prompts._render("tool_read_payload", budget=str(budget))
    find_text = _prompts._render("tool_find_in_payload", limit=str(limit))
    return (
        (READ_PAYLOAD, read_text.strip(), read_schema),
        (FIND_IN_PAYLOAD, find_text.strip(), find_schema),
    )


def last_read_note(max_reads: int) -> str:
    """Added to the answer of the last read a run allows."""
    return _prompts._render("read_last", max_reads=str(max_reads)).strip()


def not_applied_note() -> str:
    """The result of a change-request call sent in the same turn as a read."""
    return _prompts.load_template("read_not_applied").strip()


def _arguments(arguments: str | Mapping[str, Any], name: str, allowed: set[str]) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            raise _ReadError(
                f"Error: the arguments of {name} are not a JSON object ({exc}); send an object "
                f"such as {_example(name)}."
            ) from exc
    else:
        parsed = dict(arguments)
    if not isinstance(parsed, dict):
        raise _ReadError(
            f"Error: the arguments of {name} must be a JSON object such as {_example(name)}, "
            f"found {type(parsed).__name__}."
        )
    unknown = sorted(set(parsed) - allowed)
    if unknown:
        raise _ReadError(
            f"Error: {name} takes only {', '.join(sorted(allowed))}; unknown argument(s): "
            f"{', '.join(unknown)}."
        )
    return parsed


def _needles(value: Any, key: str) -> Any:
    """A find argument (``text`` or ``number``): one value or a list (None when absent)."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    text = key == "text"
    other, want = ("number", "a non-empty string") if text else ("text", "a number")
    if not items or len(items) > MAX_NEEDLES:
        raise _ReadError(
            f"Error: {key} takes {want} or a list of 1 to {MAX_NEEDLES} of them, found "
            f"{len(items)}."
        )
    for item in items:
        number = (
            isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item)
        )
        if not (isinstance(item, str) and item if text else number):
            raise _ReadError(
                f"Error: {key} must be {want} (or a list of them), found "
                f"{echo(json.dumps(item, ensure_ascii=False))}; to find a {other} use {other}."
            )
    return items if isinstance(value, list) else value


def _example(name: str) -> str:
    if name == READ_PAYLOAD:
        return (
            '{"path": "lines[3]"} or {"path": "lines", "start": 100, "end": 120, '
            '"keys": ["sku", "qty"]}'
        )
    return '{"text": "SKU-1031"}, {"text": ["SKU-1", "SKU-2"]} or {"number": 42, "path": "lines"}'


def _path_argument(parsed: Mapping[str, Any], name: str, required: bool) -> tuple[str | int, ...]:
    raw = parsed.get("path")
    if raw is None:
        if required:
            raise _ReadError(f"Error: {name} needs a path, such as {_example(name)}.")
        return ()
    if not isinstance(raw, str):
        raise _ReadError(
            f'Error: the path of {name} must be a string such as "lines[3]", found '
            f"{json.dumps(raw)}."
        )
    try:
        return parse_path(raw)
    except PathSyntaxError as exc:
        raise _ReadError(f"Error: {exc}") from exc


def _position(parsed: Mapping[str, Any], key: str) -> int | None:
    value = parsed.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        raise _ReadError(
            f"Error: {key} must be a position (an integer >= 0), found {json.dumps(value)}."
        )
    return value


def read(
    shown: Any,
    path: Sequence[str | int],
    budget: int,
    *,
    start: int | None = None,
    end: int | None = None,
    keys: Sequence[str] | None = None,
    count: Count | None = None,
) -> str:
    """The answer to ``read_payload``: the value at ``path`` in ``shown`` (elements ``start``
    to ``end``, end excluded, of an array, or keys of an object by position; with ``keys``,
    only those keys of each element read), complete when it fits ``budget`` tokens, else
    outlined; a text saying why when there is nothing to read. Never over ``budget``."""
    count = count or estimate_tokens
    try:
        text = _read(shown, tuple(path), budget, start, end, keys, count)
    except (_ReadError, PathNotFound) as exc:
        text = str(exc)
    return _cap(text, budget, count)


def _cap(text: str, budget: int, count: Count) -> str:
    """``text`` cut to ``budget`` tokens (a last resort: answers are built to fit)."""
    if count(text) <= budget:
        return text
    note = "\n… (cut: the answer was over the read budget; read a smaller part)"
    keep = len(text)
    while keep > 0:
        keep = int(keep * max(budget - count(note), 1) / max(count(text[:keep]), 1) * 0.9)
        cut = text[:keep] + note
        if count(cut) <= budget:
            return cut
    return note.strip()[: max(budget, 1)]


def _pick(value: Any, keys: Sequence[str]) -> Any:
    """An element shown with only ``keys`` (those it has); anything but an object as it is."""
    if isinstance(value, dict):
        return {k: value[k] for k in keys if k in value}
    return value


def _read(
    shown: Any,
    path: tuple[str | int, ...],
    budget: int,
    start: int | None,
    end: int | None,
    keys: Sequence[str] | None,
    count: Count,
) -> str:
    node = lookup(shown, path)
    where = show_path(path)
    window: tuple[int, int] | None = None
    if start is not None or end is not None:
        if not isinstance(node, dict | list):
            raise _ReadError(
                f"Error: start and end read part of an array or object, but {where} is "
                f"{kind_of(node)}; read it without them."
            )
        n = len(node)
        lo = 0 if start is None else start
        hi = n if end is None else min(end, n)
        if lo >= n:
            last = f"positions 0 to {n - 1}" if n else "it is empty"
            raise _ReadError(
                f"Error: start {lo} is past the end of {where} ({kind_of(node)}: {last})."
            )
        if hi <= lo:
            raise _ReadError(f"Error: end {end} must be greater than start {lo} (end is excluded).")
        window = (lo, hi)
    what = kind_of(node)
    if window is not None:
        unit = "keys" if isinstance(node, dict) else "elements"
        what += f", {unit} {window[0]} to {window[1] - 1}"
    if keys:
        if not isinstance(node, dict | list):
            raise _ReadError(
                f"Error: keys shows some keys of each element of an array or object, but "
                f"{where} is {kind_of(node)}; read it without keys."
            )
        shown_keys = ", ".join(echo(json.dumps(k, ensure_ascii=False), 40) for k in keys)
        if isinstance(node, dict) and window is None and any(k in node for k in keys):
            node = _pick(node, keys)  # one element (a record): its own keys
            what += f", only the keys {shown_keys}"
        else:
            lo, hi = window if window is not None else (0, len(node))
            if isinstance(node, list):
                node = [*node[:lo], *(_pick(v, keys) for v in node[lo:hi]), *node[hi:]]
            else:
                node = {
                    k: (_pick(v, keys) if lo <= n < hi else v)
                    for n, (k, v) in enumerate(node.items())
                }
            what += f", only the keys {shown_keys} of each"
    outlined = " " + _prompts.load_template("read_outlined").strip()
    # The header is counted with the note, so the whole answer fits whatever the body is.
    body_budget = max(budget - count(f"{where} ({what}){outlined}:\n"), MIN_PAYLOAD_TOKENS // 2)
    text, complete = _fit(node, body_budget, count, (FULL, *LEVELS), window)
    if not complete and isinstance(node, dict | list) and node:
        outlined += _fits_hint(node, window, body_budget, count, bool(keys))
    return f"{where} ({what}){'' if complete else outlined}:\n{text}"


def _fits_hint(
    node: Any, window: tuple[int, int] | None, budget: int, count: Count, keyed: bool
) -> str:
    """How many elements of this size one read shows whole (from a sample of 20)."""
    lo, hi = window if window is not None else (0, len(node))
    values = node[lo:hi] if isinstance(node, list) else list(node.values())[lo:hi]
    sample = values[:: max(len(values) // 20, 1)][:20]
    try:
        per = max(count(json.dumps(sample, ensure_ascii=False)) / max(len(sample), 1), 1.0)
    except (TypeError, ValueError):  # not JSON data: the outline says what it is
        return ""
    fit = int(budget / (per * 1.1))
    if fit >= hi - lo:
        return ""
    if fit < 1:
        return "; one element alone is larger than a read: read inside it, or with keys"
    more = "" if keyed else " (more with keys)"
    return f"; about {fit} elements of this size fit in one read{more}"


def value_text(value: Any, budget: int, *, count: Count | None = None) -> str:
    """``value`` written for the model within ``budget`` tokens: complete when it fits, else
    its outline after a line saying so (outline mode's corrections show a subtree this way)."""
    count = count or estimate_tokens
    note = _prompts.load_template("read_outlined").strip()
    body_budget = max(budget - count(note + "\n"), MIN_PAYLOAD_TOKENS // 2)
    text, complete = _fit(value, body_budget, count, (FULL, *LEVELS))
    return text if complete else f"{note}\n{text}"


def current_renderer(budget: int) -> Callable[[Any], str]:
    """How an outline mode correction writes a current value: ``value_text`` in half ``budget``."""
    return functools.partial(value_text, budget=max(budget // 2, MIN_PAYLOAD_TOKENS))


def find(
    shown: Any,
    budget: int,
    *,
    text: str | Sequence[str] | None = None,
    number: float | Sequence[float] | None = None,
    path: Sequence[str | int] = (),
    limit: int = FIND_LIMIT,
    count: Count | None = None,
) -> str:
    """The answer to ``find_in_payload``: the paths under ``path`` where ``text`` occurs in a
    key or a string value (case-insensitive), or where a number equals ``number``; at most
    ``limit`` of them and never more than ``budget`` tokens, with how many more there are.
    A list of texts (or numbers) gives one such answer for each, sharing the budget."""
    count = count or estimate_tokens
    needles: list[tuple[str | None, float | None]] = (
        [(t, None) for t in ([text] if isinstance(text, str) else text)]
        if text is not None
        else [(None, n) for n in (number if isinstance(number, Sequence) else [number])]
    )
    share = max(budget // len(needles), 1)
    parts = [_find_one(shown, share, t, n, path, limit, count) for t, n in needles]
    return _cap("\n\n".join(parts), budget, count)


def _find_one(
    shown: Any,
    budget: int,
    text: str | None,
    number: float | None,
    path: Sequence[str | int],
    limit: int,
    count: Count,
) -> str:
    try:
        root = lookup(shown, path)
    except PathNotFound as exc:
        return str(exc)
    needle = text.casefold() if text is not None else None
    lines: list[str] = []
    total = 0

    def hit(where: tuple[str | int, ...], line: str) -> None:
        nonlocal total
        total += 1
        if len(lines) < limit:
            lines.append(f"{show_path(where)}{line}")

    def scalar(where: tuple[str | int, ...], value: Any) -> None:
        if needle is not None:
            if isinstance(value, str) and needle in value.casefold():
                hit(where, f": {_snippet(value, needle)}")
        elif isinstance(value, int | float) and not isinstance(value, bool) and value == number:
            hit(where, f": {json.dumps(value)}")

    # An explicit stack (any depth); a path is built only for a container or a match, and the
    # test of a scalar is written out in the loop (no call per value: this is the hot part).
    containers = (dict, list)
    stack: list[tuple[tuple[str | int, ...], Any]] = [(tuple(path), root)]
    while stack:
        where, node = stack.pop()
        if not isinstance(node, containers):
            scalar(where, node)
            continue
        later: list[tuple[tuple[str | int, ...], Any]] = []
        keyed = isinstance(node, dict)
        pairs: Iterable[tuple[Any, Any]] = (
            node.items() if isinstance(node, dict) else enumerate(node)
        )
        for key, item in pairs:
            if keyed and needle is not None and needle in key.casefold():
                hit((*where, key), f" (the key {json.dumps(key, ensure_ascii=False)})")
            if isinstance(item, containers):
                later.append(((*where, key), item))
            elif (
                (isinstance(item, str) and needle in item.casefold())
                if needle is not None
                else isinstance(item, int | float) and not isinstance(item, bool) and item == number
            ):
                scalar((*where, key), item)
        stack.extend(reversed(later))
    return _found(lines, total, text, number, path, budget, count)


def _found(
    lines: list[str],
    total: int,
    text: str | None,
    number: float | None,
    path: Sequence[str | int],
    budget: int,
    count: Count,
) -> str:
    """``find``'s answer: as many of the ``total`` matches' ``lines`` as fit ``budget``."""
    what = echo(json.dumps(text, ensure_ascii=False) if text is not None else json.dumps(number))
    inside = "the payload" if not path else show_path(path)
    if total == 0:
        searched = "keys and string values" if text is not None else "numbers"
        return f"No match for {what} in {inside} ({searched} searched)."
    while True:
        head = f"{counted(total, 'match')} for {what} in {inside}:"
        more = total - len(lines)
        body = "\n".join([head, *lines]) + (
            f"\n… and {more} more; search inside a path, or for a longer text, to narrow it down."
            if more
            else ""
        )
        if count(body) <= budget or not lines:
            return body
        lines.pop()


def _snippet(value: str, needle: str, width: int = 80) -> str:
    if len(value) <= width:
        return json.dumps(value, ensure_ascii=False)
    at = max(value.casefold().find(needle) - width // 4, 0)
    piece = value[at : at + width]
    before = "…" if at else ""
    after = "…" if at + width < len(value) else ""
    return f"{before}{json.dumps(piece, ensure_ascii=False)}{after} ({len(value)} characters)"


def answer(
    name: str,
    arguments: str | Mapping[str, Any],
    shown: Any,
    budget: int,
    *,
    count: Count | None = None,
) -> str:
    """The tool result for one call of a read tool (``read_payload`` or ``find_in_payload``)
    with ``arguments`` (the call's JSON text or a mapping): a bad call gets an error text that
    says what was wrong and how to call it, never an exception. Never over ``budget`` tokens,
    and the model's own path or text is repeated only up to ``ECHO_LIMIT`` characters."""
    try:
        if name == READ_PAYLOAD:
            parsed = _arguments(arguments, name, {"path", "start", "end", "keys"})
            path = _path_argument(parsed, name, required=True)
            start, end = _position(parsed, "start"), _position(parsed, "end")
            keys = parsed.get("keys")
            if keys is not None and not (
                isinstance(keys, list)
                and 0 < len(keys) <= MAX_KEYS
                and all(isinstance(k, str) for k in keys)
            ):
                raise _ReadError(
                    f"Error: keys must be a list of 1 to {MAX_KEYS} key names, such as "
                    '["title", "start"].'
                )
            return read(shown, path, budget, start=start, end=end, keys=keys, count=count)
        if name == FIND_IN_PAYLOAD:
            parsed = _arguments(arguments, name, {"text", "number", "path"})
            path = _path_argument(parsed, name, required=False)
            text, number = parsed.get("text"), parsed.get("number")
            if (text is None) == (number is None):
                raise _ReadError(
                    f"Error: {name} needs either text or number (not both), such as "
                    f"{_example(name)}."
                )
            text, number = _needles(text, "text"), _needles(number, "number")
            return find(shown, budget, text=text, number=number, path=path, count=count)
        raise _ReadError(
            f"Error: there is no tool {name!r}; the read tools are {READ_PAYLOAD} and "
            f"{FIND_IN_PAYLOAD}."
        )
    except _ReadError as exc:
        return _cap(str(exc), budget, count or estimate_tokens)
