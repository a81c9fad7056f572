"""Strawberry's federation ``Cost`` / ``ListSize`` and quotaql's own under ``@link``.

Needs ``quotaql[strawberry]`` (graphql-core 3.3): the graphql-core 3.2 run
(``make pytest-gql32``) leaves this module out. No ``from __future__ import annotations``:
the Strawberry types are local to their functions, so their annotations must be evaluated
where they are written.
"""

import pytest
import strawberry
from graphql import build_schema
from strawberry.federation import schema_directives as directives

from quotaql.cost_analysis import analyze
from quotaql.cost_analysis.directives import (
    ListSizeValues,
    directive_names,
    read_cost,
    read_list_size,
)
from quotaql.errors import ConfigError
from tests.cost_analysis.test_link import LINK_SDL, QUERY, definitions, field

# --- Strawberry --------------------------------------------------------------------------


def strawberry_federation():
    """Strawberry, with its federation ``Cost`` / ``ListSize`` (the installed one has them)."""
    assert hasattr(directives, "Cost"), "this Strawberry has no federation Cost"
    assert hasattr(directives, "ListSize"), "this Strawberry has no federation ListSize"
    return strawberry, directives


def federation_schema(version: str = "2.9"):
    """A ``strawberry.federation.Schema`` using Strawberry's own federation directives."""
    strawberry, directives = strawberry_federation()

    @strawberry.type
    class Item:
        id: strawberry.ID

    @strawberry.type
    class ItemPage:
        edges: list[Item]

    @strawberry.type
    class Query:
        @strawberry.field(directives=[directives.Cost(weight=20)])
        def expensive(self) -> int:
            return 1

        @strawberry.field(directives=[directives.ListSize(assumed_size=3)])
        def items(self) -> list[Item]:
            return []

        @strawberry.field(
            directives=[
                directives.ListSize(
                    slicing_arguments=["first"],
                    sized_fields=["edges"],
                    require_one_slicing_argument=False,
                )
            ]
        )
        def page(self, first: int = 5) -> ItemPage:
            return ItemPage(edges=[])

    return strawberry.federation.Schema(query=Query, federation_version=version)


def quotaql_federation_schema():
    """A ``strawberry.federation.Schema`` using quotaql's ``Cost`` / ``ListSize`` and ``@key``."""
    from quotaql.cost_analysis.directives import Cost, ListSize

    @strawberry.federation.type(keys=["id"])
    class Item:
        id: strawberry.ID

    @strawberry.type
    class Query:
        @strawberry.field(directives=[Cost(weight="20")])
        def expensive(self) -> int:
            return 1

        @strawberry.field(directives=[ListSize(assumed_size=3, slicing_argument_default_value=7)])
        def items(self) -> list[Item]:
            return []

    return strawberry.federation.Schema(query=Query, federation_version="2.11")


def test_strawberry_federation_cost_and_list_size_are_read():
    schema = federation_schema()._schema
    assert directive_names(schema) == ("cost", "listSize")  # no AST: the objects are read
    assert read_cost(field(schema, "expensive"), "Query.expensive") == 20.0
    assert read_list_size(field(schema, "items"), "Query.items") == ListSizeValues(assumed_size=3)
    assert read_list_size(field(schema, "page"), "Query.page") == ListSizeValues(
        slicing_arguments=("first",), sized_fields=("edges",), require_one_slicing_argument=False
    )
    assert read_cost(field(schema, "items"), "Query.items") is None
    assert read_list_size(field(schema, "expensive"), "Query.expensive") is None


def test_strawberry_directives_are_read_whatever_name_the_link_gives():
    schema = federation_schema()._schema
    assert read_cost(field(schema, "expensive"), "Query.expensive", "federation__cost") == 20.0
    assert read_list_size(field(schema, "items"), "Query.items", "myListSize") == ListSizeValues(
        assumed_size=3
    )


def test_strawberry_federation_cost_that_is_not_a_number_is_a_config_error():
    strawberry, directives = strawberry_federation()

    @strawberry.type
    class Query:
        @strawberry.field(directives=[directives.Cost(weight="heavy")])
        def a(self) -> int:
            return 1

    schema = strawberry.federation.Schema(query=Query, federation_version="2.9")._schema
    with pytest.raises(ConfigError, match=r"@cost\(weight: 'heavy'\) on Query\.a is not a number"):
        read_cost(field(schema, "a"), "Query.a")


def test_quotaql_strawberry_list_size_carries_slicing_argument_default_value():
    schema = quotaql_federation_schema()
    assert read_list_size(field(schema._schema, "items"), "Query.items") == ListSizeValues(
        assumed_size=3, slicing_argument_default_value=7
    )
    sdl = schema.as_str()
    assert "slicingArgumentDefaultValue: Int" in sdl
    assert (
        "@listSize(assumedSize: 3, requireOneSlicingArgument: true, slicingArgumentDefaultValue: 7)"
        in sdl
    )


def test_a_printed_strawberry_federation_schema_with_its_link_builds_and_is_read():
    printed = federation_schema().as_str()
    assert (
        '@link(url: "https://specs.apollo.dev/federation/v2.9", import: ["@cost", "@listSize"])'
        in printed
    )
    schema = build_schema(LINK_SDL + definitions("cost", "listSize") + printed)
    names = directive_names(schema)
    assert names == ("cost", "listSize")
    assert read_cost(field(schema, "expensive"), "Query.expensive", names.cost) == 20.0
    assert read_list_size(field(schema, "items"), "Query.items", names.list_size) == ListSizeValues(
        assumed_size=3
    )


def test_a_printed_strawberry_federation_schema_using_quotaqls_directives_is_read():
    # The printed @link imports only @key: federation__cost is not declared, so the
    # @cost quotaql's classes print (and declare) is read.
    printed = quotaql_federation_schema().as_str()
    assert 'import: ["@key"]' in printed
    schema = build_schema(
        LINK_SDL + "scalar _FieldSet directive @key(fields: _FieldSet!, resolvable: Boolean = true)"
        " repeatable on OBJECT | INTERFACE\n" + printed
    )
    names = directive_names(schema)
    assert names == ("cost", "listSize")
    assert read_cost(field(schema, "expensive"), "Query.expensive", names.cost) == 20.0
    assert read_list_size(field(schema, "items"), "Query.items", names.list_size) == ListSizeValues(
        assumed_size=3, slicing_argument_default_value=7
    )


def test_e2e_strawberry_federation_directives_are_priced():
    schema = federation_schema()
    assert analyze(schema, QUERY).cost == 23


def test_e2e_strawberry_federation_schema_with_quotaqls_directives_is_priced():
    assert analyze(quotaql_federation_schema(), QUERY).cost == 23


def test_e2e_printed_strawberry_federation_schema_is_priced():
    printed = federation_schema().as_str()
    assert (
        analyze(build_schema(LINK_SDL + definitions("cost", "listSize") + printed), QUERY).cost
        == 23
    )
