"""``FakeProviderServer``: the threaded HTTP server on 127.0.0.1, the request handler that
turns a script item or a ``Fault`` into bytes on the wire, and the public class."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import selectors
import socket
import ssl
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent_payload.testing._stream import error_event, stream_events
from agent_payload.testing.batch import BatchFakes, Route
from agent_payload.testing.script import (
    API_PATHS,
    Api,
    FakeRequest,
    Fault,
    Handler,
    Reply,
    ScriptItem,
)
from agent_payload.testing.scripted import ScriptExhaustedError
from agent_payload.testing.wire import BUILDERS, error_body, new_id, resolve_reply

__all__ = ["FakeProviderServer"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, fake: FakeProviderServer) -> None:
        self.fake = fake
        self.open_sockets: set[socket.socket] = set()
        self.abort_sockets: set[socket.socket] = set()
        self.threads: set[threading.Thread] = set()
        self.sockets_lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        super().__init__(("127.0.0.1", 0), _RequestHandler)

    def serve(self) -> None:
        """``serve_forever()`` without its poll interval: ``stop()`` ends it at once."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = selector.select()
                if any(key.fileobj is self._wake_r for key, _ in ready):
                    return
                self.handle_request()  # the listening socket is ready: it does not wait

    def stop(self) -> None:
        """End ``serve()`` (from another thread; returns at once)."""
        self._wake_w.send(b"\0")

    def server_close(self) -> None:
        super().server_close()
        self._wake_r.close()
        self._wake_w.close()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._run, args=(request, client_address), daemon=True, name="fake-provider"
        )
        with self.sockets_lock:
            self.open_sockets.add(request)
            self.threads.add(thread)
        thread.start()

    def _run(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.sockets_lock:
                self.threads.discard(threading.current_thread())

    def shutdown_request(self, request: Any) -> None:
        with self.sockets_lock:
            self.open_sockets.discard(request)
            abort = request in self.abort_sockets
            self.abort_sockets.discard(request)
        if abort:
            request.close()  # SO_LINGER 0 is set: the close sends a TCP RST
        else:
            super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if exc is not None and not isinstance(exc, OSError):  # OSError: the client went away
            self.fake.errors.append(exc)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body are two writes: with Nagle's algorithm on, the body waits for
    # the client's delayed ACK of the headers (~40 ms per answer on Linux loopback).
    disable_nagle_algorithm = True
    server: _Server
    server_version = "FakeProviderServer/1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests read server.requests instead

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path, _, query = self.path.partition("?")
        api: Api = API_PATHS.get(path, "unknown") if self.command == "POST" else "unknown"
        fake = self.server.fake
        headers = {k.lower(): v for k, v in self.headers.items()}
        route = None
        if api == "unknown":  # the batch APIs (agent_payload.testing.batch), or no route
            route = fake._batches.route(self.command, path, query, headers, raw)
        request = fake._record(
            api=api, method=self.command, path=path, headers=headers, body=body, raw=raw
        )
        if route is not None:
            self._send_route(route)
        elif api == "unknown":
            message = f"FakeProviderServer: no route {self.command} {path}"
            self._send_error("chat.completions", 404, message)
        else:
            self._answer(fake._next_item(request), request)

    do_GET = do_POST = _handle

    def _answer(self, item: str | Reply | Fault, request: FakeRequest) -> None:
        if isinstance(item, Fault):
            self._fault(item, request)
            return
        reply = resolve_reply(item, request)
        if request.stream:
            self._send_stream(stream_events(reply, request))
        else:
            self._send_json(200, BUILDERS[request.api](reply, request))

    def _fault(self, fault: Fault, request: FakeRequest) -> None:
        reply = resolve_reply(fault.then or "{}", request)  # what the fault spoils, if anything
        mid_stream = fault.body or "FakeProviderServer injected an error mid-stream"
        if fault.kind == "status":
            self._send_status(fault, request.api)
        elif fault.kind == "delay":
            if self._waited(fault.seconds) and fault.then is not None:
                with contextlib.suppress(OSError):
                    self._answer(fault.then, request)
            else:
                self.close_connection = True
        elif fault.kind == "malformed" and fault.transform is not None:
            body = copy.deepcopy(BUILDERS[request.api](reply, request))
            self._send_json(200, fault.transform(body))
        elif fault.kind == "not_json":
            self._send_raw(200, (fault.body or "").encode(), fault.content_type, {})
        elif fault.kind in ("stream_cut", "stream_error") and request.stream:
            sent = stream_events(reply, request)[: fault.after]
            if fault.kind == "stream_cut":
                self._send_stream(sent, end=fault.clean)
                if not fault.clean:
                    self._abort()
            else:
                error = error_event(request.api, mid_stream, sequence_number=len(sent))
                self._send_stream([*sent, error])
        elif fault.kind == "trickle":
            events = stream_events(reply, request)
            if request.stream:
                self._send_stream(events, pace=fault.seconds)
            elif self._waited(fault.seconds * len(events)):
                with contextlib.suppress(OSError):
                    self._send_json(200, BUILDERS[request.api](reply, request))
        elif fault.kind == "stream_error":
            self._send_error(request.api, 500, mid_stream)
        elif fault.kind in ("reset", "cut_short", "stream_cut"):
            data = json.dumps(BUILDERS[request.api](reply, request)).encode()
            self._head(200, {"content-type": "application/json", "content-length": str(len(data))})
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            if fault.kind != "cut_short":
                self._abort()

    def _send_route(self, route: Route) -> None:
        fault = route.fault
        if fault is None:
            self._send_raw(route.status, route.body, route.content_type, {})
        elif fault.kind == "status":
            self._send_status(fault, "chat.completions")
        elif fault.kind == "delay" and self._waited(fault.seconds) and route.after is not None:
            with contextlib.suppress(OSError):
                self._send_route(route.after)
        else:  # reset, cut_short, not_json (or a delay with no answer): the connection drops
            self.close_connection = True
            if fault.kind != "delay":
                self._abort()

    def _waited(self, seconds: float) -> bool:
        """Wait ``seconds``; False (the connection to be closed) when the server woke it first."""
        if self.server.fake._wake.wait(seconds):
            self.close_connection = True
            return False
        return True

    def _abort(self) -> None:
        """Reset the connection (TCP RST) when the handler ends, instead of closing it."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with self.server.sockets_lock:
            self.server.abort_sockets.add(self.connection)

    def _send_stream(self, events: list[bytes], *, end: bool = True, pace: float = 0.0) -> None:
        """A 200 event stream, one chunk per event (``pace`` seconds apart), ended if ``end``."""
        content_type = "text/event-stream; charset=utf-8"
        chunked = {"cache-control": "no-cache", "transfer-encoding": "chunked"}
        self._head(200, {"content-type": content_type, **chunked})
        wake = self.server.fake._wake
        for n, event in enumerate(events):
            if n and pace and wake.wait(pace):
                self.close_connection = True  # the server is closing or resetting
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        if end:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers or {})

    def _send_error(self, api: Api, status: int, message: str) -> None:
        """The API's error body, which the SDK must not retry."""
        self._send_json(status, error_body(api, status, message), {"x-should-retry": "false"})

    def _send_status(self, fault: Fault, api: Api) -> None:
        message = fault.body or f"FakeProviderServer injected HTTP {fault.status_code}"
        self._send_json(
            fault.status_code, error_body(api, fault.status_code, message), dict(fault.headers)
        )

    def _send_raw(
        self, status: int, data: bytes, content_type: str, headers: Mapping[str, str]
    ) -> None:
        self._head(
            status, {"content-type": content_type, "content-length": str(len(data)), **headers}
        )
        self.wfile.write(data)
        self.wfile.flush()

    def _head(self, status: int, headers: Mapping[str, str]) -> None:
        """The status line and headers, with a fresh request id as both SDKs read it."""
        request_id = new_id("req_")
        self.send_response(status)
        ids = {"x-request-id": request_id, "request-id": request_id}
        for name, value in {**headers, **ids}.items():
            self.send_header(name, value)
        self.end_headers()


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One SSL context for every client built here (each costs ~0.2 s; plain HTTP wants one too)."""
    return ssl.create_default_context()


def _client(sdk: Any, name: str, base_url: str, async_client: bool, kwargs: dict[str, Any]) -> Any:
    """The SDK's client class ``name`` (``Async`` + it with ``async_client``) on ``base_url``."""
    kwargs.setdefault("api_key", "test")
    kwargs.setdefault("max_retries", 2)
    kwargs.setdefault("timeout", 10.0)
    if "http_client" not in kwargs:
        http = sdk.DefaultAsyncHttpxClient if async_client else sdk.DefaultHttpxClient
        kwargs["http_client"] = http(verify=_ssl_context())
    cls = getattr(sdk, f"Async{name}" if async_client else name)
    return cls(base_url=base_url, **kwargs)


class FakeProviderServer:
    """A fake OpenAI + Anthropic HTTP server on 127.0.0.1 for the real SDKs (docs/testing.md),
    serving until ``close()``; thread-safe. ``replies``: script items, one per HTTP request;
    then ``handler(FakeRequest)`` returns one. With neither, the answer is an HTTP 500 (not
    retried) and a ``ScriptExhaustedError`` in ``errors``."""

    def __init__(
        self,
        replies: Iterable[ScriptItem] = (),
        *,
        handler: Handler | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        """Set (and replaced) by ``reset()`` and ``close()``: wakes the delayed answers."""
        self._forget(replies, handler, caller="FakeProviderServer(replies)")
        self._server = _Server(self)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        """The root URL (``http://127.0.0.1:PORT``)."""
        self._thread = threading.Thread(
            target=self._server.serve, daemon=True, name="fake-provider-server"
        )
        self._thread.start()

    # -- addresses and clients --

    @property
    def openai_base_url(self) -> str:
        """``base_url`` for ``openai.OpenAI`` / ``AsyncOpenAI`` (``.../v1``)."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """``base_url`` for ``anthropic.Anthropic`` / ``AsyncAnthropic`` (the root)."""
        return self.url

    base_url = openai_base_url

    def openai_client(self, *, async_client: bool = False, **kwargs: Any) -> Any:
        """An ``openai.OpenAI`` (or ``AsyncOpenAI``) pointed here; ``kwargs`` go to the client
        (defaults: ``api_key="test"``, ``max_retries=2``, ``timeout=10``, a shared SSL context)."""
        import openai  # noqa: TID251 (testing helper)

        return _client(openai, "OpenAI", self.openai_base_url, async_client, kwargs)

    def anthropic_client(self, *, async_client: bool = False, **kwargs: Any) -> Any:
        """An ``anthropic.Anthropic`` (or ``AsyncAnthropic``) pointed here (same defaults)."""
        import anthropic  # noqa: TID251 (testing helper)

        return _client(anthropic, "Anthropic", self.anthropic_base_url, async_client, kwargs)

    # -- scripting --

    def reset(self, replies: Iterable[ScriptItem] = (), *, handler: Handler | None = None) -> None:
        """The server as if just started with this script, on the same address (for tests that
        share one): delayed answers woken, open connections dropped, all else forgotten."""
        self._wake.set()
        self._drop_connections()
        with self._lock:
            self._wake = threading.Event()
        self._forget(replies, handler, caller="FakeProviderServer.reset(replies)")

    def _forget(
        self, replies: Iterable[ScriptItem], handler: Handler | None, *, caller: str
    ) -> None:
        """A fresh script, requests, errors, batches and batch knobs."""
        if isinstance(replies, str):
            raise TypeError(
                f"{caller}: expected a sequence of script items, got one str; wrap it in a list."
            )
        self.errors: list[BaseException] = []
        """Script errors (exhausted script, a handler that raised, a bad item), in order."""
        # The batch APIs' knobs (docs/batch.md); batches are numbered from 1, and a fault of
        # batch_faults["create"] (one per call, also "upload", "retrieve", "results") is sent
        # after the batch was created.
        self.batch_polls = 0
        self.batch_expire: Callable[[int], bool] = lambda number: False
        self.batch_faults: dict[str, list[Fault]] = {}
        self.batch_fail: Callable[[int], str | None] = lambda number: None
        self.batch_result_line: Callable[[str], str] = lambda line: line
        self._batches = BatchFakes(self)
        with self._lock:
            self._queue: deque[ScriptItem] = deque(replies)
            self._handler: Handler | None = handler
            self._requests: list[FakeRequest] = []
            self._batch_requests: list[FakeRequest] = []

    def add(self, *items: ScriptItem) -> None:
        """Append items to the reply queue."""
        with self._lock:
            self._queue.extend(items)

    @property
    def remaining(self) -> int:
        """Items left in the queue."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[FakeRequest]:
        """A snapshot of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def batch_requests(self) -> list[FakeRequest]:
        """The request lines of every batch that ended, as ``FakeRequest``s, in answer order."""
        with self._lock:
            return list(self._batch_requests)

    @property
    def batches_created(self) -> int:
        """How many batches were created (OpenAI and Anthropic), faulted answers included."""
        creates = ("/v1/batches", "/v1/messages/batches")
        return len([r for r in self.requests if r.method == "POST" and r.path in creates])

    def _record(self, *, batch: bool = False, **fields: Any) -> FakeRequest:
        """Record a request (``batch``: a batch's request line, in ``batch_requests``)."""
        with self._lock:
            log = self._batch_requests if batch else self._requests
            request = FakeRequest(index=len(log), **fields)
            log.append(request)
            return request

    def _next_item(self, request: FakeRequest) -> ScriptItem:
        """The next script item; a script error is kept in ``errors`` and answered with an HTTP
        500 the SDK does not retry (it must reach the test, not hang the client)."""
        try:
            with self._lock:
                queued = bool(self._queue)
                item = self._queue.popleft() if queued else None
                handler = self._handler
            if not queued:
                if handler is None:
                    raise ScriptExhaustedError(
                        f"FakeProviderServer: request #{request.index} ({request.method} "
                        f"{request.path}) arrived but the script is empty; add replies or a "
                        "handler."
                    )
                item = handler(request)
        except Exception as exc:
            return self._script_error(exc, f"FakeProviderServer script error: {exc}")
        if isinstance(item, str | Reply | Fault):
            return item
        error = TypeError(
            f"FakeProviderServer: script item for request #{request.index} is a "
            f"{type(item).__name__}; expected a str, a Reply or a Fault."
        )
        return self._script_error(error, str(error))

    def _script_error(self, exc: Exception, message: str) -> Fault:
        self.errors.append(exc)
        no_retry = (("x-should-retry", "false"),)
        return Fault(kind="status", status_code=500, body=message, headers=no_retry)

    # -- lifecycle --

    def close(self) -> None:
        """Stop serving, wake delayed answers, close open connections, join the threads."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        self._server.stop()
        self._thread.join(timeout=5)
        self._server.server_close()
        for thread in self._drop_connections():
            thread.join(timeout=5)

    def _drop_connections(self) -> list[threading.Thread]:
        """Shut the open connections down (their threads end); return those threads."""
        with self._server.sockets_lock:
            sockets = list(self._server.open_sockets)
            threads = list(self._server.threads)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return threads

    def __enter__(self) -> FakeProviderServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = f"requests={len(self.requests)}, remaining={self.remaining}"
        return f"FakeProviderServer({self.url!r}, {counts})"
