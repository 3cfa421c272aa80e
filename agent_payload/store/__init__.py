"""Payloads kept at a version, in memory or in a database.

* ``VersionedStore`` and ``apply_if_version`` (``_memory``): one payload in memory; a request
  made against an older version is rebased over what was applied since (MERGE.md section 9).
* ``PayloadStore(url)`` (``_payload_store``): many payloads by key in SQLite or PostgreSQL,
  shared by threads, processes and machines, each with its history (who changed what, why);
  ``edit`` runs an agent on a key and sends a collision back to its model in the same run.
  ``_backends`` holds what differs between the databases, ``_records`` the rows as values.
"""

from agent_payload.store._memory import DEFAULT_KEEP, VersionedStore, apply_if_version
from agent_payload.store._payload_store import SNAPSHOT_EVERY, PayloadStore, replay
from agent_payload.store._records import HistoryEntry, StoredPayload

__all__ = [
    "DEFAULT_KEEP",
    "SNAPSHOT_EVERY",
    "HistoryEntry",
    "PayloadStore",
    "StoredPayload",
    "VersionedStore",
    "apply_if_version",
    "replay",
]
