"""Model providers: one module per SDK behind the ``Model`` / ``AsyncModel`` protocols of
``base`` (``openai`` and ``anthropic`` import their SDK lazily: the core works with neither),
and ``infer_model``, which turns what a user has at hand into a model."""

from __future__ import annotations

import inspect
import re
from typing import Any, Literal

from agent_payload._reply import OutputMode
from agent_payload.errors import ConfigurationError
from agent_payload.providers.base import (
    AsyncModel,
    AsyncStreamingModel,
    Message,
    Model,
    ModelReply,
    ModelRequest,
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
    return model if isinstance(model, Model | AsyncModel) else None


def infer_model(
    model: Model | AsyncModel | str | Any,
    model_name: str | None = None,
    *,
    async_client: bool = False,
    api: Literal["chat", "responses"] | None = None,
    **client_kwargs: Any,
) -> Any:
    """A model from a ``Model`` / ``AsyncModel`` (returned as is), a ``"provider:model"``
    string (``"openai:gpt-4.1-mini"``, ``"openai-responses:..."``, ``"anthropic:..."``; a bare
    ``claude-...`` / ``gpt-...`` / ``o3...`` picks its provider), or an SDK client +
    ``model_name``. A string builds the client from the environment (async with
    ``async_client``, with ``client_kwargs``; close it with ``close_client``). ``api``: the
    OpenAI API, ``"chat"`` (default) or ``"responses"``.
    """
    name = model_name
    if isinstance(model, str):
        if name is not None:
            raise ConfigurationError(
                f"infer_model({model!r}, {name!r}): a 'provider:model' string already names the "
                "model; pass model_name= only together with an SDK client."
            )
        provider, model_name = _split(model)
        package = "anthropic" if provider == "anthropic" else "openai"
        if provider == "openai-responses":
            api = api or "responses"
        return _adapter(package, None, model_name, api, async_client=async_client, **client_kwargs)
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
        return _adapter(package, model, name, api)
    raise ConfigurationError(
        f"infer_model(): expected a Model, a 'provider:model' string (providers: "
        f"{', '.join(_PREFIXES)}) or an openai/anthropic SDK client, got "
        f"{type(model).__module__}.{type(model).__qualname__}."
    )


def close_client(model: object) -> None:
    """Close the sync SDK client an adapter holds (``model.client``), as a client
    ``infer_model`` built needs; nothing for an async one (``await model.client.close()``)."""
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


def _adapter(package: str, client: Any, model_name: str, api: str | None, **build: Any) -> Model:
    """The adapter of ``package`` on ``client`` (None: built from the environment, ``build``
    being ``async_client`` and the client's options)."""
    if package == "anthropic":
        from agent_payload.providers.anthropic import AnthropicModel, build_anthropic_client

        client = build_anthropic_client(**build) if client is None else client
        return AnthropicModel(client, model_name)
    from agent_payload.providers.openai import (
        OpenAIChatModel,
        OpenAIResponsesModel,
        build_openai_client,
    )

    client = build_openai_client(**build) if client is None else client
    adapter = OpenAIResponsesModel if api == "responses" else OpenAIChatModel
    return adapter(client, model_name)
