"""BatchJob at scale: items through the fake batch APIs (OpenAI and Anthropic), real SDKs.

For each provider and job size, in a fresh subprocess (so peak memory is the job's own):
wall time, rounds, the local work per item (everything but the provider calls: rendering,
parsing, judging, merging, the SQLite state), items per second of local work, and the job
process's peak RSS (the fake server runs in a process of its own).
A third of the items need one correction, so every job has two rounds. The goal: local work
per item stays flat as the job grows (the state is in SQLite, not in memory).

    python bench/batch.py            # 1,000 and 10,000 items (a few minutes)
    python bench/batch.py --quick    # 200 and 1,000
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOOD = '{"updateElements":{"price":20}}'
BROKEN = '{"updateElementz":{"price":20}}'


def handler(request: Any) -> str:
    user = next(t for r, t in request.messages if r == "user")
    fixed = any(r == "assistant" for r, _ in request.messages)
    return GOOD if fixed or '"kind":"fix"' not in user else BROKEN


def serve() -> None:
    """The fake server in a process of its own (its memory is not the job's): prints its URL,
    serves until stdin closes."""
    from agent_payload.testing import FakeProviderServer

    with FakeProviderServer(handler=handler) as server:
        print(server.url, flush=True)
        sys.stdin.read()


class _Remote:
    """The URLs of a fake server running in another process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.openai_base_url = f"{url}/v1"


def one(provider: str, n: int) -> dict[str, Any]:
    import anthropic
    import openai

    from agent_payload import PayloadAgent
    from agent_payload.batch import BatchJob
    from agent_payload.providers.anthropic import AnthropicModel
    from agent_payload.providers.openai import OpenAIChatModel

    child = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    server = _Remote(child.stdout.readline().strip())

    provider_time = 0.0

    class Timed:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            value = getattr(self.inner, name)
            if name not in ("submit", "find", "poll", "results"):
                return value

            def timed(*args: Any, **kwargs: Any) -> Any:
                nonlocal provider_time
                start = time.perf_counter()
                try:
                    out = value(*args, **kwargs)
                    return list(out) if name == "results" else out
                finally:
                    provider_time += time.perf_counter() - start

            return timed

    with tempfile.TemporaryDirectory() as tmp:
        if provider == "openai":
            client: Any = openai.OpenAI(base_url=server.openai_base_url, api_key="x", timeout=600)
            model: Any = OpenAIChatModel(client, "gpt-fake")
        else:
            client = anthropic.Anthropic(base_url=server.url, api_key="x", timeout=600)
            model = AnthropicModel(client, "claude-fake")
        agent = PayloadAgent(model, max_retries=1)
        job = BatchJob(agent, Path(tmp) / "job.sqlite")
        job._backend = Timed(job._backend)  # bench only: time the provider calls apart
        items = [
            {
                "id": f"item-{i}",
                "payload": {"sku": f"SKU-{i}", "price": 10, "kind": "fix" if i % 3 == 0 else "ok",
                            "tags": ["a", "b"], "note": "x" * 200},
                "task": "set the price to 20",
            }
            for i in range(n)
        ]  # fmt: skip
        start = time.perf_counter()
        job.add_many(items)
        final = job.run(poll_interval=0)
        wall = time.perf_counter() - start
        assert final.done == n, final
        local = wall - provider_time
        job.close()
        model.client.close()
    assert child.stdin is not None
    child.stdin.close()
    child.wait()
    return {
        "provider": provider,
        "items": n,
        "rounds": final.round,
        "wall_s": wall,
        "local_ms_per_item": 1000 * local / n,
        "items_per_s_local": n / local,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2], int(sys.argv[3]))))
        return
    sizes = (200, 1_000) if "--quick" in sys.argv else (1_000, 10_000)
    rows = []
    for provider in ("openai", "anthropic"):
        for n in sizes:
            out = subprocess.run(
                [sys.executable, __file__, "--one", provider, str(n)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{'provider':<10}{'items':>8}{'rounds':>8}{'wall s':>9}{'local ms/item':>15}"
          f"{'items/s local':>15}{'peak RSS MB':>13}")  # fmt: skip
    for r in rows:
        print(f"{r['provider']:<10}{r['items']:>8}{r['rounds']:>8}{r['wall_s']:>9.1f}"
              f"{r['local_ms_per_item']:>15.2f}{r['items_per_s_local']:>15.0f}"
              f"{r['peak_rss_mb']:>13.0f}")  # fmt: skip
    for provider in ("openai", "anthropic"):
        small, large = (r for r in rows if r["provider"] == provider)
        growth = large["local_ms_per_item"] / small["local_ms_per_item"]
        verdict = "met" if growth < 1.5 else "MISSED"
        print(
            f"{provider}: local work per item {small['items']:,} -> {large['items']:,} items: "
            f"x{growth:.2f} (goal: flat, under x1.5): {verdict}"
        )


if __name__ == "__main__":
    main()
