"""Run one reply through every door a change request can come in by, the same way.

``run_surface(surface, payload, reply, config)`` gives an ``Outcome``: the verdict on the reply
(accepted with the new payload as JSON data, or the problem codes of the first verdict) and
every text the surface sent to the model. The agent and the session use a ``ScriptedModel``
that gives the same reply twice (so the correction or confirmation of the first verdict is sent
on a second request, and recorded); the tool handler is called twice with the same arguments.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_payload import PayloadAgent, PayloadSession
from agent_payload._jsondata import json_data
from agent_payload.errors import AgentPayloadError
from agent_payload.report import Problem
from agent_payload.testing import ScriptedModel
from agent_payload.tools import ChangeRequestToolHandler

SURFACES = ("agent_text", "agent_tool", "tool_handler", "session")
TASK = "Edit the payload as asked."


@dataclass
class Outcome:
    accepted: bool
    payload: Any = None
    codes: tuple[str, ...] = ()
    texts: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> tuple[str, Any]:
        return ("accepted", self.payload) if self.accepted else ("problems", self.codes)


def codes(problems: Sequence[Problem]) -> tuple[str, ...]:
    return tuple(p.code or p.kind for p in problems)


def _text(reply: str | Mapping[str, Any]) -> str:
    return reply if isinstance(reply, str) else json.dumps(reply)


def _agent_options(config: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: config[k]
        for k in ("guards", "permissions", "read_scope", "validators")
        if config.get(k) is not None
    }


def _agent(
    mode: str, payload: Any, reply: str, config: Mapping[str, Any], session: bool
) -> Outcome:
    first: list[tuple[str, ...]] = []

    def on_retry(attempt: int, problems: Sequence[Problem], last: bool) -> None:
        if attempt == 1:
            first.append(codes(problems))

    model = ScriptedModel([reply, reply])
    agent = PayloadAgent(
        model,
        output_mode=mode,  # type: ignore[arg-type]
        max_retries=1,
        on_retry=on_retry,
        **_agent_options(config),
    )
    result: Any = None
    try:
        if session:
            state = PayloadSession(agent, payload, payload_type=config.get("payload_type"))
            state.send(TASK)
            result = state.payload
        else:
            result = agent.run(payload, TASK, payload_type=config.get("payload_type")).payload
    except AgentPayloadError:
        pass
    texts = [m.content for request in model.requests for m in request.messages]
    if first:
        return Outcome(False, codes=first[0], texts=texts)
    assert result is not None
    return Outcome(True, payload=json_data(result), texts=texts)


def _handler(payload: Any, reply: str | Mapping[str, Any], config: Mapping[str, Any]) -> Outcome:
    handler = ChangeRequestToolHandler(
        payload,
        payload_type=config.get("payload_type"),
        guards=config.get("guards", ()),
        permissions=config.get("permissions"),
        read_scope=config.get("read_scope"),
        validators=config.get("validators", ()),
    )
    first = handler.handle(reply)
    second = handler.handle(reply)
    texts = [first.content, second.content]
    if first.is_error:
        return Outcome(False, codes=codes(first.problems), texts=texts)
    return Outcome(True, payload=json_data(first.payload), texts=texts)


def run_surface(
    surface: str, payload: Any, reply: str | Mapping[str, Any], config: Mapping[str, Any]
) -> Outcome:
    """The outcome of ``reply`` on ``payload`` through ``surface`` (one of ``SURFACES``).
    The tool handler gets a mapping reply as a mapping (the agent as its JSON text)."""
    payload = copy.deepcopy(payload)
    if surface == "tool_handler":
        return _handler(payload, reply, config)
    text = _text(reply)
    if surface == "agent_text":
        return _agent("text", payload, text, config, session=False)
    if surface == "agent_tool":
        return _agent("tool", payload, text, config, session=False)
    if surface == "session":
        return _agent("text", payload, text, config, session=True)
    raise AssertionError(surface)
