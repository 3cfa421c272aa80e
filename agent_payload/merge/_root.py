"""Merging at the root of the payload (MERGE.md sections 3.3 and 3.4); the complete merger."""

from __future__ import annotations

import json
from typing import Any

from agent_payload._jsondata import json_equal
from agent_payload.merge._arrays import _ArrayWalker
from agent_payload.merge._nodes import _ARR, _OBJ, _fits
from agent_payload.merge._objects import _ObjectWalker
from agent_payload.merge._walk import _run, _Site

_U, _N, _X, _R = "updateElements", "newElements", "removeElements", "replaceElements"


class _Merger(_ObjectWalker, _ArrayWalker):
    """One merge: the walk of objects and arrays, started at the root."""

    def merge_root(self, root: Any, buckets: dict[str, Any]) -> Any:
        """Each bucket checked against the root's kind, replaceElements applied, then the walk."""
        r = buckets.get(_R)
        kind = _OBJ if type(root) is dict else _ARR
        parts = {
            name: buckets.get(name) for name in ((_X, _U, _N) if kind == _OBJ else (_U, _X, _N))
        }
        for name, value in parts.items():
            if value is not None and not _fits(kind, value):
                self.root_mismatch(name, value, root)
                parts[name] = None
        if r is not None and type(r) is not type(root):
            self.root_mismatch(_R, r, root)
        elif r is not None and kind == _ARR:
            return self.replace_root(root, r, parts)
        elif r is not None:
            self.replace_keys(root, r, parts)
        site = _Site(
            root, parts[_U], parts[_N], parts[_X], None, None, (None, _U), (None, _N), (None, _X)
        )
        _run(self.walk_object(site) if kind == _OBJ else self.walk_array(site))
        return root

    def replace_keys(self, root: dict[str, Any], r: dict[str, Any], parts: dict[str, Any]) -> None:
        """replaceElements at an object root: key by key; the other buckets lose those keys."""
        for k, value in r.items():
            for name in (_U, _X, _N):
                b = parts[name]
                if b is not None and k in b:
                    key = json.dumps(k, ensure_ascii=False)
                    self.say(
                        "shadowed:replaced_key", ((None, name), k), (None, k), key=key, bucket=name
                    )
            if not self.replace_index_map(root, k, value):
                self.set_key(root, k, value, (None, k), ((None, _R), k), (None, k))
        for name, b in parts.items():
            if b is not None and any(k in r for k in b):
                parts[name] = {k: v for k, v in b.items() if k not in r}

    def replace_root(self, root: list[Any], r: list[Any], parts: dict[str, Any]) -> Any:
        """replaceElements at an array root: the whole payload; the other buckets shadowed."""
        for name, value in parts.items():
            if value is not None:
                self.say("shadowed:replaced_root", (None, name), None, bucket=name)
        if not json_equal(root, r) and self.commit("update", None, root, r, (None, _R)):
            return r
        return root
