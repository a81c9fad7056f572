"""What differs between graphql-core 3.2 and 3.3, and what quotaql makes of it on both.

This module runs in both environments (``make pytest``: graphql-core 3.3; ``make
pytest-gql32``: 3.2). Parsers older than 3.2.14 (no parser limits, no nesting guard) are
not installable with quotaql's pin; their paths are exercised by standing in for them.
"""

from __future__ import annotations

import types

import graphql
import pytest
from graphql import GraphQLArgument, GraphQLBoolean, GraphQLInt, build_schema, parse

from quotaql import _graphql_compat as compat
from quotaql.config import load_config
from quotaql.cost_analysis import CostLimits, CostModel, analyze
from quotaql.cost_analysis import analyzer as analyzer_module
from quotaql.cost_analysis import model as model_module
from quotaql.cost_analysis.directives import LIST_SIZE_DIRECTIVE
from quotaql.errors import ConfigError, InvalidVariables, QuerySyntaxError, QueryTooDeep

from .conftest import build


def test_the_installed_graphql_core_has_the_parser_limits():
    # The pin (>=3.2.14, !=3.3.0, !=3.3.1) admits only releases that have them.
    assert compat.HAS_PARSER_LIMITS
    assert compat.PARSER_NESTING == 200
    assert graphql.__version__ == compat.GRAPHQL_CORE_VERSION


def test_parser_limits_on_a_graphql_core_without_them_are_a_config_error(monkeypatch, tmp_path):
    monkeypatch.setattr(model_module, "HAS_PARSER_LIMITS", False)
    for limits in ({"max_tokens": 1000}, {"max_length": 100_000}):
        with pytest.raises(ConfigError, match=r"need graphql-core 3\.2\.14 or later") as raised:
            CostLimits(**limits)
        assert f"graphql-core {graphql.__version__} is installed" in str(raised.value)
    assert CostLimits(max_cost=100, max_depth=5).max_depth == 5  # the others need nothing
    config = tmp_path / "quotaql.toml"
    config.write_text("[cost]\nmax_depth = 5\nmax_length = 1000\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="need graphql-core") as raised:
        load_config(config)  # refused when the file is read, not on the first request
    assert raised.value.file == str(config)


@pytest.fixture
def parser_without_a_nesting_guard(monkeypatch):
    """graphql-core < 3.2.14: parse() has no limits and recurses until the stack runs out."""

    def parse_until_the_stack_runs_out(source):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(analyzer_module, "HAS_PARSER_LIMITS", False)
    monkeypatch.setattr(analyzer_module, "parse", parse_until_the_stack_runs_out)


@pytest.mark.usefixtures("parser_without_a_nesting_guard")
def test_an_old_parser_running_out_of_stack_is_query_too_deep(worked_schema):
    query = "{ users { " + "friends { " * 300 + "id" + " }" * 300 + " } }"
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, query)
    assert raised.value.value == 302
    assert raised.value.value > raised.value.limit  # a limit the client can act on
    assert f"graphql-core {graphql.__version__}" in raised.value.message
    with pytest.raises(QueryTooDeep) as raised:
        analyze(worked_schema, query, limits=CostLimits(max_depth=12))
    assert (raised.value.value, raised.value.limit) == (302, 12)


def test_an_old_parser_still_parses_what_fits(monkeypatch, worked_schema):
    seen = []

    def parse_without_limits(source):
        seen.append(source)
        return parse(source)

    monkeypatch.setattr(analyzer_module, "HAS_PARSER_LIMITS", False)
    monkeypatch.setattr(analyzer_module, "parse", parse_without_limits)
    assert analyze(worked_schema, "{ users(first: 3) { id } }").cost == 3
    assert seen == ["{ users(first: 3) { id } }"]


def test_an_empty_selection_set_parses_on_3_3_only(shop_schema):
    if graphql.version_info >= (3, 3):
        assert analyze(shop_schema, "{ }").cost == 0
    else:
        with pytest.raises(QuerySyntaxError, match="Expected Name, found '}'"):
            analyze(shop_schema, "{ }")


def test_an_invalid_variable_default_is_invalid_variables_on_every_version(shop_schema):
    # graphql-core 3.3 reports it; 3.2 coerces it to Undefined, which quotaql reports.
    query = 'query ($a: Int = "x") { products(first: $a) { id } }'
    with pytest.raises(InvalidVariables, match=r"Variable '\$a' has invalid default value"):
        analyze(shop_schema, query)
    assert analyze(shop_schema, query, {"a": 4}).cost == 4 * 2  # a value given: no default


def test_argument_defaults_read_alike_from_sdl_and_code():
    schema = build_schema("type Query { books(first: Int = 10, sort: Boolean): [Int] }")
    arguments = schema.query_type.fields["books"].args
    assert compat.argument_default(arguments["first"]) == 10
    assert compat.argument_default(arguments["sort"]) is graphql.Undefined
    assert compat.argument_default(compat.argument_with_default(GraphQLInt, 7)) == 7
    assert compat.argument_default(GraphQLArgument(GraphQLBoolean)) is graphql.Undefined
    require_one = LIST_SIZE_DIRECTIVE.args["requireOneSlicingArgument"]
    assert compat.argument_default(require_one) is True


def test_slicing_defaults_size_lists_in_sdl_and_code_first_schemas(worked_schema):
    assert analyze(worked_schema, "{ users { id } }").cost == 10  # first: Int = 10
    code_first = graphql.GraphQLSchema(
        query=graphql.GraphQLObjectType(
            "Query",
            {
                "items": graphql.GraphQLField(
                    graphql.GraphQLList(GraphQLInt),
                    args={"first": compat.argument_with_default(GraphQLInt, 6)},
                )
            },
        )
    )
    model = CostModel(weights={"Query.items": 1.0})  # each item weighs 1
    assert analyze(code_first, "{ items }", model=model).cost == 6
    assert analyze(code_first, "{ items(first: 2) }", model=model).cost == 2


def test_a_schema_is_found_behind_strawberry_and_graphene_wrappers():
    schema = build("type Query { a: Int }")
    graphene_like = types.SimpleNamespace(graphql_schema=schema)  # graphene.Schema's attribute
    strawberry_like = types.SimpleNamespace(_schema=schema)  # strawberry.Schema's
    for wrapper in (schema, graphene_like, strawberry_like):
        assert analyze(wrapper, "{ a }").cost == 0
    with pytest.raises(TypeError, match=r"a strawberry\.Schema or a graphene\.Schema, got dict"):
        analyze({}, "{ a }")
