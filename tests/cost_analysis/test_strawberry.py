"""Strawberry schemas: the ``Cost`` / ``ListSize`` schema directives, priced and counted.

Needs ``quotaql[strawberry]`` (graphql-core 3.3): the graphql-core 3.2 run
(``make pytest-gql32``) leaves this module out; everything else in tests/cost_analysis
runs there too.
"""

from __future__ import annotations

from typing import Annotated

import pytest
import strawberry

from quotaql.cost_analysis import actual_cost, analyze
from quotaql.cost_analysis.directives import Cost, ListSize


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


# -- actual_cost on a Strawberry schema that ran ----------------------------------------

BOOKS = [Book(id=strawberry.ID(str(i)), title=f"b{i}") for i in range(4)]


@strawberry.type
class Library:
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    def books(self, first: int = 10) -> list[Book]:
        return BOOKS[:first]

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"], sized_fields=["edges"])])
    def connection(self, first: int) -> BookConnection:
        return BookConnection(edges=[BookEdge(node=b) for b in BOOKS[:first]], total=len(BOOKS))

    @strawberry.field
    def search(
        self, term: Annotated[str, strawberry.argument(directives=[Cost(weight="2")])]
    ) -> list[Book] | None:
        return None


def test_a_strawberry_execution():
    schema = strawberry.Schema(query=Library)
    query = """
    { books(first: 6) { title }
      connection(first: 3) { edges { node { id } } total }
      search(term: "x") { id } }
    """
    result = schema.execute_sync(query)
    assert result.errors is None
    # books 6 × 3; connection 1 + 3 edges × (1 + 3); search 2 + 10 × 3.
    assert analyze(schema, query).cost == 18 + 13 + 32
    # books: only 4 exist (4 × 3); connection: 3 edges as estimated; search returned
    # null: its argument and its own weight (2 + 3).
    assert actual_cost(schema, query, result.data) == 12 + 13 + 5


@strawberry.interface
class Feed:
    @strawberry.field(directives=[ListSize(slicing_arguments=["count"])])
    def items(self, count: int = 10) -> list[Book]:
        return []


@strawberry.type
class Timeline(Feed):
    @strawberry.field  # no @listSize of its own: it sizes as the interface's field does
    def items(self, count: int = 10) -> list[Book]:
        return []


@strawberry.type
class FeedQuery:
    @strawberry.field
    def feed(self) -> Feed:
        return Timeline()


def test_list_size_on_an_interface_field_sizes_its_implementations():
    schema = strawberry.Schema(query=FeedQuery, types=[Timeline])
    # Book weighs 3: 3 items on the interface, and 3 when spelled on the implementation.
    assert analyze(schema, "{ feed { items(count: 3) { id } } }").cost == 1 + 3 * 3
    assert analyze(schema, "{ feed { ... on Timeline { items(count: 3) { id } } } }").cost == 10
