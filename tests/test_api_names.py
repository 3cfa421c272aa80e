"""An API you can guess: ``model_name`` wherever a model's name is meant (0.1's spellings kept
one release with a ``DeprecationWarning``), separate sync and async model protocols, one
``strict`` default for both providers, and ``.problems`` / ``.path`` of one type on every
error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_payload import (
    AsyncPayloadAgent,
    ConfigurationError,
    InvalidPayloadError,
    MergeConflictError,
    PayloadAgent,
    PayloadValidationError,
    RetryWithFeedback,
    apply_change_request,
)
from agent_payload import errors as errors_module
from agent_payload.errors import (
    AgentPayloadError,
    InvalidChangeRequestError,
    LimitExceededError,
    ModelReplyError,
    ProviderError,
    SessionFileError,
)
from agent_payload.providers import (
    AsyncModel,
    Message,
    Model,
    ModelReply,
    ModelRequest,
)
from agent_payload.providers.openai import OpenAIChatModel
from agent_payload.report import Problem
from agent_payload.testing import ScriptedModel

REQUEST = ModelRequest(messages=(Message("user", "hi"),))
REPLY = '{"updateElements": {"a": 2}}'


# --- model_name ----------------------------------------------------------------------------------


class _OldStyleModel:
    """A model written for 0.1's protocol: the model's name is ``name``."""

    name = "mine"
    provider = "local"

    def request(self, request: ModelRequest) -> ModelReply:
        return ModelReply(text=REPLY)

    async def arequest(self, request: ModelRequest) -> ModelReply:
        return ModelReply(text=REPLY)


# --- sync and async protocols --------------------------------------------------------------


class _SyncOnly:
    model_name = "sync-only"
    provider = "local"

    def request(self, request: ModelRequest) -> ModelReply:
        return ModelReply(text=REPLY)


class _AsyncOnly:
    model_name = "async-only"
    provider = "local"

    async def arequest(self, request: ModelRequest) -> ModelReply:
        return ModelReply(text=REPLY)


def test_sync_and_async_protocols_are_separate() -> None:
    """A model of one's own implements the one protocol its agent calls."""
    assert isinstance(_SyncOnly(), Model) and not isinstance(_SyncOnly(), AsyncModel)
    assert isinstance(_AsyncOnly(), AsyncModel) and not isinstance(_AsyncOnly(), Model)
    scripted = ScriptedModel([])
    assert isinstance(scripted, Model) and isinstance(scripted, AsyncModel)
    assert PayloadAgent(_SyncOnly()).run({"a": 1}, "set a").payload == {"a": 2}
    result = asyncio.run(AsyncPayloadAgent(_AsyncOnly()).run({"a": 1}, "set a"))
    assert result.payload == {"a": 2}


def test_an_agent_refuses_a_model_of_the_other_protocol() -> None:
    with pytest.raises(
        ConfigurationError, match=r"PayloadAgent calls request\(\).*AsyncPayloadAgent"
    ):
        PayloadAgent(_AsyncOnly())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"AsyncPayloadAgent calls arequest\(\)"):
        AsyncPayloadAgent(_SyncOnly())  # type: ignore[arg-type]


# --- strict --------------------------------------------------------------------------------------


STRICT_SCHEMA = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}},
    "required": ["reasoning"],
    "additionalProperties": False,
}


def _tool_strict(params: dict[str, Any]) -> Any:
    tool = params["tools"][0]
    return tool.get("function", tool).get("strict")


# --- .problems and .path -------------------------------------------------------------------------


def _every_error_class() -> list[type[AgentPayloadError]]:
    found = [
        getattr(errors_module, name)
        for name in errors_module.__all__
        if isinstance(getattr(errors_module, name), type)
    ]
    return [cls for cls in found if issubclass(cls, AgentPayloadError)]


def test_every_error_class_has_problems() -> None:
    """``problems`` is on every error: empty where there are none."""
    for cls in _every_error_class():
        assert hasattr(cls, "problems"), cls
    assert AgentPayloadError("x").problems == ()
    assert ProviderError("down", provider="openai").problems == ()
    assert LimitExceededError("deep", limit="max_depth", value=9, maximum=8).problems == ()


def test_an_error_takes_exactly_the_fields_its_class_declares() -> None:
    """The errors whose fields are declared on the class (no hand-written __init__) still
    refuse a misspelt keyword and a missing one, as a signature would."""
    with pytest.raises(TypeError, match="unexpected keyword 'provder'"):
        ProviderError("down", provder="openai")
    with pytest.raises(TypeError, match="needs the keyword"):
        LimitExceededError("deep", limit="max_depth", value=9)
    error = LimitExceededError("deep", limit="max_depth", value=9, maximum=8)
    assert (error.limit, error.value, error.maximum, error.path) == ("max_depth", 9, 8, "")


def test_merge_conflict_error_problems_are_its_conflicts() -> None:
    with pytest.raises(MergeConflictError) as caught:
        apply_change_request({"a": [1]}, {"updateElements": {"a": [{}, {}, 3]}}, strict=True)
    (problem,) = caught.value.problems
    (conflict,) = caught.value.report.conflicts
    assert (problem.kind, problem.code, problem.path) == ("conflict", conflict.code, conflict.path)
    assert problem.path == "updateElements.a[1]"


def test_payload_validation_error_problems_are_its_errors() -> None:
    error = PayloadValidationError("bad", errors=[(("items", 3, "qty"), "not an int")])
    (problem,) = error.problems
    assert (problem.kind, problem.path, problem.message) == (
        "validation",
        "items[3].qty",
        "not an int",
    )


def test_every_path_is_a_string() -> None:
    """``.path`` is the formatted string everywhere (``""`` for none); an invalid payload's
    segments are ``payload_path``."""
    with pytest.raises(InvalidPayloadError) as caught:
        apply_change_request({"a": {"b": [float("nan")]}}, {})
    assert caught.value.path == "a.b[0]"
    assert caught.value.payload_path == ("a", "b", 0)
    assert InvalidPayloadError("root").path == ""
    with pytest.raises(InvalidChangeRequestError) as request_error:
        apply_change_request({"a": 1}, {"updateElements": {"a": {1, 2}}})
    assert request_error.value.path == "updateElements.a"
    assert RetryWithFeedback("no").path == ""
    assert RetryWithFeedback("no", path="lines[0].qty").path == "lines[0].qty"
    assert SessionFileError("bad", file="s.json", where="turns[2]").path == "turns[2]"
    assert Problem(kind="custom", message="m").path == ""
    assert (
        ModelReplyError("x", problems=[Problem(kind="parse", message="m")]).problems[0].path == ""
    )


def test_batch_state_reads_a_reply_recorded_before_model_name() -> None:
    """A batch state file written before the rename (the reply's ``"model"``) still resumes;
    new files record ``"model_name"``."""
    from agent_payload.batch._records import reply_from as _reply_from
    from agent_payload.batch._records import reply_json as _reply_json

    old = _reply_from('{"text": "x", "usage": [1, 2], "model": "gpt-old"}')
    assert old.model_name == "gpt-old"
    new = _reply_json(ModelReply(text="x", model_name="gpt-new"))
    assert '"model_name":"gpt-new"' in new and _reply_from(new).model_name == "gpt-new"


def test_an_adapter_given_model_instead_of_model_name_says_which_keyword() -> None:
    openai = pytest.importorskip("openai")
    from agent_payload.errors import ConfigurationError

    client = openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9")
    with pytest.raises(ConfigurationError, match=r"model_name='gpt-x'"):
        OpenAIChatModel(client, model="gpt-x")


def test_sync_and_async_names_follow_one_convention() -> None:
    """As the README says: an ``Async`` class has its sync twin's public methods under the same
    names, and an ``a``-prefixed coroutine method sits beside its sync namesake."""
    import inspect

    from agent_payload import session, tools
    from agent_payload.batch import BatchJob
    from agent_payload.providers.anthropic import AnthropicModel
    from agent_payload.providers.openai import OpenAIChatModel, OpenAIResponsesModel
    from agent_payload.store import PayloadStore

    twins = [
        (PayloadAgent, AsyncPayloadAgent),
        (session.PayloadSession, session.AsyncPayloadSession),
    ]
    for sync, asynchronous in twins:
        for name, _ in inspect.getmembers(asynchronous, inspect.iscoroutinefunction):
            if not name.startswith("_"):
                assert hasattr(sync, name), (asynchronous.__name__, name)
    both = [tools.ChangeRequestToolHandler, PayloadStore, BatchJob, ScriptedModel]
    both += [OpenAIChatModel, OpenAIResponsesModel, AnthropicModel]
    for cls in both:
        coroutines = [
            name
            for name, _ in inspect.getmembers(cls, inspect.iscoroutinefunction)
            if not name.startswith("_")
        ]
        assert coroutines, cls.__name__
        for name in coroutines:
            assert name.startswith("a") and hasattr(cls, name[1:]), (cls.__name__, name)
            assert not inspect.iscoroutinefunction(getattr(cls, name[1:])), (cls.__name__, name)
