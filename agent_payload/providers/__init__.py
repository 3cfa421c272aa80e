"""Model providers: one module per SDK behind the small ``Model`` / ``AsyncModel`` protocols of
``base``.

``openai`` and ``anthropic`` import their SDK lazily; the core works with neither installed.
``infer_model`` turns what a user has at hand into a ``Model``:

* a ``Model`` or ``AsyncModel`` (an adapter, ``agent_payload.testing.ScriptedModel``, your
  own): returned as is (one written for 0.1, naming the model ``name`` instead of
  ``model_name``, is wrapped, with a ``DeprecationWarning``);
* ``"openai:gpt-4.1-mini"`` (Chat Completions), ``"openai-responses:gpt-4.1"`` (Responses API),
  ``"anthropic:claude-sonnet-4-6"``: a client is built from the environment by the SDK itself
  (``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``; ``ANTHROPIC_API_KEY`` and
  ``ANTHROPIC_BASE_URL``), sync or async per ``async_client``. A bare ``claude-...`` or
  ``gpt-...`` / ``o3...`` name picks its provider by the prefix;
* an SDK client (``openai.OpenAI``, ``openai.AsyncOpenAI``, ``anthropic.Anthropic``,
  ``anthropic.AsyncAnthropic``) plus a model name: wrapped in the matching adapter.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Literal

from agent_payload.errors import ConfigurationError
from agent_payload.providers.base import (
    AsyncModel,
    AsyncStreamingModel,
    Message,
    Model,
    ModelReply,
    ModelRequest,
    OutputMode,
    StreamingModel,
)

__all__ = [
    "AsyncModel",
    "AsyncStreamingModel",
    "Message",
    "Model",
    "ModelReply",
    "ModelRequest",
    "OutputMode",
    "StreamingModel",
    "as_model",
    "close_client",
    "infer_model",
]

_PREFIXES = ("openai", "openai-chat", "openai-responses", "anthropic")
_OPENAI_NAMES = re.compile(r"^(gpt-|chatgpt-|o\d)")


def as_model(model: object) -> Model | AsyncModel | None:
    """``model`` as a ``Model`` / ``AsyncModel`` (it has ``model_name``, ``provider`` and
    ``request`` or ``arequest``), or ``None`` when it is not one."""
    if isinstance(model, str):
        return None
    if isinstance(model, Model | AsyncModel):
        return model
    return None


def infer_model(
    model: Model | AsyncModel | str | Any,
    model_name: str | None = None,
    *,
    async_client: bool = False,
    api: Literal["chat", "responses"] | None = None,
    **client_kwargs: Any,
) -> Any:
    """A model from a ``Model`` / ``AsyncModel``, a ``"provider:model"`` string, or an SDK
    client + ``model_name``. A string or a client gives an adapter, which is both a ``Model``
    and an ``AsyncModel`` (the client, sync or async, decides which one works).

    ``async_client`` picks ``AsyncOpenAI`` / ``AsyncAnthropic`` when a client is built from a
    string; ``client_kwargs`` go to that client (``max_retries``, ``timeout``, ``base_url``...).
    ``api`` chooses the OpenAI API for an OpenAI client or string (default: Chat Completions;
    the ``openai-responses:`` prefix means ``"responses"``).
    """
    name = model_name
    if isinstance(model, str):
        if name is not None:
            raise ConfigurationError(
                f"infer_model({model!r}, {name!r}): a 'provider:model' string already names the "
                "model; pass model_name= only together with an SDK client."
            )
        provider, model_name = _split(model)
        if provider == "anthropic":
            return _anthropic_from_env(model_name, async_client, client_kwargs)
        chosen_api = api or ("responses" if provider == "openai-responses" else "chat")
        return _openai_from_env(model_name, async_client, chosen_api, client_kwargs)
    known = as_model(model)
    if known is not None:
        if name is not None or client_kwargs:
            raise ConfigurationError(
                f"infer_model({type(model).__name__}, ...): a Model is used as it is; drop the "
                "model_name and client options."
            )
        return known
    package = type(model).__module__.split(".", 1)[0]
    if package in ("openai", "anthropic"):
        if not name:
            example = "claude-sonnet-4-6" if package == "anthropic" else "gpt-4.1-mini"
            raise ConfigurationError(
                f"infer_model({type(model).__name__} client): pass the model name too, e.g. "
                f"infer_model(client, {example!r})."
            )
        if client_kwargs:
            raise ConfigurationError(
                "infer_model(client, model_name, ...): client options apply when building a client "
                "from a string; configure your own client directly instead."
            )
        if package == "anthropic":
            from agent_payload.providers.anthropic import AnthropicModel

            return AnthropicModel(model, name)
        from agent_payload.providers.openai import OpenAIChatModel, OpenAIResponsesModel

        if api == "responses":
            return OpenAIResponsesModel(model, name)
        return OpenAIChatModel(model, name)
    raise ConfigurationError(
        f"infer_model(): expected a Model, a 'provider:model' string (providers: "
        f"{', '.join(_PREFIXES)}) or an openai/anthropic SDK client, got "
        f"{type(model).__module__}.{type(model).__qualname__}."
    )


def close_client(model: object) -> None:
    """Close the sync SDK client an adapter holds (``model.client``) with its open connections;
    nothing for a model without a client or with an async one (``await model.client.close()``
    in its own event loop). A client ``infer_model`` built from a ``"provider:model"`` string
    is yours to close."""
    close = getattr(getattr(model, "client", None), "close", None)
    if callable(close) and not inspect.iscoroutinefunction(close):
        close()


def _split(spec: str) -> tuple[str, str]:
    provider, sep, model_name = spec.partition(":")
    if not sep:
        model_name = spec
        if spec.startswith("claude"):
            provider = "anthropic"
        elif _OPENAI_NAMES.match(spec):
            provider = "openai"
        else:
            raise ConfigurationError(
                f"infer_model({spec!r}): cannot tell the provider; write 'openai:{spec}' or "
                f"'anthropic:{spec}' (providers: {', '.join(_PREFIXES)})."
            )
    if provider not in _PREFIXES:
        raise ConfigurationError(
            f"infer_model({spec!r}): unknown provider {provider!r}; expected one of "
            f"{', '.join(_PREFIXES)} (any OpenAI-compatible server works as 'openai:' with "
            "OPENAI_BASE_URL or base_url=...)."
        )
    if not model_name:
        raise ConfigurationError(
            f"infer_model({spec!r}): the model name after {provider!r}: is empty; write e.g. "
            f"'{provider}:{'claude-sonnet-4-6' if provider == 'anthropic' else 'gpt-4.1-mini'}'."
        )
    return provider, model_name


def _openai_from_env(
    model_name: str, async_client: bool, api: str, client_kwargs: dict[str, Any]
) -> Model:
    from agent_payload.providers.openai import (
        OpenAIChatModel,
        OpenAIResponsesModel,
        build_openai_client,
    )

    client = build_openai_client(async_client=async_client, **client_kwargs)
    if api == "responses":
        return OpenAIResponsesModel(client, model_name)
    return OpenAIChatModel(client, model_name)


def _anthropic_from_env(
    model_name: str, async_client: bool, client_kwargs: dict[str, Any]
) -> Model:
    from agent_payload.providers.anthropic import AnthropicModel, build_anthropic_client

    client = build_anthropic_client(async_client=async_client, **client_kwargs)
    return AnthropicModel(client, model_name)
