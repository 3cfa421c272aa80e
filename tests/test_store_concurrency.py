"""Issue 28's acceptance, on SQLite and on a real PostgreSQL: writer processes on stale versions,
writers killed with SIGKILL, and three agents editing one document at once through ``edit``."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent_payload.agent import PayloadAgent
from agent_payload.providers.base import ModelRequest
from agent_payload.store import PayloadStore, replay
from agent_payload.testing import ScriptedModel
from tests._store_db import store_url

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "_store_writer.py"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty store, once per backend."""
    return store_url(request.param, tmp_path)


def _writer(mode: str, store: str, key: str, n: int, seed: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(WRITER), mode, store, key, str(n), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _consistent(store: PayloadStore, key: str) -> None:
    """The history is whole (versions 1..n, each from the one before) and replays to the
    current payload, whose version is the last entry's."""
    history = store.history(key)
    assert [e.version for e in history] == list(range(1, len(history) + 1))
    assert [e.parent for e in history] == [None, *range(1, len(history))]
    current = store.get(key)
    assert current.version == history[-1].version
    assert replay(store.created_payload(key), history) == current.payload


def test_four_processes_on_stale_versions_all_land(url: str) -> None:
    """Four processes x five edits, each against the version its writer read (often stale),
    on disjoint elements, writer 3 inserting at the front: every edit lands where its writer
    saw it, and the history has every entry, each at its own version with its base."""
    with PayloadStore(url) as store:
        store.create("doc", {"items": [{"id": f"w{w}", "log": []} for w in range(3)]})
        writers = [_writer("edits", url, "doc", w, seed=w) for w in range(4)]
        outputs = [p.communicate() for p in writers]
        for p, (_, err) in zip(writers, outputs, strict=True):
            assert p.returncode == 0, err
        bases = {
            line["run_id"]: line["base"]
            for out, _ in outputs
            for line in map(json.loads, out.splitlines())
        }
        assert len(bases) == 20
        payload = store.get("doc").payload
        items = payload["items"]
        assert sorted(i["id"] for i in items[:5]) == [f"front{k}" for k in range(5)]
        assert [i["id"] for i in items[5:]] == ["w0", "w1", "w2"]
        for w, item in enumerate(items[5:]):
            expected: dict[str, Any] = {"id": f"w{w}", "log": [0, 1, 2, 3, 4]}
            expected.update({f"e{k}": k for k in range(5)})
            assert item == expected
        history = store.history("doc")
        assert len(history) == 21
        assert {e.run_id: e.base_version for e in history[1:]} == bases
        assert any(e.rebased for e in history)  # stale bases were rebased
        _consistent(store, "doc")


def test_writers_killed_at_random_moments_leave_a_consistent_store(url: str) -> None:
    """A writer SIGKILLed at a random moment, five times: the store opens, the history replays
    to the current payload, no version is torn."""
    rng = random.Random(28)
    big = {"fields": {f"f{i}": "x" * 200 for i in range(500)}, "log": []}
    with PayloadStore(url) as store:
        store.create("doc", big)
    for round_ in range(5):
        writer = _writer("forever", url, "doc", round_, seed=round_)
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))
        writer.send_signal(signal.SIGKILL)
        writer.communicate()
        assert writer.returncode == -signal.SIGKILL
        with PayloadStore(url) as store:
            _consistent(store, "doc")
    with PayloadStore(url) as store:
        assert store.get("doc").version > 5  # the writers did write


def test_three_agents_at_once_the_colliding_one_is_corrected_in_its_run(url: str) -> None:
    """Three agents edit one plan at once through ``edit``; all three read version 1. Ada
    inserts a step at the front and takes step a; Bob takes step b; Cy also takes step a, after
    Ada's commit: Cy's request goes back to its model in the same run, with the current value
    at its current place (``steps[1]``), and its second reply, written against the current
    payload (where step a is ``steps[1]``), lands on step a."""
    plan = {"steps": [{"id": "a", "owner": None}, {"id": "b", "owner": None}]}
    with PayloadStore(url) as store:
        store.create("plan", plan)
    all_read = threading.Barrier(3)
    ada_done = threading.Event()

    def replies(first: str, second: str | None, wait: threading.Event | None) -> Any:
        def reply(request: ModelRequest) -> str:
            if len(request.messages) == 2:  # the first attempt
                all_read.wait()
                if wait is not None:
                    wait.wait()
                return first
            assert second is not None, "only Cy is corrected"
            return second

        return reply

    ada = ScriptedModel(
        replies(
            '{"newElements":{"steps":{"0":[{"id":"z","owner":null}]}},'
            '"updateElements":{"steps":{"0":{"owner":"ada"}}}}',
            None,
            None,
        )
    )
    bob = ScriptedModel(replies('{"updateElements":{"steps":{"1":{"owner":"bob"}}}}', None, None))
    cy = ScriptedModel(
        replies(
            '{"updateElements":{"steps":{"0":{"owner":"cy"}}}}',
            '{"updateElements":{"steps":{"1":{"reviewer":"cy"}}}}',
            ada_done,
        ),
        model_name="cy-model",
    )
    results: dict[str, Any] = {}

    def run(name: str, model: ScriptedModel) -> None:
        with PayloadStore(url) as mine:
            try:
                results[name] = mine.edit("plan", PayloadAgent(model), f"{name}: take a step")
            except BaseException as exc:
                results[name] = exc
            finally:
                if name == "ada":
                    ada_done.set()

    threads = [
        threading.Thread(target=run, args=(name, model))
        for name, model in (("ada", ada), ("bob", bob), ("cy", cy))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not [r for r in results.values() if isinstance(r, BaseException)], results
    assert (results["ada"].attempts, results["bob"].attempts, results["cy"].attempts) == (1, 1, 2)
    correction = cy.requests[1].messages[-1].content
    assert "concurrent_change" in correction and "no longer exactly as first shown" in correction
    assert "it is now at steps[1].owner" in correction and '"ada"' in correction
    expected = [
        {"id": "z", "owner": None},
        {"id": "a", "owner": "ada", "reviewer": "cy"},
        {"id": "b", "owner": "bob"},
    ]
    assert results["cy"].payload["steps"][1] == expected[1]
    with PayloadStore(url) as store:
        assert store.get("plan").payload["steps"] == expected
        history = store.history("plan")
        assert len(history) == 4
        (cy_entry,) = [e for e in history if e.model_name == "cy-model"]
        assert cy_entry.base_version is not None and cy_entry.base_version >= 2  # Ada's or later
        assert cy_entry.run_id == results["cy"].run_id
        _consistent(store, "plan")
