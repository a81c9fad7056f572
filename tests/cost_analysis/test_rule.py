"""The graphql-core validation rule for servers that are not Strawberry."""

from __future__ import annotations

from graphql import graphql_sync, parse, specified_rules, validate

from quotaql.cost_analysis import CostLimits, CostModel
from quotaql.cost_analysis.rule import cost_limit_rule

LIMITS = CostLimits(max_cost=100, max_depth=3, max_aliases=2, max_root_fields=3)


def errors_for(schema, query, limits=LIMITS, model=None, on_report=None):
    rule = cost_limit_rule(limits, model or CostModel(), on_report)
    return validate(schema, parse(query), [*specified_rules, rule])


def test_operation_within_limits_passes_and_reports(worked_schema):
    reports = []
    assert errors_for(worked_schema, "{ users(first: 3) { id } }", on_report=reports.append) == []
    assert [(r.cost, r.depth) for r in reports] == [(3, 2)]


def test_each_static_limit_is_reported_with_its_code(worked_schema):
    cases = {
        "{ users(first: 101) { id } }": (
            "QUERY_TOO_COMPLEX",
            "Query cost 101 exceeds the maximum of 100",
        ),
        "{ users(first: 1) { friends(first: 1) { friends(first: 1) { id } } } }": (
            "QUERY_TOO_DEEP",
            "Query depth 4 exceeds the maximum of 3",
        ),
        "{ a: users(first: 1) { b: id c: id } }": (
            "TOO_MANY_ALIASES",
            "Number of aliases 3 exceeds the maximum of 2",
        ),
        # Root response keys, fragments expanded once each, namesakes merged, __typename
        # included: users, __typename, a, t.
        "{ users(first: 1) { id } __typename ...R ...R users(first: 1) { id } }"
        " fragment R on Query { a: users(first: 1) { id } t: __typename }": (
            "TOO_MANY_ROOT_FIELDS",
            "Number of root fields 4 exceeds the maximum of 3",
        ),
    }
    for query, (code, message) in cases.items():
        errors = errors_for(worked_schema, query)
        assert [(e.extensions["code"], e.message) for e in errors] == [(code, message)], query


def test_variables_count_with_their_defaults(worked_schema):
    assert errors_for(worked_schema, "query Q($n: Int = 200) { users(first: $n) { id } }")
    # Without a default the value is unknown at validation time: the schema default counts.
    assert errors_for(worked_schema, "query Q($n: Int) { users(first: $n) { id } }") == []


def test_skip_with_unknown_variable_counts_the_field(worked_schema):
    query = "query Q($s: Boolean!) { users(first: 150) @skip(if: $s) { id } }"
    assert [e.extensions["code"] for e in errors_for(worked_schema, query)] == ["QUERY_TOO_COMPLEX"]


def test_invalid_documents_are_left_to_the_specified_rules(worked_schema):
    errors = errors_for(worked_schema, "{ users { nope ...Missing } } fragment A on User { ...A }")
    codes = [e.extensions.get("code") if e.extensions else None for e in errors]
    assert "QUERY_TOO_COMPLEX" not in codes
    messages = " ".join(e.message for e in errors)
    assert "Cannot query field 'nope'" in messages
    assert "Unknown fragment 'Missing'" in messages
    assert "Cannot spread fragment 'A' within itself" in messages


def test_every_operation_in_the_document_is_checked(worked_schema):
    query = "query Cheap { users(first: 1) { id } } query Dear { users(first: 500) { id } }"
    errors = errors_for(worked_schema, query)
    assert len(errors) == 1
    assert errors[0].locations[0].line == 1
    assert errors[0].locations[0].column == query.index("query Dear") + 1


def test_rule_works_in_a_plain_graphql_core_server(worked_schema):
    # graphql_sync has no rules argument; validate first, as servers do.
    document = parse("{ users(first: 1000) { id } }")
    errors = validate(worked_schema, document, [*specified_rules, cost_limit_rule(LIMITS)])
    assert errors[0].extensions == {"code": "QUERY_TOO_COMPLEX", "cost": 1000.0, "limit": 100}
    assert graphql_sync(worked_schema, "{ users(first: 1) { id } }").errors is None


def test_namesakes_and_repeated_spreads_count_once(worked_schema):
    # Four root fields in the text, two response keys (`users` merged, `...R` expanded
    # once): within max_root_fields 3 and max_aliases 2.
    query = (
        "{ users(first: 1) { id } users(first: 1) { name } ...R ...R ...R }"
        " fragment R on Query { a: users(first: 1) { id } }"
    )
    reports = []
    assert errors_for(worked_schema, query, on_report=reports.append) == []
    assert [(r.root_fields, r.aliases, r.cost) for r in reports] == [(2, 1, 2)]
