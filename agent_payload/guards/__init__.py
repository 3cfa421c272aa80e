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
