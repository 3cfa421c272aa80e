"""What the framework integrations share: the lazy import, the tools' name, description and
schema taken from the handler, and ``Same``, for ``turn`` keys naming a framework's object."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent_payload.errors import ConfigurationError
from agent_payload.tools import ChangeRequestToolHandler


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

    def kwargs(self, schema_key: str) -> dict[str, Any]:
        """``name``, ``description`` and the schema under the framework's ``schema_key``."""
        return {"name": self.name, "description": self.description, schema_key: self.schema}


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


def read_specs(handler: ChangeRequestToolHandler, caller: str) -> list[ToolSpec]:
    """``payload_tools``' read tools: ``read_payload`` and ``find_in_payload`` when outlined."""
    tool_spec(handler, name=None, description=None, caller=caller)  # checks the handler
    return [ToolSpec(n, d, dict(p)) for n, d, p in handler.read_tool_specs()]


class Same:
    """A ``turn`` key part that compares by identity and keeps its object alive while the
    handler remembers the key (so its ``id`` is not reused meanwhile)."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.obj is self.obj
