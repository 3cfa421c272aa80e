"""The public surface: frozen `__all__`, and a core that imports without either SDK."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import agent_payload

ROOT = Path(__file__).resolve().parent.parent

PUBLIC = [
    "AgentPayloadChangeRequest",
    "AgentPayloadError",
    "AgentResult",
    "AsyncPayloadAgent",
    "AsyncPayloadSession",
    "ChangeRequestToolHandler",
    "ConfigurationError",
    "DataLossGuard",
    "InvalidPayloadError",
    "MergeConflictError",
    "ModelReplyError",
    "PayloadAgent",
    "PayloadSession",
    "PayloadValidationError",
    "Permissions",
    "ProviderError",
    "ReadScope",
    "RetriesExhaustedError",
    "RetryWithFeedback",
    "StalePayloadError",
    "UsageError",
    "__version__",
    "apply_change_request",
    "diff_payloads",
    "parse_change_request",
    "payload_version",
]

# 0.1's top-level names that 0.2 moved to a module: still importable from the top level for one
# release, with a DeprecationWarning naming the module (CHANGELOG lists each).
MOVED = {
    "Change": "agent_payload.report",
    "DEFAULT_MARKERS": "agent_payload.changes",
    "Finding": "agent_payload.report",
    "Hooks": "agent_payload.agent",
    "InvalidChangeRequestError": "agent_payload.errors",
    "Issue": "agent_payload.report",
    "LimitExceededError": "agent_payload.errors",
    "Limits": "agent_payload.merge",
    "MARKER": "agent_payload.changes",
    "MergeReport": "agent_payload.report",
    "MergeResult": "agent_payload.report",
    "Message": "agent_payload.providers",
    "Model": "agent_payload.providers",
    "ModelReply": "agent_payload.providers",
    "ModelRequest": "agent_payload.providers",
    "ModelRequestsBlockedError": "agent_payload.errors",
    "NoChangeRequestError": "agent_payload.errors",
    "ParsedReply": "agent_payload.parse",
    "Problem": "agent_payload.report",
    "PromptParts": "agent_payload.prompts",
    "REFERENCE_MARKER": "agent_payload.changes",
    "RefusalError": "agent_payload.errors",
    "ReplySyntaxError": "agent_payload.errors",
    "ToolResult": "agent_payload.tools",
    "TruncatedReplyError": "agent_payload.errors",
    "TurnRecord": "agent_payload.session",
    "UnknownFieldError": "agent_payload.errors",
    "Usage": "agent_payload.usage",
    "VersionedStore": "agent_payload.store",
    "anthropic_tool": "agent_payload.tools",
    "apply_if_version": "agent_payload.store",
    "change_request_schema": "agent_payload.schema",
    "check_version": "agent_payload.guards",
    "choose_marker": "agent_payload.merge",
    "combine_guards": "agent_payload.guards",
    "infer_model": "agent_payload.providers",
    "openai_tool": "agent_payload.tools",
    "parse_change_request_with_repairs": "agent_payload.parse",
    "render_confirm": "agent_payload.prompts",
    "render_correction": "agent_payload.prompts",
    "render_payload": "agent_payload.prompts",
    "render_prompt": "agent_payload.prompts",
    "responses_tool": "agent_payload.tools",
    "to_json_patch": "agent_payload.diff",
    "undo_change_request": "agent_payload.diff",
}


def test_all_is_frozen_and_sorted() -> None:
    """Adding or removing a public name is a deliberate act: update PUBLIC, the README's
    "Public API" table and the CHANGELOG. ``__all__`` is kept sorted."""
    assert agent_payload.__all__ == sorted(agent_payload.__all__)
    assert agent_payload.__all__ == PUBLIC
    for name in PUBLIC:
        assert hasattr(agent_payload, name), name


def _readme_api_table() -> list[tuple[str, str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- public-api -->\n((?:\|.*\|\n)+)", text)
    assert match is not None, "README.md has no <!-- public-api --> table"
    rows = [line.strip("|").split("|") for line in match.group(1).splitlines()[2:]]
    return [tuple(cell.strip() for cell in row) for row in rows]  # type: ignore[misc]


def test_readme_public_api_table_is_all() -> None:
    """The README's "Public API" table lists exactly ``__all__``, in its order, one line each
    with a kind and a description."""
    rows = _readme_api_table()
    assert [name.strip("`") for name, _, _ in rows] == agent_payload.__all__
    for name, kind, what in rows:
        assert kind in {"class", "exception", "function", "str"}, name
        assert what, name


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'payload_agent'"):
        agent_payload.payload_agent  # noqa: B018


@pytest.mark.slow
def test_core_imports_without_the_sdks() -> None:
    """With openai and anthropic made unimportable, the package (agent, merge, parse, prompts,
    guards, session, tools) still imports and merges; neither SDK is loaded."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('openai', 'anthropic'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import agent_payload\n"
        "r = agent_payload.apply_change_request({'a': 1}, {'updateElements': {'a': 2}})\n"
        "assert r.payload == {'a': 2}\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic')]\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_missing_sdk_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking for the OpenAI adapter without the SDK names the extra to install (the SDK made
    unimportable in this process; the adapter module is imported afresh and restored after)."""
    import agent_payload.providers
    from agent_payload.providers import infer_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for name in ["openai", *(m for m in sys.modules if m.startswith("openai."))]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "agent_payload.providers.openai", raising=False)
    monkeypatch.delattr(agent_payload.providers, "openai", raising=False)
    with pytest.raises(agent_payload.ConfigurationError, match=re.escape("agent-payload[openai]")):
        infer_model("openai:gpt-5.4-mini")
