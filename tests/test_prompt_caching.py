"""Prompt caching with the REAL openai and anthropic SDKs against ``FakeProviderServer``.

What is proved: every request starts with its stable part (system prompt, then the payload
block, then the task), byte for byte the same across a correction round and across tasks on the
same payload; Anthropic requests carry ``cache_control`` breakpoints on the system prompt and
the payload block by default and none with ``prompt_caching=False``; ``prompt_cache_key``
reaches Chat Completions and Responses; cached input tokens, reported in each API's own shape,
are summed in ``Usage`` over attempts, in the result, in a session's history and its saved file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_payload import prompts
from agent_payload.agent import AgentResult, AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import ConfigurationError
from agent_payload.providers.anthropic import AnthropicModel
from agent_payload.providers.base import Message, ModelRequest
from agent_payload.providers.openai import OpenAIResponsesModel
from agent_payload.session import AsyncPayloadSession, PayloadSession
from agent_payload.testing import FakeProviderServer, FakeRequest, Reply, ScriptedModel
from agent_payload.usage import Usage

APIS = ("chat", "responses", "anthropic")
MODES = ("sync", "async")

PAYLOAD = {
    "number": "INV-7",
    "customer": {"name": "Ada", "email": "ada@example.com"},
    "lines": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}],
}
GOOD = '{"updateElements":{"customer":{"name":"Bob"}}}'
BAD = '{"updateElements":{"customer":{"name":"Bob"}'  # cut: a syntax error to correct


@pytest.fixture
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as fake:
        yield fake
        assert fake.errors == [], "the fake server's script went wrong"


def _model(server: FakeProviderServer, api: str, *, is_async: bool) -> Any:
    if api == "anthropic":
        client = server.anthropic_client(async_client=is_async, max_retries=0)
        return AnthropicModel(client, "claude-test")
    client = server.openai_client(async_client=is_async, max_retries=0)
    if api == "responses":
        return OpenAIResponsesModel(client, "gpt-test")
    from agent_payload.providers.openai import OpenAIChatModel

    return OpenAIChatModel(client, "gpt-test")


def run_agent(
    server: FakeProviderServer, api: str, mode: str, task: str = "Rename Ada to Bob.", **agent: Any
) -> AgentResult[Any]:
    """One run of the agent through the real SDK client of ``api`` (closed afterwards)."""
    if mode == "sync":
        model = _model(server, api, is_async=False)
        with model.client:
            return PayloadAgent(model, **agent).run(PAYLOAD, task)

    async def main() -> AgentResult[Any]:
        model = _model(server, api, is_async=True)
        async with model.client:
            return await AsyncPayloadAgent(model, **agent).run(PAYLOAD, task)

    return asyncio.run(main())


def wire(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def stable_part(request: FakeRequest) -> list[Any]:
    """The system prompt and the first user message exactly as they went over the wire."""
    body = request.body
    if request.api == "messages":
        return [body["system"], body["messages"][0]]
    if request.api == "responses":
        return [body["instructions"], body["input"][0]]
    return body["messages"][:2]


# --- the prompt: payload block first, task after it -------------------------------------------


def test_prompt_parts_split_the_user_message_at_the_payload_block() -> None:
    """The user message is the payload block followed by the task block, exactly; the payload
    block ends right after the payload (and its blank line) and does not depend on the task."""
    one = prompts.render_prompt(PAYLOAD, "Rename Ada to Bob.")
    two = prompts.render_prompt(PAYLOAD, "Add a line C.")
    assert one.payload_block + one.task_block == one.user
    assert one.payload_block.endswith("</payload>\n\n")
    assert one.task_block.startswith("Task:\n<task>\nRename Ada to Bob.\n</task>")
    assert '"name":"Ada"' in one.payload_block and "Rename" not in one.payload_block
    assert one.payload_block == two.payload_block and one.task_block != two.task_block
    assert one.system == two.system


def test_the_rendered_user_message_did_not_change() -> None:
    """Splitting the rendering in two changes no character the model reads: the user message
    equals the template rendered in one piece."""
    parts = prompts.render_prompt(PAYLOAD, "Rename Ada to Bob.", payload_type=None)
    text, _ = prompts._render_json(PAYLOAD, indent=prompts.DEFAULT_INDENT, index_threshold=None)
    whole = prompts._render(
        "user",
        schema="",
        index_note="",
        payload=text,
        task="Rename Ada to Bob.",
        reply=prompts._reply_contract("text", "DELETE", prompts.DEFAULT_TOOL_NAME),
    )
    assert parts.user == whole.rstrip() + "\n"


# --- Anthropic cache_control ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_anthropic_marks_system_and_payload_block_by_default(
    server: FakeProviderServer, mode: str
) -> None:
    """By default the system prompt and the payload block each carry an ephemeral breakpoint;
    the task is a second, unmarked text block; the model reads the same text as without."""
    server.add(GOOD)
    run_agent(server, "anthropic", mode)
    request = server.requests[0]
    assert request.cache_controls == ["system[0]", "messages[0].content[0]"]
    body = request.body
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    payload_block, task_block = body["messages"][0]["content"]
    assert payload_block["cache_control"] == {"type": "ephemeral"}
    assert payload_block["text"].endswith("</payload>\n\n") and "Ada" in payload_block["text"]
    assert "cache_control" not in task_block
    assert task_block["text"].startswith("Task:\n<task>\nRename Ada to Bob.")
    expected = prompts.render_prompt(PAYLOAD, "Rename Ada to Bob.")
    assert request.messages == [("system", expected.system), ("user", expected.user)]


@pytest.mark.parametrize("mode", MODES)
def test_anthropic_without_prompt_caching_sends_no_marker(
    server: FakeProviderServer, mode: str
) -> None:
    """prompt_caching=False: plain strings, no cache_control anywhere, the same text."""
    server.add(GOOD)
    run_agent(server, "anthropic", mode, prompt_caching=False)
    request = server.requests[0]
    assert request.cache_controls == []
    assert b"cache_control" not in request.raw
    expected = prompts.render_prompt(PAYLOAD, "Rename Ada to Bob.")
    assert request.body["system"] == expected.system
    assert request.body["messages"] == [{"role": "user", "content": expected.user}]


def test_anthropic_never_sends_more_than_four_breakpoints(server: FakeProviderServer) -> None:
    """Anthropic refuses a fifth breakpoint: the system prompt and the first three marked user
    messages get one, the later ones go as plain strings."""
    messages = [Message("system", "You edit payloads.")]
    for n in range(5):
        messages += [Message("user", f"block {n}\n\ntask {n}", stable_prefix=9)]
        messages += [Message("assistant", "ok")]
    server.add("done")
    with server.anthropic_client(max_retries=0) as client:
        AnthropicModel(client, "claude-test").request(ModelRequest(messages=tuple(messages[:-1])))
    request = server.requests[0]
    assert request.cache_controls == [
        "system[0]",
        "messages[0].content[0]",
        "messages[2].content[0]",
        "messages[4].content[0]",
    ]
    assert request.body["messages"][6]["content"] == "block 3\n\ntask 3"


# --- the stable prefix across a correction and across tasks -----------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_correction_round_repeats_the_prefix_byte_for_byte(
    server: FakeProviderServer, api: str, mode: str
) -> None:
    """Attempt 2 starts with exactly the system prompt and first user message of attempt 1
    (same bytes, same cache markers) and only appends the failed reply and its correction."""
    server.add(BAD, GOOD)
    result = run_agent(server, api, mode)
    assert result.attempts == 2
    first, second = server.requests
    assert [wire(part) for part in stable_part(first)] == [
        wire(part) for part in stable_part(second)
    ]
    assert first.messages == second.messages[:2]
    assert [role for role, _ in second.messages] == ["system", "user", "assistant", "user"]
    if api == "anthropic":
        assert (
            first.cache_controls
            == second.cache_controls
            == [
                "system[0]",
                "messages[0].content[0]",
            ]
        )


@pytest.mark.parametrize("api", APIS)
def test_a_second_task_on_the_same_payload_shares_the_payload_block(
    server: FakeProviderServer, api: str
) -> None:
    """Two runs with different tasks on one payload send the same system prompt and the same
    payload block; only the task differs."""
    server.add(GOOD, '{"updateElements":{"number":"INV-8"}}')
    run_agent(server, api, "sync", "Rename Ada to Bob.")
    run_agent(server, api, "sync", "Set the number to INV-8.")
    one, two = server.requests
    assert one.messages[0] == two.messages[0]
    block = prompts.render_prompt(PAYLOAD, "Rename Ada to Bob.").payload_block
    assert one.messages[1][1].startswith(block) and two.messages[1][1].startswith(block)
    assert one.messages[1] != two.messages[1]
    if api == "anthropic":
        assert wire(one.body["messages"][0]["content"][0]) == wire(
            two.body["messages"][0]["content"][0]
        )


# --- OpenAI prompt_cache_key ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_prompt_cache_key_reaches_openai(server: FakeProviderServer, api: str, mode: str) -> None:
    """prompt_cache_key goes to every request of the run (both attempts), for both APIs."""
    server.add(BAD, GOOD)
    run_agent(server, api, mode, prompt_cache_key="invoice-INV-7")
    assert [r.prompt_cache_key for r in server.requests] == ["invoice-INV-7"] * 2
    assert [r.cache_controls for r in server.requests] == [[], []]


@pytest.mark.parametrize("api", APIS)
def test_no_prompt_cache_key_unless_asked(server: FakeProviderServer, api: str) -> None:
    """OpenAI gets no prompt_cache_key without the option; Anthropic, which has no such
    parameter, never gets it."""
    server.add(GOOD)
    options = {"prompt_cache_key": "k"} if api == "anthropic" else {}
    run_agent(server, api, "sync", **options)
    assert b"prompt_cache_key" not in server.requests[0].raw


def test_prompt_cache_options_are_checked() -> None:
    """A wrong option is refused when the agent is built, before any request."""
    with FakeProviderServer() as fake, fake.openai_client() as client:
        with pytest.raises(ConfigurationError, match="prompt_caching: expected True or False"):
            PayloadAgent(client, model_name="gpt-test", prompt_caching="yes")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="prompt_cache_key: expected a non-empty"):
            PayloadAgent(client, model_name="gpt-test", prompt_cache_key="")
    assert fake.requests == []


# --- cached tokens in Usage -------------------------------------------------------------------


def test_usage_adds_cache_counts() -> None:
    """Addition sums every count; the uncached input is what neither read nor wrote the cache."""
    total = Usage(100, 10, 1, 60, 30) + Usage(200, 20, 1, 150, 0)
    assert total == Usage(300, 30, 2, cached_input_tokens=210, cache_write_input_tokens=30)
    assert total.uncached_input_tokens == 60
    assert total.total_tokens == 330


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_cached_tokens_are_summed_over_attempts(
    server: FakeProviderServer, api: str, mode: str
) -> None:
    """Each API reports cache reads and writes in its own shape (Anthropic leaves them out of
    input_tokens, OpenAI counts them in); the result's usage has one meaning for all: input
    includes them, and both counts are summed over the attempts."""
    server.add(
        Reply.message(BAD, input_tokens=1000, output_tokens=12, cache_write_input_tokens=900),
        Reply.message(GOOD, input_tokens=1100, output_tokens=10, cached_input_tokens=900),
    )
    result = run_agent(server, api, mode)
    assert result.usage == Usage(2100, 22, 2, cached_input_tokens=900, cache_write_input_tokens=900)


@pytest.mark.parametrize("api", APIS)
def test_each_api_reports_the_cache_in_its_own_shape(server: FakeProviderServer, api: str) -> None:
    """The fake server answers in each API's wire shape (read back through the SDK's own
    types), and the adapter normalises it: Anthropic's input_tokens leaves the cache out."""
    server.add(
        Reply.message(
            GOOD,
            input_tokens=1000,
            output_tokens=5,
            cached_input_tokens=700,
            cache_write_input_tokens=200,
        )
    )
    model = _model(server, api, is_async=False)
    with model.client:
        reply = model.request(ModelRequest(messages=(Message("system", "s"), Message("user", "u"))))
    assert reply.usage == Usage(1000, 5, 1, cached_input_tokens=700, cache_write_input_tokens=200)
    usage = reply.raw.usage
    if api == "anthropic":
        wire_counts = (
            usage.input_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens,
        )
        assert wire_counts == (100, 700, 200)
    elif api == "chat":
        details = usage.prompt_tokens_details
        assert (usage.prompt_tokens, details.cached_tokens, details.cache_write_tokens) == (
            1000,
            700,
            200,
        )
    else:
        details = usage.input_tokens_details
        assert (usage.input_tokens, details.cached_tokens, details.cache_write_tokens) == (
            1000,
            700,
            200,
        )


# --- the session history ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_session_history_keeps_cached_tokens_through_save_and_load(
    server: FakeProviderServer, mode: str, tmp_path: Path
) -> None:
    """A turn records the cache counts; the saved file holds them and loads them back."""
    server.add(
        Reply.message(GOOD, input_tokens=500, output_tokens=9, cache_write_input_tokens=400),
        Reply.message(
            '{"updateElements":{"number":"INV-8"}}',
            input_tokens=520,
            output_tokens=9,
            cached_input_tokens=400,
        ),
    )
    path = tmp_path / "session.json"
    if mode == "sync":
        model = _model(server, "anthropic", is_async=False)
        with model.client:
            session = PayloadSession(PayloadAgent(model), PAYLOAD)
            session.send("Rename Ada to Bob.")
            session.send("Set the number to INV-8.")
            session.save(path)
            loaded = PayloadSession.load(path, None)
    else:

        async def main() -> tuple[Any, Any]:
            model = _model(server, "anthropic", is_async=True)
            async with model.client:
                session = AsyncPayloadSession(AsyncPayloadAgent(model), PAYLOAD)
                await session.send("Rename Ada to Bob.")
                await session.send("Set the number to INV-8.")
                session.save(path)
                return session, AsyncPayloadSession.load(path, None)

        session, loaded = asyncio.run(main())
    usages = [turn.usage for turn in session.history]
    assert usages == [
        Usage(500, 9, 1, cached_input_tokens=0, cache_write_input_tokens=400),
        Usage(520, 9, 1, cached_input_tokens=400, cache_write_input_tokens=0),
    ]
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert [turn["usage"] for turn in saved["turns"]] == [
        {"input_tokens": 500, "output_tokens": 9, "requests": 1, "cache_write_input_tokens": 400},
        {"input_tokens": 520, "output_tokens": 9, "requests": 1, "cached_input_tokens": 400},
    ]
    assert [turn.usage for turn in loaded.history] == usages


def test_a_session_file_without_cache_counts_still_loads(tmp_path: Path) -> None:
    """A turn that used no prompt cache is saved with the three usage fields of files written
    before the cache counts existed, and such a file loads with 0 for both counts."""
    session = PayloadSession(PayloadAgent(ScriptedModel([GOOD])), PAYLOAD)
    session.send("Rename Ada to Bob.")
    path = tmp_path / "old.json"
    session.save(path)
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["format_version"] == 1
    assert sorted(saved["turns"][0]["usage"]) == ["input_tokens", "output_tokens", "requests"]
    loaded = PayloadSession.load(path, None)
    usage = loaded.history[0].usage
    assert (usage.cached_input_tokens, usage.cache_write_input_tokens) == (0, 0)
    assert usage == session.history[0].usage and usage.requests == 1


# --- the command line -------------------------------------------------------------------------


def test_cli_usage_line_shows_cached_input(
    server: FakeProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agent-payload run` says how much of the input came from the cache (and nothing about
    a cache when none was used)."""
    import io

    from agent_payload.cli import main

    payload = tmp_path / "p.json"
    payload.write_text(json.dumps(PAYLOAD), encoding="utf-8")
    server.add(
        Reply.message(GOOD, input_tokens=900, output_tokens=20, cached_input_tokens=800),
        Reply.message(GOOD, input_tokens=900, output_tokens=20),
    )
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    lines = []
    for _ in range(2):
        out, err = io.StringIO(), io.StringIO()
        argv = ["run", "--model", "openai:gpt-test", "--payload", str(payload)]
        status = main([*argv, "--no-color", "Rename Ada to Bob."], stdout=out, stderr=err)
        assert status == 0, err.getvalue()
        lines.append(err.getvalue().splitlines()[-1])
    assert "; 900 input (800 cached) + 20 output tokens" in lines[0]
    assert "; 900 input + 20 output tokens" in lines[1]
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2


# --- batch jobs -------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_batch_job_sums_cached_tokens_and_reads_older_state_files(api: str, tmp_path: Path) -> None:
    """Through the providers' batch APIs each item's usage and the job's progress carry the
    cache counts; a state file from before they existed (no such columns) gets them, as 0."""
    import sqlite3

    from agent_payload.batch import BatchJob

    def answer(request: FakeRequest) -> Reply:
        return Reply.message(GOOD, input_tokens=100, output_tokens=5, cached_input_tokens=60)

    state = tmp_path / "job.sqlite"
    with FakeProviderServer(handler=answer) as fake:
        model = _model(fake, api, is_async=False)
        with model.client, BatchJob(PayloadAgent(model), state) as job:
            job.add_many([{"id": f"i{n}", "payload": PAYLOAD, "task": "Rename"} for n in range(3)])
            final = job.run(poll_interval=0)
            results = list(job.results())
        lines = fake.batch_requests
    assert final.done == 3
    assert final.usage == Usage(300, 15, 3, cached_input_tokens=180)
    assert [r.usage for r in results] == [Usage(100, 5, 1, cached_input_tokens=60)] * 3
    expected = ["system[0]", "messages[0].content[0]"] if api == "anthropic" else []
    assert len(lines) == 3 and all(line.cache_controls == expected for line in lines)
    with sqlite3.connect(state) as db:  # as a state file written before the cache columns
        db.execute("ALTER TABLE items DROP COLUMN cached_input_tokens")
        db.execute("ALTER TABLE items DROP COLUMN cache_write_input_tokens")
    db.close()
    with FakeProviderServer() as fake:
        model = _model(fake, api, is_async=False)
        with model.client, BatchJob(PayloadAgent(model), state) as job:
            assert [r.usage for r in job.results()] == [Usage(100, 5, 1)] * 3
            assert job.progress().usage == Usage(300, 15, 3)


def test_a_failed_run_reports_cached_tokens_too(server: FakeProviderServer) -> None:
    """RetriesExhaustedError.usage carries the cache counts of every attempt."""
    from agent_payload.errors import RetriesExhaustedError

    server.add(
        Reply.message(BAD, input_tokens=300, output_tokens=4, cache_write_input_tokens=250),
        Reply.message(BAD, input_tokens=320, output_tokens=4, cached_input_tokens=250),
    )
    with pytest.raises(RetriesExhaustedError) as caught:
        run_agent(server, "anthropic", "sync", max_retries=1)
    assert caught.value.usage == Usage(620, 8, 2, 250, 250)


def test_batch_cost_prices_cached_input_apart(tmp_path: Path) -> None:
    """prices may name the cache's own prices; without them cached input costs the input
    price (the estimate is then what it was before the cache counts existed)."""
    from agent_payload.batch import BatchJob

    def answer(request: FakeRequest) -> Reply:
        return Reply.message(
            GOOD,
            input_tokens=1_000_000,
            output_tokens=0,
            cached_input_tokens=600_000,
            cache_write_input_tokens=100_000,
        )

    costs = []
    for n, prices in enumerate(
        [
            {"input": 2.0, "output": 8.0},
            {"input": 2.0, "output": 8.0, "cached_input": 0.5, "cache_write_input": 2.5},
        ]
    ):
        with FakeProviderServer(handler=answer) as fake:
            model = _model(fake, "anthropic", is_async=False)
            state = tmp_path / f"{n}.sqlite"
            with model.client, BatchJob(PayloadAgent(model), state, prices=prices) as job:
                job.add_many([{"id": "a", "payload": PAYLOAD, "task": "Rename"}])
                costs.append(job.run(poll_interval=0).cost)
    assert costs[0] == pytest.approx(2.0)
    assert costs[1] == pytest.approx(0.3 * 2.0 + 0.6 * 0.5 + 0.1 * 2.5)
