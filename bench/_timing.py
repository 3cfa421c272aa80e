"""What the benchmarks share: the best CPU time of a few repeats, and saving a results table."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path


def best_cpu(fn: Callable[[], object], repeats: int = 3, *, collect: bool = True) -> float:
    """The least CPU time of the process (``time.process_time``: other load on a shared
    machine does not count) over ``repeats`` calls of ``fn``; ``collect``: a garbage
    collection before each, so none lands inside a timing."""
    best = float("inf")
    for _ in range(repeats):
        if collect:
            gc.collect()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def save(path: Path, lines: list[str]) -> None:
    """Write the table to ``path`` (under ``bench/results``) and say so on stderr."""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written to {path.relative_to(path.parent.parent.parent)}", file=sys.stderr)
