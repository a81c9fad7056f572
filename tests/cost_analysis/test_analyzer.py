"""The cost model's rules, one worked example each."""

from __future__ import annotations

import pytest
from graphql import GraphQLInterfaceType, GraphQLObjectType, parse

from quotaql.cost_analysis import CostLimits, CostModel, FieldCost, analyze
from quotaql.errors import (
    ConfigError,
    IntrospectionDisabled,
    InvalidQuery,
    QueryTooComplex,
    QueryTooDeep,
    SlicingArgumentRequired,
    TooManyAliases,
    TooManyRootFields,
)

from .conftest import build

# -- the issue's worked examples ---------------------------------------------------------


def test_slicing_argument_sizes_the_list(worked_schema):
    report = analyze(worked_schema, "{ users(first: 3) { id name } }")
    assert report.cost == 3
    assert report.depth == 2
    assert report.by_coordinate == {"Query.users": 3}


def test_convention_argument_with_schema_default_sizes_a_nested_list(worked_schema):
    report = analyze(worked_schema, "{ users(first: 3) { friends { id } } }")
    assert report.cost == 18  # 3 × (1 + 5 × (1 + 0))
    assert report.depth == 3
    assert report.by_coordinate == {"User.friends": 15, "Query.users": 3}


def test_mutation_adds_its_operation_weight():
    schema = build("type Query { a: Int } type Mutation { save: Thing } type Thing { id: ID }")
    assert analyze(schema, "mutation { save { id } }").cost == 11
    assert analyze(schema, "{ a }").cost == 0
    report = analyze(schema, "mutation Save { save { id } }")
    assert report.operation_type == "mutation"
    assert report.operation_name == "Save"


def test_operation_weights_are_configurable():
    schema = build("type Query { a: Int } type Mutation { save: Int }")
    model = CostModel(operation_weights={"mutation": 3, "query": 1})
    assert analyze(schema, "mutation { save }", model=model).cost == 3
    assert analyze(schema, "{ a }", model=model).cost == 1


def test_fragment_spread_costs_the_same_as_inline_fields(worked_schema):
    inline = analyze(worked_schema, "{ users(first: 3) { id friends(first: 2) { name } } }")
    spread = analyze(
        worked_schema,
        "{ users(first: 3) { ...U } } fragment U on User { id friends(first: 2) { name } }",
    )
    assert (spread.cost, spread.depth) == (inline.cost, inline.depth) == (9, 3)
    assert spread.by_coordinate == inline.by_coordinate


# -- list sizes --------------------------------------------------------------------------


def test_slicing_argument_from_a_variable(worked_schema):
    query = "query Q($n: Int) { users(first: $n) { id } }"
    assert analyze(worked_schema, query, variables={"n": 7}).cost == 7


def test_variable_default_value_sizes_the_list(worked_schema):
    query = "query Q($n: Int = 4) { users(first: $n) { id } }"
    assert analyze(worked_schema, query).cost == 4


def test_missing_slicing_argument_falls_back_to_the_schema_default(worked_schema):
    assert analyze(worked_schema, "{ users { id } }").cost == 10


def test_a_slicing_variable_not_sent_takes_the_schema_default(worked_schema):
    query = "query Q($n: Int) { users(first: $n) { id } }"
    assert analyze(worked_schema, query, variables={}).cost == 10
    assert analyze(worked_schema, query).cost == 10


def test_a_null_slicing_variable_sizes_nothing_and_a_required_slice_is_refused(worked_schema):
    # An explicit null is a value given (CoerceArgumentValues): the schema default does
    # not apply, and `users` requires one slicing argument (requireOneSlicingArgument is
    # true by default): refused, as Apollo Router refuses it.
    query = "query Q($n: Int) { users(first: $n) { id } }"
    with pytest.raises(SlicingArgumentRequired, match=r"'Query\.users'"):
        analyze(worked_schema, query, variables={"n": None})
    with pytest.raises(SlicingArgumentRequired):
        analyze(worked_schema, "{ users(first: null) { id } }")


NULL_SDL = """
type Item { id: ID }
type Query {
  items(first: Int = 4): [Item]
    @listSize(slicingArguments: ["first"], requireOneSlicingArgument: false)
  assumed(first: Int = 4): [Item]
    @listSize(slicingArguments: ["first"], assumedSize: 5000, requireOneSlicingArgument: false)
  nulled(first: Int = null, last: Int = null): [Item]
  pages(first: Int, last: Int): [Item]
    @listSize(slicingArguments: ["first", "last"], requireOneSlicingArgument: false)
  strict(first: Int = null): [Item] @listSize(slicingArguments: ["first"])
}
"""


def test_a_null_slicing_argument_prices_the_list_at_max_list_size():
    # Issue 22: a null bounds nothing (`items[:None]` is every item), so the list is as
    # long as it may be: max_list_size (1000), never the schema default 4 nor the assumed
    # size. Not written, the schema default applies.
    schema = build(NULL_SDL)
    assert analyze(schema, "{ items { id } }").cost == 4
    assert analyze(schema, "{ items(first: null) { id } }").cost == 1000
    query = "query Q($n: Int) { items(first: $n) { id } }"
    assert analyze(schema, query, variables={"n": None}).cost == 1000
    assert analyze(schema, query, variables={}).cost == 4
    defaulted = "query Q($n: Int = null) { items(first: $n) { id } }"
    assert analyze(schema, defaulted, variables={}).cost == 1000
    # A schema default of null (Strawberry's `first: int | None = None`): null when left out.
    assert analyze(schema, "{ nulled { id } }").cost == 1000
    # Never below the assumed size, which is what leaving the argument out would price.
    assert analyze(schema, "{ assumed(first: null) { id } }").cost == 5000
    ibm = CostModel(model="ibm")
    report = analyze(schema, "{ items(first: null) { id } }", model=ibm)
    assert (report.field_cost, report.type_cost) == (1, 1001)


def test_a_null_beside_a_size_bounds_nothing():
    # Relay clients page both ways with one query: `first: 10, last: null` is 10 items.
    schema = build(NULL_SDL)
    assert analyze(schema, "{ pages(first: 10, last: null) { id } }").cost == 10
    assert analyze(schema, "{ nulled(last: 3) { id } }").cost == 3
    assert analyze(schema, "{ pages(first: null, last: null) { id } }").cost == 1000


def test_max_list_size_and_a_fields_max_size_set_the_bound():
    schema = build(NULL_SDL)
    model = CostModel(max_list_size=300)
    assert analyze(schema, "{ items(first: null) { id } }", model=model).cost == 300
    capped = CostModel(max_list_size=300, weights={"Query.items": FieldCost(max_size=50)})
    assert analyze(schema, "{ items(first: null) { id } }", model=capped).cost == 50
    assert analyze(schema, "{ nulled { id } }", model=capped).cost == 300
    with pytest.raises(ConfigError, match="max_list_size must be an integer >= 0"):
        CostModel(max_list_size=-1)
    with pytest.raises(ConfigError, match="max_size must be an integer >= 0"):
        FieldCost(max_size=1.5)  # type: ignore[arg-type]


def test_a_null_where_one_slicing_argument_is_required_is_refused():
    # requireOneSlicingArgument: a null, written or the schema's default, gives none.
    schema = build(NULL_SDL)
    with pytest.raises(SlicingArgumentRequired, match="1 null, which sizes nothing"):
        analyze(schema, "{ strict(first: null) { id } }")
    with pytest.raises(SlicingArgumentRequired, match=r"\(got 0\)"):
        analyze(schema, "{ strict { id } }")
    assert analyze(schema, "{ strict(first: 7) { id } }").cost == 7


def test_largest_of_several_slicing_arguments_wins(shop_schema):
    report = analyze(shop_schema, "{ products(first: 3, last: 8) { id } }")
    assert report.cost == 16  # 8 × Product weight 2


def test_list_argument_sizes_by_its_length(shop_schema):
    # nodes(ids:) is sliced by a list; Node takes the largest weight of its types (Vendor 4).
    assert analyze(shop_schema, '{ nodes(ids: ["1", "2", "3"]) { id } }').cost == 12


def test_assumed_size_applies_without_slicing_arguments(shop_schema):
    assert analyze(shop_schema, "{ categories { id } }").cost == 25


def test_default_list_size_applies_to_unsized_lists():
    schema = build("type Query { things: [Thing] } type Thing { id: ID }")
    assert analyze(schema, "{ things { id } }").cost == 10
    assert analyze(schema, "{ things { id } }", model=CostModel(default_list_size=4)).cost == 4


def test_convention_only_applies_to_int_arguments_with_configured_names():
    schema = build(
        "type Query { a(first: Int): [T]  b(count: Int): [T]  c(first: String): [T] } type T { x: ID }"
    )
    assert analyze(schema, "{ a(first: 2) { x } }").cost == 2
    assert analyze(schema, "{ b(count: 2) { x } }").cost == 10
    assert analyze(schema, '{ c(first: "2") { x } }').cost == 10
    model = CostModel(slicing_arguments=("count",))
    assert analyze(schema, "{ b(count: 2) { x } }", model=model).cost == 2
    assert (
        analyze(schema, "{ a(first: 2) { x } }", model=CostModel(slicing_arguments=())).cost == 10
    )


def test_sized_fields_move_the_size_onto_connection_children(shop_schema):
    query = "{ orders(first: 5) { edges { node { id } } totalCount pageInfo { hasNextPage } } }"
    report = analyze(shop_schema, query)
    # orders 1 + edges 5 × (edge 1 + node 1) + totalCount 2 + pageInfo 1
    assert report.cost == 14
    assert report.by_coordinate == {
        "OrderConnection.edges": 5,
        "OrderEdge.node": 5,
        "OrderConnection.totalCount": 2,
        "OrderConnection.pageInfo": 1,
        "Query.orders": 1,
    }


def test_sized_fields_apply_through_a_fragment_but_not_outside_it(shop_schema):
    query = (
        "{ orders(first: 4) { ...C } more: orders(first: 9) { ...C } }"
        " fragment C on OrderConnection { nodes { id } }"
    )
    assert analyze(shop_schema, query).cost == (1 + 4) + (1 + 9)


def test_require_one_slicing_argument_names_the_field():
    schema = build(
        "type Query { items(first: Int, last: Int): [Item]"
        ' @listSize(slicingArguments: ["first", "last"]) } type Item { id: ID }'
    )
    with pytest.raises(SlicingArgumentRequired) as raised:
        analyze(schema, "{ items { id } }")
    assert raised.value.code == "SLICING_ARGUMENT_REQUIRED"
    assert "'Query.items'" in raised.value.message
    with pytest.raises(SlicingArgumentRequired):
        analyze(schema, "{ items(first: 1, last: 2) { id } }")
    assert analyze(schema, "{ items(last: 2) { id } }").cost == 2


# -- weights -----------------------------------------------------------------------------


def test_cost_directive_on_type_field_and_argument(shop_schema):
    assert analyze(shop_schema, '{ product(id: "1") { id } }').cost == 2  # @cost on Product
    assert analyze(shop_schema, "{ expensive { total } }").cost == 50  # @cost on the field
    # search: term weight 3, limit default 20 × SearchResult (max of 2, 4, 1 = 4)
    assert analyze(shop_schema, '{ search(term: "x") { __typename } }').cost == 3 + 20 * 4


def test_negative_weights_never_make_a_field_cost_below_zero(shop_schema):
    assert analyze(shop_schema, "{ discounted(limit: 3) { id } }").cost == 0


def test_toml_weights_override_directives(shop_schema):
    model = CostModel(
        weights={
            "Product": 1,
            "Query.expensive": 7,
            "Query.search(term:)": 0,
            "Query.categories": FieldCost(assumed_size=2, weight=3),
        }
    )
    assert analyze(shop_schema, '{ product(id: "1") { id } }', model=model).cost == 1
    assert analyze(shop_schema, "{ expensive { total } }", model=model).cost == 7
    assert analyze(shop_schema, "{ categories { id } }", model=model).cost == 6
    assert (
        analyze(shop_schema, '{ search(term: "x", limit: 1) { __typename } }', model=model).cost
        == 4
    )


def test_toml_slicing_arguments_override_the_convention():
    schema = build("type Query { feed(take: Int, first: Int): [Post] } type Post { id: ID }")
    model = CostModel(weights={"Query.feed": FieldCost(slicing_arguments=("take",))})
    assert analyze(schema, "{ feed(take: 3, first: 50) { id } }", model=model).cost == 3


def test_unknown_weight_coordinate_suggests_the_closest():
    schema = build("type Query { search: [String] users: [User] } type User { id: ID }")
    with pytest.raises(ConfigError) as raised:
        analyze(schema, "{ search }", model=CostModel(weights={"Query.serach": 5}))
    assert "Query.search" in str(raised.value)
    with pytest.raises(ConfigError, match="Useer"):
        analyze(schema, "{ search }", model=CostModel(weights={"Useer": 5}))


def test_unknown_slicing_argument_in_listsize_is_a_config_error():
    schema = build(
        'type Query { users(first: Int): [U] @listSize(slicingArguments: ["frist"]) } type U { id: ID }'
    )
    with pytest.raises(ConfigError, match=r"'frist'.*did you mean 'first'"):
        analyze(schema, "{ users { id } }")


# -- abstract types ----------------------------------------------------------------------


def test_abstract_selection_takes_the_most_expensive_possible_type(shop_schema):
    query = """{
      search(term: "x", limit: 2) {
        ... on Product { reviews(first: 3) { id } }
        ... on Vendor { products(first: 2) { id } }
      }
    }"""
    # term 3 + 2 × (union weight 4 + max(Product: 3 × 1, Vendor: 2 × 2, Customer: 0))
    report = analyze(shop_schema, query)
    assert report.cost == 3 + 2 * (4 + 4)
    assert report.by_coordinate == {"Query.search": 11, "Vendor.products": 8}


def test_interface_fields_apply_to_every_possible_type(shop_schema):
    query = '{ node(id: "1") { id ... on Customer { orders(first: 2) { id } } } }'
    assert analyze(shop_schema, query).cost == 4 + 2  # Node weight 4 (Vendor) + Customer branch


def test_fragment_on_an_interface_inside_a_concrete_type_applies(shop_schema):
    query = '{ product(id: "1") { ...N } } fragment N on Node { ... on Product { related(limit: 2) { id } } }'
    assert analyze(shop_schema, query).cost == 2 + 2 * 2


def test_fragment_for_another_concrete_type_costs_nothing(shop_schema):
    query = '{ node(id: "1") { ... on Review { author { orders { id } } } } }'
    # Review branch: author 1 + orders 5 × 1 = 6 > 0, so it is the max over types.
    assert analyze(shop_schema, query).cost == 4 + 6


# -- skip / include ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"skip": True, "include": True}, 0),
        ({"skip": False, "include": True}, 3),
        ({"skip": False, "include": False}, 0),
    ],
)
def test_skip_and_include_follow_the_variables(worked_schema, variables, expected):
    query = """query Q($skip: Boolean!, $include: Boolean!) {
      users(first: 3) @skip(if: $skip) @include(if: $include) { id }
    }"""
    assert analyze(worked_schema, query, variables=variables).cost == expected


def test_skipped_fragments_cost_nothing(worked_schema):
    query = "{ users(first: 2) { ...F @skip(if: true) ... on User @include(if: false) { friends { id } } } } fragment F on User { friends { id } }"
    assert analyze(worked_schema, query).cost == 2


# -- introspection and __typename --------------------------------------------------------


def test_introspection_is_counted_by_default_at_the_schemas_sizes(worked_schema):
    # __Schema 5, each other introspection object 0.015; the lists as long as the schema
    # makes them: every type, and per type the schema's fields over its types.
    report = analyze(worked_schema, "{ __schema { types { name } } }")
    types = len(worked_schema.type_map)
    assert report.cost == pytest.approx(5 + 0.015 * types)
    fields = sum(
        len(t.fields)
        for t in worked_schema.type_map.values()
        if isinstance(t, GraphQLObjectType | GraphQLInterfaceType)
    )
    deep = analyze(worked_schema, "{ __schema { types { fields { name } } } }")
    # types x (1 + fields per type): every type, and every output field of the schema.
    assert deep.cost == pytest.approx(5 + 0.015 * (types + fields))
    assert deep.depth == 4


def test_introspection_can_be_free_or_weighed_otherwise(worked_schema):
    query = "{ __schema { types { name } } }"
    assert analyze(worked_schema, query, model=CostModel(introspection="free")).cost == 0
    heavier = CostModel(weights={"__Schema": 1, "__Type": 1})
    assert analyze(worked_schema, query, model=heavier).cost == 1 + len(worked_schema.type_map)
    sized = CostModel(weights={"__Schema.types": FieldCost(assumed_size=3)})
    assert analyze(worked_schema, query, model=sized).cost == pytest.approx(5 + 3 * 0.015)


def test_introspection_off_is_refused_however_it_is_spelt(worked_schema):
    off = CostModel(introspection="off")
    for query in (
        "{ __schema { queryType { name } } }",
        '{ t: __type(name: "User") { name } }',
        "{ ...F } fragment F on Query { __schema { types { name } } }",
        '{ ... on Query { __type(name: "User") { name } } }',
    ):
        with pytest.raises(IntrospectionDisabled) as raised:
            analyze(worked_schema, query, model=off)
        assert raised.value.code == "INTROSPECTION_DISABLED"
        assert raised.value.locations
    # __typename is not introspection of the schema: still answered, still free.
    assert analyze(worked_schema, "{ __typename }", model=off).cost == 0
    skipped = "{ __schema @skip(if: true) { types { name } } __typename }"
    assert analyze(worked_schema, skipped, model=off).cost == 0  # never runs


def test_typename_costs_nothing_but_counts_for_depth_and_root_fields(worked_schema):
    report = analyze(worked_schema, "{ __typename users(first: 1) { __typename } }")
    assert (report.cost, report.depth, report.root_fields) == (1, 2, 2)


# -- counts and limits -------------------------------------------------------------------


def test_aliases_and_root_fields_are_counted_with_fragments_expanded(worked_schema):
    query = (
        "{ ...R ...S } fragment R on Query { a: users(first: 1) { b: id } }"
        " fragment S on Query { c: users(first: 2) { id } users(first: 3) { id } }"
    )
    report = analyze(worked_schema, query)
    assert (report.aliases, report.root_fields, report.cost) == (3, 3, 6)


def test_a_fragment_spread_twice_counts_once(worked_schema):
    # CollectFields expands `...R` once per selection set (visitedFragments).
    query = "{ ...R ...R } fragment R on Query { a: users(first: 1) { b: id } }"
    report = analyze(worked_schema, query)
    assert (report.aliases, report.root_fields, report.cost) == (2, 1, 1)


def test_namesakes_merge_into_one_root_field(worked_schema):
    report = analyze(worked_schema, "{ users(first: 2) { id } users(first: 2) { name } }")
    assert (report.aliases, report.root_fields, report.cost) == (0, 1, 2)
    assert report.root_field_costs["Query.users"] == (2, 1)


def test_each_limit_raises_its_own_error(worked_schema):
    query = "{ a: users(first: 30) { b: friends(first: 30) { id } } c: users { id } }"
    report = analyze(worked_schema, query)
    assert (report.cost, report.depth, report.aliases, report.root_fields) == (940, 3, 3, 2)
    with pytest.raises(QueryTooComplex) as complex_:
        analyze(worked_schema, query, limits=CostLimits(max_cost=939))
    assert complex_.value.code == "QUERY_TOO_COMPLEX"
    assert complex_.value.limit == 939
    with pytest.raises(QueryTooDeep) as deep:
        analyze(worked_schema, query, limits=CostLimits(max_depth=2))
    assert (deep.value.value, deep.value.limit, deep.value.code) == (3, 2, "QUERY_TOO_DEEP")
    with pytest.raises(TooManyAliases) as aliases:
        analyze(worked_schema, query, limits=CostLimits(max_aliases=2))
    assert (aliases.value.value, aliases.value.code) == (3, "TOO_MANY_ALIASES")
    with pytest.raises(TooManyRootFields) as roots:
        analyze(worked_schema, query, limits=CostLimits(max_root_fields=1))
    assert (roots.value.value, roots.value.code) == (2, "TOO_MANY_ROOT_FIELDS")
    limits = CostLimits(max_cost=940, max_depth=3, max_aliases=3, max_root_fields=2)
    assert analyze(worked_schema, query, limits=limits).cost == 940


def test_cost_limit_message_reads_like_the_issue():
    schema = build("type Query { a: [T] @listSize(assumedSize: 5230) } type T { id: ID }")
    with pytest.raises(QueryTooComplex) as raised:
        analyze(schema, "{ a { id } }", limits=CostLimits(max_cost=5000))
    assert str(raised.value) == "Query cost 5230 exceeds the maximum of 5000"
    assert raised.value.extensions == {"code": "QUERY_TOO_COMPLEX", "cost": 5230, "limit": 5000}


def test_cost_limit_reports_the_exact_cost_of_a_wide_query(worked_schema):
    query = "{ " + " ".join(f"u{i}: users(first: 100) {{ id }}" for i in range(1000)) + " }"
    with pytest.raises(QueryTooComplex) as raised:
        analyze(worked_schema, query, limits=CostLimits(max_cost=5000))
    # The plan is priced whole: the exact cost, not a lower bound.
    assert raised.value.value == 100_000
    assert not raised.value.partial
    assert str(raised.value) == "Query cost 100000 exceeds the maximum of 5000"


def test_error_locations_point_at_the_offending_node(worked_schema):
    with pytest.raises(QueryTooDeep) as raised:
        analyze(
            worked_schema,
            "{\n  users {\n    friends { id }\n  }\n}",
            limits=CostLimits(max_depth=2),
        )
    assert raised.value.locations == ((3, 13),)


# -- documents and schemas ---------------------------------------------------------------


def test_pre_parsed_document_gives_the_same_report(worked_schema):
    query = "{ users(first: 3) { friends { id } } }"
    assert analyze(worked_schema, parse(query)) == analyze(worked_schema, query)


def test_operation_name_selects_the_operation(worked_schema):
    query = "query A { users(first: 1) { id } } query B { users(first: 2) { id } }"
    assert analyze(worked_schema, query, operation_name="B").cost == 2


def test_unknown_field_is_reported(worked_schema):
    with pytest.raises(InvalidQuery, match="Cannot query field 'nope' on type 'User'"):
        analyze(worked_schema, "{ users { nope } }")


def test_non_schema_is_a_type_error():
    with pytest.raises(TypeError, match="GraphQLSchema"):
        analyze(object(), "{ a }")
