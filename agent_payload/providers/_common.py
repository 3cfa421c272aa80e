"""What the provider adapters share (no SDK imports here): the request switch, the ``Adapter``
base, checked reads of a response (``ResponseShape``) and an SDK's exceptions as ours."""

from __future__ import annotations

import contextlib
import inspect
import ipaddress
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agent_payload.errors import (
    AgentPayloadError,
    ConfigurationError,
    ModelRequestsBlockedError,
    ProviderError,
)
from agent_payload.providers.base import Message, ModelReply, ModelRequest

__all__ = [
    "REQUESTS_ENV_SWITCH",
    "Adapter",
    "ResponseShape",
    "SdkErrors",
    "StreamBroken",
    "ensure_requests_allowed",
    "environment_allows_requests",
    "is_loopback_url",
    "missing_sdk",
    "retryable_status",
    "set_request_gate",
    "split_system",
]


def is_loopback_url(url: object) -> bool:
    """True when ``url``'s host is ``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    host = urlsplit(str(url)).hostname or ""  # lower-cased
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


REQUESTS_ENV_SWITCH = "AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS"
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def _always() -> bool:
    return True


_request_gate: Callable[[], bool] = _always


def environment_allows_requests() -> bool:
    """False when the environment says ``AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0`` (or false, no)."""
    return os.environ.get(REQUESTS_ENV_SWITCH, "").strip().lower() not in _FALSE_WORDS


def set_request_gate(gate: Callable[[], bool]) -> None:
    """Install the function asked before each real model request (True: allowed); the layer
    above (``agent_payload.testing``) installs its switch here, so the adapters never import it."""
    global _request_gate
    _request_gate = gate


def ensure_requests_allowed(base_url: object, *, provider: str, model: str) -> None:
    """Raise ``ModelRequestsBlockedError`` when real model requests are forbidden (by the
    environment or the installed gate) and ``base_url`` is not a loopback address."""
    allowed = environment_allows_requests() and _request_gate()
    if allowed or is_loopback_url(base_url):
        return
    raise ModelRequestsBlockedError(
        f"Refused a request to {provider} model {model!r} at {base_url}: real model requests "
        "are blocked (agent_payload.testing.block_model_requests() is active, "
        "ALLOW_MODEL_REQUESTS is False, or AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0). Point the "
        "client at agent_payload.testing.FakeProviderServer (a 127.0.0.1 base_url) or use "
        "ScriptedModel; to allow real requests, leave the block_model_requests() context."
    )


def missing_sdk(package: str, exc: ImportError) -> ConfigurationError:
    """The error for a missing SDK, to be raised ``from exc``."""
    return ConfigurationError(
        f"The {package} SDK is not installed (import failed: {exc}). "
        f"Install it with: pip install 'agent-payload[{package}]'"
    )


def retryable_status(status_code: int) -> bool:
    """Statuses a caller may retry later: timeouts, lock conflicts, rate limits, server errors."""
    return status_code in (408, 409, 429) or status_code >= 500


def split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """The system text (leading system messages joined by a blank line) and the rest; a later
    system message is a ``ConfigurationError`` (Anthropic and the Responses API cannot say it)."""
    system: list[str] = []
    rest: list[Message] = []
    for message in messages:
        if message.role == "system":
            if rest:
                raise ConfigurationError(
                    "ModelRequest.messages: a system message may only come first; found one at "
                    f"position {len(system) + len(rest)} after a {rest[-1].role} message."
                )
            system.append(message.content)
        else:
            rest.append(message)
    return ("\n\n".join(system) if system else None), rest


_JSON_KINDS = ((bool, "boolean"), (list | tuple, "array"), (str, "string"), (int | float, "number"))


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    return next(
        (name for kinds, name in _JSON_KINDS if isinstance(value, kinds)), type(value).__name__
    )


def _shown(value: object) -> str:
    if value is None:
        return "nothing (missing or null)"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{_json_kind(value)} {text}"


_STRANGE = "a shape this adapter does not understand"


@dataclass(frozen=True)
class ResponseShape:
    """Checked reads of a parsed 200 response (the SDKs build it unvalidated): a field that does
    not fit is a ``ProviderError`` naming it as in the body, what was expected and found."""

    provider: str
    api: str
    model: str
    kind: str  # what the body should be: "chat completion", "response", "message"
    expected_server: str

    def _unreadable(self, what: str) -> ProviderError:
        return ProviderError(
            f"{self.api} model {self.model!r}: the {self.kind} returned (HTTP 200) has {what}; "
            f"check that the client's base_url is {self.expected_server}, or try again.",
            provider=self.provider,
            status_code=200,
            retryable=False,
        )

    def error(self, where: str, expected: str, found: object) -> ProviderError:
        """The error for a field that does not fit (to be raised; its cause is set)."""
        problem = f"{where}: expected {expected}, found {_shown(found)}"
        error = self._unreadable(f"no usable {problem}. The server answered with {_STRANGE}")
        error.__cause__ = ValueError(problem)
        return error

    def field(
        self,
        obj: object,
        name: str,
        where: str,
        kinds: type | tuple[type, ...],
        expected: str,
        *,
        optional: bool = False,
    ) -> Any:
        """``obj.name`` if it is of ``kinds`` (``None`` too when ``optional``), else the error."""
        value = getattr(obj, name, None) if obj is not None else None
        if value is None:
            if optional:
                return None
            raise self.error(where, expected, None)
        if not isinstance(value, kinds) or isinstance(value, bool):  # no field of ours is a bool
            raise self.error(where, expected, value)
        return value

    def text(self, obj: object, name: str, at: str = "", *, optional: bool = False) -> Any:
        """``obj.name`` as text; ``at``: where ``obj`` stands in the body (for the error)."""
        where = f"{at}.{name}" if at else name
        return self.field(obj, name, where, str, "text", optional=optional)

    def items(self, obj: object, name: str, where: str, expected: str) -> list[Any]:
        """``obj.name`` as a list whose elements are all present (no ``null``), else the error."""
        value: list[Any] = self.field(obj, name, where, list, f"an array of {expected}")
        for n, item in enumerate(value):
            if item is None or isinstance(item, str | int | float | list):
                raise self.error(f"{where}[{n}]", expected, item)
        return value

    def tokens(self, obj: object, name: str, at: str = "usage", *, optional: bool = True) -> int:
        """A token count: an int >= 0 (``0`` when absent and ``optional``)."""
        where = f"{at}.{name}"
        value = self.field(obj, name, where, int, "a token count (an integer)", optional=optional)
        if value is None:
            return 0
        if value < 0:
            raise self.error(where, "a token count (an integer >= 0)", value)
        return int(value)

    @contextlib.contextmanager
    def guarded(self) -> Iterator[None]:
        """Whatever else reading trips over (``AttributeError``...) as such a ``ProviderError``."""
        try:
            yield
        except AgentPayloadError:
            raise
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            raise self._unreadable(f"{_STRANGE} ({type(exc).__name__}: {exc})") from exc


class StreamBroken(Exception):
    """A stream that ended without a whole reply, or said it failed."""


class StreamProgress:
    """The characters of a streamed reply so far; ``add`` returns what ``on_progress`` did."""

    def __init__(self, on_progress: Callable[[int], Any] | None) -> None:
        self.characters = 0
        self._on_progress = on_progress

    def add(self, piece: str | None) -> Any:
        if not piece:
            return None
        self.characters += len(piece)
        return None if self._on_progress is None else self._on_progress(self.characters)


@dataclass(frozen=True)
class SdkErrors:
    """One SDK's exception classes (checked in ``translate``'s order: a timeout is also a
    connection error) and the words naming it, to make its exceptions ours."""

    provider: str
    api: str  # names the API in messages: "OpenAI" ("OpenAI model 'm'")
    client_class: str  # the client to configure, in the timeout hint: "openai.OpenAI"
    expected_server: str  # what base_url should point at, for a response of the wrong shape
    sdk: Any  # the SDK's module: both name their exception classes alike (APITimeoutError...)
    base: type[Exception]
    missing_credentials: str | None = None
    """The hint for a ``TypeError`` naming an "authentication method" (a client without
    credentials); ``None`` when the SDK raises none."""

    @contextlib.contextmanager
    def mapped(self, model: str, client: Any = None) -> Iterator[None]:
        """Map the SDK's exceptions raised inside the block to ``ProviderError`` (chained)."""
        try:
            yield
        except (self.base, TypeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            error = self.translate(exc, model=model, client=client)
            if error is None:
                raise
            raise error from exc

    @contextlib.contextmanager
    def streamed(self, model: str, progress: StreamProgress) -> Iterator[None]:
        """Whatever breaks a stream that began is a retryable ``ProviderError`` (the SDK does not
        retry it); our own errors and the caller's pass through."""
        try:
            yield
        except AgentPayloadError:
            raise
        except (self.base, StreamBroken, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProviderError(
                f"{self.api} model {model!r}: the streamed reply broke off after "
                f"{progress.characters} characters ({type(exc).__name__}: {exc}); nothing of it "
                "was used. Try again: the request is safe to repeat.",
                provider=self.provider,
                status_code=200,
                retryable=True,
            ) from exc

    def translate(
        self, exc: Exception, *, model: str, client: Any = None
    ) -> ProviderError | ConfigurationError | None:
        """Our error for ``exc`` (to be raised ``from exc``), or ``None`` to let it pass."""
        retries = getattr(client, "max_retries", None)
        after = f" after the client's retries (max_retries={retries})" if retries else ""
        where = f"{self.api} model {model!r}"

        def failed(text: str, retryable: bool, status: int | None = None) -> ProviderError:
            return ProviderError(
                f"{where}: {text}", provider=self.provider, status_code=status, retryable=retryable
            )

        err: Any = exc  # the SDK's classes are parameters: their attributes are not typed here
        if isinstance(exc, self.sdk.APITimeoutError):
            return failed(
                f"the request timed out{after}. Raise the client's timeout or max_retries "
                f"({self.client_class}(timeout=..., max_retries=...)), or try again later.",
                True,
            )
        if isinstance(exc, self.sdk.APIConnectionError):
            return failed(
                f"the connection failed{after} ({exc.__cause__ or exc}). Check the client's "
                "base_url and the network, or try again later.",
                True,
            )
        if isinstance(exc, self.sdk.APIStatusError):  # api_message: Anthropic's text from the body
            status = err.status_code
            retryable = retryable_status(status)
            hint = (
                "try again later or raise the client's max_retries"
                if retryable
                else "check the model name, the API key and the request options"
            )
            detail = str(getattr(err, "api_message", None) or err.message).rstrip(".")
            return failed(
                f"HTTP {status}{after if retryable else ''}: {detail}. Expected a 2xx response; "
                f"{hint}.",
                retryable,
                status,
            )
        if isinstance(exc, self.sdk.APIResponseValidationError):
            return failed(
                f"the response body does not have the expected shape (HTTP {err.status_code}): "
                f"{err.message}. Is the client's base_url {self.expected_server}?",
                False,
                err.status_code,
            )
        if isinstance(exc, TypeError):
            if self.missing_credentials is not None and "authentication method" in str(exc):
                return ConfigurationError(
                    f"{where}: the client has no credentials ({exc}). {self.missing_credentials}"
                )
            if "unexpected keyword argument" not in str(exc):
                return None
            return ConfigurationError(
                f"{where}: the SDK does not accept an option ({exc}). Check the adapter's "
                "default options and ModelRequest.extra; pass parameters the SDK does not know "
                "inside extra_body={...}."
            )
        if isinstance(exc, self.base):
            return failed(f"the SDK failed: {exc}", False)
        if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            return failed(
                f"the response body is not valid JSON ({exc}); expected an {self.api} API "
                "response. A proxy or gateway may have answered instead of the API; try again "
                "later or check the client's base_url.",
                True,
                200,
            )
        return None


class Adapter(ABC):
    """The SDK adapters' checks and their sync, async and streamed calls, over the abstract
    methods each adapter supplies."""

    provider: str
    _errors: SdkErrors
    _api: str  # names the API in a ``ResponseShape``'s errors
    _sync_client: str
    _async_client: str
    _build_hint: str  # how to build a client, in the error for a wrong one
    _example_model: str
    _result_type: type
    _result_kind: str  # the name of ``_result_type`` in the errors: ``"chat.completion"``

    def __init__(self, client: Any, model_name: str | None = None, **defaults: Any) -> None:
        adapter = type(self).__name__
        if "model" in defaults:  # would be sent twice
            raise ConfigurationError(
                f"{adapter}(model=...): name the model with model_name=..., e.g. "
                f"{adapter}(client, model_name={defaults['model']!r})."
            )
        is_async = self._client_is_async(client)
        if is_async is None:
            raise ConfigurationError(
                f"{adapter}(client=...): expected an {self._sync_client} or {self._async_client} "
                f"client, got {type(client).__module__}.{type(client).__qualname__}. Build one "
                f"with {self._build_hint} or use agent_payload.providers.infer_model("
                f"'{self.provider}:MODEL')."
            )
        if not isinstance(model_name, str) or not model_name:
            raise ConfigurationError(
                f"{adapter}(model_name=...): expected a model name such as "
                f"{self._example_model!r}, got {model_name!r}."
            )
        self.client = client
        self.model_name = model_name
        self.defaults: dict[str, Any] = dict(defaults)
        self.is_async = is_async

    @abstractmethod
    def _client_is_async(self, client: Any) -> bool | None:
        """True/False for an async/sync client of this SDK, None for anything else."""

    def _check(self, wanted_async: bool) -> None:
        """The client can serve this call (sync or async) and requests are allowed."""
        adapter, model = type(self).__name__, self.model_name
        if wanted_async and not self.is_async:
            raise ConfigurationError(
                f"{adapter} for {model!r} holds a synchronous {self._sync_client} client, so it "
                f"cannot serve arequest(); pass an {self._async_client} client (or use "
                "PayloadAgent instead of AsyncPayloadAgent)."
            )
        if not wanted_async and self.is_async:
            raise ConfigurationError(
                f"{adapter} for {model!r} holds an {self._async_client} client, so it cannot "
                f"serve request(); pass an {self._sync_client} client (or use AsyncPayloadAgent "
                "instead of PayloadAgent)."
            )
        ensure_requests_allowed(self.client.base_url, provider=self.provider, model=model)

    @abstractmethod
    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for the API call (pure; public for tests)."""

    def parse_reply(self, result: object, request: ModelRequest) -> ModelReply:
        """A ``ModelReply`` from the API call's result (pure; public for tests)."""
        if not isinstance(result, self._result_type):
            raise self._not_a_response(result)
        kind = self._result_kind.replace(".", " ")
        shape = ResponseShape(
            self.provider, self._api, self.model_name, kind, self._errors.expected_server
        )
        with shape.guarded():
            return self._read(result, request, shape)

    def _not_a_response(self, result: object) -> ProviderError:
        """The error for a 200 whose body is not a JSON object (the SDK returns it, not raising)."""
        api, kind = self._errors.api, self._result_kind
        if isinstance(result, str):
            shown = result if len(result) <= 200 else result[:200] + "..."
            got = f"a body that is not JSON: {shown!r}"
        else:
            got = f"a JSON {_json_kind(result)} instead of an object"
        error = ProviderError(
            f"{api} model {self.model_name!r}: expected a {kind} JSON response, got {got}. A "
            "proxy or gateway may have answered instead of the API; try again later or check "
            "the client's base_url.",
            provider=self.provider,
            status_code=200,
            retryable=True,
        )
        error.__cause__ = ValueError(
            f"the {api} SDK returned {type(result).__name__} instead of a parsed {kind}"
        )
        return error

    @abstractmethod
    def _read(self, result: Any, request: ModelRequest, shape: ResponseShape) -> ModelReply:
        """The ``ModelReply`` of a result of the right type (its fields read through ``shape``)."""

    @abstractmethod
    def _create(self, params: dict[str, Any]) -> Any:
        """Call the API with ``params`` (a coroutine on an async client)."""

    def _stream_params(self, request: ModelRequest) -> dict[str, Any]:
        return self.build_params(request)

    @abstractmethod
    def _open_stream(self, params: dict[str, Any]) -> Any:
        """The streamed call: a context manager over the events (maybe awaitable, if async)."""

    @abstractmethod
    def _reader(self) -> Any:
        """A fresh reader: ``feed(event)`` -> characters added, ``result()`` -> the reply object."""

    def request(self, request: ModelRequest) -> ModelReply:
        self._check(wanted_async=False)
        params = self.build_params(request)
        with self._errors.mapped(self.model_name, self.client):
            result = self._create(params)
        return self.parse_reply(result, request)

    async def arequest(self, request: ModelRequest) -> ModelReply:
        self._check(wanted_async=True)
        params = self.build_params(request)
        with self._errors.mapped(self.model_name, self.client):
            result = await self._create(params)
        return self.parse_reply(result, request)

    def stream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply:
        """``request`` with the reply streamed: ``on_progress(characters so far)`` after each
        piece; the ``ModelReply`` once it is whole (a broken stream: a retryable
        ``ProviderError``, nothing of it used)."""
        self._check(wanted_async=False)
        params = self._stream_params(request)
        progress, reader = StreamProgress(on_progress), self._reader()
        with contextlib.ExitStack() as stack:
            with self._errors.mapped(self.model_name, self.client):
                stream = stack.enter_context(self._open_stream(params))
            with self._errors.streamed(self.model_name, progress):
                for event in stream:
                    progress.add(reader.feed(event))
                result = reader.result()
        return self.parse_reply(result, request)

    async def astream_request(
        self, request: ModelRequest, on_progress: Callable[[int], Any] | None = None
    ) -> ModelReply:
        """``stream_request`` on an async client (an awaitable from ``on_progress`` is awaited)."""
        self._check(wanted_async=True)
        params = self._stream_params(request)
        progress, reader = StreamProgress(on_progress), self._reader()
        async with contextlib.AsyncExitStack() as stack:
            with self._errors.mapped(self.model_name, self.client):
                opened = self._open_stream(params)
                if inspect.isawaitable(opened):
                    opened = await opened
                stream = await stack.enter_async_context(opened)
            with self._errors.streamed(self.model_name, progress):
                async for event in stream:
                    outcome = progress.add(reader.feed(event))
                    if inspect.isawaitable(outcome):
                        await outcome
                result = reader.result()
        return self.parse_reply(result, request)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_name={self.model_name!r}, async={self.is_async})"
