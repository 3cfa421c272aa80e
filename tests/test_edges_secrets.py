"""Issue 30: secrets and excluded fields follow their owners through reorders and moves, and
the mask is never stored as a value."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, SecretStr

from agent_payload import ChangeRequestToolHandler
from agent_payload.errors import PayloadValidationError
from agent_payload.merge import apply_change_request

MASK = "**********"


class User(BaseModel):
    name: str
    token: SecretStr | None = None
    note: str = Field("", exclude=True)


class Team(BaseModel):
    users: list[User]
    lead: User | None = None


def _team() -> Team:
    return Team(
        users=[
            User(name="alice", token=SecretStr("tok-alice"), note="n-alice"),
            User(name="bob", token=SecretStr("tok-bob"), note="n-bob"),
        ]
    )


def _owners(team: Team) -> list[tuple[str, str | None, str]]:
    return [(u.name, u.token.get_secret_value() if u.token else None, u.note) for u in team.users]


def test_reordering_with_replace_keeps_each_token_with_its_owner() -> None:
    """0.2 moved alice's token to bob."""
    request = {
        "replaceElements": {
            "users": [{"name": "bob", "token": MASK}, {"name": "alice", "token": MASK}]
        }
    }
    result = apply_change_request(_team(), request)
    assert _owners(result.payload) == [
        ("bob", "tok-bob", "n-bob"),
        ("alice", "tok-alice", "n-alice"),
    ]


def test_the_documented_move_carries_the_secret_instead_of_storing_the_mask() -> None:
    """Delete + insert: 0.2 stored "**********" as alice's real token and reset her note."""
    request = {
        "removeElements": {"users": ["DELETE"]},
        "newElements": {"users": [{"name": "alice", "token": MASK}]},
    }
    result = apply_change_request(_team(), request)
    assert _owners(result.payload) == [
        ("bob", "tok-bob", "n-bob"),
        ("alice", "tok-alice", "n-alice"),
    ]


def test_a_move_by_index_map_insertion_carries_the_secret() -> None:
    request = {
        "updateElements": {"users": {"1": "DELETE"}},
        "newElements": {"users": {"0": [{"name": "bob", "token": MASK}]}},
    }
    result = apply_change_request(_team(), request)
    assert _owners(result.payload)[0] == ("bob", "tok-bob", "n-bob")


@pytest.mark.parametrize(
    "request_",
    [
        # a rewrite: alice's element comes back changed, so it cannot be matched
        {
            "replaceElements": {
                "users": [{"name": "alicia", "token": MASK}, {"name": "bob", "token": MASK}]
            }
        },
        # a copy: alice twice
        {"newElements": {"users": [{"name": "alice", "token": MASK}]}},
        # a new element with the mask: the mask is never stored
        {"newElements": {"users": [{"name": "carol", "token": MASK}]}},
        # a moved element whose copy is a rewrite
        {
            "removeElements": {"users": ["DELETE"]},
            "newElements": {"users": [{"name": "al", "token": MASK}]},
        },
    ],
)
def test_what_cannot_be_matched_to_one_original_is_refused(request_: dict[str, Any]) -> None:
    team = _team()
    with pytest.raises(PayloadValidationError) as info:
        apply_change_request(team, request_)
    assert "cannot be moved or written by the model" in str(info.value)
    assert _owners(team) == [("alice", "tok-alice", "n-alice"), ("bob", "tok-bob", "n-bob")]


def test_the_tool_handler_sends_the_refusal_back_as_a_correction() -> None:
    handler = ChangeRequestToolHandler(_team())
    result = handler.handle({"newElements": {"users": [{"name": "carol", "token": MASK}]}})
    assert result.is_error and "cannot be moved or written by the model" in result.content
    moved = handler.handle(
        {
            "replaceElements": {
                "users": [{"name": "bob", "token": MASK}, {"name": "alice", "token": MASK}]
            }
        }
    )
    assert not moved.is_error, moved.content
    assert _owners(handler.payload)[0] == ("bob", "tok-bob", "n-bob")


def test_a_new_element_may_hold_a_secret_the_model_was_given_but_never_the_mask() -> None:
    """A new element's secret that is not the mask is the caller's (from the task): kept, as
    the insertion tests of issue 17 expect; the mask is refused above."""
    request = {"newElements": {"users": [{"name": "carol", "token": "tok-carol"}]}}
    result = apply_change_request(_team(), request)
    assert _owners(result.payload)[2] == ("carol", "tok-carol", "")


def test_new_elements_without_secrets_and_in_place_edits_still_apply() -> None:
    request = {
        "updateElements": {"users": [{"name": "alice2"}]},
        "newElements": {"users": [{"name": "carol"}]},
    }
    result = apply_change_request(_team(), request)
    assert _owners(result.payload) == [
        ("alice2", "tok-alice", "n-alice"),
        ("bob", "tok-bob", "n-bob"),
        ("carol", None, ""),
    ]


def test_identical_originals_cannot_be_told_apart() -> None:
    team = Team(
        users=[
            User(name="x", token=SecretStr("t1")),
            User(name="x", token=SecretStr("t2")),
            User(name="y", token=SecretStr("t3")),
        ]
    )
    x, y = {"name": "x", "token": MASK}, {"name": "y", "token": MASK}
    with pytest.raises(PayloadValidationError, match="cannot be moved or written by the model"):
        apply_change_request(team, {"replaceElements": {"users": [x, y, x]}})
    # the same list given back unchanged changes nothing: every token stays
    same = apply_change_request(team, {"replaceElements": {"users": [x, x, y]}})
    assert [u.token.get_secret_value() for u in same.payload.users if u.token] == ["t1", "t2", "t3"]


def test_a_keyed_rewrite_keeps_the_values_at_their_keys() -> None:
    """An object replaced at the same key (no array position) is the same owner: its hidden
    values stay, as before."""
    team = Team(users=[], lead=User(name="ann", token=SecretStr("t-ann"), note="n-ann"))
    result = apply_change_request(
        team, {"replaceElements": {"lead": {"name": "ann b", "token": MASK}}}
    )
    lead = result.payload.lead
    assert lead is not None and (lead.name, lead.token, lead.note) == (
        "ann b",
        lead.token,
        "n-ann",
    )
    assert lead.token is not None and lead.token.get_secret_value() == "t-ann"
