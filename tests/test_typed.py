"""Typed payloads (issue 17): an exact round trip, validation as part of the change, markers
that know the type, no-ops sent back, validated dicts out. One test (or a few) per bullet of
the issue, with the models it quotes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Literal

import jsonpatch  # type: ignore[import-untyped]
import pytest
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    computed_field,
    field_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from typing_extensions import TypedDict

from agent_payload import apply_change_request
from agent_payload.agent import PayloadAgent
from agent_payload.diff import diff_payloads, to_json_patch, undo_change_request
from agent_payload.errors import (
    ConfigurationError,
    PayloadValidationError,
    RetriesExhaustedError,
)
from agent_payload.guards import Permissions
from agent_payload.merge import choose_marker
from agent_payload.session import PayloadSession
from agent_payload.testing import ScriptedModel
from agent_payload.tools import ChangeRequestToolHandler
from agent_payload.typed import check_round_trip, clean_loc, type_strings


def wire(request: dict[str, Any]) -> str:
    return json.dumps(request)


# --- bullet 1: untouched fields destroyed ------------------------------------------------------


class Acct(BaseModel):
    name: str
    api_key: SecretStr
    note: str = Field("", exclude=True)


def acct() -> Acct:
    return Acct(name="x", api_key=SecretStr("sk-real-123"), note="keep me")


def test_secret_and_excluded_fields_survive_apply_change_request() -> None:
    result = apply_change_request(acct(), {"updateElements": {"name": "y"}})
    assert result.payload.name == "y"
    assert result.payload.api_key.get_secret_value() == "sk-real-123"
    assert result.payload.note == "keep me"
    assert [(c.op, c.path) for c in result.report.changes] == [("update", ("name",))]


def test_secret_and_excluded_fields_survive_the_agent() -> None:
    model = ScriptedModel([wire({"updateElements": {"name": "y"}, "reasoning": "rename"})])
    result = PayloadAgent(model).run(acct(), "rename to y")
    assert result.payload.api_key.get_secret_value() == "sk-real-123"
    assert result.payload.note == "keep me"
    assert [c.path for c in result.changes] == [("name",)]
    assert "sk-real-123" not in model.requests[0].messages[-1].content
    assert "keep me" not in model.requests[0].messages[-1].content


def test_secrets_survive_array_shifts() -> None:
    class Vault(BaseModel):
        accounts: list[Acct]

    vault = Vault(
        accounts=[
            Acct(name="a", api_key=SecretStr("k-a"), note="na"),
            Acct(name="b", api_key=SecretStr("k-b"), note="nb"),
            Acct(name="c", api_key=SecretStr("k-c"), note="nc"),
        ]
    )
    result = apply_change_request(
        vault,
        {"updateElements": {"accounts": {"0": "DELETE", "2": {"name": "C"}}}},
    )
    keys = [(a.name, a.api_key.get_secret_value(), a.note) for a in result.payload.accounts]
    assert keys == [("b", "k-b", "nb"), ("C", "k-c", "nc")]


@pytest.mark.parametrize(
    "request_",
    [
        {"updateElements": {"api_key": "sk-new"}},
        {"removeElements": {"api_key": "DELETE"}},
        {"updateElements": {"note": "changed"}},
    ],
)
def test_a_request_naming_a_secret_or_excluded_field_is_refused(request_: Any) -> None:
    with pytest.raises(PayloadValidationError) as info:
        apply_change_request(acct(), request_)
    message = str(info.value)
    assert ("secret" in message) or ("excluded" in message)
    assert "Leave it out" in message


def test_the_agent_sends_a_secret_write_back_as_a_correction() -> None:
    model = ScriptedModel(
        [
            wire({"updateElements": {"api_key": "sk-guess"}}),
            wire({"updateElements": {"name": "y"}}),
        ]
    )
    result = PayloadAgent(model).run(acct(), "rename")
    assert result.attempts == 2
    assert "secret" in model.requests[1].messages[-1].content
    assert result.payload.api_key.get_secret_value() == "sk-real-123"


def test_a_dict_payload_whose_type_has_secrets_is_refused_up_front() -> None:
    with pytest.raises(ConfigurationError, match="api_key"):
        PayloadAgent(ScriptedModel([])).run({"name": "x", "api_key": "sk"}, "t", payload_type=Acct)


class Split(BaseModel):
    x: int = Field(0, validation_alias="vx", serialization_alias="sx")


class Choices(BaseModel):
    y: int = Field(0, validation_alias=AliasChoices("yy", "yyy"))


class NoAlias(BaseModel):
    model_config = ConfigDict(validate_by_alias=False, validate_by_name=True)
    z: int = Field(0, alias="zz")


class Money(BaseModel):
    amount: Decimal

    @field_serializer("amount")
    def _cents(self, v: Decimal) -> int:
        return int(v * 100)  # written in cents, read back as units: not a round trip


class ExactMoney(BaseModel):
    amount: Decimal  # pydantic writes it as a string that validates back: fine


class Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: int
    b: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        return self.a + self.b


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (Split(vx=3), "x"),
        (Choices(yy=3), "y"),
        (NoAlias(z=3), "z"),
        (Money(amount=Decimal("1.50")), "amount"),
    ],
)
def test_types_that_cannot_round_trip_are_refused_naming_the_field(
    payload: BaseModel, field: str
) -> None:
    with pytest.raises(ConfigurationError, match=field):
        check_round_trip(payload)
    with pytest.raises(ConfigurationError, match=field):
        apply_change_request(payload, None)
    model = ScriptedModel([])
    with pytest.raises(ConfigurationError, match=field):
        PayloadAgent(model).run(payload, "anything")
    assert model.requests == []  # refused before any request
    with pytest.raises(ConfigurationError, match=field):
        ChangeRequestToolHandler(payload)


def test_types_that_round_trip_pass() -> None:
    check_round_trip(ExactMoney(amount=Decimal("1.50")))
    check_round_trip(Forbid(a=1, b=2))


def test_computed_fields_with_extra_forbid_work() -> None:
    result = apply_change_request(Forbid(a=1, b=2), {"updateElements": {"a": 5}})
    assert result.payload.total == 7
    assert [(c.path, c.old, c.new) for c in result.report.changes] == [
        (("a",), 1, 5),
        (("total",), 3, 7),
    ]


# --- bullet 2: what validation changes is reported and guarded --------------------------------


class Cat(BaseModel):
    kind: Literal["cat"]
    name: str
    vaccinations: list[str] = []


class Dog(BaseModel):
    kind: Literal["dog"]
    name: str


class Owner(BaseModel):
    pets: list[Annotated[Cat | Dog, Field(discriminator="kind")]]


def owner() -> Owner:
    return Owner(pets=[Cat(kind="cat", name="Tom", vaccinations=["rabies"])])


SWITCH = {"updateElements": {"pets": {"0": {"kind": "dog"}}}}


def test_a_union_switch_is_reported_with_what_it_deletes() -> None:
    result = apply_change_request(owner(), SWITCH)
    assert isinstance(result.payload.pets[0], Dog)
    assert {(c.op, c.path) for c in result.report.changes} == {
        ("update", ("pets", 0, "kind")),
        ("delete", ("pets", 0, "vaccinations")),
    }


def test_a_union_switch_deleting_a_denied_field_is_refused() -> None:
    guard = Permissions(deny=["pets[*].vaccinations"])
    result = apply_change_request(owner(), SWITCH, guards=[guard])
    assert [c.code for c in result.report.conflicts] == ["permission_denied"]
    assert result.report.conflicts[0].payload_path == ("pets", 0, "vaccinations")
    assert result.report.changes == []
    assert result.payload == owner()  # nothing applied


def test_the_agent_sends_the_refused_switch_back() -> None:
    model = ScriptedModel(
        [wire(SWITCH), wire({"updateElements": {"pets": {"0": {"name": "Rex"}}}})]
    )
    agent = PayloadAgent(model, permissions=Permissions(deny=["pets[*].vaccinations"]))
    result = agent.run(owner(), "rename the pet")
    assert result.attempts == 2
    assert "vaccinations" in model.requests[1].messages[-1].content
    assert result.payload.pets[0] == Cat(kind="cat", name="Rex", vaccinations=["rabies"])


class Line(BaseModel):
    qty: int
    price: float


class Invoice(BaseModel):
    lines: list[Line]
    subtotal: float = 0

    @model_validator(mode="after")
    def _subtotal(self) -> Invoice:
        self.subtotal = sum(line.qty * line.price for line in self.lines)
        return self


def test_a_validator_side_effect_is_reported_and_rebuilt_by_the_patch() -> None:
    before = Invoice(lines=[Line(qty=1, price=2.0), Line(qty=1, price=5.0)])
    request = {"updateElements": {"lines": {"0": "DELETE", "1": {"qty": 3}}}}
    result = apply_change_request(before, request)
    assert result.payload.subtotal == 15.0
    assert ("update", ("subtotal",), 7.0, 15.0) in [
        (c.op, c.path, c.old, c.new) for c in result.report.changes
    ]
    data = before.model_dump(mode="json", by_alias=True)
    patched = jsonpatch.apply_patch(data, to_json_patch(data, result.report))
    assert patched == result.payload.model_dump(mode="json", by_alias=True)
    undo = undo_change_request(before, result)
    assert apply_change_request(result.payload, undo).payload == before


def test_a_guard_sees_the_validator_side_effect() -> None:
    before = Invoice(lines=[Line(qty=1, price=2.0)])
    result = apply_change_request(
        before,
        {"updateElements": {"lines": [{"qty": 4}]}},
        guards=[Permissions(deny=["subtotal"])],
    )
    assert [c.payload_path for c in result.report.conflicts] == [("subtotal",)]
    assert result.payload == before


# --- bullet 3: the marker never collides with the type's own values ---------------------------


class Endpoint(BaseModel):
    path: str
    method: Literal["GET", "POST", "PUT", "DELETE"] = "GET"


class Api(BaseModel):
    endpoints: list[Endpoint]


def test_the_marker_is_never_a_value_the_type_admits() -> None:
    assert "DELETE" in type_strings(Api)
    api = Api(endpoints=[Endpoint(path="/a", method="GET")])
    model = ScriptedModel(
        [
            wire({"updateElements": {"endpoints": [{"method": "DELETE"}]}, "reasoning": "r"}),
            wire({"newElements": {"endpoints": {"0": {"method": "DELETE"}}}, "reasoning": "r"}),
        ]
    )
    result = PayloadAgent(model).run(api, "make /a a DELETE endpoint")
    assert result.marker != "DELETE"
    # MERGE.md section 4 (issue 30): "DELETE" in updateElements is a stale_marker whatever
    # the type admits; the correction names newElements, which stores the text
    assert "stale_marker" in model.requests[1].messages[-1].content
    assert result.payload.endpoints[0].method == "DELETE"
    assert [(c.path, c.new) for c in result.changes] == [(("endpoints", 0, "method"), "DELETE")]


def test_the_tool_handler_marker_knows_the_type() -> None:
    handler = ChangeRequestToolHandler(Api(endpoints=[Endpoint(path="/a")]))
    assert handler.marker != "DELETE"
    refused = handler.handle(wire({"updateElements": {"endpoints": [{"method": "DELETE"}]}}))
    assert refused.is_error and "stale_marker" in refused.content
    result = handler.handle(wire({"newElements": {"endpoints": {"0": {"method": "DELETE"}}}}))
    assert not result.is_error, result.content
    assert result.payload.endpoints[0].method == "DELETE"


def test_choose_marker_avoid_and_data() -> None:
    assert choose_marker({"m": "DELETE"}) != "DELETE"
    assert choose_marker({}, avoid=["DELETE"]) != "DELETE"
    assert choose_marker({}) == "DELETE"


# --- bullet 4: edits that validation undoes go back -------------------------------------------


class Cart(BaseModel):
    price: float
    qty: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> float:
        return self.price * self.qty


class Settings(BaseModel):
    timeout: int = 30
    retries: int = 3


def test_an_edit_of_a_computed_field_is_a_correction() -> None:
    with pytest.raises(PayloadValidationError) as info:
        apply_change_request(Cart(price=2.0, qty=3), {"updateElements": {"total": 10.0}})
    assert info.value.errors[0][0] == ("total",)
    assert "computed" in info.value.errors[0][1]
    assert "fields it is computed from" in info.value.errors[0][1]


def test_a_delete_the_default_restores_is_a_correction() -> None:
    with pytest.raises(PayloadValidationError) as info:
        apply_change_request(Settings(), {"removeElements": {"timeout": "DELETE"}})
    assert info.value.errors[0][0] == ("timeout",)
    assert "does nothing" in info.value.errors[0][1]
    # a delete that resets a changed value to its default is a real change, reported as such
    result = apply_change_request(Settings(timeout=60), {"removeElements": {"timeout": "DELETE"}})
    assert [(c.op, c.path, c.old, c.new) for c in result.report.changes] == [
        ("update", ("timeout",), 60, 30)
    ]


def test_the_agent_sends_a_no_op_back() -> None:
    model = ScriptedModel(
        [wire({"updateElements": {"total": 10.0}}), wire({"updateElements": {"qty": 5}})]
    )
    result = PayloadAgent(model).run(Cart(price=2.0, qty=3), "make the total 10")
    assert result.attempts == 2
    assert "computed" in model.requests[1].messages[-1].content
    assert result.payload.total == 10.0


# --- bullet 5: a dict payload with a type comes back validated --------------------------------


class Stock(BaseModel):
    sku: str
    qty: int


@dataclass
class StockDC:
    sku: str
    qty: int


class StockTD(TypedDict):
    sku: str
    qty: int


@pytest.mark.parametrize("payload_type", [Stock, StockDC, StockTD])
def test_dict_in_with_a_type_gives_the_validated_dict(payload_type: Any) -> None:
    model = ScriptedModel([wire({"updateElements": {"qty": "5"}})])
    result = PayloadAgent(model).run({"sku": "A", "qty": 1}, "five", payload_type=payload_type)
    assert result.payload == {"sku": "A", "qty": 5}
    assert [(c.path, c.new) for c in result.changes] == [(("qty",), 5)]


def test_dict_in_with_a_type_through_the_tool_handler() -> None:
    handler = ChangeRequestToolHandler({"sku": "A", "qty": 1}, payload_type=Stock)
    result = handler.handle(wire({"updateElements": {"qty": "5"}}))
    assert not result.is_error, result.content
    assert result.payload == {"sku": "A", "qty": 5}


# --- bullet 6: aliases ------------------------------------------------------------------------


class Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
    first_name: str
    line_items: list[Stock] = []


def test_session_undo_on_a_camel_case_model(tmp_path: Any) -> None:
    model = ScriptedModel([wire({"updateElements": {"firstName": "Eve"}})])
    session = PayloadSession(PayloadAgent(model), Camel(first_name="Ada"))
    session.send("rename")
    assert session.payload.first_name == "Eve"
    session.undo()
    assert session.payload == Camel(first_name="Ada")
    session.redo()
    assert session.payload.first_name == "Eve"
    session.save(tmp_path / "s.json")
    loaded = PayloadSession.load(tmp_path / "s.json", PayloadAgent(model), payload_type=Camel)
    assert loaded.payload == Camel(first_name="Eve")


def test_diff_payloads_on_aliased_models() -> None:
    old = Camel(first_name="a", line_items=[Stock(sku="A", qty=1)])
    new = Camel(first_name="b", line_items=[Stock(sku="A", qty=2), Stock(sku="B", qty=1)])
    merged = apply_change_request(old, diff_payloads(old, new))
    assert merged.payload == new


def test_the_tool_handler_speaks_aliases() -> None:
    handler = ChangeRequestToolHandler(Camel(first_name="Ada"))
    result = handler.handle(wire({"updateElements": {"lineItems": [{"sku": "X", "qty": "x"}]}}))
    assert result.is_error
    assert "lineItems[0].qty" in result.content


# --- bullet 7 (schema) lives in test_schema.py; union paths here ------------------------------


def test_union_branch_tags_never_reach_validation_paths() -> None:
    with pytest.raises(PayloadValidationError) as info:
        apply_change_request(owner(), {"updateElements": {"pets": {"0": {"name": 5}}}})
    assert [path for path, _ in info.value.errors] == [("pets", 0, "name")]
    assert clean_loc(("pets", 0, "dog", "meows"), {"pets": [{"meows": 1}]}) == (
        "pets",
        0,
        "meows",
    )
    assert clean_loc(("x", "int"), {"x": "a"}) == ("x",)
    assert clean_loc(("missing",), {}) == ("missing",)


def test_agent_round_trip_refusal_makes_no_request() -> None:
    model = ScriptedModel([])
    with pytest.raises(ConfigurationError):
        PayloadAgent(model).run(Split(vx=1), "t")
    replies = ScriptedModel([wire({"updateElements": {"total": 5}})] * 2)
    with pytest.raises(RetriesExhaustedError):
        PayloadAgent(replies, max_retries=1).run(Cart(price=1.0, qty=1), "t")


class Item(BaseModel):
    sku: str
    qty: int = 1
    note: str = ""


def test_dict_in_starts_from_its_validated_form() -> None:
    """Defaults the input dict lacked are not changes of the model's (no guard sees them)."""
    model = ScriptedModel([wire({"updateElements": {"qty": 2}})])
    agent = PayloadAgent(model, permissions=Permissions(allow=["qty"]))
    result = agent.run({"sku": "A"}, "two", payload_type=Item)
    assert result.payload == {"sku": "A", "qty": 2, "note": ""}
    assert [(c.op, c.path) for c in result.changes] == [("update", ("qty",))]


def test_the_tool_handler_refuses_an_invalid_typed_payload_at_construction() -> None:
    with pytest.raises(PayloadValidationError, match="qty"):
        ChangeRequestToolHandler({"sku": "A", "qty": "many"}, payload_type=Item)


def test_the_tool_handler_carries_secrets_and_refuses_writing_them() -> None:
    handler = ChangeRequestToolHandler(acct())
    refused = handler.handle(wire({"updateElements": {"api_key": "sk-guess"}}))
    assert refused.is_error
    assert "secret" in refused.content
    done = handler.handle(wire({"updateElements": {"name": "y"}}))
    assert not done.is_error, done.content
    assert done.payload.api_key.get_secret_value() == "sk-real-123"
    assert done.payload.note == "keep me"


def test_a_session_carries_secrets_through_send_undo_and_redo() -> None:
    model = ScriptedModel([wire({"updateElements": {"name": "y"}})])
    session = PayloadSession(PayloadAgent(model), acct())
    session.send("rename")
    session.undo()
    assert session.payload == acct()
    session.redo()
    assert session.payload.name == "y"
    assert session.payload.api_key.get_secret_value() == "sk-real-123"
    assert session.payload.note == "keep me"


def test_insertions_move_secrets_and_validation_changes_with_their_elements() -> None:
    """MERGE.md section 8: items inserted in the middle shift the later elements; the carried
    secrets follow their objects and the report still rebuilds the validated result."""

    class Vault(BaseModel):
        accounts: list[Acct]
        count: int = 0

        @model_validator(mode="after")
        def _count(self) -> Vault:
            self.count = len(self.accounts)
            return self

    vault = Vault(
        accounts=[
            Acct(name="a", api_key=SecretStr("k-a"), note="na"),
            Acct(name="b", api_key=SecretStr("k-b"), note="nb"),
        ]
    )
    request = {
        "newElements": {
            "accounts": {"1": [{"name": "n1", "api_key": "k1"}, {"name": "n2", "api_key": "k2"}]}
        },
        "updateElements": {"accounts": {"0": "DELETE"}},
    }
    result = apply_change_request(vault, request)
    got = [(a.name, a.api_key.get_secret_value(), a.note) for a in result.payload.accounts]
    assert got == [("n1", "k1", ""), ("n2", "k2", ""), ("b", "k-b", "nb")]
    data = vault.model_dump(mode="json", by_alias=True)
    assert result.payload.count == 3
    assert ("update", ("count",), 2, 3) in [
        (c.op, c.path, c.old, c.new) for c in result.report.changes
    ]
    patched = jsonpatch.apply_patch(data, to_json_patch(data, result.report))
    assert patched == result.payload.model_dump(mode="json", by_alias=True)


def test_a_delete_the_default_restores_inside_a_shifted_element_is_a_correction() -> None:
    class Shelf(BaseModel):
        items: list[Item]

    shelf = Shelf(items=[Item(sku="A", qty=5), Item(sku="B", qty=1)])
    request = {
        "updateElements": {"items": {"0": "DELETE"}},
        "removeElements": {"items": {"1": {"qty": "DELETE"}}},
    }
    with pytest.raises(PayloadValidationError) as info:
        apply_change_request(shelf, request)
    assert info.value.errors[0][0] == ("items", 1, "qty")  # as the request wrote it
    assert "does nothing" in info.value.errors[0][1]


# --- issue 33: the round trip of a typed payload is checked once per run ----------------------


def _count_round_trips(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Calls of the real ``typed.check_round_trip``, counted by a wrapper installed where the
    intake (and the merge, for callers that did not prepare) looks it up."""
    import agent_payload.typed as typed

    calls: list[Any] = []
    real = typed.check_round_trip

    def counting(payload: Any, payload_type: Any = None) -> None:
        calls.append(payload)
        real(payload, payload_type)

    monkeypatch.setattr(typed, "check_round_trip", counting)
    return calls


@pytest.mark.parametrize("as_model", [True, False], ids=["model", "dict with payload_type"])
def test_a_two_attempt_typed_run_checks_the_round_trip_once(
    as_model: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round trip (a whole dump and validation of the payload: seconds for a model of
    20,000 lines) is checked before the first request and never again: the attempts merge
    into the checked payload. Two attempts, each reaching the merge (the first refused by the
    type), call ``typed.check_round_trip`` once in all."""
    calls = _count_round_trips(monkeypatch)
    invoice = Invoice(lines=[Line(qty=1, price=2.0), Line(qty=2, price=5.0)])
    model = ScriptedModel(
        [
            json.dumps({"updateElements": {"lines": [{}, {"qty": "many"}]}}),
            json.dumps({"updateElements": {"lines": [{}, {"qty": 3}]}}),
        ]
    )
    agent = PayloadAgent(model)
    if as_model:
        result = agent.run(invoice, "three of the second line")
        assert result.payload.lines[1].qty == 3
    else:
        data = invoice.model_dump(mode="json")
        result = agent.run(data, "three of the second line", payload_type=Invoice)
        assert result.payload["lines"][1]["qty"] == 3
    assert result.attempts == 2
    assert len(calls) == 1


# --- one payload intake (issue 32): every surface prepares a payload the same way --------------


def test_a_two_attempt_run_on_a_model_checks_the_round_trip_once_in_the_intake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A two-attempt ``PayloadAgent`` run on a pydantic payload, both replies reaching the merge
    (the first refused by the type), checks the round trip once: in ``_intake.prepare``, before
    the first request (the judge merges the prepared JSON)."""
    from agent_payload import _intake

    calls = _count_round_trips(monkeypatch)
    prepared: list[Any] = []
    real_prepare = _intake.prepare

    def tracing(*args: Any, **kwargs: Any) -> Any:
        before = len(calls)
        result = real_prepare(*args, **kwargs)
        prepared.append(len(calls) - before)
        return result

    monkeypatch.setattr(_intake, "prepare", tracing)
    invoice = Invoice(lines=[Line(qty=1, price=2.0), Line(qty=2, price=5.0)])
    model = ScriptedModel(
        [
            wire({"updateElements": {"lines": [{}, {"qty": "many"}]}}),
            wire({"updateElements": {"lines": [{}, {"qty": 3}]}}),
        ]
    )
    result = PayloadAgent(model).run(invoice, "three of the second line")
    assert result.attempts == 2 and result.payload.lines[1].qty == 3
    assert calls == [invoice]
    assert prepared == [1]  # one preparation, which made the one check


def test_the_tool_handler_checks_the_round_trip_once_per_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handler prepares its payload once; its calls (refused or applied) merge the prepared
    JSON, and an applied call's result is the merge's validated form, not checked again."""
    calls = _count_round_trips(monkeypatch)
    handler = ChangeRequestToolHandler(Invoice(lines=[Line(qty=1, price=2.0)]))
    assert handler.handle(wire({"updateElements": {"lines": [{"qty": "many"}]}})).is_error
    assert not handler.handle(wire({"updateElements": {"lines": [{"qty": 2}]}})).is_error
    assert not handler.handle(wire({"updateElements": {"lines": [{"qty": 3}]}})).is_error
    assert handler.payload.subtotal == 6.0
    assert len(calls) == 1


class Verb(BaseModel):
    """A type that admits "DELETE" and "__DELETE__" as values."""

    method: Literal["GET", "DELETE", "__DELETE__"] = "GET"
    note: str = ""


@pytest.mark.parametrize(
    ("payload", "task", "expected"),
    [
        ({"method": "GET", "note": ""}, "set the note", "__DELETE_"),  # the type's strings
        ({"method": "GET", "note": "DELETE"}, "set the note", "__DELETE_"),  # and the data's
    ],
    ids=["type", "type and data"],
)
def test_the_agent_the_handler_and_the_mcp_server_pick_the_same_marker(
    payload: dict[str, Any], task: str, expected: str, tmp_path: Any
) -> None:
    """One marker rule (``_intake.marker_for``): avoid the payload's strings, every string the
    type admits (a model, or the MCP server's JSON Schema of it) and the task when it is known."""
    from agent_payload.mcp import PayloadFileEditor

    agent = PayloadAgent(ScriptedModel([wire({"reasoning": "nothing to change"})]))
    by_agent = agent.run(payload, task, payload_type=Verb).marker
    handler = ChangeRequestToolHandler(payload, payload_type=Verb)
    handler.prompt(task)
    path = tmp_path / "verb.json"
    path.write_text(json.dumps(payload))
    by_mcp = PayloadFileEditor(path, payload_schema=Verb.model_json_schema()).marker
    assert by_agent == handler.marker == by_mcp
    assert by_agent.startswith(expected)


def test_the_agent_and_the_handler_avoid_the_task_the_same_way() -> None:
    """A task that holds ``"DELETE"`` (as a value to write) moves both to the next marker; the
    MCP server never sees the task (its client holds it), so only the type and data count there."""
    payload = {"method": "GET", "note": ""}
    task = "write DELETE into the note"
    agent = PayloadAgent(ScriptedModel([wire({"reasoning": "nothing to change"})]))
    by_agent = agent.run(payload, task).marker
    handler = ChangeRequestToolHandler(payload)
    handler.prompt(task)
    assert by_agent == handler.marker == "__DELETE__"
    assert ChangeRequestToolHandler(payload).marker == "DELETE"  # no task known yet
