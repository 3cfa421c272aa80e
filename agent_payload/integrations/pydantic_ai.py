"""The change request as a pydantic-ai ``Tool`` (``pip install 'agent-payload[pydantic-ai]'``;
docs/frameworks.md), over one handler or a handler per run (a function of the ``RunContext``).
A refused call raises ``ModelRetry`` with the handler's text; the calls of one model response
share its base (the turn is the run id and step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic_core import SchemaValidator, core_schema

from agent_payload._reply import DEFAULT_TOOL_NAME
from agent_payload.errors import ConfigurationError
from agent_payload.integrations._common import ToolSpec, read_specs, require, tool_spec
from agent_payload.tools import ChangeRequestToolHandler

if TYPE_CHECKING:
    from pydantic_ai import RunContext, Tool
    from pydantic_ai.tools import ToolDefinition

__all__ = ["change_request_tool", "payload_tools"]

_CALLER = "pydantic_ai.change_request_tool"

HandlerSource = ChangeRequestToolHandler | Callable[["RunContext[Any]"], ChangeRequestToolHandler]


def change_request_tool(
    handler: HandlerSource,
    *,
    name: str | None = None,
    description: str | None = None,
    max_retries: int | None = None,
) -> Tool[Any]:
    """A pydantic-ai ``Tool`` applying the model's change requests through a handler.

    ``handler``: a ``ChangeRequestToolHandler``, or a function of the ``RunContext`` returning
    the run's handler. ``name`` must be the handler's tool name (with a function: default
    ``"apply_change_request"``, which each run's handler must carry); ``description`` replaces
    the handler's; ``max_retries``: refused calls allowed before pydantic-ai ends the run
    (``None``: the agent's default). Raises ``ConfigurationError`` when ``pydantic-ai-slim`` is
    not installed.
    """
    pydantic_ai = require("pydantic_ai", package="pydantic-ai-slim", extra="pydantic-ai")
    if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
        raise ConfigurationError(
            f"{_CALLER}: max_retries must be a whole number 0 or more, found {max_retries!r}"
        )
    if isinstance(handler, ChangeRequestToolHandler):
        spec, prepare = tool_spec(handler, name=name, description=description, caller=_CALLER), None
    elif callable(handler):
        spec, prepare = _each_run(handler, name, description)
    else:
        raise ConfigurationError(
            f"{_CALLER}: expected a ChangeRequestToolHandler or a function of the RunContext "
            f"returning one, found {type(handler).__name__}"
        )

    # ``ctx`` is positional-only: the model's arguments may hold a "ctx" key of their own.
    async def call(ctx: RunContext[Any], /, **arguments: Any) -> str:
        result = await _run_handler(handler, ctx).ahandle(arguments, turn=_turn(ctx))
        if result.is_error:
            raise pydantic_ai.ModelRetry(result.content)
        return result.content

    tool = _tool(pydantic_ai, call, spec, takes_ctx=True)
    if prepare is not None:
        tool.prepare = prepare
    # ``Tool.from_schema`` accepts any JSON as the arguments and would then fail to pass a
    # non-object as keyword arguments (a TypeError ending the run). An object is all pydantic-ai
    # checks; anything else goes back to the model as its own validation retry.
    tool.function_schema.validator = SchemaValidator(
        core_schema.dict_schema(keys_schema=core_schema.str_schema())
    )
    if max_retries is not None:
        tool.max_retries = max_retries
    return tool


def payload_tools(
    handler: ChangeRequestToolHandler, *, max_retries: int | None = None
) -> list[Tool[Any]]:
    """``change_request_tool(handler)`` and, when the handler is ``outlined``, the read tools
    ``read_payload`` and ``find_in_payload`` answered by ``handler.read`` (a bad read is the
    tool's result, not counted against ``max_retries``). Build them after
    ``handler.prompt(task)`` (which then carries the outline): the list is fixed."""
    pydantic_ai = require("pydantic_ai", package="pydantic-ai-slim", extra="pydantic-ai")
    tools = [change_request_tool(handler, max_retries=max_retries)]
    for spec in read_specs(handler, "pydantic_ai.payload_tools"):
        tools.append(_tool(pydantic_ai, _reader(handler, spec.name), spec, takes_ctx=False))
    return tools


def _tool(pydantic_ai: Any, function: Any, spec: ToolSpec, *, takes_ctx: bool) -> Tool[Any]:
    """A tool of ``function`` with the spec's name, description and schema, not strict: strict
    mode cannot express a change request, and with ``strict=None`` pydantic-ai's OpenAI profile
    closes every open object (``additionalProperties: false``), forbidding the payload's keys."""
    tool: Tool[Any] = pydantic_ai.Tool.from_schema(
        function, **spec.kwargs("json_schema"), takes_ctx=takes_ctx
    )
    tool.strict = False
    return tool


def _reader(handler: ChangeRequestToolHandler, name: str) -> Callable[..., Awaitable[str]]:
    async def read(**arguments: Any) -> str:
        return handler.read(name, arguments).content

    return read


def _turn(ctx: RunContext[Any]) -> Any:
    """The model response a call came from: the run and its step (None without a run id)."""
    run_id = getattr(ctx, "run_id", None)
    return None if run_id is None else ("pydantic-ai", run_id, ctx.run_step)


def _run_handler(source: HandlerSource, ctx: RunContext[Any]) -> ChangeRequestToolHandler:
    """The run's handler: ``source``, or what the function ``source`` returns for the run."""
    if isinstance(source, ChangeRequestToolHandler):
        return source
    found = source(ctx)
    if not isinstance(found, ChangeRequestToolHandler):
        raise ConfigurationError(
            f"{_CALLER}: the handler function returned {type(found).__name__}; "
            "expected the run's ChangeRequestToolHandler"
        )
    return found


def _each_run(
    get_handler: Callable[[RunContext[Any]], ChangeRequestToolHandler],
    name: str | None,
    description: str | None,
) -> tuple[ToolSpec, Any]:
    """For a handler per run: the spec of an untyped payload, and the ``prepare`` function
    building each run's tool definition from its handler."""
    registered = name or DEFAULT_TOOL_NAME

    def prepare(ctx: RunContext[Any], tool_def: ToolDefinition) -> ToolDefinition:
        # The tool keeps the name it was registered under: each run's handler must use it.
        handler = _run_handler(get_handler, ctx)
        spec = tool_spec(handler, name=registered, description=description, caller=_CALLER)
        return dataclasses.replace(
            tool_def, description=spec.description, parameters_json_schema=spec.schema
        )

    placeholder = ChangeRequestToolHandler({}, name=registered)
    return tool_spec(placeholder, name=name, description=description, caller=_CALLER), prepare
