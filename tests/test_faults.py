"""Fault injection: the real openai and anthropic SDKs, our adapters and the agent against
``FakeProviderServer`` injecting 429s, 500s, timeouts, connections reset mid-body, bodies that
are not JSON, bodies cut short, and model replies cut short.

Every run either succeeds with exactly the right payload or raises a documented error
(``ProviderError`` / ``RetriesExhaustedError``); no partially applied payload is ever returned
and the caller's payload is never changed. The SDK clients use ``max_retries=1`` and 0.1 s
timeouts; status faults carry ``retry-after-ms: 1`` and the SDKs' backoff is zero in tests
(``conftest.py``), so nothing sleeps long.
"""

from __future__ import annotations

import asyncio
import copy
import random
import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from agent_payload.agent import AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import AgentPayloadError, ProviderError, RetriesExhaustedError
from agent_payload.guards import Permissions
from agent_payload.testing import FakeProviderServer, FakeRequest, Fault, Reply, ScriptItem

if TYPE_CHECKING:
    from conftest import Serve

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

APIS = ("chat", "responses", "anthropic")
MODES = ("sync", "async")
TIMEOUT = 0.1  # the read timeout of a request the server holds (it waits longer than this)

PAYLOAD: dict[str, Any] = {
    "status": "open",
    "items": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}],
    "notes": "net 30",
}
GOOD = '{"updateElements": {"status": "closed", "items": [{}, {"qty": 3}]}}'
EXPECTED: dict[str, Any] = {
    "status": "closed",
    "items": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 3}],
    "notes": "net 30",
}

# name -> (make the fault, what happens when it is followed by a good reply)
FAULTS: dict[str, tuple[Callable[[], ScriptItem], str]] = {
    "http-429": (lambda: Fault.status(429), "recovers"),
    "http-500": (lambda: Fault.status(500), "recovers"),
    "http-503": (lambda: Fault.status(503), "recovers"),
    "timeout": (lambda: Fault.delay(5.0), "recovers"),
    "reset-mid-body": (Fault.reset, "recovers"),
    "body-cut-short": (Fault.cut_short, "recovers"),
    # a 200 whose body is not JSON is not retried by the SDK: a clean ProviderError
    "not-json-html": (Fault.not_json, "provider_error"),
    "not-json-declared-json": (
        lambda: Fault.not_json("{oops", content_type="application/json"),
        "provider_error",
    ),
    # model replies cut short: never applied; the agent asks again
    "reply-length-limited": (lambda: Reply.truncated(GOOD[:30]), "recovers"),
    "reply-cut-mid-json": (lambda: GOOD[:30], "recovers"),
}


def _model_name(api: str) -> str | None:
    return {"chat": "gpt-test", "anthropic": "claude-test", "responses": None}[api]


SLOW_MACHINE_TIMEOUT = 60.0
"""The timeout of every request the server answers at once: a loaded machine can take well
over TIMEOUT to serve a good reply, which must never time out."""


def _client(server: FakeProviderServer, api: str, *, is_async: bool, held: Any) -> Any:
    """An SDK client whose requests number ``held(n)`` (n from 0) time out after TIMEOUT (the
    server holds those); every other request has SLOW_MACHINE_TIMEOUT."""
    sdk = anthropic if api == "anthropic" else openai
    sent = [0]

    def short(request: Any) -> None:
        if held(sent[0]):
            request.extensions["timeout"] = {**request.extensions["timeout"], "read": TIMEOUT}
        sent[0] += 1

    async def ashort(request: Any) -> None:
        short(request)

    hooks = {"request": [ashort if is_async else short]}
    http_class = sdk.DefaultAsyncHttpxClient if is_async else sdk.DefaultHttpxClient
    kwargs = {
        "max_retries": 1,
        "timeout": SLOW_MACHINE_TIMEOUT,
        "http_client": http_class(verify=False, event_hooks=hooks),
    }
    if api == "anthropic":
        return server.anthropic_client(async_client=is_async, **kwargs)
    return server.openai_client(async_client=is_async, **kwargs)


def _model(api: str, client: Any) -> Any:
    if api == "responses":
        from agent_payload.providers.openai import OpenAIResponsesModel

        return OpenAIResponsesModel(client, "gpt-test")
    return client


def _run(
    server: FakeProviderServer,
    api: str,
    mode: str,
    payload: Any,
    held: Any = lambda n: False,
    **agent_kwargs: Any,
) -> Any:
    """Run one agent; return the result payload or the raised AgentPayloadError. ``held(n)``:
    whether the server holds the client's request number n (it then times out)."""
    agent_kwargs.setdefault("max_retries", 1)
    agent_kwargs.setdefault("model_name", _model_name(api))
    try:
        if mode == "sync":
            with _client(server, api, is_async=False, held=held) as sdk:
                return PayloadAgent(_model(api, sdk), **agent_kwargs).run(payload, "close it")

        async def main() -> Any:
            async with _client(server, api, is_async=True, held=held) as sdk:
                agent = AsyncPayloadAgent(_model(api, sdk), **agent_kwargs)
                return await agent.run(payload, "close it")

        return asyncio.run(main())
    except AgentPayloadError as exc:
        return exc


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_one_fault_then_a_good_reply(api: str, mode: str, fault: str, serve: Serve) -> None:
    """One fault followed by a good reply: transport faults are absorbed by the SDK's retry
    (or the agent's correction loop for cut-short replies) and the run returns exactly the
    right payload; a 200 that is not JSON is a clean ProviderError. The caller's payload is
    never changed."""
    make, outcome = FAULTS[fault]
    payload = copy.deepcopy(PAYLOAD)
    with serve([make(), GOOD]) as server:
        result = _run(server, api, mode, payload, held=lambda n: fault == "timeout" and n == 0)
        assert server.errors == []
    assert payload == PAYLOAD
    if outcome == "recovers":
        assert not isinstance(result, Exception), result
        assert result.payload == EXPECTED
        assert result.attempts == (2 if fault.startswith("reply-") else 1)
    else:
        assert isinstance(result, ProviderError), result
        assert result.status_code == 200


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_fault_that_persists(api: str, mode: str, fault: str, serve: Serve) -> None:
    """The same fault on every request: a documented error (ProviderError chained to the
    SDK's exception for transport faults, with the HTTP status where there is one;
    RetriesExhaustedError for replies that keep being cut short); nothing is returned and the
    caller's payload is unchanged."""
    make, _ = FAULTS[fault]
    payload = copy.deepcopy(PAYLOAD)
    with serve([make() for _ in range(6)]) as server:
        result = _run(server, api, mode, payload, held=lambda n: fault == "timeout")
    assert payload == PAYLOAD
    assert isinstance(result, ProviderError | RetriesExhaustedError), result
    if fault.startswith("reply-"):
        assert isinstance(result, RetriesExhaustedError)
        assert result.attempts == 2
    else:
        assert isinstance(result, ProviderError)
        assert result.__cause__ is not None  # every ProviderError is chained
        if fault.startswith("http-"):
            assert result.status_code == int(fault[-3:])
            assert result.retryable
            assert isinstance(result.__cause__, openai.APIStatusError | anthropic.APIStatusError)
        elif fault in ("timeout", "reset-mid-body", "body-cut-short"):
            assert isinstance(
                result.__cause__, openai.APIConnectionError | anthropic.APIConnectionError
            )


@pytest.mark.parametrize("api", APIS)
def test_a_refused_change_is_never_returned_half_applied(api: str, serve: Serve) -> None:
    """A reply whose request is partly refused (a read-only path) is not returned with the
    rest applied: the agent asks again, and when every reply keeps touching the read-only
    path the run fails cleanly with RetriesExhaustedError and the payload unchanged."""
    payload = copy.deepcopy(PAYLOAD)
    bad = '{"updateElements": {"status": "closed", "notes": "net 60"}}'
    with serve([bad, bad, bad]) as server:
        result = _run(server, api, "sync", payload, permissions=Permissions(deny=["notes"]))
    assert isinstance(result, RetriesExhaustedError)
    assert payload == PAYLOAD
    with serve([bad, Fault.status(500), GOOD]) as server:
        fixed = _run(server, api, "sync", payload, permissions=Permissions(deny=["notes"]))
    assert not isinstance(fixed, Exception), fixed
    assert fixed.payload == EXPECTED
    assert payload == PAYLOAD


def _random_script(rng: random.Random, length: int) -> list[ScriptItem]:
    items: list[ScriptItem] = []
    for _ in range(length):
        if rng.random() < 0.5:
            items.append(GOOD)
        else:
            make, _ = FAULTS[rng.choice(list(FAULTS))]
            items.append(make())
    return items


@pytest.mark.parametrize("api", APIS)
def test_random_fault_sequences(api: str, serve: Serve) -> None:
    """Seeded random sequences of faults and good replies: every run either returns exactly
    the right payload or raises ProviderError / RetriesExhaustedError, and the caller's
    payload is never changed."""
    rng = random.Random(f"faults-{api}")
    outcomes: Counter[str] = Counter()
    for _ in range(12):
        payload = copy.deepcopy(PAYLOAD)
        script = _random_script(rng, 6)
        delays = [isinstance(item, Fault) and item.kind == "delay" for item in script]
        with serve(script) as server:
            result = _run(server, api, rng.choice(MODES), payload, held=delays.__getitem__)
        assert payload == PAYLOAD
        if isinstance(result, Exception):
            assert isinstance(result, ProviderError | RetriesExhaustedError), result
            outcomes[type(result).__name__] += 1
        else:
            assert result.payload == EXPECTED
            outcomes["success"] += 1
    assert sum(outcomes.values()) == 12


# --- 200 concurrent async agents -------------------------------------------------------------

RUNS = 200
FAULT_RATE = 0.2
SEED = 20_261_129
_RUN_ID = re.compile(r"run R(\d{3})")
CONCURRENT_TIMEOUT = 4.0
"""The client's timeout with 200 runs at once: one read can wait ~1.5 s for the busy event loop
on an idle 2-core machine, and a spurious timeout would hide a reply from the counts."""
_HELD = 3
"""Index of ``Fault.delay`` in ``_concurrent_faults()``: the server holds the request."""
_HELD_HEADER = "x-test-held"
_NUMBER_HEADER = "x-test-request"
"""The client numbers each run's requests: the server picks a request's fault by that number,
not by the order requests reach it (a retry can overtake the request it replaces)."""


def _concurrent_faults() -> list[Callable[[], ScriptItem]]:
    return [
        lambda: Fault.status(429),
        lambda: Fault.status(500),
        lambda: Fault.status(503),
        lambda: Fault.delay(8.0),
        Fault.reset,
        Fault.cut_short,
        Fault.not_json,
        lambda: Reply.truncated('{"updateElements": {"value": '),
        lambda: '{"updateElements": {"value": ',
        # 200s of a shape the adapter does not understand: a clean ProviderError each
        lambda: Fault.malformed(_chat_message_null),
        lambda: Fault.malformed(_chat_choice_null),
        lambda: Fault.malformed(_chat_usage_a_string),
    ]


_MALFORMED = ("9", "10", "11")
"""Indices of the malformed bodies in ``_concurrent_faults()``."""


def _planned_fault(run: int, n: int) -> int | None:
    """The index in ``_concurrent_faults()`` of the fault injected into run ``run``'s ``n``-th
    request (0-based), or None: a function of the seed, so server and client agree on it."""
    rng = random.Random(f"{SEED}:{run}:{n}")
    if rng.random() < FAULT_RATE:
        return rng.randrange(len(_concurrent_faults()))
    return None


def _chat_message_null(body: dict[str, Any]) -> dict[str, Any]:
    body["choices"][0]["message"] = None
    return body


def _chat_choice_null(body: dict[str, Any]) -> dict[str, Any]:
    body["choices"][0] = None
    return body


def _chat_usage_a_string(body: dict[str, Any]) -> dict[str, Any]:
    body["usage"] = "many"
    return body


@pytest.mark.slow
def test_200_concurrent_async_agents_with_injected_faults(
    record_property: Callable[[str, object], None], serve: Serve
) -> None:
    """200 AsyncPayloadAgents run at once against one server that answers each request as a
    function of it (each run gets its own right answer) and injects a fault into 20% of the
    requests (seeded), malformed 200 bodies (``"message": null`` ...) among them. All 200 are
    accounted for: every success holds exactly its own right payload, every failure is a
    documented error (a malformed body: ProviderError naming the field), no input is
    changed. The client knows the seed too: a request the server holds times out after
    ``TIMEOUT``, the others have ``CONCURRENT_TIMEOUT``. The client numbers each run's requests
    and the server plans by that number: on a busy machine the retry of a held request can
    reach the server before the held one does."""
    faults = _concurrent_faults()
    lock = threading.Lock()
    seen: Counter[int] = Counter()
    injected: Counter[str] = Counter()

    def handler(request: FakeRequest) -> ScriptItem:
        match = _RUN_ID.search(request.text)
        assert match is not None, request.text[:200]
        run = int(match.group(1))
        n = int(request.headers[_NUMBER_HEADER])
        with lock:
            seen[run] += 1
        fault = _planned_fault(run, n)
        # the client foresaw exactly the requests held here (see hold_timeout)
        assert (request.headers.get(_HELD_HEADER) == "1") == (fault == _HELD), (run, n)
        if fault is not None:
            with lock:
                injected[str(fault)] += 1
            return faults[fault]()
        return f'{{"updateElements": {{"value": {run * 7}}}}}'

    sent: Counter[int] = Counter()

    async def hold_timeout(request: Any) -> None:
        """An httpx request hook: a request the server will hold times out after TIMEOUT, as in
        the tests above, instead of CONCURRENT_TIMEOUT (the other requests keep that margin)."""
        match = _RUN_ID.search(request.content.decode())
        assert match is not None
        run = int(match.group(1))
        n = sent[run]  # a run's requests go one after another: no lock needed in one loop
        sent[run] += 1
        request.headers[_NUMBER_HEADER] = str(n)
        if _planned_fault(run, n) == _HELD:
            request.headers[_HELD_HEADER] = "1"
            request.extensions["timeout"] = {**request.extensions["timeout"], "read": TIMEOUT}

    payloads = [
        {"run": run, "value": 0, "items": [{"sku": f"S{run}-{i}"} for i in range(3)]}
        for run in range(RUNS)
    ]
    originals = copy.deepcopy(payloads)

    async def one(agent: AsyncPayloadAgent, run: int) -> Any:
        try:
            return await agent.run(payloads[run], f"For run R{run:03d}: set value to {run * 7}.")
        except AgentPayloadError as exc:
            return exc

    async def main(server: FakeProviderServer) -> list[Any]:
        http = openai.DefaultAsyncHttpxClient(
            verify=False,  # plain HTTP: no certificates to load
            event_hooks={"request": [hold_timeout]},
        )
        async with server.openai_client(
            async_client=True, max_retries=1, timeout=CONCURRENT_TIMEOUT, http_client=http
        ) as sdk:
            agent = AsyncPayloadAgent(sdk, model_name="gpt-test", max_retries=1)
            return await asyncio.gather(*(one(agent, run) for run in range(RUNS)))

    with serve(handler=handler) as server:
        results = asyncio.run(main(server))
        assert server.errors == []

    assert len(results) == RUNS
    successes = 0
    failures: Counter[str] = Counter()
    malformed = 0
    for run, result in enumerate(results):
        if isinstance(result, Exception):
            assert isinstance(result, ProviderError | RetriesExhaustedError), result
            failures[type(result).__name__] += 1
            if "does not understand" in str(result):
                assert isinstance(result, ProviderError) and result.status_code == 200
                assert result.__cause__ is not None
                malformed += 1
        else:
            expected = copy.deepcopy(originals[run])
            expected["value"] = run * 7
            assert result.payload == expected
            assert result.payload is not payloads[run]
            successes += 1
    assert payloads == originals
    assert successes + sum(failures.values()) == RUNS
    assert sum(injected.values()) > 0
    assert successes > 0
    assert sum(injected[i] for i in _MALFORMED) > 0
    assert malformed == sum(injected[i] for i in _MALFORMED)  # each one ended its run cleanly
    summary = (
        f"{RUNS} runs: {successes} succeeded, {sum(failures.values())} failed cleanly "
        f"({dict(failures)}); {sum(seen.values())} requests, {sum(injected.values())} faults "
        "injected"
    )
    print(summary)
    record_property("concurrent_summary", summary)
    record_property("successes", successes)
    record_property("clean_failures", sum(failures.values()))
