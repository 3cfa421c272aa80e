"""Merging at the root of the payload (MERGE.md sections 3.3 and 3.4); the complete merger."""

from __future__ import annotations

import json
from typing import Any

from agent_payload._jsondata import json_equal
from agent_payload.merge._arrays import _ArrayWalker
from agent_payload.merge._nodes import _is_index_map
from agent_payload.merge._objects import _ObjectWalker
from agent_payload.merge._walk import _run, _Site


class _Merger(_ObjectWalker, _ArrayWalker):
    """One merge: the walk of objects and arrays, started at the root."""

    def merge_root(self, root: Any, buckets: dict[str, Any]) -> Any:
        u = buckets.get("updateElements")
        n = buckets.get("newElements")
        x = buckets.get("removeElements")
        r = buckets.get("replaceElements")
        if type(root) is dict:
            return self.merge_object_root(root, u, n, x, r)
        return self.merge_array_root(root, u, n, x, r)

    def merge_object_root(self, root: dict[str, Any], u: Any, n: Any, x: Any, r: Any) -> Any:
        buckets = {"updateElements": u, "newElements": n, "removeElements": x}
        for name, value in (("removeElements", x), ("updateElements", u), ("newElements", n)):
            if value is not None and type(value) is not dict:
                self.root_mismatch(name, value, root)
                buckets[name] = None
        if r is not None:
            if type(r) is not dict:
                self.root_mismatch("replaceElements", r, root)
            else:
                for k, value in r.items():
                    for name in ("updateElements", "removeElements", "newElements"):
                        b = buckets[name]
                        if b is not None and k in b:
                            self.warn(
                                "shadowed",
                                ((None, name), k),
                                f"replaceElements replaces the top-level key "
                                f"{json.dumps(k, ensure_ascii=False)} as a whole, so what "
                                f"{name} says of it was not applied. Name a key in one bucket "
                                "only.",
                                (None, k),
                            )
                    if self.replace_index_map(root, k, value):
                        continue
                    self.set_key(
                        root, k, value, (None, k), ((None, "replaceElements"), k), (None, k)
                    )
                for name in ("updateElements", "removeElements", "newElements"):
                    b = buckets[name]
                    if b is not None and any(k in r for k in b):
                        buckets[name] = {k: v for k, v in b.items() if k not in r}
        return self.walk_root(
            root, buckets["updateElements"], buckets["newElements"], buckets["removeElements"]
        )

    def merge_array_root(self, root: list[Any], u: Any, n: Any, x: Any, r: Any) -> Any:
        if u is not None and not (type(u) is list or _is_index_map(u)):
            self.root_mismatch("updateElements", u, root)
            u = None
        if x is not None and not (type(x) is list or _is_index_map(x)):
            self.root_mismatch("removeElements", x, root)
            x = None
        if n is not None and not (type(n) is list or _is_index_map(n)):
            self.root_mismatch("newElements", n, root)
            n = None
        if r is not None:
            if type(r) is not list:
                self.root_mismatch("replaceElements", r, root)
            else:
                for name, value in (
                    ("updateElements", u),
                    ("removeElements", x),
                    ("newElements", n),
                ):
                    if value is not None:
                        self.warn(
                            "shadowed",
                            (None, name),
                            f"replaceElements replaces the whole payload, so {name} was not "
                            "applied. Send either replaceElements or the other buckets.",
                            None,
                        )
                if json_equal(root, r):
                    return root
                if self.commit("update", None, root, r, (None, "replaceElements")):
                    return r
                return root
        return self.walk_root(root, u, n, x)

    def walk_root(self, root: Any, u: Any, n: Any, x: Any) -> Any:
        """Walk the root beside what is left of the buckets, editing it in place."""
        site = _Site(
            root,
            u,
            n,
            x,
            at=None,
            result_at=None,
            update_at=(None, "updateElements"),
            new_at=(None, "newElements"),
            remove_at=(None, "removeElements"),
        )
        _run(self.walk_object(site) if type(root) is dict else self.walk_array(site))
        return root
