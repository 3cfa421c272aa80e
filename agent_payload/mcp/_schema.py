"""The payload's JSON Schema (``--payload-schema``): checked when the server starts (a valid
schema whose every ``$ref`` resolves), and its errors worded for what the reader may see."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from agent_payload._paths import format_payload_path
from agent_payload.errors import ConfigurationError

__all__ = ["PayloadSchema"]

_NOT_SCHEMAS: Final = frozenset({"enum", "const", "default", "examples"})


class PayloadSchema:
    """A jsonschema validator for ``schema``; ``ConfigurationError`` when jsonschema is not
    installed, the schema is not valid, or a ``$ref`` does not resolve."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        try:
            import jsonschema
        except ImportError as exc:
            raise ConfigurationError(
                "--payload-schema needs the jsonschema package; install it with "
                "pip install 'agent-payload[mcp]'"
            ) from exc
        cls = jsonschema.validators.validator_for(schema)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(
                f"the payload schema is not a valid JSON Schema: {exc.message}"
            ) from exc
        self.validator = cls(schema)
        _check_refs(self.validator, schema)

    def errors(self, payload: Any, read_scope: Any = None) -> list[str]:
        """The first five errors of ``payload``; with a ``read_scope``, as its reader may see
        them: the schema's rule, never the data, and nothing of a hidden part."""
        from referencing.exceptions import Unresolvable

        try:
            errors = sorted(
                self.validator.iter_errors(payload), key=lambda e: list(e.absolute_path)
            )
        except Unresolvable as exc:  # a $ref the startup check could not see (under a $id)
            raise ConfigurationError(
                f"the payload schema's reference cannot be resolved ({exc}); fix the schema"
            ) from exc
        out = []
        for error in errors[:5]:
            path = list(error.absolute_path)
            where = format_payload_path(path)
            if read_scope is None:
                out.append(f"at {where}: {error.message}")
            elif not read_scope.visible(tuple(path)):
                out.append("in a part of the payload you cannot see")
            else:
                rule = json.dumps(error.validator_value, ensure_ascii=False)
                rule = rule if len(rule) <= 200 else rule[:197] + "..."
                out.append(f"at {where}: the schema's {error.validator!r} rule ({rule}) fails")
        return out


def _check_refs(validator: Any, schema: Any) -> None:
    """Every ``$ref`` resolves (remote ones are never fetched), or a ``ConfigurationError``
    naming it and where it stands. A subschema with its own ``$id`` is left to validation."""
    from referencing.exceptions import Unresolvable

    resolver = validator._resolver  # jsonschema's resolver for this schema (4.18+)
    stack: list[tuple[Any, list[str | int]]] = [(schema, [])]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            if at and "$id" in node:
                continue
            ref = node.get("$ref")
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except Unresolvable as exc:
                    where = "/".join(str(p) for p in at) or "(root)"
                    raise ConfigurationError(
                        f"the payload schema's $ref {ref!r} at {where} cannot be resolved "
                        f"({type(exc).__name__}: {exc}); point it at a definition inside the "
                        "schema (remote references are not fetched)"
                    ) from exc
            stack.extend((v, [*at, k]) for k, v in node.items() if k not in _NOT_SCHEMAS)
        elif isinstance(node, list):
            stack.extend((v, [*at, i]) for i, v in enumerate(node))
