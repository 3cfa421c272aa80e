"""Payloads kept at a version: ``VersionedStore`` and ``apply_if_version`` in memory
(``_memory``), ``PayloadStore`` by key in SQLite or PostgreSQL with each key's history
(``_payload_store``; ``_backends`` the databases, ``_records`` the rows as values).
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
