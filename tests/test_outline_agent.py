"""Outline mode end to end: the REAL openai and anthropic SDKs against ``FakeProviderServer``.

A payload too big for ``max_payload_tokens`` (a few thousand): the first request carries an
outline within the budget, the model reads one element by path, finds another by text, sends
the change request (as text, or as the change-request tool), and the merged payload is exact.
For Chat Completions, Responses and Anthropic Messages, sync and async, text and tool output
(on a 2,000-line catalogue); and through each API on a payload of more than 5 MB (50,000
lines, built once for the module) with a first request under 20,000 tokens. Plus: a hidden
path reads as absent, ``max_reads`` exhausted ends the run with a clear error and the payload
untouched.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from agent_payload._loop import estimate_tokens
from agent_payload.agent import AgentResult, AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import ReadsExhaustedError
from agent_payload.guards import ReadScope
from agent_payload.testing import FakeProviderServer, FakeRequest, Reply

pytest.importorskip("openai")
pytest.importorskip("anthropic")

APIS = ("chat", "responses", "anthropic")
MODES = ("sync", "async")
OUTPUTS = ("text", "tool")
BUDGET = 3_000


def _line(i: int) -> dict[str, Any]:
    return {
        "sku": f"SKU-{i:05d}",
        "name": f"Catalogue item number {i}",
        "qty": i % 9,
        "price": round(1 + i * 0.01, 2),
        "description": f"Standard part {i}, boxed, shipped from the central warehouse.",
        "cost": f"secret-cost-{i}",
    }


def catalogue(lines: int) -> dict[str, Any]:
    return {"catalogue": "spring", "currency": "EUR", "lines": [_line(i) for i in range(lines)]}


@pytest.fixture(scope="module")
def five_mb() -> tuple[dict[str, Any], str]:
    """The 5 MB payload and its JSON text, built once for the module: no test may change it
    (each one checks that the caller's payload is untouched)."""
    payload = catalogue(50_000)
    return payload, json.dumps(payload)


@pytest.fixture
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as fake:
        yield fake
        assert fake.errors == [], "the fake server's script went wrong"


def run(
    server: FakeProviderServer,
    api: str,
    mode: str,
    payload: Any,
    task: str,
    **agent_kwargs: Any,
) -> AgentResult[Any]:
    """One run of the agent through the real SDK of ``api`` (sync or async)."""
    from agent_payload.providers.openai import OpenAIResponsesModel

    def model(sdk: Any) -> Any:
        if api == "responses":
            return OpenAIResponsesModel(sdk, "gpt-test")
        return sdk

    agent_kwargs.setdefault("model_name", None if api == "responses" else f"{api}-test")
    client = server.anthropic_client if api == "anthropic" else server.openai_client
    if mode == "sync":
        with client(async_client=False, max_retries=0) as sdk:
            return PayloadAgent(model(sdk), **agent_kwargs).run(payload, task)

    async def main() -> AgentResult[Any]:
        async with client(async_client=True, max_retries=0) as sdk:
            return await AsyncPayloadAgent(model(sdk), **agent_kwargs).run(payload, task)

    return asyncio.run(main())


def fenced_payload(request: FakeRequest) -> str:
    """What the first user message carries between <payload> and </payload>."""
    match = re.search(r"<payload>\n(.*)\n</payload>", request.text, re.DOTALL)
    assert match is not None, "the first request has no <payload> block"
    return match.group(1)


def tool_names(request: FakeRequest) -> list[str]:
    return request.tools


def edit_through_the_outline(
    server: FakeProviderServer,
    api: str,
    mode: str,
    output: str,
    payload: dict[str, Any],
    payload_text: str,
) -> None:
    """The first request is an outline within the budget (and the whole request under 20,000
    tokens); a read by path and a find by text are answered from the payload; the change
    request sent after them is merged exactly; the caller's payload (whose JSON text is
    ``payload_text``) is untouched."""
    far = len(payload["lines"]) * 4 // 5 + 1  # an element the outline does not show
    sku = f"SKU-{far:05d}"
    change = {"updateElements": {"lines": {"31": {"qty": 40}, str(far): {"price": 9.5}}}}
    server.add(
        Reply.read_payload("lines[31]"),
        Reply.find_in_payload(sku.lower()),
        json.dumps({**change, "reasoning": f"qty of 31 and price of {far}"}),
    )
    result = run(
        server,
        api,
        mode,
        payload,
        f"Set the quantity of SKU-00031 to 40 and the price of {sku} to 9.5",
        output_mode=output,
        max_payload_tokens=BUDGET,
    )
    first, read, found = server.requests
    # the first request: an outline within the budget, the read tools offered
    outline = fenced_payload(first)
    assert "OUTLINE" in first.text
    assert estimate_tokens(outline) <= BUDGET
    assert estimate_tokens(first.text) < 20_000
    assert sku not in outline
    assert set(tool_names(first)) >= {"read_payload", "find_in_payload"}
    if output == "tool":
        assert tool_names(first)[0] == "apply_change_request"
        assert first.forced_tool == "apply_change_request"  # some tool must be called
    else:
        assert first.forced_tool is None
    # the read answered lines[31] exactly; the find located the far element
    assert '"sku":"SKU-00031"' in read.last_user_text
    assert '"cost":"secret-cost-31"' in read.last_user_text
    assert f'lines[{far}].sku: "{sku}"' in found.last_user_text
    assert estimate_tokens(read.last_user_text) <= BUDGET
    # the change request was judged and merged exactly
    lines = list(payload["lines"])
    lines[31] = {**lines[31], "qty": 40}
    lines[far] = {**lines[far], "price": 9.5}
    assert result.payload == {**payload, "lines": lines}
    assert result.outlined and result.reads == 2 and result.attempts == 1
    assert result.usage.requests == 3
    assert payload["lines"][31]["qty"] == 31 % 9  # the caller's payload is untouched
    assert json.dumps(payload) == payload_text


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_a_payload_over_the_budget_is_edited_through_its_outline(
    server: FakeProviderServer, api: str, mode: str, output: str
) -> None:
    """Every API, sync and async, text and tool output: the outline, a read, a find, the
    change request merged exactly (``edit_through_the_outline``), on a 2,000-line catalogue
    (about 97,000 tokens for a budget of 3,000)."""
    payload = catalogue(2_000)
    edit_through_the_outline(server, api, mode, output, payload, json.dumps(payload))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("api", "mode", "output"),
    [("chat", "sync", "text"), ("responses", "sync", "tool"), ("anthropic", "async", "tool")],
)
def test_a_5_mb_payload_is_edited_through_its_outline(
    server: FakeProviderServer,
    five_mb: tuple[dict[str, Any], str],
    api: str,
    mode: str,
    output: str,
) -> None:
    """The same edit through each API on a payload of more than 5 MB: the first request stays
    under 20,000 tokens (the outline within 3,000), the read, the find and the merge are
    exact, and the caller's payload is untouched. (Sync and async, text and tool output, do
    not depend on the payload's size: the test above runs each of them.)"""
    payload, text = five_mb
    assert len(text) > 5_000_000
    edit_through_the_outline(server, api, mode, output, payload, text)


SMALL: dict[str, Any] = {"title": "small catalogue", "lines": [_line(i) for i in range(2_000)]}


@pytest.mark.parametrize("api", APIS)
def test_a_hidden_path_reads_as_absent(server: FakeProviderServer, api: str) -> None:
    """With ``ReadScope(exclude=["lines[*].cost"])`` neither a read of the hidden key, nor a
    read of its element, nor a find of its text shows anything of it."""
    server.add(
        Reply.read_payload("lines[7].cost"),
        Reply.read_payload("lines[7]"),
        Reply.find_in_payload("secret-cost-7"),
        '{"updateElements": {"lines": {"7": {"qty": 1}}}}',
    )
    result = run(
        server,
        api,
        "sync",
        SMALL,
        "Set the quantity of SKU-00007 to 1",
        max_payload_tokens=1_000,
        read_scope=ReadScope(exclude=["lines[*].cost"]),
    )
    requests = server.requests
    assert "secret-cost" not in requests[0].text
    hidden, element, found = (r.last_user_text for r in requests[1:])
    assert hidden == (
        'No value at lines[7].cost: lines[7] has no key "cost" (its keys: "sku", "name", '
        '"qty", "price", "description").'
    )
    assert '"sku":"SKU-00007"' in element and "cost" not in element
    assert found == 'No match for "secret-cost-7" in the payload (keys and string values searched).'

    assert result.payload["lines"][7]["qty"] == 1
    assert result.payload["lines"][7]["cost"] == "secret-cost-7"  # kept, never shown


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_max_reads_exhausted_ends_the_run(server: FakeProviderServer, api: str, mode: str) -> None:
    """A read beyond ``max_reads`` ends the run with ``ReadsExhaustedError`` saying what
    happened and what to do; no further request is made and the payload is untouched. The
    last allowed read tells the model it was the last."""
    server.add(
        Reply.read_payload("lines[1]"),
        Reply.find_in_payload(number=3),
        Reply.read_payload("lines[2]"),
    )
    before = json.dumps(SMALL)
    with pytest.raises(ReadsExhaustedError) as caught:
        run(
            server, api, mode, SMALL, "Double every quantity", max_payload_tokens=1_000, max_reads=2
        )
    error = caught.value
    assert "max_reads=2" in str(error) and "payload is unchanged" in str(error)
    assert 'read_payload({"path": "lines[2]"})' in str(error)
    assert "Raise max_reads" in str(error)
    assert error.reads == 2 and error.usage is not None and error.usage.requests == 3
    assert len(server.requests) == 3
    assert "That was the last read allowed (2 in all)" in server.requests[2].last_user_text
    assert json.dumps(SMALL) == before


@pytest.mark.parametrize("api", APIS)
def test_a_bad_read_is_answered_and_the_run_goes_on(server: FakeProviderServer, api: str) -> None:
    """A read with a bad path gets a precise error text as its result (not an exception);
    a change request sent together with a read is not applied; the run then succeeds."""
    server.add(
        Reply.read_payload("lines.7"),
        Reply.tool_call({"path": "lines[", "start": -1}, name="read_payload"),
        '{"updateElements": {"title": "big catalogue"}}',
    )
    result = run(server, api, "sync", SMALL, "Rename the catalogue", max_payload_tokens=1_000)
    first_error = server.requests[1].last_user_text
    assert first_error == (
        'No value at lines["7"]: lines is an array of 2000 elements, not an object; write '
        "lines[7] for the element at position 7."
    )
    assert server.requests[2].last_user_text.startswith("Error: ")
    assert result.payload["title"] == "big catalogue" and result.reads == 2


def test_a_payload_within_the_budget_is_sent_in_full(server: FakeProviderServer) -> None:
    """Below the budget nothing changes: the payload itself, no read tools."""
    server.add('{"updateElements": {"title": "t"}}')
    result = run(server, "chat", "sync", {"title": "x", "n": [1, 2]}, "Set the title to t")
    (request,) = server.requests
    assert '"n":[1,2]' in request.text and request.tools == []
    assert not result.outlined and result.reads == 0


@pytest.mark.parametrize("api", APIS)
def test_a_correction_in_outline_mode_stays_within_the_budget(
    server: FakeProviderServer, api: str
) -> None:
    """A conflict whose subtree is the whole 2,000-line array is corrected with that subtree
    outlined within half the budget (full mode would send all of it); the corrected change
    request after a read is applied through the same judge."""
    server.add(
        '{"updateElements": {"lines": {"2000": {"qty": 5}}}}',
        Reply.read_payload("lines[1999]"),
        '{"updateElements": {"lines": {"1999": {"qty": 5}}}}',
    )
    result = run(
        server, api, "sync", SMALL, "Set the last line's quantity to 5", max_payload_tokens=1_000
    )
    correction = server.requests[1].last_user_text
    assert '(index_out_of_range) at updateElements.lines["2000"]' in correction
    assert "this is an OUTLINE" in correction and "/*1999*/" in correction
    assert estimate_tokens(correction) < 1_000
    assert '"sku":"SKU-01999"' in server.requests[2].last_user_text
    assert result.attempts == 2 and result.reads == 1
    assert result.payload["lines"][1999]["qty"] == 5
