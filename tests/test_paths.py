"""The one paths module: one way to write, read and follow a payload path."""

from __future__ import annotations

import pytest

from agent_payload._paths import PathNotFound, format_payload_path, lookup, parse_path


@pytest.mark.parametrize("root", ["", "(root)", "$", "  "])
def test_every_spelling_of_the_root_reads_as_the_root(root: str) -> None:
    assert parse_path(root) == ()


def test_the_root_has_one_name() -> None:
    assert format_payload_path(()) == "(root)"
    assert format_payload_path((), root="") == ""
    assert format_payload_path(("items", 3, "a.b")) == 'items[3]["a.b"]'


def test_lookup_names_the_deepest_part_that_exists() -> None:
    data = {"a": {"b": [1, 2]}}
    assert lookup(data, ("a", "b", 1)) == 2
    assert lookup(data, ("a", "c", 0), None) is None
    with pytest.raises(PathNotFound, match=r"No value at a\.b\[5\]: a\.b is an array of 2"):
        lookup(data, ("a", "b", 5))
    with pytest.raises(PathNotFound, match=r'No value at x: \(root\) has no key "x"'):
        lookup(data, ("x",))


def test_lookup_is_linear_in_the_path() -> None:
    deep: object = 0
    for _ in range(50_000):
        deep = [deep]
    assert lookup(deep, (0,) * 50_000) == 0
    with pytest.raises(PathNotFound):
        lookup(deep, (0,) * 50_001)
