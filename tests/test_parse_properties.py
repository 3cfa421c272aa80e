"""Properties of the parser: it raises only its documented errors, whatever the text, and never
returns a truncated reply as a change request."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import ModelReplyError, ReplySyntaxError, TruncatedReplyError
from agent_payload.parse import parse_change_request, parse_change_request_with_repairs

# Characters that drive the scanner into its corners: braces, quotes, escapes, comments, tags,
# fences, Python literals.
FRAGMENTS = [
    *"{}[]\"':,/*\\#<>`~ \n\t\r.-+eE0123456789",
    *("True", "None", "false", "null", "NaN", "Infinity", "updateElements", "reasoning"),
    *("```json\n", "<thinking>", "</thinking>", "<answer>", "// c\n", "/*", "*/", "\ufeff"),
    *("payloadChangeRequest", "new_elements", "I can't help with that", "DELETE", "ключ"),
]
JSONISH = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)


def _outcome(text: str, finish_reason: str | None = None) -> dict[str, Any] | None:
    """The wire form read from ``text``, or None when it raised a ModelReplyError (anything
    else propagates and fails the test)."""
    try:
        return parse_change_request(text, finish_reason=finish_reason).to_wire()
    except ModelReplyError:
        return None


@given(st.text())
def test_arbitrary_text_raises_only_reply_errors(text: str) -> None:
    """On any text the parser returns a change request or raises a ModelReplyError with
    feedback; nothing else escapes."""
    try:
        parsed = parse_change_request_with_repairs(text)
    except ModelReplyError as error:
        assert error.feedback
        return
    assert isinstance(parsed.change_request, AgentPayloadChangeRequest)


@given(JSONISH, st.sampled_from([None, "stop", "end_turn", "tool_calls"]))
def test_json_like_noise_raises_only_reply_errors(text: str, finish_reason: str | None) -> None:
    """Noise made of JSON, JSON5, fence, tag and Python-literal fragments gives a change
    request or a ModelReplyError, never another exception."""
    _outcome(text, finish_reason)


# --- valid replies in many styles, and their mutations -------------------------------------------

KEYS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=8)
SAFE_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=12
)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | SAFE_TEXT
    | st.just("DELETE")
    | st.just({}),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
BUCKET = st.dictionaries(KEYS, VALUES, max_size=4) | st.lists(VALUES, max_size=4)
REQUESTS = st.fixed_dictionaries(
    {},
    optional={
        "newElements": BUCKET,
        "updateElements": BUCKET,
        "removeElements": BUCKET,
        "replaceElements": BUCKET,
        "reasoning": SAFE_TEXT,
    },
)

PROSE = st.sampled_from(
    [
        "",
        "Here is the change request:\n\n",
        "I'll keep item 0 with a {} placeholder and change item 1's \"value\".\n",
        "Sure! It's a small edit: the user's note says 'don't touch the rest'.\n\n",
    ]
)
AFTER = st.sampled_from(["", "\n", "\n\nLet me know if you'd like anything else!", "\n// done\n"])


def _json5_style(request: dict[str, Any]) -> str:
    """Pretty JSON with // comments after the top-level fields and a trailing comma, as chatty
    models write. (Not inside arrays: a comment in an updateElements/removeElements array is an
    error since issue 9, as it is how models elide placeholders.)"""
    text = json.dumps(request, indent=2, ensure_ascii=False)
    text = re.sub(r",\n  \"", ", // keep it's {fine}\n  \"", text)
    return text[:-2] + ",\n}" if text.endswith("\n}") else text


STYLES = ["bare", "pretty", "fenced", "tilde", "thinking", "tag", "json5", "python", "wrapped"]


def _render(request: dict[str, Any], style: str, before: str, after: str) -> tuple[str, int, int]:
    """A reply holding ``request`` in ``style``, and where its object starts and ends."""
    if style == "bare":
        body = json.dumps(request)
        return body, 0, len(body)
    if style == "pretty":
        body = json.dumps(request, indent=2, ensure_ascii=False)
    elif style == "json5":
        body = _json5_style(request)
    elif style == "python":
        body = repr(request)
    elif style == "wrapped":
        body = json.dumps({"payloadChangeRequest": request})
    else:
        body = json.dumps(request, ensure_ascii=False)
    head = {
        "fenced": before + "```json\n",
        "tilde": before + "~~~\n",
        "thinking": "<thinking>\nThe user's task: "
        + before.replace("{}", "an empty object")
        + "</thinking>\n",
        "tag": before + "<change_request>\n",
    }.get(style, before)
    tail = {"fenced": "\n```", "tilde": "\n~~~", "tag": "\n</change_request>"}.get(style, "")
    return head + body + tail + after, len(head), len(head) + len(body)


PYTHON_SAFE = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=10)


def _printable(value: Any) -> bool:
    """True when Python's repr of ``value`` is also JSON5 (no \\U or \\x escapes, finite)."""
    if isinstance(value, dict):
        return all(_printable(k) and _printable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_printable(v) for v in value)
    if isinstance(value, str):
        return all(32 <= ord(c) < 127 for c in value)
    return True


@settings(max_examples=settings.default.max_examples // 2)  # each example parses every truncation
@given(REQUESTS, st.sampled_from(STYLES), PROSE, AFTER)
def test_valid_replies_and_every_truncation(
    request: dict[str, Any], style: str, before: str, after: str
) -> None:
    """A valid reply in any style reads back as its change request; every prefix of it either
    raises a ModelReplyError or, once the whole object is present, gives exactly that change
    request: a truncated object is never returned as a (partial) change request."""
    if style == "python" and not _printable(request):
        style = "pretty"
    text, _, object_end = _render(request, style, before, after)
    expected = AgentPayloadChangeRequest.model_validate(request).to_wire()
    assert _outcome(text) == expected
    for cut in range(len(text)):
        got = _outcome(text[:cut])
        if got is not None:
            assert cut >= object_end, (cut, text[:cut])
            assert got == expected


@given(REQUESTS, st.sampled_from(STYLES), st.data())
def test_truncated_object_raises_truncated(
    request: dict[str, Any], style: str, data: st.DataObject
) -> None:
    """A reply cut anywhere inside its JSON object (after its first character) is
    TruncatedReplyError, with no finish_reason to tell."""
    if style == "python" and not _printable(request):
        style = "pretty"
    text, start, object_end = _render(request, style, "Here it is:\n", "")
    cut = data.draw(st.integers(start + 1, object_end - 1), label="cut")
    try:
        parse_change_request(text[:cut])
    except TruncatedReplyError:
        return
    raise AssertionError(f"no TruncatedReplyError for {text[:cut]!r}")


@given(REQUESTS, st.sampled_from(STYLES), st.data())
def test_inserted_junk_raises_only_reply_errors(
    request: dict[str, Any], style: str, data: st.DataObject
) -> None:
    """Junk inserted anywhere in a valid reply gives a change request or a ModelReplyError."""
    if style == "python" and not _printable(request):
        style = "pretty"
    text, _, _ = _render(request, style, "Sure:\n", "\nDone.")
    at = data.draw(st.integers(0, len(text)), label="at")
    junk = data.draw(JSONISH, label="junk")
    _outcome(text[:at] + junk + text[at:])


@given(REQUESTS, st.sampled_from(STYLES), st.sampled_from(["length", "max_tokens", "MAX_TOKENS"]))
def test_token_limit_is_always_truncated(
    request: dict[str, Any], style: str, finish_reason: str
) -> None:
    """With a token-limit finish reason, even a complete reply is TruncatedReplyError."""
    text, _, _ = _render(request, style, "", "")
    try:
        parse_change_request(text, finish_reason=finish_reason)
    except TruncatedReplyError:
        return
    raise AssertionError("a reply stopped by the token limit was accepted")


@given(REQUESTS)
def test_json_string_of_json_string_decodes(request: dict[str, Any]) -> None:
    """Tool arguments encoded once or twice as a JSON string read back as the change request."""
    expected = AgentPayloadChangeRequest.model_validate(request).to_wire()
    once = json.dumps(json.dumps(request))
    assert _outcome(once) == expected
    assert _outcome(json.dumps(once)) == expected


# --- the JSON5 / Python grammar against the truth ----------------------------------------------

_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_SEPARATORS = [", ", ",\n", ", // it's {fine}\n", ", /* } ' */ ", " ,\t", ", # c'{\n"]


def _double_quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _single_quoted(text: str) -> str:
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    body = re.sub(r"\\(.)", lambda m: '"' if m.group(1) == '"' else m.group(0), body)
    return "'" + body.replace("'", "\\'") + "'"


@st.composite
def json5_texts(draw: st.DrawFn, value: Any) -> tuple[str, bool]:
    """``value`` written the way chatty models write it (comments only between object members,
    never inside arrays), and whether that is pure JSON5 (no Python literals, no # comments)."""
    pure = True

    def render(node: Any) -> str:
        nonlocal pure
        if isinstance(node, dict):
            parts = []
            for key, item in node.items():
                if _IDENT.fullmatch(key) and draw(st.booleans()):
                    name = key
                else:
                    name = _single_quoted(key) if draw(st.booleans()) else _double_quoted(key)
                parts.append(f"{name}: {render(item)}")
            return "{" + _join(parts, comments=True) + "}"
        if isinstance(node, list):
            return "[" + _join([render(item) for item in node], comments=False) + "]"
        if isinstance(node, str):
            return _single_quoted(node) if draw(st.booleans()) else _double_quoted(node)
        if (node is None or isinstance(node, bool)) and draw(st.booleans()):
            pure = False
            return {None: "None", True: "True", False: "False"}[node]
        return json.dumps(node)

    def _join(parts: list[str], *, comments: bool) -> str:
        nonlocal pure
        text = ""
        for i, part in enumerate(parts):
            text += part
            if i < len(parts) - 1 or (parts and draw(st.booleans())):
                separator = draw(st.sampled_from(_SEPARATORS if comments else [", ", ",\n"]))
                pure = pure and "#" not in separator
                text += separator
        return text

    return render(value), pure


@given(st.dictionaries(KEYS, VALUES, max_size=5), st.data())
def test_grammar_reads_what_models_write(value: dict[str, Any], data: st.DataObject) -> None:
    """Comments (//, /* */, #), single quotes, unquoted keys, trailing commas and Python
    literals read back as the value written; where the text is pure JSON5, json5 (the
    reference implementation) reads the same value."""
    import json5

    text, pure = data.draw(json5_texts(value), label="text")
    if pure and len(text) < 2000:
        assert json5.loads(text) == value
    request = parse_change_request(f"Here:\n{{updateElements: {text}}}")
    assert request.update_elements == value


def test_escaped_surrogate_pairs_are_joined_lone_ones_refused() -> None:
    """An emoji written as \\ud83d\\ude80 in a JSON5-only reply is the emoji; a lone
    surrogate is a syntax error (it would make the payload unsavable later)."""
    request = parse_change_request("{updateElements: {a: '\\ud83d\\ude80', b: 0x10}}")
    assert request.update_elements == {"a": "🚀", "b": 16}
    with pytest.raises(ReplySyntaxError, match="surrogate"):
        parse_change_request("{updateElements: {a: '\\ud800'}}")
