"""Guards (docs/guards.md): what an agent may change (``Permissions``), what it may see
(``ReadScope``), what looks like lost data (``DataLossGuard``), which payload version a change
was made against (``payload_version``, ``check_version``); ``combine_guards`` asks several.
"""

from agent_payload.guards._common import format_path
from agent_payload.guards.chain import GuardChain, combine_guards
from agent_payload.guards.dataloss import DATA_LOSS_RULES, DataLossFinding, DataLossGuard
from agent_payload.guards.permissions import PathRule, PermissionFinding, Permissions, parse_rule
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
