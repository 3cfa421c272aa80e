"""A payload kept at a version: apply a change request only to the version it was made for.

``apply_if_version(payload, change_request, expected_version)`` checks the version
(``guards.versions.check_version``: ``StalePayloadError``, nothing applied) and merges.
``VersionedStore`` keeps a payload in memory with its version and makes the check and the
write one atomic, all-or-nothing step. The versions themselves (``payload_version``) are the
guards' (``agent_payload.guards.versions``); this module adds the merge on top of them.
"""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar

from agent_payload.errors import StalePayloadError
from agent_payload.guards.versions import check_expected, check_version, payload_version
from agent_payload.merge import apply_change_request
from agent_payload.report import MergeResult

__all__ = ["VersionedStore", "apply_if_version"]

P = TypeVar("P")


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


class VersionedStore(Generic[P]):
    """A payload kept in memory with its version; check-and-write is atomic (thread-safe).

    >>> store = VersionedStore({"a": 1})
    >>> payload, version = store.get()
    >>> result = store.apply(request, expected_version=version)   # doctest: +SKIP

    ``get()`` returns the stored payload and its version (merges never mutate the payload, so
    the object returned is safe to read; do not mutate it). ``apply`` raises
    ``StalePayloadError`` when another writer got there first.
    """

    def __init__(self, payload: P) -> None:
        self._lock = threading.Lock()
        self._payload = payload
        self._version = payload_version(payload)

    @property
    def version(self) -> str:
        return self._version

    def get(self) -> tuple[P, str]:
        with self._lock:
            return self._payload, self._version

    def apply(
        self, change_request: Any, *, expected_version: str, **merge_kwargs: Any
    ) -> MergeResult[P]:
        """Merge ``change_request`` into the stored payload if it is still at
        ``expected_version``; store and return the result.

        The merge is strict unless ``strict=False`` is passed: an atomic store writes all of a
        request or none of it, so any conflict raises ``MergeConflictError`` (with the report)
        and, like any other error, leaves the store unchanged.

        All or nothing: the new payload and its version are computed completely (a value the
        version cannot hash raises ``InvalidPayloadError`` here) before both are swapped in, so
        any exception leaves the stored payload and its version exactly as they were."""
        check_expected(expected_version, "VersionedStore.apply(expected_version=...)")
        merge_kwargs.setdefault("strict", True)
        with self._lock:
            self._check(expected_version)
            result: MergeResult[P] = apply_change_request(
                self._payload, change_request, **merge_kwargs
            )
            version = payload_version(result.payload)
            self._payload, self._version = result.payload, version
            return result

    def replace(self, payload: P, *, expected_version: str) -> str:
        """Store ``payload`` (for example an agent's result) if the store is still at
        ``expected_version``; return the new version."""
        check_expected(expected_version, "VersionedStore.replace(expected_version=...)")
        version = payload_version(payload)  # before the lock: a failure changes nothing
        with self._lock:
            self._check(expected_version)
            self._payload, self._version = payload, version
            return version

    def _check(self, expected: str) -> None:
        """Raise ``StalePayloadError`` unless the store is at ``expected`` (lock held)."""
        if expected != self._version:
            raise StalePayloadError(
                f"the stored payload changed since version {expected[:12]}... was read (it is "
                f"now {self._version[:12]}...); nothing was applied. Read it again and redo "
                "the change on the current version.",
                expected=expected,
                actual=self._version,
            )
