"""Issue 30: a DELETE marker out of habit over a plain value (MERGE.md section 4, ``stale_marker``)
and the tool handler's marker when the task itself says DELETE."""

from __future__ import annotations

from typing import Any

import pytest

from agent_payload import ChangeRequestToolHandler, PayloadAgent
from agent_payload.merge import apply_change_request
from agent_payload.testing import ScriptedModel

# The data holds "DELETE" (an HTTP method), so the active marker is "__DELETE__".
CONFIG: dict[str, Any] = {
    "env": {"DB_POOL": "10", "MODE": "DELETE"},
    "routes": [{"method": "DELETE"}],
}


def test_habitual_delete_over_a_plain_value_is_refused_not_stored() -> None:
    """env.DB_POOL became "DELETE" in 0.2: now a stale_marker correction naming both ways."""
    model = ScriptedModel(
        [
            '{"updateElements": {"env": {"DB_POOL": "DELETE"}}}',
            '{"updateElements": {"env": {"DB_POOL": "__DELETE__"}}}',
        ]
    )
    result = PayloadAgent(model).run(CONFIG, "remove DB_POOL")
    assert result.marker == "__DELETE__"
    correction = model.requests[1].messages[-1].content
    assert "stale_marker" in correction and '"__DELETE__"' in correction
    assert "newElements" in correction and "replaceElements" in correction
    assert result.payload["env"] == {"MODE": "DELETE"}


@pytest.mark.parametrize(
    "request_",
    [
        {"updateElements": {"env": {"DB_POOL": "DELETE"}}},
        {"updateElements": {"env": {"DB_POOL": "__DELETE_0123abcd__"}}},
        {"updateElements": {"routes": [{"method": "__DELETE_0123abcd__"}]}},
        {"updateElements": {"routes": {"0": {"method": "DELETE", "x": "DELETE"}}}},
    ],
)
def test_any_library_marker_that_is_not_active_is_refused_wherever_it_lands(
    request_: dict[str, Any],
) -> None:
    result = apply_change_request(
        CONFIG, request_, markers={"__DELETE__"}, refuse_stale_markers=True
    )
    assert [c.code for c in result.report.conflicts] == ["stale_marker"]
    assert result.payload == CONFIG
    assert not result.report.changes


def test_a_marker_that_leaves_an_equal_value_as_it_is_is_not_refused() -> None:
    result = apply_change_request(
        CONFIG,
        {"updateElements": {"env": {"MODE": "DELETE"}, "routes": [{"method": "DELETE"}]}},
        markers={"__DELETE__"},
        refuse_stale_markers=True,
    )
    assert not result.report.conflicts and result.payload == CONFIG


def test_the_literal_text_goes_through_newElements_and_replaceElements() -> None:
    result = apply_change_request(
        CONFIG,
        {"newElements": {"env": {"DB_POOL": "DELETE"}}, "replaceElements": {"routes": []}},
        markers={"__DELETE__"},
        refuse_stale_markers=True,
    )
    assert not result.report.conflicts
    assert result.payload["env"]["DB_POOL"] == "DELETE"


def test_the_active_marker_over_a_plain_value_still_deletes() -> None:
    result = apply_change_request(
        CONFIG,
        {"updateElements": {"env": {"DB_POOL": "__DELETE__"}}},
        markers={"__DELETE__"},
        refuse_stale_markers=True,
    )
    assert not result.report.conflicts and "DB_POOL" not in result.payload["env"]


def test_without_refuse_stale_markers_the_merge_follows_the_letter() -> None:
    result = apply_change_request(
        CONFIG, {"updateElements": {"env": {"DB_POOL": "DELETE"}}}, markers={"__DELETE__"}
    )
    assert result.payload["env"]["DB_POOL"] == "DELETE"


# --- the tool handler's marker and prompt ------------------------------------------------------


def test_the_handler_prompt_handles_a_task_that_says_delete() -> None:
    """0.2 raised on prompt("DELETE the first line"); the agent handled the same task."""
    handler = ChangeRequestToolHandler({"lines": ["a", "b"]})
    parts = handler.prompt("DELETE the first line")
    assert handler.marker == "__DELETE__"
    assert '"__DELETE__"' in parts.system + parts.user
    assert "__DELETE__" in handler.openai_tool()["function"]["description"]
    result = handler.handle({"updateElements": {"lines": ["__DELETE__"]}})
    assert not result.is_error and handler.payload == {"lines": ["b"]}


def test_the_handler_will_not_change_a_marker_it_already_handed_out() -> None:
    from agent_payload.errors import ConfigurationError

    handler = ChangeRequestToolHandler({"lines": ["a", "b"]})
    handler.anthropic_tool()
    with pytest.raises(ConfigurationError, match="prompt"):
        handler.prompt("DELETE the first line")
    chosen = ChangeRequestToolHandler({"lines": ["a"]}, marker="DELETE")
    with pytest.raises(ConfigurationError, match="marker"):
        chosen.prompt("DELETE the first line")


def test_the_handler_prompt_states_its_write_permissions() -> None:
    from agent_payload import Permissions

    payload = {"id": 1, "name": "alice"}
    plain = ChangeRequestToolHandler(payload).prompt("rename to bob").system
    guarded = ChangeRequestToolHandler(payload, permissions=Permissions(deny=["id"]))
    system = guarded.prompt("rename to bob").system
    assert system != plain
    assert "Read-only" in system and "`id`" in system


def test_the_handler_prompt_refuses_read_only_words() -> None:
    from agent_payload.errors import ConfigurationError

    handler = ChangeRequestToolHandler({"id": 1, "name": "alice"})
    with pytest.raises(ConfigurationError, match=r"Permissions\(deny="):
        handler.prompt("rename", read_only=["id"])
    assert "Keep ids." in handler.prompt("rename", rules_text="Keep ids.").system
