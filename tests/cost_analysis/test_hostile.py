"""Hostile input: every attack gets its own error (or its true price), in bounded time.

Assertions are on the error class, its code, its values and its message, never on time;
each case is sized so that a linear analyzer answers in well under a second (the
50,000-alias and 1 MB documents spend most of their time in graphql-core's parser).
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
from graphql import (
    DocumentNode,
    FieldNode,
    GraphQLSyntaxError,
    InlineFragmentNode,
    NameNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    execute_sync,
    parse,
)
from graphql import version_info as graphql_version_info
from graphql.language import parser as graphql_parser

from quotaql.cost_analysis import CostLimits, analyze
from quotaql.cost_analysis.analyzer import MAX_NESTING
from quotaql.cost_analysis.model import SAFE_LIMITS
from quotaql.errors import (
    CostAnalysisError,
    FragmentCycle,
    InvalidArgument,
    InvalidQuery,
    InvalidVariables,
    OperationResolutionError,
    QuerySyntaxError,
    QueryTooComplex,
    QueryTooDeep,
    QueryTooLarge,
    SlicingArgumentRequired,
    TooManyAliases,
    TooManyRootFields,
    TooManyVariableValues,
)

from .conftest import WORKED_SDL, build

INT64_MAX = 9223372036854775807


# -- helpers -----------------------------------------------------------------------------


def _field(name: str, selections: tuple[object, ...] | None = None) -> FieldNode:
    return FieldNode(
        name=NameNode(value=name),
        selection_set=SelectionSetNode(selections=selections) if selections else None,
    )


def _query(*selections: object) -> DocumentNode:
    operation = OperationDefinitionNode(
        operation=OperationType.QUERY, selection_set=SelectionSetNode(selections=selections)
    )
    return DocumentNode(definitions=(operation,))


def nested_friends(levels: int) -> DocumentNode:
    """``{ users { friends { ... friends { id } } } }`` built without the parser.

    ``levels`` counts the ``friends`` fields, so the deepest ``id`` is at depth
    ``levels + 2`` and the walk goes ``levels + 2`` selection sets deep.
    """
    inner: tuple[object, ...] = (_field("id"),)
    for _ in range(levels):
        inner = (_field("friends", inner),)
    return _query(_field("users", inner))


def nested_inline_fragments(levels: int) -> DocumentNode:
    """``{ users { ... { ... { ... { id } } } } }`` built without the parser."""
    inner = SelectionSetNode(selections=(_field("id"),))
    for _ in range(levels):
        inner = SelectionSetNode(selections=(InlineFragmentNode(selection_set=inner),))
    return _query(FieldNode(name=NameNode(value="users"), selection_set=inner))


def spread_chain(length: int) -> str:
    """``{ users { ...F0 } }`` where ``F0`` spreads ``F1`` ... spreads ``F<length>``."""
    fragments = [f"fragment F{i} on User {{ ...F{i + 1} }}" for i in range(length)]
    fragments.append(f"fragment F{length} on User {{ id name }}")
    return "{ users { ...F0 } }\n" + "\n".join(fragments)


def aliased_bomb(levels: int) -> str:
    """Each fragment spreads the next twice, under the aliases ``a`` and ``b``."""
    fragments = [
        f"fragment F{i} on User {{ a: friends {{ ...F{i + 1} }} b: friends {{ ...F{i + 1} }} }}"
        for i in range(1, levels)
    ]
    fragments.append(f"fragment F{levels} on User {{ id name }}")
    return "{ users(first: 1) { ...F1 } }\n" + "\n".join(fragments)


def aliased_bomb_cost(levels: int) -> float:
    """``users(first: 1)`` × (1 + c₁), cᵢ = 2 × 5 × (1 + cᵢ₊₁), c_levels = 0.

    So c₁ = 10 + 10² + ... + 10^(levels-1) = (10^levels − 10) / 9.
    """
    return 1 + (10**levels - 10) / 9


def same_level_bomb(levels: int) -> str:
    """``fragment Fi on User { ...Fi+1 ...Fi+1 }``: the same fragment spread twice, legally."""
    fragments = [f"fragment F{i} on User {{ ...F{i + 1} ...F{i + 1} }}" for i in range(1, levels)]
    fragments.append(f"fragment F{levels} on User {{ friends {{ id }} }}")
    return "{ users(first: 1) { ...F1 } }\n" + "\n".join(fragments)


def root_bomb(levels: int) -> str:
    """The same-level bomb on the root type: root fields and aliases double per level."""
    fragments = [f"fragment Q{i} on Query {{ ...Q{i + 1} ...Q{i + 1} }}" for i in range(1, levels)]
    fragments.append(f"fragment Q{levels} on Query {{ u: users(first: 1) {{ id }} }}")
    return "{ ...Q1 }\n" + "\n".join(fragments)


def aliased_root_fields(count: int, width: int = 0) -> str:
    return "{ " + " ".join(f"a{i:0{width}d}: users(first: 1) {{ id }}" for i in range(count)) + " }"


@pytest.fixture(scope="module")
def fifty_thousand_aliases() -> DocumentNode:
    # Parsed once: graphql-core needs a few seconds for 1.5 MB of text.
    return parse(aliased_root_fields(50_000), no_location=True)


@pytest.fixture(scope="module")
def require_one_schema():
    return build(
        """
        type Query {
          items(first: Int, last: Int): [Item] @listSize(slicingArguments: ["first", "last"])
        }
        type Item { id: ID }
        """
    )


# -- nesting -----------------------------------------------------------------------------


def test_ten_thousand_levels_of_nesting_is_refused_by_the_parser(worked_schema):
    levels = 10_000
    query = "{ " + "a { " * levels + "b" + " }" * levels + " }"
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, query)
    error = raised.value
    assert error.code == "QUERY_TOO_DEEP"
    assert error.value == levels + 1  # the braces of the operation and of every `a`
    assert error.value > error.limit
    assert (
        error.message
        == f"The document nests selections {levels + 1} levels deep; the parser follows at most 200"
    )
    assert error.extensions["code"] == "QUERY_TOO_DEEP"


def test_ten_thousand_levels_report_the_configured_max_depth(worked_schema):
    levels = 10_000
    query = "{ " + "a { " * levels + "b" + " }" * levels + " }"
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, query, limits=CostLimits(max_depth=12))
    assert (raised.value.value, raised.value.limit) == (levels + 1, 12)


def test_a_document_just_past_the_parser_nesting_limit_reports_a_limit_it_exceeds(
    worked_schema,
):
    # graphql-core refuses more than MAX_NESTING_DEPTH (200) nested selection sets.
    # The error must name a limit below the measured value: a client told
    # "201 exceeds the maximum of 256" cannot know what to change.
    parser_limit = graphql_parser.MAX_NESTING_DEPTH
    friends = parser_limit - 2  # + the operation's braces + users' braces
    fits = "{ users { " + "friends { " * friends + "id" + " }" * friends + " } }"
    assert analyze(worked_schema, fits).depth == parser_limit
    too_deep = "{ users { " + "friends { " * (friends + 1) + "id" + " }" * (friends + 1) + " } }"
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, too_deep)
    assert raised.value.value == parser_limit + 1
    assert raised.value.value > raised.value.limit, (
        f"value {raised.value.value} does not exceed the reported limit {raised.value.limit}"
    )


def test_max_depth_reports_the_exact_depth_and_where_it_crosses(worked_schema):
    levels = 48
    query = "{ users { " + "friends { " * levels + "id" + " }" * levels + " } }"
    assert analyze(worked_schema, query).depth == levels + 2
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, query, limits=CostLimits(max_depth=12))
    error = raised.value
    # The measured depth, not the first one past the limit.
    assert (error.code, error.value, error.limit) == ("QUERY_TOO_DEEP", levels + 2, 12)
    assert error.message == f"Query depth {levels + 2} exceeds the maximum of 12"
    assert not error.partial
    # The location is the selection set at depth 13 (one below the limit): the 11th
    # `friends`'s.
    assert error.locations == (
        (1, len("{ users { ") + 10 * len("friends { ") + len("friends ") + 1),
    )


def test_max_depth_location_follows_the_deepest_path(worked_schema):
    # Two branches: the shallow one first; the location is on the deep one.
    query = "{ a: users { id }\n  b: users { friends { friends { friends { id } } } } }"
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, query, limits=CostLimits(max_depth=2))
    assert (raised.value.value, raised.value.limit) == (5, 2)
    # The selection set at depth 3: b's first `friends`'s.
    column = len("  b: users { friends ") + 1
    assert raised.value.locations == ((2, column),)


def test_pre_parsed_document_at_max_nesting_is_priced(worked_schema):
    document = nested_friends(MAX_NESTING - 2)
    report = analyze(worked_schema, document)
    assert report.depth == MAX_NESTING
    assert report.cost == pytest.approx(10 * (1 + sum(5.0**k for k in range(1, MAX_NESTING - 1))))
    assert report.by_coordinate["Query.users"] == 10  # the explaining walk recurses too


@pytest.mark.parametrize("levels", [MAX_NESTING - 1, 100_000])
def test_pre_parsed_document_nested_past_max_nesting_is_refused(worked_schema, levels):
    document = nested_friends(levels)
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, document)
    error = raised.value
    assert (error.code, error.value, error.limit) == (
        "QUERY_TOO_DEEP",
        MAX_NESTING + 1,
        MAX_NESTING,
    )
    assert f"more than {MAX_NESTING} levels" in error.message


def test_pre_parsed_inline_fragments_nested_past_max_nesting_are_refused(worked_schema):
    assert analyze(worked_schema, nested_inline_fragments(MAX_NESTING - 2)).depth == 2
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, nested_inline_fragments(100_000))
    assert (raised.value.value, raised.value.limit) == (MAX_NESTING + 1, MAX_NESTING)


def test_deep_nesting_is_refused_even_with_a_generous_max_depth(worked_schema):
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, nested_friends(10_000), limits=CostLimits(max_depth=100_000))
    assert raised.value.limit == MAX_NESTING


def test_a_chain_of_five_thousand_fragments_is_refused_without_recursion_error(worked_schema):
    document = parse(spread_chain(5_000))
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, document)
    error = raised.value
    assert (error.code, error.value, error.limit) == (
        "QUERY_TOO_DEEP",
        MAX_NESTING + 1,
        MAX_NESTING,
    )
    assert "nested more than" in error.message
    assert "fragments" in error.message


def test_a_chain_of_a_hundred_fragments_is_priced(worked_schema):
    source = spread_chain(100)
    report = analyze(worked_schema, parse(source))
    assert (report.cost, report.depth, report.aliases, report.root_fields) == (10, 2, 0, 1)
    assert analyze(worked_schema, source) == report
    assert report.by_coordinate == {"Query.users": 10}


# -- aliases and root fields -------------------------------------------------------------


def test_fifty_thousand_aliases_report_them_all_at_max_aliases(
    worked_schema, fifty_thousand_aliases
):
    with pytest.raises(TooManyAliases) as raised:
        analyze(worked_schema, fifty_thousand_aliases, limits=CostLimits(max_aliases=30))
    error = raised.value
    assert (error.code, error.value, error.limit) == ("TOO_MANY_ALIASES", 50_000, 30)
    assert error.message == "Number of aliases 50000 exceeds the maximum of 30"
    assert not error.partial


def test_fifty_thousand_aliases_report_them_all_at_max_root_fields(
    worked_schema, fifty_thousand_aliases
):
    with pytest.raises(TooManyRootFields) as raised:
        analyze(worked_schema, fifty_thousand_aliases, limits=CostLimits(max_root_fields=20))
    error = raised.value
    assert (error.code, error.value, error.limit) == ("TOO_MANY_ROOT_FIELDS", 50_000, 20)
    assert error.message == "Number of root fields 50000 exceeds the maximum of 20"


def test_fifty_thousand_aliases_report_the_exact_cost_at_max_cost(
    worked_schema, fifty_thousand_aliases
):
    with pytest.raises(QueryTooComplex) as raised:
        analyze(worked_schema, fifty_thousand_aliases, limits=CostLimits(max_cost=1000))
    error = raised.value
    assert error.code == "QUERY_TOO_COMPLEX"
    assert (error.value, error.limit) == (50_000, 1000)
    assert not error.partial
    assert error.message == "Query cost 50000 exceeds the maximum of 1000"
    assert error.extensions == {"code": "QUERY_TOO_COMPLEX", "cost": 50_000, "limit": 1000}


def test_fifty_thousand_aliases_are_counted_without_limits(worked_schema, fifty_thousand_aliases):
    report = analyze(worked_schema, fifty_thousand_aliases)
    assert (report.cost, report.depth, report.aliases, report.root_fields) == (
        50_000,
        2,
        50_000,
        50_000,
    )


def test_cost_over_the_limit_on_the_last_root_field_reports_the_exact_cost(worked_schema):
    with pytest.raises(QueryTooComplex) as raised:
        analyze(worked_schema, "{ users(first: 30) { id } }", limits=CostLimits(max_cost=10))
    assert raised.value.message == "Query cost 30 exceeds the maximum of 10"
    assert (raised.value.value, raised.value.limit) == (30, 10)


# -- fragment bombs ----------------------------------------------------------------------


def test_aliased_fragment_bomb_is_priced_at_its_true_cost(worked_schema):
    levels = 30
    report = analyze(worked_schema, aliased_bomb(levels))
    assert report.cost == pytest.approx(aliased_bomb_cost(levels), rel=1e-9)
    assert report.cost > 1e29
    assert report.depth == levels + 1  # users, then one `friends` per spreading fragment, id
    assert report.aliases == 2**levels - 2  # 2 + 4 + ... + 2^(levels-1)
    assert report.root_fields == 1
    assert report.by_coordinate["Query.users"] == 1
    assert report.by_coordinate["User.friends"] == pytest.approx(report.cost - 1, rel=1e-9)


@pytest.mark.parametrize("levels", [2, 3, 10])
def test_small_aliased_bombs_match_the_closed_formula(worked_schema, levels):
    report = analyze(worked_schema, aliased_bomb(levels))
    assert report.cost == aliased_bomb_cost(levels)
    assert (report.depth, report.aliases) == (levels + 1, 2**levels - 2)


def test_aliased_fragment_bomb_with_max_cost_is_too_complex(worked_schema):
    with pytest.raises(QueryTooComplex) as raised:
        analyze(worked_schema, aliased_bomb(30), limits=CostLimits(max_cost=1_000_000))
    error = raised.value
    assert error.code == "QUERY_TOO_COMPLEX"
    assert error.limit == 1_000_000
    assert error.value == pytest.approx(aliased_bomb_cost(30), rel=1e-9)
    assert not error.partial
    assert "exceeds the maximum of 1000000" in error.message


def test_aliased_fragment_bomb_with_max_depth_and_max_aliases(worked_schema):
    with pytest.raises(QueryTooDeep) as deep:
        analyze(worked_schema, aliased_bomb(30), limits=CostLimits(max_depth=12))
    assert (deep.value.value, deep.value.limit) == (31, 12)
    with pytest.raises(TooManyAliases) as aliases:
        analyze(worked_schema, aliased_bomb(30), limits=CostLimits(max_aliases=100))
    # The exact count of the expanded aliases.
    assert (aliases.value.value, aliases.value.limit) == (2**30 - 2, 100)


def test_same_level_bomb_collapses_as_collect_fields(worked_schema):
    # Spreading one fragment twice in the same selection set is legal GraphQL, and
    # CollectFields expands it once (visitedFragments): every level is one `...F`, and
    # the 2^29 `friends` are one field.
    levels = 30
    report = analyze(worked_schema, same_level_bomb(levels))
    assert report.cost == 1 + 5
    assert (report.depth, report.aliases, report.root_fields) == (3, 0, 1)
    assert report.by_coordinate == {"User.friends": 5, "Query.users": 1}


def test_root_bomb_collapses_to_the_root_fields_it_names(worked_schema):
    levels = 30
    report = analyze(worked_schema, root_bomb(levels))
    assert (report.cost, report.depth, report.aliases, report.root_fields) == (1, 2, 1, 1)
    limits = CostLimits(max_root_fields=1, max_aliases=1, max_cost=1)
    assert analyze(worked_schema, root_bomb(levels), limits=limits) == report
    # Two keys at the bottom: two root fields, whatever the doubling above.
    two = root_bomb(levels).replace("{ id } }", "{ id } v: users(first: 2) { id } }")
    report = analyze(worked_schema, two)
    assert (report.cost, report.depth, report.aliases, report.root_fields) == (3, 2, 2, 2)
    with pytest.raises(TooManyRootFields) as roots:
        analyze(worked_schema, two, limits=CostLimits(max_root_fields=1))
    assert (roots.value.value, roots.value.limit) == (2, 1)


# -- fragment cycles ---------------------------------------------------------------------


def test_fragment_cycle_through_a_field(worked_schema):
    query = "{ users { ...A } } fragment A on User { friends { ...B } } fragment B on User { ...A }"
    with pytest.raises(FragmentCycle) as raised:
        analyze(worked_schema, query)
    assert raised.value.code == "FRAGMENT_CYCLE"
    assert "'A'" in raised.value.message
    assert raised.value.locations  # points at the spread that closes the cycle


def test_fragment_self_cycle(worked_schema):
    with pytest.raises(FragmentCycle) as raised:
        analyze(worked_schema, "{ users { ...A } } fragment A on User { ...A }")
    assert raised.value.code == "FRAGMENT_CYCLE"
    assert "Fragment 'A' spreads itself" in raised.value.message


def test_fragment_cycle_through_an_inline_fragment(worked_schema):
    query = "{ users { ...A } } fragment A on User { ... on User { ... { ...A } } }"
    with pytest.raises(FragmentCycle):
        analyze(worked_schema, parse(query))


# -- out-of-range and negative sizes -----------------------------------------------------


def test_int64_literal_on_an_int_slicing_argument(worked_schema):
    with pytest.raises(InvalidArgument) as raised:
        analyze(worked_schema, f"{{ users(first: {INT64_MAX}) {{ id }} }}")
    assert raised.value.code == "BAD_USER_INPUT"
    assert "32-bit" in raised.value.message
    assert "'first'" in raised.value.message
    assert "Query.users" in raised.value.message


def test_int64_literal_on_a_nested_convention_argument(worked_schema):
    with pytest.raises(InvalidArgument) as raised:
        analyze(worked_schema, f"{{ users {{ friends(first: {INT64_MAX}) {{ id }} }} }}")
    assert "User.friends" in raised.value.message
    assert "32-bit" in raised.value.message


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_int_literal_just_outside_32_bit(worked_schema, value):
    with pytest.raises(InvalidArgument) as raised:
        analyze(worked_schema, f"{{ users(first: {value}) {{ id }} }}")
    assert "32-bit" in raised.value.message


def test_largest_32_bit_size_is_accepted(worked_schema):
    report = analyze(worked_schema, f"{{ users(first: {2**31 - 1}) {{ id }} }}")
    assert report.cost == 2**31 - 1


def test_int64_variable_on_an_int_slicing_argument(worked_schema):
    with pytest.raises(InvalidVariables) as raised:
        analyze(
            worked_schema,
            "query ($n: Int) { users(first: $n) { id } }",
            variables={"n": INT64_MAX},
        )
    assert raised.value.code == "BAD_USER_INPUT"
    assert "$n" in raised.value.message
    assert "32-bit" in raised.value.message


def test_int64_literal_on_a_list_slicing_argument_is_one_id(shop_schema):
    # `ids: [ID!]!` is sized by the length of the list. GraphQL input coercion turns the
    # single literal 9223372036854775807 into the one-element list ["9223372036854775807"]
    # (graphql-core's coerce_input_literal agrees), so the list has one item and the
    # field costs 1 × weight(Node) = 4, as `nodes(ids: ["9223372036854775807"])` does.
    assert analyze(shop_schema, '{ nodes(ids: ["9223372036854775807"]) { id } }').cost == 4
    report = analyze(shop_schema, f"{{ nodes(ids: {INT64_MAX}) {{ id }} }}")
    assert report.cost == 4


def test_small_int_literal_on_a_list_slicing_argument_is_one_id(shop_schema):
    # Same as above without overflow: `nodes(ids: 5)` asks for the node with id "5".
    assert analyze(shop_schema, "{ nodes(ids: 5) { id } }").cost == 4


def test_negative_literal_size(worked_schema):
    with pytest.raises(InvalidArgument) as raised:
        analyze(worked_schema, "{ users(first: -5) { id } }")
    assert raised.value.code == "BAD_USER_INPUT"
    assert "negative" in raised.value.message
    assert "-5" in raised.value.message
    assert raised.value.locations == ((1, 16),)


def test_negative_variable_size(worked_schema):
    with pytest.raises(InvalidArgument) as raised:
        analyze(
            worked_schema,
            "query ($n: Int) { users(first: $n) { id } }",
            variables={"n": -5},
        )
    assert raised.value.code == "BAD_USER_INPUT"
    assert "negative" in raised.value.message


def test_negative_size_is_refused_even_when_another_slicing_argument_is_larger(shop_schema):
    with pytest.raises(InvalidArgument) as raised:
        analyze(shop_schema, "{ products(first: 5, last: -1) { id } }")
    assert "negative" in raised.value.message
    assert "'last'" in raised.value.message


def test_negative_variable_default(worked_schema):
    with pytest.raises(InvalidArgument) as raised:
        analyze(worked_schema, "query ($n: Int = -3) { users { friends(first: $n) { id } } }")
    assert "negative" in raised.value.message


# -- astronomically large and degenerate numbers ------------------------------------------


def test_overflowing_cost_is_the_largest_float_and_over_any_limit(worked_schema):
    levels = 40  # (2^31)^40 overflows a float
    query = (
        "{ users(first: 1) { "
        + "friends(first: 2147483647) { " * levels
        + "id"
        + " }" * levels
        + " } }"
    )
    # JSON has no infinity: an overflow prices as the largest finite float, and so does the
    # root field it is under (what its quota is debited: a storage refuses inf).
    report = analyze(worked_schema, query)
    assert report.cost == sys.float_info.max
    assert report.root_field_costs["Query.users"].cost == sys.float_info.max
    with pytest.raises(QueryTooComplex) as raised:
        analyze(worked_schema, query, limits=CostLimits(max_cost=1e300))
    assert raised.value.value > 1e300


def test_zero_times_an_infinite_subtree_costs_nothing_everywhere(worked_schema):
    # `users(first: 0)` multiplies an overflowing (infinite) subtree by zero. The fast walk
    # prices it 0 (NaN is not > 0); the explanation must agree and never contain NaN.
    levels = 40
    query = (
        "{ users(first: 0) { "
        + "friends(first: 2147483647) { " * levels
        + "id"
        + " }" * levels
        + " } one: users(first: 1) { id } }"
    )
    report = analyze(worked_schema, query)
    assert report.cost == 1
    values = list(report.by_coordinate.values())
    assert not any(math.isnan(value) for value in values), report.by_coordinate
    assert sum(values) == report.cost


# -- large documents ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def megabyte_of_root_fields() -> str:
    source = aliased_root_fields(30_000, width=10)
    assert len(source) > 1_000_000
    return source


def test_megabyte_document_over_max_tokens(worked_schema, megabyte_of_root_fields):
    with pytest.raises(QueryTooLarge) as raised:
        analyze(worked_schema, megabyte_of_root_fields, limits=CostLimits(max_tokens=10_000))
    error = raised.value
    assert (error.code, error.value, error.limit) == ("QUERY_TOO_LARGE", 10_001, 10_000)
    assert error.message == "The document has more than 10000 lexical tokens"


def test_megabyte_document_over_max_length(worked_schema, megabyte_of_root_fields):
    with pytest.raises(QueryTooLarge) as raised:
        analyze(worked_schema, megabyte_of_root_fields, limits=CostLimits(max_length=100_000))
    error = raised.value
    assert (error.code, error.value, error.limit) == ("QUERY_TOO_LARGE", 100_001, 100_000)
    assert error.message == "The document has more than 100000 characters"


def test_megabyte_document_is_counted_exactly_without_limits(
    worked_schema, megabyte_of_root_fields
):
    report = analyze(worked_schema, megabyte_of_root_fields)
    assert (report.cost, report.depth, report.aliases, report.root_fields) == (
        30_000,
        2,
        30_000,
        30_000,
    )


def test_megabyte_string_argument_is_one_token(shop_schema):
    query = '{ search(term: "' + "x" * 1_000_000 + '") { __typename } }'
    # One string is one token, so max_tokens lets it through; max_length does not.
    report = analyze(shop_schema, query, limits=CostLimits(max_tokens=10_000))
    assert report.cost == 3 + 20 * 4  # term's @cost + limit default 20 × SearchResult 4
    with pytest.raises(QueryTooLarge) as raised:
        analyze(shop_schema, query, limits=CostLimits(max_length=100_000))
    assert raised.value.limit == 100_000


def test_megabyte_comment_is_caught_by_max_length(worked_schema):
    query = "# " + "x" * 1_000_000 + "\n{ users { id } }"
    # Comments are not lexical tokens: max_tokens does not see them.
    assert analyze(worked_schema, query, limits=CostLimits(max_tokens=10_000)).cost == 10
    with pytest.raises(QueryTooLarge) as raised:
        analyze(worked_schema, query, limits=CostLimits(max_length=100_000))
    assert (raised.value.value, raised.value.limit) == (100_001, 100_000)


_BRACE_DEPTH_PROBE = textwrap.dedent(
    """
    import sys
    from graphql import build_schema
    from quotaql.cost_analysis import analyze
    from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
    from quotaql.errors import QueryTooDeep

    schema = build_schema(COST_DIRECTIVES_SDL + sys.stdin.read())
    source = "{" + " a {" * 250 + " " + '"\\\\' * 500_000 + "\\n}"
    try:
        analyze(schema, source)
    except QueryTooDeep as error:
        print(type(error).__name__, error.value)
    """
)


def test_too_deep_megabyte_document_with_unterminated_strings_is_answered_promptly():
    # A document the parser refuses as too deep, followed by 1 MB of `"\` pairs on one
    # line: every `"` opens a string that never closes. Measuring the brace depth for
    # the error message must stay linear in the text (it runs in a child process so a
    # quadratic scan fails this test instead of hanging the suite).
    try:
        result = subprocess.run(
            [sys.executable, "-c", _BRACE_DEPTH_PROBE],
            input=WORKED_SDL,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("analyze did not answer a 1 MB too-deep document within 10 s")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["QueryTooDeep", "251"]


# -- syntax, operations, variables, validation --------------------------------------------


def test_syntax_error_has_line_and_column(worked_schema):
    with pytest.raises(QuerySyntaxError) as raised:
        analyze(worked_schema, "{ users { id }\n  friends(first: ) }")
    error = raised.value
    assert error.code == "GRAPHQL_PARSE_FAILED"
    assert error.locations == ((2, 18),)
    assert error.message == "Unexpected ')'."


def test_unterminated_document_points_at_the_end(worked_schema):
    with pytest.raises(QuerySyntaxError) as raised:
        analyze(worked_schema, "{ users { id ")
    assert raised.value.locations == ((1, 14),)
    assert "<EOF>" in raised.value.message


def test_unknown_operation_name(worked_schema):
    with pytest.raises(OperationResolutionError) as raised:
        analyze(worked_schema, "query A { users { id } }", operation_name="Nope")
    assert raised.value.code == "OPERATION_RESOLUTION_FAILURE"
    assert "'Nope'" in raised.value.message


def test_several_operations_need_a_name(worked_schema):
    query = "query A { users { id } } query B { users(first: 2) { id } }"
    with pytest.raises(OperationResolutionError) as raised:
        analyze(worked_schema, query)
    assert raised.value.code == "OPERATION_RESOLUTION_FAILURE"
    assert "several operations" in raised.value.message
    report = analyze(worked_schema, query, operation_name="B")
    assert (report.operation_name, report.cost) == ("B", 2)


def test_document_without_operation(worked_schema):
    with pytest.raises(OperationResolutionError) as raised:
        analyze(worked_schema, "fragment F on User { id }")
    assert raised.value.code == "OPERATION_RESOLUTION_FAILURE"
    assert "no operation" in raised.value.message


def test_missing_required_variable(worked_schema):
    with pytest.raises(InvalidVariables) as raised:
        analyze(worked_schema, "query ($n: Int!) { users(first: $n) { id } }")
    assert raised.value.code == "BAD_USER_INPUT"
    assert "'$n'" in raised.value.message
    assert raised.value.locations == ((1, 8),)


def test_variable_of_the_wrong_type(worked_schema):
    with pytest.raises(InvalidVariables) as raised:
        analyze(
            worked_schema,
            "query ($n: Int!) { users(first: $n) { id } }",
            variables={"n": "abc"},
        )
    assert raised.value.code == "BAD_USER_INPUT"
    assert "'$n'" in raised.value.message
    assert "abc" in raised.value.message


@pytest.mark.parametrize("variables", [[1], "n=1", 5])
def test_variables_that_are_not_an_object(worked_schema, variables):
    with pytest.raises(InvalidVariables) as raised:
        analyze(
            worked_schema,
            "query ($n: Int!) { users(first: $n) { id } }",
            variables=variables,
        )
    assert raised.value.code == "BAD_USER_INPUT"
    assert "JSON object" in raised.value.message
    assert type(variables).__name__ in raised.value.message


def test_deeply_nested_variable_value_is_priced_without_recursion_and_refused_when_run(
    shop_schema,
):
    # The pricing leaves a list to the execution to coerce: it reads only its length (one
    # item), with no recursion; graphql-core refuses the value before any resolver runs.
    value: object = "1"
    for _ in range(100_000):
        value = [value]
    query = "query ($ids: [ID!]!) { nodes(ids: $ids) { id } }"
    assert analyze(shop_schema, query, variables={"ids": value}).cost == 4  # a list of one
    result = execute_sync(shop_schema, parse(query), variable_values={"ids": value})
    assert result.data is None
    assert result.errors
    # Within the default limits it is refused before that: it holds 100,000 lists.
    with pytest.raises(TooManyVariableValues) as raised:
        analyze(shop_schema, query, variables={"ids": value}, limits=SAFE_LIMITS)
    assert raised.value.code == "TOO_MANY_VARIABLE_VALUES"


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("{ users { nope } }", "Cannot query field 'nope' on type 'User'"),
        ("{ nope }", "Cannot query field 'nope' on type 'Query'"),
        ("{ users { ...Nope } }", "Unknown fragment 'Nope'"),
        ("{ users { ... on Nope { id } } }", "Unknown type 'Nope'"),
        ("{ users { ...F } } fragment F on Nope { id }", "Unknown type 'Nope'"),
        ("mutation { users { id } }", "does not support mutation"),
    ],
)
def test_unknown_names_are_validation_errors(worked_schema, query, needle):
    with pytest.raises(InvalidQuery) as raised:
        analyze(worked_schema, query)
    assert raised.value.code == "GRAPHQL_VALIDATION_FAILED"
    assert needle in raised.value.message


# -- requireOneSlicingArgument -----------------------------------------------------------


def test_require_one_slicing_argument_with_none_given(require_one_schema):
    with pytest.raises(SlicingArgumentRequired) as raised:
        analyze(require_one_schema, "{ items { id } }")
    error = raised.value
    assert error.code == "SLICING_ARGUMENT_REQUIRED"
    assert "'Query.items'" in error.message
    assert "'first'" in error.message
    assert "'last'" in error.message
    assert "got 0" in error.message


def test_require_one_slicing_argument_with_both_given(require_one_schema):
    with pytest.raises(SlicingArgumentRequired) as raised:
        analyze(require_one_schema, "{ items(first: 2, last: 3) { id } }")
    assert raised.value.code == "SLICING_ARGUMENT_REQUIRED"
    assert "'Query.items'" in raised.value.message
    assert "got 2" in raised.value.message


def test_require_one_slicing_argument_with_a_null_variable(require_one_schema):
    with pytest.raises(SlicingArgumentRequired):
        analyze(
            require_one_schema,
            "query ($n: Int) { items(first: $n) { id } }",
            variables={"n": None},
        )


def test_require_one_slicing_argument_with_exactly_one(require_one_schema):
    assert analyze(require_one_schema, "{ items(last: 7) { id } }").cost == 7


# -- the sweep: nothing but CostAnalysisError or a report ----------------------------------

_OK = None
# graphql-core 3.3 parses an empty selection set (and the analyzer prices it); 3.2's parser
# refuses it as a syntax error.
_EMPTY_SELECTION_SET = _OK if graphql_version_info >= (3, 3) else QuerySyntaxError
_SHOP_SWEEP = [
    ("", QuerySyntaxError),
    ("{", QuerySyntaxError),
    ("}", QuerySyntaxError),
    ("\x00", QuerySyntaxError),
    ("query", QuerySyntaxError),
    ("{ product(id: ) { id } }", QuerySyntaxError),
    ("{ tags } }", QuerySyntaxError),
    ('{ tags(x: """unterminated) }', QuerySyntaxError),
    ("{ products(first: 3.5) { id } }", InvalidArgument),
    ('{ products(first: "3") { id } }', InvalidArgument),
    ("{ products(first: [1, 2]) { id } }", InvalidArgument),
    ("{ products(first: {a: 1}) { id } }", InvalidArgument),
    ("{ products(first: FOO) { id } }", InvalidArgument),
    ("{ products(first: 2147483648) { id } }", InvalidArgument),
    ("{ nodes(ids: null) { id } }", InvalidArgument),
    ("{ products(first: null) { id } }", _OK),
    ("{ products(first: $undefined) { id } }", _OK),
    ("{ products(first: 0) { id } }", _OK),
    ("{ }", _EMPTY_SELECTION_SET),
    ("{ product(id: 1) { } }", _EMPTY_SELECTION_SET),
    ("{ __typename }", _OK),
    ("{ __schema { types { name fields { name type { name } } } } }", _OK),
    ('{ __type(name: "Product") { name } }', _OK),
    ("{ products @skip(if: true) { id } }", _OK),
    ('{ products @include(if: "yes") { id } }', _OK),
    ("{ products @unknown { id } }", _OK),
    ("{ product(id: 1) { id { nope } } }", _OK),
    ("{ product(id: 1) }", _OK),
    ("{ product(id: 1) { ... on Vendor { name } } }", _OK),
    ("{ search(term: 5) { ... on Query { tags } } }", _OK),
    ("{ ... on Product { id } }", _OK),
    ("{ a: tags a: tags b: tags }", _OK),
    ("subscription { orderUpdates { id } }", _OK),
    ("subscription { nope }", InvalidQuery),
    ("{ orders { totalCount } }", SlicingArgumentRequired),
    ("{ orders(first: -1) { totalCount } }", InvalidArgument),
    ("query ($a: UnknownType) { tags }", InvalidVariables),
    ("query ($a: Product) { tags }", InvalidVariables),
    ('query ($a: Int = "x") { products(first: $a) { id } }', InvalidVariables),
    ('query ($a: String = "x") { products(first: $a) { id } }', InvalidArgument),
    ("query ($a: [Int] = [1, 2, 3]) { products(first: $a) { id } }", _OK),
    ("fragment A on Product { ...A } { tags }", _OK),
    ("{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }", FragmentCycle),
    ("query A { tags } query A { tags }", OperationResolutionError),
    ("type Product { id: ID }", OperationResolutionError),
]


@pytest.mark.parametrize(("query", "expected"), _SHOP_SWEEP)
def test_sweep_answers_with_a_cost_analysis_error_or_a_report(shop_schema, query, expected):
    try:
        document = parse(query)
    except GraphQLSyntaxError:  # only the string form can be tried
        documents: list[object] = [query]
    else:
        documents = [query, document]
    for form in documents:
        if expected is None:
            report = analyze(shop_schema, form)
            assert report.cost >= 0
            assert report.depth >= 1
            assert all(math.isfinite(value) for value in report.by_coordinate.values())
            continue
        # Anything but the expected CostAnalysisError (a RecursionError, TypeError,
        # KeyError, another error class) escapes pytest.raises and fails the test.
        with pytest.raises(expected) as raised:
            analyze(shop_schema, form)
        assert isinstance(raised.value, CostAnalysisError)
        assert raised.value.code
        assert raised.value.message
        assert raised.value.extensions["code"] == raised.value.code
