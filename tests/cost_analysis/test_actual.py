"""actual_cost: the cost of an operation that ran, priced from the data it returned.

Weights in the shared schemas (conftest.py): an object type weighs 1, Product 2, Vendor 4,
so the union SearchResult and the interface Node weigh 4 (their largest member); scalars 0.
``Query.search(term:)`` costs 3, ``OrderConnection.totalCount`` 2, ``cancelOrder`` 5, a
mutation 10. ``users`` is sized by ``first`` (default 10), ``User.friends`` by ``first``
(default 5, the naming convention).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from graphql import (
    DocumentNode,
    FieldNode,
    GraphQLList,
    GraphQLNonNull,
    GraphQLSchema,
    NameNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    build_schema,
    execute_sync,
    get_named_type,
    graphql_sync,
    is_leaf_type,
    parse,
    value_from_ast_untyped,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quotaql.cost_analysis import CostModel, actual_cost, analyze
from quotaql.cost_analysis.analyzer import MAX_NESTING
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.errors import (
    FragmentCycle,
    InvalidVariables,
    OperationResolutionError,
    QueryTooDeep,
)

from .conftest import build
from .test_properties import (
    ANY,
    CONCRETE,
    Inline,
    Operation,
    SelSet,
    Spread,
    map_selsets,
    map_sizes,
    selsets,
    shared_fragments,
    slicing_of,
)

# -- worked examples ---------------------------------------------------------------------

USERS = "{ users(first: 3) { id name } }"


def user(**fields: Any) -> dict[str, Any]:
    return {"id": "1", "name": "n", **fields}


def test_a_flat_list_costs_one_per_returned_user(worked_schema):
    assert analyze(worked_schema, USERS).cost == 3  # 3 × (User 1 + id 0 + name 0)
    assert actual_cost(worked_schema, USERS, {"users": [user(), user(), user()]}) == 3
    assert actual_cost(worked_schema, USERS, {"users": [user(), user()]}) == 2  # 2 × 1
    assert actual_cost(worked_schema, USERS, {"users": []}) == 0  # no user resolved


def test_nulls_cost_their_own_weight(worked_schema):
    # A null list: its resolver ran (own 1), nothing below it did.
    assert actual_cost(worked_schema, USERS, {"users": None}) == 1
    # A null item costs the item's own weight: 1 (null) + 1 (user) + 1 (null).
    assert actual_cost(worked_schema, USERS, {"users": [None, user(), None]}) == 3


def test_a_field_missing_from_the_data_costs_nothing(worked_schema):
    assert actual_cost(worked_schema, USERS, {}) == 0
    query = "{ users(first: 2) { id friends { id } } }"
    # The first user has no `friends` key (not reached): 1; the second has 2 friends: 1 + 2.
    data = {"users": [user(), user(friends=[user(), user()])]}
    assert actual_cost(worked_schema, query, data) == 1 + (1 + 2)


def test_data_none_means_nothing_ran(worked_schema, shop_schema):
    assert actual_cost(worked_schema, USERS, None) == 0
    # Even a mutation: no resolver ran, so not even the operation weight is charged.
    assert actual_cost(shop_schema, 'mutation { cancelOrder(id: "1") }', None) == 0


def test_nested_lists(worked_schema):
    query = "{ users(first: 3) { friends { id } } }"
    assert analyze(worked_schema, query).cost == 18  # 3 × (1 + 5 × 1)
    full = {"users": [user(friends=[user()] * 5) for _ in range(3)]}
    assert actual_cost(worked_schema, query, full) == 18
    # (1 + 2 friends) + (1 + no friends) + (1 + a null friends list, own 1) = 3 + 1 + 2.
    short = {"users": [user(friends=[user(), user()]), user(friends=[]), user(friends=None)]}
    assert actual_cost(worked_schema, query, short) == 6


def test_fragments_and_aliases(worked_schema):
    query = """
    { a: users(first: 2) { ...F }  b: users(first: 1) { id ...F } }
    fragment F on User { name friends(first: 2) { id } }
    """
    # a: 2 × (1 + F), b: 1 × (1 + F), F = friends 2 × 1 = 2: 6 + 3.
    assert analyze(worked_schema, query).cost == 9
    two = user(friends=[user(), user()])
    assert actual_cost(worked_schema, query, {"a": [two, two], "b": [two]}) == 9
    # a: one user with one friend (1 + 1); b: none.
    assert actual_cost(worked_schema, query, {"a": [user(friends=[user()])], "b": []}) == 2


def test_a_fragment_spread_twice_on_the_same_object_counts_once(worked_schema):
    # CollectFields expands a fragment at most once per selection set (visitedFragments):
    # `{ ...F ...F }` runs F's fields once, as in the analyzer.
    query = "{ users(first: 1) { ...F ...F } } fragment F on User { friends(first: 2) { id } }"
    once = "{ users(first: 1) { ...F } } fragment F on User { friends(first: 2) { id } }"
    assert analyze(worked_schema, query).cost == analyze(worked_schema, once).cost == 1 + 2
    data = {"users": [user(friends=[user(), user()])]}
    assert actual_cost(worked_schema, query, data) == actual_cost(worked_schema, once, data) == 3
    # Two different fragments selecting different fields both count.
    both = (
        "{ users(first: 1) { ...F ...G } } fragment F on User { friends(first: 2) { id } }"
        " fragment G on User { more: friends(first: 3) { id } }"
    )
    assert analyze(worked_schema, both).cost == 1 + 2 + 3
    data = {"users": [user(friends=[user(), user()], more=[user()] * 3)]}
    assert actual_cost(worked_schema, both, data) == 6


def test_fields_merged_under_one_response_key_count_once(worked_schema):
    # The executor runs both `users` fields as one (CollectFields): one resolver call, its
    # selections the union of both: 2 × (User 1 + id 0 + name 0), not 2 + 2.
    query = "{ users(first: 2) { id } users(first: 2) { name } }"
    assert analyze(worked_schema, query).cost == 2
    assert actual_cost(worked_schema, query, {"users": [user(), user()]}) == 2
    # Under two response keys they are two fields: 2 + 2.
    aliased = "{ users(first: 2) { id } other: users(first: 2) { name } }"
    assert analyze(worked_schema, aliased).cost == 4
    data = {"users": [user(), user()], "other": [user(), user()]}
    assert actual_cost(worked_schema, aliased, data) == 4
    # Merged children merge too: the friends of both copies are one field.
    nested = "{ users(first: 2) { friends(first: 3) { id } } users(first: 2) { friends(first: 3) { name } } }"
    assert analyze(worked_schema, nested).cost == 2 * (1 + 3)
    data = {"users": [user(friends=[user()] * 3)] * 2}
    assert actual_cost(worked_schema, nested, data) == 8


SEARCH = """
{ search(term: "x", limit: 2) {
    __typename
    ... on Product { reviews(first: 1) { id } }
    ... on Vendor { name }
} }
"""


def test_a_union_with_typename(shop_schema):
    # term 3 + 2 × (SearchResult 4 + the dearest member's selections: Product's reviews 1).
    assert analyze(shop_schema, SEARCH).cost == 3 + 2 * (4 + 1)
    products = [{"__typename": "Product", "reviews": [{"id": "r"}]}] * 2
    assert actual_cost(shop_schema, SEARCH, {"search": products}) == 13
    # A product (4 + 1 review) and a vendor (4 + name 0).
    mixed = [products[0], {"__typename": "Vendor", "name": "v"}]
    assert actual_cost(shop_schema, SEARCH, {"search": mixed}) == 3 + 5 + 4
    # A vendor's data cannot make Product's fragment count, whatever keys it holds.
    odd = [{"__typename": "Vendor", "reviews": [{"id": "r"}] * 50}]
    assert actual_cost(shop_schema, SEARCH, {"search": odd}) == 3 + 4


def test_a_union_without_typename_costs_the_dearest_reading_of_each_item(shop_schema):
    query = SEARCH.replace("__typename", "")
    items = [{"reviews": [{"id": "r"}]}, {"name": "v"}]
    # Item 1 read as a Product: 4 + 1; item 2 costs 4 whichever type it is.
    assert actual_cost(shop_schema, query, {"search": items}) == 3 + 5 + 4
    # A type name that is not a member is no type name: the item is read every way.
    items = [{"__typename": "Order", "reviews": [{"id": "r"}]}, {"__typename": 7}]
    assert actual_cost(shop_schema, query, {"search": items}) == 3 + 5 + 4


NODE = """
{ node(id: "1") {
    id
    __typename
    ... on Product { reviews(first: 2) { id } }
    ... on Vendor { products(first: 3) { id } }
} }
"""


def test_an_interface_at_its_dearest_type_costs_the_estimate(shop_schema):
    # Node 4 + max(Product: 2 reviews × 1, Vendor: 3 products × Product 2).
    assert analyze(shop_schema, NODE).cost == 4 + 6
    vendor = {"__typename": "Vendor", "id": "1", "products": [{"id": "p"}] * 3}
    assert actual_cost(shop_schema, NODE, {"node": vendor}) == 10
    product = {"__typename": "Product", "id": "1", "reviews": [{"id": "r"}] * 2}
    assert actual_cost(shop_schema, NODE, {"node": product}) == 4 + 2
    # Both fragments' keys and no type name: the dearest reading, never more.
    both = {"id": "1", "reviews": [{"id": "r"}] * 2, "products": [{"id": "p"}] * 3}
    assert actual_cost(shop_schema, NODE, {"node": both}) == 10
    assert actual_cost(shop_schema, NODE, {"node": None}) == 4  # resolved to nothing


def test_an_aliased_typename_names_the_type(shop_schema):
    query = NODE.replace("__typename", "kind: __typename", 1)
    both = {"kind": "Product", "reviews": [{"id": "r"}] * 2, "products": [{"id": "p"}] * 3}
    assert actual_cost(shop_schema, query, {"node": both}) == 4 + 2


def test_a_typename_key_the_document_does_not_select_names_no_type(shop_schema):
    # Only a __typename field of the document can have put that key in the data.
    query = NODE.replace("__typename", "", 1)
    both = {"__typename": "Product", "reviews": [{"id": "r"}] * 2, "products": [{"id": "p"}] * 3}
    assert actual_cost(shop_schema, query, {"node": both}) == 4 + 6  # read as a Vendor


def test_a_fragment_on_an_interface_inside_a_union(shop_schema):
    query = """
    { search(term: "x", limit: 3) { ... on Node { ...N } } }
    fragment N on Node { __typename id ... on Customer { orders(first: 2) { id } } }
    """
    # 3 + 3 × (4 + Customer's 2 orders × 1).
    assert analyze(shop_schema, query).cost == 3 + 3 * (4 + 2)
    customer = {"__typename": "Customer", "id": "c", "orders": [{"id": "o"}] * 2}
    product = {"__typename": "Product", "id": "p", "orders": [{"id": "o"}] * 2}
    # The product's `orders` key is not selected for a Product: 4 alone.
    assert actual_cost(shop_schema, query, {"search": [customer, product]}) == 3 + 6 + 4


SKIP = """
query ($withFriends: Boolean!, $n: Int) {
  users(first: $n) { id friends @include(if: $withFriends) { id } }
}
"""


def test_skip_and_include_with_variables(worked_schema):
    without = {"withFriends": False, "n": 2}
    assert analyze(worked_schema, SKIP, without).cost == 2  # 2 × 1
    data = {"users": [user(), user()]}
    assert actual_cost(worked_schema, SKIP, data, without) == 2
    with_ = {"withFriends": True, "n": 2}
    assert analyze(worked_schema, SKIP, with_).cost == 12  # 2 × (1 + 5)
    full = {"users": [user(friends=[user()] * 5)] * 2}
    assert actual_cost(worked_schema, SKIP, full, with_) == 12
    # Skipped: a `friends` key in the data (it cannot be there) is not read.
    assert actual_cost(worked_schema, SKIP, full, without) == 2


def test_skip_on_a_fragment_spread(worked_schema):
    query = """
    query ($s: Boolean = true) { users(first: 1) { ...F @skip(if: $s) } }
    fragment F on User { friends { id } }
    """
    data = {"users": [user(friends=[user()] * 5)]}
    assert actual_cost(worked_schema, query, data) == 1
    assert actual_cost(worked_schema, query, data, {"s": False}) == 1 + 5


def test_variables_are_checked_like_the_analyzer(worked_schema):
    with pytest.raises(InvalidVariables):
        actual_cost(worked_schema, SKIP, {"users": []}, {"withFriends": "yes"})
    with pytest.raises(OperationResolutionError):
        actual_cost(worked_schema, "query A { users { id } }", {}, operation_name="B")


MUTATION = """
mutation { placeOrder(productId: "1", quantity: 2) {
  id lines(first: 2) { quantity product { name } }
} }
"""


def test_a_mutation_pays_its_operation_weight(shop_schema):
    # 10 + Order 1 × (1 + 2 lines × (OrderLine 1 + Product 2)).
    assert analyze(shop_schema, MUTATION).cost == 17
    line = {"quantity": 1, "product": {"name": "p"}}
    assert (
        actual_cost(shop_schema, MUTATION, {"placeOrder": {"id": "o", "lines": [line] * 2}}) == 17
    )
    assert actual_cost(shop_schema, MUTATION, {"placeOrder": {"id": "o", "lines": []}}) == 11
    assert actual_cost(shop_schema, MUTATION, {"placeOrder": None}) == 11  # 10 + Order 1
    assert actual_cost(shop_schema, MUTATION, {}) == 10  # it ran, no field answered
    cancel = 'mutation { cancelOrder(id: "1") }'
    assert actual_cost(shop_schema, cancel, {"cancelOrder": True}) == 10 + 5
    assert actual_cost(shop_schema, cancel, {"cancelOrder": None}) == 10 + 5


def test_the_operation_weight_comes_from_the_model(shop_schema):
    model = CostModel(operation_weights={"mutation": 1, "query": 2})
    assert actual_cost(shop_schema, 'mutation { cancelOrder(id: "1") }', {}, model=model) == 1
    assert actual_cost(shop_schema, "{ tags }", {"tags": []}, model=model) == 2


def test_argument_weights_count_once_per_field(shop_schema):
    query = '{ search(term: "x") { ... on Product { name } } }'
    assert analyze(shop_schema, query).cost == 3 + 20 * 4  # limit's default 20
    assert actual_cost(shop_schema, query, {"search": []}) == 3  # the argument still counts
    assert actual_cost(shop_schema, query, {"search": None}) == 3 + 4
    assert actual_cost(shop_schema, query, {"search": [{"name": "a"}] * 2}) == 3 + 2 * 4


def test_argument_weights_from_the_model(worked_schema):
    model = CostModel(weights={"User.friends(first:)": 2})
    query = "{ users(first: 2) { friends(first: 1) { id } } }"
    # 2 × (1 + (2 + 1 × 1)): the argument costs on every user whose friends were asked.
    assert analyze(worked_schema, query, model=model).cost == 8
    data = {"users": [user(friends=[user()])] * 2}
    assert actual_cost(worked_schema, query, data, model=model) == 8
    assert actual_cost(worked_schema, query, {"users": [user(friends=[])] * 2}, model=model) == 6


def test_a_connection_counts_its_real_edges(shop_schema):
    query = """
    { orders(first: 3) { edges { cursor node { id } } totalCount pageInfo { hasNextPage } } }
    """
    # 1 × (connection 1 + 3 edges × (1 + node 1) + totalCount 2 + pageInfo 1).
    assert analyze(shop_schema, query).cost == 10
    edge = {"cursor": "c", "node": {"id": "o"}}
    connection = {"edges": [edge] * 3, "totalCount": 3, "pageInfo": {"hasNextPage": False}}
    assert actual_cost(shop_schema, query, {"orders": connection}) == 10
    one = {**connection, "edges": [edge]}
    assert actual_cost(shop_schema, query, {"orders": one}) == 1 + 2 + 2 + 1
    # The real lengths count, even past the slicing argument (a misbehaving resolver).
    many = {**connection, "edges": [edge] * 7}
    assert actual_cost(shop_schema, query, {"orders": many}) == 1 + 14 + 2 + 1


def test_introspection_is_counted_or_free_as_in_the_analyzer(worked_schema):
    query = "{ __schema { types { name fields { name } } } }"
    data = graphql_sync(worked_schema, query).data
    free = CostModel(introspection="free")
    assert analyze(worked_schema, query, model=free).cost == 0
    assert actual_cost(worked_schema, query, data, model=free) == 0
    weighed = CostModel(weights={"__Schema": 1, "__Type": 1, "__Field": 1})
    # Every object 1, the lists as long as the schema makes them: __schema 1 + every
    # type 1 + every field 1.
    types = data["__schema"]["types"]
    fields = sum(len(t["fields"]) for t in types if t["fields"] is not None)
    assert analyze(worked_schema, query, model=weighed).cost == pytest.approx(
        1 + len(types) + fields
    )
    # 1 + every returned type (1) and its fields (1 each; a null `fields` list, as on a
    # scalar, is a resolver that ran: 1).
    expected = 1 + sum(1 + (len(t["fields"]) if t["fields"] is not None else 1) for t in types)
    assert actual_cost(worked_schema, query, data, model=weighed) == expected
    # By default: __Schema 5, each other introspection object 0.015.
    assert actual_cost(worked_schema, query, data) == pytest.approx(5 + 0.015 * (expected - 1))


def test_typename_is_always_free(worked_schema):
    query = "{ __typename users(first: 1) { __typename id } }"
    data = graphql_sync(worked_schema, query, root_value={"users": [{"id": "1"}]}).data
    assert data == {"__typename": "Query", "users": [{"__typename": "User", "id": "1"}]}
    for introspection in ("free", "counted"):
        model = CostModel(introspection=introspection)
        assert actual_cost(worked_schema, query, data, model=model) == 1


def test_a_list_of_lists_counts_every_inner_item():
    schema = build("type Query { grid: [[Cell]] } type Cell { v: Int }")
    query = "{ grid { v } }"
    assert analyze(schema, query).cost == 10  # one default size for the whole list
    cell = {"v": 1}
    # 3 cells, a null inner list (1) and an empty one (0).
    assert actual_cost(schema, query, {"grid": [[cell, cell], [cell], None, []]}) == 4
    assert actual_cost(schema, query, {"grid": [[cell] * 5] * 2}) == 10
    # Lists nested deeper than the type are items, not objects: own only.
    assert actual_cost(schema, query, {"grid": [[[cell, cell]]]}) == 1
    # A cell where a list of cells is expected is one item.
    assert actual_cost(schema, query, {"grid": [cell, [cell]]}) == 2


def test_wrong_shapes_cost_what_can_be_read(worked_schema, shop_schema):
    query = "{ users { id friends { id } } }"
    # An object where a list is expected is one item: the user (1) and its 2 friends.
    assert actual_cost(worked_schema, query, {"users": user(friends=[{}, {}])}) == 3
    # Not an object where one is expected: own only.
    assert actual_cost(worked_schema, query, {"users": "oops"}) == 1
    assert actual_cost(worked_schema, query, {"users": [1, "x", [user()]]}) == 3
    product = '{ product(id: "1") { vendor { name } reviews { id } } }'
    # A list where the object is expected: Product's own 2 and nothing below.
    assert actual_cost(shop_schema, product, {"product": [{"vendor": {"name": "v"}}]}) == 2
    # A vendor that is not an object (4), reviews that are one odd item (1).
    data = {"product": {"vendor": 7, "reviews": "r"}}
    assert actual_cost(shop_schema, product, data) == 2 + 4 + 1
    # Data that is not an object: the operation ran, none of its fields answered.
    assert actual_cost(worked_schema, query, [user()]) == 0
    assert actual_cost(shop_schema, 'mutation { cancelOrder(id: "1") }', "x") == 10


def test_keys_the_document_does_not_ask_for_are_ignored(worked_schema):
    deep: dict[str, Any] = {}
    for _ in range(10_000):  # deeper than any document: never walked
        deep = {"friends": [deep]}
    data = {"users": [user(extra=[1] * 1000, friends=[deep])], "other": deep}
    assert actual_cost(worked_schema, USERS, data) == 1


def test_a_negative_weight_clamps_the_fields_own_part_not_its_selections(shop_schema):
    # discounted weighs -2 per product: its own part max(0, 2 × -2) clamps at 0.
    query = "{ discounted(limit: 2) { name } tags }"
    assert analyze(shop_schema, query).cost == 0
    assert actual_cost(shop_schema, query, {"discounted": [{"name": "a"}] * 2, "tags": []}) == 0
    # The clamp never reaches the selections below: max(0, 2 × -2) + 2 × (2 related × 2),
    # not the whole subtree's 2 × (-2 + 2 × 2) = 4.
    query = "{ discounted(limit: 2) { related(limit: 2) { id } } }"
    assert analyze(shop_schema, query).cost == 0 + 2 * (2 * 2)
    item = {"related": [{"id": "p"}] * 2}
    assert actual_cost(shop_schema, query, {"discounted": [item] * 2}) == 8
    # Returned items: max(0, 1 × -2) + 1 related × 2.
    one = {"related": [{"id": "p"}]}
    assert actual_cost(shop_schema, query, {"discounted": [one]}) == 2


def test_a_hundred_thousand_items(worked_schema):
    query = "{ users(first: 100000) { id friends(first: 1) { id } } }"
    items = [user(friends=[user()]) for _ in range(100_000)]
    assert analyze(worked_schema, query).cost == 200_000  # 100,000 × (1 + 1 × 1)
    assert actual_cost(worked_schema, query, {"users": items}) == 200_000
    del items[::2]
    assert actual_cost(worked_schema, query, {"users": items}) == 100_000


def test_a_hundred_thousand_scalars(shop_schema):
    tags = ["t"] * 100_000
    assert actual_cost(shop_schema, "{ tags }", {"tags": tags}) == 0  # String weighs 0
    model = CostModel(weights={"Query.tags": 1})
    assert actual_cost(shop_schema, "{ tags }", {"tags": tags}, model=model) == 100_000


# -- hostile documents -------------------------------------------------------------------


def _field(name: str, selections: tuple[Any, ...] | None = None) -> FieldNode:
    return FieldNode(
        name=NameNode(value=name),
        selection_set=SelectionSetNode(selections=selections) if selections else None,
    )


def nested_friends(levels: int) -> DocumentNode:
    """``{ users { friends { ... friends { id } } } }`` with ``levels`` friends, unparsed."""
    inner: tuple[Any, ...] = (_field("id"),)
    for _ in range(levels):
        inner = (_field("friends", inner),)
    operation = OperationDefinitionNode(
        operation=OperationType.QUERY,
        selection_set=SelectionSetNode(selections=(_field("users", inner),)),
    )
    return DocumentNode(definitions=(operation,))


def friends_chain(levels: int) -> dict[str, Any]:
    """One user, with one friend, with one friend... ``levels`` deep."""
    deepest: dict[str, Any] = {"id": "1"}
    for _ in range(levels):
        deepest = {"friends": [deepest]}
    return {"users": [deepest]}


def test_a_document_at_the_analyzers_nesting_limit(worked_schema):
    levels = MAX_NESTING - 2  # the deepest selection set is at level MAX_NESTING
    document = nested_friends(levels)
    analyze(worked_schema, document)  # accepted
    # One object per level: the user and its chain of friends.
    assert actual_cost(worked_schema, document, friends_chain(levels)) == 1 + levels


def test_a_document_past_the_nesting_limit_is_refused_whatever_the_data(worked_schema):
    # The plan is compiled from the document, once, before any data is read: a document
    # nested past MAX_NESTING is refused as analyze refuses it.
    document = nested_friends(10_000)
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, document)
    assert (raised.value.value, raised.value.limit) == (MAX_NESTING + 1, MAX_NESTING)
    for data in (friends_chain(10_000), friends_chain(3), {"users": []}):
        with pytest.raises(QueryTooDeep) as raised:
            actual_cost(worked_schema, document, data)
        assert (raised.value.value, raised.value.limit) == (MAX_NESTING + 1, MAX_NESTING)


def test_fragment_cycles_are_refused_whatever_the_data(worked_schema):
    data = {"users": [{"friends": [{"id": "1"}]}]}
    with pytest.raises(FragmentCycle, match="Fragment 'A' spreads itself"):
        actual_cost(worked_schema, "{ users { ...A } } fragment A on User { ...A }", data)
    through_a_field = (
        "{ users { ...A } } fragment A on User { friends { ...B } } fragment B on User { ...A }"
    )
    with pytest.raises(FragmentCycle):
        actual_cost(worked_schema, through_a_field, data)
    # Data with nothing below the spread changes nothing: the plan has the cycle.
    with pytest.raises(FragmentCycle):
        actual_cost(worked_schema, through_a_field, {"users": []})
    with pytest.raises(FragmentCycle):
        actual_cost(worked_schema, through_a_field, {})


def test_a_chain_of_five_thousand_fragments_is_refused_without_recursion_error(worked_schema):
    fragments = [f"fragment F{i} on User {{ ...F{i + 1} }}" for i in range(5_000)]
    document = parse(
        "{ users { ...F0 } }\n" + "\n".join([*fragments, "fragment F5000 on User { id }"])
    )
    with pytest.raises(QueryTooDeep):
        actual_cost(worked_schema, document, {"users": [user()]})


def test_a_same_level_fragment_bomb_collapses_as_collect_fields(worked_schema):
    # F1 spreads F2 twice, ... F29 spreads F30 twice: CollectFields expands each fragment
    # once per selection set, so the 2^29 copies of `friends` are one field.
    fragments = [f"fragment F{i} on User {{ ...F{i + 1} ...F{i + 1} }}" for i in range(1, 30)]
    fragments.append("fragment F30 on User { friends { id } }")
    query = "{ users(first: 1) { ...F1 } }\n" + "\n".join(fragments)
    expected = 1 + 5  # the user, and its 5 friends (default first: 5)
    assert analyze(worked_schema, query).cost == expected
    assert actual_cost(worked_schema, query, {"users": [user(friends=[user()] * 5)]}) == expected


def test_an_aliased_fragment_bomb_is_priced_at_its_true_cost_in_linear_time(worked_schema):
    # Each level selects the next under two aliases: 2^levels distinct fields, exponential
    # in the text; the plan shares the fragment's node, so it is priced in linear time.
    def bomb(levels: int) -> str:
        fragments = [
            f"fragment F{i} on User {{ a: friends(first: 1) {{ ...F{i + 1} }}"
            f" b: friends(first: 1) {{ ...F{i + 1} }} }}"
            for i in range(1, levels)
        ]
        fragments.append(f"fragment F{levels} on User {{ id }}")
        return "{ users(first: 1) { ...F1 } }\n" + "\n".join(fragments)

    # c_levels = 0, c_i = 2 × (1 + c_{i+1}): c_1 = 2^levels - 2; plus the user.
    assert analyze(worked_schema, bomb(40)).cost == 1 + 2**40 - 2
    # The actual cost walks the data: a full tree of 2^12 objects (shared dicts).
    levels = 12
    leaf: dict[str, Any] = {"id": "1"}
    for _ in range(levels - 1):
        leaf = {"a": [leaf], "b": [leaf]}
    expected = 1 + 2**levels - 2
    assert analyze(worked_schema, bomb(levels)).cost == expected
    assert actual_cost(worked_schema, bomb(levels), {"users": [leaf]}) == expected
    # Every `b` list empty: only the `a` chain ran, one friend per level.
    chain: dict[str, Any] = {"id": "1"}
    for _ in range(levels - 1):
        chain = {"a": [chain], "b": []}
    assert actual_cost(worked_schema, bomb(levels), {"users": [chain]}) == 1 + (levels - 1)


def test_nested_interfaces_without_typename_are_read_in_linear_time():
    # Each level may be an A, a B or a C, and each reading selects a different field:
    # trying every type at every level would take 3^40 steps.
    schema = build(
        """
        type Query { root: I }
        interface I { id: ID next: I }
        type A implements I { id: ID next: I a: Int }
        type B implements I { id: ID next: I b: Int @cost(weight: "1") }
        type C implements I { id: ID next: I }
        """
    )
    levels = 40
    body = "id"
    for _ in range(levels):
        body = f"id ... on A {{ a }} ... on B {{ b }} next {{ {body} }}"
    query = f"{{ root {{ {body} }} }}"
    data: dict[str, Any] = {"id": "x", "b": 1}
    for _ in range(levels):
        data = {"id": "x", "b": 1, "next": data}
    # Each of the 41 objects: I's weight 1, plus 1 for `b` read as a B (but the deepest
    # object, which selects `id` alone).
    assert actual_cost(schema, query, {"root": data}) == 40 * 2 + 1
    assert analyze(schema, query).cost == 40 * 2 + 1


# -- real executions ---------------------------------------------------------------------


def test_a_graphql_core_execution(worked_schema):
    def users(_info: Any, first: int = 10) -> list[dict[str, Any]]:
        return [
            {"id": str(i), "name": f"u{i}", "friends": lambda _info, first=5: [{"id": "f"}] * 2}
            for i in range(min(first, 4))
        ]

    query = "{ users(first: 6) { id friends { id } } }"
    result = graphql_sync(worked_schema, query, root_value={"users": users})
    assert result.errors is None
    # 6 × (1 + 5) estimated; 4 users with 2 friends each came back: 4 × (1 + 2).
    assert analyze(worked_schema, query).cost == 36
    assert actual_cost(worked_schema, query, result.data) == 12


def test_a_graphql_core_execution_with_an_error_in_a_list(worked_schema):
    def friends(_info: Any, first: int = 5) -> list[Any]:
        raise ValueError("friends are private")

    root = {"users": lambda _info, first=10: [{"id": "1", "friends": friends}] * 2}
    query = "{ users(first: 2) { id friends { id } } }"
    result = graphql_sync(worked_schema, query, root_value=root)
    assert result.errors is not None
    assert result.data == {"users": [{"id": "1", "friends": None}] * 2}
    # Two users (1 each) whose friends resolvers ran and failed (1 each).
    assert actual_cost(worked_schema, query, result.data) == 4


def test_a_graphql_core_execution_of_a_union(shop_schema):
    rows = [
        {"__typename": "Product", "name": "p", "reviews": [{"id": "r"}]},
        {"__typename": "Vendor", "name": "v", "products": []},
        {"__typename": "Customer", "name": "c"},
    ]
    query = """
    { search(term: "x", limit: 3) {
        ... on Product { reviews { id } }
        ... on Vendor { products(first: 2) { name } }
        ... on Customer { name }
    } }
    """
    root = {"search": lambda _info, term, limit=20: rows}
    result = graphql_sync(shop_schema, query, root_value=root)
    assert result.errors is None
    assert "__typename" not in result.data["search"][0]  # not selected, not returned
    # 3 + 3 × (4 + max(Product: 10 reviews × 1, Vendor: 2 products × 2, Customer: 0)).
    assert analyze(shop_schema, query).cost == 3 + 3 * (4 + 10)
    # Product: 4 + 1 review. Vendor: 4 + no products, and read as a Product it has no
    # reviews either. Customer: 4.
    assert actual_cost(shop_schema, query, result.data) == 3 + 5 + 4 + 4


# -- properties: the actual cost against the estimate -------------------------------------

SIZED = "__sized"  # the key under which a connection value keeps its sizedFields' size
_LEAVES = {"ID": "1", "String": "x", "Int": 1, "Float": 1.5, "Boolean": True}
# Explicit sizes in generated operations are clamped, and operations estimated above this
# are left out: the data of each example is built and executed in full.
MAX_SIZE = 4
MAX_ESTIMATE = 3_000


class Runner:
    """Executes an operation with graphql-core and lists as long as the analyzer assumes.

    With ``rng`` every list is cut to a random length up to that size and nullable values
    are sometimes null; without, every list has that size and nothing is null.
    ``conflict`` is set when fields merged under one response key assume different sizes
    (the shortest is returned, so only the inequality can hold).
    """

    def __init__(self, schema: GraphQLSchema, rng: random.Random | None = None) -> None:
        self.schema = schema
        self.rng = rng
        self.conflict = False

    def size(self, parent: str, name: str, node: FieldNode) -> float:
        definition = self.schema.type_map[parent].fields[name]
        slicing = slicing_of(parent, name, definition, self.schema)
        given = {
            argument.name.value: value_from_ast_untyped(argument.value)
            for argument in node.arguments or ()
        }
        # An explicit null bounds nothing: max_list_size, not the schema default.
        return slicing.size(given)

    def sizes(self, source: Any, info: Any) -> int:
        if isinstance(source, dict) and SIZED in source and info.field_name in source[SIZED][0]:
            return int(source[SIZED][1])
        found = {self.size(info.parent_type.name, info.field_name, n) for n in info.field_nodes}
        self.conflict |= len(found) > 1
        return int(min(found))

    def null(self, type_: Any) -> bool:
        return (
            self.rng is not None
            and not isinstance(type_, GraphQLNonNull)
            and self.rng.random() < 0.2
        )

    def value(self, named: Any, source: Any, info: Any) -> Any:
        if is_leaf_type(named):
            return _LEAVES[named.name]
        definition = info.parent_type.fields[info.field_name]
        slicing = slicing_of(info.parent_type.name, info.field_name, definition, self.schema)
        if slicing.sized_fields:
            return {SIZED: (slicing.sized_fields, self.sizes(source, info))}
        return {}

    def resolve(self, source: Any, info: Any, **_args: Any) -> Any:
        field_type = info.parent_type.fields[info.field_name].type
        named = get_named_type(field_type)
        unwrapped = field_type.of_type if isinstance(field_type, GraphQLNonNull) else field_type
        if not isinstance(unwrapped, GraphQLList):
            return None if self.null(field_type) else self.value(named, source, info)
        size = self.sizes(source, info)
        if size >= 1 and self.null(field_type):  # a null list counts as one item
            return None
        length = size if self.rng is None else self.rng.randint(0, size)
        item_type = unwrapped.of_type
        return [
            None if self.null(item_type) else self.value(named, source, info) for _ in range(length)
        ]

    def resolve_type(self, _value: Any, _info: Any, abstract_type: Any) -> str:
        names = sorted(t.name for t in self.schema.get_possible_types(abstract_type))
        return names[0] if self.rng is None else self.rng.choice(names)

    def run(self, text: str) -> dict[str, Any]:
        result = execute_sync(
            self.schema,
            parse(text),
            field_resolver=self.resolve,
            type_resolver=self.resolve_type,
        )
        assert result.errors is None, result.errors
        assert result.data is not None
        return result.data


def small(operation: Operation) -> Operation:
    body = map_sizes(operation.body, lambda _, size: replace(size, value=min(size.value, MAX_SIZE)))
    return replace(operation, body=body)


def with_fragments(operations: st.SearchStrategy[Operation]) -> st.SearchStrategy[Operation]:
    """Generated operations, and the same with a fragment spread in several places."""
    return st.one_of(operations, shared_fragments(operations).map(lambda pair: pair[1]))


ACTUAL_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@ACTUAL_SETTINGS
@given(operation=with_fragments(ANY).map(small), seed=st.integers(0, 2**32 - 1))
def test_lists_no_longer_than_estimated_cost_at_most_the_estimate(operation, seed):
    estimate = analyze(operation.schema, operation.text).cost
    assume(estimate <= MAX_ESTIMATE)
    data = Runner(operation.schema, random.Random(seed)).run(operation.text)
    assert actual_cost(operation.schema, operation.text, data) <= estimate, (operation.text, data)


@ACTUAL_SETTINGS
@given(operation=with_fragments(CONCRETE).map(small))
def test_lists_at_the_estimated_sizes_cost_the_estimate(operation):
    estimate = analyze(operation.schema, operation.text).cost
    assume(estimate <= MAX_ESTIMATE)
    runner = Runner(operation.schema)
    data = runner.run(operation.text)
    assume(not runner.conflict)
    assert actual_cost(operation.schema, operation.text, data) == estimate, (operation.text, data)


@ACTUAL_SETTINGS
@given(operation=ANY.map(small), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_named_and_inline_fragments_do_not_change_the_actual_cost(operation, seed, data):
    assume(analyze(operation.schema, operation.text).cost <= MAX_ESTIMATE)
    result = Runner(operation.schema, random.Random(seed)).run(operation.text)
    targets = selsets(operation.body)
    index = data.draw(st.integers(0, len(targets) - 1), label="selection set")
    named = data.draw(st.booleans(), label="named fragment")

    def rewrite(i: int, selset: SelSet) -> SelSet:
        if i != index:
            return selset
        if named:
            return SelSet(selset.type_name, (Spread("Fx", selset),))
        return SelSet(selset.type_name, (Inline(selset.type_name, selset),))

    rewritten = replace(operation, body=map_selsets(operation.body, rewrite))
    expected = actual_cost(operation.schema, operation.text, result)
    assert actual_cost(rewritten.schema, rewritten.text, result) == expected, rewritten.text


def test_the_runner_builds_what_the_analyzer_assumes(shop_schema):
    # The property tests rest on the runner: exact sizes, connections sized by `first`.
    query = "{ orders(first: 3) { edges { node { lines { quantity } } } } categories { id } }"
    data = Runner(shop_schema).run(query)
    assert len(data["orders"]["edges"]) == 3
    assert len(data["orders"]["edges"][0]["node"]["lines"]) == 10
    assert len(data["categories"]) == 25
    assert actual_cost(shop_schema, query, data) == analyze(shop_schema, query).cost
    runner = Runner(shop_schema)
    runner.run("{ products(first: 2) { id } ... { products(first: 3) { id } } }")
    assert runner.conflict


def test_a_schema_with_resolvers_built_from_sdl():
    # A plain graphql-core schema (no cost directives): the convention sizes `first`.
    schema = build_schema(
        COST_DIRECTIVES_SDL + "type Query { items(first: Int): [Item] } type Item { id: ID }"
    )
    query = "{ items(first: 5) { id } }"
    result = graphql_sync(schema, query, root_value={"items": lambda _info, first: [{"id": 1}] * 3})
    assert analyze(schema, query).cost == 5
    assert actual_cost(schema, query, result.data) == 3
