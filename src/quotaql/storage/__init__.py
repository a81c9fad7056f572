"""Where quota state lives: process memory (the default) or Redis / Redis Cluster."""

from __future__ import annotations

from quotaql.storage.base import AsyncStorage, Debit, Storage
from quotaql.storage.leases import (
    AsyncRedisLeases,
    LeaseKeeper,
    LeaseSpec,
    MemoryLeases,
    RedisLeases,
)
from quotaql.storage.memory import MemoryStorage
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage

__all__ = [
    "AsyncRedisLeases",
    "AsyncRedisStorage",
    "AsyncStorage",
    "Debit",
    "LeaseKeeper",
    "LeaseSpec",
    "MemoryLeases",
    "MemoryStorage",
    "RedisLeases",
    "RedisStorage",
    "Storage",
]
