"""@cost / @listSize: SDL and graphql-core directive objects (Strawberry's: test_strawberry.py)."""

from __future__ import annotations

import pytest
from graphql import GraphQLSchema, print_schema, specified_directives

from quotaql.cost_analysis import CostModel, analyze
from quotaql.cost_analysis.directives import COST_DIRECTIVE, LIST_SIZE_DIRECTIVE
from quotaql.errors import ConfigError

from .conftest import build


def test_graphql_core_directive_objects_print_the_spec_definitions():
    schema = build("type Query { a: Int }")
    code_first = GraphQLSchema(
        query=schema.query_type,
        directives=[*specified_directives, COST_DIRECTIVE, LIST_SIZE_DIRECTIVE],
    )
    sdl = print_schema(code_first)
    assert "directive @cost(weight: String!) on ARGUMENT_DEFINITION" in sdl
    assert "requireOneSlicingArgument: Boolean = true" in sdl


def test_non_numeric_cost_weight_is_a_config_error():
    schema = build('type Query { a: Int @cost(weight: "heavy") }')
    with pytest.raises(ConfigError, match=r"@cost\(weight: 'heavy'\) on Query.a is not a number"):
        analyze(schema, "{ a }")


def test_negative_assumed_size_is_a_config_error():
    schema = build("type Query { a: [Int] @listSize(assumedSize: -1) }")
    with pytest.raises(ConfigError, match="negative"):
        analyze(schema, "{ a }")


def test_sized_field_that_does_not_exist_is_a_config_error():
    schema = build(
        'type Query { c(first: Int): Conn @listSize(slicingArguments: ["first"], sizedFields: ["edgs"]) }'
        " type Conn { edges: [Int] }"
    )
    with pytest.raises(ConfigError, match=r"'edgs'.*did you mean 'edges'"):
        analyze(schema, "{ c(first: 1) { edges } }", model=CostModel())
