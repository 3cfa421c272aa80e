"""Finding the change request in the model's text: thinking set aside, the scan for JSON-like
openings (in C), candidates read, identical repeats read as one, different ones refused as
ambiguous, damage reported at its position, fences and tags recorded as repairs."""

from __future__ import annotations

import bisect
import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from agent_payload._normalise import BUCKET_SPELLINGS, SNAKE_TO_CAMEL, WRAPPERS, absent, near_bucket
from agent_payload.changes import BUCKETS
from agent_payload.errors import AmbiguousReplyError
from agent_payload.parse._errors import (
    _excerpt,
    _no_request,
    _refuse,
    _reply_error,
    _too_deep,
    _truncated,
    _where,
)
from agent_payload.parse._grammar import _DSTR, MAX_REPLY_DEPTH, _Damage
from agent_payload.parse._strict import _STRICT, _read_object, _read_whole

_BLANK: Final = re.compile(r"[^\r\n]")

# After an opening brace: does what follows look like a JSON object (rather than prose)?
_JSON_START: Final = re.compile(
    r"""\{[ \t\r\n]*(?:
        \Z | \} | // | /\*
      | ["']?(?i:(?:new|update|remove|replace)[_\-]?elements?|reasoning
                |(?:payload[_\-]?)?change[_\-]?request)\b  # a damaged request still counts
      | (?: "[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)
          | '[^'\\\n]*(?:\\.[^'\\\n]*)*(?:'|\Z)
          | [A-Za-z_$][\w$]*
        ) [ \t\r\n]* (?: : | \Z )
    )""",
    re.VERBOSE,
)
# Where an object (or a JSON string holding one) may start: searched in C, so that prose
# braces cost no Python step each.
_OPENER: Final = re.compile(_JSON_START.pattern + r'|(?<!\\)"(?=[ \t]*\{)', re.VERBOSE)

_THINKING_TAGS = "thinking|think|scratchpad|reflection|analysis"
_THINKING_OPEN: Final = re.compile(rf"^[ \t]*<({_THINKING_TAGS})>", re.IGNORECASE | re.MULTILINE)
_THINKING_CLOSE: Final = re.compile(rf"</({_THINKING_TAGS})\s*>", re.IGNORECASE)
# gpt-oss "harmony": <|start|>assistant<|channel|>NAME<|message|>BODY<|end|> (or <|return|>,
# <|call|>, or the end of the reply); only the final channel's body is the answer.
_HARMONY_HEAD: Final = r"(?:[^<]|<\|constrain\|>)*<\|message\|>"
_HARMONY_FINAL: Final = re.compile(r"<\|channel\|>final\b" + _HARMONY_HEAD)
_HARMONY_PART: Final = re.compile(
    r"<\|channel\|>(?P<channel>\w+)"
    + _HARMONY_HEAD
    + r"(?P<body>(?:(?!<\|(?:end|return|call|start|channel)\|>).)*)",
    re.DOTALL,
)
_ANSWER_BLOCK: Final = re.compile(r"<(final_answer|answer)>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_DRAFT_BLOCK: Final = re.compile(r"<draft>.*?</draft\s*>", re.IGNORECASE | re.DOTALL)


_FENCE_BEFORE: Final = re.compile(r"(?:```|~~~)[^\n`~]*\n\s*\Z")
_TAG_BEFORE: Final = re.compile(
    r"<([A-Za-z_][\w\-]*)(?:\s[^<>]*)?>\s*(?:(?:```|~~~)[^\n`~]*\n\s*)?\Z"
)
_DECORATION: Final = re.compile(r"</?[A-Za-z_][\w\-]*(?:\s[^<>]*)?>|(?:```|~~~)[\w+\-]*")
_UNCLOSED_FENCE: Final = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
# (Each of the next two opens with a lookahead for the characters it can start with: the
# same matches, found without trying the whole pattern at every position of a long reply.)
_REQUEST_KEY: Final = re.compile(
    r"""(?=["'nurpc])["']?\b(?:(?:new|update|remove|replace)[_\-]?elements?|"""
    r"""(?:payload[_\-]?)?change[_\-]?request)\b["']?\s*:""",
    re.IGNORECASE,
)
_REFUSAL: Final = re.compile(
    r"""(?=[ity])\b(?:
        i(?:'m|\s+am)\s+(?:sorry|afraid)\b[^.\n]{0,40}?\b
            (?:can't|cannot|can\s+not|won't|will\s+not|unable|not\s+able)
      | i(?:\s+(?:can't|cannot|can\s+not|won't|will\s+not|am\s+unable\s+to
                  |am\s+not\s+able\s+to|must\s+decline\s+to)
          |'m\s+(?:unable|not\s+able)\s+to)
            \s+(?:help|assist|comply|fulfil|fulfill|complete|continue|support|provide
                  |perform|process|do\s+(?:that|this)|make\s+(?:that|this|these|those))
      | i\s+(?:must|have\s+to|need\s+to)\s+(?:decline|refuse)
      | (?:this|that|your)\s+request\s+(?:violates|goes\s+against|is\s+against)
    )""",
    re.IGNORECASE | re.VERBOSE,
)
_DAMAGED_LOOKAHEAD = 1000  # a damaged object is a change request if a bucket name follows soon


@dataclass(slots=True)
class _Candidate:
    start: int
    end: int
    value: Any = None  # the object read (None when damaged)
    repairs: list[str] = field(default_factory=list)
    damage: _Damage | None = None
    inside: str | None = None  # the object came from a JSON string: the decoded text


def _has_bucket(value: Any) -> bool:
    """An object with a bucket field (any spelling, near miss, or wrapped) at its top."""
    if not isinstance(value, dict):
        return False
    for key, inner in value.items():
        if key in BUCKET_SPELLINGS:
            return True
        if key in WRAPPERS:
            if isinstance(inner, str):
                try:
                    inner, _ = _read_whole(inner.strip())
                except _Damage:
                    return True  # a wrapper holding broken JSON: judged when normalised
            if isinstance(inner, dict) and (_has_bucket(inner) or not inner):
                return True
            continue
        if len(value) <= 20 and near_bucket(key):
            return True
    return False


def _empty_request(value: Any) -> bool:
    """``{}`` or ``{"reasoning": ...}`` (wrapped or not): the answer "nothing to change"."""
    if not isinstance(value, dict):
        return False
    for key, inner in value.items():
        if key in WRAPPERS:
            if not (inner is None or _empty_request(inner)):
                return False
        elif key != "reasoning":
            return False
    return True


def _canonical(value: dict[str, Any]) -> str:
    """What a request does (buckets unwrapped, renamed; no reasoning), to tell repeats."""
    obj: Any = value
    for _ in range(len(WRAPPERS)):
        wrapper = next((k for k in WRAPPERS if k in obj), None)
        if wrapper is None or any(k in BUCKET_SPELLINGS for k in obj):
            break
        inner = obj[wrapper]
        if isinstance(inner, str):
            try:
                inner, _ = _read_whole(inner.strip())
            except _Damage:
                break
        if not isinstance(inner, dict):
            break
        obj = {**{k: v for k, v in obj.items() if k != wrapper}, **inner}
    shown: dict[str, Any] = {}
    for key, item in obj.items():
        if key == "reasoning" or absent(item):
            continue
        name = SNAKE_TO_CAMEL.get(key, key)
        if isinstance(item, str) and name in BUCKETS:
            with contextlib.suppress(_Damage):
                item, _ = _read_whole(item.strip())
        shown[name] = item
    try:
        return json.dumps(shown, sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):  # pragma: no cover - deeper than the reader allows
        return repr(shown)


_MAX_STRING_DECODES = 4


class _Lines:
    """Line starts and ends of ``text`` for positions met in increasing order (amortised linear:
    hostile text with millions of ``{}`` on one line must not cost a search each)."""

    __slots__ = ("last_nl", "next_nl", "scanned", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.last_nl = -1
        self.scanned = 0
        self.next_nl = -2  # -2: not yet searched

    def alone(self, start: int, end: int) -> bool:
        """The span is alone on its line(s), fences and tags aside."""
        text = self.text
        found = text.rfind("\n", self.scanned, start)
        if found != -1:
            self.last_nl = found
        self.scanned = max(self.scanned, start)
        if self.next_nl == -2 or (self.next_nl != -1 and self.next_nl < end):
            self.next_nl = text.find("\n", end)
        line_end = len(text) if self.next_nl == -1 else self.next_nl
        before = start - self.last_nl - 1
        if before > 200 or line_end - end > 200:
            return False
        rest = text[self.last_nl + 1 : start] + text[end:line_end]
        return not _DECORATION.sub("", rest).strip()


@dataclass(slots=True)
class _Reader:
    reply: str
    repairs: list[str] = field(default_factory=list)

    # -- the whole reply --

    def read(self, text: str, *, depth: int) -> tuple[dict[str, Any], str]:
        if depth > _MAX_STRING_DECODES:
            _reply_error(
                self.reply,
                f"The reply is a JSON string encoded more than {_MAX_STRING_DECODES} times; "
                "expected one JSON object.",
                "your reply was a JSON string inside a JSON string, many times over; reply "
                "with the JSON object itself.",
            )
        if text.startswith("\ufeff"):
            text = text[1:]
            self.repairs.append("removed byte-order mark")
        stripped = text.strip()
        if not stripped:
            _no_request(self.reply, "the reply is empty")
        if stripped[0] == '"':
            try:
                whole = _STRICT.decode(stripped)
            except (ValueError, RecursionError):
                match = _DSTR.match(stripped)
                if match is None and stripped[1:2] in ("{", "[", "\\", '"'):
                    _truncated(self.reply, "the reply is a JSON string that never closes")
            else:
                if isinstance(whole, str):
                    self.repairs.append("decoded the change request from a JSON string")
                    return self.read(whole, depth=depth + 1)
        return self._scan(text)

    # -- the objects in it --

    def _scan(self, original: str) -> tuple[dict[str, Any], str]:
        text, thinking_open = self._set_aside_thinking(self._set_aside_drafts(original))
        requests: list[_Candidate] = []  # with a bucket field, or an explicit empty answer
        others: list[_Candidate] = []  # readable objects that are no change request, damage
        keys: list[int] | None = None  # where bucket names stand, found at the first damage
        lines = _Lines(text)
        count = 0
        truncated_at: int | None = None
        pos = 0
        while (match := _OPENER.search(text, pos)) is not None:
            start = match.start()
            if text[start] == '"':
                candidate = self._string_candidate(text, start)
                if candidate is None:
                    pos = start + 1
                    continue
            elif text.startswith("{}", start):  # the commonest prose brace: no reader call
                if not lines.alone(start, start + 2):
                    pos = start + 2
                    continue
                candidate = _Candidate(start, start + 2, {})
            else:
                try:
                    value, end, repairs = _read_object(text, start)
                except _Damage as damage:
                    if damage.eof:
                        truncated_at = start
                        break
                    if damage.depth:
                        requests.append(_Candidate(start, len(text), damage=damage))
                        break  # everything after it is inside it
                    # (no traceback kept: its frames would pile up for hostile prose)
                    candidate = _Candidate(start, damage.resume, damage=damage.with_traceback(None))
                else:
                    candidate = _Candidate(start, end, value, repairs)
            count += 1
            pos = candidate.end
            if candidate.damage is not None:
                if keys is None:
                    keys = [m.start() for m in _REQUEST_KEY.finditer(text)]
                at = bisect.bisect_left(keys, start)
                limit = candidate.damage.pos + _DAMAGED_LOOKAHEAD
                if candidate.damage.depth or (at < len(keys) and keys[at] < limit):
                    requests.append(candidate)
                else:
                    others[-1:] = [candidate]  # only the last is ever used
            elif _has_bucket(candidate.value) or _empty_request(candidate.value):
                # An explicit empty answer ({"reasoning": ...}, a {} alone on its line) is a
                # change request too: beside an example with buckets, which one is meant
                # cannot be known either.
                if (
                    candidate.value
                    or candidate.inside is not None
                    or lines.alone(candidate.start, candidate.end)
                ):
                    requests.append(candidate)
            else:
                others[-1:] = [candidate]  # only the last is ever used
        if truncated_at is not None:
            _truncated(
                self.reply,
                f"the reply ends inside the JSON object opened at {_where(text, truncated_at)}",
            )
        if requests:
            return self._choose(text, requests, count)
        return self._no_request_found(text, others, count, thinking_open)

    def _no_request_found(
        self, text: str, others: list[_Candidate], count: int, thinking_open: int | None
    ) -> tuple[dict[str, Any], str]:
        """No change request: a cut-off thinking block or fence, a refusal, or the last object."""
        if thinking_open is not None:
            _truncated(
                self.reply,
                f"the reply ends inside the <thinking> block opened at "
                f"{_where(text, thinking_open)}, before any change request",
            )
        if _REFUSAL.search(text.replace("\u2019", "'")):
            _refuse(self.reply, "the reply declines the task")
        if others:
            return self._take(text, others[-1], count)
        if len(_UNCLOSED_FENCE.findall(text)) % 2 == 1:
            _truncated(self.reply, "the reply ends inside a code fence, before any JSON object")
        if "{" in text:
            _no_request(self.reply, "the reply holds only prose; its braces hold no JSON object")
        _no_request(self.reply, "the reply holds no JSON object")

    def _string_candidate(self, text: str, start: int) -> _Candidate | None:
        """A JSON string at ``start`` holding a change request (tool arguments as text)."""
        match = _DSTR.match(text, start)
        if match is None:
            return None
        inner: Any = match.group()
        decodes = 0
        try:
            while isinstance(inner, str) and inner.lstrip()[:1] == '"' and decodes < 4:
                inner = _STRICT.decode(inner.strip())
                decodes += 1
        except (ValueError, RecursionError):
            return None
        if not isinstance(inner, str):
            return None
        begin = len(inner) - len(inner.lstrip())
        if _JSON_START.match(inner, begin) is None or not (
            _REQUEST_KEY.search(inner) or "reasoning" in inner or inner.strip() == "{}"
        ):
            return None
        try:
            value, repairs = _read_whole(inner)
        except _Damage as damage:
            if not _REQUEST_KEY.search(inner):
                return None
            return _Candidate(start, match.end(), damage=damage, inside=inner)
        repairs.insert(0, "decoded the change request from a JSON string")
        return _Candidate(start, match.end(), value, repairs, inside=inner)

    def _choose(
        self, text: str, requests: list[_Candidate], count: int
    ) -> tuple[dict[str, Any], str]:
        if len(requests) == 1:  # nothing to compare it with
            return self._take(text, requests[0], count)
        damaged = [c for c in requests if c.damage is not None]
        distinct: dict[str, _Candidate] = {}
        for candidate in requests:
            if candidate.damage is None:
                distinct.setdefault(_canonical(candidate.value), candidate)
        others = len(distinct) + len(damaged) - 1
        if damaged:
            self._damaged(text, damaged[0], others)
        if len(distinct) > 1:
            self._ambiguous(text, list(distinct.values()))
        self.repairs.append(
            f"read {len(requests)} identical change requests as one (the last is used)"
        )
        return self._take(text, requests[-1], count)

    def _take(self, text: str, candidate: _Candidate, count: int) -> tuple[dict[str, Any], str]:
        if candidate.damage is not None:
            self._damaged(text, candidate, 0)
        span = text[candidate.start : candidate.end]
        before = text[: candidate.start]
        if _FENCE_BEFORE.search(before[-300:]):
            self.repairs.append("removed code fence")
        tag = _TAG_BEFORE.search(before[-300:])
        if tag is not None:
            self.repairs.append(f"removed <{tag.group(1)}> tags")
        outside = _DECORATION.sub("", before + text[candidate.end :])
        if outside.strip():
            self.repairs.append("ignored text around the JSON object")
        if count > 1:
            self.repairs.append(f"ignored {count - 1} other JSON object(s) in the reply")
        self.repairs.extend(candidate.repairs)
        return candidate.value, span if candidate.inside is None else candidate.inside

    def _damaged(self, text: str, candidate: _Candidate, others: int) -> NoReturn:
        damage = candidate.damage
        assert damage is not None
        if candidate.inside is not None:
            where = (
                f"in the JSON string at {_where(text, candidate.start)} of your reply, at "
                f"{_where(candidate.inside, damage.pos)} of its text"
            )
            near = _excerpt(candidate.inside, damage.pos)
        else:
            where = f"at {_where(text, damage.pos)}"
            near = _excerpt(text, damage.pos)
        also = (
            f" Your reply also holds {others} other change request(s): send exactly one."
            if others
            else ""
        )
        if damage.depth:
            _too_deep(self.reply, f"more than {MAX_REPLY_DEPTH}", where, also, damage)
        hint = f" {damage.hint[0].upper()}{damage.hint[1:]}" if damage.hint else ""
        _reply_error(
            self.reply,
            f"The change request {where} of the reply cannot be read: {damage.what} (near "
            f"{near!r}). Nothing was guessed or applied; ask again with the feedback.",
            f"your change request cannot be read {where}: {damage.what}. Near: {near}.{hint} "
            f"Nothing was applied; send the whole change request again.{also}",
            cause=damage,
        )

    def _ambiguous(self, text: str, distinct: list[_Candidate]) -> NoReturn:
        starts = []
        for candidate in distinct:
            shown = text[candidate.start : candidate.end]
            if len(shown) > 80:
                shown = shown[:80] + "…"
            starts.append(f"{_where(text, candidate.start)}: {' '.join(shown.split())}")
        listing = "; ".join(starts)
        _reply_error(
            self.reply,
            f"The reply holds {len(distinct)} different change requests ({listing}); none was "
            "applied, since which one was meant cannot be known. Ask again with the feedback.",
            f"your reply held {len(distinct)} different change requests, starting at "
            f"{listing}. None was applied. Reply with exactly one change request (put "
            "everything to change in it), and do not quote other change requests or examples "
            "in the same reply.",
            cls=AmbiguousReplyError,
            code="ambiguous_reply",
        )

    def _set_aside_drafts(self, text: str) -> str:
        """Blank out what is not the answer (keeping lines and columns): a harmony reply's
        channels but ``final``; ``<draft>`` beside a closed ``<final_answer>`` or ``<answer>``."""
        if "<" not in text:
            return text
        if "<|channel|>" in text and _HARMONY_FINAL.search(text):
            pieces: list[str] = []
            pos = 0
            for part in _HARMONY_PART.finditer(text):
                if part.group("channel") == "final":
                    pieces.append(_BLANK.sub(" ", text[pos : part.start("body")]))
                    pieces.append(part.group("body"))
                    pos = part.end("body")
            pieces.append(_BLANK.sub(" ", text[pos:]))
            text = "".join(pieces)
            self.repairs.append("read the final channel of a harmony reply")
        if _ANSWER_BLOCK.search(text) and _DRAFT_BLOCK.search(text):
            text = _DRAFT_BLOCK.sub(lambda m: _BLANK.sub(" ", m.group(0)), text)
            self.repairs.append("removed <draft> beside the answer tag")
        return text

    def _set_aside_thinking(self, text: str) -> tuple[str, int | None]:
        """Blank out thinking blocks (keeping lines and columns); a lone closing tag at a line's
        start or end, with no opening tag before it, ends thinking begun with the reply."""
        if "<" not in text:  # no tag at all (a megabyte of JSON need not be searched)
            return text, None
        pieces: list[str] = []
        pos = 0
        first_open = _THINKING_OPEN.search(text)
        for seen, close in enumerate(_THINKING_CLOSE.finditer(text)):
            if seen >= 20 or (first_open is not None and first_open.start() < close.start()):
                break
            head = text[max(0, close.start() - 400) : close.start()]
            tail = text[close.end() : close.end() + 400]
            before = head[head.rfind("\n") + 1 :] if "\n" in head or len(head) < 400 else "x"
            after = tail[: tail.find("\n")] if "\n" in tail else tail
            if before.strip() and after.strip():
                continue
            pieces.append(_BLANK.sub(" ", text[: close.end()]))
            pos = close.end()
            self.repairs.append(f"removed thinking before a lone </{close.group(1)}>")
            break
        opened: int | None = None
        while (match := _THINKING_OPEN.search(text, pos)) is not None:
            closing = re.compile(rf"</{re.escape(match.group(1))}\s*>", re.IGNORECASE)  # cached
            end = closing.search(text, match.end())
            pieces.append(text[pos : match.start()])
            if end is None:
                pieces.append(_BLANK.sub(" ", text[match.start() :]))
                opened = match.start()
                pos = len(text)
                break
            pieces.append(_BLANK.sub(" ", text[match.start() : end.end()]))
            repair = f"removed <{match.group(1)}> block"
            if repair not in self.repairs:
                self.repairs.append(repair)
            pos = end.end()
        pieces.append(text[pos:])
        return "".join(pieces), opened
