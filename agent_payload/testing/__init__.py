"""Test helpers shipped to users (in the spirit of ``structlog.testing``).

Three tools, all offline:

* ``ScriptedModel`` — a ``Model`` that answers from a script (a list of replies, or a function of
  the ``ModelRequest``) and records every request. For testing code that drives
  ``PayloadAgent`` without HTTP::

      model = ScriptedModel(['{"updateElements": {"name": "Ada"}}'])
      result = PayloadAgent(model).run({"name": "Bob"}, "rename to Ada")
      assert model.requests[0].messages[0].role == "system"

* ``FakeProviderServer`` — a real HTTP server on ``127.0.0.1`` (a free port, a thread per
  connection) that speaks enough of the OpenAI Chat Completions (``POST /v1/chat/completions``),
  OpenAI Responses (``POST /v1/responses``) and Anthropic Messages (``POST /v1/messages``) APIs for
  the **real** SDKs to parse its answers. Point a client at it and script the replies, including
  faults::

      with FakeProviderServer(["{}", Fault.status(429), '{"reasoning": "ok"}']) as server:
          client = openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=1)
          ...
          assert len(server.requests) == 3

  A script item is a ``str`` (the reply text: plain content, or the arguments of the forced tool
  call when the request forces one), a ``Reply`` (explicit kind: tool call, refusal, truncation,
  usage) or a ``Fault``. Items are consumed one per HTTP request, so the SDK's own retries consume
  items too. Instead of (or after) the queue, ``handler=`` is a function of the ``FakeRequest``
  (the parsed body plus helpers) returning an item: use it when replies must match requests, e.g.
  for many concurrent agents. ``server.reset(replies, handler=...)`` gives a running server a
  fresh script, so a test suite can start one server and share it between tests.

  Faults (``Fault.…``): ``status(code)`` an HTTP error with the provider's error body and
  ``retry-after-ms: 1`` (so SDK retries do not sleep); ``delay(seconds, then=None)`` answer late
  (or never: the connection is closed), to trip the client's timeout; ``reset()`` the
  connection is reset (TCP RST) in the middle of the body; ``not_json()`` a 200 whose body is not
  JSON (an HTML error page by default); ``cut_short()`` a 200 whose body stops before its
  ``Content-Length``; ``malformed(transform)`` a 200 whose JSON body is a good answer changed
  by ``transform`` (``"message": null``, no ``content``, ``"output": null`` ...). Refusals and
  truncation are replies, not faults: ``Reply.refusal()``, ``Reply.truncated(text)``.

  A request asking for ``"stream": true`` is answered with server-sent events in its API's own
  format (``testing._stream``), so the SDKs' streaming helpers, ``PayloadAgent(stream=True)``
  and the frameworks' streaming runs work against it. Faults mid-stream:
  ``Fault.stream_cut(after)`` resets the connection after ``after`` events (``clean=True``: the
  stream just ends there), ``Fault.stream_error(after)`` sends the API's error event;
  ``Fault.trickle(seconds)`` is a slow server (events ``seconds`` apart).

* ``block_model_requests()`` — while active (or while ``ALLOW_MODEL_REQUESTS`` is False, or the
  environment has ``AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0``), the provider adapters raise
  ``ModelRequestsBlockedError`` for any client whose base URL is not a loopback address. The
  fake server on 127.0.0.1 stays usable. Put it in a ``conftest.py``::

      @pytest.fixture(autouse=True)
      def _no_real_models():
          with block_model_requests():
              yield

The package imports no SDK at import time; ``FakeProviderServer.openai_client()`` and
``.anthropic_client()`` import theirs when called. Its modules:

* ``agent_payload.testing`` (this file): the names above, and the request switch itself
  (``ALLOW_MODEL_REQUESTS`` is a module attribute users assign, so it lives here); it installs
  the switch as the provider adapters' request gate (``providers._common.set_request_gate``):
  the adapters never import this package;
* ``testing.scripted``: ``ScriptedModel`` (no HTTP);
* ``testing.script``: what a fake server is told (``Reply``, ``Fault``) and what it received
  (``FakeRequest``);
* ``testing.wire``: the JSON answer bodies of the three APIs and their error bodies;
* ``testing._stream``: the same answers as each API's event stream;
* ``testing.server``: ``FakeProviderServer``, the HTTP side;
* ``testing.batch``: the providers' batch APIs on the same server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from agent_payload.providers._common import environment_allows_requests, set_request_gate
from agent_payload.testing.script import FakeRequest, Fault, Reply, ScriptItem
from agent_payload.testing.scripted import ScriptedModel, ScriptExhaustedError
from agent_payload.testing.server import FakeProviderServer

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "FakeProviderServer",
    "FakeRequest",
    "Fault",
    "Reply",
    "ScriptExhaustedError",
    "ScriptItem",
    "ScriptedModel",
    "block_model_requests",
    "model_requests_allowed",
]

# --- the switch that forbids real model requests -------------------------------------------------

ALLOW_MODEL_REQUESTS: bool = True
"""Set to False (e.g. in a ``conftest.py``) to forbid requests to non-loopback model servers
for the whole process; ``block_model_requests()`` does the same for a block."""


def model_requests_allowed() -> bool:
    """True unless ``ALLOW_MODEL_REQUESTS`` is False, ``block_model_requests()`` is active, or the
    environment says ``AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0`` (read at each call)."""
    return ALLOW_MODEL_REQUESTS and environment_allows_requests()


@contextlib.contextmanager
def block_model_requests(block: bool = True) -> Iterator[None]:
    """Forbid (or, with ``block=False``, allow) real model requests inside the block.

    Process-wide (it sets ``ALLOW_MODEL_REQUESTS`` and restores it on exit), so it covers
    threads and event loops started inside. Works as a decorator too.
    """
    global ALLOW_MODEL_REQUESTS
    previous = ALLOW_MODEL_REQUESTS
    ALLOW_MODEL_REQUESTS = not block
    try:
        yield
    finally:
        ALLOW_MODEL_REQUESTS = previous


set_request_gate(model_requests_allowed)
