"""Outline reads that fit how models work and never flood a context: several texts in one
find, only some keys of each element in one read, answers never over the budget and never
echoing the model's own path or text beyond a bound (``agent_payload.outline``)."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent_payload import outline
from agent_payload._paths import ECHO_LIMIT
from agent_payload.usage import estimate_tokens

CATALOGUE = {
    "items": [
        {"sku": f"SKU-{n}", "name": f"Item {n}", "qty": n % 7, "tags": ["a"]} for n in range(300)
    ]
}
EVENTS = {
    "events": [
        {"title": f"Weekly sync {n}", "start": f"2026-07-{n % 28 + 1:02d}", "notes": "x" * 400}
        for n in range(80)
    ]
}


def test_find_takes_several_texts_in_one_call_and_answers_each() -> None:
    text = outline.answer(
        "find_in_payload", {"text": ["SKU-31", "SKU-247", "nowhere"]}, CATALOGUE, 2_000
    )
    assert 'items[31].sku: "SKU-31"' in text
    assert 'items[247].sku: "SKU-247"' in text
    assert 'No match for "nowhere"' in text
    numbers = outline.answer(
        "find_in_payload", {"number": [5, 6], "path": "items"}, CATALOGUE, 4_000
    )
    assert "items[5].qty: 5" in numbers and "items[6].qty: 6" in numbers


def test_read_shows_only_the_keys_asked_of_each_element_of_a_range() -> None:
    text = outline.answer(
        "read_payload",
        {"path": "events", "start": 10, "end": 71, "keys": ["title", "start"]},
        EVENTS,
        1_500,
    )
    assert "Weekly sync 10" in text and "Weekly sync 70" in text
    assert "notes" not in text and "xxxx" not in text
    assert "outline" not in text.split("\n", 1)[0]  # complete, not outlined
    assert estimate_tokens(text) < 1_500


def test_bad_keys_and_too_many_texts_get_precise_errors() -> None:
    assert outline.answer(
        "read_payload", {"path": "events", "keys": "title"}, EVENTS, 500
    ).startswith("Error: keys must be a list")
    many = {"text": [f"t{n}" for n in range(21)]}
    assert outline.answer("find_in_payload", many, EVENTS, 500).startswith("Error: text takes")
    assert outline.answer(
        "read_payload", {"path": "events[0].title", "keys": ["a"]}, EVENTS, 500
    ).startswith("Error: keys shows some keys")


def test_the_model_s_own_path_and_text_are_echoed_within_a_bound() -> None:
    long_path = ".".join(f"k{n}" for n in range(8_000))
    long_text = "needle " * 10_000  # ~15,000 tokens
    for name, arguments in (
        ("read_payload", {"path": long_path}),
        ("read_payload", {"path": "items[" + "9" * 5_000 + "]"}),
        ("read_payload", {"path": '["' + "q" * 20_000 + '"]'}),
        ("find_in_payload", {"text": long_text}),
        ("find_in_payload", {"text": long_text, "path": long_path}),
        ("find_in_payload", {"number": 1, "path": "items[0]." + "z" * 30_000}),
    ):
        text = outline.answer(name, arguments, CATALOGUE, 300)
        assert estimate_tokens(text) <= 300, (name, text[:200])
        assert len(text) < 4 * ECHO_LIMIT + 1_000, (name, text[:300])


def test_a_deep_path_is_resolved_and_reported() -> None:
    deep: Any = "bottom"
    for _ in range(3_000):
        deep = {"k": deep}
    path = ".".join(["k"] * 3_000)
    assert '"bottom"' in outline.answer("read_payload", {"path": path}, deep, 300)
    missing = outline.answer("read_payload", {"path": path + ".x"}, deep, 300)
    assert missing.startswith("No value at") and len(missing) < 2_000


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=200))
_values = st.recursive(
    _scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=30), st.dictionaries(st.text(max_size=30), kids, max_size=12)
    ),
    max_leaves=300,
)
_paths = st.one_of(
    st.text(max_size=3_000),
    st.lists(
        st.one_of(
            st.integers(0, 40).map(lambda n: f"[{n}]"),
            st.text(max_size=40).map(json.dumps).map(lambda k: f"[{k}]"),
        ),
        max_size=60,
    ).map("".join),
)
_calls = st.one_of(
    st.fixed_dictionaries(
        {"path": _paths},
        optional={
            "start": st.integers(0, 50),
            "end": st.integers(0, 60),
            "keys": st.lists(st.text(max_size=200), min_size=1, max_size=5),
        },
    ).map(lambda a: ("read_payload", a)),
    st.fixed_dictionaries(
        {
            "text": st.one_of(
                st.text(min_size=1, max_size=5_000),
                st.lists(st.text(min_size=1, max_size=500), min_size=1, max_size=4),
            )
        },
        optional={"path": _paths},
    ).map(lambda a: ("find_in_payload", a)),
    st.fixed_dictionaries({"number": st.integers(-5, 5)}).map(lambda a: ("find_in_payload", a)),
)


@given(payload=_values, call=_calls, budget=st.integers(60, 3_000))
def test_no_read_answer_is_ever_over_the_budget(
    payload: Any, call: tuple[str, dict[str, Any]], budget: int
) -> None:
    name, arguments = call
    text = outline.answer(name, arguments, payload, budget)
    assert estimate_tokens(text) <= budget
    assert text


def test_keys_on_one_element_show_only_those_keys_of_it() -> None:
    """Seen in a model check: keys on a single record (items[31]) showed all its keys."""
    text = outline.answer(
        "read_payload", {"path": "items[31]", "keys": ["sku", "qty"]}, CATALOGUE, 500
    )
    assert '"SKU-31"' in text and '"qty"' in text
    assert "name" not in text and "tags" not in text


def test_an_outlined_range_says_how_many_elements_fit_in_one_read() -> None:
    """Seen in a model check: a range too large came back outlined with no hint of the size
    to ask for, so the next read was a guess. The hint's size then reads whole."""
    text = outline.answer("read_payload", {"path": "events"}, EVENTS, 1_500)
    match = re.search(r"about (\d+) elements of this size fit in one read", text)
    assert match is not None, text[:300]
    fit = int(match.group(1))
    again = outline.answer(
        "read_payload", {"path": "events", "start": 0, "end": fit}, EVENTS, 1_500
    )
    assert "OUTLINE" not in again.split("\n", 1)[0], again[:300]
