"""Lease sets in Redis or Redis Cluster: :class:`RedisLeases` and :class:`AsyncRedisLeases`.

A lease set is a ZSET, ``<prefix>:{t:<tenant>}:~c:<limit>`` (the tenant's hash tag: its rate
quotas and its lease sets share one slot), member = lease id, score = expiry in ms of the
Redis clock (``TIME``); one call of ``lua/leases.lua`` per operation, through the rate
storage's :meth:`~quotaql.storage.redis.RedisStorage.evaluate` (``NOSCRIPT``, error mapping to
:class:`~quotaql.errors.StorageError`, the async deadline). Each key's TTL is raised to the
longest ttl given to it, never lowered: an idle tenant's sets disappear.
"""

from __future__ import annotations

import inspect
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from quotaql.storage.base import LeaseResult, check_count, check_release, check_renew, check_take
from quotaql.storage.keys import redis_key_base

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.storage.base import LeaseSpec, Now, Tenant

__all__ = ["AsyncRedisLeases", "RedisLeases", "lease_key", "lease_script_source"]

# A script call's KEYS and ARGV.
_Request = tuple[list[str], list[str]]


@cache
def lease_script_source() -> str:
    """The Lua script of the lease sets (``lua/leases.lua``, after the clock it shares with
    the rate scripts)."""
    folder = resources.files("quotaql.storage") / "lua"
    return "\n".join(
        folder.joinpath(f"{part}.lua").read_text(encoding="utf-8") for part in ("_clock", "leases")
    )


def lease_key(prefix: str, tenant: str | None, name: str) -> str:
    """The Redis key of a lease set: ``<prefix>:{t:<tenant>}:~c:<name>`` (``~`` is in no
    quota name, so no lease set is a quota's state)."""
    return f"{redis_key_base(prefix, tenant)}~c:{name}"


def _when(now: int | None) -> str:
    return "" if now is None else str(now)


def _take_request(
    prefix: str,
    tenant: str | None,
    specs: Sequence[LeaseSpec],
    lease: str,
    ttl_ms: int,
    now: int | None,
) -> _Request:
    check_take(specs, lease, ttl_ms, now)
    base = redis_key_base(prefix, tenant) + "~c:"
    keys = [base + spec.name for spec in specs]
    return keys, ["take", _when(now), str(ttl_ms), lease, *(str(spec.maximum) for spec in specs)]


def _taken(raw: list[Any], specs: Sequence[LeaseSpec]) -> LeaseResult:
    at, refused, wait, *counts = raw
    if refused == 0:
        return LeaseResult(True, None, tuple(counts), None, at)
    return LeaseResult(False, specs[refused - 1].name, tuple(counts), wait, at)


def _release_request(
    prefix: str, tenant: str | None, names: Sequence[str], lease: str, now: int | None
) -> _Request:
    names = check_release(names, lease, now)
    base = redis_key_base(prefix, tenant) + "~c:"
    return [base + name for name in names], ["release", _when(now), lease]


def _renew_request(
    prefix: str,
    tenant: str | None,
    names: Sequence[str],
    leases: Sequence[str],
    ttl_ms: int,
    now: int | None,
) -> _Request | None:
    """KEYS and ARGV of a renew, or None when there is nothing to renew."""
    names, leases = check_renew(names, leases, ttl_ms, now)
    if not leases:
        return None
    base = redis_key_base(prefix, tenant) + "~c:"
    return [base + name for name in names], ["renew", _when(now), str(ttl_ms), *leases]


def _count_request(prefix: str, tenant: str | None, name: str, now: int | None) -> _Request:
    name = check_count(name, now)
    return [lease_key(prefix, tenant, name)], ["count", _when(now)]


class _RedisLeases:
    """What the sync and async lease stores share: the rate storage whose connections, key
    prefix, timeout and error mapping they use, and their script."""

    __slots__ = ("_script", "prefix", "storage")
    name = "redis"
    fallible = True
    _async = False  # the colour of the storage's evaluate it needs
    _needs = "a RedisStorage"

    def __init__(self, storage: Any) -> None:
        evaluate = getattr(storage, "evaluate", None)
        if (
            evaluate is None
            or inspect.iscoroutinefunction(evaluate) is not self._async
            or not isinstance(getattr(storage, "prefix", None), str)
        ):
            raise TypeError(
                f"{type(self).__name__} needs {self._needs}, got {type(storage).__name__}"
            )
        self.storage = storage
        self.prefix: str = storage.prefix
        self._script = storage.client.register_script(lease_script_source())

    def _evaluate(self, request: _Request) -> Any:
        """The script's reply to ``request`` (an awaitable of it, async)."""
        return self.storage.evaluate(self._script, *request)


class RedisLeases(_RedisLeases):
    """Lease sets in Redis or Redis Cluster, through a
    :class:`~quotaql.storage.redis.RedisStorage` (its private client, its prefix, its timeout
    and error mapping): one ``EVALSHA`` per call.

    Args:
        storage: the storage whose connections and key prefix the leases use.
    """

    __slots__ = ()

    def take(
        self, key: Tenant, specs: Sequence[LeaseSpec], lease: str, ttl_ms: int, now: Now = None
    ) -> LeaseResult:
        request = _take_request(self.prefix, key, specs, lease, ttl_ms, now)
        return _taken(self._evaluate(request), specs)

    def release(self, key: Tenant, names: Sequence[str], lease: str, now: Now = None) -> int:
        held: int = self._evaluate(_release_request(self.prefix, key, names, lease, now))[1]
        return held

    def renew(
        self, key: Tenant, names: Sequence[str], leases: Sequence[str], ttl_ms: int, now: Now = None
    ) -> int:
        request = _renew_request(self.prefix, key, names, leases, ttl_ms, now)
        renewed: int = 0 if request is None else self._evaluate(request)[1]
        return renewed

    def count(self, key: Tenant, name: str, now: Now = None) -> int:
        live: int = self._evaluate(_count_request(self.prefix, key, name, now))[1]
        return live


class AsyncRedisLeases(_RedisLeases):
    """:class:`RedisLeases` for asyncio, through an
    :class:`~quotaql.storage.redis.AsyncRedisStorage` (its deadline bounds each call).

    Args:
        storage: the storage whose connections and key prefix the leases use.
    """

    __slots__ = ()
    _async = True
    _needs = "an AsyncRedisStorage"

    async def take(
        self, key: Tenant, specs: Sequence[LeaseSpec], lease: str, ttl_ms: int, now: Now = None
    ) -> LeaseResult:
        request = _take_request(self.prefix, key, specs, lease, ttl_ms, now)
        return _taken(await self._evaluate(request), specs)

    async def release(self, key: Tenant, names: Sequence[str], lease: str, now: Now = None) -> int:
        request = _release_request(self.prefix, key, names, lease, now)
        held: int = (await self._evaluate(request))[1]
        return held

    async def renew(
        self, key: Tenant, names: Sequence[str], leases: Sequence[str], ttl_ms: int, now: Now = None
    ) -> int:
        request = _renew_request(self.prefix, key, names, leases, ttl_ms, now)
        if request is None:
            return 0
        renewed: int = (await self._evaluate(request))[1]
        return renewed

    async def count(self, key: Tenant, name: str, now: Now = None) -> int:
        live: int = (await self._evaluate(_count_request(self.prefix, key, name, now)))[1]
        return live
