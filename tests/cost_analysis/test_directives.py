"""@cost / @listSize: SDL, graphql-core directive objects and Strawberry schema directives."""

from __future__ import annotations

from typing import Annotated

import pytest
import strawberry
from graphql import GraphQLSchema, print_schema, specified_directives

from quotaql.cost_analysis import CostModel, analyze
from quotaql.cost_analysis.directives import (
    COST_DIRECTIVE,
    LIST_SIZE_DIRECTIVE,
    Cost,
    ListSize,
)
from quotaql.errors import ConfigError

from .conftest import build


@strawberry.type(directives=[Cost(weight="3")])
class Book:
    id: strawberry.ID
    title: str

    @strawberry.field(directives=[Cost(weight="7")])
    def summary(self) -> str:
        return ""


@strawberry.type
class BookEdge:
    node: Book


@strawberry.type
class BookConnection:
    edges: list[BookEdge]
    total: int


@strawberry.type
class Query:
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    def books(self, first: int = 10) -> list[Book]:
        return []

    @strawberry.field(directives=[ListSize(assumed_size=4)])
    def shelf(self) -> list[Book]:
        return []

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"], sized_fields=["edges"])])
    def connection(self, first: int) -> BookConnection:
        return BookConnection(edges=[], total=0)

    @strawberry.field
    def search(
        self,
        term: Annotated[str, strawberry.argument(directives=[Cost(weight="2")])],
    ) -> list[Book]:
        return []


def test_strawberry_directives_show_in_the_printed_sdl():
    sdl = strawberry.Schema(query=Query).as_str()
    assert 'type Book @cost(weight: "3")' in sdl
    assert 'summary: String! @cost(weight: "7")' in sdl
    assert 'books(first: Int! = 10): [Book!]! @listSize(slicingArguments: ["first"]' in sdl
    assert "directive @listSize(" in sdl


def test_strawberry_directives_price_the_schema():
    schema = strawberry.Schema(query=Query)
    assert analyze(schema, "{ books(first: 2) { id } }").cost == 2 * 3
    assert analyze(schema, "{ books(first: 2) { summary } }").cost == 2 * (3 + 7)
    assert analyze(schema, "{ shelf { id } }").cost == 4 * 3
    report = analyze(schema, "{ connection(first: 5) { edges { node { id } } total } }")
    assert report.cost == 1 + 5 * (1 + 3)
    assert analyze(schema, '{ search(term: "x") { id } }').cost == 2 + 10 * 3


def test_strawberry_list_size_requires_its_slicing_argument_by_default():
    schema = strawberry.Schema(query=Query)
    with pytest.raises(Exception, match="requires exactly one") as raised:
        analyze(schema, "{ connection { total } }")
    # GraphQL validation would also refuse the missing non-null argument; the analyzer
    # names the slicing rule instead of crashing.
    assert raised.value.code == "SLICING_ARGUMENT_REQUIRED"


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
