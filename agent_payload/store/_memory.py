"""A payload kept in memory at a version: ``apply_if_version`` checks the version and merges;
``VersionedStore`` makes the check and the write one atomic step and rebases a request made
against an older version over what was applied since (MERGE.md section 9). The versions are
the guards' (``guards.versions``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from agent_payload.changes import DEFAULT_MARKERS
from agent_payload.errors import ConcurrentChangeError, StalePayloadError
from agent_payload.guards.versions import check_expected, check_version, payload_version
from agent_payload.merge import Applied, apply_change_request, dump_payload, rebase_change_request
from agent_payload.report import MergeResult

__all__ = ["DEFAULT_KEEP", "VersionedStore", "apply_if_version"]

P = TypeVar("P")

DEFAULT_KEEP = 64
"""How many earlier versions a ``VersionedStore`` keeps to rebase late requests over."""


def apply_if_version(
    payload: P,
    change_request: Any,
    expected_version: str,
    **merge_kwargs: Any,
) -> MergeResult[P]:
    """Check that ``payload`` is at ``expected_version`` (else ``StalePayloadError``, nothing
    applied), then ``merge.apply_change_request(payload, change_request, **merge_kwargs)``."""
    check_expected(expected_version, "apply_if_version(expected_version=...)")
    check_version(payload, expected_version)
    result: MergeResult[P] = apply_change_request(payload, change_request, **merge_kwargs)
    return result


def rebased(
    base: Any,
    since: list[Applied],
    request: Any,
    markers: frozenset[str],
    now: tuple[Any, Any],
    limits: Any = None,
) -> Any:
    """``request``, written against ``base``, moved over the requests applied ``since``; a
    collision is a ``ConcurrentChangeError`` carrying the payload and version it is ``now``."""
    try:
        return rebase_change_request(base, since, request, markers=markers, limits=limits)
    except ConcurrentChangeError as exc:
        exc.current, exc.version = now
        raise


class VersionedStore(Generic[P]):
    """A payload kept in memory with its version; check-and-write is atomic (thread-safe).

    ``get()`` returns the stored payload (read it, do not mutate it) and its version. The store
    keeps the last ``keep`` versions with the requests that led from each to the next
    (``history()``), to rebase late requests over; an older version, or one before a
    ``replace``, is unknown: ``StalePayloadError``.
    """

    def __init__(self, payload: P, *, keep: int = DEFAULT_KEEP) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"VersionedStore(keep=...): expected an int >= 1, found {keep!r}")
        self._lock = threading.Lock()
        self._payload = payload
        self._version = payload_version(payload)
        self._keep = keep
        # Earlier versions, oldest first: (version, payload, the request applied to it).
        self._past: list[tuple[str, P, Applied]] = []

    @property
    def version(self) -> str:
        return self._version

    def get(self) -> tuple[P, str]:
        with self._lock:
            return self._payload, self._version

    def history(self) -> list[tuple[str, Applied]]:
        """The versions still known before the current one, oldest first, each with the
        request applied to it as applied (after any rebase) and its DELETE markers."""
        with self._lock:
            return [(version, applied) for version, _, applied in self._past]

    def apply(
        self, change_request: Any, *, expected_version: str, **merge_kwargs: Any
    ) -> MergeResult[P]:
        """Merge ``change_request``, written against ``expected_version``, into the stored
        payload (strictly unless ``strict=False``); store and return the result.

        A request made against an older version the store knows is first rebased over the
        requests applied since: ``ConcurrentChangeError`` when it collides with them.
        ``StalePayloadError`` for a version the store does not know, ``MergeConflictError`` for
        a conflict. Any error leaves the payload, its version and its history as they were."""
        check_expected(expected_version, "VersionedStore.apply(expected_version=...)")
        merge_kwargs.setdefault("strict", True)
        markers = frozenset(merge_kwargs.get("markers", DEFAULT_MARKERS))
        with self._lock:
            request = self._rebased(change_request, expected_version, markers, merge_kwargs)
            result: MergeResult[P] = apply_change_request(self._payload, request, **merge_kwargs)
            version = payload_version(result.payload)
            kept = copy.deepcopy(request) if isinstance(request, Mapping) else request
            self._past.append((self._version, self._payload, Applied(kept, markers)))
            del self._past[: -self._keep]
            self._payload, self._version = result.payload, version
            return result

    def replace(self, payload: P, *, expected_version: str) -> str:
        """Store ``payload`` (an agent's result, say) if the store is still at
        ``expected_version``; return the new version. The versions before it are forgotten."""
        check_expected(expected_version, "VersionedStore.replace(expected_version=...)")
        version = payload_version(payload)  # before the lock: a failure changes nothing
        with self._lock:
            if expected_version != self._version:
                raise self._stale(expected_version)
            self._payload, self._version = payload, version
            self._past.clear()
            return version

    def _rebased(
        self,
        change_request: Any,
        expected: str,
        markers: frozenset[str],
        merge_kwargs: dict[str, Any],
    ) -> Any:
        """``change_request`` as it applies to the current payload (lock held)."""
        if expected == self._version:
            return change_request
        # The latest occurrence of the version: a payload that came back to an earlier content
        # has the fewest requests since then.
        at = next(
            (i for i in range(len(self._past) - 1, -1, -1) if self._past[i][0] == expected),
            None,
        )
        if at is None:
            raise self._stale(expected)
        since = [applied for _, _, applied in self._past[at:]]
        base = dump_payload(self._past[at][1])
        limits = merge_kwargs.get("limits")
        return rebased(base, since, change_request, markers, (self._payload, self._version), limits)

    def _stale(self, expected: str) -> StalePayloadError:
        return StalePayloadError(
            f"the stored payload changed since version {expected[:12]}... was read (it is "
            f"now {self._version[:12]}...), and the store no longer knows that version "
            "(it keeps the last versions since its creation or its last replace()); "
            "nothing was applied. Read it again and redo the change on the current version.",
            expected=expected,
            actual=self._version,
        )
