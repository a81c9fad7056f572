"""Price GraphQL operations before they run (pure: graphql-core only, no I/O).

>>> from graphql import build_schema
>>> from quotaql.cost_analysis import analyze
>>> schema = build_schema(
...     "type Query { users(first: Int = 10): [User] } type User { id: ID }"
... )
>>> report = analyze(schema, "{ users(first: 3) { id } }")
>>> report.cost, report.depth
(3.0, 2)
"""

from __future__ import annotations

from quotaql.cost_analysis.actual import actual_cost
from quotaql.cost_analysis.analyzer import CostReport, analyze, check_model
from quotaql.cost_analysis.model import CostLimits, CostModel, FieldCost

__all__ = [
    "CostLimits",
    "CostModel",
    "CostReport",
    "FieldCost",
    "actual_cost",
    "analyze",
    "check_model",
]
