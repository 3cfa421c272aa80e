"""The offline demo: its shipped data is realistic and consistent, the replay exercises the
correction loop, and the provider choice follows the environment."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from typing import Any

import pytest

from agent_payload.demo import DEFAULT_MODELS, choose_provider, load_data, run_demo
from agent_payload.errors import ConfigurationError
from agent_payload.merge import apply_change_request
from agent_payload.parse import parse_change_request


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _money(value: Any) -> Decimal:
    return Decimal(str(value))


def test_data_is_shipped_as_package_resources() -> None:
    """invoice, replay and expected load through importlib.resources and look like the story:
    a 28-line invoice and a task naming each change."""
    invoice = load_data("invoice")
    replay = load_data("replay")
    assert len(invoice["lineItems"]) == 28
    assert len(json.dumps(invoice)) > 5000
    assert len(replay["replies"]) == 2
    for word in ("Mara Lindqvist", "100 units", "duplicate", "SVC-EXP-24", "totals"):
        assert word in replay["task"]


def test_invoice_holds_no_marker_string() -> None:
    """The invoice's data holds neither marker, so the agent activates "DELETE" as the replies
    assume."""
    strings = _strings(load_data("invoice"))
    assert "DELETE" not in strings and "__DELETE__" not in strings


@pytest.mark.parametrize("name", ["invoice", "expected"])
def test_totals_add_up(name: str) -> None:
    """The invoice's totals are the sums of its line amounts and taxes (the demo's numbers are
    right, before and after)."""
    doc = load_data(name)
    items = doc["lineItems"]
    net = sum(_money(i["amount"]) for i in items)
    assert _money(doc["totals"]["net"]) == net
    for line in doc["totals"]["taxes"]:
        base = sum(_money(i["amount"]) for i in items if i["taxRate"] == line["rate"])
        assert _money(line["base"]) == base
    tax = sum(_money(t["tax"]) for t in doc["totals"]["taxes"])
    assert _money(doc["totals"]["tax"]) == tax
    assert _money(doc["totals"]["gross"]) == net + tax


def test_first_reply_conflicts_and_second_reply_gives_expected() -> None:
    """Reply 1 deletes index 28 of a 28-element array (index_out_of_range); reply 2 merges
    cleanly into exactly expected.json."""
    invoice = load_data("invoice")
    first, second = (parse_change_request(r["text"]) for r in load_data("replay")["replies"])
    bad = apply_change_request(invoice, first, markers=frozenset({"DELETE"}))
    assert [c.code for c in bad.report.conflicts] == ["index_out_of_range"]
    assert bad.report.conflicts[0].path == 'updateElements.lineItems["28"]'
    good = apply_change_request(invoice, second, markers=frozenset({"DELETE"}))
    assert good.report.conflicts == [] and good.report.warnings == []
    assert good.payload == load_data("expected")
    ops = sorted((c.op, c.path[:2]) for c in good.report.changes)
    assert ("delete", ("lineItems", 27)) in ops
    assert ("add", ("lineItems", 27)) in ops


def test_run_demo_offline_returns_0_and_tells_the_story(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_demo with no key replays both replies through the agent, shows the correction and
    the token comparison, and checks the result against expected.json."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    out = io.StringIO()
    assert run_demo(out=out) == 0
    text = out.getvalue()
    assert "offline replay" in text
    assert "Attempt 2" in text
    assert "Usage over 2 attempts" in text
    assert "x fewer" in text


def test_choose_provider_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key: replay; OPENAI_API_KEY first, then ANTHROPIC_API_KEY; --offline wins; an explicit
    provider needs its own key."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert choose_provider(None, False) is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a")
    assert choose_provider(None, False) == "anthropic"
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    assert choose_provider(None, False) == "openai"
    assert choose_provider("anthropic", False) == "anthropic"
    assert choose_provider("openai", True) is None
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        choose_provider("anthropic", False)
    assert set(DEFAULT_MODELS) == {"openai", "anthropic"}
