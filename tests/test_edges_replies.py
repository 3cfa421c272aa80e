"""Issue 30: replies whose answer is marked as such (gpt-oss harmony channels, an answer tag
beside a draft) are read from the answer, not refused as ambiguous."""

from __future__ import annotations

import pytest

from agent_payload.errors import AmbiguousReplyError
from agent_payload.parse import parse_change_request

HARMONY = (
    "<|channel|>analysis<|message|>The user wants a=2. Draft: "
    '{"updateElements": {"a": 1}} no wait.<|end|>'
    '<|start|>assistant<|channel|>final<|message|>{"updateElements": {"a": 2}}'
)


@pytest.mark.parametrize(
    "reply",
    [
        HARMONY,
        "<|start|>assistant" + HARMONY + "<|return|>",
        HARMONY.replace("<|channel|>final", "<|channel|>final <|constrain|>json"),
        '<draft>{"updateElements": {"a": 1}}</draft>\n'
        '<final_answer>{"updateElements": {"a": 2}}</final_answer>',
        '<draft>{"updateElements": {"a": 1}}</draft>\n'
        '<answer>\n{"updateElements": {"a": 2}}\n</answer>',
        '<answer>{"updateElements": {"a": 2}}</answer>\n'
        '<draft>{"updateElements": {"a": 1}}</draft>',
    ],
)
def test_the_marked_answer_is_read(reply: str) -> None:
    assert parse_change_request(reply).update_elements == {"a": 2}


def test_an_analysis_channel_alone_is_not_set_aside_and_a_draft_alone_is_still_ambiguous() -> None:
    only_analysis = '<|channel|>analysis<|message|>{"updateElements": {"a": 1}}<|end|>'
    assert parse_change_request(only_analysis).update_elements == {"a": 1}
    with pytest.raises(AmbiguousReplyError):
        parse_change_request(
            '<draft>{"updateElements": {"a": 1}}</draft>\n{"updateElements": {"a": 2}}'
        )


def test_two_different_final_answers_are_still_ambiguous() -> None:
    with pytest.raises(AmbiguousReplyError):
        parse_change_request(
            '<answer>{"updateElements": {"a": 1}}</answer><answer>{"updateElements": {"a": 2}}'
            "</answer>"
        )
