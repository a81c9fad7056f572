"""The gate's start: a Redis storage's server checked before the first request (its eviction
policy, :mod:`quotaql.storage.eviction`), with what ``[redis]`` allows."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from quotaql.errors import EvictionRefused, StorageError

if TYPE_CHECKING:
    from quotaql.config import Config
    from quotaql.instrumentation.metrics import PrometheusMetrics

__all__ = ["check", "check_async", "configure"]


def _checks_eviction(storage: object) -> bool:
    """Whether ``storage`` checks its server's eviction policy (the Redis storages)."""
    return callable(getattr(storage, "check_eviction", None))


def configure(storage: Any, config: Config) -> None:
    """Tell a Redis storage what ``[redis] allow_eviction`` allows: allowed by the storage
    (``RedisStorage(allow_eviction=True)``) or by the file, it is allowed. A reload that
    allows it lets a refused storage check again at its next call; one that takes it back
    changes nothing until the process restarts (a check that passed is not made again)."""
    if config.redis.allow_eviction and _checks_eviction(storage):
        storage.allow_eviction = True


def check(storage: Any, metrics: PrometheusMetrics | None) -> None:
    """At the gate's construction: export the storage's verdict, and check a sync Redis
    storage's server now, so that an evicting one stops the application from starting (an
    async storage is checked by :func:`check_async`, or at its first call).

    Raises:
        EvictionRefused: the server may evict quotaql's keys, and nothing allows it.
    """
    if not _checks_eviction(storage):
        return
    if metrics is not None:
        metrics.watch_eviction(storage)
    if inspect.iscoroutinefunction(storage.check_eviction):
        return
    try:
        storage.check_eviction()
    except EvictionRefused:
        raise
    except StorageError:
        pass  # not reached now (the fail mode's business): its first call checks


async def check_async(storage: Any) -> None:
    """At start-up on an event loop (the ASGI lifespan): check the storage's server now.

    Raises:
        EvictionRefused: the server may evict quotaql's keys, and nothing allows it.
    """
    if not _checks_eviction(storage) or storage.eviction.passed:
        return
    try:
        if inspect.iscoroutinefunction(storage.check_eviction):
            await storage.check_eviction()
        else:
            storage.check_eviction()
    except EvictionRefused:
        raise
    except StorageError:
        pass  # not reached now: its first call checks
