"""Merging into an array node (MERGE.md sections 3.2 and 8): positions, index maps, insertion.

``walk_array`` is one loop over the indices the buckets name: the steps share their locals, and a
call per step per element would cost on the hot path."""

from __future__ import annotations

import json
from typing import Any

from agent_payload._jsondata import Link, describe, json_equal, materialize
from agent_payload.merge._nodes import (
    _ARR,
    _MISSING,
    _OBJ,
    _PRIM,
    _elements,
    _fits,
    _index_below,
    _is_index,
    _kind,
    _plural,
)
from agent_payload.merge._walk import _Site, _Walk, _Walker


class _ArrayWalker(_Walker):
    def walk_array(self, site: _Site) -> _Walk:
        a: list[Any] = site.node
        ua, na, xa = site.update, site.new, site.remove
        olink, rlink = site.at, site.result_at
        ulink, nlink, xlink = site.update_at, site.new_at, site.remove_at
        length = len(a)
        # entries of each bucket by original index: index -> (value, request link)
        u_at: dict[int, tuple[Any, Link]] = {}
        x_at: dict[int, tuple[Any, Link]] = {}
        if type(ua) is list:
            u_at = {i: (ua[i], (ulink, i)) for i in range(min(len(ua), length))}
        elif ua:
            for key, value in ua.items():
                idx = _index_below(key, length)
                if idx is None:
                    quoted, elements = json.dumps(key), _elements(length)
                    name = "index_out_of_range:update"
                    self.say(name, (ulink, key), olink, quoted=quoted, key=key, elements=elements)
                else:
                    u_at[idx] = (value, (ulink, key))
        if type(xa) is list:
            x_at = {i: (xa[i], (xlink, i)) for i in range(min(len(xa), length))}
            for j in range(length, len(xa)):
                self.removal_beyond_end(xa[j], (xlink, j), j, length, olink)
        elif xa:
            for key, value in xa.items():
                idx = _index_below(key, length)
                if idx is None:
                    self.removal_beyond_end(value, (xlink, key), key, length, olink)
                else:
                    x_at[idx] = (value, (xlink, key))
        # a newElements index map (section 8): insertions before original positions (the
        # length included) and descents into original elements
        ins_at: dict[int, tuple[list[Any], Link]] = {}
        n_at: dict[int, tuple[dict[str, Any], Link]] = {}
        if type(na) is dict:
            self.read_insertions(na, length, olink, nlink, ins_at, n_at)

        deleted: list[int] = []
        placed: dict[int, list[Any]] = {}  # original position -> items inserted before it
        inserted = 0
        for i in sorted(u_at.keys() | x_at.keys() | ins_at.keys() | n_at.keys()):
            if i in ins_at:
                items, il = ins_at[i]
                for j, item in enumerate(items):
                    at: Link = (rlink, i - len(deleted) + inserted)
                    # judged at its result position in the original container (as an append)
                    glink: Link = (olink, i - len(deleted) + inserted)
                    if self.commit("add", at, None, item, (il, j), glink):
                        placed.setdefault(i, []).append(item)
                        inserted += 1
                if i == length:
                    break
            ri = i - len(deleted) + inserted
            ai = a[i]
            io: Link = (olink, i)
            ir: Link = (rlink, ri)
            xi, xl = x_at.get(i, (_MISSING, None))
            ui, ul = u_at.get(i, (_MISSING, None))
            ni, nl = n_at.get(i, (None, None))
            x_del = self.is_marker(xi)
            u_del = self.is_marker(ui)
            x_nested = None if xi is _MISSING or x_del else self.nested_removal(xi, xl, io)
            if x_del or u_del:
                if x_del and not u_del and ui is not _MISSING and not (type(ui) is dict and not ui):
                    self.say("shadowed:element_deleted", ul, io)
                if u_del and x_nested is not None:
                    why = f"updateElements deletes the element {self.pp(io)}"
                    self.moot_removal(x_nested, ai, True, xl, io, why)
                if ni is not None:
                    bucket = "removeElements" if x_del else "updateElements"
                    self.say("shape_mismatch:deleted", nl, io, bucket=bucket, index=i)
                if self.commit("delete", io, ai, None, xl if x_del else ul):
                    deleted.append(i)
                continue
            if ni is not None:
                ni = self.new_descent(ni, ai, nl, io, i)
            u_acts = ui is not _MISSING and not (type(ui) is dict and not ui)
            fits_u = False
            if u_acts:
                ka = self.check_payload_value(ai, io)
                kui = _kind(ui)
                if ka == _PRIM or kui == _PRIM:
                    if x_nested is not None and ka == _PRIM:
                        self.warn_remove_missing_nested(x_nested, ai, True, xl, io)
                    elif x_nested is not None:
                        where = self.pp(io)
                        why = f"updateElements replaces the element {where} with a primitive value"
                        self.moot_removal(x_nested, ai, True, xl, io, why)
                    if ni is not None:
                        self.say("shadowed:element_replaced", nl, io)
                    if not json_equal(ai, ui) and self.commit("update", ir, ai, ui, ul, io):
                        a[i] = ui
                    continue
                fits_u = _fits(ka, ui)
            x_desc = self.removal_below(x_nested, ai, xl, io, element=True)
            if u_acts and not fits_u:
                self.mismatch("updateElements", ui, ai, ul, io, element=True)
            if fits_u or x_desc is not None or ni is not None:
                u_desc = (ui or None) if fits_u else None
                kind = _kind(ai)
                a[i] = child = self.owned_child(ai, kind)  # our own, to edit in place
                below = _Site(child, u_desc, ni, x_desc, io, ir, ul, nl, xl)
                yield self.walk_object(below) if kind == _OBJ else self.walk_array(below)

        if deleted and not placed and len(deleted) <= 16:
            for i in reversed(deleted):
                del a[i]
        elif deleted or placed:
            self.rebuild(a, length, deleted, placed)

        # 3. beyond the end of a positional update array
        if type(ua) is list and len(ua) > length:
            for j in range(length, len(ua)):
                item = ua[j]
                if (type(item) is dict and not item) or self.is_marker(item):
                    rest = len(ua) - j
                    what = "a {} placeholder" if type(item) is dict else f'the marker "{item}"'
                    self.say(
                        "placeholder_out_of_range",
                        (ulink, j),
                        olink,
                        elements=_elements(length),
                        what=what,
                        index=j,
                        items=_plural(rest, "item"),
                    )
                    break
                ri = len(a)
                array, elements = self.pp(olink), _plural(length, "element")
                name = "update_append"
                self.say(name, (ulink, j), (rlink, ri), index=j, array=array, length=elements)
                if self.commit("add", (rlink, ri), None, item, (ulink, j), (olink, ri)):
                    a.append(item)

        # 4. append (a positional newElements list; an index map inserted above)
        if type(na) is list:
            for j, item in enumerate(na):
                if type(item) is dict and not item:
                    continue
                ri = len(a)
                if self.commit("add", (rlink, ri), None, item, (nlink, j), (olink, ri)):
                    a.append(item)
        if self.layouts is not None:
            counts = {i: len(items) for i, items in placed.items()}
            self.layouts[materialize(olink)] = (length, deleted, counts, len(a))

    # --- insertion (section 8) --------------------------------------------------------------

    def read_insertions(
        self,
        na: dict[str, Any],
        length: int,
        olink: Link,
        nlink: Link,
        ins_at: dict[int, tuple[list[Any], Link]],
        n_at: dict[int, tuple[dict[str, Any], Link]],
    ) -> None:
        """Sort a newElements index map into insertions (list values, keys 0 to the length)
        and descents (object values, keys below the length); report everything else."""
        elements = _elements(length)
        for key, value in na.items():
            kl: Link = (nlink, key)
            kind = _kind(value)
            if kind != _ARR and kind != _OBJ:
                self.say("shape_mismatch:new_value", kl, olink, value=describe(value), key=key)
                continue
            inserts = kind == _ARR  # a list inserts before the key (the length included)
            idx = _index_below(key, length + 1 if inserts else length)
            if idx is None:
                name = "index_out_of_range:insert" if inserts else "index_out_of_range:inside"
                self.say(name, kl, olink, key=key, elements=elements, length=length)
            elif value and inserts:
                ins_at[idx] = (value, kl)
            elif value:
                n_at[idx] = (value, kl)

    def rebuild(
        self, a: list[Any], length: int, deleted: list[int], placed: dict[int, list[Any]]
    ) -> None:
        """``a`` as the result orders it: survivors in original order, each position's
        inserted items before it, the length's after the last survivor."""
        gone = set(deleted)
        out: list[Any] = []
        start = 0
        for i in sorted(gone | placed.keys()):
            out.extend(a[start:i])
            out.extend(placed.get(i, ()))
            start = i + 1 if i in gone else i
        out.extend(a[start:length])
        a[:] = out

    def new_descent(self, ni: dict[str, Any], ai: Any, nl: Link, io: Link, i: int) -> Any:
        """``ni`` when it can descend into element ``ai``; else report why and None."""
        ka = self.check_payload_value(ai, io)
        if ka != _PRIM and _fits(ka, ni):
            return ni
        if ka == _ARR:
            bad = next(k for k in ni if not _is_index(k))
            key = json.dumps(bad, ensure_ascii=False)
            name = "shape_mismatch:new_into_array"
            self.say(name, nl, io, index=i, value=describe(ni), key=key)
        else:
            self.say("shape_mismatch:new_into_value", nl, io, index=i, value=describe(ai))
        return None
