"""One verdict for one reply: ``Judge`` is the single pipeline every surface asks (the agent,
the tool handler, sessions, the MCP server, the store, batches); docs/format.md, "One verdict".

The steps, in order: ``truncated``, ``refusal``, ``parse``, ``merge`` (a late reply rebased
first, MERGE.md section 9), ``validation`` (the payload type), ``validator`` (the user's),
``confirm``, ``accepted``. Every text is rendered from the payload as the read scope projects
it. ``_judge`` holds the steps, ``_verdict`` the ``Verdict``, ``_recorder`` the guards asked in
turn, ``_problems`` what the model is shown about a problem.
"""

from agent_payload._intake import check_payload_fits
from agent_payload.judge._judge import Judge, judge
from agent_payload.judge._problems import summary
from agent_payload.judge._verdict import Reply, Stage, Status, Verdict

__all__ = [
    "Judge",
    "Reply",
    "Stage",
    "Status",
    "Verdict",
    "check_payload_fits",
    "judge",
    "summary",
]
