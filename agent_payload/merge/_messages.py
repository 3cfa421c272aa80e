"""The report of one merge and every message the model reads about its change request."""

from __future__ import annotations

import json
from typing import Any, Final

from agent_payload._jsondata import (
    Link,
    describe,
    display_path,
    format_request_path,
    kind_word,
    materialize,
)
from agent_payload._paths import format_payload_path
from agent_payload.changes import MARKER
from agent_payload.errors import LimitExceededError
from agent_payload.merge._limits import Limits
from agent_payload.merge._markers import _marker_inside, is_library_marker
from agent_payload.merge._nodes import (
    _ARR,
    _MISSING,
    _OBJ,
    _fits,
    _in_update,
    _is_empty_container,
    _is_index,
    _is_index_map,
    _kind,
    _plural,
)
from agent_payload.report import ChangeOp, Issue, MergeReport

_NEW_ARRAY_EXPECTED: Final = (
    'an array of items to append, or an index map: {"2": [items]} inserts the items before '
    'element 2 (the array\'s length as key inserts at the end), {"2": {...}} adds inside '
    "element 2"
)
"""What newElements may hold where an array stands (sections 3.2.4 and 8), for messages."""


class _Reporter:
    """The report of one merge and the messages of its warnings and conflicts."""

    def __init__(self, *, markers: frozenset[str], limits: Limits, report: MergeReport) -> None:
        self.markers = markers
        self.limits = limits
        self.report = report
        self.path_parts = 0
        self.marker_name = MARKER if MARKER in markers else min(markers, default=None)

    # --- report helpers ---------------------------------------------------------------------

    def issue(
        self,
        code: str,
        rlink: Link,
        message: str,
        plink: Link | None,
        severity: str | None = None,
    ) -> Issue:
        """An Issue, counted against ``Limits.max_report_path_parts``."""
        rparts = materialize(rlink)
        pparts = materialize(plink) if plink is not None else None
        self.path_parts += len(rparts) + (len(pparts) if pparts else 0)
        if self.path_parts > self.limits.max_report_path_parts:
            maximum = self.limits.max_report_path_parts
            raise LimitExceededError(
                f"The report's warnings and conflicts would name paths of more than "
                f"max_report_path_parts={maximum} parts in all (the change request asks for "
                f"something wrong at very many deep places; the last at "
                f"{display_path(rlink)}). Fix the change request, or raise "
                "Limits(max_report_path_parts=...).",
                limit="max_report_path_parts",
                value=self.path_parts,
                maximum=maximum,
                path=display_path(rlink),
            )
        return Issue(code, format_request_path(rparts), message, pparts, severity)

    def warn(self, code: str, rlink: Link, message: str, plink: Link | None = None) -> None:
        self.report.warnings.append(self.issue(code, rlink, message, plink))

    def conflict(self, code: str, rlink: Link, message: str, plink: Link | None = None) -> None:
        self.report.conflicts.append(self.issue(code, rlink, message, plink))

    def is_marker(self, v: Any) -> bool:
        return type(v) is str and v in self.markers

    def marker_text(self) -> str:
        if self.marker_name is None:
            return "the DELETE marker (none is active in this call)"
        return f'the marker "{self.marker_name}"'

    def stale_marker(self, op: ChangeOp, old: Any, new: Any, plink: Link, rlink: Link) -> bool:
        """A marker out of habit in updateElements (conflict ``stale_marker``, not applied): a
        library marker replacing an object or an array, or inside content added where nothing
        exists. newElements and replaceElements stay literal (MERGE.md section 5).
        """
        if op == "update":
            if type(new) is not str or not _in_update(rlink):
                return False
            if type(old) is dict or type(old) is list:
                if not (new in self.markers or is_library_marker(new)):
                    return False
                what = "the object" if type(old) is dict else "the array"
            elif is_library_marker(new) and new not in self.markers:
                what = "the value"
            else:
                return False
            self.conflict(
                "stale_marker",
                rlink,
                f'The string "{new}" would replace {what} at {self.pp(plink)}. That may be '
                f"a deletion written out of habit, but {self._marker_sentence(new)} To delete "
                f"{self.pp(plink)}, write {self.marker_text()} in updateElements; to keep it, "
                "leave it out (or write {} in an array); to store that text as data, use "
                "newElements (at an existing key it sets the value) or replaceElements. "
                "Nothing of this entry was applied.",
                plink,
            )
            return True
        if op != "add" or (
            type(new) is not dict and type(new) is not list and type(new) is not str
        ):
            return False
        found = _marker_inside(new, self.markers)
        if found is None or not _in_update(rlink):
            return False
        inner, text = found
        full = (*materialize(plink), *inner)
        where = format_payload_path(full)
        self.conflict(
            "stale_marker",
            rlink,
            f"updateElements would add {self.pp(plink)} (it does not exist in the payload) "
            f'holding the string "{text}" at {where}. That looks like a deletion, but nothing '
            f"exists there to delete, and {self._marker_sentence(text)} Check the path against "
            "the payload (positions and key names); to add new data that holds this text, use "
            "newElements. Nothing of this entry was applied.",
            plink,
        )
        return True

    def _marker_sentence(self, text: str) -> str:
        if self.marker_name is None:
            return f'"{text}" is not a DELETE marker here (none is active in this call).'
        if text == self.marker_name or text in self.markers:
            return f'"{text}" only deletes where something exists.'
        return (
            f'"{text}" is not the DELETE marker of this call: the marker is "{self.marker_name}".'
        )

    # --- messages ---------------------------------------------------------------------------

    def mismatch(
        self, bucket: str, given: Any, current: Any, rlink: Link, plink: Link, *, element: bool
    ) -> None:
        """Conflict ``shape_mismatch``: ``bucket`` gives a value of the wrong kind."""
        where = self.pp(plink)
        found = describe(given)
        if isinstance(current, list) and isinstance(given, dict):
            bad = [k for k in given if not _is_index(k)]
            detail = (
                f" It is not an index map: the key {json.dumps(bad[0], ensure_ascii=False)} is "
                "not a decimal index (digits only, no sign, no leading zero)."
                if bad
                else ""
            )
            expected = (
                _NEW_ARRAY_EXPECTED
                if bucket == "newElements"
                else 'an array (positional, with {} placeholders) or an index map like {"3": {...}}'
            )
        else:
            detail = ""
            expected = kind_word(current)
        if element:
            fix = (
                "To give an element a value of another kind, delete it with "
                f"{self.marker_text()} and insert the new value in its place with a newElements "
                'index map ({"<its index>": [new value]}), or replace the whole top-level value '
                "with replaceElements."
            )
        else:
            fix = (
                "To give it a value of another kind, delete it in removeElements and give the new "
                "value at the same path in updateElements, or replace the whole top-level value "
                "with replaceElements."
            )
        message = (
            f"{bucket} gives {found} where the payload holds {kind_word(current)} at {where}; "
            f"expected {expected} here.{detail} Not applied. {fix}"
        )
        self.conflict("shape_mismatch", rlink, message, plink)

    def moot_removal(
        self, x: Any, cur: Any, present: bool, xlink: Link, plink: Link, why: str
    ) -> None:
        """Nested removals made moot: judged against the payload first (section 6)."""
        if self.judge_removal(x, cur, present, xlink, plink, element=False):
            self.warn(
                "shadowed",
                xlink,
                f"These nested removals were not applied because {why}. Nothing to do unless "
                "you meant to keep the value: then drop that entry.",
                plink,
            )

    def judge_removal(
        self, x: Any, cur: Any, present: bool, xlink: Link, plink: Link, *, element: bool
    ) -> bool:
        """True when nested removals ``x`` fit the payload value; else say why (nothing inside
        to delete: a warning; a value of another shape: a conflict)."""
        kc = _kind(cur) if present else None
        if kc not in (_OBJ, _ARR):
            self.warn_remove_missing_nested(x, cur, present, xlink, plink)
            return False
        if not _fits(kc, x):
            self.mismatch("removeElements", x, cur, xlink, plink, element=element)
            return False
        return True

    def removal_below(self, x: Any, cur: Any, xlink: Link, plink: Link, *, element: bool) -> Any:
        """``x`` when these nested removals (None: none) fit ``cur``, else None."""
        if x is not None and self.judge_removal(x, cur, True, xlink, plink, element=element):
            return x
        return None

    def nested_removal(self, x: Any, xlink: Link, plink: Link) -> Any:
        """Removals below a value: a non-empty object or array (None for an empty one); anything
        else is a conflict ``invalid_remove_value``."""
        if type(x) is dict or type(x) is list:
            return x or None
        self.invalid_remove(x, xlink, plink)
        return None

    def warn_remove_missing_nested(
        self, x: Any, cur: Any, present: bool, xlink: Link, plink: Link
    ) -> None:
        where = self.pp(plink)
        if not present:
            found = f"there is no {where} in the payload"
        else:
            found = f"{where} holds {describe(cur)}, which has nothing inside to delete"
        self.warn(
            "remove_missing",
            xlink,
            f"removeElements asks to delete inside {where}, but {found}; nothing was deleted. "
            "Check the path against the payload, or drop this entry.",
            plink,
        )

    # --- object node (section 3.1) ----------------------------------------------------------

    def pp(self, plink: Link) -> str:
        """A payload path for a message; a very deep one is shortened in the middle (the
        issue's ``payload_path`` keeps it whole)."""
        return display_path(plink)

    def shadow_new(self, kn: Link, ko: Link) -> None:
        self.warn(
            "shadowed",
            kn,
            f"{self.pp(ko)} already exists and updateElements changes it; the value given in "
            "newElements for the same key was ignored. Use updateElements alone for existing "
            "keys.",
            ko,
        )

    def new_exists(self, nv: Any, cur: Any, kn: Link, ko: Link) -> None:
        self.warn(
            "new_exists",
            kn,
            f"newElements names {self.pp(ko)}, which already exists (it holds {describe(cur)}); "
            f"treated as an update and set to {describe(nv)}. Use updateElements to change "
            "existing keys.",
            ko,
        )

    def warn_missing_key(self, bucket: str, k: str, rlink: Link, olink: Link, ko: Link) -> None:
        parent = self.pp(olink)
        self.warn(
            "remove_missing",
            rlink,
            f"{bucket} deletes {self.pp(ko)} with {self.marker_text()}, but {parent} has no key "
            f"{json.dumps(k, ensure_ascii=False)}; nothing was deleted. Check the key's spelling "
            "and path against the payload, or drop this entry.",
            ko,
        )

    def invalid_remove(self, v: Any, rlink: Link, plink: Link) -> None:
        self.conflict(
            "invalid_remove_value",
            rlink,
            f"removeElements holds {describe(v)} for {self.pp(plink)}; it may only hold "
            f"{self.marker_text()} (to delete) and objects or arrays leading to such markers. Not "
            "applied. To delete, write the marker; to change the value, use updateElements.",
            plink,
        )

    # --- array node (section 3.2) -----------------------------------------------------------

    def removal_beyond_end(
        self, v: Any, rl: Link, index: int | str, length: int, olink: Link
    ) -> None:
        if _is_empty_container(v):
            return
        if self.is_marker(v) or type(v) is dict or type(v) is list:
            self.warn(
                "remove_missing",
                rl,
                f"removeElements addresses index {index} of the array at {self.pp(olink)}, which "
                f"has {_plural(length, 'element')}; there is no such element and nothing was "
                "deleted. Positions refer to the original array: recount them.",
                olink,
            )
        else:
            self.invalid_remove(v, rl, (olink, int(index)) if isinstance(index, int) else olink)

    def root_mismatch(self, bucket: str, value: Any, root: Any) -> None:
        if type(root) is dict:
            expected = "an object (a partial of the payload)"
            if bucket == "replaceElements":
                expected = "an object naming top-level keys"
        elif bucket == "newElements":
            expected = _NEW_ARRAY_EXPECTED
        elif bucket == "replaceElements":
            expected = "an array, which replaces the whole payload"
        else:
            expected = 'an array (positional, with {} placeholders) or an index map like {"3": ...}'
        self.conflict(
            "shape_mismatch",
            (None, bucket),
            f"{bucket} is {describe(value)}, but the payload root is {kind_word(root)}; expected "
            f"{expected}. This bucket was not applied; send it in the payload's shape.",
            None,
        )

    def replace_index_map(self, root: dict[str, Any], k: str, value: Any) -> bool:
        """replaceElements gives an index map (``{"1": {...}}``) for an array: a conflict
        ``shape_mismatch`` (positions are updateElements' job), never an array silently turned
        into an object. True when reported (the key is then left as it is)."""
        cur = root.get(k, _MISSING)
        if type(cur) is not list or type(value) is not dict or not _is_index_map(value):
            return False
        where = self.pp((None, k))
        self.conflict(
            "shape_mismatch",
            ((None, "replaceElements"), k),
            f"replaceElements gives an index map ({describe(value)}) for {where}, which holds "
            f"{describe(cur)}; replacing would turn the array into an object. Not applied. To "
            "change elements by position use updateElements (an index map such as "
            '{"1": {"qty": 5}} or a positional array with {} placeholders); to replace the '
            "whole array, give the new array in replaceElements.",
            (None, k),
        )
        return True


def _strict_message(report: MergeReport) -> str:
    lines = [
        f"{_plural(len(report.conflicts), 'conflict')} in the change request; nothing was "
        "applied (strict mode):"
    ]
    for issue in report.conflicts[:20]:
        lines.append(f"  {issue.code} at {issue.path}: {issue.message}")
    if len(report.conflicts) > 20:
        lines.append(f"  ... and {len(report.conflicts) - 20} more (see .report.conflicts)")
    return "\n".join(lines)
