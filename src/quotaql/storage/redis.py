"""Quota state in Redis or Redis Cluster: one Lua script call per decision.

The Lua scripts under ``lua/`` are the source of truth in Redis: one file per algorithm,
mirroring :mod:`quotaql.policy.algorithms`, and a driver that checks every quota of one
key and debits all of them or none. The script reads the server's clock (``TIME``), so a
fleet of application servers with skewed clocks agrees.

A tenant's buckets and windows are the fields of one hash, ``<prefix>:{t:<tenant>}:~q``
(and one per user scope, ``~u:<scope>``), so a decision over several quotas reads and
writes each hash once; a sliding log keeps its own two keys. One hash tag per tenant: all
its keys share one Redis Cluster slot and one script call covers them. Tenants outside a
safe alphabet (or long ones) are hashed, ``{h:<sha256>}``; shared quotas live under
``{global}``. Every key carries a TTL: an idle tenant costs nothing once its bucket is full.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from quotaql.errors import StorageTimeout
from quotaql.policy.quota import ALGORITHM_NAMES, Decision, Quota, combine, decide_one
from quotaql.storage._pipeline import Pipeline, PipelineSettings, storage_error
from quotaql.storage.base import Debit, check_arguments
from quotaql.storage.eviction import EvictionCheck, EvictionGuard
from quotaql.storage.keys import redis_key_base
from quotaql.storage.redis_leases import AsyncRedisLeases, RedisLeases

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

    from quotaql.storage._cluster_pipeline import ClusterPipelines


__all__ = ["AsyncRedisStorage", "RedisStorage", "redis_key", "script_source"]

DEFAULT_TIMEOUT = 0.05  # seconds per call: a limiter must answer fast or not at all
# AsyncRedisStorage's deadline (see _Deadline). An asyncio timer runs late by the selector's
# granularity (epoll: 1 ms, rounded up) plus the callbacks queued ahead of it in the same
# iteration: measured 0.4 ms (p99) on an idle loop, 8 ms with a hundred busy tasks. A timer
# that runs later than a fifth of the timeout (10 ms of the default 50), and never less than
# 2 ms, past its time means the loop itself was held up for that long: a stall, not Redis.
STALL_TOLERANCE_SHARE = 0.2
MIN_STALL_TOLERANCE = 0.002
# Fresh periods one call may get for stalls: a call that meets a stall in each of its round
# trips needs one each (connecting, EVALSHA, after NOSCRIPT the SCRIPT LOAD and EVALSHA
# again); past them the next expiry is final, so a dead Redis behind a loop that keeps
# stalling fails after at most 1 + 3 periods (plus the stalls).
MAX_STALL_EXTENSIONS = 3
_FIELDS_PER_QUOTA = 5


@cache
def script_source(algorithms: tuple[str, ...] = ALGORITHM_NAMES) -> str:
    """The Lua script for quotas of these ``algorithms``, assembled from the package's ``lua/``.

    Each call runs the whole script, definitions included, so a storage registers one
    script per set of algorithms it meets: a token bucket alone runs only its own code.

    Raises:
        ValueError: an unknown algorithm.
    """
    unknown = set(algorithms).difference(ALGORITHM_NAMES)
    if unknown:
        raise ValueError(f"unknown algorithms: {', '.join(sorted(unknown))}")
    parts = [
        "_clock",
        "_common",
        *(name for name in ALGORITHM_NAMES if name in algorithms),
        "driver",
    ]
    folder = resources.files("quotaql.storage") / "lua"
    return "\n".join(folder.joinpath(f"{part}.lua").read_text(encoding="utf-8") for part in parts)


def redis_key(prefix: str, tenant: str | None, quota: Quota) -> str:
    """The key that holds ``quota``'s state for ``tenant`` (``None``: the shared,
    platform-wide scope): the hash of its state group, whose field
    :attr:`~quotaql.Quota.state_field` is the state, or a sliding log's ZSET (its total is
    in the same key with ``#log`` appended)."""
    group = quota.state_group
    return redis_key_base(prefix, tenant) + (quota.state_name if group is None else group)


def _request(prefix: str, mode: str, debit: Debit) -> tuple[list[str], list[str]]:
    """The script's KEYS and ARGV for ``debit`` (see lua/driver.lua)."""
    tenant, amount, quotas, now, amounts, at, turn = debit
    base = redis_key_base(prefix, tenant)
    if amounts is not None and len(amounts) == 1:
        amount, amounts = amounts[0], None
    if len(quotas) == 1:  # the common case
        quota = quotas[0]
        group = quota.state_group
        if group is not None:
            keys = [base + group]
            if quota.max_queued:  # "#" is not allowed in quota names: no clash
                keys.append(base + quota.state_name + "#w")
        else:
            key = base + quota.state_name
            keys = [key, key + "#log"]
        specs = quota.script_spec
    else:
        keys = []
        parts = []
        for quota in quotas:
            group = quota.state_group
            if group is None:  # a sliding log: its own two keys
                key = base + quota.state_name
                keys.append(key)
                keys.append(key + "#log")
                parts.append(f"{quota.script_args} {len(keys) - 1} -")
                continue
            key = base + group
            if key in keys:
                place = keys.index(key) + 1
            else:
                keys.append(key)
                place = len(keys)
            if quota.max_queued:  # its waiting requests' set: a key of its own
                keys.append(base + quota.state_name + "#w")
                delay = f"{quota.check_params[2]}:{quota.max_queued}:{len(keys)}"
                parts.append(f"{quota.script_head} {delay} {place} {quota.state_field}")
            else:
                parts.append(f"{quota.script_args} {place} {quota.state_field}")
        specs = " ".join(parts)
    if amounts is None:
        text = repr(float(amount))
    else:  # one amount per quota
        text = " ".join(repr(float(each)) for each in amounts)
    args = [mode, text, "" if now is None else str(int(now)), specs]
    if at is not None or turn is not None:
        args.append("" if at is None else str(int(at)))
    if turn is not None:
        args.append(str(int(turn)))
    return keys, args


def _decision(
    raw: list[Any], quotas: Sequence[Quota], cost: float, costs: Sequence[float] | None = None
) -> Decision:
    """The decision from the script's reply: ``now``, then five values per quota."""
    if len(quotas) == 1 and costs is None:  # the common case: the decision straight from the reply
        now, allowed, exceeds, remaining, retry, reset = raw
        return decide_one(
            quotas[0], allowed == 1, exceeds == 1, float(remaining), retry, reset, cost, "redis",
            now,
        )  # fmt: skip
    checks = [
        (raw[i] == 1, raw[i + 1] == 1, None, float(raw[i + 2]), raw[i + 3], raw[i + 4], 0)
        for i in range(1, len(raw), _FIELDS_PER_QUOTA)
    ]
    return combine(quotas, checks, cost, "redis", costs, raw[0] if raw else None)


def _gives(debit: Debit) -> bool:
    """Whether a refund or a charge gives any quota an amount (else no call is made)."""
    return bool(debit.quotas) and (
        debit.amount > 0 if debit.amounts is None else any(debit.amounts)
    )


def _is_cluster(client: Any) -> bool:
    return hasattr(client, "nodes_manager") or hasattr(client, "get_nodes")


def _hardened(client: Any, timeout: float) -> Any:
    """A client like ``client`` (same servers, auth, TLS) that fails fast.

    redis-py's defaults (5 s socket timeout, 10 retries with backoff) suit a cache, not
    a limiter in front of every request: a dead Redis would stall each request for
    seconds. The limiter's circuit breaker handles failures; the client must not retry.
    """
    import redis  # noqa: PLC0415
    import redis.cluster  # noqa: PLC0415
    from redis.retry import Retry  # noqa: PLC0415

    return _rebuilt(client, redis, redis.cluster, Retry, timeout)


def _hardened_async(client: Any, timeout: float) -> Any:
    """:func:`_hardened` for a ``redis.asyncio`` client, without socket timeouts.

    No socket timeouts at all, not even the application's: each call, connecting included,
    is bounded by the storage's own deadline (_Deadline), which tells a stalled event loop
    from a silent Redis; redis.asyncio's timeouts are plain asyncio timeouts, which a loop
    blocked for longer than them trips although Redis answered in time (and redis.asyncio
    pays for a socket timeout with an extra task per command).
    """
    del timeout
    import redis.asyncio  # noqa: PLC0415
    import redis.asyncio.cluster  # noqa: PLC0415
    from redis.asyncio.retry import Retry  # noqa: PLC0415

    return _rebuilt(client, redis.asyncio, redis.asyncio.cluster, Retry, None)


def _rebuilt(
    client: Any, api: ModuleType, cluster_api: ModuleType, retry: Any, timeout: float | None
) -> Any:
    """A new client of ``api`` (``redis`` or ``redis.asyncio``; ``cluster_api``, its
    cluster module, for a cluster client) on ``client``'s servers with ``client``'s
    credentials and TLS, ``timeout`` as its socket timeouts and no retries (``retry``: the
    ``Retry`` class of ``api``)."""
    from redis.backoff import NoBackoff  # noqa: PLC0415

    overrides: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": retry(NoBackoff(), 0),
    }
    if _is_cluster(client):
        # An asyncio cluster client not initialized yet knows only its startup nodes.
        nodes = client.get_nodes() or client.nodes_manager.startup_nodes.values()
        return cluster_api.RedisCluster(
            startup_nodes=[cluster_api.ClusterNode(node.host, node.port) for node in nodes],
            **_cluster_kwargs(client.get_connection_kwargs()),
            **overrides,
        )
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, **overrides}
    return api.Redis(
        connection_pool=api.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


# Connection settings of a cluster client that its constructor takes back.
_CLUSTER_KWARGS = (
    "username",
    "password",
    "credential_provider",
    "ssl",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_check_hostname",
    "client_name",
    "encoding",
    "encoding_errors",
    "protocol",
)


def _cluster_kwargs(connection_kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        name: connection_kwargs[name]
        for name in _CLUSTER_KWARGS
        if connection_kwargs.get(name) is not None
    }


class _RedisBase:
    """What the sync and async Redis storages share: options, private client, script."""

    name = "redis"
    fallible = True
    pipelined = False
    _harden = staticmethod(_hardened)

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "quotaql",
        timeout: float = DEFAULT_TIMEOUT,
        allow_eviction: bool = False,
    ) -> None:
        _check_options(prefix, timeout)
        if not isinstance(allow_eviction, bool):
            raise ValueError(f"allow_eviction must be True or False, got {allow_eviction!r}")
        # redis is an optional extra
        from redis.exceptions import (  # noqa: PLC0415
            AskError,
            ClusterError,
            NoScriptError,
            RedisClusterException,
            RedisError,
            ResponseError,
            TryAgainError,
        )

        # Caught around every call: looked up once, here. A cluster none of whose nodes
        # answers raises RedisClusterException, which is not a RedisError.
        self._errors = (RedisError, RedisClusterException)
        self._noscript = NoScriptError
        self._response_error = ResponseError
        self._not_forbidden = (ClusterError, AskError, TryAgainError)  # a cluster's own replies
        self.client = self._harden(client, timeout)
        self.prefix = prefix
        self.timeout = timeout
        self._scripts: dict[str, Any] = {}  # one registered script per set of algorithms
        self.eviction = EvictionGuard(allow_eviction)
        """The eviction check (storage/eviction.py): ``eviction.check`` is what it found."""

    @property
    def allow_eviction(self) -> bool:
        """Whether the storage runs on a Redis that may evict its keys (an evicted budget
        is a full one: docs/operations.md); ``[redis] allow_eviction`` sets it too."""
        return self.eviction.allowed

    @allow_eviction.setter
    def allow_eviction(self, allowed: bool) -> None:
        self.eviction.allowed = bool(allowed)

    def _forbidden(self, error: BaseException) -> bool:
        """Whether ``error``, answered to ``CONFIG GET``, means the command is not allowed
        here (an ACL, a renamed or disabled command: an error reply that is not a cluster's
        redirection or outage)."""
        return isinstance(error, self._response_error) and not isinstance(
            error, self._not_forbidden
        )

    def _masters(self) -> list[tuple[str, Any]]:
        """Each server to check: its name, and the ``target_nodes`` of its call (None for a
        single server)."""
        if _is_cluster(self.client):
            return [(node.name, node) for node in self.client.get_primaries()]
        kwargs = self.client.connection_pool.connection_kwargs
        where = (
            kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        )
        return [(str(where), None)]

    def script_for(self, quotas: Sequence[Quota]) -> Any:
        """The registered script (redis-py ``Script``/``AsyncScript``) for these quotas."""
        if len(quotas) == 1:
            name: str = quotas[0].algorithm
        else:
            name = " ".join(sorted({quota.algorithm for quota in quotas}))
        script = self._scripts.get(name)
        if script is None:
            script = self.client.register_script(script_source(tuple(name.split())))
            self._scripts[name] = script
        return script

    def _send(self, mode: str, debit: Debit) -> Any:
        """The script call of one operation: its reply (sync), or an awaitable of it (async).

        The one body of both storages' ``acquire``, ``refund``, ``charge`` and ``peek``: they
        differ only in waiting for it.
        """
        keys, args = _request(self.prefix, mode, debit)
        return self.evaluate(self.script_for(debit.quotas), keys, args)

    def evaluate(self, script: Any, keys: Sequence[str], args: Sequence[str]) -> Any:
        """Run a registered ``script`` on ``keys`` and ``args`` (each storage's own)."""
        raise NotImplementedError


class RedisStorage(_RedisBase):
    """Quota state in Redis or Redis Cluster (``redis.Redis`` / ``redis.cluster.RedisCluster``).

    Every decision is one ``EVALSHA`` (the script is loaded again after a ``NOSCRIPT``,
    e.g. after a restart or a failover). Failures raise :class:`~quotaql.errors.StorageError`
    (:class:`~quotaql.errors.StorageTimeout` past ``timeout``); the limiter turns them into
    its fail mode.

    Args:
        client: the application's client; the storage talks to the same servers with the
            same credentials through a private connection pool that has ``timeout`` as its
            socket timeouts and no retries (the limiter's breaker handles failures).
        prefix: the first part of every key.
        timeout: seconds one call may take.

    A stalled worker is no timeout here, unlike with a plain ``asyncio`` timeout (see
    :class:`AsyncRedisStorage`): a socket timeout is a ``poll()`` in the kernel, made with
    the GIL released. A reply that arrives in time makes the socket ready, and it stays
    ready however long the thread then waits to get the GIL back (another thread holding
    it, a slow C extension): CPython reads it without looking at the clock again. A stall
    before a read only delays the read, whose timeout starts when it does. Only a signal
    handled during the wait (the wait restarts with what is left of the timeout) could
    count a stall against Redis.
    """

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisStorage:
        """A storage on ``redis://...`` (or ``rediss://``)."""
        import redis  # noqa: PLC0415

        return cls(redis.Redis.from_url(url), **kwargs)

    def acquire(self, debit: Debit) -> Decision:
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        raw = self._send("acquire", debit) if debit.quotas else []
        return _decision(raw, debit.quotas, debit.amount, debit.amounts)

    def refund(self, debit: Debit) -> None:
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        if _gives(debit):
            self._send("refund", debit)

    def charge(self, debit: Debit) -> None:
        """Debit every quota of ``debit.key`` its amount whether it fits or not: a bucket may
        go below empty (another region's admissions, applied here)."""
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        if _gives(debit):
            self._send("charge", debit)

    def peek(self, key: str | None, quotas: Sequence[Quota], now: int | None = None) -> Decision:
        check_arguments(0, quotas)
        raw = self._send("peek", Debit(key, 0.0, quotas, now)) if quotas else []
        return _decision(raw, quotas, 0.0)

    def leases(self) -> RedisLeases:
        """A new :class:`~quotaql.storage.redis_leases.RedisLeases` on this storage."""
        return RedisLeases(self)

    def check_eviction(self) -> EvictionCheck:
        """Read ``maxmemory`` and ``maxmemory-policy`` from the server (every master of a
        cluster) now, and judge them (storage/eviction.py); made before the first call.

        Raises:
            EvictionRefused: a server may evict quotaql's keys, and ``allow_eviction`` is
                not set.
            StorageError: no server answered.
        """
        replies: list[tuple[str, object]] = []
        for name, node in self._masters():
            try:
                if node is None:
                    reply = self.client.execute_command("CONFIG GET", "maxmemory*")
                else:
                    reply = self.client.execute_command(
                        "CONFIG GET", "maxmemory*", target_nodes=node
                    )
            except self._errors as exc:
                reply = exc
            replies.append((name, reply))
        return self.eviction.judge(replies, self._forbidden)

    def close(self) -> None:
        """Close the storage's private connections."""
        self.client.close()
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None:  # a pool passed in is not closed by the client itself
            pool.disconnect()

    def evaluate(self, script: Any, keys: Sequence[str], args: Sequence[str]) -> Any:
        """Run a registered ``script`` (``self.client.register_script(source)``) on ``keys``
        and ``args``: one ``EVALSHA``, loaded again after a ``NOSCRIPT``.

        Raises:
            StorageError: Redis failed (:class:`StorageTimeout` past ``timeout``).
        """
        # EVALSHA itself rather than through Script.__call__, whose per-call work (an import,
        # argument copies, two more layers) costs ~3 µs a decision; NOSCRIPT is handled the
        # same way: load the script, call again.
        if not self.eviction.passed and self.eviction.must_check():
            self.check_eviction()  # the first call: is the server safe to keep budgets in?
        execute = self.client.execute_command
        try:
            try:
                return execute("EVALSHA", script.sha, len(keys), *keys, *args)
            except self._noscript:
                script.sha = self.client.script_load(script.script)
                return execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except self._errors as exc:
            raise storage_error(exc) from exc


class AsyncRedisStorage(_RedisBase):
    """:class:`RedisStorage` for asyncio (``redis.asyncio.Redis`` / ``RedisCluster``).

    ``timeout`` bounds each call (connecting included) with a deadline that tells a stalled
    event loop from a silent Redis: time the loop spent blocked by other work does not count
    against Redis (see :class:`_Deadline`), so a worker stall is not taken for an outage.

    The calls an event loop makes at once are pipelined (:mod:`quotaql.storage._pipeline`):
    queued, and sent at the end of the loop iteration as one write on one of
    ``pipeline_connections`` connections of the storage's own, at most ``pipeline_limit`` per
    write. Under load, batches grow while the connections are busy; beyond
    ``pipeline_queue_max`` waiting calls, a call fails at once (the fail mode answers it). On
    a Redis Cluster each master has such a pipeline, and its connections: a call goes to the
    master of its slot, MOVED / ASK / TRYAGAIN are followed per call, and a master's failure
    fails only its calls (:mod:`quotaql.storage._cluster_pipeline`). ``pipeline=False``
    makes one call per connection of the pool at a time.
    """

    _harden = staticmethod(_hardened_async)

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "quotaql",
        timeout: float = DEFAULT_TIMEOUT,
        pipeline: bool = True,
        pipeline_limit: int = 128,
        pipeline_connections: int = 2,
        pipeline_queue_max: int = 10_000,
        allow_eviction: bool = False,
    ) -> None:
        if not isinstance(pipeline, bool):
            raise ValueError(f"pipeline must be True or False, got {pipeline!r}")
        for name, value in (
            ("pipeline_limit", pipeline_limit),
            ("pipeline_connections", pipeline_connections),
            ("pipeline_queue_max", pipeline_queue_max),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        super().__init__(client, prefix=prefix, timeout=timeout, allow_eviction=allow_eviction)
        self._checking: asyncio.Task[EvictionCheck] | None = None  # the check under way
        self._stall_tolerance = max(timeout * STALL_TOLERANCE_SHARE, MIN_STALL_TOLERANCE)
        self._cluster = _is_cluster(self.client)
        self.pipelined = pipeline
        # The event loop on which the cluster client was initialized (see _discover).
        self._ready: weakref.ref[asyncio.AbstractEventLoop] | None = None
        # What the pipeline of each event loop is made with (see _pipeline_for).
        self._pipeline_settings: PipelineSettings | None = None
        if self.pipelined:
            tolerance = self._stall_tolerance

            def deadline(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> _Deadline:
                return _Deadline(loop, task, timeout, tolerance)

            self._pipeline_settings = PipelineSettings(
                # A cluster's masters each have their own (storage/_cluster_pipeline.py).
                make_connection=_no_connection
                if self._cluster
                else self.client.connection_pool.make_connection,
                deadline=deadline,
                timeout=timeout,
                errors=self._errors,
                noscript=self._noscript,
                limit=pipeline_limit,
                connections=pipeline_connections,
                queue_max=pipeline_queue_max,
            )
        self._pipeline: Pipeline | ClusterPipelines | None = None
        # One per event loop that used the storage.
        self._pipelines: list[Pipeline | ClusterPipelines] = []

    @property
    def pipeline(self) -> Pipeline | ClusterPipelines | None:
        """The pipeline of the event loop that last used the storage (None: not pipelined,
        or not used yet); on a Redis Cluster, its masters' pipelines."""
        return self._pipeline

    def _pipeline_for(self, loop: asyncio.AbstractEventLoop) -> Pipeline | ClusterPipelines:
        settings = self._pipeline_settings
        assert settings is not None  # made in __init__ for a pipelined storage
        pipeline: Pipeline | ClusterPipelines
        if self._cluster:
            from quotaql.storage._cluster_pipeline import ClusterPipelines  # noqa: PLC0415

            pipeline = ClusterPipelines(loop, settings, self.client)
        else:
            pipeline = Pipeline(loop, settings)
        self._pipeline = pipeline
        # A closed loop's pipeline is never used again: kept, its connections would stay
        # open, more with every loop (asyncio.run per job); abandoned, Redis lets go of them.
        kept: list[Pipeline | ClusterPipelines] = []
        for each in self._pipelines:
            if each.loop.is_closed():
                each.abandon()
            elif not each.closed:
                kept.append(each)
        kept.append(pipeline)
        self._pipelines = kept
        return pipeline

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> AsyncRedisStorage:
        """A storage on ``redis://...`` (or ``rediss://``)."""
        import redis.asyncio  # noqa: PLC0415

        return cls(redis.asyncio.Redis.from_url(url), **kwargs)

    async def acquire(self, debit: Debit) -> Decision:
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        raw = await self._send("acquire", debit) if debit.quotas else []
        return _decision(raw, debit.quotas, debit.amount, debit.amounts)

    async def refund(self, debit: Debit) -> None:
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        if _gives(debit):
            await self._send("refund", debit)

    async def charge(self, debit: Debit) -> None:
        """:meth:`RedisStorage.charge` for asyncio."""
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        if _gives(debit):
            await self._send("charge", debit)

    async def peek(
        self, key: str | None, quotas: Sequence[Quota], now: int | None = None
    ) -> Decision:
        check_arguments(0, quotas)
        raw = await self._send("peek", Debit(key, 0.0, quotas, now)) if quotas else []
        return _decision(raw, quotas, 0.0)

    def leases(self) -> AsyncRedisLeases:
        """A new :class:`~quotaql.storage.redis_leases.AsyncRedisLeases` on this storage."""
        return AsyncRedisLeases(self)

    async def check_eviction(self) -> EvictionCheck:
        """:meth:`RedisStorage.check_eviction` for asyncio: the calls that come while a
        check is under way wait for it (one check, not one per call); each server's answer
        is bounded by ``timeout``."""
        loop = asyncio.get_running_loop()
        task = self._checking
        if task is None or task.get_loop() is not loop:
            task = self._checking = loop.create_task(self._check_eviction())
            task.add_done_callback(self._checked)
        # Shielded: a caller cancelled (its client left) does not cancel the others' check.
        return await asyncio.shield(task)

    def _checked(self, task: asyncio.Task[EvictionCheck]) -> None:
        if self._checking is task:
            self._checking = None
        if not task.cancelled():
            task.exception()  # retrieved: its callers had it, or all of them left

    async def _check_eviction(self) -> EvictionCheck:
        try:
            async with asyncio.timeout(self.timeout):
                if self._cluster:
                    await self.client.initialize()  # its masters are known once it is
        except (TimeoutError, *self._errors) as exc:
            raise storage_error(_timed_out(exc)) from exc
        masters = self._masters()
        replies = await asyncio.gather(*(self._config_get(node) for _, node in masters))
        return self.eviction.judge(
            [(name, reply) for (name, _), reply in zip(masters, replies, strict=True)],
            self._forbidden,
        )

    async def _config_get(self, node: Any) -> object:
        """One server's ``CONFIG GET maxmemory*`` (``node``: a cluster's master, or None),
        within ``timeout``: its reply, or the error it raised."""
        try:
            async with asyncio.timeout(self.timeout):
                if node is not None:
                    reply: object = await self.client.execute_command(
                        "CONFIG GET", "maxmemory*", target_nodes=node
                    )
                    return reply
                # A connection of its own, closed after: the client's pool serves no call
                # of a pipelined storage, and a connection it kept would belong to this
                # event loop after it closed (asyncio.run per job).
                connection = self.client.connection_pool.make_connection()
                try:
                    await connection.connect()
                    await connection.send_command("CONFIG", "GET", "maxmemory*")
                    reply = await connection.read_response()
                finally:
                    await connection.disconnect()
        except (TimeoutError, *self._errors) as exc:
            return _timed_out(exc)
        return reply

    async def close(self) -> None:
        """Close the storage's private connections."""
        for pipeline in self._pipelines:  # every loop's (another loop's connections are dead)
            with contextlib.suppress(Exception):
                await pipeline.close()
        self._pipelines.clear()
        if self._cluster:
            await self.client.aclose()
        else:  # a pool passed in is not closed by the client unless asked
            await self.client.aclose(close_connection_pool=True)

    async def evaluate(self, script: Any, keys: Sequence[str], args: Sequence[str]) -> Any:
        """:meth:`RedisStorage.evaluate` for asyncio, bounded by the storage's deadline (and
        pipelined with the loop's other calls)."""
        if not self.eviction.passed and self.eviction.must_check():
            await self.check_eviction()  # the first call: is the server safe for budgets?
        if self.pipelined:
            loop = asyncio.get_running_loop()
            pipeline = self._pipeline
            if pipeline is None or pipeline.loop is not loop:
                if self._cluster:
                    await self._discover(loop)
                    pipeline = self._pipeline  # made meanwhile by another call?
                if pipeline is None or pipeline.loop is not loop:
                    pipeline = self._pipeline_for(loop)
            return await pipeline.submit(script, keys, args)
        execute = self.client.execute_command  # see RedisStorage.evaluate
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("AsyncRedisStorage must be called from an asyncio task")
        if self._cluster:
            await self._discover(loop)
        deadline = _Deadline(loop, task, self.timeout, self._stall_tolerance)
        try:
            try:
                return await execute("EVALSHA", script.sha, len(keys), *keys, *args)
            except self._noscript:
                script.sha = await self._load(script, keys)
                return await execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except asyncio.CancelledError:
            if deadline.expired and deadline.withdraw():  # our own cancellation: a timeout
                raise StorageTimeout(f"Redis did not answer within {self.timeout:g} s") from None
            raise
        except self._errors as exc:
            raise storage_error(exc) from exc
        finally:
            deadline.disarm()

    async def _load(self, script: Any, keys: Sequence[str]) -> Any:
        """Load ``script`` where its call goes: on a cluster, the master that owns ``keys``'s
        slot now. redis-py's ``script_load`` goes to the masters it listed, and after a
        failover it keeps the promoted replica's node marked a replica: the new master never
        got the script, and its tenants' calls failed NOSCRIPT until a restart."""
        if not self._cluster:
            return await self.client.script_load(script.script)
        node = self.client.get_node_from_key(keys[0])
        return await self.client.execute_command("SCRIPT LOAD", script.script, target_nodes=node)

    async def _discover(self, loop: asyncio.AbstractEventLoop) -> None:
        """Discover the cluster (its slot map) on ``loop`` before its first command there,
        within the storage's deadline.

        Concurrent first commands on a fresh redis.asyncio cluster client otherwise race its
        lazy discovery and some fail with "Connection closed by server" (a healthy cluster
        answered by the fail mode). Its own lock makes this once per client.
        """
        if self._ready is not None and self._ready() is loop:
            return
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("AsyncRedisStorage must be called from an asyncio task")
        deadline = _Deadline(loop, task, self.timeout, self._stall_tolerance)
        try:
            await self.client.initialize()
            self._ready = weakref.ref(loop)
        except asyncio.CancelledError:
            if deadline.expired and deadline.withdraw():
                raise StorageTimeout(f"Redis did not answer within {self.timeout:g} s") from None
            raise
        except self._errors as exc:
            raise storage_error(exc) from exc
        finally:
            deadline.disarm()


def _no_connection() -> Any:
    raise AssertionError("a cluster's pipelines connect to each master")  # pragma: no cover


class _Deadline:
    """The time limit of one asyncio call to Redis, which a stalled event loop does not trip.

    ``asyncio.timeout`` cancels the call when its timer runs, whatever kept the call waiting.
    When the loop was blocked (a slow callback, a thread holding the GIL, a paused process)
    past the deadline, Redis has usually answered long ago: the reply sits in the socket,
    and the first loop iteration after the stall reads it and schedules the waiting task,
    but it also runs the expired timer, which cancels the task before the task resumes
    (asyncio then throws ``CancelledError`` into it instead of the reply), and redis-py
    closes a connection whose read was cancelled. A stall would look like an outage.

    This deadline decides when its timer runs:

    - The timer ran late, by more than ``tolerance`` past its time: the loop was not
      running then, so the period says nothing about Redis. The call gets a fresh period
      from now, at most :data:`MAX_STALL_EXTENSIONS` times, so that a dead Redis behind a
      loop that keeps stalling still fails, after at most that many more periods (plus the
      stalls themselves).
    - The timer ran on time (or has no extension left): the call is cancelled one loop
      iteration later (``call_soon``), not at once. A reply read in the timer's iteration has
      already scheduled the task ahead of that callback, so the task takes the reply and
      disarms the deadline first: a completed read always wins; otherwise the call is
      cancelled on its next iteration, a timeout.

    The common path costs what ``asyncio.timeout`` costs: one timer handle, cancelled when
    the call ends. Cancellation follows ``asyncio.timeout``: only the deadline's own cancel
    (not one from elsewhere, which is re-raised) becomes a timeout.
    """

    __slots__ = (
        "_cancelling", "_extensions", "_handle", "_period", "_task", "_tolerance", "_when",
        "expired",
    )  # fmt: skip

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        task: asyncio.Task[Any],
        period: float,
        tolerance: float,
    ) -> None:
        self._task = task  # a task of ``loop``, which _fire asks it for
        self._period = period
        self._tolerance = tolerance
        self._cancelling = task.cancelling()
        self._extensions = 0
        self.expired = False
        self._when = when = loop.time() + period
        self._handle: asyncio.Handle | None = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        loop = self._task.get_loop()
        now = loop.time()
        if now - self._when > self._tolerance and self._extensions < MAX_STALL_EXTENSIONS:
            self._extensions += 1  # the loop stalled: a fresh period from now
            self._when = when = now + self._period
            self._handle = loop.call_at(when, self._fire)
        else:  # after any callback the reply's read scheduled in this iteration
            self._handle = loop.call_soon(self._expire)

    def _expire(self) -> None:
        self._handle = None
        self.expired = True
        self._task.cancel()

    def withdraw(self) -> bool:
        """Take back the expired deadline's cancel: True if no one else cancelled the task."""
        self.expired = False
        return self._task.uncancel() <= self._cancelling

    def disarm(self) -> None:
        """The call ended: stop the timer (and take back a cancel the call did not see)."""
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        if self.expired:
            self.expired = False
            self._task.uncancel()


def _timed_out(error: BaseException) -> BaseException:
    """A redis-py error for ``error``: asyncio's timeout as redis-py's."""
    if isinstance(error, TimeoutError):
        from redis.exceptions import TimeoutError as RedisTimeoutError  # noqa: PLC0415

        return RedisTimeoutError("Redis did not answer CONFIG GET in time")
    return error


def _check_options(prefix: str, timeout: float) -> None:
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise ValueError(f"prefix must be a non-empty string without braces, got {prefix!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
