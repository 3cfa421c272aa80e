"""A writer process of ``tests/test_store_concurrency.py``: ``python tests/_store_writer.py MODE
URL KEY WRITER SEED``.

``edits``: five edits of its own element ``w<WRITER>`` (writer 3 inserts at the front instead),
each written against the version it read: it reads before edits 0, 2 and 4 only, so edits 1
and 3 are stale at least by its own previous edit, and it pauses at random between reading and
writing. Prints one JSON line per edit: its run id and the version it wrote against.

``forever``: applies edits (one field of a large payload, or an insertion) at full speed, each
against a version read a few edits ago, until it is killed.
"""

from __future__ import annotations

import json
import random
import sys
import time

from agent_payload.errors import ConcurrentChangeError
from agent_payload.store import PayloadStore


def edits(store: PayloadStore, key: str, writer: int, rng: random.Random) -> None:
    me = f"w{writer}"
    doc = store.get(key)
    for k in range(5):
        if k % 2 == 0:
            doc = store.get(key)
        time.sleep(rng.random() * 0.02)
        if writer == 3:
            request: dict[str, object] = {"newElements": {"items": {"0": [{"id": f"front{k}"}]}}}
        else:
            at = next(i for i, item in enumerate(doc.payload["items"]) if item["id"] == me)
            request = {
                "updateElements": {"items": {str(at): {f"e{k}": k}}},
                "newElements": {"items": {str(at): {"log": [k]}}},
            }
        run_id = f"{me}-{k}"
        store.apply(key, request, base_version=doc.version, run_id=run_id)
        print(json.dumps({"run_id": run_id, "base": doc.version}), flush=True)


def forever(store: PayloadStore, key: str, writer: int, rng: random.Random) -> None:
    print("ready", flush=True)
    read = [store.get(key).version]
    n = 0
    while True:
        n += 1
        base = read[max(0, len(read) - 1 - rng.randrange(3))]
        if n % 3 == 0:
            request: dict[str, object] = {"newElements": {"log": {"0": [n]}}}
        else:
            request = {"updateElements": {"fields": {f"f{rng.randrange(500)}": n}}}
        try:
            stored = store.apply(key, request, base_version=base, run_id=f"w{writer}-{n}")
        except ConcurrentChangeError:
            read.append(store.get(key).version)
            continue
        read = [*read[-3:], stored.version]


def main() -> None:
    mode, url, key, writer, seed = sys.argv[1:6]
    rng = random.Random(int(seed))
    with PayloadStore(url) as store:
        {"edits": edits, "forever": forever}[mode](store, key, int(writer), rng)


if __name__ == "__main__":
    main()
