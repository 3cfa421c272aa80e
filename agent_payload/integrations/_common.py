"""What the framework integrations share: the lazy import and the tool's name, description
and schema taken from the handler."""

from __future__ import annotations

import importlib
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent_payload.errors import ConfigurationError
from agent_payload.tools import ChangeRequestToolHandler, ToolResult

_LOCKS: weakref.WeakKeyDictionary[ChangeRequestToolHandler, threading.Lock] = (
    weakref.WeakKeyDictionary()
)
_LOCKS_LOCK = threading.Lock()


def require(module: str, *, package: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ``ConfigurationError`` saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"this integration needs the {package} package, which is not installed "
            f"(import {module!r} failed: {exc}); install it with "
            f"pip install 'agent-payload[{extra}]'"
        ) from exc


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """The tool's name, description and parameters JSON Schema, as the handler gives them."""

    name: str
    description: str
    schema: dict[str, Any]


def tool_spec(
    handler: ChangeRequestToolHandler,
    *,
    name: str | None,
    description: str | None,
    caller: str,
) -> ToolSpec:
    """The handler's tool definition; ``name`` must be the handler's (its corrections tell the
    model to call the tool by that name), ``description`` replaces the handler's."""
    if not isinstance(handler, ChangeRequestToolHandler):
        raise ConfigurationError(
            f"{caller}: expected a ChangeRequestToolHandler, found {type(handler).__name__}; "
            "build one with ChangeRequestToolHandler(payload, payload_type=...)"
        )
    definition = handler.openai_tool()["function"]
    handler_name = str(definition["name"])
    if name is not None and name != handler_name:
        raise ConfigurationError(
            f"{caller}: name={name!r} differs from the handler's tool name {handler_name!r}, "
            "which its corrections tell the model to call; build the handler with "
            f"ChangeRequestToolHandler(..., name={name!r}) instead"
        )
    if description is not None and (not isinstance(description, str) or not description.strip()):
        raise ConfigurationError(
            f"{caller}: description must be a non-empty string, found {description!r}"
        )
    return ToolSpec(
        name=handler_name,
        description=description if description is not None else str(definition["description"]),
        schema=dict(definition["parameters"]),
    )


def handle(handler: ChangeRequestToolHandler, arguments: str | Mapping[str, Any]) -> ToolResult:
    """``handler.handle(arguments)``, one call at a time per handler: frameworks run parallel
    tool calls in threads, and each call must be judged against the payload the previous one
    left."""
    with _LOCKS_LOCK:
        lock = _LOCKS.get(handler)
        if lock is None:
            lock = _LOCKS[handler] = threading.Lock()
    with lock:
        return handler.handle(arguments)
