"""The parser: model text -> change request (agent_payload.parse).

The corpus in ``tests/parse_corpus/replies.jsonl`` holds realistic raw replies in the styles of
different models, one JSON object a line::

    {"name", "style", "reply", "finish_reason", "expected": <wire dict> | null,
     "error": "TruncatedReplyError" | ... | null, "repairs": [...]  (optional)}

``expected`` is the change request's wire form (``to_wire()``: camelCase, empty buckets left
out). ``repairs``, when given, must all be recorded (``[]``: the reply needed none).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_payload import errors
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import (
    AmbiguousReplyError,
    ModelReplyError,
    NoChangeRequestError,
    RefusalError,
    ReplySyntaxError,
    TruncatedReplyError,
    UnknownFieldError,
    UsageError,
)
from agent_payload.parse import (
    ParsedReply,
    parse_change_request,
    parse_change_request_with_repairs,
)
from agent_payload.prompts import render_correction

CORPUS = Path(__file__).parent / "parse_corpus" / "replies.jsonl"


def _load_corpus() -> list[dict[str, Any]]:
    with CORPUS.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


CASES = _load_corpus()


def test_corpus_is_large_and_varied() -> None:
    """The corpus holds at least 100 replies, in many styles, with unique names, and both
    successes and every kind of reply error."""
    assert len(CASES) >= 100
    assert len({case["name"] for case in CASES}) == len(CASES)
    assert len({case["style"] for case in CASES}) >= 12
    kinds = {case["error"] for case in CASES}
    assert {
        None,
        "TruncatedReplyError",
        "NoChangeRequestError",
        "RefusalError",
        "UnknownFieldError",
        "ReplySyntaxError",
    } <= kinds
    for case in CASES:
        assert (case["expected"] is None) == (case["error"] is not None), case["name"]


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_corpus(case: dict[str, Any]) -> None:
    """Each corpus reply gives its expected change request (and records the expected repairs),
    or raises its expected error, with feedback for the model."""
    if case["error"] is not None:
        error_type = getattr(errors, case["error"])
        with pytest.raises(error_type) as caught:
            parse_change_request(case["reply"], finish_reason=case["finish_reason"])
        assert type(caught.value) is error_type
        assert caught.value.feedback.strip()
        assert caught.value.problems
        assert caught.value.reply == case["reply"]
        if "feedback_contains" in case:  # the position or advice the model is given
            assert case["feedback_contains"] in caught.value.feedback
        return
    parsed = parse_change_request_with_repairs(case["reply"], finish_reason=case["finish_reason"])
    assert parsed.change_request.to_wire() == case["expected"]
    if "repairs" in case:
        if case["repairs"] == []:
            assert parsed.repairs == ()
        for repair in case["repairs"]:
            assert repair in parsed.repairs


# --- the API --------------------------------------------------------------------------------


def test_parse_change_request_returns_the_model() -> None:
    """parse_change_request returns an AgentPayloadChangeRequest with every field set."""
    request = parse_change_request(
        '{"newElements": {"n": 1}, "updateElements": {"u": 2}, "removeElements": {"r": '
        '"DELETE"}, "replaceElements": {"p": [3]}, "reasoning": "why"}'
    )
    assert isinstance(request, AgentPayloadChangeRequest)
    assert request.new_elements == {"n": 1}
    assert request.update_elements == {"u": 2}
    assert request.remove_elements == {"r": "DELETE"}
    assert request.replace_elements == {"p": [3]}
    assert request.reasoning == "why"


def test_with_repairs_returns_frozen_parsed_reply_and_raw_json() -> None:
    """The repairs variant returns a frozen ParsedReply whose raw_json is the JSON text used
    (the fenced object, without fence or prose)."""
    parsed = parse_change_request_with_repairs(
        'Here:\n```json\n{"updateElements": {"a": 1}}\n```\nDone.'
    )
    assert isinstance(parsed, ParsedReply)
    assert parsed.raw_json == '{"updateElements": {"a": 1}}'
    assert parsed.repairs == ("removed code fence", "ignored text around the JSON object")
    with pytest.raises(AttributeError):
        parsed.repairs = ()  # type: ignore[misc]


def test_strict_reply_records_no_repairs() -> None:
    """A bare strict JSON reply is read as is: no repairs, raw_json is the text."""
    text = '  {"updateElements": {"a": 1}}\n'
    parsed = parse_change_request_with_repairs(text)
    assert parsed.repairs == ()
    assert parsed.raw_json == text.strip()


def test_none_reply_is_no_change_request() -> None:
    """A reply with no text at all (None content, e.g. a tool-only turn) is NoChangeRequestError."""
    with pytest.raises(NoChangeRequestError):
        parse_change_request(None)


def test_non_text_reply_is_a_usage_error() -> None:
    """Bytes are the caller's mistake, not the model's: UsageError, not a ModelReplyError."""
    with pytest.raises(UsageError):
        parse_change_request(b'{"updateElements": {}}')  # type: ignore[arg-type]


# --- choosing the object --------------------------------------------------------------------


def test_objects_without_buckets_are_not_candidates() -> None:
    """An echo of the payload or metadata beside the change request is not a change request:
    the one object with buckets is taken."""
    text = (
        'Answer: {"updateElements": {"a": 1}}\nResult: {"a": 1, "b": 2}\nMeta: {"confidence": 0.8}'
    )
    assert parse_change_request(text).to_wire() == {"updateElements": {"a": 1}}


def test_an_example_and_an_answer_are_ambiguous() -> None:
    """Two different change requests (an example, then the answer) are not applied: the error
    says how many there were and where each starts (the last one used to win)."""
    text = 'Example: {"updateElements": {"a": 0}}\nAnswer: {"updateElements": {"a": 1}}'
    with pytest.raises(AmbiguousReplyError) as caught:
        parse_change_request(text)
    assert "2 different change requests" in caught.value.feedback
    assert "line 1, column 10" in caught.value.feedback
    assert "line 2, column 9" in caught.value.feedback
    assert caught.value.problems[0].code == "ambiguous_reply"


def test_braces_inside_strings_do_not_confuse_the_scanner() -> None:
    """Braces and quotes inside strings (both quote styles) and comments do not end the object."""
    text = 'Sure:\n{updateElements: {a: \'}{\', b: "{\\"}", // } not the end\n c: 1 /* { */}}\nbye'
    assert parse_change_request(text).to_wire() == {
        "updateElements": {"a": "}{", "b": '{"}', "c": 1}
    }


def test_python_literals_are_converted_only_outside_strings() -> None:
    """True/False/None become JSON outside strings; the same words inside strings stay text."""
    request = parse_change_request("{'updateElements': {'t': True, 's': 'True None', 'n': None}}")
    assert request.update_elements == {"t": True, "s": "True None", "n": None}


def test_near_miss_bucket_later_is_a_candidate_not_skipped() -> None:
    """A later object with a misspelt bucket counts as a change request: beside an earlier one
    the reply is ambiguous (it is not skipped in favour of the example); alone it is an
    unknown field."""
    with pytest.raises(AmbiguousReplyError):
        parse_change_request('Example: {"updateElements": {"a": 0}}\n{"updateElement": {"a": 1}}')
    with pytest.raises(UnknownFieldError) as caught:
        parse_change_request('Here:\n{"updateElement": {"a": 1}}')
    assert caught.value.fields == ["updateElement"]


# --- repairs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "repair"),
    [
        ("```json\n{}\n```", "removed code fence"),
        ("<answer>{}</answer>", "removed <answer> tags"),
        ("<thinking>{}</thinking>\n{}", "removed <thinking> block"),
        ('{"updateElements": {"a": 1}, // c\n}', "stripped // comments (json5)"),
        ('{"updateElements": /* c */ {}}', "stripped /* */ comments (json5)"),
        ("{'updateElements': {}}", "read single-quoted strings (json5)"),
        ("{updateElements: {}}", "read unquoted keys (json5)"),
        ('{"updateElements": [1,],}', "removed trailing commas (json5)"),
        ('{"updateElements": {"a": None}}', "converted Python literals True/False/None to JSON"),
        ('{"changeRequest": {"updateElements": {}}}', "unwrapped changeRequest"),
        ('{"update_elements": {"a": 1}}', "renamed update_elements to updateElements"),
        ('{"updateElements": "{\\"a\\": 1}"}', "decoded updateElements from a JSON string"),
        ('"{}"', "decoded the change request from a JSON string"),
        ('{"reasoning": {"why": 1}}', "converted reasoning from an object to text"),
        ("\ufeff{}", "removed byte-order mark"),
        ("{updateElements: {mask: 0xFF}}", "read JSON5 syntax (json5)"),
        ("{updateElements: {mask: 0xFF}}", "read unquoted keys (json5)"),
        ('{"updateElements": {"a": "x\ny"}}', "accepted raw control characters inside strings"),
        ('{"updateElements": {"a": 1}, # c\n}', "stripped # comments"),
        ('{"newElements": "  "}', "treated the empty string in newElements as absent"),
        ('{"reasoning": ["a", "b"]}', "joined reasoning from a list of strings"),
        (
            'Ex: {"updateElements": {}}\n{"newElements": {}}',
            "read 2 identical change requests as one (the last is used)",
        ),
        ("Sure:\n{}", "ignored text around the JSON object"),
    ],
)
def test_each_repair_is_recorded(text: str, repair: str) -> None:
    """Every repair or normalisation the parser makes is named in ParsedReply.repairs."""
    assert repair in parse_change_request_with_repairs(text).repairs


def test_an_unbalanced_bracket_is_never_repaired() -> None:
    """A ] missing or a } too many is sent back with its line and column: where the bracket
    belonged is a guess (json_repair used to make it)."""
    with pytest.raises(ReplySyntaxError) as caught:
        parse_change_request('{"updateElements": {"items": [{}, {"v": 1}}}')
    assert "line 1, column 43" in caught.value.feedback
    assert "expected ',' or ']' after element 1" in caught.value.feedback


def test_garbage_value_is_a_syntax_error() -> None:
    """A value that is no JSON value is ReplySyntaxError rather than a guessed change."""
    with pytest.raises(ReplySyntaxError):
        parse_change_request('{"updateElements": {"price": @@, "qty": 2}}')


def test_empty_string_bucket_is_absent() -> None:
    """A bucket given as "" (models filling every field) is absent, and that is recorded."""
    parsed = parse_change_request_with_repairs('{"updateElements": {"a": 1}, "newElements": ""}')
    assert parsed.change_request.to_wire() == {"updateElements": {"a": 1}}
    assert "treated the empty string in newElements as absent" in parsed.repairs


def test_unicode_unquoted_keys_are_read() -> None:
    """Unquoted keys may be non-ASCII identifiers, as in JSON5."""
    request = parse_change_request("{updateElements: {ключ: 'значение', café: 1,},}")
    assert request.update_elements == {"ключ": "значение", "café": 1}


def test_missing_bracket_before_reasoning_is_refused() -> None:
    """A missing ] is ReplySyntaxError at its place, not a restructured change request."""
    with pytest.raises(ReplySyntaxError) as caught:
        parse_change_request('{"updateElements": {"items": [{}, {"v": 1}}, "reasoning": "x"}')
    assert "line 1, column 43" in caught.value.feedback


def test_prose_braces_are_never_data() -> None:
    """Prose in braces is not turned into data."""
    with pytest.raises(NoChangeRequestError):
        parse_change_request("Set {the price} as {requested}.")


# --- wrappers and spellings ---------------------------------------------------------------------


def test_wrapper_keeps_outer_reasoning_and_inner_wins() -> None:
    """reasoning beside a wrapper is kept; when both exist the inner one wins."""
    outer = parse_change_request(
        '{"reasoning": "o", "changeRequest": {"updateElements": {"a": 1}}}'
    )
    assert outer.reasoning == "o"
    both = parse_change_request(
        '{"reasoning": "o", "changeRequest": {"updateElements": {"a": 1}, "reasoning": "i"}}'
    )
    assert both.reasoning == "i"


def test_wrapper_beside_own_bucket_is_unknown_with_hint() -> None:
    """A wrapper standing beside a bucket is not unwrapped: it is an unknown field, and the
    message says to move its fields to the top level."""
    with pytest.raises(UnknownFieldError) as caught:
        parse_change_request(
            '{"updateElements": {"a": 1}, "payloadChangeRequest": {"updateElements": {}}}'
        )
    assert caught.value.fields == ["payloadChangeRequest"]
    assert "move its fields to the top level" in str(caught.value)


def test_both_spellings_with_different_content_are_an_error() -> None:
    """Both spellings of one bucket holding different content go back to the model (camelCase
    used to win silently); holding the same content they are read as one, recorded."""
    with pytest.raises(ReplySyntaxError) as caught:
        parse_change_request(
            '{"removeElements": {"a": "DELETE"}, "remove_elements": {"b": "DELETE"}}'
        )
    assert caught.value.problems[0].path == "removeElements"
    assert "both removeElements and remove_elements" in caught.value.feedback
    parsed = parse_change_request_with_repairs(
        '{"removeElements": {"a": "DELETE"}, "remove_elements": {"a": "DELETE"}}'
    )
    assert parsed.change_request.remove_elements == {"a": "DELETE"}
    assert "read remove_elements and removeElements, which hold the same, as one" in (
        parsed.repairs
    )


def test_list_buckets_are_valid() -> None:
    """Lists are valid buckets (array-root payloads); the parser does not judge shape."""
    request = parse_change_request('{"newElements": [1, 2], "updateElements": [{}, {"a": 1}]}')
    assert request.new_elements == [1, 2]
    assert request.update_elements == [{}, {"a": 1}]


@pytest.mark.parametrize(
    "text",
    ["{}", '{"reasoning": "nothing to do"}', '{"newElements": {}, "updateElements": null}'],
)
def test_empty_change_requests_are_valid(text: str) -> None:
    """{} , reasoning alone and all-empty buckets are a valid, empty change request."""
    assert parse_change_request(text).is_empty()


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("updateElement", "updateElements"),
        ("UpdateElements", "updateElements"),
        ("new_element", "newElements"),
        ("removeElement", "removeElements"),
        ("replace", "replaceElements"),
        ("reason", "reasoning"),
    ],
)
def test_unknown_field_suggests_the_nearest_name(name: str, suggestion: str) -> None:
    """An unknown top-level field is an error that suggests the nearest valid name (camelCase)
    and names the field as its path; nothing is guessed."""
    with pytest.raises(UnknownFieldError) as caught:
        parse_change_request(json.dumps({name: {"a": 1}}))
    error = caught.value
    assert f"did you mean {suggestion}?" in str(error)
    assert error.fields == [name]
    assert [p.path for p in error.problems] == [name]
    assert error.problems[0].kind == "unknown_field"
    assert f"did you mean {suggestion}?" in error.feedback


def test_unknown_field_path_for_odd_names() -> None:
    """Field names that are not identifiers are written as bracketed JSON strings."""
    with pytest.raises(UnknownFieldError) as caught:
        parse_change_request('{"$meta": 1, "1z": 2}')
    assert [p.path for p in caught.value.problems] == ['["$meta"]', '["1z"]']


@pytest.mark.parametrize("reason", ["length", "max_tokens", "MAX_TOKENS", "max_output_tokens"])
def test_token_limit_finish_reason_is_truncated_even_when_complete(reason: str) -> None:
    """A token-limit finish reason means truncated, even if the text looks complete."""
    with pytest.raises(TruncatedReplyError) as caught:
        parse_change_request('{"updateElements": {"a": 1}}', finish_reason=reason)
    assert caught.value.problems[0].kind == "truncated"
    assert "cut off at the output length limit" in caught.value.feedback


@pytest.mark.parametrize("reason", ["refusal", "content_filter", "SAFETY"])
def test_refusal_finish_reason_is_refusal(reason: str) -> None:
    """A refusal or filter finish reason is RefusalError, whatever the text."""
    with pytest.raises(RefusalError) as caught:
        parse_change_request('{"updateElements": {"a": 1}}', finish_reason=reason)
    assert caught.value.problems[0].kind == "refusal"


def test_truncated_reply_is_never_repaired() -> None:
    """A reply cut inside the object is TruncatedReplyError: json_repair would have produced a
    partial change here, and must not be used."""
    with pytest.raises(TruncatedReplyError) as caught:
        parse_change_request('{"updateElements": {"a": 1, "items": [{}, {"v": 2')
    assert "line 1, column 1" in str(caught.value)


def test_every_cut_of_a_damaged_reply_is_truncated() -> None:
    """Every prefix of a damaged reply that ends inside the object is TruncatedReplyError, and
    the whole is a syntax error: never a partial change."""
    text = 'Sure:\n```json\n{"updateElements": {"items": [{}, {"v": 1}}}\n```'
    end = text.index("}}}") + 2
    for cut in range(text.index("{") + 1, end):
        with pytest.raises(TruncatedReplyError):
            parse_change_request(text[:cut])
    with pytest.raises(ReplySyntaxError):
        parse_change_request(text)


def test_feedback_is_rendered_from_the_correction_template() -> None:
    """Every error's feedback is exactly render_correction(problems) (truncation adds its
    advice)."""
    texts = [
        ("{'updateElement': {}}", False),
        ("I can't help with that.", False),
        ("Nothing here.", False),
        ('{"updateElements": {"a": NaN}}', False),
        ('{"updateElements": {"a"', True),
    ]
    for text, truncated in texts:
        with pytest.raises(ModelReplyError) as caught:
            parse_change_request(text)
        error = caught.value
        assert error.feedback == render_correction(error.problems, reply_was_truncated=truncated)


@pytest.mark.slow
def test_the_feedback_is_rendered_when_only_the_parser_is_imported() -> None:
    """A program that imports only ``agent_payload.parse`` still gets the rendered correction
    as ``feedback`` (rendered by the prompts layer when first read)."""
    import subprocess
    import sys

    code = (
        "from agent_payload.parse import parse_change_request\n"
        "try:\n"
        "    parse_change_request('{\"updateElement\": {}}')\n"
        "except Exception as exc:\n"
        "    print(exc.feedback)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    with pytest.raises(UnknownFieldError) as caught:
        parse_change_request('{"updateElement": {}}')
    assert out == render_correction(caught.value.problems) + "\n"


def test_errors_are_chained_where_there_is_a_cause() -> None:
    """A syntax error from an unreadable object chains the reader's exception."""
    with pytest.raises(ReplySyntaxError) as caught:
        parse_change_request('{"updateElements": {"a": NaN}}')
    assert caught.value.__cause__ is not None


def test_unreadable_request_object_is_syntax_error_with_location() -> None:
    """An object shaped like a change request that cannot be read is ReplySyntaxError naming
    the line and column of the damage, with a short excerpt."""
    with pytest.raises(ReplySyntaxError) as caught:
        parse_change_request('text\n  {"updateElements": {"a": 1e}}')
    assert "line 2, column 28" in str(caught.value)
    assert "1e" in caught.value.feedback
    assert '"a": ⟶1e}}' in caught.value.feedback


def test_bucket_of_wrong_type_names_its_path() -> None:
    """A bucket that is a number or plain string is ReplySyntaxError at the bucket's path."""
    with pytest.raises(ReplySyntaxError) as caught:
        parse_change_request('{"replaceElements": true}')
    assert caught.value.problems[0].path == "replaceElements"


@pytest.mark.slow
def test_megabyte_chatty_reply_is_read_by_the_grammar() -> None:
    """A 1 MB reply in the chatty style (comments between object members, unquoted keys,
    single quotes, trailing commas, Python literals) is read exactly, and the repairs are
    recorded. (Comments sit after the objects' members: inside an updateElements array they
    would be an error, in replaceElements they are allowed.)"""
    rows = "\n".join(
        f"    {{id: {i}, name: 'row {i}', ok: True, tags: ['x', 'y',],}}, // row {i}"
        for i in range(14_000)
    )
    text = f"Sure!\n```json\n{{\n  replaceElements: {{rows: [\n{rows}\n  ]}},\n}}\n```"
    assert len(text) > 1_000_000
    parsed = parse_change_request_with_repairs(text)
    rows_read = parsed.change_request.replace_elements["rows"]  # type: ignore[index,call-overload]
    assert len(rows_read) == 14_000
    assert rows_read[7] == {"id": 7, "name": "row 7", "ok": True, "tags": ["x", "y"]}
    for repair in (
        "stripped // comments (json5)",
        "read unquoted keys (json5)",
        "read single-quoted strings (json5)",
        "removed trailing commas (json5)",
        "converted Python literals True/False/None to JSON",
    ):
        assert repair in parsed.repairs


# --- size -----------------------------------------------------------------------------------------


def _big_request(n: int) -> dict[str, Any]:
    return {
        "replaceElements": {
            "rows": [{"id": i, "name": f"row {i}", "tags": ["x", "y"]} for i in range(n)]
        },
        "reasoning": "rewrite",
    }


@pytest.mark.parametrize("wrap", ["bare", "fenced"])
def test_megabyte_reply_parses(wrap: str) -> None:
    """A 1 MB reply, bare or fenced in prose, reads back whole."""
    body = json.dumps(_big_request(20_000))
    assert len(body) > 1_000_000
    text = body if wrap == "bare" else f"Here you go:\n```json\n{body}\n```\nDone."
    request = parse_change_request(text)
    assert isinstance(request.replace_elements, dict)
    assert len(request.replace_elements["rows"]) == 20_000


@pytest.mark.parametrize(
    "reply", ['{"updateElements":{"a":1e400}}', "{updateElements:{a:-1e999,}}"]
)
def test_a_number_that_overflows_to_infinity_is_a_syntax_error(reply: str) -> None:
    """1e400 reads as inf in Python, which is not JSON data: the model gets a correction
    (ReplySyntaxError) instead of the merge refusing the request as the caller's error."""
    with pytest.raises(ReplySyntaxError, match="overflows"):
        parse_change_request(reply)


def test_prose_without_json_is_not_labelled_a_refusal() -> None:
    """A chatty reply with no JSON is NoChangeRequestError with problem kind
    'no_change_request', so hooks counting refusals do not count it."""
    with pytest.raises(NoChangeRequestError) as caught:
        parse_change_request("Sure! I set B to three.")
    assert not isinstance(caught.value, RefusalError)
    assert caught.value.problems[0].kind == "no_change_request"


@pytest.mark.parametrize(
    "reply",
    [
        '{"updateElements": {"a": 1}, "updateElements": {"b": 2}}',
        "{updateElements: {a: 1, a: 2,}}",
    ],
)
def test_a_key_given_twice_is_a_syntax_error_not_a_silent_loss(reply: str) -> None:
    """JSON readers keep the last of two equal keys, so the first bucket (or value) would vanish
    without a trace: the model is asked to put everything under one occurrence."""
    with pytest.raises(ReplySyntaxError, match="twice"):
        parse_change_request(reply)


def test_a_damaged_example_before_the_answer_is_sent_back() -> None:
    """An example with a duplicate key before the answer is a damaged change request beside
    another one: the model is told where the damage is and to send exactly one (the example
    used to be ignored, and the last object applied)."""
    reply = 'Example: {"updateElements":{"x":1,"x":2}}\nAnswer: {"updateElements":{"a":1}}'
    with pytest.raises(ReplySyntaxError) as caught:
        parse_change_request(reply)
    assert "twice" in caught.value.feedback
    assert "1 other change request" in caught.value.feedback


@pytest.mark.parametrize(
    "text",
    [
        '{"a": x ',
        '{"name": John}',
        '{ "k" :\n tru, "b": 1}',
        '{"k": nul}',
        '{"k": NaN}',
        '{"k": Infinity, "z": 2}',
        '{"k": undefined}',
        '{"k": café}',
        '{"k": $ref}',
        '{"k": True}',
        '{"k": None, "j": x}',
        '{"k": true}',
        '{"k": x',
        '{"k": x}',
        '{"é": x}',
        '{"k": x} {"updateElements": {"a": 1}}',
    ],
)
def test_a_bare_first_value_is_read_as_the_grammar_reads_it(text: str) -> None:
    """Issue 33: a bare word as the first value (``{"name": John}``) is refused without a
    whole grammar read, with exactly the damage, position and resume point the grammar gives
    (``true``, ``None`` and a word at the end of the reply are left to the grammar)."""
    from agent_payload.parse._grammar import _Damage, _Grammar
    from agent_payload.parse._strict import _read_object

    def outcome(read: Any) -> Any:
        try:
            value, end, *_ = read()
        except _Damage as damage:
            return ("damage", damage.pos, damage.what, damage.hint, damage.eof, damage.depth)
        return ("value", value, end)

    fast = outcome(lambda: _read_object(text, 0))
    whole = outcome(lambda: _Grammar(text).read_object(0))
    assert fast == whole
    if fast[0] == "damage":
        with pytest.raises(_Damage) as caught:
            _read_object(text, 0)
        assert caught.value.resume == max(caught.value.pos, 1)
