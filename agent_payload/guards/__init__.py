"""Guards: what an agent may change, what it may see, what looks like lost data, and which
payload version a change was made against.

* ``Permissions(allow=..., deny=...)``: write permissions by path rule (grammar in
  ``agent_payload.guards.permissions``); a ``Guard`` for ``apply_change_request(guards=[...])``.
* ``ReadScope(include=..., exclude=...)``: which object keys the model sees
  (``.project(payload)``); what it does not see is protected from writes (it is a ``Guard``).
* ``DataLossGuard(policy=...)``: flags truncated text, placeholders, shrunk arrays, lost keys,
  wiped values and large removals; per change (``Guard``) and over a whole merge
  (``.review(before, after, changes)``).
* ``payload_version``, ``check_version``: optimistic concurrency (``apply_if_version`` and
  ``VersionedStore``, which merge, are in ``agent_payload.store``).
* ``combine_guards(*guards)``: one guard asking each in turn.
"""

import importlib
import warnings
from typing import Any

from agent_payload.guards._common import format_path
from agent_payload.guards.chain import GuardChain, combine_guards
from agent_payload.guards.dataloss import DATA_LOSS_RULES, DataLossFinding, DataLossGuard
from agent_payload.guards.permissions import (
    PathRule,
    PermissionFinding,
    Permissions,
    parse_rule,
)
from agent_payload.guards.readscope import ReadScope
from agent_payload.guards.versions import check_version, payload_version

__all__ = [
    "DATA_LOSS_RULES",
    "DataLossFinding",
    "DataLossGuard",
    "GuardChain",
    "PathRule",
    "PermissionFinding",
    "Permissions",
    "ReadScope",
    "check_version",
    "combine_guards",
    "format_path",
    "parse_rule",
    "payload_version",
]


_MOVED = {"VersionedStore", "apply_if_version"}


def __getattr__(name: str) -> Any:
    """``agent_payload.guards.VersionedStore`` and ``.apply_if_version``: deprecated aliases of
    ``agent_payload.store``'s, kept for one release. Looked up by name so that the guards never
    import the merge (they sit below it)."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"agent_payload.guards.{name} is deprecated: import it from agent_payload (or "
        f"agent_payload.store) instead.",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module("agent_payload.store"), name)
