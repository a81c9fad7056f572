"""The request's variables as the pricing reads them: counted against ``max_variable_values``
before anything else, a scalar coerced as graphql-core coerces it (or known valid at once
when its type, a standard scalar, takes it as it is), a list or an object left to the
execution to coerce (once), of which the price reads only what it needs."""

from __future__ import annotations

from typing import Any

import pytest
from graphql import GraphQLScalarType, execute_sync, parse

from quotaql._graphql_compat import get_variable_values
from quotaql.cost_analysis import CostLimits, analyze, operation
from quotaql.cost_analysis._cache import _UNKEPT, _freeze
from quotaql.cost_analysis.model import SAFE_LIMITS
from quotaql.cost_analysis.operation import count_values
from quotaql.errors import InvalidArgument, InvalidVariables, TooManyVariableValues

from .conftest import build

SDL = """
scalar Counted
input Page { first: Int = 3 }
input Filter { ids: [ID!]  page: Page }
type Node @cost(weight: "2") { id: ID! }
type Query {
  nodes(ids: [ID!]!): [Node!]! @listSize(slicingArguments: ["ids"])
  filtered(filter: Filter!): [Node!]! @listSize(slicingArguments: ["filter.ids"])
  paged(filter: Filter!): [Node!]! @listSize(slicingArguments: ["filter.page.first"])
  tally(values: [Counted!]!): Int!
  one(value: Counted!): Int!
  hello: String
}
"""


class Parsed:
    """How many values of the scalar ``Counted`` graphql-core coerced."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, value: Any) -> int:
        self.count += 1
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"Counted takes an integer, got {value!r}")
        return value


@pytest.fixture
def parsed() -> Parsed:
    return Parsed()


@pytest.fixture
def schema(parsed: Parsed) -> Any:
    built = build(SDL)
    counted = built.type_map["Counted"]
    assert isinstance(counted, GraphQLScalarType)
    # graphql-core's own scalar, its parser counted (3.2 calls parse_value, 3.3
    # coerce_input_value: the constructor sets both from parse_value).
    counted.parse_value = parsed  # type: ignore[method-assign]
    counted.coerce_input_value = parsed  # type: ignore[attr-defined]
    return built


class Watched(list[Any]):
    """A list that notes each time something iterates over it."""

    iterated: list[int] = []  # noqa: RUF012  (reset by each test that reads it)

    def __iter__(self) -> Any:
        Watched.iterated.append(len(self))
        return super().__iter__()


# -- counting ----------------------------------------------------------------------------


def test_each_scalar_list_and_object_counts_one() -> None:
    assert count_values({}, 10) == 0
    assert count_values({"a": 1, "b": None, "c": "x"}, 10) == 3
    assert count_values({"a": [1, 2, 3]}, 10) == 4  # the list and its three items
    assert count_values({"a": {"b": [1, {"c": []}]}}, 10) == 5
    assert count_values({"a": [[], [], []], "b": {}}, 10) == 5  # empty ones count too
    assert count_values({"a": (1, 2)}, 10) == 3  # a tuple is a list


def test_the_count_stops_past_the_limit_without_looking_further() -> None:
    Watched.iterated = []
    inner = Watched([1] * 1_000)
    outer = Watched([inner] * 1_000)  # a million values, the same list a thousand times
    assert count_values({"v": outer}, 5_000) == 5_001  # (at least)
    # The outer list and three inner ones were looked into (4,000 values, within the
    # limit); the fourth inner list's length took the count past it.
    assert Watched.iterated == [1_000] * 4
    Watched.iterated = []
    assert count_values({"v": Watched([1] * 1_000_000)}, 10) == 1_000_001
    assert Watched.iterated == []  # too long: its length alone refused it


def test_analyze_refuses_more_values_than_the_limit_before_anything_coerces(
    schema: Any, parsed: Parsed
) -> None:
    query = "query ($v: [Counted!]!) { tally(values: $v) }"
    limits = CostLimits(max_variable_values=100)
    with pytest.raises(TooManyVariableValues) as raised:
        analyze(schema, query, {"v": list(range(100))}, limits=limits)
    assert raised.value.extensions == {"code": "TOO_MANY_VARIABLE_VALUES", "value": 101,
                                       "limit": 100}  # fmt: skip
    assert str(raised.value) == (
        "The variables hold more than 100 values (each scalar, list and object counts one)"
    )
    assert parsed.count == 0
    assert analyze(schema, query, {"v": list(range(99))}, limits=limits).cost == 0
    # Variables the operation does not declare were sent and decoded all the same.
    with pytest.raises(TooManyVariableValues):
        analyze(schema, query, {"v": [1], "junk": [0] * 200}, limits=limits)


def test_the_default_limit_is_five_thousand_values(schema: Any) -> None:
    query = "query ($v: [Counted!]!) { tally(values: $v) }"
    assert SAFE_LIMITS.max_variable_values == 5_000
    analyze(schema, query, {"v": [1] * 4_999}, limits=SAFE_LIMITS)
    with pytest.raises(TooManyVariableValues):
        analyze(schema, query, {"v": [1] * 5_000}, limits=SAFE_LIMITS)


def test_no_limit_counts_nothing(schema: Any) -> None:
    analyze(schema, "query ($v: [Counted!]!) { tally(values: $v) }", {"v": [1] * 10_000})


# -- coerced once ------------------------------------------------------------------------


def test_a_list_variable_is_coerced_by_the_execution_only(schema: Any, parsed: Parsed) -> None:
    query = "query ($v: [Counted!]!) { tally(values: $v) }"
    analyze(schema, query, {"v": list(range(1_000))})
    assert parsed.count == 0  # the pricing did not coerce it
    execute_sync(schema, parse(query), root_value={"tally": 1}, variable_values={"v": [1] * 10})
    assert parsed.count == 10  # graphql-core's execution did, once


def test_a_scalar_variable_is_still_coerced_and_refused_by_the_pricing(
    schema: Any, parsed: Parsed
) -> None:
    query = "query ($x: Counted!) { one(value: $x) }"
    analyze(schema, query, {"x": 5})
    assert parsed.count == 1
    with pytest.raises(InvalidVariables) as raised:
        analyze(schema, query, {"x": "five"})
    assert "$x" in raised.value.message
    with pytest.raises(InvalidVariables, match=r"\$x"):  # not sent
        analyze(schema, query, {})


def test_a_value_where_a_list_is_expected_is_coerced_as_a_list_of_one(
    schema: Any, parsed: Parsed
) -> None:
    query = "query ($v: [Counted!]!) { tally(values: $v) }"
    analyze(schema, query, {"v": 7})
    assert parsed.count == 1
    with pytest.raises(InvalidVariables):
        analyze(schema, query, {"v": "seven"})
    with pytest.raises(InvalidVariables, match=r"\$v"):  # null
        analyze(schema, query, {"v": None})


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        ("query ($a: [Unknown]) { hello }", {"a": [1, 2]}),
        ("query ($a: Node) { hello }", {"a": {"id": "1"}}),
        ("query ($a: [Node]) { hello }", {"a": [{"id": "1"}]}),
    ],
)
def test_a_list_or_object_of_a_type_that_is_no_input_type_is_refused(
    schema: Any, query: str, variables: dict[str, Any]
) -> None:
    with pytest.raises(InvalidVariables, match="cannot be used as an input type"):
        analyze(schema, query, variables)


# -- what the price reads of a value it did not coerce -----------------------------------


def test_a_list_sizes_the_slicing_argument_by_its_length(schema: Any) -> None:
    query = "query ($ids: [ID!]!) { nodes(ids: $ids) { id } }"
    assert analyze(schema, query, {"ids": [str(i) for i in range(300)]}).cost == 600
    assert analyze(schema, query, {"ids": [str(i) for i in range(500)]}).cost == 1_000
    assert analyze(schema, query, {"ids": "1"}).cost == 2  # a list of one


def test_a_list_inside_an_input_object_sizes_by_its_length(schema: Any) -> None:
    # Each input object used costs 1 (cost-model.md, "Arguments and input objects").
    query = "query ($f: Filter!) { filtered(filter: $f) { id } }"
    assert analyze(schema, query, {"f": {"ids": [str(i) for i in range(40)]}}).cost == 80 + 1
    paged = "query ($f: Filter!) { paged(filter: $f) { id } }"
    assert analyze(schema, paged, {"f": {"page": {"first": 7}}}).cost == 14 + 2
    assert analyze(schema, paged, {"f": {"page": {}}}).cost == 6 + 2  # the field's default


def test_a_size_the_pricing_cannot_read_is_refused(schema: Any) -> None:
    # Not coerced here, but never priced from nonsense: a size must be a number.
    paged = "query ($f: Filter!) { paged(filter: $f) { id } }"
    with pytest.raises(InvalidArgument, match="not a number"):
        analyze(schema, paged, {"f": {"page": {"first": "many"}}})
    with pytest.raises(InvalidArgument, match="must not be negative"):
        analyze(schema, paged, {"f": {"page": {"first": -4}}})


def test_a_long_list_is_not_kept_as_a_cache_key_nor_walked_to_find_out() -> None:
    Watched.iterated = []
    assert _freeze(Watched([1] * 1_000_000)) is _UNKEPT
    assert _freeze({"a": Watched([1] * 300)}) is _UNKEPT
    assert Watched.iterated == []
    assert _freeze([1, 2, 3]) == (list, ((int, 1), (int, 2), (int, 3)))


# -- scalars their type takes as they are --------------------------------------------------

_SCALAR_TYPES = ("String", "String!", "ID", "ID!", "Int", "Int!", "Boolean", "Boolean!", "Float",
                 "Counted")  # fmt: skip
_SCALAR_VALUES = ("", "3", 0, 3, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 10**30, 3.0, 3.5,
                  True, False, None, [3], {"a": 1})  # fmt: skip


@pytest.mark.parametrize(
    "sdl", [SDL, "type Query { hello: String }"], ids=["rich", "no Int nor ID"]
)
def test_a_scalar_variable_is_refused_exactly_when_graphql_core_refuses_it(sdl: str) -> None:
    # A value its type takes as it is (a str for a String, an int in 32 bits for an Int, ...)
    # is known valid without graphql-core's coercion: everything else is coerced as before,
    # so the verdict and the message stay graphql-core's (a schema without Int or ID refuses
    # those types whatever the value).
    schema = build(sdl)
    for type_name in _SCALAR_TYPES:
        document = parse(f"query ($v: {type_name}) {{ hello }}")
        definitions = document.definitions[0].variable_definitions  # type: ignore[attr-defined]
        for value in _SCALAR_VALUES:
            expected = get_variable_values(schema, definitions, {"v": value}, max_errors=10)
            if isinstance(expected, list):
                with pytest.raises(InvalidVariables) as raised:
                    analyze(schema, document, {"v": value})
                assert raised.value.message == " ".join(e.message for e in expected), (
                    type_name,
                    value,
                )
            else:
                assert analyze(schema, document, {"v": value}).cost == 0, (type_name, value)


def test_a_plain_scalar_is_checked_without_graphql_cores_coercion(
    schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    coerced: list[list[str]] = []

    def counting(schema: Any, definitions: Any, inputs: Any, max_errors: Any = None) -> Any:
        coerced.append([d.variable.name.value for d in definitions])
        return get_variable_values(schema, definitions, inputs, max_errors)

    monkeypatch.setattr(operation, "get_variable_values", counting)
    query = "query ($s: String!, $i: ID, $n: Int!, $b: Boolean, $c: Counted) { hello }"
    analyze(schema, query, {"s": "x", "i": "7", "n": 3, "b": True})
    assert coerced == [["c"]]  # only the one not sent (nullable: fine)
    analyze(schema, query, {"s": "x", "i": 7, "n": 3, "b": False, "c": 1})
    assert coerced == [["c"], ["c"]]  # a custom scalar is always coerced
    with pytest.raises(InvalidVariables, match=r"\$n"):
        analyze(schema, query, {"s": "x", "n": "3"})
    assert coerced[-1] == ["i", "n", "b", "c"]
