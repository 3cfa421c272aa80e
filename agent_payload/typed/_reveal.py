"""A typed payload's JSON form with its secret and excluded values in it, for the files that
must give them back (a saved session): ``file_json``. Its JSON form alone (``json_data``)
writes a secret as ``"**********"`` and leaves an excluded field out, so a file written from it
loads back with the mask as the secret and the field at its default."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from agent_payload._jsondata import json_data
from agent_payload._paths import format_payload_path, lookup
from agent_payload.errors import UsageError
from agent_payload.typed._carry import _listed, _opaque_fields

__all__ = ["file_json"]


def file_json(payload: Any, *, include_secrets: bool, what: str, option: str) -> Any:
    """``payload``'s JSON form for a file. A model holding secret or excluded values raises
    ``UsageError`` naming them (``what`` is the caller, ``option`` the keyword that opts in)
    unless ``include_secrets``: then their values are written in clear where its JSON form
    has them (by alias), and the result is checked to validate back to an equal model."""
    data = json_data(payload)
    if not isinstance(payload, BaseModel):
        return data
    hidden = _opaque_fields(payload)
    if not hidden:
        return data
    more = f" and {len(hidden) - 5} more" if len(hidden) > 5 else ""
    if not include_secrets:
        raise UsageError(
            f"{what}: the payload holds {_listed(hidden)}{more}. Its JSON form writes a secret as "
            "'**********' and leaves an excluded field out, so the file would load back "
            f"without them. Pass {option}=True to write their values in clear to the file "
            "(and protect the file), or keep them out of the payload."
        )
    for opaque in hidden:
        parent = lookup(data, opaque.path[:-1], None)
        if not isinstance(parent, dict):
            raise _unwritable(what, opaque.path)
        value = opaque.value.get_secret_value() if opaque.kind == "secret" else opaque.value
        parent[opaque.path[-1]] = to_jsonable_python(value, by_alias=True)
    try:
        again = type(payload).model_validate(data)
    except ValueError as exc:
        raise _unwritable(what, hidden[0].path) from exc
    if again != payload:
        raise _unwritable(what, hidden[0].path)
    return data


def _unwritable(what: str, path: Any) -> UsageError:
    return UsageError(
        f"{what}: the secret or excluded values of the payload (the first at "
        f"{format_payload_path(path)}) cannot be written so that they load back equal (a "
        "secret inside an excluded value, or a serializer the JSON form does not read back); "
        "nothing was written."
    )
