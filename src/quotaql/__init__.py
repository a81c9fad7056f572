"""quotaql: protect GraphQL APIs by what each operation costs, not by how many requests arrive."""

from __future__ import annotations

from quotaql.errors import (
    ConfigError,
    CostAnalysisError,
    QueryTooComplex,
    QueryTooDeep,
    QuotaqlError,
    TooManyAliases,
    TooManyRootFields,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "CostAnalysisError",
    "QueryTooComplex",
    "QueryTooDeep",
    "QuotaqlError",
    "TooManyAliases",
    "TooManyRootFields",
    "__version__",
]
