"""Fuzzing parse + merge: arbitrary bytes, arbitrary JSON and mangled replies only ever give a
result or a documented error (an AgentPayloadError), and never change the inputs."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_payload.errors import AgentPayloadError, ConfigurationError
from agent_payload.guards import DataLossGuard, Permissions, ReadScope, combine_guards, parse_rule
from agent_payload.merge import apply_change_request
from agent_payload.parse import parse_change_request
from agent_payload.report import Change, Finding

FUZZ = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

KEYS = st.one_of(
    st.sampled_from(["a", "b", "items", "0", "1", "DELETE", "a.b", "", "newElements"]),
    st.text(max_size=4),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["DELETE", "__DELETE__", "", "x", "..."]),
    st.text(max_size=8),
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(KEYS, children, max_size=5)
    ),
    max_leaves=25,
)
BUCKET_NAMES = st.sampled_from(
    [
        "newElements",
        "updateElements",
        "removeElements",
        "replaceElements",
        "new_elements",
        "update_elements",
        "reasoning",
        "payloadChangeRequest",
        "updateElement",
    ]
)
REQUESTS = st.one_of(
    st.dictionaries(BUCKET_NAMES, JSON, max_size=4),
    JSON,
)
PAYLOADS = st.one_of(st.dictionaries(KEYS, JSON, max_size=5), st.lists(JSON, max_size=5))
GUARD = combine_guards(Permissions(deny=["**.id", "items[*]:delete"]), DataLossGuard())


def _merge_checked(payload: Any, request: Any, **kwargs: Any) -> None:
    payload_before = copy.deepcopy(payload)
    request_before = copy.deepcopy(request)
    with contextlib.suppress(AgentPayloadError):
        apply_change_request(payload, request, **kwargs)
    assert payload == payload_before
    assert json.dumps(payload, sort_keys=True) == json.dumps(payload_before, sort_keys=True)
    assert json.dumps(request, sort_keys=True, default=repr) == json.dumps(
        request_before, sort_keys=True, default=repr
    )


def _parse_checked(text: str, finish_reason: str | None) -> Any:
    try:
        return parse_change_request(text, finish_reason=finish_reason)
    except AgentPayloadError:
        return None


@FUZZ
@given(
    data=st.binary(max_size=400),
    finish=st.sampled_from([None, "stop", "length"]),
    payload=PAYLOADS,
)
def test_arbitrary_bytes(data: bytes, finish: str | None, payload: Any) -> None:
    """Arbitrary bytes decoded with errors='replace' parse to a request or a documented error,
    and what parses merges (with guards) or raises a documented error."""
    request = _parse_checked(data.decode("utf-8", errors="replace"), finish)
    if request is not None:
        _merge_checked(payload, request, guards=[GUARD])


@FUZZ
@given(payload=PAYLOADS, request=REQUESTS, strict=st.booleans(), share=st.booleans())
def test_arbitrary_json(payload: Any, request: Any, strict: bool, share: bool) -> None:
    """Arbitrary JSON as payload and change request: a result or a documented error, in every
    mode, inputs unchanged."""
    _merge_checked(payload, request, strict=strict, share=share, guards=[GUARD])


@FUZZ
@given(
    payload=PAYLOADS,
    request=st.dictionaries(BUCKET_NAMES, JSON, max_size=4),
    cut=st.floats(0, 1),
    wrapper=st.sampled_from(["{}", "```json\n{}\n```", "Here you go:\n{}\nDone.", "<x>{}</x>"]),
    finish=st.sampled_from([None, "stop", "length"]),
)
def test_mangled_replies(
    payload: Any, request: dict[str, Any], cut: float, wrapper: str, finish: str | None
) -> None:
    """A real change request written as a reply, wrapped in prose or fences and cut short at
    a random point, parses or raises a documented error; what parses merges cleanly."""
    text = wrapper.replace("{}", json.dumps(request, ensure_ascii=False), 1)
    text = text[: int(len(text) * cut)] if cut < 0.95 else text
    parsed = _parse_checked(text, finish)
    if parsed is not None:
        _merge_checked(payload, parsed, guards=[GUARD])


CAMEL = st.sampled_from(["newElements", "updateElements", "removeElements", "replaceElements"])


@FUZZ
@given(
    payload=PAYLOADS,
    request=st.dictionaries(
        CAMEL, st.dictionaries(KEYS, JSON, min_size=1, max_size=4), min_size=1, max_size=4
    ),
)
def test_whole_replies_parse_back(payload: Any, request: dict[str, Any]) -> None:
    """An intact JSON reply holding the buckets as objects is read back exactly (the parser
    loses nothing), and merging it is clean."""
    text = json.dumps(request, ensure_ascii=False)
    parsed = parse_change_request(text, finish_reason="stop")
    assert parsed.to_wire() == request
    _merge_checked(payload, parsed)


# --- the guards on arbitrary input -----------------------------------------------------------

PATHS = st.lists(st.one_of(KEYS, st.integers(0, 5)), max_size=5).map(tuple)


@st.composite
def changes(draw: st.DrawFn) -> Change:
    op = draw(st.sampled_from(["add", "update", "delete"]))
    return Change(
        op,
        draw(PATHS),
        None if op == "add" else draw(JSON),
        None if op == "delete" else draw(JSON),
    )


@FUZZ
@given(text=st.text(max_size=30))
def test_arbitrary_rule_text(text: str) -> None:
    """Any text given as a path rule parses or raises ConfigurationError naming a position
    (or saying the rule is empty)."""
    try:
        rule = parse_rule(text)
    except ConfigurationError as exc:
        assert "at position" in str(exc) or "empty path rule" in str(exc)
    else:
        assert rule.matchers


@FUZZ
@given(
    change_list=st.lists(changes(), max_size=5),
    before=PAYLOADS,
    after=PAYLOADS,
    policy=st.sampled_from(["allow", "warn", "confirm", "reject"]),
)
def test_guards_on_arbitrary_changes(
    change_list: list[Change], before: Any, after: Any, policy: str
) -> None:
    """Every guard answers any change with a list of Findings (never an exception), and
    review() takes any before/after/changes; the change values are not modified."""
    guards = [
        Permissions(allow=["a.**", "items[*]"], deny=["**.id", '["a.b"]:delete']),
        ReadScope(include=["a", "items[*].b"], exclude=["**.0"]),
        DataLossGuard(policy=policy, min_string_length=3),  # type: ignore[arg-type]
    ]
    snapshot = copy.deepcopy(change_list)
    for change in change_list:
        for guard in guards:
            for finding in guard(change):
                assert isinstance(finding, Finding)
                assert finding.severity in ("warning", "confirm", "conflict")
    review = guards[2].review(before, after, change_list)  # type: ignore[attr-defined]
    assert all(isinstance(f, Finding) for f in review)
    assert change_list == snapshot
