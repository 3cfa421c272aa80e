"""One verdict for one reply: the single pipeline that judges a model's change request.

A change request reaches the payload through three doors: ``PayloadAgent`` (text or tool mode),
``ChangeRequestToolHandler`` (frameworks that own the loop) and ``PayloadSession`` (through its
agent). All of them ask :class:`Judge`; nothing else parses, merges, validates, reviews or
decides on a confirmation::

    judge = Judge(payload, marker="DELETE", payload_type=Invoice, guards=[DataLossGuard()],
                  permissions=Permissions(deny=["id"]), read_scope=ReadScope(exclude=["secret"]))
    verdict = judge('{"updateElements": {"total": 5}}')      # text, a mapping, or a request
    if verdict.status == "accepted":
        verdict.payload, verdict.report, verdict.repairs
    else:                                                    # "problems" or "confirm"
        text_for_the_model = verdict.feedback(output_mode="text")

The steps, in order (each one lives here, once):

1. ``truncated`` (the provider says the reply was cut off): never parsed nor applied;
2. ``refusal`` (the provider's refusal field, or the parser's ``RefusalError``);
3. ``parse`` (``parse.parse_change_request_with_repairs``): syntax, prose, unknown fields;
4. ``merge``: first, only for a reply written against an earlier payload (``base=``, with
   ``applied=``, the requests applied to it since: MERGE.md section 9), the rebase
   (``merge.rebase_change_request``): its positions mapped to the current payload, or a
   ``concurrent_change`` conflict for each entry colliding with what was applied since (nothing
   applied); the rebased request is what every later step judges and what the verdict carries.
   Then ``merge.apply_change_request`` with the active marker alone and every guard, whose
   whole-merge ``review`` the merge runs itself, and ``refuse_stale_markers`` (a DELETE marker
   written out of habit is a ``stale_marker`` conflict): any conflict, guard refusals included;
5. ``validation`` against the payload type (a pydantic payload is validated by the merge); a
   change that validation would silently drop (a key the type ignores) is a problem too;
6. ``validator``: the user's validators (``(payload) -> None``; raise ``RetryWithFeedback``, or
   ``ValueError`` / ``AssertionError`` as in pydantic's validators; an ``async def`` validator
   is awaited by the async surfaces, which drive ``Judge.steps``, and is a
   ``ConfigurationError`` for a sync call);
7. ``confirm``: guard findings of severity ``confirm`` ask the model to confirm, showing before
   and after; given ``confirming=`` the payload shown for confirmation last time, the same result
   is accepted as confirmed;
8. ``accepted``.

Nothing the model may not read is ever in a verdict's texts: the current values shown with
problems come from the payload projected through the read scope, and a merge or guard message
about a path outside the scope is replaced by one that names only the path the model wrote.
The read scope and the permissions are guards too (added to ``guards`` if not already there).

A ``Verdict`` says what happened; each surface maps it (README, "What each surface does with a
reply"): the agent raises the ``ModelReplyError`` of class ``verdict.error`` and sends
``verdict.feedback()`` on the next attempt; the tool handler returns ``verdict.feedback()`` as an
``is_error`` tool result (``confirm`` included: the same call again confirms it).

Where each part lives: ``_judge`` (``Judge``, the steps), ``_verdict`` (``Verdict`` and the
surface table), ``_recorder`` (the guards asked in turn), ``_problems`` (what the model is
shown about a problem).
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
