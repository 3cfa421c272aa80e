"""Conformance: every case of the MERGE.md vectors, run through the merge engine.

Cases come from ``/work/shared/spec/vectors/`` when that folder exists (the shared spec), else
from the copy in ``tests/vectors/``; a file of ``tests/vectors/`` that the shared folder does not
hold (``insertion.json``, section 8) is read from there either way. Our own extra cases live in
``tests/vectors_ours/``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent_payload.errors import AgentPayloadError
from agent_payload.merge import apply_change_request

HERE = Path(__file__).parent
SHARED = Path("/work/shared/spec/vectors")
LOCAL = HERE / "vectors"


def _vector_files() -> list[Path]:
    """The shared spec's files (else the local copies), the local files the spec does not hold
    yet, and our own extra cases. (Section 9's cases, of another shape, are in ``rebase/``: run
    by test_rebase.py.)"""
    spec = {p.name: p for p in sorted(LOCAL.glob("*.json"))}
    if SHARED.is_dir():
        spec.update({p.name: p for p in sorted(SHARED.glob("*.json"))})
    return [spec[name] for name in sorted(spec)] + sorted((HERE / "vectors_ours").glob("*.json"))


def _load() -> list[Any]:
    cases = []
    for path in _vector_files():
        for case in json.loads(path.read_text(encoding="utf-8")):
            cases.append(pytest.param(case, id=case["name"]))
    return cases


CASES = _load()


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality (iterative): true differs from 1, 1 equals 1.0, key order does not matter."""
    stack = [(a, b)]
    while stack:
        a, b = stack.pop()
        if isinstance(a, dict):
            if not isinstance(b, dict) or a.keys() != b.keys():
                return False
            stack.extend((a[k], b[k]) for k in a)
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            stack.extend(zip(a, b, strict=True))
        elif isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or a is None:
            if type(a) is not type(b) or a != b:
                return False
        elif isinstance(b, str | dict | list) or b is None or a != b:
            return False
    return True


def test_vectors_are_found() -> None:
    """The vector folders exist and hold cases with unique names, so the suite cannot pass empty."""
    names = [p.values[0]["name"] for p in CASES]
    assert len(names) > 300
    assert len(names) == len(set(names))
    assert any(name.startswith("ours/insertion/") for name in names)


@pytest.mark.parametrize("case", CASES)
def test_vector(case: dict[str, Any]) -> None:
    """The merge gives the case's payload, warning codes, conflicts and change count."""
    kwargs: dict[str, Any] = {}
    if "markers" in case.get("options", {}):
        kwargs["markers"] = case["options"]["markers"]
    if case.get("raises"):
        with pytest.raises(AgentPayloadError):
            apply_change_request(case["payload"], case["change_request"], **kwargs)
        return
    result = apply_change_request(case["payload"], case["change_request"], **kwargs)
    report = result.report
    assert json_equal(result.payload, case["expected"]), result.payload
    assert Counter(w.code for w in report.warnings) == Counter(case["warnings"]), report.warnings
    assert Counter((c.code, c.path) for c in report.conflicts) == Counter(
        (c["code"], c["path"]) for c in case["conflicts"]
    ), report.conflicts
    assert len(report.changes) == case["changes_count"], report.changes
