"""Path-rule grammar and the Permissions guard, checked one change at a time (no merge)."""

from __future__ import annotations

import pytest

from agent_payload.errors import ConfigurationError
from agent_payload.guards import PermissionFinding, Permissions, format_path, parse_rule
from agent_payload.report import Change

# --- the grammar ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "path", "expected"),
    [
        ("a.b", ("a", "b"), True),
        ("a.b", ("a",), False),
        ("a.b", ("a", "b", "c"), False),  # matches exactly; covering the subtree is separate
        ("a.*", ("a", "x"), True),
        ("a.*", ("a", 3), True),
        ("a.*", ("a",), False),  # documented: a.* does not include a itself
        ("a.**", ("a",), True),  # ** is zero or more segments
        ("a.**", ("a", "x", 1, "y"), True),
        ("items[*].price", ("items", 7, "price"), True),
        ("items[*].price", ("items", "7", "price"), False),  # [*] is an index, not a key
        ("items[0]", ("items", 0), True),
        ("items[0]", ("items", 1), False),
        ("**.id", ("id",), True),
        ("**.id", ("a", 3, "b", "id"), True),
        ("**.id", ("a", "idx"), False),
        ('["key.with.dots"]', ("key.with.dots",), True),
        ('["key.with.dots"]', ("key", "with", "dots"), False),
        ('a["b.c"][2]', ("a", "b.c", 2), True),
        ('[""]', ("",), True),
        ('["*"]', ("*",), True),
        ('["*"]', ("x",), False),
        ("stats.2024", ("stats", "2024"), True),  # a bare name is always a key
        ("stats.2024", ("stats", 2024), False),
        ("**", (), True),
        ("ключ.значение", ("ключ", "значение"), True),
        ("[3].name", (3, "name"), True),
        ("*", ("anything",), True),
    ],
)
def test_rule_matches(rule: str, path: tuple[str | int, ...], expected: bool) -> None:
    """Each form of the grammar matches exactly the concrete paths the docs say it does."""
    assert parse_rule(rule).matches(path) is expected


@pytest.mark.parametrize(
    ("rule", "ops"),
    [
        ("a", {"add", "update", "delete"}),
        ("a:add", {"add"}),
        ("a.b:add,update", {"add", "update"}),
        ("items[*]: update , delete", {"update", "delete"}),
        ('["x:y"]:delete', {"delete"}),
    ],
)
def test_operation_suffix(rule: str, ops: set[str]) -> None:
    """The optional :ops suffix is parsed (a colon inside a quoted key is not a suffix)."""
    assert parse_rule(rule).ops == ops


@pytest.mark.parametrize(
    ("rule", "position"),
    [
        ("a..b", 2),
        ("a[", 2),
        ("a[01]", 2),
        ("a[1", 3),
        ("a:fly", 2),
        ("a:add,,delete", 6),
        ("a b", 1),
        ('a["b]', 2),
        ("a.*b", 3),
        ("a***", 1),
        (".a", 0),
        ("a]", 1),
        ("a[-1]", 2),
    ],
)
def test_bad_rule_names_the_position(rule: str, position: int) -> None:
    """A bad rule is a ConfigurationError whose message names the rule and the position."""
    with pytest.raises(ConfigurationError) as info:
        parse_rule(rule)
    assert f"at position {position}" in str(info.value)
    assert repr(rule) in str(info.value)


def test_empty_and_non_string_rules_are_configuration_errors() -> None:
    """An empty rule, a non-string rule and a bare string instead of a list are refused."""
    with pytest.raises(ConfigurationError):
        parse_rule("  ")
    with pytest.raises(ConfigurationError):
        parse_rule(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="list of path rules"):
        Permissions(deny="items")  # type: ignore[arg-type]


def test_rules_are_parsed_once_at_construction() -> None:
    """A bad rule fails when the guard is built, not later when a change arrives."""
    with pytest.raises(ConfigurationError, match="position"):
        Permissions(allow=["ok", "bad..rule"])


@pytest.mark.parametrize(
    "path",
    [("a", "b"), ("items", 3, "price"), ("a.b", "c"), ("", 0), ("ключ",), ("*", "**"), (0,)],
)
def test_formatted_path_is_a_rule_matching_that_path(path: tuple[str | int, ...]) -> None:
    """format_path writes a concrete path that, read as a rule, matches exactly that path."""
    assert parse_rule(format_path(path)).matches(path)


# --- effects -------------------------------------------------------------------------------


def test_effects_of_a_container_replacement() -> None:
    """Replacing a container by a primitive deletes every node inside it; a same-kind
    replacement is compared and only the differences count."""
    change = Change("update", ("a",), old={"b": {"c": 1}, "d": 2}, new=5)
    for rule, path, op in [
        ("a:update", ("a",), "update"),
        ("a.b.c:delete", ("a", "b", "c"), "delete"),
        ("a.d:delete", ("a", "d"), "delete"),
    ]:
        finding = Permissions(deny=[rule]).check(change)
        assert finding is not None and (finding.path, finding.op) == (path, op), rule
    assert Permissions(deny=["a.b:update", "a.d:add"]).check(change) is None
    same_kind = Change("update", ("a",), old={"b": 1, "c": 2}, new={"b": 1, "c": 3, "e": 4})
    assert Permissions(deny=["a.b"]).check(same_kind) is None
    for rule, path, op in [("a.c:update", ("a", "c"), "update"), ("a.e:add", ("a", "e"), "add")]:
        finding = Permissions(deny=[rule]).check(same_kind)
        assert finding is not None and (finding.path, finding.op) == (path, op), rule


# --- deny ----------------------------------------------------------------------------------


def _denied(perms: Permissions, change: Change) -> PermissionFinding | None:
    findings = perms(change)
    assert len(findings) <= 1
    if not findings:
        return None
    finding = findings[0]
    assert isinstance(finding, PermissionFinding)
    assert finding.code == "permission_denied"
    assert finding.severity == "conflict"
    return finding


def test_deny_refuses_a_change_at_the_path_and_names_path_and_rule() -> None:
    """A change at a denied path is refused; the message names the concrete path and rule."""
    perms = Permissions(deny=["items[*].price"])
    finding = _denied(perms, Change("update", ("items", 4, "price"), old=1, new=2))
    assert finding is not None
    assert finding.path == ("items", 4, "price")
    assert finding.rule == "items[*].price"
    assert "`items[4].price`" in finding.message
    assert "`items[*].price`" in finding.message
    assert _denied(perms, Change("update", ("items", 4, "name"), old="a", new="b")) is None


def test_deny_covers_the_subtree() -> None:
    """A change anywhere inside a denied path is refused."""
    perms = Permissions(deny=["customer"])
    finding = _denied(perms, Change("update", ("customer", "address", "city"), old="a", new="b"))
    assert finding is not None and finding.rule == "customer"
    assert _denied(perms, Change("add", ("customers",), new=1)) is None


def test_double_star_patterns_match_at_any_depth() -> None:
    """Hole 1 of the reference system: `**` patterns must match (top level and deep)."""
    perms = Permissions(deny=["**.id"])
    assert _denied(perms, Change("update", ("id",), old=1, new=2)) is not None
    assert _denied(perms, Change("update", ("a", 0, "b", "id"), old=1, new=2)) is not None
    assert _denied(perms, Change("delete", ("a", 0, "b", "id"), old=1)) is not None
    assert _denied(perms, Change("update", ("a", 0, "b", "name"), old=1, new=2)) is None


def test_bracket_forms_match() -> None:
    """Hole 2 of the reference system: bracket forms (indices, [*], quoted keys) must match."""
    perms = Permissions(deny=["items[0]", 'meta["x.y"]', "rows[*][1]"])
    assert _denied(perms, Change("update", ("items", 0, "a"), old=1, new=2)) is not None
    assert _denied(perms, Change("update", ("items", 1, "a"), old=1, new=2)) is None
    assert _denied(perms, Change("update", ("meta", "x.y"), old=1, new=2)) is not None
    assert _denied(perms, Change("update", ("meta", "x"), old=1, new=2)) is None
    assert _denied(perms, Change("update", ("rows", 5, 1), old=1, new=2)) is not None
    assert _denied(perms, Change("update", ("rows", 5, 0), old=1, new=2)) is None


def test_appends_and_deletions_are_checked() -> None:
    """Hole 3 of the reference system: appending an element and deleting one are checked."""
    perms = Permissions(deny=["items[*]"])
    assert _denied(perms, Change("add", ("items", 9), new={"sku": "x"})) is not None
    assert _denied(perms, Change("delete", ("items", 2), old={"sku": "y"})) is not None
    tags = Permissions(deny=["tags"])
    assert _denied(tags, Change("add", ("tags", 3), new="new")) is not None
    assert _denied(tags, Change("delete", ("tags", 0), old="old")) is not None


def test_deleting_a_container_deletes_the_protected_paths_inside_it() -> None:
    """Deleting `items` when `items[*].price` is denied is refused, naming the inner path."""
    perms = Permissions(deny=["items[*].price"])
    finding = _denied(
        perms, Change("delete", ("items",), old=[{"sku": "a"}, {"sku": "b", "price": 3}])
    )
    assert finding is not None
    assert finding.path == ("items", 1, "price")
    assert finding.op == "delete"
    assert "`items`" in finding.message
    # nothing protected inside: allowed
    assert _denied(perms, Change("delete", ("items",), old=[{"sku": "a"}])) is None
    assert _denied(perms, Change("delete", ("items", 0), old={"price": 1})) is not None


def test_replacing_a_container_by_a_primitive_is_refused_when_it_holds_a_denied_path() -> None:
    """Replacing `a` with a primitive when `a.b` is denied deletes `a.b`: refused."""
    perms = Permissions(deny=["a.b"])
    finding = _denied(perms, Change("update", ("a",), old={"b": 1, "c": 2}, new=0))
    assert finding is not None and finding.path == ("a", "b") and finding.op == "delete"
    # a same-kind replacement that leaves a.b alone is fine
    assert _denied(perms, Change("update", ("a",), old={"b": 1, "c": 2}, new={"b": 1})) is None
    # and one that changes a.b is not
    assert _denied(perms, Change("update", ("a",), old={"b": 1}, new={"b": 2})) is not None


def test_adding_a_container_that_holds_a_denied_path_is_refused() -> None:
    """Adding (or appending) a value that would create a denied path is refused."""
    perms = Permissions(deny=["**.owner"])
    assert _denied(perms, Change("add", ("x",), new={"deep": [{"owner": "me"}]})) is not None
    assert _denied(perms, Change("add", ("x",), new={"deep": [{"user": "me"}]})) is None


def test_star_covers_below_but_not_the_node_itself() -> None:
    """`a.*` protects a's contents; replacing an empty `a` or adding `a` empty is allowed."""
    perms = Permissions(deny=["a.*"])
    assert _denied(perms, Change("update", ("a", "x"), old=1, new=2)) is not None
    assert _denied(perms, Change("add", ("a", "y"), new=2)) is not None
    assert _denied(perms, Change("delete", ("a",), old={"x": 1})) is not None
    assert _denied(perms, Change("delete", ("a",), old={})) is None
    assert _denied(perms, Change("update", ("a",), old={}, new=3)) is None
    assert _denied(Permissions(deny=["a.**"]), Change("update", ("a",), old={}, new=3))


def test_operation_suffix_restricts_what_is_denied() -> None:
    """`items[*]:delete` forbids deleting elements (and anything in them) but not updates;
    `price:update` forbids changing price but not deleting it."""
    perms = Permissions(deny=["items[*]:delete"])
    finding = _denied(perms, Change("delete", ("items", 1), old={"a": 1}))
    assert finding is not None
    assert finding.message.startswith("`items[1]` may not be deleted (rule `items[*]:delete`)")
    assert _denied(perms, Change("delete", ("items", 1, "a"), old=1)) is not None
    assert _denied(perms, Change("update", ("items", 1, "a"), old=1, new=2)) is None
    assert _denied(perms, Change("add", ("items", 2), new={"a": 1})) is None
    price = Permissions(deny=["price:update"])
    assert _denied(price, Change("update", ("price",), old=1, new=2)) is not None
    assert _denied(price, Change("delete", ("price",), old=1)) is None


def test_operation_suffix_applies_to_nodes_inside_a_replaced_container() -> None:
    """`a:delete` refuses replacing `a`'s object by a primitive (its keys are deleted)."""
    perms = Permissions(deny=["a:delete"])
    finding = _denied(perms, Change("update", ("a",), old={"b": 1}, new=2))
    assert finding is not None and finding.path == ("a", "b")
    assert "(this change of `a` would delete `a.b` inside it)" in finding.message
    root = _denied(Permissions(deny=["[*].id"]), Change("update", (), old=[{"id": 1}], new=[]))
    assert root is not None and "this change of the whole payload" in root.message
    assert _denied(perms, Change("update", ("a",), old="x", new=2)) is None


# --- allow ---------------------------------------------------------------------------------


def test_allow_list_permits_only_its_paths() -> None:
    """With an allow list, only changes inside its paths go through."""
    perms = Permissions(allow=["items[*].price", "status"])
    assert _denied(perms, Change("update", ("items", 2, "price"), old=1, new=2)) is None
    assert _denied(perms, Change("update", ("status",), old="a", new="b")) is None
    finding = _denied(perms, Change("update", ("items", 2, "name"), old=1, new=2))
    assert finding is not None
    assert finding.rule == "allow list"
    assert "`items[2].name`" in finding.message and "`items[*].price`" in finding.message
    # appending an element is a change to items itself: not allowed
    assert _denied(perms, Change("add", ("items", 5), new={"price": 1})) is not None


def test_allow_with_operations() -> None:
    """`items[*]:update` permits updates inside elements but no appends or deletions."""
    perms = Permissions(allow=["items[*]:update"])
    assert _denied(perms, Change("update", ("items", 0, "q"), old=1, new=2)) is None
    assert _denied(perms, Change("add", ("items", 3), new={})) is not None
    assert _denied(perms, Change("delete", ("items", 0), old={})) is not None
    assert _denied(perms, Change("delete", ("items", 0, "q"), old=1)) is not None


def test_empty_allow_list_allows_nothing_and_none_allows_everything() -> None:
    """allow=[] refuses every change; allow=None (the default) is no allow list."""
    change = Change("update", ("a",), old=1, new=2)
    assert _denied(Permissions(allow=[]), change) is not None
    assert _denied(Permissions(), change) is None


def test_allow_and_deny_together() -> None:
    """A change must be inside the allow list and outside the deny list."""
    perms = Permissions(allow=["items"], deny=["items[*].id"])
    assert _denied(perms, Change("update", ("items", 0, "qty"), old=1, new=2)) is None
    assert _denied(perms, Change("update", ("items", 0, "id"), old=1, new=2)) is not None
    assert _denied(perms, Change("update", ("other",), old=1, new=2)) is not None


def test_allows_query() -> None:
    """allows(path, op) answers for a single node."""
    perms = Permissions(allow=["a"], deny=["a.b:delete"])
    assert perms.allows(("a", "c"))
    assert perms.allows(("a", "b"), "update")
    assert not perms.allows(("a", "b"), "delete")
    assert not perms.allows(("z",))
    with pytest.raises(ConfigurationError):
        perms.allows(("a",), "rename")


def test_severity_warning_lets_changes_through() -> None:
    """severity='warning' produces warnings instead of conflicts; a bad severity is refused."""
    perms = Permissions(deny=["a"], severity="warning")
    (finding,) = perms(Change("update", ("a",), old=1, new=2))
    assert finding.severity == "warning"
    with pytest.raises(ConfigurationError):
        Permissions(deny=["a"], severity="fatal")  # type: ignore[arg-type]


def test_describe_states_what_may_and_may_not_change() -> None:
    """describe() lists the allowed and the read-only paths, with their operations."""
    text = Permissions(
        allow=["items[*].price", "notes:add"], deny=["**.id", "items[*]:delete"]
    ).describe()
    assert "`items[*].price`" in text
    assert "`notes` (only: add)" in text
    assert "Read-only" in text and "`**.id`" in text
    assert "`items[*]` (no delete)" in text
    assert Permissions().describe() == ""
    assert "may not change anything" in Permissions(allow=[]).describe()


def test_deep_change_paths_and_values_do_not_recurse() -> None:
    """A 10,000-level change path and deleted value are checked without RecursionError."""
    deep: object = 1
    for _ in range(10_000):
        deep = {"k": deep}
    perms = Permissions(deny=["**.id"])
    assert perms(Change("delete", ("root",), old=deep)) == []
    path = ("k",) * 10_000 + ("id",)
    assert _denied(perms, Change("update", path, old=1, new=2)) is not None
    assert _denied(Permissions(deny=["**.k.id"]), Change("delete", ("x",), old=deep)) is None
