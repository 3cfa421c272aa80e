"""Pieces shared by the provider adapters (no SDK imports here).

* ``ensure_requests_allowed``: the one check behind the "no real model requests" switch:
  while real model requests are forbidden (the environment says
  ``AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0``, or a gate installed with ``set_request_gate``
  says no: ``agent_payload.testing`` installs ``block_model_requests``'s), only clients whose
  base URL is a loopback address (``127.0.0.1``, ``localhost``, ``::1``) may be used.
* ``check_client_kind``: the ``ConfigurationError`` for a sync client asked for ``arequest()``
  or an async one for ``request()``.
* ``missing_sdk``: the ``ConfigurationError`` raised when an SDK extra is not installed.
* ``split_system``: the leading system message(s) apart from the conversation.
* ``retryable_status``: whether an HTTP status is worth retrying later (429, 408, 409, 5xx).
* ``ResponseShape``: reads the fields an adapter needs from a parsed 200 response, checking
  each; a field missing, null where a value is needed or of the wrong type (``"message":
  null``, no ``content``, ``"output": null``) is a ``ProviderError`` naming it
  (``choices[0].message``), chained; ``ResponseShape.guarded()`` turns anything else the
  adapter trips over while reading into the same error.
* ``SdkErrors``: how one SDK's exceptions become ``ProviderError`` / ``ConfigurationError``
  (the SDK's classes and the wording that names it are parameters; the SDK module passes them,
  so this module imports no SDK). Each provider module keeps its one context manager
  (``map_openai_errors``, ``map_anthropic_errors``) on top of ``SdkErrors.mapped``.
* ``StreamProgress`` and ``StreamBroken``: what the adapters' streaming calls share: the
  characters of the reply received so far (told to the caller's ``on_progress`` after each
  piece), and the error a stream reader raises for a stream that ended without a whole reply;
  ``SdkErrors.streamed`` turns it, and whatever else breaks a stream that began, into a
  retryable ``ProviderError`` (nothing of a partial reply is ever used).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
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
from agent_payload.providers.base import Message

__all__ = [
    "REQUESTS_ENV_SWITCH",
    "ResponseShape",
    "SdkErrors",
    "StreamBroken",
    "StreamProgress",
    "check_client_kind",
    "ensure_requests_allowed",
    "environment_allows_requests",
    "is_loopback_url",
    "missing_sdk",
    "model_name_argument",
    "not_an_api_response",
    "retryable_status",
    "set_request_gate",
    "split_system",
]


def is_loopback_url(url: object) -> bool:
    """True when ``url``'s host is ``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    host = urlsplit(str(url)).hostname
    if host is None:
        return False
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
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
    """False when the environment says ``AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0`` (or ``false``,
    ``no``, ``off``); read at each call."""
    return os.environ.get(REQUESTS_ENV_SWITCH, "").strip().lower() not in _FALSE_WORDS


def set_request_gate(gate: Callable[[], bool]) -> None:
    """Install the function asked before each real model request (True: allowed). The layer
    above (``agent_payload.testing``) installs its switch here, so the adapters never import
    it."""
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


def check_client_kind(
    adapter: str,
    model: str,
    *,
    is_async: bool,
    wanted_async: bool,
    sync_client: str,
    async_client: str,
) -> None:
    """Raise ``ConfigurationError`` when the adapter's client cannot serve the call: a sync
    client (``sync_client``, e.g. ``"openai.OpenAI"``) asked for ``arequest()``, or an async one
    (``async_client``) asked for ``request()``."""
    if wanted_async and not is_async:
        raise ConfigurationError(
            f"{adapter} for {model!r} holds a synchronous {sync_client} client, so it cannot "
            f"serve arequest(); pass an {async_client} client (or use PayloadAgent instead of "
            "AsyncPayloadAgent)."
        )
    if not wanted_async and is_async:
        raise ConfigurationError(
            f"{adapter} for {model!r} holds an {async_client} client, so it cannot serve "
            f"request(); pass an {sync_client} client (or use AsyncPayloadAgent instead of "
            "PayloadAgent)."
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
    """The system text (leading system messages joined by a blank line) and the rest.

    A system message after the first non-system message is a ``ConfigurationError``: providers
    that take the system prompt apart (Anthropic, the Responses API) cannot express it.
    """
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


def not_an_api_response(
    *, provider: str, api: str, model: str, kind: str, result: object
) -> ProviderError:
    """The error for a 200 response whose body is not a JSON object (the SDK hands back raw
    text, or the bare JSON value, instead of raising, so the ``ProviderError`` is chained to a
    ``ValueError`` describing the body: every ``ProviderError`` has a cause)."""
    if isinstance(result, str):
        shown = result if len(result) <= 200 else result[:200] + "..."
        got = f"a body that is not JSON: {shown!r}"
    else:
        got = f"a JSON {_json_kind(result)} instead of an object"
    error = ProviderError(
        f"{api} model {model!r}: expected a {kind} JSON response, got {got}. A proxy or "
        "gateway may have answered instead of the API; try again later or check the client's "
        "base_url.",
        provider=provider,
        status_code=200,
        retryable=True,
    )
    error.__cause__ = ValueError(
        f"the {api} SDK returned {type(result).__name__} instead of a parsed {kind}"
    )
    return error


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _shown(value: object) -> str:
    if value is None:
        return "nothing (missing or null)"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{_json_kind(value)} {text}"


_MISSING: Any = object()


@dataclass(frozen=True)
class ResponseShape:
    """Reads the fields an adapter needs from one parsed 200 response, checking each.

    The SDKs build their response objects without validation, so ``"message": null`` or a
    missing ``content`` arrive as ``None`` (and a string where an object belongs stays a
    string). Each ``field``/``items`` call names the field as it is in the JSON body
    (``choices[0].message.content``); whatever does not fit raises ``ProviderError``
    (``status_code=200``, not retryable) naming it, what was expected and what was found,
    chained to a ``ValueError`` describing it.
    """

    provider: str
    api: str
    """Names the API in messages: ``"OpenAI"``."""
    model: str
    kind: str
    """What the body should be: ``"chat completion"``, ``"response"``, ``"message"``."""
    expected_server: str

    def error(self, where: str, expected: str, found: object) -> ProviderError:
        """The error for a field that does not fit (to be raised; its cause is set)."""
        error = ProviderError(
            f"{self.api} model {self.model!r}: the {self.kind} returned (HTTP 200) has no usable "
            f"{where}: expected {expected}, found {_shown(found)}. The server answered with a "
            f"shape this adapter does not understand; check that the client's base_url is "
            f"{self.expected_server}, or try again.",
            provider=self.provider,
            status_code=200,
            retryable=False,
        )
        error.__cause__ = ValueError(f"{where}: expected {expected}, found {_shown(found)}")
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
        """``obj.name`` if it is of ``kinds`` (``None`` too when ``optional``), else the error.
        A bool is never taken for an int."""
        value = getattr(obj, name, None) if obj is not None else None
        if value is None:
            if optional:
                return None
            raise self.error(where, expected, None)
        if not isinstance(value, kinds) or (isinstance(value, bool) and not _allows_bool(kinds)):
            raise self.error(where, expected, value)
        return value

    def items(self, obj: object, name: str, where: str, expected: str) -> list[Any]:
        """``obj.name`` as a list whose elements are all present (no ``null``), else the error."""
        value: list[Any] = self.field(obj, name, where, list, f"an array of {expected}")
        for n, item in enumerate(value):
            if item is None or isinstance(item, str | int | float | list):
                raise self.error(f"{where}[{n}]", expected, item)
        return value

    def tokens(self, obj: object, name: str, where: str, *, optional: bool = True) -> int:
        """A token count: an int >= 0 (``0`` when absent and ``optional``)."""
        value = self.field(obj, name, where, int, "a token count (an integer)", optional=optional)
        if value is None:
            return 0
        if value < 0:
            raise self.error(where, "a token count (an integer >= 0)", value)
        return int(value)

    @contextlib.contextmanager
    def guarded(self) -> Iterator[None]:
        """Anything the adapter trips over while reading the response (an ``AttributeError``,
        a ``TypeError`` ... from a shape no ``field`` call foresaw) becomes the same kind of
        ``ProviderError``, chained to it; our own errors pass through."""
        try:
            yield
        except AgentPayloadError:
            raise
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            raise ProviderError(
                f"{self.api} model {self.model!r}: the {self.kind} returned (HTTP 200) has a "
                f"shape this adapter does not understand ({type(exc).__name__}: {exc}); check "
                f"that the client's base_url is {self.expected_server}, or try again.",
                provider=self.provider,
                status_code=200,
                retryable=False,
            ) from exc


def _allows_bool(kinds: type | tuple[type, ...]) -> bool:
    return bool in (kinds if isinstance(kinds, tuple) else (kinds,))


class StreamBroken(Exception):
    """A stream that ended without a whole reply, or said it failed (raised by the adapters'
    stream readers inside ``SdkErrors.streamed``, which makes it a ``ProviderError``)."""


class StreamProgress:
    """The characters of a streamed reply (text, refusal, tool-call arguments) received so
    far; ``add(piece)`` counts a piece and returns what ``on_progress(characters)`` returned
    (an awaitable from an async hook, which the async reader awaits)."""

    def __init__(self, on_progress: Callable[[int], Any] | None) -> None:
        self.characters = 0
        self._on_progress = on_progress

    def add(self, piece: str | None) -> Any:
        if not piece:
            return None
        self.characters += len(piece)
        return None if self._on_progress is None else self._on_progress(self.characters)


def _status_message(exc: Any) -> str:
    return str(exc.message)


@dataclass(frozen=True)
class SdkErrors:
    """How one SDK's exceptions become ours: its exception classes and the words naming it.

    ``mapped(model, client)`` is the context manager behind each provider module's own
    (``map_openai_errors``, ``map_anthropic_errors``), used around every SDK call, sync and
    async alike (a ``with`` around an ``await`` works). Checked in this order: ``timeout``
    (a subclass of ``connection`` in both SDKs), ``connection``, ``status``, ``validation``,
    a ``TypeError`` from an option the SDK does not accept, any other ``base`` error, and a body
    that is not JSON. Anything else passes through unchanged.
    """

    provider: str
    """``ProviderError.provider``: ``"openai"``."""
    api: str
    """Names the API in messages: ``"OpenAI"`` (``"OpenAI model 'm'"``, ``"an OpenAI API ..."``)."""
    client_class: str
    """The client to configure, in the timeout hint: ``"openai.OpenAI"``."""
    expected_server: str
    """What ``base_url`` should point at, for a response of the wrong shape."""
    timeout: type[Exception]
    connection: type[Exception]
    status: type[Exception]
    validation: type[Exception]
    base: type[Exception]
    status_detail: Callable[[Any], str] = _status_message
    """The text of an HTTP status error (its ``message`` unless the SDK has better)."""
    missing_credentials: str | None = None
    """The hint for a ``TypeError`` naming an "authentication method" (a client without
    credentials, raised at request time); ``None`` when the SDK does not raise one."""

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
        """Around the reading of a stream that began (its HTTP 200 came): a connection cut, a
        timeout, an error event, an undecodable event or a stream that ended early
        (``StreamBroken``) is a retryable ``ProviderError`` (chained), since the SDK does not
        retry a stream that began; our own errors and the caller's pass through."""
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
        err: Any = exc  # the SDK's classes are parameters: their attributes are not typed here
        if isinstance(exc, self.timeout):
            return ProviderError(
                f"{where}: the request timed out{after}. Raise the client's timeout or "
                f"max_retries ({self.client_class}(timeout=..., max_retries=...)), or try again "
                "later.",
                provider=self.provider,
                retryable=True,
            )
        if isinstance(exc, self.connection):
            return ProviderError(
                f"{where}: the connection failed{after} ({exc.__cause__ or exc}). Check the "
                "client's base_url and the network, or try again later.",
                provider=self.provider,
                retryable=True,
            )
        if isinstance(exc, self.status):
            status = err.status_code
            retryable = retryable_status(status)
            hint = (
                "try again later or raise the client's max_retries"
                if retryable
                else "check the model name, the API key and the request options"
            )
            detail = self.status_detail(exc).rstrip(".")
            return ProviderError(
                f"{where}: HTTP {status}{after if retryable else ''}: {detail}. Expected a 2xx "
                f"response; {hint}.",
                provider=self.provider,
                status_code=status,
                retryable=retryable,
            )
        if isinstance(exc, self.validation):
            return ProviderError(
                f"{where}: the response body does not have the expected shape (HTTP "
                f"{err.status_code}): {err.message}. Is the client's base_url "
                f"{self.expected_server}?",
                provider=self.provider,
                status_code=err.status_code,
                retryable=False,
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
            return ProviderError(
                f"{where}: the SDK failed: {exc}", provider=self.provider, retryable=False
            )
        if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            return ProviderError(
                f"{where}: the response body is not valid JSON ({exc}); expected an {self.api} "
                "API response. A proxy or gateway may have answered instead of the API; try "
                "again later or check the client's base_url.",
                provider=self.provider,
                status_code=200,
                retryable=True,
            )
        return None


# --- constructor arguments both adapters take ----------------------------------------------------


def model_name_argument(adapter: str, model_name: str | None, defaults: dict[str, Any]) -> Any:
    """The adapter's ``model_name``; ``model=`` (which would otherwise land in ``defaults`` and
    be sent twice) is a ``ConfigurationError`` naming ``model_name=``."""
    if "model" in defaults:
        raise ConfigurationError(
            f"{adapter}(model=...): name the model with model_name=..., e.g. "
            f"{adapter}(client, model_name={defaults['model']!r})."
        )
    return model_name
