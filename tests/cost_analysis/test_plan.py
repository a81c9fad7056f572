"""The plan compiled once: what it is keyed by, what it reuses, and how it stays bounded."""

from __future__ import annotations

import dataclasses
import gc

import pytest
from graphql import parse

from quotaql.cost_analysis import CostModel, CostReport, actual_cost, analyze
from quotaql.cost_analysis._cache import plan_cache, plan_for
from quotaql.cost_analysis._compile import compiled_schema
from quotaql.cost_analysis._nodes import Field, Selection
from quotaql.cost_analysis.analyzer import parse_document
from quotaql.errors import InvalidVariables, SlicingArgumentRequired
from tests.cost_analysis.conftest import build

SCHEMA = build(
    """
    type Query {
      users(first: Int): [User] @listSize(slicingArguments: ["first"], requireOneSlicingArgument: false)
      user(id: ID!): User
    }
    type User { id: ID  name: String  friends(first: Int = 5): [User] }
    """
)
MODEL = CostModel()


def compiled():
    return compiled_schema(SCHEMA, MODEL)


def test_the_same_text_is_one_document_and_one_plan():
    text = "{ users(first: 3) { friends { id } } }"
    assert parse_document(text) is parse_document(text)
    document = parse_document(text)
    first = plan_for(compiled(), document, None, None)
    assert plan_for(compiled(), document, None, None) is first
    assert analyze(SCHEMA, text).cost == 18  # 3 × (1 + 5)
    # The report is the plan's: pricing it again builds nothing.
    assert analyze(SCHEMA, document) is first.report


def test_a_plan_is_keyed_by_the_variables_it_reads_and_only_those():
    document = parse(
        "query Q($n: Int, $id: ID!, $deep: Boolean!) {"
        " users(first: $n) { id friends @include(if: $deep) { id } }"
        " user(id: $id) { name } }"
    )
    one = plan_for(compiled(), document, None, {"n": 2, "id": "a", "deep": False})
    # $id changes no price: another id reuses the plan.
    assert plan_for(compiled(), document, None, {"n": 2, "id": "b", "deep": False}) is one
    # $n sizes a list and $deep includes a field: each value has its own plan.
    three = plan_for(compiled(), document, None, {"n": 3, "id": "a", "deep": False})
    deep = plan_for(compiled(), document, None, {"n": 2, "id": "a", "deep": True})
    assert (one.report.cost, three.report.cost, deep.report.cost) == (3, 4, 13)
    assert deep.report.depth == 3
    assert one.report.depth == 2
    # 1 and True and 1.0 are different values of a variable: never one another's plan.
    assert plan_for(compiled(), document, None, {"n": 1, "id": "a", "deep": False}).report.cost == 2


def test_invalid_variables_are_refused_even_when_the_plan_is_cached():
    document = parse(
        "query Q($id: ID!, $n: Int) { user(id: $id) { name } users(first: $n) { id } }"
    )
    assert analyze(SCHEMA, document, {"id": "1", "n": 1}).cost == 2
    # The plan for n=1 is cached; a missing required variable is still refused.
    with pytest.raises(InvalidVariables):
        analyze(SCHEMA, document, {"n": 1})
    with pytest.raises(InvalidVariables):
        analyze(SCHEMA, document, {"id": {"not": "an id"}, "n": 1})
    assert analyze(SCHEMA, document, {"id": "1", "n": 1}).cost == 2


def test_pricing_and_the_actual_cost_share_the_plan():
    text = "query Q($n: Int) { users(first: $n) { id friends(first: 2) { id } } }"
    report = analyze(SCHEMA, text, {"n": 3})
    data = {"users": [{"id": "1", "friends": [{"id": "2"}]}]}
    assert report.actual(data) == actual_cost(SCHEMA, text, data, {"n": 3}) == 2
    assert report.cost == 9  # 3 × (1 + 2)


def test_a_flood_of_distinct_documents_keeps_the_caches_bounded():
    cache = plan_cache(compiled())
    for i in range(2_000):
        analyze(SCHEMA, f"query Q{i} {{ users(first: {i % 7}) {{ id }} }}")
    assert len(cache) <= 512


def test_a_flood_of_variable_values_keeps_one_document_bounded():
    document = parse("query Q($n: Int) { users(first: $n) { id } }")
    for n in range(1_000):
        assert analyze(SCHEMA, document, {"n": n}).cost == n
    entry = plan_cache(compiled()).get(document, None)
    assert entry is not None
    assert len(entry.state[1]) <= 32
    assert len(entry.validated) <= 64


def test_a_plan_read_with_a_variable_is_not_reused_for_another_value_of_it():
    # The first plan reads no $n (the field is skipped); the next must not take it.
    document = parse(
        "query Q($skip: Boolean!, $n: Int) { users(first: $n) @skip(if: $skip) { id } }"
    )
    assert analyze(SCHEMA, document, {"skip": True, "n": 50}).cost == 0
    assert analyze(SCHEMA, document, {"skip": False, "n": 50}).cost == 50
    assert analyze(SCHEMA, document, {"skip": False, "n": 7}).cost == 7
    assert analyze(SCHEMA, document, {"skip": True, "n": 7}).cost == 0


def test_a_refusal_is_not_cached_as_a_plan():
    schema = build(
        'type Query { items(first: Int): [Item] @listSize(slicingArguments: ["first"]) }'
        " type Item { id: ID }"
    )
    document = parse("query Q($n: Int) { items(first: $n) { id } }")
    with pytest.raises(SlicingArgumentRequired, match="1 null, which sizes nothing"):
        analyze(schema, document, {"n": None})
    assert analyze(schema, document, {"n": 4}).cost == 4
    with pytest.raises(SlicingArgumentRequired):
        analyze(schema, document, {"n": None})


def test_a_hot_reloaded_model_gets_its_own_plans():
    document = parse("{ users(first: 2) { id } }")
    assert analyze(SCHEMA, document).cost == 2
    heavier = CostModel(weights={"User": 5})
    assert analyze(SCHEMA, document, model=heavier).cost == 10
    assert analyze(SCHEMA, document).cost == 2


def test_nested_variable_values_too_deep_to_key_are_still_priced_and_checked():
    schema = build(
        'input F { f: [F]  x: Boolean @cost(weight: "3") } type Query { p(f: F): String }'
    )
    value: dict[str, object] = {"x": True}
    for _ in range(80):  # deeper than the key's 64 levels, within graphql-core's limit
        value = {"f": [value]}
    report = analyze(schema, "query($f: F) { p(f: $f) }", {"f": value})
    assert report.cost == 81 + 3  # 81 input objects at 1, and x
    again = analyze(schema, "query($f: F) { p(f: $f) }", {"f": value})
    assert again.cost == report.cost


RELAY = build(
    """
    type Book { title: String }
    type BooksEdge { cursor: String!  node: Book! }
    type PageInfo { hasNextPage: Boolean! }
    type BooksConnection { pageInfo: PageInfo!  edges: [BooksEdge!]  nodes: [Book!]  totalCount: Int! }
    type Query { books(first: Int, after: String, last: Int, before: String): BooksConnection }
    """
)
RELAY_QUERY = (
    "{ books(first: 5) { edges { node { title } } nodes { title } pageInfo { hasNextPage }"
    " totalCount } }"
)


def test_the_model_and_the_connection_convention_come_from_quotaql_toml(tmp_path):
    from quotaql.config import load_cost_config

    path = tmp_path / "quotaql.toml"
    path.write_text('[cost]\nmodel = "ibm"\n', encoding="utf-8")
    ibm = load_cost_config(path).model
    # IBM: field cost books 1 + edges 1 + 5 node + nodes 1 + pageInfo 1 = 9; type cost
    # Query 1 + connection 1 + 5 edges + 5 books + 5 books + PageInfo 1 = 18.
    report = analyze(RELAY, RELAY_QUERY, model=ibm)
    assert (report.model, report.field_cost, report.type_cost, report.cost) == ("ibm", 9, 18, 18)
    # Apollo, the default: 1 + 5 × (1 + 1) + 5 × 1 + 1 = 17.
    assert analyze(RELAY, RELAY_QUERY).cost == 17

    path.write_text("[cost]\nconnections = false\n", encoding="utf-8")
    # Without the convention: edges and nodes at the default list size, 1 + 20 + 10 + 1.
    assert analyze(RELAY, RELAY_QUERY, model=load_cost_config(path).model).cost == 32
    path.write_text('[cost]\nconnections_exclude = ["BooksConnection"]\n', encoding="utf-8")
    assert analyze(RELAY, RELAY_QUERY, model=load_cost_config(path).model).cost == 32


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('model = "graphql"', "model"),
        ("connections = 1", "connections"),
        ('connections_exclude = "BooksConnection"', "connections_exclude"),
        ("tuning_sample = 2", "tuning_sample"),
    ],
)
def test_bad_model_settings_name_the_file_line_and_key(tmp_path, text, message):
    from quotaql.config import load_cost_config
    from quotaql.errors import ConfigError

    path = tmp_path / "quotaql.toml"
    path.write_text(f"[cost]\n{text}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_cost_config(path)
    assert str(raised.value).startswith(f"{path}:2: cost.{message}: expected")


def test_an_excluded_connection_type_must_exist():
    from quotaql.errors import ConfigError

    with pytest.raises(ConfigError, match="connections_exclude names no type 'Bookz'"):
        analyze(RELAY, RELAY_QUERY, model=CostModel(connections_exclude=frozenset({"Bookz"})))


def test_slicing_argument_default_value_stands_in_only_when_no_slicing_argument_is_given():
    schema = build(
        """
        type Book { title: String }
        type BooksConnection { nodes: [Book]  pageInfo: PageInfo }
        type PageInfo { hasNextPage: Boolean }
        type Query {
          books(first: Int, last: Int): BooksConnection @listSize(
            slicingArguments: ["first", "last"], sizedFields: ["nodes"],
            slicingArgumentDefaultValue: 10, requireOneSlicingArgument: false)
          required(first: Int, last: Int): BooksConnection @listSize(
            slicingArguments: ["first", "last"], sizedFields: ["nodes"],
            slicingArgumentDefaultValue: 10)
        }
        """
    )
    assert analyze(schema, "{ books(first: 5) { nodes { title } } }").cost == 1 + 5
    assert analyze(schema, "{ books { nodes { title } } }").cost == 1 + 10
    with pytest.raises(SlicingArgumentRequired):
        analyze(schema, "{ required { nodes { title } } }")


def test_a_plans_report_is_the_frozen_dataclass_its_constructor_would_make():
    # The plan fills its report's slots through their descriptors (not the dataclass's
    # __init__): every field is set, and the report is the one the constructor makes.
    report = analyze(SCHEMA, "query Named { users(first: 3) { friends { id } } }")
    values = {f.name: getattr(report, f.name) for f in dataclasses.fields(CostReport)}
    assert values["_plan"] is not None
    assert values["_by_coordinate"] is values["_root_costs"] is None  # not read yet
    made = CostReport(**values)
    assert made == report
    assert repr(made) == repr(report)
    assert hash(made) == hash(report)
    assert (report.cost, report.depth, report.operation_name) == (18, 3, "Named")
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.cost = 1.0  # type: ignore[misc]


def test_a_plan_the_cache_drops_is_freed_without_the_garbage_collector():
    # A plan and its report form no reference cycle: dropped, a plan's nodes go at once
    # (before, every plan waited for a collection, which each pricing paid for).
    def planned() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, Field | Selection))

    document = parse("{ users(first: 3) { id friends { id friends(first: 2) { id } } } }")
    plan_cache(compiled()).clear()  # the plans of other documents go first
    gc.collect()
    gc.disable()
    try:
        before = planned()
        report = analyze(SCHEMA, document)
        assert report.by_coordinate  # the plan walked once, as the gate's settle does
        assert report.actual({"users": [{"id": "1", "friends": []}]}) == 1
        assert planned() > before
        del report
        plan_cache(compiled()).clear()
        assert planned() == before
    finally:
        gc.enable()
