"""The change request as a pydantic-ai tool (``pip install 'agent-payload[pydantic-ai]'``).

One payload for the agent's lifetime, a handler you hold::

    from pydantic_ai import Agent
    from agent_payload import ChangeRequestToolHandler
    from agent_payload.integrations.pydantic_ai import change_request_tool

    handler = ChangeRequestToolHandler(invoice, payload_type=Invoice)
    agent = Agent("openai:gpt-5.4-mini", tools=[change_request_tool(handler)])
    agent.run_sync("Mark the invoice as paid")
    handler.payload                     # the payload after every good call

A payload per run, the way pydantic-ai passes per-run state (``deps``): give a function of the
``RunContext`` returning that run's handler. The tool definition (schema, marker) is then built
for each step from that handler (a ``prepare`` function), so one agent serves payloads of any
type::

    @dataclass
    class Deps:
        handler: ChangeRequestToolHandler

    agent = Agent(model, deps_type=Deps, tools=[change_request_tool(lambda ctx: ctx.deps.handler)])
    agent.run_sync("Mark the invoice as paid", deps=Deps(ChangeRequestToolHandler(invoice)))

The tool's schema is the change request's schema for the handler's payload type (arguments are
not validated by pydantic-ai: the handler's tolerant parser and merge judge them). A refused call
raises ``ModelRetry`` with the handler's text, so pydantic-ai sends it back as a retry prompt (a
tool result marked as an error) and counts it against the tool's ``max_retries``. Calls go to
``await handler.ahandle`` (async validators are awaited). The calls of one model response share
one base, the payload that response was written against (README "Concurrent edits"): the turn
is the run's step (``RunContext.run_id`` and ``run_step``), so parallel calls are rebased over
their siblings applied before them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic_core import SchemaValidator, core_schema

from agent_payload._reply import DEFAULT_TOOL_NAME
from agent_payload.errors import ConfigurationError
from agent_payload.integrations._common import read_specs, require, tool_spec
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
    the run's handler (for a payload in ``deps``). ``name`` defaults to the handler's tool name
    and must equal it (the handler's corrections name the tool); with a function, ``name``
    defaults to ``"apply_change_request"`` and each run's handler must carry that name.
    ``description`` defaults to the handler's.
    ``max_retries``: refused calls allowed before pydantic-ai ends the run (``None``: the
    agent's default). Raises ``ConfigurationError`` when ``pydantic-ai-slim`` is not installed.
    """
    pydantic_ai = require("pydantic_ai", package="pydantic-ai-slim", extra="pydantic-ai")
    if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
        raise ConfigurationError(
            f"{_CALLER}: max_retries must be a whole number 0 or more, found {max_retries!r}"
        )
    model_retry = pydantic_ai.ModelRetry

    async def apply(
        handler: ChangeRequestToolHandler, ctx: RunContext[Any], arguments: dict[str, Any]
    ) -> str:
        result = await handler.ahandle(arguments, turn=_turn(ctx))
        if result.is_error:
            raise model_retry(result.content)
        return result.content

    tool: Tool[Any]
    if isinstance(handler, ChangeRequestToolHandler):
        tool = _tool_of_handler(pydantic_ai, handler, name, description, apply)
    elif callable(handler):
        tool = _tool_of_each_run(pydantic_ai, handler, name, description, apply)
    else:
        raise ConfigurationError(
            f"{_CALLER}: expected a ChangeRequestToolHandler or a function of the RunContext "
            f"returning one, found {type(handler).__name__}"
        )
    # Not strict: strict mode cannot express a change request (see ``agent_payload.schema``),
    # and with ``strict=None`` pydantic-ai's OpenAI profile closes every open object
    # (``additionalProperties: false``), which would forbid the payload's own keys.
    tool.strict = False
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
    """The tools of a payload: ``change_request_tool(handler)`` and, when the handler is
    ``outlined`` (its payload over ``max_payload_tokens``), ``read_payload`` and
    ``find_in_payload`` answered by ``handler.read`` (their text, an error included, is the
    tool's result: a bad read is not counted against ``max_retries``). Give the model
    ``handler.prompt(task)`` (as the instructions and the user message), which then carries the
    outline; build the tools after it (the list is fixed)."""
    pydantic_ai = require("pydantic_ai", package="pydantic-ai-slim", extra="pydantic-ai")
    tools = [change_request_tool(handler, max_retries=max_retries)]
    for spec in read_specs(handler, "pydantic_ai.payload_tools"):
        tool: Tool[Any] = pydantic_ai.Tool.from_schema(
            _reader(handler, spec.name),
            name=spec.name,
            description=spec.description,
            json_schema=spec.schema,
            takes_ctx=False,
        )
        tool.strict = False
        tools.append(tool)
    return tools


def _reader(handler: ChangeRequestToolHandler, name: str) -> Callable[..., Awaitable[str]]:
    async def read(**arguments: Any) -> str:
        return handler.read(name, arguments).content

    return read


Apply = Callable[[ChangeRequestToolHandler, "RunContext[Any]", dict[str, Any]], Awaitable[str]]


def _turn(ctx: RunContext[Any]) -> Any:
    """The model response a call came from: the run and its step (None without a run id)."""
    run_id = getattr(ctx, "run_id", None)
    return None if run_id is None else ("pydantic-ai", run_id, ctx.run_step)


def _tool_of_handler(
    pydantic_ai: Any,
    handler: ChangeRequestToolHandler,
    name: str | None,
    description: str | None,
    apply: Apply,
) -> Tool[Any]:
    """The tool of one handler (one payload for every run)."""
    spec = tool_spec(handler, name=name, description=description, caller=_CALLER)

    # ``ctx`` is positional-only: the model's arguments may hold a "ctx" key of their own.
    async def call(ctx: RunContext[Any], /, **arguments: Any) -> str:
        return await apply(handler, ctx, arguments)

    tool: Tool[Any] = pydantic_ai.Tool.from_schema(
        call,
        name=spec.name,
        description=spec.description,
        json_schema=spec.schema,
        takes_ctx=True,
    )
    return tool


def _tool_of_each_run(
    pydantic_ai: Any,
    get_handler: Callable[[RunContext[Any]], ChangeRequestToolHandler],
    name: str | None,
    description: str | None,
    apply: Apply,
) -> Tool[Any]:
    """The tool whose handler each run gives (``get_handler(ctx)``, for a payload in
    ``deps``); its schema is rebuilt for each run by ``prepare``."""

    def run_handler(ctx: RunContext[Any]) -> ChangeRequestToolHandler:
        found = get_handler(ctx)
        if not isinstance(found, ChangeRequestToolHandler):
            raise ConfigurationError(
                f"{_CALLER}: the handler function returned {type(found).__name__}; "
                "expected the run's ChangeRequestToolHandler"
            )
        return found

    # ``ctx`` is positional-only: the model's arguments may hold a "ctx" key of their own.
    async def call_in_run(ctx: RunContext[Any], /, **arguments: Any) -> str:
        return await apply(run_handler(ctx), ctx, arguments)

    registered = name or DEFAULT_TOOL_NAME

    def prepare(ctx: RunContext[Any], tool_def: ToolDefinition) -> ToolDefinition:
        # The tool keeps the name it was registered under: each run's handler must use it.
        spec = tool_spec(run_handler(ctx), name=registered, description=description, caller=_CALLER)
        return dataclasses.replace(
            tool_def, description=spec.description, parameters_json_schema=spec.schema
        )

    # The schema for an untyped payload until ``prepare`` builds the run's own.
    placeholder = ChangeRequestToolHandler({}, name=registered)
    spec = tool_spec(placeholder, name=name, description=description, caller=_CALLER)
    tool: Tool[Any] = pydantic_ai.Tool.from_schema(
        call_in_run,
        name=spec.name,
        description=spec.description,
        json_schema=spec.schema,
        takes_ctx=True,
    )
    tool.prepare = prepare
    return tool
