"""Async validators reach the one judge (issues 10 and 18 together).

``Judge.steps`` is the judging as a generator that yields an async validator's awaitable;
the sync surfaces drive it with ``_callables.drive`` (an awaitable there is a
``ConfigurationError``), the async ones (``AsyncPayloadAgent``, ``ahandle``) await it. The
parity table of ``test_judge`` is run through the async surfaces with every validator made
``async def``: the verdicts are the judge's own.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest

from agent_payload import AsyncPayloadAgent
from agent_payload._jsondata import json_data
from agent_payload.errors import AgentPayloadError, ConfigurationError, RetryWithFeedback
from agent_payload.guards import ReadScope
from agent_payload.judge import Judge, Verdict
from agent_payload.report import Problem
from agent_payload.testing import ScriptedModel
from agent_payload.tools import ChangeRequestToolHandler
from tests._surfaces import TASK, codes
from tests.test_judge import CASES, _judge_outcome


def _made_async(validator: Callable[[Any], object]) -> Callable[[Any], Any]:
    async def check(payload: Any) -> None:
        await asyncio.sleep(0)
        validator(payload)

    return check


def _async_config(config: dict[str, Any]) -> dict[str, Any]:
    out = dict(config)
    if config.get("validators"):
        out["validators"] = [_made_async(v) for v in config["validators"]]
    return out


async def _drive(steps: Generator[Any, Any, Verdict]) -> Verdict:
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            result: Verdict = stop.value
            return result
        value, error = None, None
        try:
            value = await step
        except Exception as exc:
            error = exc


def _async_agent(payload: Any, reply: Any, config: dict[str, Any]) -> tuple[str, Any]:
    first: list[tuple[str, ...]] = []

    def on_retry(attempt: int, problems: Sequence[Problem], last: bool) -> None:
        if attempt == 1:
            first.append(codes(problems))

    text = reply if isinstance(reply, str) else json.dumps(reply)
    model = ScriptedModel([text, text])
    options = {
        k: config[k]
        for k in ("guards", "permissions", "read_scope", "validators")
        if config.get(k) is not None
    }
    agent = AsyncPayloadAgent(model, max_retries=1, on_retry=on_retry, **options)
    result: Any = None
    try:
        run = agent.run(copy.deepcopy(payload), TASK, payload_type=config.get("payload_type"))
        result = asyncio.run(run).payload
    except AgentPayloadError:
        pass
    if first:
        return ("problems", first[0])
    return ("accepted", json_data(result))


def _ahandle(payload: Any, reply: Any, config: dict[str, Any]) -> tuple[str, Any]:
    handler = ChangeRequestToolHandler(
        copy.deepcopy(payload),
        payload_type=config.get("payload_type"),
        guards=config.get("guards", ()),
        permissions=config.get("permissions"),
        read_scope=config.get("read_scope"),
        validators=config.get("validators", ()),
    )
    result = asyncio.run(handler.ahandle(reply))
    if result.is_error:
        return ("problems", codes(result.problems))
    return ("accepted", json_data(result.payload))


@pytest.mark.parametrize(
    ("name", "payload", "reply", "config", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_async_surfaces_give_the_judges_verdict(
    name: str, payload: Any, reply: Any, config: dict[str, Any], expected: Any
) -> None:
    want = _judge_outcome(payload, reply, config)
    aconfig = _async_config(config)
    assert _async_agent(payload, reply, aconfig) == want, "AsyncPayloadAgent"
    assert _ahandle(payload, reply, aconfig) == want, "ChangeRequestToolHandler.ahandle"
    verdict = asyncio.run(_drive(Judge(copy.deepcopy(payload), **aconfig).steps(reply)))
    if verdict.accepted:
        assert ("accepted", json_data(verdict.payload)) == want, "Judge.steps"
    else:
        assert ("problems", verdict.codes) == want, "Judge.steps"


def test_calling_the_judge_refuses_an_async_validator() -> None:
    async def check(payload: Any) -> None: ...

    with pytest.raises(ConfigurationError, match=r"Judge.*awaitable.*Judge.steps"):
        Judge({"a": 1}, validators=[check])({"updateElements": {"a": 2}})


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (RetryWithFeedback("a must be small"), "a must be small"),
        (ValueError("a is too big"), "a is too big"),
        (AssertionError("a over the limit"), "a over the limit"),
    ],
)
def test_an_async_validators_error_is_the_judges_validator_verdict(
    error: Exception, message: str
) -> None:
    async def check(payload: Any) -> None:
        raise error

    steps = Judge({"a": 1}, validators=[check]).steps({"updateElements": {"a": 2}})
    verdict = asyncio.run(_drive(steps))
    assert (verdict.status, verdict.stage) == ("problems", "validator")
    assert message in verdict.feedback()


def test_a_bug_in_an_async_validator_propagates() -> None:
    async def check(payload: Any) -> None:
        raise KeyError("oops")

    steps = Judge({"a": 1}, validators=[check]).steps({"updateElements": {"a": 2}})
    with pytest.raises(KeyError):
        asyncio.run(_drive(steps))


def test_the_judge_refuses_a_stale_marker() -> None:
    """Every surface gets ``refuse_stale_markers`` from the judge: with "DELETE" in the data
    the marker is "__DELETE__", and "DELETE" replacing an element goes back."""
    payload = {"endpoints": [{"method": "GET"}, {"method": "DELETE"}]}
    judge = Judge(payload)
    assert judge.marker == "__DELETE__"
    verdict = judge({"updateElements": {"endpoints": [{}, "DELETE"]}})
    assert (verdict.stage, verdict.codes) == ("merge", ("stale_marker",))
    assert '"__DELETE__"' in verdict.feedback()
    assert judge({"updateElements": {"endpoints": [{}, "__DELETE__"]}}).accepted


def test_handler_prompt_shows_only_what_the_read_scope_lets_the_model_see() -> None:
    payload = {"public": 1, "secret": "hunter2"}
    handler = ChangeRequestToolHandler(payload, read_scope=ReadScope(exclude=["secret"]))
    parts = handler.prompt("set public to 2")
    assert "hunter2" not in parts.system + parts.user
    assert "public" in parts.user
