"""The payload intake: every surface (the agent, the tool handler, the judge, sessions, the MCP
server, the store, batch jobs) prepares a payload here, once per run, handler or write, and
every later step takes the prepared form. Also the one marker rule (``marker_for``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from agent_payload import merge as _merge
from agent_payload import typed as _typed
from agent_payload.errors import PayloadValidationError

__all__ = ["Prepared", "check_payload_fits", "marker_for", "prepare", "project"]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A payload checked and ready to be merged, shown and judged: ``payload`` (what the merge
    takes: the model instance, or JSON data normalised by its type), ``payload_json`` (its JSON
    form by alias), ``payload_type`` (given, or a model's class), the ``marker`` and
    ``shown_json`` (``payload_json`` as the model may see it, through ``read_scope``)."""

    payload: Any
    payload_json: Any
    payload_type: Any
    marker: str
    shown_json: Any
    read_scope: Any = None

    def moved_to(self, payload: Any, *, merged: bool = False) -> Prepared:
        """This preparation (type, marker, read scope; the round trip not checked again) for a
        later payload of the same run or handler. ``merged``: a result of the judge (already its
        validated form); otherwise (a store's current version) JSON data is validated into the
        model class of a model payload, or normalised with the type."""
        if merged and isinstance(payload, dict | list):
            payload_json = payload  # the merge's own output: JSON data
        else:
            payload_json = _merge.dump_payload(payload, copy=False)
        if not merged and not isinstance(payload, BaseModel):
            if isinstance(self.payload, BaseModel):
                payload = type(self.payload).model_validate(payload_json)
            elif self.payload_type is not None:
                payload = payload_json = _typed.normalize(payload_json, self.payload_type)
        shown_json = project(self.read_scope, payload_json)
        return dataclasses.replace(
            self, payload=payload, payload_json=payload_json, shown_json=shown_json
        )


def project(read_scope: Any, payload_json: Any) -> Any:
    """``payload_json`` as the model may see it: projected through ``read_scope`` (if any)."""
    return payload_json if read_scope is None else read_scope.project(payload_json)


def marker_for(payload_json: Any, payload_type: Any = None, task: str | None = None) -> str:
    """The one marker rule: ``merge.choose_marker`` avoiding every string ``payload_type``
    admits (a type or a JSON Schema: ``typed.type_strings``) and the task when it is known."""
    avoid = _typed.type_strings(payload_type)
    return _merge.choose_marker(payload_json, avoid=avoid if task is None else (task, *avoid))


def prepare(
    payload: Any,
    payload_type: Any = None,
    *,
    task: str | None = None,
    marker: str | None = None,
    read_scope: Any = None,
) -> Prepared:
    """``payload`` dumped by alias (``InvalidPayloadError``, ``LimitExceededError``), checked
    against ``payload_type`` (``check_payload_fits``; a JSON Schema only gives strings to avoid)
    and for an exact round trip (``typed.check_round_trip``), normalised, given its marker
    (``marker_for``, unless given) and projected through ``read_scope``; not copied."""
    payload_json = _merge.dump_payload(payload, copy=False)
    if payload_type is None and isinstance(payload, BaseModel):
        payload_type = type(payload)
    elif not (
        payload_type is None or isinstance(payload, BaseModel) or isinstance(payload_type, dict)
    ):
        check_payload_fits(payload_json, payload_type)
    _typed.check_round_trip(payload, payload_type)
    if payload_type is not None and not isinstance(payload, BaseModel):
        payload = payload_json = _typed.normalize(payload_json, payload_type)
    if marker is None:
        marker = marker_for(payload_json, payload_type, task)
    shown_json = project(read_scope, payload_json)
    return Prepared(payload, payload_json, payload_type, marker, shown_json, read_scope)


def check_payload_fits(payload_json: Any, payload_type: Any) -> None:
    """The caller's payload must already fit ``payload_type``: otherwise every attempt would be
    blamed on the model. ``PayloadValidationError`` before any request."""
    try:
        TypeAdapter(payload_type).validate_python(payload_json)
    except ValidationError as exc:
        errors = _merge.validation_errors(exc, payload_json)
        name = getattr(payload_type, "__name__", str(payload_type))
        raise PayloadValidationError(
            f"The payload given to run() does not validate as {name} before any change: "
            f"{_merge.list_validation_errors(errors)}. Fix the payload (or the payload_type) "
            "first; no model request was made.",
            errors=errors,
            payload=payload_json,
        ) from exc
