"""Payload versions: canonical hashing, stale checks and the versioned store."""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import pytest
from pydantic import BaseModel

from agent_payload.errors import InvalidPayloadError, StalePayloadError
from agent_payload.guards import check_version, payload_version
from agent_payload.store import VersionedStore


def _reference(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(
    "data",
    [
        {},
        [],
        {"b": 1, "a": [1, 2.5, None, True, False, "ü", {"z": {}, "y": []}]},
        [{"k": 'line\nbreak "quoted" \\ back'}, -0.0, 10**30, 1e-7],
        {"ключ": "значение", "emoji": "🎉", "": ""},
    ],
)
def test_version_is_sha256_of_canonical_json(data: Any) -> None:
    """The version equals SHA-256 hex of json.dumps(sort_keys, compact, ensure_ascii=False)."""
    assert payload_version(data) == _reference(data)


def test_version_ignores_key_order_and_sees_every_change() -> None:
    """Key order does not matter; any value change does."""
    assert payload_version({"a": 1, "b": 2}) == payload_version({"b": 2, "a": 1})
    assert payload_version({"a": 1}) != payload_version({"a": 2})
    assert payload_version({"a": True}) != payload_version({"a": 1})


def test_pydantic_models_are_dumped_in_json_mode() -> None:
    """A pydantic model has the version of its JSON-mode dump."""

    class Doc(BaseModel):
        b: int
        a: str

    assert payload_version(Doc(b=1, a="x")) == payload_version({"a": "x", "b": 1})


def test_deep_payload_hashes_like_the_fast_path() -> None:
    """The iterative fallback (for payloads too deep for json.dumps) writes the same text."""
    for data in ({"b": [1, {"c": None}], "a": "ü"}, [1.5, True, {"2": 3, "10": 4}], {1: "x"}):
        deep: Any = data
        for _ in range(5_000):
            deep = [deep]
        inner = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        text = "[" * 5_000 + inner + "]" * 5_000
        assert payload_version(deep) == hashlib.sha256(text.encode()).hexdigest()


def test_deep_and_large_payloads() -> None:
    """10,000 levels and a 1,000,000-element array hash without RecursionError."""
    deep: Any = 1
    for _ in range(10_000):
        deep = {"k": deep}
    assert len(payload_version(deep)) == 64
    big = list(range(1_000_000))
    assert payload_version(big) == _reference(big)


@pytest.mark.parametrize(
    ("data", "where"),
    [({"a": {1, 2}}, "a"), ({"a": [float("nan")]}, "a[0]"), ({"a": {1: "x", "b": 2}}, "a")],
)
def test_non_json_data_is_an_invalid_payload_error_naming_the_path(data: Any, where: str) -> None:
    """Sets, NaN and unsortable mixed keys are InvalidPayloadError naming the path."""
    with pytest.raises(InvalidPayloadError) as info:
        payload_version(data)
    assert f"at {where} " in str(info.value)


def test_check_version() -> None:
    """check_version returns the version when it matches and raises StalePayloadError with
    expected and actual otherwise."""
    data = {"a": 1}
    version = payload_version(data)
    assert check_version(data, version) == version
    with pytest.raises(StalePayloadError) as info:
        check_version({"a": 2}, version)
    assert info.value.expected == version
    assert info.value.actual == payload_version({"a": 2})
    assert "nothing was applied" in str(info.value)


def test_versioned_store_replace_is_compare_and_swap() -> None:
    """replace() stores only when the expected version is current; of many concurrent
    writers starting from the same version exactly one wins."""
    store = VersionedStore({"n": 0})
    _, version = store.get()
    wins: list[int] = []
    stale: list[int] = []

    def writer(n: int) -> None:
        try:
            store.replace({"n": n}, expected_version=version)
            wins.append(n)
        except StalePayloadError:
            stale.append(n)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(1, 21)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1 and len(stale) == 19
    payload, new_version = store.get()
    assert payload == {"n": wins[0]} and new_version == payload_version(payload)
    assert store.version == new_version


def test_agent_run_committed_through_the_store() -> None:
    """The recommended pattern: read payload and version from the store, run the agent, and
    commit its result with the version it started from. A concurrent edit in between makes
    the commit fail with StalePayloadError and leaves the other writer's edit in place."""
    from agent_payload.agent import PayloadAgent
    from agent_payload.testing import ScriptedModel

    store = VersionedStore({"status": "open", "owner": "ada"})
    payload, version = store.get()
    agent = PayloadAgent(ScriptedModel(['{"updateElements": {"status": "closed"}}'] * 2))
    result = agent.run(payload, "close it")
    store.replace({"status": "open", "owner": "bob"}, expected_version=version)  # someone else
    with pytest.raises(StalePayloadError):
        store.replace(result.payload, expected_version=version)
    assert store.get()[0] == {"status": "open", "owner": "bob"}
    payload, version = store.get()
    result = agent.run(payload, "close it")
    store.replace(result.payload, expected_version=version)
    assert store.get()[0] == {"status": "closed", "owner": "bob"}


def test_store_apply_is_all_or_nothing_by_default() -> None:
    """A request with one conflicting part is refused whole by VersionedStore.apply (strict by
    default): nothing of it is stored; strict=False opts into lenient merging."""
    import pytest

    from agent_payload.errors import MergeConflictError
    from agent_payload.store import VersionedStore

    store = VersionedStore({"a": 1, "items": [1]})
    _, version = store.get()
    request = {"updateElements": {"a": 2, "items": {"9": 5}}}
    with pytest.raises(MergeConflictError):
        store.apply(request, expected_version=version)
    assert store.get() == ({"a": 1, "items": [1]}, version)
    result = store.apply(request, expected_version=version, strict=False)
    assert store.get()[0] == {"a": 2, "items": [1]}
    assert [c.code for c in result.report.conflicts] == ["index_out_of_range"]
