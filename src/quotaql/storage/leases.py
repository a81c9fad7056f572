"""Concurrency limits: leases on a tenant's slots, in process memory or in Redis.

The names of the lease layer, from where they live: the contract (:class:`LeaseSpec`,
:class:`LeaseResult`, :data:`Leases`, :data:`AsyncLeases`) in :mod:`quotaql.storage.base`,
:class:`MemoryLeases` in :mod:`quotaql.storage.memory_leases`, :class:`RedisLeases` and
:class:`AsyncRedisLeases` in :mod:`quotaql.storage.redis_leases`, and the leases a process
holds (:func:`new_lease_id`, :class:`LeaseKeeper`) in :mod:`quotaql.storage.keeper`.
"""

from __future__ import annotations

from quotaql.storage.base import (
    MAX_LEASE_ID,
    MAX_TTL_MS,
    AsyncLeases,
    LeaseResult,
    Leases,
    LeaseSpec,
)
from quotaql.storage.keeper import RENEW_BATCH, LeaseKeeper, new_lease_id
from quotaql.storage.memory_leases import MemoryLeases
from quotaql.storage.redis_leases import (
    AsyncRedisLeases,
    RedisLeases,
    lease_key,
    lease_script_source,
)

__all__ = [
    "MAX_LEASE_ID",
    "MAX_TTL_MS",
    "RENEW_BATCH",
    "AsyncLeases",
    "AsyncRedisLeases",
    "LeaseKeeper",
    "LeaseResult",
    "LeaseSpec",
    "Leases",
    "MemoryLeases",
    "RedisLeases",
    "lease_key",
    "lease_script_source",
    "new_lease_id",
]
