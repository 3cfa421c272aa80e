"""The one change-request normaliser: the parser and the merge read a top level alike.

Each case is given to ``parse_change_request`` (as JSON text) and to ``apply_change_request`` (as
a mapping); both must read the same buckets and reasoning, or both refuse what they cannot read
(the parser raises for the model, the merge reports a conflict and applies nothing of it).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_payload import _normalise, merge, parse
from agent_payload.errors import ReplySyntaxError, UnknownFieldError
from agent_payload.merge import apply_change_request
from agent_payload.parse import parse_change_request_with_repairs

PAYLOAD = {"a": 1, "b": 2}

READ_ALIKE: dict[str, tuple[dict[str, Any], dict[str, Any], str | None]] = {
    "snake_case wrapper and bucket, reasoning beside": (
        {"change_request": {"update_elements": {"a": 2}}, "reasoning": "r"},
        {"a": 2, "b": 2},
        "r",
    ),
    "both spellings holding the same content": (
        {"updateElements": {"a": 2}, "update_elements": {"a": 2}},
        {"a": 2, "b": 2},
        None,
    ),
    "wrappers nested five deep": (
        {
            "changeRequest": {
                "changeRequest": {
                    "changeRequest": {
                        "changeRequest": {"changeRequest": {"updateElements": {"a": 3}}}
                    }
                }
            }
        },
        {"a": 3, "b": 2},
        None,
    ),
    "a null wrapper is the empty request": ({"changeRequest": None}, PAYLOAD, None),
    "reasoning as a list of strings": ({"reasoning": ["x", "y"]}, PAYLOAD, "x\ny"),
    "reasoning as an object": ({"reasoning": {"why": 1}}, PAYLOAD, '{"why": 1}'),
    "an absent bucket beside a wrapper": (
        {"updateElements": None, "payloadChangeRequest": {"removeElements": {"b": "DELETE"}}},
        {"a": 1},
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(READ_ALIKE))
def test_the_parser_and_the_merge_read_a_top_level_alike(name: str) -> None:
    """Same request read by both doors: same result, same reasoning, nothing refused."""
    request, expected, reasoning = READ_ALIKE[name]
    parsed = parse_change_request_with_repairs(json.dumps(request)).change_request
    via_parse = apply_change_request(PAYLOAD, parsed)
    direct = apply_change_request(PAYLOAD, request)
    assert via_parse.payload == direct.payload == expected
    assert parsed.reasoning == direct.report.reasoning == reasoning
    assert not direct.report.conflicts and not direct.report.warnings


def test_both_spellings_with_different_content_apply_neither() -> None:
    """Which spelling is meant cannot be known: the parser refuses the reply, the merge
    applies neither and reports a ``both_spellings`` conflict at the snake_case name."""
    request = {"updateElements": {"a": 2}, "update_elements": {"a": 3}}
    with pytest.raises(ReplySyntaxError, match="both updateElements and update_elements"):
        parse_change_request_with_repairs(json.dumps(request))
    result = apply_change_request(PAYLOAD, request)
    assert result.payload == PAYLOAD
    assert [(c.code, c.path) for c in result.report.conflicts] == [
        ("both_spellings", "update_elements")
    ]


def test_an_unknown_field_is_never_data_and_both_suggest_the_same_name() -> None:
    """A misspelt bucket: the parser raises, the merge reports a conflict; both propose the
    camelCase name (also for a snake_case near miss)."""
    for key in ("updateElemnts", "update_elemnts"):
        request = {key: {"a": 2}}
        with pytest.raises(UnknownFieldError) as caught:
            parse_change_request_with_repairs(json.dumps(request))
        assert "did you mean updateElements?" in caught.value.feedback
        result = apply_change_request(PAYLOAD, request)
        assert result.payload == PAYLOAD
        [conflict] = result.report.conflicts
        assert conflict.code == "unknown_field"
        assert "Did you mean updateElements?" in conflict.message


def test_a_wrapper_holding_no_object_is_not_read() -> None:
    """The parser refuses it; the merge applies none of it and reports it at its name."""
    request = {"changeRequest": ["DELETE"]}
    with pytest.raises(ReplySyntaxError, match="changeRequest"):
        parse_change_request_with_repairs(json.dumps(request))
    result = apply_change_request(PAYLOAD, request)
    assert result.payload == PAYLOAD
    assert [(c.code, c.path) for c in result.report.conflicts] == [
        ("unknown_field", "changeRequest")
    ]


def test_one_list_of_wrappers() -> None:
    """The parser and the merge export the normaliser's wrappers, not copies."""
    assert parse.WRAPPERS is merge.WRAPPERS is _normalise.WRAPPERS
