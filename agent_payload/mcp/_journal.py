"""Versions of the served file (12 hex digits of its SHA-256) and the journal its servers share
(docs/mcp.md, "Journal"): a line ``{"before": V, "after": W, "request", "markers"}`` per write
(the request as applied to ``V``), appended under the lock after the file was written (a missing
line reads as an outside edit)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agent_payload._filelock import sidecar
from agent_payload._files import atomic_write_text
from agent_payload._jsondata import json_equal
from agent_payload._paths import format_payload_path
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import AgentPayloadError
from agent_payload.merge import Applied, apply_change_request, rebase_change_request

__all__ = [
    "MAX_BYTES",
    "VERSIONS_KEPT",
    "Entry",
    "Journal",
    "Versions",
    "differences",
    "digest",
]

logger = logging.getLogger("agent_payload.mcp")

VERSIONS_KEPT = 64
"""How many versions shown to the model a server remembers (a request's base must be one)."""

SHOWN_BYTES = 8 * 1024 * 1024
"""The most bytes (compressed) of the versions shown that a server keeps in memory in all; the
newest is always kept. A base older than what is kept is sent back like an unknown one."""

MAX_BYTES = 512 * 1024
"""Past this size the journal keeps only its newest lines, about half of it."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One write: the versions before and after and the request that made it (None: unknown)."""

    before: str
    after: str
    request: dict[str, Any] | None
    markers: tuple[str, ...] = ()

    def line(self) -> str:
        data = {
            "before": self.before,
            "after": self.after,
            "request": self.request,
            "markers": list(self.markers),
        }
        return json.dumps(data, ensure_ascii=True, separators=(",", ":")) + "\n"

    @classmethod
    def read(cls, line: str) -> Entry | None:
        """The entry of one line; None for a line that is not one (a torn write)."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        before, after, request = data.get("before"), data.get("after"), data.get("request")
        markers = data.get("markers", [])
        if not (isinstance(before, str) and isinstance(after, str)):
            return None
        if request is not None and not isinstance(request, dict):
            return None
        if not isinstance(markers, list) or not all(isinstance(m, str) for m in markers):
            return None
        return cls(before, after, request, tuple(markers))


class Journal:
    """The journal of the file at ``path``. Every method runs under the file's lock."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = sidecar(path, ".journal")

    def entries(self) -> tuple[list[Entry], bool]:
        """The entries, oldest first, and whether older ones were dropped by a compaction."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return [], False
        lines = text.splitlines()
        compacted = bool(lines) and lines[0] == _COMPACTED.strip()
        found = (Entry.read(line) for line in lines if line.strip())
        return [e for e in found if e is not None], compacted

    def append(self, entry: Entry) -> None:
        """Add one write (compacting past ``MAX_BYTES``). Raises ``OSError`` on failure."""
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(entry.line())
        with contextlib.suppress(OSError):
            if self.path.stat().st_size > MAX_BYTES:
                self._compact(self.entries()[0])

    def _compact(self, entries: Sequence[Entry]) -> None:
        kept: list[str] = []
        size = 0
        for entry in reversed(entries):
            line = entry.line()
            size += len(line)
            if size > MAX_BYTES // 2 and kept:
                break
            kept.append(line)
        atomic_write_text(self.path, _COMPACTED + "".join(reversed(kept)))

    def since(self, base: str, current: str) -> list[Entry] | str:
        """The writes that turned ``base`` into ``current``, in order; else ``"outside"`` (an
        edit no request explains) or ``"older"`` (older than the journal)."""
        entries, compacted = self.entries()
        out: list[Entry] = []
        expect = current
        while expect != base:  # the latest run of entries leading from base to current
            if len(out) == len(entries):
                return "older" if compacted else "outside"
            entry = entries[-1 - len(out)]
            if entry.after != expect or entry.request is None:
                return "outside"
            out.append(entry)
            expect = entry.before
        return out[::-1]


_COMPACTED = '{"compacted":true}\n'


class Tap:
    """File bytes passed on as written, hashed and compressed on the way (no whole copy)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self._hash = hashlib.sha256()
        self._zip = zlib.compressobj(1)
        self._packed: list[bytes] = []

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._hash.update(chunk)
            self._packed.append(self._zip.compress(chunk))
            yield chunk

    def version(self) -> str:
        return self._hash.hexdigest()[:12]

    def packed(self) -> bytes:
        self._packed.append(self._zip.flush())
        return b"".join(self._packed)


def digest(data: bytes) -> str:
    """The version of a file's bytes: the first 12 hex digits of their SHA-256."""
    return hashlib.sha256(data).hexdigest()[:12]


_ABSENT: Any = object()


def differences(old: Any, new: Any, limit: int = 5) -> tuple[list[str], int]:
    """Where ``new`` differs from ``old``: the first ``limit`` places, and how many in all."""
    found: list[str] = []
    count = 0
    stack: list[tuple[tuple[str | int, ...], Any, Any]] = [((), old, new)]
    while stack:
        path, a, b = stack.pop()
        if a is not _ABSENT and b is not _ABSENT and json_equal(a, b):
            continue
        where = format_payload_path(path)
        if type(a) is dict and type(b) is dict:
            keys = list(dict.fromkeys([*a, *b]))
            stack.extend(((*path, k), a.get(k, _ABSENT), b.get(k, _ABSENT)) for k in keys[::-1])
            continue
        if type(a) is list and type(b) is list and len(a) == len(b):
            stack.extend(((*path, i), a[i], b[i]) for i in reversed(range(len(a))))
            continue
        count += 1
        if len(found) >= limit:
            continue
        if a is _ABSENT or b is _ABSENT:
            found.append(f"{where} {'added' if a is _ABSENT else 'removed'}")
        elif type(a) is list and type(b) is list:
            found.append(f"{where} ({len(a)} elements, now {len(b)})")
        else:
            found.append(f"{where} changed")
    return found, count


class Versions:
    """The versions one server showed its model, and the file's journal."""

    def __init__(self, path: str | os.PathLike[str], marker: str) -> None:
        self.journal = Journal(path)
        self.marker = marker
        self._shown: OrderedDict[str, bytes] = OrderedDict()
        """Each version shown: its bytes compressed (zlib), oldest first."""
        self._shown_size = 0
        self._cancelled: set[tuple[str, str]] = set()

    def remember(self, data: bytes | Tap) -> tuple[str, bytes]:
        """Keep ``data`` as a version shown (within the limits); its version and packed bytes."""
        version, packed = self.pack(data)
        self.keep(version, packed)
        return version, packed

    def pack(self, data: bytes | Tap) -> tuple[str, bytes]:
        """``data``'s version and its bytes compressed (kept ones reused), not yet kept."""
        version = data.version() if isinstance(data, Tap) else digest(data)
        packed = self._shown.get(version)
        if packed is None:
            packed = data.packed() if isinstance(data, Tap) else zlib.compress(data, 1)
        return version, packed

    def keep(self, version: str, packed: bytes) -> None:
        """Keep ``packed`` as the bytes of a version shown, the newest."""
        if version in self._shown:
            self._shown.move_to_end(version)
            return
        self._shown[version] = packed
        self._shown_size += len(packed)
        while len(self._shown) > VERSIONS_KEPT or (
            self._shown_size > SHOWN_BYTES and len(self._shown) > 1
        ):
            self._shown_size -= len(self._shown.popitem(last=False)[1])

    def shown(self, version: str) -> bytes | None:
        """The bytes of a version this server showed (None: never, or too long ago)."""
        packed = self._shown.get(version)
        return None if packed is None else zlib.decompress(packed)

    def rebase(
        self, base_payload: Any, entries: Sequence[Entry], request: Any
    ) -> AgentPayloadChangeRequest:
        """``request`` rebased over ``entries`` (``ConcurrentChangeError`` on a collision)."""
        applied = [Applied(e.request, frozenset(e.markers or (self.marker,))) for e in entries]
        return rebase_change_request(base_payload, applied, request, markers={self.marker})

    def replayed(self, old: Any, new: Any, request: Any) -> dict[str, Any] | None:
        """``request``'s wire form when applying it to ``old`` gives exactly ``new``, else None."""
        wire = request.to_wire() if hasattr(request, "to_wire") else request
        try:
            replayed = apply_change_request(old, wire, markers={self.marker}, share=True)
            if wire is None or not json_equal(replayed.payload, new):
                return None
        except AgentPayloadError:
            return None
        return wire if isinstance(wire, dict) else None

    def append(self, before: str, after: str, wire: dict[str, Any] | None) -> None:
        """Journal one write (``wire``: the request that replays it, or None)."""
        try:
            self.journal.append(Entry(before, after, wire, (self.marker,)))
        except OSError as exc:  # the file is written: others will read it as an outside edit
            logger.warning("cannot write the journal %s: %s", self.journal.path, exc)

    def cancel(self, change: tuple[str, str], undo: tuple[str, str]) -> None:
        """Note a change of this server and the undo that reverted it: together, nothing."""
        self._cancelled |= {change, undo}

    def without_cancelled(self, entries: list[Entry], old: Any, new: Any) -> list[Entry]:
        """``entries`` less this server's undone changes and their undos, when the rest
        still leads from ``old`` to ``new``; else all."""
        rest = [e for e in entries if (e.before, e.after) not in self._cancelled]
        if len(rest) == len(entries):
            return entries
        state = old
        try:
            for entry in rest:
                markers = set(entry.markers or (self.marker,))
                merged = apply_change_request(state, entry.request, markers=markers, strict=True)
                state = merged.payload
        except AgentPayloadError:
            return entries
        return rest if json_equal(state, new) else entries
