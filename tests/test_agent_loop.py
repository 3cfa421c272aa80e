"""The pure decision logic of the correction loop (``agent_payload._loop.RunState``), without
any driver: what is sent on each attempt and how each kind of reply is judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_payload._loop import RunSettings, RunState
from agent_payload.agent import PayloadAgent
from agent_payload.errors import (
    ModelReplyError,
    ProviderError,
    RefusalError,
    ReplySyntaxError,
    RetriesExhaustedError,
    TruncatedReplyError,
)
from agent_payload.judge._problems import value_at as _current
from agent_payload.providers.base import ModelReply
from agent_payload.testing import ScriptedModel
from agent_payload.usage import Usage, estimate_tokens

PAYLOAD = {"a": {"b": [1, 2, 3]}, "c": "text"}


def start(**settings: Any) -> RunState:
    return RunState(json.loads(json.dumps(PAYLOAD)), "do it", RunSettings(**settings))


def reply(text: str, **kw: Any) -> ModelReply:
    kw.setdefault("usage", Usage(100, 10, 1))
    return ModelReply(text=text, **kw)


def test_requests_carry_the_options() -> None:
    """Each request carries the run's output mode, token limit, temperature and SDK extras,
    and counts the attempt."""
    state = start(max_tokens=300, temperature=0.2, extra={"seed": 7})
    request = state.next_request()
    assert state.attempt == 1
    assert (request.max_tokens, request.temperature, dict(request.extra)) == (300, 0.2, {"seed": 7})
    assert request.output_mode == "text" and request.schema is None


def test_tool_mode_request_has_schema_naming_the_marker() -> None:
    """In tool mode the request carries the change-request schema built for the marker."""
    state = RunState({"m": "DELETE"}, "x", RunSettings(output_mode="tool"))
    request = state.next_request()
    assert request.output_mode == "tool"
    assert state.marker == "__DELETE__"
    assert "__DELETE__" in json.dumps(request.schema)


def test_only_the_last_failure_is_kept() -> None:
    """After several failures the conversation holds the original two messages plus only the
    last failed reply and its correction."""
    state = start()
    for text in ("first bad", "second bad", "third bad"):
        state.next_request()
        with pytest.raises(ModelReplyError):
            state.judge(reply(text))
    messages = state.next_request().messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2].content == "third bad"
    assert "first bad" not in "".join(m.content for m in messages)


def test_syntax_error_keeps_its_class_and_usage_adds_up() -> None:
    """A reply with broken JSON raises the parser's class with feedback naming the active
    marker; usage is summed over replies, a reply without a request count counts as one."""
    state = start()
    state.next_request()
    with pytest.raises(ReplySyntaxError) as info:
        state.judge(reply('{"updateElements" "c"}'))
    assert '"DELETE"' in info.value.feedback
    state.next_request()
    with pytest.raises(ModelReplyError):
        state.judge(ModelReply(text="nothing", usage=Usage(5, 5, 0)))
    assert state.usage == Usage(105, 15, 2)


def test_truncated_reply_is_not_parsed() -> None:
    """A truncated reply raises TruncatedReplyError even when its text is a valid request."""
    state = start()
    state.next_request()
    with pytest.raises(TruncatedReplyError) as info:
        state.judge(reply('{"updateElements": {"c": "new"}}', finish_reason="max_tokens"))
    assert [p.kind for p in info.value.problems] == ["truncated"]


def test_should_retry_decisions() -> None:
    """Model-reply errors are retried, transport errors never, a refusal only the first
    time."""
    state = start()
    assert state.should_retry(ModelReplyError("x"))
    assert not state.should_retry(ProviderError("x", provider="p"))
    state.next_request()
    with pytest.raises(RefusalError) as first:
        state.judge(reply("", refusal="no"))
    assert state.should_retry(first.value)
    state.next_request()
    with pytest.raises(RefusalError) as second:
        state.judge(reply("", refusal="no"))
    assert not state.should_retry(second.value)


def test_budget_and_exhausted_error() -> None:
    """over_budget follows the summed usage; the exhausted error says budget or attempts."""
    state = start(token_budget=200)
    state.next_request()
    with pytest.raises(ModelReplyError):
        state.judge(reply("no"))
    assert not state.over_budget()
    assert "no usable change request after 1 attempt" in str(state.exhausted())
    state.next_request()
    with pytest.raises(ModelReplyError):
        state.judge(reply("no"))
    assert state.over_budget()
    error = state.exhausted()
    assert "budget of 200" in str(error) and error.attempts == 2 and error.last_reply == "no"


def test_current_subtree_falls_back_to_parent_but_never_root() -> None:
    """The current value shown for a missing path is its parent container, never the root."""
    assert _current(PAYLOAD, ("a", "b", 1)) == (2, True)
    assert _current(PAYLOAD, ("a", "b", 9)) == ([1, 2, 3], True)
    assert _current(PAYLOAD, ("zz",)) == (None, False)
    assert _current(PAYLOAD, None) == (None, False)


def test_estimate_tokens_counts_something() -> None:
    """Token estimates grow with the text."""
    assert 0 < estimate_tokens('{"a":1}') < estimate_tokens(json.dumps(PAYLOAD) * 10)


ROOT = Path(__file__).resolve().parent.parent

_TOKENIZER_CHECK = """
import json, sys, warnings
from agent_payload.usage import estimate_tokens
texts = ["hello world", "", "<|endoftext|> and <|endofprompt|>", "lone \\ud800 surrogate",
         "\u00e9\u4e2d\U0001f600" * 50, json.dumps({"rows": [{"id": i, "DELETE": None}
         for i in range(3000)]}, separators=(",", ":")), open(sys.argv[1]).read()]
ours = [estimate_tokens(text) for text in texts]
print(ours[0], "bpe_openai" in sys.modules)
from agent_payload import usage
usage._tokenizer = usage._PublicTokenizer()  # the fallback: bpe-openai's public API
print(ours == [estimate_tokens(text) for text in texts], "bpe_openai" in sys.modules)
"""


@pytest.mark.usefixtures("o200k")
@pytest.mark.slow
def test_the_tokenizer_counts_where_warnings_are_errors() -> None:
    """In a process where warnings are errors (bpe-openai's import warns), the counts are
    still the tokenizer's, not the length estimate: "hello world" is 2 o200k tokens where the
    estimate says 3. The count loads bpe-openai's Rust tokenizer without importing the Python
    package (which parses every bundled vocabulary); it gives bpe-openai's public counts on
    special tokens, a lone surrogate, wide characters, a long payload and the README, and a
    later ``import bpe_openai`` works beside it."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", _TOKENIZER_CHECK, str(ROOT / "README.md")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "False", "True", "True"]


def test_empty_and_long_truncated_replies_are_echoed_short() -> None:
    """An empty failed reply is sent back as a note (providers refuse empty turns); a long
    truncated reply is sent back cut to its beginning, so later attempts stay small."""
    state = start()
    state.next_request()
    with pytest.raises(ModelReplyError):
        state.judge(reply("   "))
    assert state.next_request().messages[2].content == "(empty reply)"
    long_text = '{"replaceElements": {"c": "' + "x" * 10_000
    with pytest.raises(TruncatedReplyError):
        state.judge(reply(long_text, truncated=True, finish_reason="length"))
    echoed = state.next_request().messages[2].content
    assert echoed.startswith(long_text[:2000]) and len(echoed) < 2100
    assert "cut off" in echoed


FAILURES: dict[str, ModelReply] = {
    "prose": reply("Done! I changed c."),
    "syntax": reply('{"updateElements" "c"}'),
    "conflict": reply('{"updateElements": {"a": {"b": {"x": 1}}}}'),
    "truncated": reply('{"updateElements": {"c": "t"}}', truncated=True, finish_reason="length"),
    "unknown": reply('{"updateElement": {"c": "u"}}'),
}
GOOD = reply('{"updateElements": {"c": "new"}}')


@given(
    failures=st.lists(st.sampled_from(sorted(FAILURES)), max_size=6),
    max_retries=st.integers(min_value=0, max_value=5),
)
def test_loop_property(failures: list[str], max_retries: int) -> None:
    """For any run of failing replies followed by a good one: the run succeeds after exactly
    len(failures) + 1 attempts if the policy allows that many, else fails with
    RetriesExhaustedError after max_retries + 1; every request after the first has four
    messages; the caller's payload never changes."""
    script: list[ModelReply] = [FAILURES[name] for name in failures] + [GOOD]
    model = ScriptedModel(script)
    payload = json.loads(json.dumps(PAYLOAD))
    agent = PayloadAgent(model, max_retries=max_retries)
    if len(failures) <= max_retries:
        result = agent.run(payload, "set c")
        assert result.attempts == len(failures) + 1
        assert result.payload["c"] == "new"
    else:
        with pytest.raises(RetriesExhaustedError) as info:
            agent.run(payload, "set c")
        assert info.value.attempts == max_retries + 1
    assert payload == PAYLOAD
    assert all(len(r.messages) == 4 for r in model.requests[1:])
    assert len(model.requests[0].messages) == 2
