"""Graphene 3 (graphql-core 3.2): its schemas priced, counted, weighted by coordinate, gated.

Graphene needs graphql-core < 3.3, so this package runs in ``make pytest-gql32`` only
(the main run leaves tests/adapters/graphene3 out).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import graphene
import graphql
import pytest
from graphene import relay
from graphql import execute, parse, validate

from quotaql._graphql_compat import HAS_PARSER_LIMITS
from quotaql.config import load_config
from quotaql.cost_analysis import CostLimits, actual_cost, analyze, check_model
from quotaql.errors import ConfigError, QueryTooLarge
from quotaql.gate import Gate

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "graphql-core.md"
_TOML = re.compile(r"^```toml\n(.*?)^```", re.DOTALL | re.MULTILINE)


class Review(graphene.ObjectType):
    stars = graphene.Int()


class Book(graphene.ObjectType):
    title = graphene.String()
    reviews = graphene.List(Review, first=graphene.Int(default_value=5))

    @staticmethod  # Graphene passes the parent object first: the book
    def resolve_reviews(book, info, first):
        return [Review(stars=5 - number) for number in range(min(first, 2))]  # two each


class BookConnection(relay.Connection):
    class Meta:
        node = Book


BOOKS = [Book(title=f"Book {number}") for number in range(12)]


class Query(graphene.ObjectType):
    books = graphene.List(Book, first=graphene.Int(default_value=10))
    shelf = graphene.List(Book)
    book_connection = relay.ConnectionField(BookConnection)

    @staticmethod
    def resolve_books(root, info, first):
        return BOOKS[:first]

    @staticmethod
    def resolve_shelf(root, info):
        return BOOKS[:3]

    @staticmethod
    def resolve_book_connection(root, info, **arguments):
        return BOOKS  # Graphene slices the list by first / last / after / before


SCHEMA = graphene.Schema(query=Query)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """quotaql.toml: the ``[cost.weights]`` that docs/graphql-core.md gives for Graphene."""
    (weights,) = _TOML.findall(PAGE.read_text(encoding="utf-8"))
    path = tmp_path / "quotaql.toml"
    path.write_text(weights, encoding="utf-8")
    return path


def run(query: str, variables: dict[str, object] | None = None) -> object:
    """What Graphene's resolvers return, through graphql-core on the parsed document."""
    document = parse(query)
    assert validate(SCHEMA.graphql_schema, document) == []
    result = execute(SCHEMA.graphql_schema, document, variable_values=variables)
    assert result.errors is None, result.errors
    return result.data


def test_this_environment_is_graphql_core_3_2_with_the_parser_limits():
    assert graphql.version_info < (3, 3)
    assert graphql.version_info >= (3, 2, 14)
    assert HAS_PARSER_LIMITS
    with pytest.raises(QueryTooLarge) as raised:
        analyze(SCHEMA, "{ books { title reviews { stars } } }", limits=CostLimits(max_tokens=5))
    assert raised.value.extensions == {"code": "QUERY_TOO_LARGE", "value": 6, "limit": 5}


def test_a_graphene_schema_is_priced_like_its_graphql_core_schema():
    query = "{ books(first: 3) { title reviews { stars } } }"
    # 3 books × (1 + 5 reviews, first's default, × 1): the naming convention sizes both.
    assert analyze(SCHEMA, query).cost == 3 * (1 + 5)
    assert analyze(SCHEMA.graphql_schema, query).cost == 3 * (1 + 5)
    assert actual_cost(SCHEMA, query, run(query)) == 3 * (1 + 2)


def test_argument_defaults_from_graphene_size_the_lists():
    # Graphene sets GraphQLArgument.default_value (graphql-core 3.2 has no `default`).
    assert SCHEMA.graphql_schema.query_type.fields["books"].args["first"].default_value == 10
    report = analyze(SCHEMA, "{ books { title } }")
    assert report.cost == 10
    assert report.by_coordinate == {"Query.books": 10}
    assert actual_cost(SCHEMA, "{ books { title } }", run("{ books { title } }")) == 10


def test_variables_are_coerced_by_graphql_core_3_2():
    query = "query Page($n: Int = 4) { books(first: $n) { title } }"
    assert analyze(SCHEMA, query).cost == 4
    assert analyze(SCHEMA, query, {"n": 7}).cost == 7
    assert actual_cost(SCHEMA, query, run(query, {"n": 7}), {"n": 7}) == 7


def test_weights_by_coordinate_price_graphene_fields(config_file: Path):
    model = load_config(config_file).cost.model
    check_model(SCHEMA, model)
    # A book weighs 2; reviews keep the default weight of their type (1).
    assert analyze(SCHEMA, "{ books(first: 3) { title } }", model=model).cost == 3 * 2
    # shelf: no slicing argument, assumed_size 50; three came back.
    query = "{ shelf { title } }"
    assert analyze(SCHEMA, query, model=model).cost == 50 * 2
    assert actual_cost(SCHEMA, query, run(query), model=model) == 3 * 2


def test_a_relay_connection_is_sized_by_its_slicing_arguments(config_file: Path):
    model = load_config(config_file).cost.model
    query = "{ bookConnection(first: 4) { edges { node { title } } pageInfo { hasNextPage } } }"
    # The connection (1) + 4 edges × (an edge 1 + its book 2) + pageInfo (1).
    assert analyze(SCHEMA, query, model=model).cost == 1 + 4 * (1 + 2) + 1
    data = run(query)
    assert len(data["bookConnection"]["edges"]) == 4
    assert actual_cost(SCHEMA, query, data, model=model) == 1 + 4 * (1 + 2) + 1
    # `last` sizes it too; without either, the default list size (10) does.
    assert analyze(
        SCHEMA, "{ bookConnection(last: 2) { edges { cursor } } }", model=model
    ).cost == (1 + 2 * 1)
    assert analyze(SCHEMA, "{ bookConnection { edges { cursor } } }", model=model).cost == 1 + 10


def test_a_weight_on_a_coordinate_graphene_does_not_have_names_the_close_ones(tmp_path: Path):
    path = tmp_path / "quotaql.toml"
    path.write_text('[cost.weights]\n"Query.book_connection" = 5\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"'Query\.bookConnection'") as raised:
        check_model(SCHEMA, load_config(path).cost.model)
    assert raised.value.line == 2


def test_the_gate_admits_runs_settles_and_refuses_a_graphene_operation(tmp_path: Path):
    path = tmp_path / "quotaql.toml"
    path.write_text(
        textwrap.dedent("""
            [tiers.free]
            capacity = 30
            refill_per_second = 0.5

            [cost.weights]
            "Book" = 2
        """),
        encoding="utf-8",
    )
    gate = Gate.from_config(path)
    request = {"type": "http", "client": ("203.0.113.9", 5123), "headers": []}
    query = "{ books(first: 4) { title reviews { stars } } }"  # 4 × (2 + 5) = 28
    document = parse(query)
    op = gate.admit(SCHEMA, document, request=request)  # the graphene.Schema itself
    assert not op.refused
    assert op.subject.key == "ip:203.0.113.9"
    result = execute(SCHEMA.graphql_schema, document)
    gate.settle(op, result.data)
    gate.finish(op)
    cost = gate.results(op)["cost"]
    assert (cost["requestedQueryCost"], cost["actualQueryCost"]) == (28, 4 * (2 + 2))
    assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(30 - 16, abs=0.5)
    assert op.headers["RateLimit-Policy"] == '"tenant";q=30;w=60'

    again = gate.admit(SCHEMA, document, request=request)  # 28 > the 14 left
    assert again.refused
    assert again.status == 429
    assert again.errors[0].extensions["code"] == "RATE_LIMITED"
    # 14 short at 0.5/s: 28 s, plus up to retry_jitter (10 %) of it, never less.
    assert 28 <= int(again.headers["Retry-After"]) <= 31
    gate.finish(again)


def test_check_config_takes_a_graphene_schema(config_file: Path, tmp_path: Path):
    module = tmp_path / "bookshop.py"
    module.write_text(
        "from tests.adapters.graphene3.test_graphene import SCHEMA as schema\n", encoding="utf-8"
    )
    command = [sys.executable, "-m", "quotaql.cli", "check-config", "--schema", "bookshop:schema"]
    done = subprocess.run(
        [*command, str(config_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"OK: {config_file}: 3 weights")
