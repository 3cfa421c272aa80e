"""Hostile input: very deep, very wide and very large payloads, requests and replies never
cause a RecursionError or a hang; they give clean results or documented errors."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from agent_payload.errors import AgentPayloadError, LimitExceededError, ModelReplyError
from agent_payload.guards import DataLossGuard, Permissions, ReadScope, payload_version
from agent_payload.merge import Limits, apply_change_request
from agent_payload.parse import parse_change_request

DEPTH = 10_000


def _nested(depth: int, leaf: Any, key: str = "k") -> Any:
    value = leaf
    for _ in range(depth):
        value = {key: value}
    return value


def _nested_list(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_deep_payload_and_deep_request_merge_with_guards() -> None:
    """A 10,000-level payload edited by a 10,000-level request, with every guard on, gives a
    result (no RecursionError) and the guards see the deep path."""
    payload = _nested(DEPTH, {"id": 1, "v": 1})
    request = {"updateElements": _nested(DEPTH, {"id": 2, "v": 2})}
    guard = Permissions(deny=["**.id"])
    result = apply_change_request(payload, request, guards=[guard])
    assert [c.code for c in result.report.conflicts] == ["permission_denied"]
    leaf = result.payload
    for _ in range(DEPTH):
        leaf = leaf["k"]
    assert leaf == {"id": 1, "v": 2}
    deleted = apply_change_request(
        payload, {"removeElements": {"k": "DELETE"}}, guards=[DataLossGuard(policy="reject")]
    )
    assert payload_version(payload) == payload_version(_nested(DEPTH, {"id": 1, "v": 1}))
    # 10,000 levels of {"k": ...} are ~60,000 characters of JSON: a large removal, refused
    assert [c.code for c in deleted.report.conflicts] == ["data_loss"]
    assert payload_version(deleted.payload) == payload_version(payload)
    assert len(payload_version(result.payload)) == 64
    assert ReadScope(exclude=["**.id"]).project(payload) is not None


def test_deep_request_adding_a_deep_value_and_deep_lists() -> None:
    """A request that adds a 10,000-level value, and a deeply nested list payload merged by
    a deeply nested list request, work."""
    result = apply_change_request({}, {"newElements": {"x": _nested_list(DEPTH, 1)}})
    assert result.report.changes[0].path == ("x",)
    perms = Permissions(deny=["x[0][0].y"])
    assert perms(result.report.changes[0]) == []
    lists = apply_change_request(_nested_list(DEPTH, 1), {"updateElements": _nested_list(DEPTH, 2)})
    assert len(lists.report.changes) == 1


def test_depth_beyond_the_limit_is_a_limit_error() -> None:
    """Deeper than Limits.max_depth: LimitExceededError naming the limit, never RecursionError."""
    with pytest.raises(LimitExceededError) as info:
        apply_change_request(_nested(200, 1), {}, limits=Limits(max_depth=100))
    assert info.value.limit == "max_depth" and info.value.maximum == 100
    with pytest.raises(LimitExceededError):
        apply_change_request({}, {"newElements": _nested(200, 1)}, limits=Limits(max_depth=100))


def test_million_element_arrays() -> None:
    """A 1,000,000-element payload array, edited by index map at its end and checked by the
    guards, merges; a request of more than max_request_nodes values is a LimitExceededError."""
    payload = {"items": list(range(1_000_000))}
    request = {"updateElements": {"items": {"999999": "last"}}}
    guard = Permissions(deny=["items[0]"])
    result = apply_change_request(payload, request, guards=[guard], share=True)
    assert result.payload["items"][-1] == "last"
    assert result.report.conflicts == []
    with pytest.raises(LimitExceededError):
        apply_change_request(
            {"a": []},
            {"newElements": {"a": list(range(2_000))}},
            limits=Limits(max_request_nodes=1_000),
        )
    with pytest.raises(LimitExceededError):
        apply_change_request(payload, {}, limits=Limits(max_nodes=10_000))


@pytest.mark.slow
def test_deleting_a_million_element_array_under_guards() -> None:
    """Deleting a 1,000,000-element array is judged by the permission and data-loss guards
    (the deny rule inside it refuses it; the data-loss guard flags the large removal)."""
    payload = {"items": [{"id": 1}] + [0] * 999_999}
    request = {"removeElements": {"items": "DELETE"}}
    result = apply_change_request(payload, request, guards=[Permissions(deny=["items[*].id"])])
    assert [c.code for c in result.report.conflicts] == ["permission_denied"]
    loss = apply_change_request(payload, request, guards=[DataLossGuard(policy="reject")])
    assert [c.code for c in loss.report.conflicts] == ["data_loss"]
    assert loss.payload == payload


def test_fifty_megabyte_string() -> None:
    """A 50 MB string in the payload and in the request merges; the guards and the version
    handle it."""
    big = "x" * (50 * 1024 * 1024)
    payload = {"doc": big, "title": "t"}
    guard = DataLossGuard()
    result = apply_change_request(payload, {"updateElements": {"doc": "short"}}, guards=[guard])
    assert [w.code for w in result.report.warnings] == ["data_loss"]
    added = apply_change_request({}, {"newElements": {"doc": big}})
    assert added.payload["doc"] == big
    assert payload_version(payload) != payload_version(result.payload)


@pytest.mark.parametrize("key", ["99999999999999999999", "1" + "0" * 400])
def test_huge_index_map_keys(key: str) -> None:
    """Index-map keys far beyond any array are a conflict (update) or a warning (remove)."""
    payload = {"items": [1, 2, 3]}
    update = apply_change_request(payload, {"updateElements": {"items": {key: 5}}})
    assert [c.code for c in update.report.conflicts] == ["index_out_of_range"]
    assert update.payload == payload
    remove = apply_change_request(payload, {"removeElements": {"items": {key: "DELETE"}}})
    assert [w.code for w in remove.report.warnings] == ["remove_missing"]
    assert remove.payload == payload


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "{" * 100_000,
        '{"updateElements": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}",
        '{"updateElements": ' + "[" * 50_000,
        "```json\n" + '{"newElements": {"a": ' * 20_000,
        "x" * 2_000_000,
        '{"updateElements": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "}",
    ],
    ids=["brackets", "braces", "deep-object", "deep-open-array", "deep-fenced", "prose", "5000"],
)
def test_deep_reply_text_given_to_the_parser(text: str) -> None:
    """Replies nested 20,000 to 100,000 levels, or huge prose, parse or raise a ModelReplyError
    (never RecursionError); what parses merges or raises a documented limit error."""
    try:
        request = parse_change_request(text)
    except ModelReplyError:
        return
    with contextlib.suppress(AgentPayloadError):
        apply_change_request({}, request)
