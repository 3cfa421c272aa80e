"""``VersionedStore.apply(..., expected_version=v)`` with a stale ``v`` (issue 27): rebased over
what was applied since ``v`` (MERGE.md section 9), sent back with ``ConcurrentChangeError`` on a
collision (the store unchanged), ``StalePayloadError`` only for a version it does not know."""

from __future__ import annotations

import copy
import threading

import pytest

from agent_payload.errors import ConcurrentChangeError, StalePayloadError
from agent_payload.guards import payload_version
from agent_payload.merge import Applied, apply_change_request
from agent_payload.store import VersionedStore

LINES = {"lines": [{"id": "a", "qty": 1}, {"id": "b", "qty": 2}, {"id": "c", "qty": 3}]}


def test_a_stale_request_is_rebased_and_lands_where_its_writer_saw_it() -> None:
    """The MERGE.md section 9 example through the store: a deletion applied since, then a
    late request written against the first version lands on element c and inserts before b."""
    store = VersionedStore(copy.deepcopy(LINES))
    _, v0 = store.get()
    store.apply({"updateElements": {"lines": {"0": "DELETE"}}}, expected_version=v0)
    late = {
        "updateElements": {"lines": {"2": {"qty": 30}}},
        "newElements": {"lines": {"1": [{"id": "x"}]}},
    }
    result = store.apply(late, expected_version=v0)
    assert result.payload == {"lines": [{"id": "x"}, {"id": "b", "qty": 2}, {"id": "c", "qty": 30}]}
    assert store.get() == (result.payload, payload_version(result.payload))


def test_the_history_keeps_each_request_as_applied_with_its_markers() -> None:
    """The history holds, per version, the request applied to it after rebase and the markers
    it was merged with; replaying it from the first payload gives the current one."""
    store = VersionedStore(copy.deepcopy(LINES))
    _, v0 = store.get()
    store.apply(
        {"updateElements": {"lines": {"1": "__GONE__"}}},
        expected_version=v0,
        markers={"__GONE__"},
    )
    store.apply({"updateElements": {"lines": {"2": {"qty": 9}}}}, expected_version=v0)
    history = store.history()
    assert history[0][0] == v0
    (_, first), (_, second) = history
    assert first == Applied(
        {"updateElements": {"lines": {"1": "__GONE__"}}}, frozenset({"__GONE__"})
    )
    assert second.change_request.to_wire() == {"updateElements": {"lines": {"1": {"qty": 9}}}}
    payload = copy.deepcopy(LINES)
    for _, applied in history:
        payload = apply_change_request(
            payload, applied.change_request, markers=applied.markers
        ).payload
    assert payload == store.get()[0] == {"lines": [{"id": "a", "qty": 1}, {"id": "c", "qty": 9}]}


def test_a_collision_raises_and_leaves_the_store_unchanged() -> None:
    store = VersionedStore(copy.deepcopy(LINES))
    _, v0 = store.get()
    store.apply({"updateElements": {"lines": {"0": "DELETE"}}}, expected_version=v0)
    before = store.get()
    history = store.history()
    with pytest.raises(ConcurrentChangeError) as caught:
        store.apply({"updateElements": {"lines": {"0": {"qty": 10}}}}, expected_version=v0)
    (conflict,) = caught.value.report.conflicts
    assert conflict.code == "concurrent_change" and "no longer exists" in conflict.message
    assert caught.value.current == before[0] and caught.value.version == before[1]
    assert store.get() == before and store.history() == history


def test_only_an_unknown_version_is_stale() -> None:
    store = VersionedStore({"a": 1, "b": 1}, keep=2)
    _, v0 = store.get()
    with pytest.raises(StalePayloadError) as caught:
        store.apply({"updateElements": {"a": 2}}, expected_version=payload_version({"x": 0}))
    assert "no longer knows" in str(caught.value)
    store.apply({"updateElements": {"a": 2}}, expected_version=v0)
    store.apply({"updateElements": {"a": 3}}, expected_version=store.version)
    store.apply({"updateElements": {"a": 4}}, expected_version=store.version)
    with pytest.raises(StalePayloadError):  # v0 has fallen out of the two kept versions
        store.apply({"updateElements": {"b": 2}}, expected_version=v0)
    assert store.get()[0] == {"a": 4, "b": 1}


def test_replace_forgets_the_versions_before_it() -> None:
    """No change request is known for a replacement: a request older than it is stale."""
    store = VersionedStore({"a": 1, "b": 1})
    _, v0 = store.get()
    store.replace({"a": 5, "b": 1}, expected_version=v0)
    with pytest.raises(StalePayloadError):
        store.apply({"updateElements": {"b": 2}}, expected_version=v0)
    assert store.history() == []


def test_writers_on_stale_versions_all_land() -> None:
    """Eight threads each read the store once and then apply five edits of their own element
    against that one (stale) version: every edit lands on its writer's element."""
    items = [{"id": n, "edits": []} for n in range(8)]
    store = VersionedStore({"items": items})
    _, v0 = store.get()
    barrier = threading.Barrier(8)

    def writer(n: int) -> None:
        barrier.wait()
        for k in range(5):
            store.apply({"newElements": {"items": {str(n): {"edits": [k]}}}}, expected_version=v0)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get()[0] == {"items": [{"id": n, "edits": [0, 1, 2, 3, 4]} for n in range(8)]}
