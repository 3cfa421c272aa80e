"""The README's session example (five turns, an undo and a why) runs offline as printed.

``EXAMPLE`` is the exact text of the README block. When README.md holds the block (after the
line ``<!-- session-example -->``), the test also checks that both are the same text.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

EXAMPLE = """\
from agent_payload.agent import PayloadAgent
from agent_payload.session import PayloadSession
from agent_payload.testing import ScriptedModel

# A scripted model stands in for a real one (pass an OpenAI or Anthropic client instead).
model = ScriptedModel([
    '{"updateElements": {"status": "confirmed"}, "reasoning": "Confirmed by phone."}',
    '{"newElements": {"items": [{"sku": "CABLE-2M", "qty": 2}]}, "reasoning": "Two cables."}',
    '{"updateElements": {"items": [{"qty": 3}]}, "reasoning": "Three adapters, not one."}',
    '{"updateElements": {"shipping": {"method": "express"}}, "reasoning": "Needed by Friday."}',
    '{"updateElements": {"items": [{}, "DELETE"]}, "reasoning": "Cables are out of stock."}',
])
session = PayloadSession(PayloadAgent(model), {
    "status": "draft",
    "items": [{"sku": "ADAPTER-USB-C", "qty": 1}],
    "shipping": {"method": "standard"},
})
session.send("The customer confirmed the order")
session.send("Add two 2 m cables")
session.send("Make it three adapters")
session.send("Ship express")
session.send("Drop the cables")
session.undo()  # the customer changed their mind: the cables are back
print(session.payload["items"])

turn = session.why("items[0].qty")
assert turn is not None
print(f"turn {turn.index}: {turn.task!r} because {turn.reasoning!r}")
for turn in session.history:
    print(turn.index, turn.task, [(c.op, c.path) for c in turn.changes])
session.save("order-session.json")  # PayloadSession.load("order-session.json", agent)
"""

EXPECTED_OUTPUT = """\
[{'sku': 'ADAPTER-USB-C', 'qty': 3}, {'sku': 'CABLE-2M', 'qty': 2}]
turn 3: 'Make it three adapters' because 'Three adapters, not one.'
1 The customer confirmed the order [('update', ('status',))]
2 Add two 2 m cables [('add', ('items', 1))]
3 Make it three adapters [('update', ('items', 0, 'qty'))]
4 Ship express [('update', ('shipping', 'method'))]
"""


def test_session_example_runs_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example prints the documented output and writes a history file that loads."""
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(EXAMPLE, "README session example", "exec"), {"__name__": "readme"})
    assert out.getvalue() == EXPECTED_OUTPUT
    from agent_payload.agent import PayloadAgent
    from agent_payload.session import PayloadSession
    from agent_payload.testing import ScriptedModel

    loaded = PayloadSession.load(tmp_path / "order-session.json", PayloadAgent(ScriptedModel([])))
    assert loaded.payload["shipping"] == {"method": "express"}
    assert loaded.can_redo


def test_readme_block_matches_when_present() -> None:
    """If README.md has the session example, it is exactly EXAMPLE (so the test above tests
    what readers see)."""
    readme = Path(__file__).resolve().parent.parent / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    match = re.search(r"<!-- session-example -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert match is not None, "README.md has no <!-- session-example --> block"
    assert match.group(1) == EXAMPLE
