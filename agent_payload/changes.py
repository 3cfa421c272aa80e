"""The change request, what the model emits instead of the whole payload, and the DELETE
markers (data, no logic). The buckets hold plain JSON: a partial with placeholders and markers
is not an ``Invoice``. The format: docs/format.md."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_serializer

__all__ = [
    "BUCKETS",
    "DEFAULT_MARKERS",
    "MARKER",
    "REFERENCE_MARKER",
    "WIRE_NAMES",
    "AgentPayloadChangeRequest",
]

MARKER = "DELETE"
"""The seed's DELETE marker."""

REFERENCE_MARKER = "__DELETE__"
"""The reference system's DELETE marker."""

DEFAULT_MARKERS: frozenset[str] = frozenset({MARKER, REFERENCE_MARKER})
"""Markers active when none are configured (the agent activates exactly one per call)."""

Bucket = dict[str, JsonValue] | list[JsonValue] | None


class AgentPayloadChangeRequest(BaseModel):
    """A change request: both spellings are read (``newElements``, ``new_elements``);
    ``model_dump`` writes the camelCase wire form without empty fields."""

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True, extra="forbid")

    new_elements: Bucket = Field(default=None, alias="newElements")
    update_elements: Bucket = Field(default=None, alias="updateElements")
    remove_elements: Bucket = Field(default=None, alias="removeElements")
    replace_elements: Bucket = Field(default=None, alias="replaceElements")
    reasoning: str | None = None

    @model_serializer(mode="wrap")
    def _drop_empty(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None and v != {} and v != []}

    def to_wire(self) -> dict[str, Any]:
        """The camelCase wire form without empty fields (a fresh dict)."""
        return self.model_dump(mode="json", by_alias=True)

    def is_empty(self) -> bool:
        """True when no bucket asks for anything (``reasoning`` does not count)."""
        return not any(
            (self.new_elements, self.update_elements, self.remove_elements, self.replace_elements)
        )


WIRE_NAMES: dict[str, str] = {
    name: field.alias or name for name, field in AgentPayloadChangeRequest.model_fields.items()
}
"""Python attribute name -> wire name."""

BUCKETS: tuple[str, ...] = tuple(wire for wire in WIRE_NAMES.values() if wire != "reasoning")
"""The four buckets, in wire (camelCase) spelling."""
