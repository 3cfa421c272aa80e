"""Nothing the model may not read is ever shown to it, on any surface.

A payload holds secret values outside the read scope (a hidden key, a hidden array element).
For a battery of replies (updates, removals and replacements that touch them, and ones that do
not; refused, warned, confirmed and accepted ones) every text sent to the model (prompts,
corrections, confirmation requests, tool results, session summaries) is searched for them.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_payload.guards import DataLossGuard, Permissions, ReadScope
from tests._surfaces import SURFACES, run_surface

SECRETS = ("SSN-SECRET-111", "SKU-SECRET-222", "NOTE-SECRET-333", "PIN-SECRET-444")
PAYLOAD: dict[str, Any] = {
    "id": "inv-1",
    "total": 1,
    "customer": {"name": "Ann", "ssn": "SSN-SECRET-111", "pin": {"code": "PIN-SECRET-444"}},
    "items": [
        {"sku": "a", "qty": 1},
        {"sku": "SKU-SECRET-222", "note": "NOTE-SECRET-333"},
        {"sku": "c", "qty": 3},
    ],
}
SCOPE = ["customer.ssn", "customer.pin", "items[1]"]

BATTERY: list[Any] = [
    {"updateElements": {"customer": {"ssn": "x"}}},
    {"updateElements": {"customer": {"ssn": {"nested": 1}}}},
    {"removeElements": {"customer": {"ssn": "DELETE"}}},
    {"removeElements": {"customer": {"ssn": {"x": "DELETE"}}}, "updateElements": {"total": 2}},
    {"removeElements": {"customer": {"pin": {"code": "DELETE"}}}},
    {"newElements": {"customer": {"ssn": "y"}}},
    {"updateElements": {"customer": {"pin": [1]}}},
    {"replaceElements": {"customer": {"name": "B"}}},
    {"updateElements": {"customer": "DELETE"}},
    {"updateElements": {"customer": {"ssn": "DELETE", "name": "B"}}},
    {"updateElements": {"items": ["DELETE", {"sku": "pwned"}]}},
    {"updateElements": {"items": {"1": "DELETE"}}},
    {"updateElements": {"items": {"1": {"note": "x"}}}},
    {"removeElements": {"items": {"1": {"note": "DELETE"}}}},
    {"replaceElements": {"items": [{"sku": "x"}]}},
    {"updateElements": {"items": ["DELETE", "DELETE", "DELETE"]}},
    {"updateElements": {"items": [{}, {}, {"qty": 9}]}},
    {"updateElements": {"customer": {"name": "B"}}},
    {"updateElements": {"id": "x"}},
    {"updateElements": {"total": 2}},
    {"bogus": 1},
    "Sure, I changed the SSN for you.",
]
CONFIGS: dict[str, dict[str, Any]] = {
    "scope": {"read_scope": ReadScope(exclude=SCOPE)},
    "scope+guards": {
        "read_scope": ReadScope(exclude=SCOPE),
        "permissions": Permissions(deny=["id"]),
        "guards": [DataLossGuard(policy="confirm", min_items=2)],
    },
}


def _leaks(texts: list[str]) -> list[str]:
    return [secret for secret in SECRETS for text in texts if secret in text]


def _check(surface: str, config_name: str) -> None:
    refused = 0
    for reply in BATTERY:
        outcome = run_surface(surface, PAYLOAD, reply, CONFIGS[config_name])
        assert outcome.texts, reply
        assert _leaks(outcome.texts) == [], f"{surface} leaked for {reply!r}"
        refused += "outside the part of the payload you were shown" in "".join(outcome.texts)
    # the battery does reach the hidden parts (the test would see a leak if there was one)
    assert refused >= 8


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_the_agent_in_text_mode_shows_nothing_hidden(config_name: str) -> None:
    _check("agent_text", config_name)


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_the_agent_in_tool_mode_shows_nothing_hidden(config_name: str) -> None:
    _check("agent_tool", config_name)


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_the_tool_handler_shows_nothing_hidden(config_name: str) -> None:
    _check("tool_handler", config_name)


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_the_session_shows_nothing_hidden(config_name: str) -> None:
    _check("session", config_name)


def test_the_surfaces_are_all_covered() -> None:
    assert set(SURFACES) == {"agent_text", "agent_tool", "tool_handler", "session"}


def test_without_a_read_scope_the_values_would_be_shown() -> None:
    """The check is not vacuous: the same battery without a scope shows the secrets."""
    shown = set()
    for reply in BATTERY:
        shown.update(_leaks(run_surface("tool_handler", PAYLOAD, reply, {}).texts))
    assert shown >= {"SSN-SECRET-111", "SKU-SECRET-222"}


@pytest.mark.parametrize("surface", SURFACES)
def test_hidden_key_names_are_not_listed_either(surface: str) -> None:
    """Replacing a container that holds hidden keys is refused by the scope alone: a
    data-loss finding on the same change would list the hidden keys' names."""
    payload = {"customer": {"name": "Ann", "ssn_hidden_key": "x", "pin_hidden_key": "y"}}
    config = {
        "read_scope": ReadScope(exclude=["customer.ssn_hidden_key", "customer.pin_hidden_key"]),
        "guards": [DataLossGuard(policy="reject")],
    }
    outcome = run_surface(
        surface, payload, {"replaceElements": {"customer": {"name": "B"}}}, config
    )
    assert not outcome.accepted and outcome.codes == ("permission_denied",)
    assert not any("hidden_key" in text for text in outcome.texts)
