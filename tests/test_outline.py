"""The pure outline module: outlines never exceed their budget, positions are the original
ones, a hidden path reads as absent, reads and finds answer exactly, bad calls get precise
error texts (``agent_payload.outline``)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_payload import _jsontext, outline
from agent_payload._loop import estimate_tokens
from agent_payload._paths import format_payload_path
from agent_payload.guards import ReadScope
from agent_payload.prompts import strip_index_comments

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=300),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=40),
        st.dictionaries(st.text(max_size=12), children, max_size=15),
    ),
    max_leaves=400,
)
budgets = st.integers(outline.MIN_PAYLOAD_TOKENS, 3_000)


@given(value=json_values, budget=budgets)
def test_an_outline_never_exceeds_its_budget(value: Any, budget: int) -> None:
    """Whatever the payload and the budget (at least MIN_PAYLOAD_TOKENS), the outline counts
    at most ``budget`` tokens with the project's estimate, and so does a read of the root."""
    assert estimate_tokens(outline.outline(value, budget)) <= budget
    assert estimate_tokens(outline.read(value, (), budget)) <= budget


@given(
    values=st.lists(st.integers(-(10**9), 10**9), min_size=1, max_size=3_000, unique=True),
    budget=budgets,
    window=st.tuples(st.integers(0, 3_000), st.integers(1, 3_000)),
)
def test_positions_are_the_original_ones(
    values: list[int], budget: int, window: tuple[int, int]
) -> None:
    """Every ``/*n*/`` in an outline or a read (of a range too) stands before element n."""
    start = min(window[0], len(values) - 1)
    end = max(start + 1, window[1])
    texts = [
        outline.outline({"a": values}, budget),
        outline.read({"a": values}, ("a",), budget),
        outline.read({"a": values}, ("a",), budget, start=start, end=end),
    ]
    for text in texts:
        for position, shown in re.findall(r"/\*(\d+)\*/(-?\d+)", text):
            assert values[int(position)] == int(shown)
    shown_range = [int(p) for p in re.findall(r"/\*(\d+)\*/-?\d", texts[2])]
    assert shown_range and all(start <= p < min(end, len(values)) for p in shown_range)


SECRET = "TOP-SECRET-VALUE"


def _plant(value: Any) -> Any:
    """``value`` with a ``secret`` key holding SECRET in every object."""
    if isinstance(value, dict):
        return {**{k: _plant(v) for k, v in value.items()}, "secret": SECRET}
    if isinstance(value, list):
        return [_plant(v) for v in value]
    return value


@given(value=json_values.map(_plant), budget=budgets)
def test_a_hidden_path_is_absent_from_outlines_reads_and_finds(value: Any, budget: int) -> None:
    """With the read scope's projection (as the agent passes it) nothing hidden shows: not in
    the outline, not in a read of the root or of the hidden key, not in a find."""
    shown = ReadScope(exclude=["**.secret"]).project(value)
    answers = [
        outline.outline(shown, budget),
        outline.read(shown, (), budget),
        outline.answer("find_in_payload", {"text": "secret"}, shown, budget),
    ]
    if isinstance(shown, dict):
        answers.append(outline.answer("read_payload", {"path": "secret"}, shown, budget))
    for text in answers:
        assert SECRET not in text
    found = outline.answer("find_in_payload", {"text": SECRET}, shown, budget)
    assert found == f'No match for "{SECRET}" in the payload (keys and string values searched).'


def test_a_hidden_key_reads_like_a_missing_one() -> None:
    """Reading a hidden key says exactly what reading a key that never existed says."""
    payload = {"customer": {"name": "Ada", "vat_id": "DE123"}}
    shown = ReadScope(exclude=["customer.vat_id"]).project(payload)
    hidden = outline.answer("read_payload", {"path": "customer.vat_id"}, shown, 500)
    missing = outline.answer("read_payload", {"path": "customer.vat_idx"}, shown, 500)
    assert hidden == 'No value at customer.vat_id: customer has no key "vat_id" (its keys: "name").'
    assert missing.replace("vat_idx", "vat_id") == hidden
    assert "DE123" not in outline.answer("find_in_payload", {"text": "DE1"}, shown, 500)


@given(value=json_values)
def test_a_complete_read_is_the_value_itself(value: Any) -> None:
    """A read that is not marked as an outline is exactly the value (its index comments
    removed)."""
    text = outline.read({"v": value}, ("v",), 5_000)
    head, _, body = text.partition(":\n")
    if "OUTLINE" not in head:
        assert json.loads(strip_index_comments(body)) == value


paths = st.lists(
    st.one_of(st.integers(0, 10**6), st.text(min_size=1, max_size=8)), min_size=1, max_size=6
)


@given(path=paths)
def test_paths_read_back_as_the_prompts_write_them(path: list[str | int]) -> None:
    """``parse_path`` reads every path as ``format_payload_path`` (the prompts, corrections
    and answers) writes it."""
    assert outline.parse_path(format_payload_path(path)) == tuple(path)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("", ()),
        ("(root)", ()),
        ("lines[3].sku", ("lines", 3, "sku")),
        ('["a.b"].c', ("a.b", "c")),
        ("stats.2024", ("stats", "2024")),
        ("[0][1]", (0, 1)),
    ],
)
def test_parse_path(text: str, parsed: tuple[str | int, ...]) -> None:
    assert outline.parse_path(text) == parsed


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("not json", "Error: the arguments of read_payload are not a JSON object"),
        ("[1]", "Error: the arguments of read_payload must be a JSON object"),
        ({}, "Error: read_payload needs a path"),
        ({"path": 3}, 'Error: the path of read_payload must be a string such as "lines[3]"'),
        ({"path": "a", "size": 3}, "Error: read_payload takes only end, keys, path, start"),
        ({"path": "a[x]"}, "Error: the path 'a[x]' cannot be read at character 2"),
        ({"path": "a", "start": -1}, "Error: start must be a position (an integer >= 0)"),
        ({"path": "a", "start": 9}, "Error: start 9 is past the end of a (an array of 3"),
        ({"path": "a", "start": 2, "end": 1}, "Error: end 1 must be greater than start 2"),
        ({"path": "a[0]", "start": 0}, "Error: start and end read part of an array or object"),
        ({"path": "a[3]"}, "No value at a[3]: a is an array of 3 elements (positions 0 to 2)."),
    ],
)
def test_bad_reads_get_precise_errors(arguments: Any, expected: str) -> None:
    answer = outline.answer("read_payload", arguments, {"a": [1, 2, 3]}, 500)
    assert answer.startswith(expected), answer


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "Error: find_in_payload needs either text or number (not both)"),
        ({"text": "a", "number": 1}, "Error: find_in_payload needs either text or number"),
        ({"text": ""}, "Error: text must be a non-empty string"),
        ({"number": "7"}, 'Error: number must be a number (or a list of them), found "7"'),
        ({"text": "x", "path": "zz"}, 'No value at zz: (root) has no key "zz"'),
    ],
)
def test_bad_finds_get_precise_errors(arguments: Any, expected: str) -> None:
    answer = outline.answer("find_in_payload", arguments, {"a": [1, 2, 3]}, 500)
    assert answer.startswith(expected), answer


def test_an_unknown_tool_is_named() -> None:
    assert outline.answer("write_payload", {}, {}, 500).startswith(
        "Error: there is no tool 'write_payload'"
    )


def test_find_caps_its_list_and_says_how_many_more() -> None:
    """At most FIND_LIMIT places are listed, in document order, with the number left."""
    payload = {"items": [{"sku": f"SKU-{i}"} for i in range(100)]}
    text = outline.find(payload, 2_000, text="sku-")
    lines = text.splitlines()
    assert lines[0] == '100 matches for "sku-" in the payload:'
    assert lines[1] == 'items[0].sku: "SKU-0"'
    assert len(lines) == outline.FIND_LIMIT + 2
    assert lines[-1].startswith("… and 80 more;")
    assert (
        outline.find(payload, 2_000, number=3)
        == "No match for 3 in the payload (numbers searched)."
    )
    assert outline.find(payload, 2_000, text="SKU-7", path=("items", 7)).splitlines()[1:] == [
        'items[7].sku: "SKU-7"'
    ]


def test_the_outline_notation() -> None:
    """Counts for what is not shown, gaps with positions, cut strings with their length."""
    payload = {
        "title": "x" * 500,
        "lines": [{"sku": f"S{i}", "tags": ["a", "b"]} for i in range(1_000)],
        "meta": {"deep": {"deeper": {"deepest": {"k": 1}}}},
    }
    text = outline.outline(payload, 400)
    assert "/*cut: 500 characters in all*/" in text
    assert re.search(r"/\*\d+ to 998 not shown \(\d+ elements\)\*/", text)
    assert "/*999*/" in text
    assert estimate_tokens(text) <= 400
    assert outline.outline({"a": [1] * 50}, outline.MIN_PAYLOAD_TOKENS).startswith("{")
    assert outline._render([1, 2], outline.LEVELS[-1], 100) == ("[/*2 elements*/]", False)


@pytest.mark.parametrize(
    ("name", "budget"),
    [
        ("gpt-4.1-mini", 1_047_576 // 4),
        ("gpt-4o", 32_000),
        ("claude-sonnet-4-6", 50_000),
        ("openai/gpt-5.4-mini", 100_000),
        ("qwen3", outline.DEFAULT_MAX_PAYLOAD_TOKENS),
        (None, outline.DEFAULT_MAX_PAYLOAD_TOKENS),
    ],
)
def test_default_budget_from_the_model_name(name: str | None, budget: int) -> None:
    assert outline.default_max_payload_tokens(name) == budget


def test_exceeds_counts_the_payload_as_the_user_message_carries_it() -> None:
    small = {"a": list(range(10))}
    assert not outline.exceeds(small, outline.MIN_PAYLOAD_TOKENS)
    assert outline.exceeds({"a": list(range(5_000))}, 1_000)


def _nested(levels: int) -> list[Any]:
    """``[[[...]]]``, ``levels`` lists deep."""
    root: list[Any] = []
    for _ in range(levels - 1):
        root = [root]
    return root


@pytest.mark.parametrize(
    "shown",
    [
        {
            "title": "t",
            "lines": [{"sku": f"SKU-{i}", "tags": ["a", 1.5, None]} for i in range(2_000)],
        },
        {f"key {i} ü": {"n": i, "s": "x" * (i % 50)} for i in range(1_500)},  # more than 64 keys
        [[[[i, str(i), {"d": [True] * 10}] for i in range(100)]] * 5, "end"],
        {"deep": _nested(3_000), "tail": list(range(8_000))},  # deeper than json's recursion
    ],
)
def test_exceeds_counts_the_compact_json_a_piece_at_a_time(shown: Any) -> None:
    """``exceeds`` counts the payload's compact JSON in pieces of 20,000 characters, exactly
    those of ``json.dumps`` (written only as far as they are counted), and stops at the first
    piece past the budget."""
    text = _jsontext.dumps(shown, ensure_ascii=False, separators=(",", ":"))
    pieces = [text[i : i + 20_000] for i in range(0, len(text), 20_000)]
    for budget in (1_000, 30_000, 10**8):
        total, expected = 0, []
        for piece in pieces:
            expected.append(piece)
            total += len(piece)
            if total > budget:
                break
        counted: list[str] = []

        def count(piece: str, counted: list[str] = counted) -> int:
            counted.append(piece)
            return len(piece)

        over = outline.exceeds(shown, budget, count=count)
        if total > budget:
            assert over and counted == expected
        else:  # the whole compact JSON fits: the rendering as the prompt shows it is counted
            assert counted[: len(pieces)] == pieces


def test_the_readme_outline_example_prints_what_it_says(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's "Payloads larger than the context" example runs offline and prints the
    lines written as comments under its prints."""

    from tests._docs import block

    code = block("outline-example")
    exec(compile(code, "README outline example", "exec"), {"__name__": "readme"})
    expected = [
        line[2:] for line in code.splitlines() if line.startswith("# ") and "real model" not in line
    ]
    assert capsys.readouterr().out.splitlines() == expected
