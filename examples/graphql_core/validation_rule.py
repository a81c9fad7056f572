"""Static limits only: quotaql's ``cost_limit_rule`` as one more graphql-core validation rule.

For a server that wants to refuse documents that are too deep or too expensive and has no
budgets to debit (no limiter, no Redis): add the rule to ``graphql.validate``. Validation
sees no variables, so depth, aliases and root fields are exact and the cost counts
variables at their declared defaults; ``app.py`` prices each request exactly instead.

    python examples/graphql_core/validation_rule.py
"""

from __future__ import annotations

from pathlib import Path

from graphql import GraphQLError, build_schema, parse, specified_rules, validate

from quotaql.config import load_cost_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.cost_analysis.rule import cost_limit_rule

HERE = Path(__file__).parent
SCHEMA = build_schema(COST_DIRECTIVES_SDL + (HERE / "schema.graphql").read_text())

# The [cost] table of the same quotaql.toml: max_cost = 1000, max_depth = 5.
# (Or by hand: CostLimits(max_cost=1000, max_depth=5).)
cost = load_cost_config(HERE / "quotaql.toml")
RULES = [*specified_rules, cost_limit_rule(cost.limits, cost.model)]


def check(query: str) -> list[GraphQLError]:
    """The validation errors of ``query``: graphql-core's own and quotaql's limits."""
    return validate(SCHEMA, parse(query), RULES)


if __name__ == "__main__":
    for query in (
        "{ books(first: 3) { title reviews { stars } } }",  # 3 x (2 + 5 x 1) = 21: fine
        "{ books(first: 600) { title } }",  # 600 x 2 = 1200 > 1000
        "{ books { similar { similar { similar { similar { title } } } } } }",  # depth 6 > 5
    ):
        print(query)
        for error in check(query):
            print(f"  -> {error.extensions.get('code')}: {error.message}")
