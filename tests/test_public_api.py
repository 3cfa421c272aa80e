"""The public surface: frozen `__all__`, and a core that imports without either SDK."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import agent_payload

ROOT = Path(__file__).resolve().parent.parent


def test_all_is_sorted_and_every_name_exists() -> None:
    """``__all__`` is the one list of public names (the README's table is checked against it
    below): sorted, and every name importable."""
    assert agent_payload.__all__ == sorted(agent_payload.__all__)
    for name in agent_payload.__all__:
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
