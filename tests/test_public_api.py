"""The public surface: frozen `__all__`, and a core that imports without either SDK."""

from __future__ import annotations

import subprocess
import sys

import agent_payload

PUBLIC = [
    "AgentPayloadChangeRequest",
    "AgentPayloadError",
    "AgentResult",
    "AsyncPayloadAgent",
    "AsyncPayloadSession",
    "Change",
    "ChangeRequestToolHandler",
    "ConfigurationError",
    "DEFAULT_MARKERS",
    "DataLossGuard",
    "FileWriteError",
    "Finding",
    "Hooks",
    "InvalidChangeRequestError",
    "InvalidPayloadError",
    "Issue",
    "LimitExceededError",
    "Limits",
    "MARKER",
    "MergeConflictError",
    "MergeReport",
    "MergeResult",
    "Message",
    "Model",
    "ModelReply",
    "ModelReplyError",
    "ModelRequest",
    "ModelRequestsBlockedError",
    "NoChangeRequestError",
    "ParsedReply",
    "PayloadAgent",
    "PayloadSession",
    "PayloadValidationError",
    "Permissions",
    "Problem",
    "PromptParts",
    "ProviderError",
    "REFERENCE_MARKER",
    "ReadScope",
    "RefusalError",
    "ReplySyntaxError",
    "RetriesExhaustedError",
    "RetryWithFeedback",
    "SessionFileError",
    "StalePayloadError",
    "ToolResult",
    "TruncatedReplyError",
    "TurnRecord",
    "TurnResult",
    "UnknownFieldError",
    "Usage",
    "UsageError",
    "VersionedStore",
    "__version__",
    "anthropic_tool",
    "apply_change_request",
    "apply_if_version",
    "change_request_schema",
    "check_version",
    "choose_marker",
    "combine_guards",
    "diff_payloads",
    "format_diff",
    "format_payload_path",
    "infer_model",
    "openai_tool",
    "parse_change_request",
    "parse_change_request_with_repairs",
    "payload_version",
    "render_confirm",
    "render_correction",
    "render_payload",
    "render_prompt",
    "responses_tool",
    "to_json_patch",
    "undo_change_request",
]


def test_all_is_frozen() -> None:
    """Adding or removing a public name is a deliberate act: update PUBLIC and the CHANGELOG."""
    assert sorted(agent_payload.__all__) == PUBLIC
    for name in PUBLIC:
        assert hasattr(agent_payload, name), name


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


def test_missing_sdk_gives_an_install_hint() -> None:
    """Asking for the OpenAI adapter without the SDK names the extra to install."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'openai':\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from agent_payload import infer_model, ConfigurationError\n"
        "try:\n"
        "    infer_model('openai:gpt-5.4-mini')\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env={"OPENAI_API_KEY": "sk-test", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert "agent-payload[openai]" in out.stdout
