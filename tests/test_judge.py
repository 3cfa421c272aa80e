"""One verdict for one reply, on every surface (issue 10).

* the parity table: every (payload, reply, configuration) case gives the same verdict through
  the agent (text and tool mode), the tool handler, the session and the judge itself;
* one regression test per reported escape, through every surface (and the plain merge where
  it takes a guard);
* the README table "What each surface does with a reply" is the one ``judge.SURFACES`` holds;
* each step of judging a reply is implemented once (grep).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from agent_payload.errors import RetryWithFeedback
from agent_payload.guards import DataLossGuard, Permissions, ReadScope, combine_guards
from agent_payload.judge import Judge, judge
from agent_payload.judge._verdict import Status
from agent_payload.merge import apply_change_request
from agent_payload.prompts import render_payload
from tests._surfaces import SURFACES, run_surface

ROOT = Path(__file__).resolve().parent.parent


class Inv(BaseModel):
    total: int


class Invoice(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    total: int
    customer_name: str = "Ann"


INVOICE: dict[str, Any] = {
    "id": "inv-1",
    "total": 1,
    "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}, {"sku": "c", "qty": 3}],
    "customer": {"name": "Ann", "email": "ann@example.com"},
}
TEN: dict[str, Any] = {"items": [{"sku": f"s{i}", "qty": i} for i in range(10)]}
ALL_TEN_DELETED = {"updateElements": {"items": ["DELETE"] * 10}}
ALL_TEN_REPLACED_BY_JUNK = {
    "updateElements": {"items": ["DELETE"] * 10},
    "newElements": {"items": [{"sku": "junk", "qty": 0}] * 10},
}
SHIFT_INTO_ITEM_1 = {"updateElements": {"items": ["DELETE", {"sku": "pwned"}]}}


def _at_most_100(payload: Any) -> None:
    total = payload["total"] if isinstance(payload, dict) else payload.total
    if total > 100:
        raise RetryWithFeedback("total must be at most 100", path="total")


# (name, payload, reply, configuration, expected: "accepted" or the problem codes)
CASES: list[tuple[str, Any, Any, dict[str, Any], Any]] = [
    ("update", INVOICE, {"updateElements": {"total": 2}}, {}, "accepted"),
    ("new key", INVOICE, {"newElements": {"note": "x"}}, {}, "accepted"),
    ("remove key", INVOICE, {"removeElements": {"customer": {"email": "DELETE"}}}, {}, "accepted"),
    ("positional", INVOICE, {"updateElements": {"items": [{}, {"qty": 5}]}}, {}, "accepted"),
    ("index map", INVOICE, {"updateElements": {"items": {"2": {"qty": 9}}}}, {}, "accepted"),
    ("append", INVOICE, {"newElements": {"items": [{"sku": "d", "qty": 1}]}}, {}, "accepted"),
    ("replace", INVOICE, {"replaceElements": {"customer": {"name": "Bob"}}}, {}, "accepted"),
    ("reasoning only", INVOICE, {"reasoning": "nothing to change"}, {}, "accepted"),
    ("list root", [1, 2, 3], {"updateElements": [{}, "DELETE"]}, {}, "accepted"),
    ("prose", INVOICE, "Sure! I have updated the total for you.", {}, None),
    ("refusal", INVOICE, "I'm sorry, but I can't help with that.", {}, None),
    ("unknown field", INVOICE, {"bogus": 1}, {}, None),
    ("index out of range", INVOICE, {"updateElements": {"items": {"7": {"qty": 1}}}}, {}, None),
    ("shape", INVOICE, {"updateElements": {"customer": [1]}}, {}, ("shape_mismatch",)),
    ("bad remove", INVOICE, {"removeElements": {"total": 5}}, {}, ("invalid_remove_value",)),
    (
        "marker past the end",
        INVOICE,
        {"updateElements": {"items": ["DELETE", "DELETE", "DELETE", "DELETE"]}},
        {},
        ("placeholder_out_of_range",),
    ),
    (
        "inactive marker",
        INVOICE,
        {"removeElements": {"customer": {"name": "__DELETE__"}}},
        {},
        ("invalid_remove_value",),
    ),
    (
        "type: misspelt field",
        {"total": 1},
        {"newElements": {"totl": 5}},
        {"payload_type": Inv},
        ("validation",),
    ),
    (
        "type: bad value",
        {"total": 1},
        {"updateElements": {"total": "many"}},
        {"payload_type": Inv},
        ("validation",),
    ),
    (
        "type: good",
        {"total": 1},
        {"updateElements": {"total": 7}},
        {"payload_type": Inv},
        "accepted",
    ),
    ("model: bad value", Invoice(total=1), {"updateElements": {"total": "x"}}, {}, ("validation",)),
    ("model: good", Invoice(total=1), {"updateElements": {"total": 3}}, {}, "accepted"),
    ("model: alias", Invoice(total=1), {"updateElements": {"customer_name": "Bo"}}, {}, "accepted"),
    (
        "deny id",
        INVOICE,
        {"updateElements": {"id": "x"}},
        {"permissions": Permissions(deny=["id"])},
        ("permission_denied",),
    ),
    (
        "deny items[1], shifted write",
        INVOICE,
        SHIFT_INTO_ITEM_1,
        {"permissions": Permissions(deny=["items[1]"])},
        ("permission_denied",),
    ),
    (
        "deny items[1], write to items[2] after a deletion",
        INVOICE,
        {"updateElements": {"items": ["DELETE", {}, {"qty": 7}]}},
        {"permissions": Permissions(deny=["items[1]"])},
        "accepted",
    ),
    (
        "allow list",
        INVOICE,
        {"updateElements": {"total": 3}},
        {"permissions": Permissions(allow=["items[*].qty"])},
        ("permission_denied",),
    ),
    (
        "scope items[1], shifted write",
        INVOICE,
        SHIFT_INTO_ITEM_1,
        {"read_scope": ReadScope(exclude=["items[1]"])},
        ("permission_denied",),
    ),
    (
        "scope: hidden key written",
        INVOICE,
        {"updateElements": {"customer": {"email": "x"}}},
        {"read_scope": ReadScope(exclude=["customer.email"])},
        ("permission_denied",),
    ),
    (
        "scope: visible key written",
        INVOICE,
        {"updateElements": {"customer": {"name": "B"}}},
        {"read_scope": ReadScope(exclude=["customer.email"])},
        "accepted",
    ),
    (
        "scope: container replaced",
        INVOICE,
        {"replaceElements": {"customer": {"name": "B"}}},
        {"read_scope": ReadScope(exclude=["customer.email"])},
        ("permission_denied",),
    ),
    ("loss: all deleted", TEN, ALL_TEN_DELETED, {"guards": [DataLossGuard(policy="reject")]}, None),
    (
        "loss: junk",
        TEN,
        ALL_TEN_REPLACED_BY_JUNK,
        {"guards": [DataLossGuard(policy="reject")]},
        None,
    ),
    (
        "loss: two deleted",
        TEN,
        {"updateElements": {"items": ["DELETE", "DELETE"]}},
        {"guards": [DataLossGuard(policy="reject")]},
        "accepted",
    ),
    (
        "loss: confirm",
        TEN,
        {"updateElements": {"items": ["DELETE"] * 8}},
        {"guards": [DataLossGuard(policy="confirm")]},
        ("data_loss",),
    ),
    (
        "loss: warn",
        TEN,
        {"updateElements": {"items": ["DELETE"] * 8}},
        {"guards": [DataLossGuard(policy="warn")]},
        "accepted",
    ),
    (
        "loss: wiped",
        INVOICE,
        {"updateElements": {"customer": {"name": ""}}},
        {"guards": [DataLossGuard(policy="reject")]},
        ("data_loss",),
    ),
    (
        "loss in a chain",
        TEN,
        ALL_TEN_DELETED,
        {"guards": [combine_guards(Permissions(deny=["id"]), DataLossGuard(policy="reject"))]},
        None,
    ),
    (
        "validator refuses",
        INVOICE,
        {"updateElements": {"total": 500}},
        {"validators": [_at_most_100]},
        ("custom",),
    ),
    (
        "validator accepts",
        INVOICE,
        {"updateElements": {"total": 50}},
        {"validators": [_at_most_100]},
        "accepted",
    ),
]


def _judge_outcome(payload: Any, reply: Any, config: dict[str, Any]) -> tuple[str, Any]:
    verdict = judge(reply, payload, **config)
    if verdict.status == "accepted":
        from agent_payload._jsondata import json_data

        return ("accepted", json_data(verdict.payload))
    return ("problems", verdict.codes)


def test_the_parity_table_is_large_and_mixed() -> None:
    assert len(CASES) >= 30
    assert len({name for name, *_ in CASES}) == len(CASES)
    accepted = [c for c in CASES if c[4] == "accepted"]
    assert len(accepted) >= 10 and len(CASES) - len(accepted) >= 10


@pytest.mark.parametrize(
    ("name", "payload", "reply", "config", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_parity(name: str, payload: Any, reply: Any, config: dict[str, Any], expected: Any) -> None:
    """The agent (text and tool mode), the tool handler and the session give the judge's
    verdict: the same payload, or the same problem codes."""
    want = _judge_outcome(payload, reply, config)
    if expected == "accepted":
        assert want[0] == "accepted", want
    elif expected is not None:
        assert want == ("problems", expected)
    else:
        assert want[0] == "problems" and want[1], want
    for surface in SURFACES:
        got = run_surface(surface, payload, reply, config).verdict
        assert got == want, f"{surface}: {got} != {want}"


# --- the escapes of the issue, each through every surface -----------------------------------


@pytest.mark.parametrize("surface", SURFACES)
def test_a_field_validation_would_drop_is_refused_everywhere(surface: str) -> None:
    outcome = run_surface(
        surface, {"total": 1}, {"newElements": {"totl": 5}}, {"payload_type": Inv}
    )
    assert not outcome.accepted and outcome.codes == ("validation",)
    assert any("totl" in text and "not a field of Inv" in text for text in outcome.texts)


@pytest.mark.parametrize("surface", SURFACES)
def test_emptying_a_list_one_delete_at_a_time_is_refused_everywhere(surface: str) -> None:
    outcome = run_surface(
        surface, TEN, ALL_TEN_DELETED, {"guards": [DataLossGuard(policy="reject")]}
    )
    assert not outcome.accepted and set(outcome.codes) == {"data_loss"}


@pytest.mark.parametrize("surface", SURFACES)
def test_delete_all_then_append_junk_is_refused_everywhere(surface: str) -> None:
    outcome = run_surface(
        surface, TEN, ALL_TEN_REPLACED_BY_JUNK, {"guards": [DataLossGuard(policy="reject")]}
    )
    assert not outcome.accepted and set(outcome.codes) == {"data_loss"}
    assert any("lost 10 of them" in text for text in outcome.texts)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    "config",
    [
        {"permissions": Permissions(deny=["items[1]"])},
        {"read_scope": ReadScope(exclude=["items[1]"])},
    ],
    ids=["permissions", "read_scope"],
)
def test_an_index_shift_does_not_slip_past_the_guards(surface: str, config: dict[str, Any]) -> None:
    outcome = run_surface(surface, INVOICE, SHIFT_INTO_ITEM_1, config)
    assert not outcome.accepted and outcome.codes == ("permission_denied",)


@pytest.mark.parametrize(
    "guard", [DataLossGuard(policy="reject"), combine_guards(DataLossGuard(policy="reject"))]
)
@pytest.mark.parametrize(
    "request_", [ALL_TEN_DELETED, ALL_TEN_REPLACED_BY_JUNK], ids=["emptied", "junk"]
)
def test_the_plain_merge_runs_the_whole_merge_review(guard: Any, request_: Any) -> None:
    """``apply_change_request(..., guards=[DataLossGuard("reject")])`` refuses the deletions the
    review refuses: nothing of the list is lost, the conflict says why."""
    result = apply_change_request(TEN, request_, guards=[guard])
    assert result.payload["items"][:10] == TEN["items"]
    assert result.report.conflicts and {c.code for c in result.report.conflicts} == {"data_loss"}
    assert "lost 10 of them" in result.report.conflicts[0].message


@pytest.mark.parametrize("guard", [Permissions(deny=["items[1]"]), ReadScope(exclude=["items[1]"])])
def test_the_plain_merge_judges_guards_at_the_original_node(guard: Any) -> None:
    result = apply_change_request(INVOICE, SHIFT_INTO_ITEM_1, guards=[guard])
    assert {c.code for c in result.report.conflicts} == {"permission_denied"}
    assert {"sku": "b", "qty": 2} in result.payload["items"]
    assert all(item.get("sku") != "pwned" for item in result.payload["items"])


# --- confirmation -----------------------------------------------------------------------------


def test_the_judge_confirms_the_same_payload_only() -> None:
    config: dict[str, Any] = {"guards": [DataLossGuard(policy="confirm")]}
    j = Judge(TEN, **config)
    first = j(ALL_TEN_DELETED)
    assert first.status == "confirm" and first.codes == ("data_loss",)
    assert (
        "before:" in first.feedback() and "send the same change request again" in first.feedback()
    )
    other = j({"updateElements": {"items": ["DELETE"] * 9}}, confirming=first.payload_json)
    assert other.status == "confirm"
    again = j(ALL_TEN_DELETED, confirming=first.payload_json)
    assert again.status == "accepted" and again.payload == {"items": []}
    assert [f.code for _, f in again.confirmations] == ["data_loss"]


def test_the_tool_handler_maps_confirm_to_an_error_result_and_a_second_call() -> None:
    from agent_payload.tools import ChangeRequestToolHandler

    handler = ChangeRequestToolHandler(dict(TEN), guards=[DataLossGuard(policy="confirm")])
    first = handler.handle(ALL_TEN_DELETED)
    assert first.is_error and "before:" in first.content and handler.payload == TEN
    second = handler.handle(ALL_TEN_DELETED)
    assert not second.is_error and handler.payload == {"items": []}


# --- one helper for JSON data -----------------------------------------------------------------


class Aliased(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    customer_name: str = Field("Ann", alias="customerName")


def test_render_payload_shows_the_alias_the_merge_accepts() -> None:
    text = render_payload(Aliased())
    assert "customerName" in text and "customer_name" not in text
    result = apply_change_request(Aliased(), {"updateElements": {"customerName": "Bo"}})
    assert result.payload.customer_name == "Bo" and not result.report.conflicts


@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_shows_and_accepts_the_alias(surface: str) -> None:
    outcome = run_surface(surface, Aliased(), {"updateElements": {"customerName": "Bo"}}, {})
    assert outcome.verdict == ("accepted", {"customerName": "Bo"})
    assert all("customer_name" not in text for text in outcome.texts)


SURFACE_TABLE: dict[str, dict[Status, str]] = {
    "PayloadAgent (text and tool mode)": {
        "accepted": "returns the `AgentResult` (payload, change request, report, repairs, "
        "confirmed findings)",
        "problems": "sends `verdict.feedback()` as the next attempt's correction (a second "
        "refusal stops with `RefusalError`); nothing applied",
        "confirm": "sends the before/after (`render_confirm`); the same payload on the next "
        "attempt is accepted as confirmed",
    },
    "ChangeRequestToolHandler.handle": {
        "accepted": "returns a `ToolResult` with the new payload and a summary of the changes; "
        "the handler keeps the payload",
        "problems": "returns an `is_error` `ToolResult` with `verdict.feedback()` (earlier "
        "calls kept); payload unchanged",
        "confirm": "cannot ask mid-call: returns an `is_error` `ToolResult` with the "
        "before/after; the same call again is accepted as confirmed",
    },
    "PayloadSession.send": {
        "accepted": "records the turn (through its agent) and moves to the new payload",
        "problems": "as the agent (the session calls it); on failure the session is unchanged",
        "confirm": "as the agent",
    },
    "MCP server and framework tools": {
        "accepted": "as the tool handler (they call it); the MCP server then writes the file "
        "atomically",
        "problems": "as the tool handler, marked as an error where the framework can (MCP "
        "error result, `ModelRetry`, `ToolMessage(status='error')`); the file is untouched",
        "confirm": "as the tool handler",
    },
    "PayloadStore.edit": {
        "accepted": "applies the change request at the version the run read (rebased over the "
        "edits committed since) and returns the `AgentResult` with the payload stored; a "
        "collision (`concurrent_change`) is a correction, as `problems`",
        "problems": "as the agent; the next reply is judged against the payload as it is then "
        "(after a collision, the current version); nothing stored",
        "confirm": "as the agent",
    },
    "BatchJob (batch and concurrent)": {
        "accepted": "the item is `done` with the payload, change request and report (it runs "
        "the agent's own run state)",
        "problems": "the correction goes into the next round, as the agent would send it; out "
        "of retries the item is `failed` with the last problems",
        "confirm": "the before/after goes into the next round, as the agent would send it",
    },
}
"""What each surface does with each kind of verdict: the README table "What each surface does
with a reply" holds exactly this."""


def surface_table() -> str:
    """``SURFACE_TABLE`` as the Markdown table of the README section "What each surface does with
    a reply" (a test checks that the README holds exactly this)."""
    lines = [
        "| surface | `accepted` | `problems` | `confirm` |",
        "| --- | --- | --- | --- |",
    ]
    for surface, row in SURFACE_TABLE.items():
        cells = " | ".join(row[status] for status in ("accepted", "problems", "confirm"))
        lines.append(f"| {surface} | {cells} |")
    return "\n".join(lines) + "\n"


# --- the README table ---------------------------------------------------------------------------


def test_the_readme_table_is_the_judges() -> None:
    from tests._docs import docs_text

    readme = docs_text()
    table = surface_table()
    assert table in readme, "README: regenerate the table with tests/test_judge.py surface_table()"
    assert set(SURFACE_TABLE) >= {"ChangeRequestToolHandler.handle", "PayloadSession.send"}


# --- the judge on its own -----------------------------------------------------------------------


def test_a_cut_off_reply_is_never_parsed() -> None:
    from agent_payload.errors import TruncatedReplyError

    verdict = Judge(INVOICE)('{"updateElements": {"total": 2}}', finish_reason="length")
    assert (verdict.status, verdict.stage, verdict.error) == (
        "problems",
        "truncated",
        TruncatedReplyError,
    )
    assert verdict.change_request is None
    assert "cut off" in verdict.feedback()


def test_a_provider_refusal_is_a_refusal() -> None:
    from agent_payload.errors import RefusalError

    verdict = Judge(INVOICE)("", refusal="I can't help with that.")
    assert (verdict.stage, verdict.error, verdict.codes) == ("refusal", RefusalError, ("refusal",))


def test_a_parsed_request_and_a_mapping_are_judged_like_the_text() -> None:
    from agent_payload.changes import AgentPayloadChangeRequest

    j = Judge(INVOICE, permissions=Permissions(deny=["id"]))
    text = j('{"updateElements": {"id": "x", "total": 2}}')
    mapping = j({"updateElements": {"id": "x", "total": 2}})
    parsed = j(AgentPayloadChangeRequest.model_validate({"updateElements": {"id": "x"}}))
    assert text.codes == mapping.codes == parsed.codes == ("permission_denied",)
    assert j(None).status == "problems"


def test_the_judge_never_changes_its_inputs() -> None:
    import copy

    payload = copy.deepcopy(TEN)
    reply = copy.deepcopy(ALL_TEN_REPLACED_BY_JUNK)
    for policy in ("reject", "confirm", "warn"):
        Judge(payload, guards=[DataLossGuard(policy=policy)])(reply)  # type: ignore[arg-type]
    assert payload == TEN and reply == ALL_TEN_REPLACED_BY_JUNK


def test_an_accepted_verdict_keeps_the_repairs_and_the_warnings() -> None:
    from agent_payload.parse import parse_change_request_with_repairs

    text = (
        '```json\n{"updateElements": {"items": ["DELETE", "DELETE", "DELETE", "DELETE", '
        '"DELETE", "DELETE"]}}\n```'
    )
    verdict = Judge(TEN, guards=[DataLossGuard(policy="warn")])(text)
    assert verdict.status == "accepted" and verdict.payload == {"items": TEN["items"][6:]}
    assert verdict.repairs == tuple(parse_change_request_with_repairs(text).repairs)
    assert verdict.report is not None
    assert [(w.code, w.payload_path) for w in verdict.report.warnings] == [
        ("data_loss", ("items",))
    ]
