"""Merging into an object node (MERGE.md section 3.1).

``walk_object`` is one loop over the keys of a node: the steps share a dozen locals per key, and a
call per step per key would cost on the hot path; the steps are numbered."""

from __future__ import annotations

from itertools import chain
from typing import Any

from agent_payload._jsondata import Link, describe
from agent_payload.merge._nodes import _ARR, _MISSING, _OBJ, _PRIM, _fits, _kind
from agent_payload.merge._walk import _Site, _Walk, _Walker


class _ObjectWalker(_Walker):
    def walk_object(self, site: _Site) -> _Walk:
        c: dict[str, Any] = site.node
        u: dict[str, Any] | None = site.update
        n: dict[str, Any] | None = site.new
        x: dict[str, Any] | None = site.remove
        olink, rlink = site.at, site.result_at
        ulink, nlink, xlink = site.update_at, site.new_at, site.remove_at
        for k in dict.fromkeys(chain(x or (), u or (), n or ())):  # each key once, in that order
            xv = x.get(k, _MISSING) if x else _MISSING
            uv = u.get(k, _MISSING) if u else _MISSING
            nv = n.get(k, _MISSING) if n else _MISSING
            kx: Link = (xlink, k)
            ku: Link = (ulink, k)
            kn: Link = (nlink, k)
            ko: Link = (olink, k)
            kr: Link = (rlink, k)
            present = k in c
            cur = c[k] if present else _MISSING

            # 1. remove
            x_del = False
            x_nested: Any = None
            if self.is_marker(xv):
                if present:
                    x_del = True
                else:
                    self.warn_missing_key("removeElements", k, kx, olink, ko)
            elif xv is not _MISSING:
                x_nested = self.nested_removal(xv, kx, ko)

            # 2. delete by update
            if self.is_marker(uv):
                if x_nested is not None:
                    why = f"updateElements deletes {self.pp(ko)} with {self.marker_text()}"
                    self.moot_removal(x_nested, cur, present, kx, ko, why)
                if nv is not _MISSING:
                    self.say("shadowed:update_deletes", kn, ko)
                if present:
                    self.delete_key(c, k, ko, kx if x_del else ku)
                else:
                    self.warn_missing_key("updateElements", k, ku, olink, ko)
                continue

            # 3. k absent (never existed, or deleted in step 1)
            if not present or x_del:
                if x_nested is not None:
                    self.warn_remove_missing_nested(x_nested, cur, present, kx, ko)
                value: Any = _MISSING
                if nv is not _MISSING:
                    value, vlink = nv, kn
                    if uv is not _MISSING:
                        self.say("shadowed:new_key", ku, ko)
                elif uv is not _MISSING:
                    value, vlink = uv, ku
                    if not x_del:
                        self.say("update_missing", ku, ko, value=describe(uv))
                if value is not _MISSING:
                    self.set_key(c, k, value, kr, vlink, ko)
                elif x_del:
                    self.delete_key(c, k, ko, kx)
                continue

            # 4. k exists
            kc = self.check_payload_value(cur, ko)
            if kc == _PRIM:
                if x_nested is not None:
                    self.warn_remove_missing_nested(x_nested, cur, True, kx, ko)
                if uv is not _MISSING:
                    if nv is not _MISSING:
                        self.say("shadowed:existing_key", kn, ko)
                    if not (type(uv) is dict and not uv):
                        self.set_key(c, k, uv, kr, ku, ko)
                    else:
                        self.say("no_effect:{}", ku, ko, old=describe(cur))
                elif nv is not _MISSING:
                    self.say("new_exists", kn, ko, old=describe(cur), new=describe(nv))
                    self.set_key(c, k, nv, kr, kn, ko)
                continue

            # c[k] is a container: each bucket judged on its own
            u_set = u_fits = u_acts = False
            if uv is not _MISSING:
                u_set = _kind(uv) == _PRIM
                u_fits = _fits(kc, uv)
                u_acts = u_set or u_fits or (kc == _ARR and uv == {})  # {}: keep it
                if not u_acts:
                    self.mismatch("updateElements", uv, cur, ku, ko, element=False)
                elif type(uv) is list and not uv and cur and xv is _MISSING and nv is _MISSING:
                    # (beside a removal or an append for the same list, [] is a filler)
                    self.say("no_effect:[]", ku, ko, old=describe(cur))
            u_desc = (uv or None) if u_fits else None
            n_set = False
            n_desc: Any = None
            if nv is not _MISSING:
                if _kind(nv) == _PRIM:
                    if u_acts:
                        self.say("shadowed:existing_key", kn, ko)
                    else:
                        n_set = True
                elif _fits(kc, nv):
                    n_desc = nv or None  # an index map inserts / descends (section 8)
                elif kc == _OBJ or nv:
                    self.mismatch("newElements", nv, cur, kn, ko, element=False)
            if u_set or n_set:
                if x_nested is not None:
                    why = f"{'updateElements' if u_set else 'newElements'} replaces {self.pp(ko)}"
                    self.moot_removal(x_nested, cur, True, kx, ko, f"{why} with a primitive value")
                if u_set and n_desc is not None:
                    self.say("shadowed:existing_key", kn, ko)
                if n_set:
                    self.say("new_exists", kn, ko, old=describe(cur), new=describe(nv))
                self.set_key(c, k, uv if u_set else nv, kr, ku if u_set else kn, ko)
                continue
            x_desc = self.removal_below(x_nested, cur, kx, ko, element=False)
            if u_desc is None and n_desc is None and x_desc is None:
                continue
            child = self.owned_child(cur, kc)
            c[k] = child
            below = _Site(child, u_desc, n_desc, x_desc, ko, kr, ku, kn, kx)
            yield self.walk_object(below) if kc == _OBJ else self.walk_array(below)
