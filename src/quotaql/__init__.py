"""quotaql: protect GraphQL APIs by what each operation costs, not by how many requests arrive.

The limiter layer (``Limiter``, the storages, ``Quota``) imports no graphql-core; the gate and
the configuration (``Gate``, ``load_config``, ``Config``) are imported when first used, so that
``import quotaql`` stays as light as the limiter layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from quotaql.config import Config, default_config, load_config
    from quotaql.gate import Gate, Operation

__version__ = "0.1.0"

# What is imported when first used: name -> its module.
_LAZY = {
    "Config": "quotaql.config",
    "Gate": "quotaql.gate",
    "Operation": "quotaql.gate",
    "default_config": "quotaql.config",
    "load_config": "quotaql.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'quotaql' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AsyncLimiter",
    "AsyncRedisStorage",
    "CircuitBreaker",
    "Config",
    "ConfigError",
    "CostAnalysisError",
    "Decision",
    "Gate",
    "Limiter",
    "MemoryStorage",
    "Operation",
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
    "default_config",
    "load_config",
]
