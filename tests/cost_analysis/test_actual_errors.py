"""actual_cost with the execution's errors: what an error erased is charged at its estimate.

Real graphql-core executions of a small schema with Python resolvers. Weights: every
object type weighs 1, so the interface ``Kind`` and the union ``Shape`` weigh 1 too;
scalars weigh 0; a mutation weighs 10. Every list is sized by ``first`` (the naming
convention) or its schema default.
"""

from __future__ import annotations

from typing import Any

import pytest
from graphql import GraphQLError, GraphQLSchema, graphql_sync

from quotaql.cost_analysis import actual_cost, analyze

from .conftest import build

SDL = """
type Query {
  items(first: Int = 10): [Item]
  boom: String!
  maybe: String
  things(first: Int = 10): [Thing]
  strict(first: Int = 10): [Thing!]
  wrapper: Wrapper
  grid(first: Int = 4): [[Thing!]]
  kinds(first: Int = 10): [Kind]
  shapes(first: Int = 10): [Shape]
  orders(first: Int): Connection
    @listSize(slicingArguments: ["first"], sizedFields: ["edges"])
  products(first: Int = 10): [Item!]!
}
type Mutation { run: Wrapper! }
type Item { id: ID label: String }
type Thing {
  id: ID
  name: String
  fail: String!
  rows(first: Int = 5): [Row]
}
type Row { v: Int }
type Wrapper {
  items(first: Int = 10): [Item]
  inner: Thing!
}
type Connection { edges: [Edge] total: Int }
type Edge { node: Thing }
interface Kind { label: String }
type Light implements Kind { label: String! }
type Heavy implements Kind { label: String! rows(first: Int = 5): [Row] }
union Shape = Light | Heavy
"""


class Failure(Exception):
    pass


def fail(*_args: Any, **_kwargs: Any) -> Any:
    raise Failure("no")


def rows(_info: Any, first: int = 5) -> list[dict[str, Any]]:
    return [{"v": 1}] * first


def thing(**fields: Any) -> dict[str, Any]:
    return {"id": "t", "name": "n", "fail": "ok", "rows": rows, **fields}


def many(value: Any) -> Any:
    """A resolver that returns ``first`` copies of ``value``."""
    return lambda _info, first=10: [value] * (first if first is not None else 10)


def kind(name: str, label: str) -> dict[str, Any]:
    """An item of Kind or Shape of type ``name``, whose label says ``label``."""
    return {"kind": name, "label": label, "rows": rows}


@pytest.fixture(scope="module")
def schema() -> GraphQLSchema:
    schema = build(SDL)
    for abstract in ("Kind", "Shape"):
        schema.type_map[abstract].resolve_type = lambda value, *_: value["kind"]
    return schema


ROOT: dict[str, Any] = {
    "items": many({"id": "i", "label": "l"}),
    "boom": fail,
    "maybe": fail,
    "things": many(thing()),
    "strict": many(thing()),
    "wrapper": lambda _info: {"items": many({"id": "i"}), "inner": thing(fail=fail)},
    "run": lambda _info: {"items": many({"id": "i"}), "inner": thing(fail=fail)},
}


def run(schema: GraphQLSchema, query: str, **root: Any) -> tuple[Any, Any]:
    result = graphql_sync(schema, query, root_value={**ROOT, **root})
    return result.data, result.errors


# -- errors that null data ------------------------------------------------------------


def test_a_non_null_root_field_that_raises_is_charged_the_whole_estimate(schema):
    query = "{ items(first: 100) { id } boom }"
    data, errors = run(schema, query)
    assert data is None
    assert [error.path for error in errors] == [["boom"]]
    # The 100 items resolved; the error in `boom` nulled the whole response.
    assert analyze(schema, query).cost == 100
    assert actual_cost(schema, query, data, errors=errors) == 100


def test_an_erased_mutation_costs_its_estimate_with_its_operation_weight(schema):
    query = "mutation { run { items(first: 3) { id } inner { fail } } }"
    data, errors = run(schema, query)
    assert data is None
    assert [error.path for error in errors] == [["run", "inner", "fail"]]
    # 10 + Wrapper 1 + 3 items + inner 1.
    assert analyze(schema, query).cost == 15
    assert actual_cost(schema, query, data, errors=errors) == 15


def test_data_none_without_errors_or_with_request_errors_costs_nothing(schema):
    query = "{ items(first: 100) { id } }"
    assert actual_cost(schema, query, None) == 0
    assert actual_cost(schema, query, None, errors=[]) == 0
    # A request error (validation, variables): nothing executed, no path.
    data, errors = run(schema, "{ items(first: 100) { id } nope }")
    assert data is None
    assert errors
    assert all(error.path is None for error in errors)
    assert actual_cost(schema, query, data, errors=errors) == 0
    assert actual_cost(schema, query, None, errors=[{"message": "bad", "path": None}]) == 0
    assert actual_cost(schema, query, None, errors=[{"message": "bad"}]) == 0


def test_errors_as_in_a_json_response(schema):
    # Ariadne's `{ products(first: null) { name } }`: the resolver fails on the null and
    # `products` is non-null; the response's errors are dicts.
    query = "{ products(first: null) { id } }"

    def products(_info: Any, first: int | None = 10) -> list[Any]:
        return [{"id": "p"}] * first

    data, errors = run(schema, query, products=products)
    assert data is None
    as_json = [error.formatted for error in errors]
    assert as_json[0]["path"] == ["products"]
    # first: null sizes the list at its upper bound (max_list_size 1000): nulled by the
    # error, it costs its estimate.
    assert analyze(schema, query).cost == 1000
    assert actual_cost(schema, query, data, errors=as_json) == 1000
    assert actual_cost(schema, query, data, errors=errors) == 1000


# -- errors in lists and objects ------------------------------------------------------


def test_a_nullable_field_that_raises_inside_a_list_item(schema):
    query = "{ things(first: 3) { id rows { v } } }"
    data, errors = run(schema, query, things=many(thing(rows=fail)))
    assert data == {"things": [{"id": "t", "rows": None}] * 3}
    assert len(errors) == 3
    # Without the errors each null `rows` costs its own weight (1); erased, its estimate (5).
    assert actual_cost(schema, query, data) == 3 * (1 + 1)
    assert actual_cost(schema, query, data, errors=errors) == 3 * (1 + 5)


def test_a_list_item_nulled_by_an_error_inside_it(schema):
    # `rows` resolves (5 rows), then `fail` raises: the item is null (items are nullable).
    query = "{ things(first: 3) { rows { v } fail } }"
    items = [thing(), thing(fail=fail), thing()]
    data, errors = run(schema, query, things=lambda _info, first: items)
    assert data["things"][1] is None
    assert [error.path for error in errors] == [["things", 1, "fail"]]
    # Two items of 1 + 5 rows, and the erased one at its estimate, 1 + 5, not 1.
    assert actual_cost(schema, query, data, errors=errors) == 3 * 6
    assert actual_cost(schema, query, data, errors=errors) == analyze(schema, query).cost


def test_an_error_in_a_non_null_item_nulls_the_list(schema):
    query = "{ strict(first: 4) { rows(first: 2) { v } fail } }"
    items = [thing(), thing(), thing(fail=fail), thing()]
    data, errors = run(schema, query, strict=lambda _info, first: items)
    assert data == {"strict": None}
    assert [error.path for error in errors] == [["strict", 2, "fail"]]
    assert actual_cost(schema, query, data, errors=errors) == 4 * (1 + 2)


def test_a_non_null_error_propagates_to_a_nullable_parent(schema):
    query = (
        "{ wrapper { items(first: 10) { id } inner { rows { v } fail } } items(first: 2) { id } }"
    )
    data, errors = run(schema, query)
    assert data == {"wrapper": None, "items": [{"id": "i"}] * 2}
    assert [error.path for error in errors] == [["wrapper", "inner", "fail"]]
    # wrapper at its estimate: 1 + 10 items + inner (1 + 5 rows); the 2 items as they came.
    assert actual_cost(schema, query, data) == 1 + 2
    assert actual_cost(schema, query, data, errors=errors) == (1 + 10 + 6) + 2


def test_an_error_elsewhere_leaves_the_rest_as_returned(schema):
    query = "{ things(first: 3) { rows { v } } maybe }"
    short = [thing(rows=lambda _info, first=5: [{"v": 1}])] * 2
    data, errors = run(schema, query, things=lambda _info, first: short)
    assert data["maybe"] is None
    assert [error.path for error in errors] == [["maybe"]]
    # Two things with one row each: no refund is lost for an error somewhere else.
    assert actual_cost(schema, query, data, errors=errors) == 2 * (1 + 1)


def test_an_erased_inner_list_charges_the_field_its_estimate(schema):
    query = "{ grid(first: 4) { rows(first: 1) { v } fail } }"
    grid = [[thing()], [thing(fail=fail), thing()]]
    data, errors = run(schema, query, grid=lambda _info, first: grid)
    assert data == {"grid": [[{"rows": [{"v": 1}], "fail": "ok"}], None]}
    assert [error.path for error in errors] == [["grid", 1, 0, "fail"]]
    # One size for the whole list: 4 × (1 + 1). Without the errors: one thing (2) and
    # the null inner list (1).
    assert analyze(schema, query).cost == 8
    assert actual_cost(schema, query, data) == 3
    assert actual_cost(schema, query, data, errors=errors) == 8


def test_an_erased_field_of_a_connection_is_sized_as_the_analyzer_sizes_it(schema):
    query = "{ orders(first: 3) { total edges { node { rows { v } fail } } } }"
    connection = {"total": 3, "edges": [{"node": thing(fail=fail)}] * 3}
    data, errors = run(schema, query, orders=lambda _info, first: connection)
    assert data == {"orders": {"total": 3, "edges": [{"node": None}] * 3}}
    # Connection 1 + 3 edges (first sizes `edges`) × (1 + node 1 + 5 rows).
    assert analyze(schema, query).cost == 1 + 3 * 7
    assert actual_cost(schema, query, data, errors=errors) == 1 + 3 * 7
    # An erased `edges` list is priced with the connection's `first`, not a default.
    data = {"orders": {"total": 3, "edges": None}}
    erased = [GraphQLError("x", path=["orders", "edges"])]
    assert actual_cost(schema, query, data, errors=erased) == 1 + 3 * 7


def test_what_skip_and_include_left_out_is_not_charged_when_erased(schema):
    query = """
    query ($rows: Boolean!) { wrapper { items(first: 10) @skip(if: $rows) { id }
                                        inner { rows @include(if: $rows) { v } fail } } }
    """
    for with_rows, expected in ((True, 1 + 1 + 5), (False, 1 + 10 + 1)):
        variables = {"rows": with_rows}
        result = graphql_sync(schema, query, root_value=ROOT, variable_values=variables)
        assert result.data == {"wrapper": None}
        assert analyze(schema, query, variables).cost == expected
        cost = actual_cost(schema, query, result.data, variables, errors=result.errors)
        assert cost == expected


def test_a_field_missing_below_an_error_path_costs_its_estimate(schema):
    # A JSON response from elsewhere may leave a key out where the error is.
    query = "{ things(first: 2) { id rows { v } } }"
    data = {"things": [{"id": "t"}, {"id": "t", "rows": [{"v": 1}]}]}
    errors = [{"message": "x", "path": ["things", 0, "rows"]}]
    assert actual_cost(schema, query, data) == 2 + 1
    assert actual_cost(schema, query, data, errors=errors) == (1 + 5) + (1 + 1)
    # Paths that do not lead to the data are ignored.
    odd = [{"path": ["things", "x"]}, {"path": ["nope"]}, {"path": [None]}, {"path": "things"}]
    assert actual_cost(schema, query, data, errors=odd) == 2 + 1


# -- __typename aliases ---------------------------------------------------------------

ATTACK = "{ kinds(first: 3) { __typename: label ... on Heavy { rows(first: 30) { v } } } }"


def test_an_alias_named_typename_does_not_pick_the_type_of_an_interface(schema):
    heavy = kind("Heavy", label="Light")
    data, errors = run(schema, ATTACK, kinds=many(heavy))
    assert errors is None
    assert data["kinds"][0]["__typename"] == "Light"  # the label, under the alias
    assert len(data["kinds"][0]["rows"]) == 30
    # 3 × (Kind 1 + Heavy's 30 rows): heavy items were returned, the estimate is charged.
    assert analyze(schema, ATTACK).cost == 93
    assert actual_cost(schema, ATTACK, data) == 93


def test_an_alias_named_typename_does_not_pick_the_type_of_a_union(schema):
    query = """
    { shapes(first: 3) {
        ... on Light { __typename: label }
        ... on Heavy { __typename: label rows(first: 30) { v } }
    } }
    """
    data, errors = run(schema, query, shapes=many(kind("Heavy", label="Light")))
    assert errors is None
    assert actual_cost(schema, query, data) == 93


def test_an_alias_of_typename_for_one_type_names_no_type_if_another_field_shares_it(schema):
    # Valid GraphQL: `t` is __typename on a Light and the label (String!) on a Heavy.
    query = """
    { shapes(first: 3) {
        ... on Light { t: __typename }
        ... on Heavy { t: label rows(first: 30) { v } }
    } }
    """
    data, errors = run(schema, query, shapes=many(kind("Heavy", label="Light")))
    assert errors is None
    assert data["shapes"][0]["t"] == "Light"
    assert actual_cost(schema, query, data) == 93


def test_a_real_typename_under_an_alias_still_picks_the_type(schema):
    # `t` is the real __typename; `__typename` is an alias of the label, and lies.
    query = """
    { kinds(first: 4) { t: __typename __typename: label ... on Heavy { rows(first: 30) { v } } } }
    """
    items = [
        kind("Heavy", "Light"),
        kind("Light", "Heavy"),
        kind("Light", "Heavy"),
        kind("Heavy", "x"),
    ]
    data, errors = run(schema, query, kinds=lambda _info, first: items)
    assert errors is None
    assert [item["t"] for item in data["kinds"]] == ["Heavy", "Light", "Light", "Heavy"]
    # Two Heavy items (1 + 30) and two Light ones (1).
    assert actual_cost(schema, query, data) == 2 * 31 + 2
    # In a fragment too.
    query = """
    { shapes(first: 2) { ...K } }
    fragment K on Shape { kind: __typename ... on Heavy { rows(first: 30) { v } } }
    """
    items = [kind("Light", "l"), kind("Heavy", "h")]
    data, errors = run(schema, query, shapes=lambda _info, first: items)
    assert errors is None
    assert actual_cost(schema, query, data) == 1 + 31
    # The type is the one __typename names, whatever the other keys hold.
    data["shapes"][1]["kind"] = "Light"
    assert actual_cost(schema, query, data) == 1 + 1


def test_an_alias_of_typename_elsewhere_in_the_document_names_no_type_here(schema):
    # `kind` is the real __typename of the items, and the label of the shapes.
    query = """
    { items(first: 1) { kind: __typename }
      shapes(first: 3) { ... on Light { kind: label } ... on Heavy { kind: label rows(first: 30) { v } } }
    }
    """
    data, errors = run(schema, query, shapes=many(kind("Heavy", label="Light")))
    assert errors is None
    assert data["items"] == [{"kind": "Item"}]
    assert actual_cost(schema, query, data) == 1 + 93
