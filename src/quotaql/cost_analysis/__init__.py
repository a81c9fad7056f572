"""Price GraphQL operations before they run (pure: graphql-core only, no I/O)."""

from __future__ import annotations

from quotaql.cost_analysis.model import CostLimits, CostModel, FieldCost

__all__ = ["CostLimits", "CostModel", "FieldCost"]
