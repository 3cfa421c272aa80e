"""Issue 11: no file, store or session is ever left damaged, and misuse is caught when passed.

One test (or group) per bullet of the issue's list of what an adversarial user found, each
reproducing it as reported: the CLI writing its output over its input under a file-size limit,
a session save failing half way over a good save, damaged session files, a store asked to
keep a value it cannot hash, a session on a deep payload, misuse found only at run time. The
malformed provider bodies are in ``test_provider_shapes.py`` and ``test_faults.py``.
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_payload import (
    ChangeRequestToolHandler,
    ConfigurationError,
    DataLossGuard,
    InvalidPayloadError,
    PayloadAgent,
    PayloadSession,
    apply_change_request,
    cli,
    payload_version,
)
from agent_payload._jsontext import dumps, loads_file
from agent_payload.diff import to_json_patch
from agent_payload.errors import LimitExceededError, SessionFileError
from agent_payload.report import Change
from agent_payload.session import SessionState, TurnRecord
from agent_payload.store import VersionedStore
from agent_payload.testing import ScriptedModel
from agent_payload.usage import Usage

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _limited(limit: int) -> Any:
    """A ``preexec_fn`` capping the size of any file the child writes (``ulimit -f``)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


# --- 1. the CLI writing over its own input under a file-size limit -----------------------------


@pytest.mark.slow
def test_cli_output_over_its_input_under_a_file_size_limit(tmp_path: Path) -> None:
    """``agent-payload apply big.json c.json -o big.json`` with RLIMIT_FSIZE at 8 KB (the
    child's ``ulimit -f``) used to leave big.json cut to 8 KB of invalid JSON. Now the write
    fails as a whole: big.json is byte for byte what it was, the error names it, the exit status
    is non-zero, and no temporary file is left behind."""
    big = tmp_path / "big.json"
    payload = {"items": [{"n": i, "text": "x" * 40} for i in range(2000)]}
    big.write_text(json.dumps(payload), encoding="utf-8")
    original = big.read_bytes()
    assert len(original) > 8192 * 4
    change = tmp_path / "c.json"
    change.write_text('{"updateElements": {"status": "paid"}}', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "agent_payload", "apply", str(big), str(change), "-o", str(big)],
        capture_output=True,
        text=True,
        env=_env(),
        preexec_fn=_limited(8192),
    )
    assert done.returncode != 0
    assert str(big) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert big.read_bytes() == original
    # The lock file it writes under stays (never removed: see agent_payload._filelock).
    assert sorted(p.name for p in tmp_path.iterdir()) == [".big.json.lock", "big.json", "c.json"]
    # Control: the same command without the limit (run in process: what the child did but for
    # the limit) writes the merged payload.
    err = io.StringIO()
    status = cli.main(
        ["apply", str(big), str(change), "-o", str(big)], stdout=io.StringIO(), stderr=err
    )
    assert status == 0, err.getvalue()
    assert json.loads(big.read_text(encoding="utf-8")) == {**payload, "status": "paid"}


# --- 2. session.save failing half way over a good save -----------------------------------------


_SAVE_SCRIPT = """
import json, resource, sys
from agent_payload import PayloadAgent, PayloadSession
from agent_payload.errors import FileWriteError
from agent_payload.testing import ScriptedModel

path = sys.argv[1]
reply = json.dumps({"newElements": {"notes": ["n" * 200 for _ in range(100)]}})
session = PayloadSession(PayloadAgent(ScriptedModel([reply])), {"notes": []})
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
session.send("add notes")  # the session is now ~40 KB of JSON
try:
    session.save(path)
except FileWriteError as exc:
    print(exc.path)
    print(exc)
    sys.exit(3)
"""


@pytest.mark.slow
def test_a_failed_session_save_leaves_the_earlier_save_whole(tmp_path: Path) -> None:
    """A save over an earlier good save that fails half way (RLIMIT_FSIZE) used to leave a
    0-byte file. Now it raises FileWriteError naming the path, and the earlier save is byte for
    byte as it was and still loads."""
    file = tmp_path / "s.json"
    session = PayloadSession(PayloadAgent(ScriptedModel([])), {"notes": []})
    session.save(file)
    good = file.read_bytes()
    done = subprocess.run(
        [sys.executable, "-c", _SAVE_SCRIPT, str(file)], capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[0] == str(file)
    assert "the file was not changed" in done.stdout
    assert file.read_bytes() == good
    assert PayloadSession.load(file, session.agent).payload == {"notes": []}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


# --- 3. damaged session files ------------------------------------------------------------------


def _saved(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A real saved session with two turns and one undone (a redo entry)."""
    replies = [
        '{"updateElements": {"status": "sent"}, "reasoning": "sent"}',
        '{"newElements": {"items": [{"sku": "C"}]}}',
    ]
    session = PayloadSession(
        PayloadAgent(ScriptedModel(replies), max_retries=0),
        {"status": "draft", "items": [{"sku": "A"}]},
    )
    session.send("send it")
    session.send("add C")
    session.undo()
    file = tmp_path / "session.json"
    session.save(file)
    return file, json.loads(file.read_text(encoding="utf-8"))


def _damaged(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(data))
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    if value is _GONE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


_GONE = object()

# name -> (place, new value, what the message must say)
WRONG: dict[str, tuple[tuple[Any, ...], Any, str]] = {
    "no payload": (("payload",), _GONE, "at payload: this field is missing"),
    "payload not JSON root": (("payload",), 5, "at payload"),
    "turns not a list": (("turns",), {"a": 1}, "at turns"),
    "turn index a string": (("turns", 0, "index"), "1", "at turns[0].index"),
    "task null": (("turns", 0, "task"), None, "at turns[0].task"),
    "usage missing": (("turns", 0, "usage"), _GONE, "at turns[0].usage"),
    "tokens a bool": (("turns", 0, "usage", "input_tokens"), True, "input_tokens"),
    "negative tokens": (("turns", 0, "usage", "output_tokens"), -3, "output_tokens"),
    "change op unknown": (("turns", 0, "changes", 0, "op"), "move", "changes[0].op"),
    "change path a string": (("turns", 0, "changes", 0, "path"), "status", "changes[0].path"),
    "undo request a list": (("turns", 0, "undo_request"), [], "undo_request"),
    "redo without request": (("redo", 0, "redo_request"), _GONE, "redo[0].redo_request"),
    "unknown field": (("turns", 0, "colour"), "red", "turns[0].colour"),
    "format of something else": (("format",), "other", "at format"),
    "newer version": (("format_version",), 2, "newer agent_payload"),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_session_file_with_a_wrong_field(tmp_path: Path, name: str) -> None:
    """A field missing or of the wrong type used to surface as a raw KeyError or TypeError,
    and a file with no "payload" loaded silently as an empty payload. Now each is one
    SessionFileError naming the file and the place."""
    file, data = _saved(tmp_path)
    place, value, said = WRONG[name]
    file.write_text(json.dumps(_damaged(data, place, value)), encoding="utf-8")
    with pytest.raises(SessionFileError) as info:
        PayloadSession.load(file, PayloadAgent(ScriptedModel([])))
    assert str(file) in str(info.value)
    assert said in str(info.value), str(info.value)
    assert info.value.file == str(file)


def test_a_session_file_that_is_not_utf8_or_cut_short_or_absurdly_nested(tmp_path: Path) -> None:
    """Not UTF-8 (was UnicodeDecodeError), cut short at any point (was JSONDecodeError or a
    silent partial load), nested absurdly deep (was RecursionError): one SessionFileError
    naming the file, chained to the cause."""
    file, _ = _saved(tmp_path)
    text = file.read_text(encoding="utf-8")
    cases: dict[str, bytes] = {
        "not UTF-8": b'{"format": "\xff\xfe"}',
        "nested absurdly deep": ('{"payload": ' + "[" * 30_000 + "]" * 30_000 + "}").encode(),
        "not an object": b"[1, 2]",
        "empty": b"",
    }
    for cut in range(1, len(text), max(1, len(text) // 40)):
        cases[f"cut at {cut}"] = text[:cut].encode()
    expected = {
        "not UTF-8": "not UTF-8",
        "nested absurdly deep": "levels deep",
        "not an object": "expected a JSON object",
    }
    for name, raw in cases.items():
        file.write_bytes(raw)
        with pytest.raises(SessionFileError) as info:
            PayloadSession.load(file, PayloadAgent(ScriptedModel([])))
        message = str(info.value)
        assert message.startswith(f"{file}: not a saved session"), (name, message)
        assert expected.get(name, "") in message, (name, message)
        if name.startswith("cut") or name in ("not UTF-8", "nested absurdly deep"):
            assert info.value.__cause__ is not None, name


def test_a_payload_that_does_not_fit_payload_type_or_the_limits(tmp_path: Path) -> None:
    """The payload is checked as the session would check it: against ``payload_type`` and the
    merge's limits; both failures are SessionFileError naming the payload."""
    from pydantic import BaseModel

    class Order(BaseModel):
        status: int

    file, data = _saved(tmp_path)
    with pytest.raises(SessionFileError, match=r"at payload\.status: does not fit payload_type"):
        PayloadSession.load(file, PayloadAgent(ScriptedModel([])), payload_type=Order)
    deep: Any = []
    for _ in range(20_004):  # the file stays within what is read; the payload is too deep
        deep = [deep]
    file.write_text(dumps({**data, "payload": {"d": deep}}), encoding="utf-8")
    with pytest.raises(SessionFileError, match=r"at payload: .*deeper") as info:
        PayloadSession.load(file, PayloadAgent(ScriptedModel([])))
    assert isinstance(info.value.__cause__, LimitExceededError)


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
_turns = st.builds(
    TurnRecord,
    index=st.integers(1, 10**6),
    task=st.text(),
    change_request=st.dictionaries(st.text(max_size=6), _json, max_size=3),
    reasoning=st.none() | st.text(),
    changes=st.lists(
        st.builds(
            Change,
            st.sampled_from(["add", "update", "delete"]),
            st.lists(st.text(max_size=3) | st.integers(0, 9), max_size=4).map(tuple),
            _json,
            _json,
        ),
        max_size=3,
    ).map(tuple),
    usage=st.builds(Usage, st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 99)),
    attempts=st.integers(0, 9),
    duration=st.floats(0, 1e6),
    timestamp=st.text(max_size=30),
    undo_request=st.dictionaries(st.text(max_size=6), _json, max_size=3),
)


@settings(max_examples=settings.default.max_examples // 2)  # each example writes and fsyncs a file
@given(
    payload=st.dictionaries(st.text(max_size=5), _json, max_size=5),
    turns=st.lists(_turns, max_size=3),
    redo=st.lists(st.tuples(_turns, st.dictionaries(st.text(max_size=4), _json)), max_size=2),
)
def test_save_then_load_gives_an_equal_session(
    tmp_path_factory: pytest.TempPathFactory,
    payload: dict[str, Any],
    turns: list[TurnRecord],
    redo: list[tuple[TurnRecord, dict[str, Any]]],
) -> None:
    """Round trip (hypothesis): any session (any JSON payload, lone surrogates included, any
    turns and redo entries) saved and loaded is equal: payload, history, redo stack."""
    from agent_payload._sessionfile import Undone

    state = SessionState(
        payload, turns=turns, redo=[Undone(turn=t, redo_request=r) for t, r in redo]
    )
    session = PayloadSession(PayloadAgent(ScriptedModel([])), state=state)
    file = tmp_path_factory.mktemp("rt") / "s.json"
    session.save(file)
    loaded = PayloadSession.load(file, session.agent)
    assert loaded.to_json() == session.to_json()
    assert loaded.history == session.history
    assert loaded.state.redo_stack == session.state.redo_stack


def test_a_deep_session_saves_and_loads(tmp_path: Path) -> None:
    """A payload 5,000 levels deep (the merge takes 20,000) saves and loads (Python's json
    stops near 1,000)."""
    deep: Any = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    session = PayloadSession(PayloadAgent(ScriptedModel([])), deep)
    session.save(tmp_path / "deep.json")
    loaded = PayloadSession.load(tmp_path / "deep.json", session.agent)
    assert payload_version(loaded.payload) == payload_version(deep)


@pytest.mark.slow
def test_json_text_of_any_depth_is_what_json_writes() -> None:
    """``_jsontext`` gives json's own text where json can write it, and reads back what it
    writes at 20,000 levels."""
    value = {"a": [1, 2.5, "é", None, True, {}, []], "b": {"c": "\ud800"}}
    for indent in (None, 2):
        assert dumps(value, indent=indent) == json.dumps(value, indent=indent, ensure_ascii=False)
    deep: Any = [0]
    for _ in range(20_000):
        deep = {"k": [deep]}
    back = loads_file(dumps(deep, indent=2))
    assert payload_version(back) == payload_version(deep)


# --- 4. a store asked to keep a value it cannot hash -------------------------------------------


def test_a_store_never_keeps_a_payload_under_the_wrong_version() -> None:
    """``VersionedStore.apply`` with a 5,000-digit integer used to raise a raw ValueError after
    storing the new payload under the old version. Now it raises InvalidPayloadError naming the
    path, and the stored payload and version are both exactly as they were."""
    store = VersionedStore({"a": 1, "b": [1, 2]})
    payload, version = store.get()
    with pytest.raises(InvalidPayloadError, match=r"at b\[0\].*digits") as info:
        store.apply({"updateElements": {"b": [10**5000]}}, expected_version=version)
    assert isinstance(info.value.__cause__, ValueError)
    assert store.get() == ({"a": 1, "b": [1, 2]}, version)
    assert store.get()[0] is payload
    with pytest.raises(InvalidPayloadError, match="digits"):
        store.replace({"a": 10**5000}, expected_version=version)
    assert store.get() == ({"a": 1, "b": [1, 2]}, version)
    result = store.apply({"updateElements": {"a": 2}}, expected_version=version)
    assert store.get() == (result.payload, payload_version({"a": 2, "b": [1, 2]}))


def test_payload_version_raises_a_library_error_for_what_it_cannot_hash() -> None:
    """``payload_version`` used to raise raw errors (and looped forever on a cycle): now every
    value it cannot hash is an InvalidPayloadError naming the path."""
    cyclic: dict[str, Any] = {"x": []}
    cyclic["x"].append(cyclic)
    for bad, where in (
        ({"n": 10**5000}, "at n"),
        (cyclic, "at x[0]"),
        ({"s": {1, 2}}, "at s"),
        ({"f": float("nan")}, "at f"),
    ):
        with pytest.raises(InvalidPayloadError, match=re.escape(where)):
            payload_version(bad)


# --- 7. a session on a payload deeper than 200 levels -------------------------------------------


def test_a_session_on_a_deep_payload_never_spends_tokens_then_fails() -> None:
    """A session on a payload 300 levels deep used to call the model, spend the tokens and then
    fail in the diff. Now a turn either works completely (recorded, undoable) or is refused
    before any model request; never a model call followed by a failure."""
    deep: Any = {}
    node = deep
    for _ in range(300):
        node["a"] = {}
        node = node["a"]
    model = ScriptedModel(['{"updateElements": {"b": 1}}'])
    session = PayloadSession(PayloadAgent(model, max_retries=0), deep)
    try:
        session.send("set b")
    except LimitExceededError:
        assert model.requests == []  # refused up front: no tokens spent
        assert session.history == ()
    else:
        assert len(model.requests) == 1
        assert session.payload["b"] == 1
        session.undo()
        assert payload_version(session.payload) == payload_version(deep)


# --- 8. misuse caught when passed ---------------------------------------------------------------


def test_misuse_is_a_configuration_error_naming_the_argument_before_any_request() -> None:
    """Each misuse the issue lists used to be accepted silently or fail with a raw error at
    run time; now each is a ConfigurationError naming the argument, raised before any model
    request."""
    model = ScriptedModel(['{"updateElements": {"a": 2}}'])
    agent = PayloadAgent(model)
    cases: dict[str, Any] = {
        "run(payload_type=": lambda: agent.run({"a": 1}, "x", payload_type=5),
        "validators[0]": lambda: PayloadAgent(model, validators=[5]),
        "run(validators=": lambda: agent.run({"a": 1}, "x", validators=[5]),
        "guards[0]": lambda: PayloadAgent(model, guards=[5]),
        "guards: expected a list": lambda: PayloadAgent(model, guards=DataLossGuard()),
        "expected_version": lambda: VersionedStore({"a": 1}).apply({}, expected_version=None),
        "to_json_patch(changes=": lambda: to_json_patch({"a": 1}, 5),  # type: ignore[arg-type]
        "DataLossGuard(min_items=": lambda: DataLossGuard(min_items="x"),  # type: ignore[arg-type]
        "DataLossGuard(max_array_shrink=": lambda: DataLossGuard(max_array_shrink="0.5"),  # type: ignore[arg-type]
        "ChangeRequestToolHandler(payload_type=": lambda: ChangeRequestToolHandler(
            {"a": 1}, payload_type=5
        ),
        "ChangeRequestToolHandler(permissions=": lambda: ChangeRequestToolHandler(
            {"a": 1},
            permissions=5,  # type: ignore[arg-type]
        ),
        "ChangeRequestToolHandler(read_scope=": lambda: ChangeRequestToolHandler(
            {"a": 1}, read_scope=5
        ),
        "payload_type": lambda: PayloadSession(agent, {"a": 1}, payload_type=5),
    }
    for argument, misuse in cases.items():
        with pytest.raises(ConfigurationError) as info:
            misuse()
        assert argument in str(info.value), (argument, str(info.value))
    assert model.requests == []


def test_a_guard_returning_none_is_a_clear_error() -> None:
    """A guard returning None used to raise a raw TypeError from inside the merge. Now the
    merge and the agent raise ConfigurationError naming the guard and the change."""

    def forgetful(change: Change) -> None:
        return None

    with pytest.raises(ConfigurationError, match=r"guard .*forgetful returned None .* at a"):
        apply_change_request({"a": 1}, {"updateElements": {"a": 2}}, guards=[forgetful])  # type: ignore[arg-type]
    model = ScriptedModel(['{"updateElements": {"a": 2}}'])
    with pytest.raises(ConfigurationError, match="forgetful returned None"):
        PayloadAgent(model, guards=[forgetful]).run({"a": 1}, "x")  # type: ignore[list-item]


def test_a_guard_returning_none_is_a_clear_error_through_the_judge() -> None:
    """The judge (issue 10) asks the guards for the agent, the tool handler and the session:
    a guard returning None is a ConfigurationError on each of them, never a TypeError and
    never a correction sent back to the model."""
    from agent_payload.judge import Judge

    def forgetful(change: Change) -> None:
        return None

    reply = '{"updateElements": {"a": 2}}'
    with pytest.raises(ConfigurationError, match="forgetful returned None"):
        Judge({"a": 1}, guards=[forgetful])(reply)  # type: ignore[list-item]
    handler = ChangeRequestToolHandler({"a": 1}, guards=[forgetful])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="forgetful returned None"):
        handler.handle(reply)
    assert handler.payload == {"a": 1}
    model = ScriptedModel([reply])
    session = PayloadSession(PayloadAgent(model, guards=[forgetful]), {"a": 1})  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="forgetful returned None"):
        session.send("x")
    assert session.history == ()
    assert session.payload == {"a": 1}


def test_file_write_error_is_public() -> None:
    """FileWriteError and SessionFileError are public in ``agent_payload.errors``."""
    import agent_payload.errors

    assert "FileWriteError" in agent_payload.errors.__all__
    assert issubclass(SessionFileError, InvalidPayloadError)
