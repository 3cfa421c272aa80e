"""Suite-wide settings: no test may reach a real model; hypothesis never fails on timing; one
fake provider server per test process.

Every test runs inside ``agent_payload.testing.block_model_requests()``: a provider adapter whose
client points anywhere but loopback raises ``ModelRequestsBlockedError`` instead of sending.

Hypothesis: no per-example deadline and no "too slow" health check anywhere (a loaded CI machine
must not turn into a failure); under ``CI`` the examples are derandomized, so a CI run is
repeatable, while local runs keep exploring new examples. The profile sets how many examples a
property gets: 25 (generating the examples is most of a property's time; 50 made ``make check``
~10 s longer on two cores). A property names no count of its own; the few whose examples cost
the most ask for half of the profile's. ``make thorough`` (``pytest -m hypothesis
--hypothesis-profile=thorough``) runs every property with 1,000, the slow ones with 500.

The SDKs' own retry backoff (``INITIAL_RETRY_DELAY``, 0.5 s doubling, used when an answer
carries no ``retry-after``: a timeout, a reset connection) is zero in every test, so a fault
test retries at once; a ``retry-after`` header the server sends is still honoured.

``fake_server``: the process's one ``FakeProviderServer`` (started once: each server costs a
thread and a port), ``reset()`` before each test, so a test starts from an empty script; call
``fake_server.reset(replies, handler=...)`` (or ``.add(...)``) to script it. ``serve``: the
same server as a context manager, ``with serve(replies, handler=...) as server:``, the shape of
``with FakeProviderServer(replies, handler=...) as server:`` without starting a server.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import gzip
import importlib
import importlib.util
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from agent_payload.testing import FakeProviderServer, ScriptItem, block_model_requests
from agent_payload.testing.script import Handler

settings.register_profile(
    "agent_payload",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=bool(os.environ.get("CI")),
)
settings.register_profile("thorough", settings.get_profile("agent_payload"), max_examples=1000)
settings.load_profile("agent_payload")

# The garbage collector runs less often (a young collection every 50,000 allocations instead
# of 700) from here on: importing the SDKs and running the suite allocate a lot and free almost
# all of it by reference counting, so the default settings mostly re-scan live objects (~8% of
# the tests' CPU, ~0.4 s of each process's collection).
gc.set_threshold(50_000, 50, 100)


@pytest.fixture(autouse=True, scope="session")
def _no_real_model_requests() -> Iterator[None]:
    with block_model_requests():
        yield


@pytest.fixture(autouse=True, scope="session")
def _no_sdk_backoff() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for sdk in ("openai", "anthropic"):
            try:
                client = importlib.import_module(f"{sdk}._base_client")
            except ImportError:  # the SDK's extra is not installed: its tests skip
                continue
            patch.setattr(client, "INITIAL_RETRY_DELAY", 0.0)
        yield


@pytest.fixture
def o200k() -> None:
    """Skips the test unless ``bpe-openai`` (the dev extra) is installed, so ``estimate_tokens``
    counts o200k_base tokens. (Not ``importorskip``: importing the package costs ~1.2 s that
    ``estimate_tokens`` does not pay.)"""
    if importlib.util.find_spec("bpe_openai") is None:
        pytest.skip("bpe-openai (the dev extra) counts o200k tokens")


@pytest.fixture(scope="session")
def _session_fake_server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def fake_server(_session_fake_server: FakeProviderServer) -> FakeProviderServer:
    """The session's fake provider server with an empty script (see the module docstring)."""
    _session_fake_server.reset()
    return _session_fake_server


Serve = Callable[..., contextlib.AbstractContextManager[FakeProviderServer]]


@pytest.fixture
def serve(_session_fake_server: FakeProviderServer) -> Serve:
    """``with serve(replies, handler=...) as server:``: the session's server, reset to this
    script (see the module docstring)."""

    @contextlib.contextmanager
    def scripted(
        replies: Iterable[ScriptItem] = (), *, handler: Handler | None = None
    ) -> Iterator[FakeProviderServer]:
        _session_fake_server.reset(replies, handler=handler)
        yield _session_fake_server

    return scripted


@pytest.hookimpl(trylast=True)  # after Hypothesis's own: it ends its initialisation there
def pytest_sessionstart(session: pytest.Session) -> None:
    """Hypothesis learns which characters UTF-8 encodes (``st.text()``'s default alphabet) by
    encoding all 1,114,112 code points, ~3 s in every process of a fresh checkout (both xdist
    workers at once) before caching the answer under ``.hypothesis/``. The answer is known (all
    but the surrogates, each round-tripping), so it is written to that cache before any test
    draws. Should Hypothesis move or rename its cache, nothing is written and it computes as
    before."""
    try:
        from hypothesis.internal.charmap import charmap_file

        path = charmap_file("codec-v2-utf-8")
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            answer = [[[0, 0xD7FF], [0xE000, sys.maxunicode]], []]  # encodable, not round-trip
            fd, temp = tempfile.mkstemp(dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as file, gzip.GzipFile(fileobj=file, mode="wb") as z:
                    z.write(json.dumps(answer).encode())
                os.replace(temp, path)  # whole or not at all: another worker may read it now
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
    except (ImportError, AttributeError, TypeError, OSError):
        pass


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    """In a fresh checkout no test module is cached yet, and each xdist worker rewrites the
    asserts of all of them (~5 s of CPU) while the other does the same. When the whole suite
    runs, the second worker imports the test modules back to front before it collects, so each
    worker rewrites about half and reads the other half from the cache the first one wrote.
    Importing is what collecting does first, so nothing else changes: a module that fails to
    import here is imported again by the collection, which reports it."""
    whole_suite = session.config.args_source is pytest.Config.ArgsSource.TESTPATHS
    if os.environ.get("PYTEST_XDIST_WORKER") != "gw1" or not whole_suite:
        return
    for path in sorted(Path(__file__).parent.glob("test_*.py"), reverse=True):
        with contextlib.suppress(Exception, pytest.skip.Exception):
            importlib.import_module(path.stem)


# The modules that import the agent frameworks and the MCP client (~6 s of imports in a process).
FRAMEWORK_MODULES = ("test_integrations.py", "test_readme_integrations.py", "test_mcp.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks and order (before pytest's own ``-m`` selection reads the marks).

    Every hypothesis property is ``slow`` (its examples are most of the suite's time, and
    generating them most of that), besides the tests marked by hand: a load test, a child
    process, an agent framework, ~0.5 s of CPU or more. ``make quick`` (``pytest -m "not
    slow"``) leaves them out; ``make check`` runs everything.

    The tests of FRAMEWORK_MODULES run first: pytest-xdist's work stealing gives the first
    worker the first run of tests and steals only from the end of a queue, so they all run in
    one worker and the frameworks are imported once, not once per worker. The tests marked
    ``last`` run after all others (a steal moves them to the end of another worker's run)."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.slow)
    items.sort(
        key=lambda item: (
            item.path.name not in FRAMEWORK_MODULES,
            item.get_closest_marker("last") is not None,
        )
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """The garbage collector skips what importing and collecting built (the SDKs, hypothesis,
    ~2,900 test items: never garbage)."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The young garbage is collected (a cycle the last tests left, whose finaliser could raise,
    is reported by pytest as usual) and the rest is frozen before pytest's own final full
    collections: by then a worker holds ~500 MB of test data, and each full collection of it
    took ~0.6 s for a process about to exit."""
    gc.collect(1)
    gc.freeze()


def _exit_without_teardown() -> None:
    """An xdist worker ends here, once pytest has sent its results and xdist has closed the
    channel: interpreter teardown would free the worker's ~500 MB object by object (~3 s at
    the end of every run, with the controller waiting on it). Logs and the standard streams
    are flushed first; the worker's exit status is not what xdist reads."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(_exit_without_teardown)
