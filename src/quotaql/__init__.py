"""quotaql: protect GraphQL APIs by what each operation costs, not by how many requests arrive."""

from __future__ import annotations

from quotaql.errors import (
    ConfigError,
    CostAnalysisError,
    QueryTooComplex,
    QueryTooDeep,
    QuotaqlError,
    StorageError,
    TooManyAliases,
    TooManyRootFields,
)
from quotaql.limiter import AsyncLimiter, Limiter
from quotaql.limiter.breaker import CircuitBreaker
from quotaql.policy import Decision, Quota, QuotaStatus
from quotaql.storage import AsyncRedisStorage, MemoryStorage, RedisStorage

__version__ = "0.1.0"

__all__ = [
    "AsyncLimiter",
    "AsyncRedisStorage",
    "CircuitBreaker",
    "ConfigError",
    "CostAnalysisError",
    "Decision",
    "Limiter",
    "MemoryStorage",
    "QueryTooComplex",
    "QueryTooDeep",
    "Quota",
    "QuotaStatus",
    "QuotaqlError",
    "RedisStorage",
    "StorageError",
    "TooManyAliases",
    "TooManyRootFields",
    "__version__",
]
