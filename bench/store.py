"""How fast is the shared payload store, and what does a rebase cost?

Run: ``python bench/store.py`` (``--quick`` for a fast run, ``--write`` to save the output to
``bench/results/store.txt``).

1. **Applies per second** (``PayloadStore.apply``) on one shared key with 1, 4 and 16 writer
   processes, on SQLite (a file in a temporary directory: WAL, ``BEGIN IMMEDIATE``, the
   default ``synchronous=FULL``) and on PostgreSQL (``pgserver``'s server over a Unix socket;
   skipped with the reason when it cannot start). The payload is a plan of 200 steps (~20 KB);
   each writer reads the key and applies a one-field edit of its own step at the version it
   read (an edit that lands on a newer version is rebased over the ones between). Wall time of
   the whole run; every write is a transaction that rewrites the key's payload.
2. **The cost of a rebase** (``merge.rebase_change_request``): a one-field edit written against
   a base, rebased over 1, 10 and 100 one-field edits of other elements applied since, on
   payloads of about 100 KB, 1 MB and 10 MB (an array of items). CPU time (best of 3). The
   cost should follow the number of requests applied since, not the payload's size.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _timing import best_cpu  # noqa: E402

from agent_payload.merge import rebase_change_request  # noqa: E402
from agent_payload.store import PayloadStore  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "store.txt"
WRITERS = (1, 4, 16)


# --- applies per second --------------------------------------------------------------------


def _plan() -> dict[str, Any]:
    return {
        "title": "Quarterly migration",
        "steps": [
            {"id": f"S{i:03d}", "owner": None, "done": False, "note": "step " * 10}
            for i in range(200)
        ],
    }


def _writer(url: str, writer: int, applies: int) -> None:
    with PayloadStore(url) as store:
        for n in range(applies):
            doc = store.get("plan")
            at = writer % len(doc.payload["steps"])
            store.apply(
                "plan",
                {"updateElements": {"steps": {str(at): {"note": f"w{writer} edit {n}"}}}},
                base_version=doc.version,
            )


def applies_per_second(url: str, writers: int, total: int) -> float:
    with PayloadStore(url) as store:
        store.create("plan", _plan())
    per_writer = max(1, total // writers)
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_writer, args=(url, w, per_writer)) for w in range(writers)]
    start = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a writer failed (exit {p.exitcode})")
    elapsed = time.perf_counter() - start
    with PayloadStore(url) as store:
        assert store.get("plan").version == 1 + per_writer * writers
    return per_writer * writers / elapsed


def _postgres(tmp: Path) -> tuple[Any, str | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver

            server = pgserver.get_server(tmp / "pg", cleanup_mode="delete")
        return server, None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _pg_database(server: Any, name: str) -> str:
    import psycopg

    base = server.get_uri()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    head, _, query = base.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}?{query}"


def throughput(quick: bool, out: list[str]) -> None:
    total = 80 if quick else 400
    out.append(f"applies per second, one shared key, {total} applies in all (wall time)")
    out.append("")
    out.append(f"{'backend':<12}{'writers':>8}{'applies/s':>12}")
    out.append("-" * 32)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for writers in WRITERS:
            url = f"sqlite:///{tmp / f'bench-{writers}.db'}"
            rate = applies_per_second(url, writers, total)
            out.append(f"{'SQLite':<12}{writers:>8}{rate:>12.0f}")
        server, why = _postgres(tmp)
        if server is None:
            out.append(f"PostgreSQL skipped: it could not start ({why})")
        else:
            try:
                for writers in WRITERS:
                    url = _pg_database(server, f"bench{writers}")
                    rate = applies_per_second(url, writers, total)
                    out.append(f"{'PostgreSQL':<12}{writers:>8}{rate:>12.0f}")
            finally:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    server.cleanup()
    out.append("")


# --- the cost of a rebase ------------------------------------------------------------------


def _items(count: int) -> dict[str, Any]:
    return {
        "title": "catalogue",
        "items": [
            {
                "id": f"I{i:07d}",
                "qty": i % 7,
                "name": f"item {i}",
                "tags": ["a", "b"],
                "price": {"net": i * 1.5, "vat": 0.19},
            }
            for i in range(count)
        ],
    }


def rebase_cost(quick: bool, out: list[str]) -> None:
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    counts = (1, 10, 100)
    out.append("rebase of a one-field edit over N one-field edits applied since (CPU, best of 3)")
    out.append("")
    out.append(f"{'payload':<18}" + "".join(f"{f'N = {n}':>14}" for n in counts))
    out.append("-" * (18 + 14 * len(counts)))
    for size in sizes:
        doc = _items(size)
        label = f"{len(json.dumps(doc, separators=(',', ':'))) / 1e6:.1f} MB"
        cells = []
        for n in counts:
            applied = [
                {"updateElements": {"items": {str((j * 7919) % size): {"qty": 100 + j}}}}
                for j in range(n)
            ]
            late = {"updateElements": {"items": {str(size // 2 + 1): {"qty": -1}}}}
            seconds = best_cpu(
                lambda a=applied, r=late, d=doc: rebase_change_request(d, a, r), collect=False
            )
            cells.append(f"{seconds * 1000:>11.2f} ms")
        out.append(f"{label:<18}" + "".join(cells))
    out.append("")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer applies, smaller payloads")
    parser.add_argument("--write", action="store_true", help=f"save the output to {RESULTS}")
    args = parser.parse_args(argv)
    out = [
        f"agent_payload store benchmark (Python {platform.python_version()}, "
        f"{platform.machine()}, SQLite {__import__('sqlite3').sqlite_version})",
        "",
    ]
    throughput(args.quick, out)
    rebase_cost(args.quick, out)
    text = "\n".join(out)
    print(text)
    if args.write:
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
