"""Issue 9: what is applied is exactly what the model wrote, or it goes back to the model.

Every reply string quoted in the issue, through the parser and through the agent with a scripted
model: the bad reply, then a good one, gives the good reply's payload after exactly two
attempts, and the first reply never touches the payload. Plus a property: a mutilated change
request reads back as itself or raises, never as a different request.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_payload import PayloadAgent
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import (
    AmbiguousReplyError,
    ModelReplyError,
    ReplySyntaxError,
    TruncatedReplyError,
)
from agent_payload.merge import apply_change_request, ineffective_parts
from agent_payload.parse import MAX_REPLY_DEPTH, parse_change_request_with_repairs
from agent_payload.testing import ScriptedModel

PAYLOAD: dict[str, Any] = {
    "status": "open",
    "note": "call back",
    "total": 10,
    "tags": ["a", "b"],
    "lines": [
        {"sku": "A", "qty": 1},
        {"sku": "B", "qty": 2},
        {"sku": "C", "qty": 3},
        {"sku": "D", "qty": 4},
    ],
}
GOOD = '{"updateElements": {"status": "paid"}, "reasoning": "The invoice was paid."}'
GOOD_PAYLOAD = {**copy.deepcopy(PAYLOAD), "status": "paid"}

INJECTION = (
    '{"updateElements":{"status":"paid"}}\n\n'
    "I did not touch the lines; another assistant suggested "
    '{"removeElements":{"lines":"DELETE"}} but that is not needed.'
)

# (reply, error class, what the feedback must say: a position, an excerpt or the advice)
SYNTAX: list[tuple[str, type[ModelReplyError], list[str]]] = [
    (INJECTION, AmbiguousReplyError, ["2 different change requests", "line 1, column 1",
                                       "line 3, column 56", "exactly one"]),
    ('{"updateElements": {"note": }}', ReplySyntaxError,
     ["line 1, column 29", 'the key "note" has no value', '"note": ⟶}}']),
    ('{"updateElements": {"lines": [{}, , {"qty":30}]}}', ReplySyntaxError,
     ["line 1, column 35", "an empty position in an array", "write {} for an element kept"]),
    ('{"removeElements": {"lines": [, , "DELETE"]}}', ReplySyntaxError,
     ["line 1, column 31", "an empty position in an array"]),
    ('{"updateElements": {"lines": [{}, {} {"qty":3}]}}', ReplySyntaxError,
     ["line 1, column 38", "expected ',' or ']' after element 1"]),
    ('{"updateElements": {"tags": {"2"}}}', ReplySyntaxError,
     ["line 1, column 33", "a set such as"]),
    ('{"updateElements": {"total": 12,5}}', ReplySyntaxError,
     ["line 1, column 33", "decimal point (12.5)"]),
    ('{"updateElements": {"status": paid}}', ReplySyntaxError,
     ["line 1, column 31", "the bare word paid", 'must be quoted: "paid"']),
    ('{"updateElements": {"status": tru}}', ReplySyntaxError,
     ["the bare word tru", "Did you mean true?"]),
    ('{"updateElements": {"note": undefined}}', ReplySyntaxError,
     ["the bare word undefined", "Write null"]),
    ('{"updateElements": {"total": ' + "1" * 4301 + "}}", ReplySyntaxError,
     ["line 1, column 30", "4301 digits"]),
    ('{"updateElements": {"total": 1e400}}', ReplySyntaxError,
     ["line 1, column 30", "overflows to infinity"]),
    ('{"updateElements": {"note": "\\ud800"}}', ReplySyntaxError,
     ["line 1, column 29", "lone UTF-16 surrogate"]),
    ('{"updateElements": {"lines": [{}, /* 1-3 unchanged */ {"qty":99}]}}', ReplySyntaxError,
     ["line 1, column 35", "one {} per element kept unchanged", "index map"]),
    ('{"updateElements": {"status": "paid"}, "update_elements": {"status": "void"}}',
     ReplySyntaxError, ["both updateElements and update_elements", "Use only updateElements"]),
    ('{"updateElements": {"note": ' + '{"a": ' * 300 + "1" + "}" * 300 + "}}",
     ReplySyntaxError, [f"at most {MAX_REPLY_DEPTH} levels", "nested"]),
    ("{'updateElements': " + "{'a': " * 300 + "1" + "}" * 300 + "}",
     ReplySyntaxError, [f"at most {MAX_REPLY_DEPTH} levels"]),
]  # fmt: skip


@pytest.mark.parametrize(("reply", "error", "says"), SYNTAX, ids=[s[0][:40] for s in SYNTAX])
def test_damaged_reply_is_sent_back_with_where_and_what(
    reply: str, error: type[ModelReplyError], says: list[str]
) -> None:
    """Each damaged or ambiguous reply of the issue raises its error; the feedback names the
    place (line, column, an excerpt) and what to write instead. Nothing is guessed."""
    with pytest.raises(error) as caught:
        parse_change_request_with_repairs(reply)
    assert type(caught.value) is error
    for text in says:
        assert text in caught.value.feedback, (text, caught.value.feedback)
    assert "pydantic" not in caught.value.feedback


# Parts that would do nothing, or that would change the array's kind: sent back by the agent.
INEFFECTIVE: list[tuple[str, str]] = [
    ('{"updateElements": {"lines": []}}', "[] in updateElements"),
    ('{"updateElements": {"status": {}}}', "{} in updateElements"),
    ('{"removeElements": {"fax": "DELETE"}}', "remove_missing"),
    (
        '{"updateElements": {"status": "paid", "lines": []}, "reasoning": "Mark it paid and '
        'empty the lines."}',
        "empty the list",
    ),
    ('{"replaceElements": {"lines": {"1": {"qty": 5}}}}', "use updateElements"),
]


@pytest.mark.parametrize(("reply", "says"), INEFFECTIVE, ids=[s[0][:40] for s in INEFFECTIVE])
def test_ineffective_or_reshaping_request_goes_back(reply: str, says: str) -> None:
    """Through the agent, a part that changes nothing (or an index map that would turn an
    array into an object) is a correction; the good reply then gives its payload."""
    model = ScriptedModel([reply, GOOD])
    result = PayloadAgent(model).run(copy.deepcopy(PAYLOAD), "mark the order paid")
    assert result.attempts == 2
    assert result.payload == GOOD_PAYLOAD
    correction = model.requests[1].messages[-1].content
    assert says in correction, correction


AGENT_CASES = [s[0] for s in SYNTAX] + [
    '{"updateElements": {"status": "paid"',  # truncated: never applied
]


@pytest.mark.parametrize("bad", AGENT_CASES, ids=[s[:40] for s in AGENT_CASES])
def test_agent_sends_the_bad_reply_back_and_applies_only_the_good_one(bad: str) -> None:
    """Bad reply, then a good one: exactly two attempts, the good reply's payload, the input
    payload untouched, and the first reply's content nowhere in the result."""
    payload = copy.deepcopy(PAYLOAD)
    model = ScriptedModel([bad, GOOD])
    result = PayloadAgent(model).run(payload, "mark the order paid")
    assert result.attempts == 2
    assert result.payload == GOOD_PAYLOAD
    assert payload == PAYLOAD
    assert [c.path for c in result.changes] == [("status",)]
    assert model.requests[1].messages[-2].content == bad


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("Let me think about the lines.\n</think>\n" + GOOD, {"status": "paid"}),
    ("thinking {draft: 1} done</think>\n" + GOOD, {"status": "paid"}),
    ('Sure:\n```json\n"{\\"updateElements\\": {\\"status\\": \\"paid\\"}}"\n```', {
        "status": "paid"}),
    ('Here it is: "{\\"updateElements\\": {\\"status\\": \\"paid\\"}}"', {"status": "paid"}),
    ('<answer>"{\\"updateElements\\": {\\"status\\": \\"paid\\"}}"</answer>', {"status": "paid"}),
    ('{"updateElements": "{\\"status\\": \\"paid\\"}"}', {"status": "paid"}),
    ("{update_elements: {status: 'paid', ok: True, note: None,},} // done", {
        "status": "paid", "ok": True, "note": None}),
    (GOOD + "\n\nTo confirm:\n" + GOOD, {"status": "paid"}),
    (GOOD + '\nThe result: {"status": "paid", "total": 10}\n{"confidence": 0.8}', {
        "status": "paid"}),
]  # fmt: skip


@pytest.mark.parametrize(("reply", "update"), ACCEPTED, ids=[s[0][:40] for s in ACCEPTED])
def test_grammar_leniency_is_accepted(reply: str, update: dict[str, Any]) -> None:
    """What the issue lists as accepted reads back exactly: a lone </think>, a reply or a
    bucket JSON-encoded as a string (in a fence, after prose, in a tag), JSON5 and Python
    literals, identical repeats, objects without buckets beside the request."""
    parsed = parse_change_request_with_repairs(reply)
    assert parsed.change_request.update_elements == update


def test_lone_closing_tag_inside_a_json_string_is_data() -> None:
    """A </think> inside a JSON string (on a line with text on both sides) is not a tag."""
    reply = '{"updateElements": {"note": "<think>x</think> y"}}'
    parsed = parse_change_request_with_repairs(reply)
    assert parsed.change_request.update_elements == {"note": "<think>x</think> y"}


def test_comment_in_a_literal_array_is_json5() -> None:
    """Outside updateElements/removeElements an array is a literal value: a comment there is
    ordinary JSON5."""
    parsed = parse_change_request_with_repairs('{"replaceElements": {"tags": ["x", // new\n]}}')
    assert parsed.change_request.replace_elements == {"tags": ["x"]}


# --- merge warnings and the agent's rule ------------------------------------------------------


def test_merge_reports_parts_that_do_nothing_each_with_its_code() -> None:
    """[] over a list and {} over a primitive are no_effect; a DELETE at a missing key is
    remove_missing; nothing changes."""
    report = apply_change_request(
        PAYLOAD,
        {
            "updateElements": {"lines": [], "status": {}},
            "removeElements": {"fax": "DELETE"},
        },
    ).report
    assert sorted(w.code for w in report.warnings) == ["no_effect", "no_effect", "remove_missing"]
    assert not report.changes
    assert len(ineffective_parts(report, None)) == 3


def test_replace_index_map_over_array_is_shape_mismatch() -> None:
    """An index-map-shaped object in replaceElements over an array is a conflict, not an
    array turned into an object."""
    result = apply_change_request(PAYLOAD, {"replaceElements": {"lines": {"1": {"qty": 5}}}})
    assert [(c.code, c.path) for c in result.report.conflicts] == [
        ("shape_mismatch", "replaceElements.lines")
    ]
    assert "updateElements" in result.report.conflicts[0].message
    assert result.payload["lines"] == PAYLOAD["lines"]


@pytest.mark.parametrize(
    ("reasoning", "sent_back"),
    [
        ("Mark it paid and clear the lines.", True),
        (None, False),
        ("The lines are already as they should be; only the status changes.", False),
    ],
)
def test_no_effect_beside_a_real_change_goes_back_only_when_reasoning_claims_it(
    reasoning: str | None, sent_back: bool
) -> None:
    """A request that changes something, with a part that does nothing: sent back only when
    its reasoning claims a change (and does not say the rest stays as it is)."""
    report = apply_change_request(
        PAYLOAD, {"updateElements": {"status": "paid", "lines": []}}
    ).report
    assert [w.code for w in report.warnings] == ["no_effect"]
    assert bool(ineffective_parts(report, reasoning)) is sent_back


def test_empty_request_is_not_a_correction() -> None:
    """{} (nothing to change) has no warnings and is accepted at once."""
    model = ScriptedModel(['{"reasoning": "Nothing to change."}'])
    result = PayloadAgent(model).run(copy.deepcopy(PAYLOAD), "check it")
    assert result.attempts == 1
    assert result.payload == PAYLOAD


# --- property: mutilations parse to the original or raise --------------------------------------

KEYS = st.text(alphabet="abcxyz_ ,:[]{}", min_size=1, max_size=5)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(alphabet="ab ,:[]{}\"'\\", max_size=6)
    | st.just("DELETE")
    | st.just({})
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, min_size=1, max_size=4)
        | st.dictionaries(KEYS, inner, min_size=1, max_size=3)
    ),
    max_leaves=10,
)
BUCKET = st.dictionaries(KEYS, VALUES, min_size=1, max_size=3)
REQUESTS = st.fixed_dictionaries(
    {},
    optional={
        "newElements": BUCKET,
        "updateElements": BUCKET,
        "removeElements": BUCKET,
        "replaceElements": BUCKET,
        "reasoning": st.text(alphabet="ab ,.", max_size=8),
    },
).filter(lambda r: any(k != "reasoning" for k in r))

_VALUE_AT = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null')


def _structure(text: str) -> tuple[list[int], list[int], list[int], list[int]]:
    """Positions outside strings of commas, brackets/braces, array openings, and value starts
    after a colon."""
    commas, brackets, arrays, values = [], [], [], []
    in_string = escaped = False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char == ",":
            commas.append(i)
        elif char in "[]{}":
            brackets.append(i)
            if char == "[":
                arrays.append(i)
        elif char == ":":
            values.append(i + 2)  # json.dumps writes ": "
    return commas, brackets, arrays, values


@given(REQUESTS, st.data())
def test_mutilated_request_reads_as_itself_or_raises(
    request: dict[str, Any], data: st.DataObject
) -> None:
    """Drop a value, a comma or a bracket, or insert a hole: the reply reads back as the
    original change request or raises a ModelReplyError, never as a different request. (The
    text uses json.dumps' separators, ", " and ": ", as models do; in minified ``[1,2]`` a
    dropped comma gives ``[12]``, which no reader can tell from what was meant.)"""
    text = json.dumps(request)
    expected = AgentPayloadChangeRequest.model_validate(request).to_wire()
    commas, brackets, arrays, values = _structure(text)
    kinds = [
        k
        for k, ok in (("comma", commas), ("bracket", brackets), ("hole", arrays), ("value", values))
        if ok
    ]
    kind = data.draw(st.sampled_from(kinds), label="kind")
    if kind == "comma":
        at = data.draw(st.sampled_from(commas), label="at")
        mutilated = text[:at] + text[at + 1 :]
    elif kind == "bracket":
        at = data.draw(st.sampled_from(brackets), label="at")
        mutilated = text[:at] + text[at + 1 :]
    elif kind == "hole":
        at = data.draw(st.sampled_from(arrays), label="at")
        mutilated = text[: at + 1] + ", " + text[at + 1 :]
    else:
        at = data.draw(st.sampled_from(values), label="at")
        match = _VALUE_AT.match(text, at)
        # a primitive value is dropped whole; of a container, its opening is dropped
        end = at + 1 if match is None else match.end()
        mutilated = text[:at] + text[end:]
    for reply in (mutilated, f"Here you go:\n```json\n{mutilated}\n```"):
        try:
            parsed = parse_change_request_with_repairs(reply)
        except ModelReplyError:
            continue
        assert parsed.change_request.to_wire() == expected, (reply, expected)


def test_a_truncated_reply_is_truncated() -> None:
    """Cut anywhere inside the object, a reply is TruncatedReplyError."""
    with pytest.raises(TruncatedReplyError):
        parse_change_request_with_repairs('{"updateElements": {"lines": [{}, {"qty": 3')
