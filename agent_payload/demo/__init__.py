"""``agent-payload demo``: the main job end to end on a realistic invoice (28 line items).

With ``OPENAI_API_KEY`` (else ``ANTHROPIC_API_KEY``) the task goes to the real provider;
otherwise the scripted replies shipped here (``replay.json``) are replayed through the same
agent and correction loop: the first deletes index 28, one past the end, the merge refuses it
and the second reply fixes it. Offline, the result is checked against ``expected.json``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, TextIO

from agent_payload._render import Style, render_changes, render_issues
from agent_payload.agent import PayloadAgent
from agent_payload.errors import ConfigurationError
from agent_payload.providers import close_client, infer_model
from agent_payload.providers.base import Model, ModelReply, ModelRequest
from agent_payload.report import Problem
from agent_payload.result import AgentResult
from agent_payload.testing import ScriptedModel
from agent_payload.usage import Usage, estimate_tokens

__all__ = ["DEFAULT_MODELS", "choose_provider", "load_data", "run_demo"]

DEFAULT_MODELS: dict[str, str] = {"openai": "gpt-5.4-mini", "anthropic": "claude-haiku-5-5"}
"""The model each provider's demo uses unless ``--model-name`` says otherwise."""

_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def load_data(name: str) -> Any:
    """A JSON file shipped in ``agent_payload/demo`` (``invoice``, ``replay``, ``expected``)."""
    text = resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


def choose_provider(provider: str | None, offline: bool) -> str | None:
    """The provider to use, or None for the offline replay: ``offline`` wins, an explicit
    ``provider`` needs its key, else the first of ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``."""
    if offline:
        return None
    if provider is not None:
        if provider not in _KEYS:
            raise ConfigurationError(
                f"--provider: expected one of {', '.join(_KEYS)}, got {provider!r}"
            )
        if not os.environ.get(_KEYS[provider]):
            raise ConfigurationError(
                f"--provider {provider}: {_KEYS[provider]} is not set; set it, or run "
                "`agent-payload demo --offline` for the offline replay"
            )
        return provider
    return next((name for name, key in _KEYS.items() if os.environ.get(key)), None)


def _replay_model(replay: dict[str, Any]) -> Model:
    """A ``ScriptedModel`` that plays the recorded replies back, in order, with token usage
    counted from the actual request and reply text (o200k_base when bpe-openai is installed)."""
    replies: list[dict[str, Any]] = list(replay["replies"])
    played = 0

    def answer(request: ModelRequest) -> ModelReply:
        nonlocal played
        if played >= len(replies):
            raise ConfigurationError(
                f"the offline replay holds {len(replies)} replies and the agent asked for "
                f"reply #{played + 1}: the shipped replay does not fit this version's agent"
            )
        item = replies[played]
        played += 1
        text: str = item["text"]
        prompt = "\n".join(message.content for message in request.messages)
        usage = Usage(estimate_tokens(prompt), estimate_tokens(text), 1)
        return ModelReply(
            text=text,
            finish_reason=item.get("finish_reason", "stop"),
            usage=usage,
            model_name=str(replay.get("model", "replay")),
        )

    return ScriptedModel(answer, model_name=str(replay.get("model", "replay")), provider="replay")


def _clip(lines: list[str], max_lines: int) -> list[str]:
    return [*lines[:max_lines], "…"] if len(lines) > max_lines else lines


def _wrap(text: str, width: int, max_lines: int) -> str:
    """``text`` cut into lines of ``width`` characters (JSON has few spaces to break at)."""
    lines: list[str] = []
    for raw in text.strip().splitlines():
        lines.extend(raw[i : i + width] for i in range(0, max(len(raw), 1), width))
    return "\n".join(_clip(lines, max_lines))


def _correction_excerpt(request: ModelRequest, max_lines: int = 10, width: int = 100) -> str:
    """The correction the model was sent (the last user message of a retry request): its
    unindented lines (what went wrong, where, what to do), wrapped at ``width``; indented
    detail (the current payload subtree) is counted, not shown."""
    lines = [line for line in request.messages[-1].content.strip().splitlines() if line.strip()]
    kept = [line for line in lines if not line[:1].isspace()]
    shown: list[str] = []
    for line in kept:
        shown.extend(textwrap.wrap(line, width=width, subsequent_indent="  ") or [""])
    shown = _clip(shown, max_lines)
    omitted = len(lines) - len(kept)
    if omitted:
        shown.append(f"[{omitted} more lines: the current value of what it touched]")
    return "\n".join(shown)


def run_demo(
    *,
    out: TextIO | None = None,
    provider: str | None = None,
    offline: bool = False,
    model_name: str | None = None,
    color: bool = False,
    max_retries: int = 3,
) -> int:
    """Run the demo, writing to ``out`` (stdout by default); return the exit status (1 when
    the offline result differs from ``expected.json``). ``ProviderError`` and
    ``RetriesExhaustedError`` propagate."""
    out = out if out is not None else sys.stdout
    style = Style(color)
    invoice = load_data("invoice")
    replay = load_data("replay")
    task: str = replay["task"]
    chosen = choose_provider(provider, offline)

    def say(text: str = "") -> None:
        out.write(text + "\n")

    model = _introduce(say, style, chosen, offline, model_name, replay, invoice, task)
    requests: list[ModelRequest] = []
    replies: list[ModelReply] = []
    rejections: dict[int, list[Problem]] = {}

    def on_retry(attempt: int, problems: Sequence[Problem], last: bool) -> None:
        rejections[attempt] = list(problems)

    agent = PayloadAgent(
        model,
        max_retries=max_retries,
        on_request=lambda attempt, request, last: requests.append(request),
        on_response=lambda attempt, reply, last: replies.append(reply),
        on_retry=on_retry,
    )
    try:
        result = agent.run(invoice, task)
    finally:
        close_client(model)
    _show_attempts(say, style, list(zip(requests, replies, strict=False)), rejections)
    if result.attempts == 1:
        say(style.dim("  (no correction was needed this time)"))
    say()
    _show_result(say, style, result, replayed=chosen is None)
    if chosen is None:
        expected = load_data("expected")
        if result.payload != expected:
            say(style.red("Check: the result differs from expected.json; this is a bug."))
            return 1
        say(style.green("Check: the result equals the expected invoice (expected.json)."))
    return 0


def _introduce(
    say: Callable[..., None],
    style: Style,
    chosen: str | None,
    offline: bool,
    model_name: str | None,
    replay: dict[str, Any],
    invoice: dict[str, Any],
    task: str,
) -> Model:
    """Say which model answers (live or the replay), the payload and the task; return it."""
    say(style.bold("agent-payload demo"))
    if chosen is None:
        reason = (
            "--offline given"
            if offline
            else "no API key found (set OPENAI_API_KEY or ANTHROPIC_API_KEY to use a real model)"
        )
        say(
            style.yellow(f"offline replay: {reason};")
            + f" replaying {len(replay['replies'])} scripted model replies shipped with the "
            "package, through the real agent, parser, merge and correction loop."
        )
        model = _replay_model(replay)
    else:
        name = model_name or DEFAULT_MODELS[chosen]
        say(style.green(f"live: {chosen}:{name}") + f" (key from {_KEYS[chosen]})")
        model = infer_model(f"{chosen}:{name}")
    say()
    items = invoice["lineItems"]
    payload_text = json.dumps(invoice, ensure_ascii=False)
    say(
        style.bold("Payload: ") + f"invoice {invoice['invoiceNumber']}, {len(items)} line items, "
        f"{len(payload_text.encode()):,} bytes of JSON"
    )
    say(style.bold("Task:"))
    say(textwrap.indent(textwrap.fill(task, width=92), "    "))
    say()
    return model


def _show_attempts(
    say: Callable[..., None],
    style: Style,
    exchanges: list[tuple[ModelRequest, ModelReply]],
    rejections: dict[int, list[Problem]],
) -> None:
    """Each attempt: the correction sent before it, what the model replied, the verdict."""
    for number, (request, reply) in enumerate(exchanges, start=1):
        if number > 1:
            say(style.yellow(f"  correction sent back to the model before attempt {number}:"))
            say(style.dim(textwrap.indent(_correction_excerpt(request), "    | ")))
        said = f"{style.bold(f'Attempt {number}')}: the model replied "
        said += f"({reply.usage.output_tokens} output tokens) -> "
        if number == len(exchanges):
            say(said + style.green("applied") + " (the change request below)")
            continue
        why = "; ".join(
            f"{p.code or p.kind} at {p.path}" if p.path else p.code or p.kind
            for p in rejections.get(number, [])[:3]
        )
        say(said + style.red("rejected") + (f": {why}" if why else ""))
        say(textwrap.indent(_wrap(reply.text, 100, 12), "    "))


def _show_result(
    say: Callable[..., None], style: Style, result: AgentResult[Any], *, replayed: bool
) -> None:
    """The change request applied, the diff of the payload, the tokens and the usage."""
    compact = json.dumps(result.change_request.to_wire(), separators=(",", ":"), ensure_ascii=False)
    say(
        style.bold("Change request applied")
        + f" (compact JSON, {estimate_tokens(compact)} tokens):"
    )
    say(textwrap.indent(_wrap(compact, 100, 30), "    "))
    say()
    report = result.report
    say(style.bold(f"Diff of the payload ({len(report.changes)} changes):"))
    for line in render_changes(report.changes, style=style, width=96):
        say(textwrap.indent(line, "  "))
    for line in render_issues(report, style=style):
        say(textwrap.indent(line, "  "))
    say()
    rewrite = result.rewrite_tokens
    change = result.change_tokens
    saved = f"{rewrite / change:.1f}x fewer" if change > 0 else "n/a"
    tokenizer = "o200k_base" if importlib.util.find_spec("bpe_openai") is not None else "len/4"
    say(
        style.bold("Tokens: ")
        + f"a full rewrite of the payload would cost ~{rewrite:,} output tokens; "
        + f"the change request cost {change:,} ({saved}; counted with {tokenizer})."
    )
    usage = result.usage
    say(
        f"Usage over {result.attempts} attempt{'' if result.attempts == 1 else 's'}: "
        f"{usage.input_tokens:,} input"
        + (f" ({usage.cached_input_tokens:,} cached)" if usage.cached_input_tokens else "")
        + f" + {usage.output_tokens:,} output tokens"
        + (" (replay: counted from the text)" if replayed else "")
        + "."
    )
