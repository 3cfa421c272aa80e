"""The agent with the guards of ``agent_payload.guards``: permissions, read scope and the
data-loss guard (per change and over the whole merge), through the correction loop."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from agent_payload.agent import AgentResult, AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import RetriesExhaustedError
from agent_payload.guards import DataLossGuard, Permissions, ReadScope
from agent_payload.testing import ScriptedModel

Runner = Callable[..., AgentResult[Any]]


@pytest.fixture(params=["sync", "async"])
def run(request: pytest.FixtureRequest) -> Runner:
    """``run(model, payload, task, agent={...})`` through either agent."""

    def sync_run(model: Any, payload: Any, task: str, agent: Any = None) -> Any:
        return PayloadAgent(model, **(agent or {})).run(payload, task)

    def async_run(model: Any, payload: Any, task: str, agent: Any = None) -> Any:
        return asyncio.run(AsyncPayloadAgent(model, **(agent or {})).run(payload, task))

    return sync_run if request.param == "sync" else async_run


def wire(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


ACCOUNT = {
    "id": "acc-1",
    "owner": {"name": "Ada", "ssn": "078-05-1120"},
    "plan": "basic",
    "seats": [{"user": f"u{i}"} for i in range(6)],
}


def account() -> dict[str, Any]:
    return copy.deepcopy(ACCOUNT)


def test_permissions_refusal_goes_back_and_is_described(run: Runner) -> None:
    """A Permissions object is described in the system prompt; a change to a denied path is
    refused with its rule named in the correction, and the model's next request applies."""
    model = ScriptedModel(
        [
            wire({"updateElements": {"id": "acc-2", "plan": "pro"}}),
            wire({"updateElements": {"plan": "pro"}}),
        ]
    )
    result = run(model, account(), "upgrade", agent={"permissions": Permissions(deny=["id"])})
    assert "Read-only" in model.requests[0].messages[0].content
    correction = model.requests[1].messages[3].content
    assert "permission_denied" in correction and "`id`" in correction
    assert result.payload["id"] == "acc-1" and result.payload["plan"] == "pro"


def test_read_scope_hides_and_protects(run: Runner) -> None:
    """With a read scope the model never sees the hidden keys, not in the prompt and not in a
    correction's current subtree; writing them is refused."""
    scope = ReadScope(exclude=["owner.ssn"])
    model = ScriptedModel(
        [
            wire({"updateElements": {"owner": {"ssn": "000", "name": 5}}}),
            wire({"updateElements": {"owner": {"name": "Ada L."}}}),
        ]
    )
    result = run(model, account(), "fix the name", agent={"read_scope": scope})
    for request in model.requests:
        assert all("078-05-1120" not in m.content for m in request.messages)
    assert "permission_denied" in model.requests[1].messages[3].content
    assert result.payload["owner"] == {"name": "Ada L.", "ssn": "078-05-1120"}


def test_data_loss_reject_by_whole_merge_review(run: Runner) -> None:
    """Deleting most seats one by one is caught by the data-loss review over the whole merge
    (no single change is suspicious); under policy reject it goes back to the model."""
    deletions = ["DELETE"] * 5
    model = ScriptedModel(
        [wire({"removeElements": {"seats": deletions}}), wire({"updateElements": {"plan": "pro"}})]
    )
    result = run(model, account(), "upgrade", agent={"guards": [DataLossGuard("reject")]})
    assert "data_loss" in model.requests[1].messages[3].content
    assert len(result.payload["seats"]) == 6 and result.payload["plan"] == "pro"


def test_data_loss_confirm_then_confirmed(run: Runner) -> None:
    """Under policy confirm the model is shown the loss once; resending the same request
    confirms it."""
    request = wire({"removeElements": {"seats": ["DELETE"] * 5}})
    model = ScriptedModel([request, request])
    result = run(model, account(), "drop seats", agent={"guards": [DataLossGuard("confirm")]})
    assert result.attempts == 2
    assert result.payload["seats"] == [{"user": "u5"}]
    assert result.confirmed and all(f.code == "data_loss" for f in result.confirmed)
    assert "same change request again" in model.requests[1].messages[3].content


def test_data_loss_warn_is_reported(run: Runner) -> None:
    """Under policy warn the change applies at once and the report carries the warning."""
    model = ScriptedModel([wire({"removeElements": {"seats": ["DELETE"] * 5}})])
    result = run(model, account(), "drop seats", agent={"guards": [DataLossGuard("warn")]})
    assert result.attempts == 1
    assert any(w.code == "data_loss" for w in result.report.warnings)


def test_refused_everywhere_exhausts_with_guard_problems(run: Runner) -> None:
    """A model that keeps touching a denied path ends in RetriesExhaustedError with the
    permission problems; the payload is unchanged."""
    payload = account()
    bad = wire({"updateElements": {"id": "x"}})
    with pytest.raises(RetriesExhaustedError) as info:
        run(
            ScriptedModel([bad, bad]),
            payload,
            "rename",
            agent={"permissions": Permissions(deny=["id"]), "max_retries": 1},
        )
    assert [p.code for p in info.value.problems] == ["permission_denied"]
    assert payload == ACCOUNT
