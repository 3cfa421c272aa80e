"""Smoke checks run against the installed wheel (not the checkout)."""

import sys

import agent_payload
from agent_payload import apply_change_request
from agent_payload.prompts import render_prompt

assert "site-packages" in agent_payload.__file__, agent_payload.__file__
result = apply_change_request({"a": [1, 2]}, {"updateElements": {"a": [{}, "DELETE"]}})
assert result.payload == {"a": [1]}, result.payload
parts = render_prompt({"a": [1, 2]}, "remove the second element", marker="DELETE")
assert "DELETE" in parts.system and "remove the second element" in parts.user
if sys.argv[1:] == ["core"]:
    for sdk in ("openai", "anthropic"):
        assert sdk not in sys.modules, f"the core imported {sdk}"
print("smoke", sys.argv[1:], "ok")
