"""Issue 30: the read scope is no oracle, a ReadScope in ``guards=`` hides what it guards, and
``read_only=`` is enforced."""

from __future__ import annotations

from typing import Any

import pytest

from agent_payload import ChangeRequestToolHandler, PayloadAgent, ReadScope
from agent_payload.judge import Judge
from agent_payload.testing import ScriptedModel

ACCOUNT: dict[str, Any] = {"name": "alice", "card": {"last4": "4242", "pin": "1234"}}
SCOPE = ["card.pin"]


def _answer(request: dict[str, Any], payload: dict[str, Any] = ACCOUNT) -> str:
    handler = ChangeRequestToolHandler(payload, read_scope=ReadScope(exclude=SCOPE))
    result = handler.handle(request)
    assert result.is_error, result.content
    assert handler.payload == payload
    return result.content


@pytest.mark.parametrize("guess", ["1234", "0000", "DELETE", None, {"x": 1}, [1]])
def test_a_write_to_a_hidden_path_answers_the_same_whatever_the_value(guess: Any) -> None:
    """0.2 accepted the PIN's current value as "nothing changed" and refused the others: an
    oracle. Every value is refused with the same text now."""
    expected = _answer({"updateElements": {"card": {"pin": "9999"}}})
    assert _answer({"updateElements": {"card": {"pin": guess}}}) == expected
    assert "1234" not in expected


@pytest.mark.parametrize("bucket", ["updateElements", "newElements", "removeElements"])
def test_hidden_and_missing_keys_answer_the_same(bucket: str) -> None:
    value = "DELETE" if bucket == "removeElements" else "1234"
    with_pin = _answer({bucket: {"card": {"pin": value}}})
    without_pin = _answer(
        {bucket: {"card": {"pin": value}}}, {"name": "alice", "card": {"last4": "4242"}}
    )
    assert with_pin == without_pin


def test_replace_naming_a_hidden_key_is_refused_the_same_way() -> None:
    a = _answer({"replaceElements": {"card": {"last4": "4242", "pin": "1234"}}})
    b = _answer({"replaceElements": {"card": {"last4": "4242", "pin": "0000"}}})
    assert a == b and "1234" not in a


def test_a_refusal_never_shows_the_parents_projection_as_the_hidden_keys_value() -> None:
    judge = Judge(ACCOUNT, read_scope=ReadScope(exclude=SCOPE))
    verdict = judge({"updateElements": {"card": {"pin": "0000"}}})
    assert not verdict.accepted
    assert all(not p.has_current for p in verdict.problems)
    assert "4242" not in verdict.feedback()


def test_entries_in_scope_beside_a_hidden_one_are_not_applied_either() -> None:
    judge = Judge(ACCOUNT, read_scope=ReadScope(exclude=SCOPE))
    verdict = judge({"updateElements": {"name": "bob", "card": {"pin": "1234"}}})
    assert not verdict.accepted and verdict.codes == ("permission_denied",)


def test_writes_in_scope_still_apply_and_placeholders_name_nothing() -> None:
    payload = {"tags": [{"secret": 1, "a": 1}, {"a": 2}], "card": ACCOUNT["card"]}
    scope = ReadScope(exclude=["tags[*].secret", "card.pin"])
    verdict = Judge(payload, read_scope=scope)(
        {"updateElements": {"tags": [{}, {"a": 3}], "card": {"last4": "1111"}}}
    )
    assert verdict.accepted, verdict.feedback()
    assert verdict.payload["tags"][1] == {"a": 3}
    assert verdict.payload["card"] == {"last4": "1111", "pin": "1234"}


# --- a ReadScope passed in guards= -----------------------------------------------------------


def test_a_read_scope_in_guards_hides_what_it_guards_in_the_handler() -> None:
    handler = ChangeRequestToolHandler(ACCOUNT, guards=[ReadScope(exclude=SCOPE)])
    parts = handler.prompt("rename alice to bob")
    assert "1234" not in parts.system + parts.user
    assert "4242" in parts.user
    result = handler.handle({"updateElements": {"card": {"pin": "1234"}}})
    assert result.is_error and "1234" not in result.content


def test_a_read_scope_in_guards_hides_what_it_guards_in_the_agent() -> None:
    model = ScriptedModel(['{"updateElements": {"name": "bob"}}'])
    result = PayloadAgent(model, guards=[ReadScope(exclude=SCOPE)]).run(ACCOUNT, "rename to bob")
    assert result.payload["card"]["pin"] == "1234"
    sent = "".join(str(m.content) for m in model.requests[0].messages)
    assert "1234" not in sent and "4242" in sent


def test_two_different_read_scopes_are_refused() -> None:
    from agent_payload.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="read_scope="):
        ChangeRequestToolHandler(
            ACCOUNT, guards=[ReadScope(exclude=SCOPE)], read_scope=ReadScope(exclude=["name"])
        )


# --- read_only= ------------------------------------------------------------------------------


def test_read_only_is_enforced_not_only_written_in_the_prompt() -> None:
    """The model changed `id` anyway in 0.2: now that change goes back as permission_denied."""
    model = ScriptedModel(
        [
            '{"updateElements": {"id": 7, "name": "bob"}}',
            '{"updateElements": {"name": "bob"}}',
        ]
    )
    agent = PayloadAgent(model, read_only=["id"])
    result = agent.run({"id": 1, "name": "alice"}, "rename to bob and renumber")
    assert result.payload == {"id": 1, "name": "bob"}
    assert result.attempts == 2
    assert "permission_denied" in str(model.requests[1].messages[-1].content)
    assert "id" in model.requests[0].messages[0].content  # still stated in the prompt


def test_rules_text_is_the_name_of_the_prompt_text() -> None:
    model = ScriptedModel(['{"updateElements": {"name": "bob"}}'] * 2)
    agent = PayloadAgent(model, rules_text="Never touch the id.")
    agent.run({"id": 1, "name": "alice"}, "rename")
    assert "Never touch the id." in model.requests[0].messages[0].content


def test_the_mcp_editor_answers_a_guess_like_any_other_value(tmp_path: Any) -> None:
    """The PIN was recovered by guessing over MCP: the editor's answers are equal now."""
    import json

    from agent_payload.mcp import PayloadFileEditor

    path = tmp_path / "account.json"
    path.write_text(json.dumps(ACCOUNT), encoding="utf-8")
    editor = PayloadFileEditor(path, hide=SCOPE)
    editor.read()
    right = editor.apply({"updateElements": {"card": {"pin": "1234"}}})
    wrong = editor.apply({"updateElements": {"card": {"pin": "0000"}}})
    assert right.is_error and wrong.is_error
    assert right.text == wrong.text
    assert json.loads(path.read_text(encoding="utf-8")) == ACCOUNT


def test_a_read_scope_inside_combined_guards_hides_too() -> None:
    from agent_payload.guards import Permissions, combine_guards

    chain = combine_guards(Permissions(deny=["name"]), ReadScope(exclude=SCOPE))
    handler = ChangeRequestToolHandler(ACCOUNT, guards=[chain])
    assert "1234" not in handler.prompt("change the card").user
