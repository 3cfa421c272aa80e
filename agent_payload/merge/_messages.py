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

_TEXTS: Final[dict[str, str]] = {
    # "code" or "code:variant" -> a str.format template with ``where`` (the payload path),
    # ``marker`` (the marker in force) and its own fields; mismatch and root_mismatch compose
    # the other shape_mismatch messages
    "index_out_of_range:update": (
        "The index map key {quoted} addresses element {key} of the array at {where}, but it has "
        "{elements}. Not applied. Keys refer to positions in the current array; an index map "
        "never appends: use newElements to add items at the end."
    ),
    "index_out_of_range:insert": (
        "newElements inserts before element {key} of the array at {where}, but it has "
        "{elements}: insertion keys go from 0 to {length} (the length, {length}, inserts after "
        "the last element). Not applied. Keys are positions in the original array: recount them."
    ),
    "index_out_of_range:inside": (
        "newElements adds inside element {key} of the array at {where}, but it has {elements}. "
        "Not applied. Keys are positions in the original array; to insert new items give a "
        'list: {{"{length}": [...]}} appends them.'
    ),
    "placeholder_out_of_range": (
        "The array at {where} has {elements}, but updateElements holds {what} at index {index}, "
        "beyond its end, where there is no element to keep or delete. This item and everything "
        "after it in this array ({items}) were not applied. Positions refer to the original "
        "array: recount them; to add items at the end use newElements."
    ),
    "update_append": (
        "updateElements gives an item at index {index}, beyond the end of the array at {array} "
        "({length}); it was appended as given (markers and {{}} inside it are data). Use "
        "newElements to append."
    ),
    "update_missing": (
        "updateElements names {where}, which does not exist in the payload; treated as an "
        "addition, set to {value} as given (markers and {{}} inside it are data). Use "
        "newElements for new keys."
    ),
    "new_exists": (
        "newElements names {where}, which already exists (it holds {old}); treated as an update "
        "and set to {new}. Use updateElements to change existing keys."
    ),
    "no_effect:{}": (
        "{{}} in updateElements over {where} (which holds {old}) changes nothing: {{}} means "
        "keep as it is. To set a new value, give the value itself; to make it an empty object, "
        "use replaceElements (top-level key) or delete it in removeElements and add {{}} with "
        "newElements."
    ),
    "no_effect:[]": (
        "[] in updateElements over {where} (which holds {old}) changes nothing: an array in "
        "updateElements is positional, and an empty one names no element. To empty the list, "
        "use replaceElements with [] (top-level key) or delete its elements with {marker} in "
        "removeElements."
    ),
    "shadowed:update_deletes": (
        "newElements sets {where}, but updateElements deletes it with {marker} at the same path; "
        "the deletion wins and this value was not added. Send only one of the two."
    ),
    "shadowed:new_key": (
        "{where} is set from newElements; the value given in updateElements for the same new "
        "key was ignored. Give a new key in newElements only."
    ),
    "shadowed:existing_key": (
        "{where} already exists and updateElements changes it; the value given in newElements "
        "for the same key was ignored. Use updateElements alone for existing keys."
    ),
    "shadowed:element_deleted": (
        "removeElements deletes the element {where}, so this change to it was not applied. Send "
        "only one of the two."
    ),
    "shadowed:element_replaced": (
        "updateElements replaces the element {where} with a primitive value, so what newElements "
        "adds inside it was not applied. Send only one of the two."
    ),
    "shadowed:moot": (
        "These nested removals were not applied because {why}. Nothing to do unless you meant to "
        "keep the value: then drop that entry."
    ),
    "shadowed:replaced_key": (
        "replaceElements replaces the top-level key {key} as a whole, so what {bucket} says of "
        "it was not applied. Name a key in one bucket only."
    ),
    "shadowed:replaced_root": (
        "replaceElements replaces the whole payload, so {bucket} was not applied. Send either "
        "replaceElements or the other buckets."
    ),
    "remove_missing:key": (
        "{bucket} deletes {where} with {marker}, but {parent} has no key {key}; nothing was "
        "deleted. Check the key's spelling and path against the payload, or drop this entry."
    ),
    "remove_missing:inside": (
        "removeElements asks to delete inside {where}, but {found}; nothing was deleted. Check "
        "the path against the payload, or drop this entry."
    ),
    "remove_missing:index": (
        "removeElements addresses index {index} of the array at {where}, which has {length}; "
        "there is no such element and nothing was deleted. Positions refer to the original "
        "array: recount them."
    ),
    "invalid_remove_value": (
        "removeElements holds {value} for {where}; it may only hold {marker} (to delete) and "
        "objects or arrays leading to such markers. Not applied. To delete, write the marker; to "
        "change the value, use updateElements."
    ),
    "shape_mismatch:deleted": (
        "{bucket} deletes the element {where} in this same request, so newElements cannot add "
        "inside it; the deletion stands and this part was not applied. To put a changed copy in "
        'its place, insert the full new value with a list: {{"{index}": [...]}}.'
    ),
    "shape_mismatch:new_value": (
        "newElements gives {value} for element {key} of the array at {where}; in a newElements "
        "index map each value is a list of items to insert before that element (e.g. "
        '{{"{key}": [...]}}) or an object that adds inside it. Not applied. To replace the '
        "element use updateElements; to delete it, use {marker}."
    ),
    "shape_mismatch:new_into_array": (
        "newElements adds inside element {index} at {where}, which is an array, with {value} "
        "that is not an index map (the key {key} is not a decimal index). Not applied. Inside "
        'an array give an index map: {{"2": [items]}} inserts the items before its element 2, '
        '{{"2": {{...}}}} adds inside its element 2.'
    ),
    "shape_mismatch:new_into_value": (
        "newElements adds inside element {index} at {where}, but it holds {value}, which has no "
        "keys or items to add to. Not applied. To replace the element use updateElements; to "
        'insert items before it give a list: {{"{index}": [...]}}.'
    ),
    "shape_mismatch:replace_map": (
        "replaceElements gives an index map ({value}) for {where}, which holds {old}; replacing "
        "would turn the array into an object. Not applied. To change elements by position use "
        'updateElements (an index map such as {{"1": {{"qty": 5}}}} or a positional array with '
        "{{}} placeholders); to replace the whole array, give the new array in replaceElements."
    ),
    "stale_marker:replace": (
        'The string "{new}" would replace {what} at {where}. That may be a deletion written out '
        "of habit, but {sentence} To delete {where}, write {marker} in updateElements; to keep "
        "it, leave it out (or write {{}} in an array); to store that text as data, use "
        "newElements (at an existing key it sets the value) or replaceElements. Nothing of this "
        "entry was applied."
    ),
    "stale_marker:add": (
        "updateElements would add {where} (it does not exist in the payload) holding the string "
        '"{text}" at {inside}. That looks like a deletion, but nothing exists there to delete, '
        "and {sentence} Check the path against the payload (positions and key names); to add new "
        "data that holds this text, use newElements. Nothing of this entry was applied."
    ),
}
_CONFLICTS: Final = frozenset(
    {
        "index_out_of_range",
        "invalid_remove_value",
        "placeholder_out_of_range",
        "shape_mismatch",
        "stale_marker",
    }
)
"""The codes of the messages above that are conflicts (the others are warnings)."""


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
        self, code: str, rlink: Link, message: str, plink: Link | None, severity: str | None = None
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

    def say(self, name: str, rlink: Link, plink: Link | None, **fields: Any) -> None:
        """Report the warning or conflict ``name`` of ``_TEXTS`` (its code: before any ``:``)."""
        code = name.partition(":")[0]
        message = _TEXTS[name].format(where=self.pp(plink), marker=self.marker_text(), **fields)
        issues = self.report.conflicts if code in _CONFLICTS else self.report.warnings
        issues.append(self.issue(code, rlink, message, plink))

    def pp(self, plink: Link) -> str:
        """A payload path for a message, a very deep one shortened (``payload_path`` is whole)."""
        return display_path(plink)

    def is_marker(self, v: Any) -> bool:
        return type(v) is str and v in self.markers

    def marker_text(self) -> str:
        if self.marker_name is None:
            return "the DELETE marker (none is active in this call)"
        return f'the marker "{self.marker_name}"'

    def stale_marker(self, op: ChangeOp, old: Any, new: Any, plink: Link, rlink: Link) -> bool:
        """A marker out of habit in updateElements (conflict ``stale_marker``, not applied): a
        library marker replacing an object or an array, or inside content added where nothing
        exists. newElements and replaceElements stay literal (MERGE.md section 5)."""
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
            sentence = self._marker_sentence(new)
            self.say("stale_marker:replace", rlink, plink, new=new, what=what, sentence=sentence)
            return True
        if op != "add" or (
            type(new) is not dict and type(new) is not list and type(new) is not str
        ):
            return False
        found = _marker_inside(new, self.markers)
        if found is None or not _in_update(rlink):
            return False
        inner, text = found
        inside = format_payload_path((*materialize(plink), *inner))
        sentence = self._marker_sentence(text)
        self.say("stale_marker:add", rlink, plink, text=text, inside=inside, sentence=sentence)
        return True

    def _marker_sentence(self, text: str) -> str:
        if self.marker_name is None:
            return f'"{text}" is not a DELETE marker here (none is active in this call).'
        if text == self.marker_name or text in self.markers:
            return f'"{text}" only deletes where something exists.'
        return (
            f'"{text}" is not the DELETE marker of this call: the marker is "{self.marker_name}".'
        )

    def mismatch(
        self, bucket: str, given: Any, current: Any, rlink: Link, plink: Link, *, element: bool
    ) -> None:
        """Conflict ``shape_mismatch``: ``bucket`` gives a value of the wrong kind."""
        detail = ""
        expected = kind_word(current)
        if isinstance(current, list) and isinstance(given, dict):
            bad = next((k for k in given if not _is_index(k)), None)
            if bad is not None:
                detail = (
                    f" It is not an index map: the key {json.dumps(bad, ensure_ascii=False)} is "
                    "not a decimal index (digits only, no sign, no leading zero)."
                )
            expected = (
                _NEW_ARRAY_EXPECTED
                if bucket == "newElements"
                else 'an array (positional, with {} placeholders) or an index map like {"3": {...}}'
            )
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
            f"{bucket} gives {describe(given)} where the payload holds {kind_word(current)} at "
            f"{self.pp(plink)}; expected {expected} here.{detail} Not applied. {fix}"
        )
        self.report.conflicts.append(self.issue("shape_mismatch", rlink, message, plink))

    def moot_removal(
        self, x: Any, cur: Any, present: bool, xlink: Link, plink: Link, why: str
    ) -> None:
        """Nested removals made moot: judged against the payload first (section 6)."""
        if self.judge_removal(x, cur, present, xlink, plink, element=False):
            self.say("shadowed:moot", xlink, plink, why=why)

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
        self.say("invalid_remove_value", xlink, plink, value=describe(x))
        return None

    def warn_remove_missing_nested(
        self, x: Any, cur: Any, present: bool, xlink: Link, plink: Link
    ) -> None:
        where = self.pp(plink)
        if not present:
            found = f"there is no {where} in the payload"
        else:
            found = f"{where} holds {describe(cur)}, which has nothing inside to delete"
        self.say("remove_missing:inside", xlink, plink, found=found)

    def warn_missing_key(self, bucket: str, k: str, rlink: Link, olink: Link, ko: Link) -> None:
        key = json.dumps(k, ensure_ascii=False)
        self.say("remove_missing:key", rlink, ko, bucket=bucket, parent=self.pp(olink), key=key)

    def removal_beyond_end(
        self, v: Any, rl: Link, index: int | str, length: int, olink: Link
    ) -> None:
        if _is_empty_container(v):
            return
        if self.is_marker(v) or type(v) is dict or type(v) is list:
            elements = _plural(length, "element")
            self.say("remove_missing:index", rl, olink, index=index, length=elements)
        else:
            plink = (olink, int(index)) if isinstance(index, int) else olink
            self.say("invalid_remove_value", rl, plink, value=describe(v))

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
        message = (
            f"{bucket} is {describe(value)}, but the payload root is {kind_word(root)}; expected "
            f"{expected}. This bucket was not applied; send it in the payload's shape."
        )
        self.report.conflicts.append(self.issue("shape_mismatch", (None, bucket), message, None))

    def replace_index_map(self, root: dict[str, Any], k: str, value: Any) -> bool:
        """replaceElements gives an index map (``{"1": {...}}``) for an array: a conflict
        ``shape_mismatch`` (positions are updateElements' job), never an array silently turned
        into an object. True when reported (the key is then left as it is)."""
        cur = root.get(k, _MISSING)
        if type(cur) is not list or type(value) is not dict or not _is_index_map(value):
            return False
        rlink = ((None, "replaceElements"), k)
        self.say(
            "shape_mismatch:replace_map", rlink, (None, k), value=describe(value), old=describe(cur)
        )
        return True


def _strict_message(report: MergeReport) -> str:
    lines = [
        f"{_plural(len(report.conflicts), 'conflict')} in the change request; nothing was "
        "applied (strict mode):"
    ]
    lines += [f"  {issue.code} at {issue.path}: {issue.message}" for issue in report.conflicts[:20]]
    if len(report.conflicts) > 20:
        lines.append(f"  ... and {len(report.conflicts) - 20} more (see .report.conflicts)")
    return "\n".join(lines)
