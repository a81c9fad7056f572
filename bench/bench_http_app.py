"""The apps ``bench_http.py`` serves through uvicorn: the demo shop, served seven ways.

``uvicorn --factory bench_http_app:create_app --app-dir bench`` with the environment:

- ``QUOTAQL_BENCH_VARIANT``: ``none`` (no limiting), ``depth`` (Strawberry's
  ``QueryDepthLimiter``, the reference for noise), ``memory`` (quotaql's ``CostLimiter`` on
  ``MemoryStorage``), ``redis`` (``CostLimiter`` on ``AsyncRedisStorage``), ``floor``
  (``_floor.Floor``: the least work quotaql's default contract asks for on the common path,
  written as directly as its authors could; a yardstick, not a limiter), ``floor_redis``
  (the same with its bucket in Redis: ``_floor.RedisFloor``) or ``cached``
  (Strawberry's ``ParserCache`` and ``ValidationCache``, no quotaql: the baseline of issue 23,
  what a performance-minded Strawberry user serves);
- ``QUOTAQL_BENCH_CONFIG``: the ``quotaql.toml`` (``CONFIG_TOML``) of the quotaql variants;
- ``QUOTAQL_BENCH_REDIS_URL``: the private redis-server of ``redis`` and ``floor_redis``;
- ``QUOTAQL_BENCH_TIMEOUT``: the Redis storage's per-call timeout in seconds (default 1);
- ``QUOTAQL_BENCH_SPLIT=1``: time the gate's pieces in every request (see :class:`_Split`);
  the timed rounds run without it.

The schema is the demo shop's (``quotaql.demo.shop.make_schema``) served by
``strawberry.asgi.GraphQL``, without the demo's metrics. Every variant answers
``GET /__bench/stats`` with what it counted (JSON: with the hits and misses of Strawberry's
two caches, so that the bench can check the cached baseline parsed and validated once), and
handles the ASGI lifespan itself (the Redis storage's connections are closed at shutdown).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import statistics
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from strawberry.asgi import GraphQL
from strawberry.extensions import ParserCache, QueryDepthLimiter, ValidationCache

import quotaql.gate.pricing as gate_module
from _floor import FLOOR, FLOOR_REDIS, floor_extension, redis_floor_extension
from quotaql import MemoryStorage
from quotaql.cost_analysis.analyzer import CostReport
from quotaql.demo.shop import make_schema
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    from quotaql.policy.quota import Decision

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

__all__ = [
    "CONFIG_TOML",
    "DEPTH_LIMIT",
    "FLOOR",
    "FLOOR_REDIS",
    "QUOTAQL_VARIANTS",
    "STATS_PATH",
    "TENANT",
    "TENANT_CAPACITY",
    "VARIANTS",
    "create_app",
    "strawberry_cache_calls",
]

# ``cached`` last: in bench_http's ABBA rounds the pairs with ``none`` keep their distance,
# and memory and Redis sit as near to ``cached`` as to ``none``.
VARIANTS = ("none", "depth", "memory", "redis", FLOOR, FLOOR_REDIS, "cached")
# The variants that answer quotaql's contract (extensions.cost, headers, one decision each).
QUOTAQL_VARIANTS = ("memory", "redis", FLOOR, FLOOR_REDIS)
STATS_PATH = "/__bench/stats"
TENANT = "bench-tenant"
DEPTH_LIMIT = 10  # the shop query is 3 deep: the rule walks it, never refuses
# Each Redis call's timeout (the default is 50 ms): a call that misses it would be decided
# by the local fallback, another code path; the stats count such decisions and the bench
# fails the round. 1 s as in bench_plugin and bench_limiter; ``$QUOTAQL_BENCH_TIMEOUT``
# (seconds) overrides it: bench_http_work runs the app under valgrind, many times slower.
STORAGE_TIMEOUT_S = float(os.environ.get("QUOTAQL_BENCH_TIMEOUT") or 1.0)
TENANT_CAPACITY = 1e12
# The tenant's tier is a budget that never runs out in a run: 10^12 points, refilled at 1
# per second; the default tier is small, so that a response showing 10^12 available shows
# the key was recognized. The key is a known tenant's (the common case in production).
# Everything else is the default: enforce, refund_unused, expose_cost, reload_interval 2 s
# (the file is polled, as deployed).
CONFIG_TOML = f"""\
[tiers.free]
capacity = 100
refill_per_second = 1
[tiers.bench]
capacity = {TENANT_CAPACITY:g}
refill_per_second = 1
[tenants.{TENANT}]
tier = "bench"
"""
# Timings kept per piece in split mode: enough for a few seconds of load.
SPLIT_MAX_SAMPLES = 200_000


class _Counts:
    """The limiter's recorder: decisions by source, refusals, backend errors, breaker
    changes. A decision from the local fallback (Redis late or failing) would time another
    code path: the bench checks these after every round."""

    __slots__ = ("circuit_changes", "errors", "refused", "sources")

    def __init__(self) -> None:
        self.sources: Counter[str] = Counter()
        self.refused = 0
        self.errors: list[str] = []
        self.circuit_changes = 0

    def decision(self, decision: Decision, seconds: float) -> None:
        self.sources[decision.source] += 1
        if not decision.allowed:
            self.refused += 1

    def backend_error(self, backend: str, error: BaseException) -> None:
        if len(self.errors) < 5:
            self.errors.append(f"{backend}: {type(error).__name__}: {error}")
        else:
            self.errors[-1] = f"... and more; last: {backend}: {type(error).__name__}"

    def circuit(self, backend: str, is_open: bool) -> None:
        self.circuit_changes += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "decisions": dict(self.sources),
            "refused": self.refused,
            "backend_errors": list(self.errors),
            "circuit_changes": self.circuit_changes,
        }


class _Split:
    """Where a request's time goes (issue 13, D11): every call of the gate's entry points
    (and, inside them, of pricing, the actual cost and the limiter's calls) is timed.

    Wall time, waits included: with Redis, ``admit_async`` and the limiter's ``acquire``
    include the round trip, during which the event loop serves other requests. Only the
    split processes install it; the timed rounds run without timers.
    """

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = {}

    def _list(self, name: str) -> list[float]:
        return self.spent.setdefault(name, [])

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed under ``name`` (a coroutine function is timed until its result)."""
        spent = self._list(name)
        timer = time.perf_counter

        if inspect.iscoroutinefunction(fn):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                began = timer()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    if len(spent) < SPLIT_MAX_SAMPLES:
                        spent.append(timer() - began)

            return timed_async

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = timer()
            try:
                return fn(*args, **kwargs)
            finally:
                if len(spent) < SPLIT_MAX_SAMPLES:
                    spent.append(timer() - began)

        return timed

    def install(self, limiter: CostLimiter) -> list[str]:
        """Wrap the gate's pieces (those that exist: the gate changes); the names wrapped."""
        gate = limiter.gate
        wrapped = []
        for name in (
            "begin",
            "parse_document",
            "screen",
            "admit",
            "admit_async",
            "settle",
            "settle_async",
            "respond",
            "results",
            "finish",
        ):
            method = getattr(gate, name, None)
            if method is not None:
                setattr(gate, name, self.wrap(f"gate.{name}", method))
                wrapped.append(f"gate.{name}")
        inner = gate.limiter
        for name in ("acquire", "refund"):
            method = getattr(inner, name, None)
            if method is not None:
                setattr(inner, name, self.wrap(f"limiter.{name}", method))
                wrapped.append(f"limiter.{name}")
        if callable(getattr(gate_module, "analyze", None)):
            gate_module.analyze = self.wrap("analyze", gate_module.analyze)  # type: ignore[assignment]
            wrapped.append("analyze")
        if callable(getattr(CostReport, "actual", None)):
            timed_actual = self.wrap("actual", CostReport.actual)

            def actual(report: CostReport, *args: Any, **kwargs: Any) -> Any:  # a method: bound
                return timed_actual(report, *args, **kwargs)

            CostReport.actual = actual  # type: ignore[method-assign]
            wrapped.append("actual")
        return wrapped

    def snapshot(self) -> dict[str, Any]:
        """Per piece: calls and the median µs of a call."""
        return {
            name: {"calls": len(s), "median_us": statistics.median(s) * 1e6 if s else None}
            for name, s in self.spent.items()
        }


class _BenchApp:
    """The GraphQL app behind a thin ASGI layer: the lifespan (the storage closed at
    shutdown), ``GET /__bench/stats``, and in split mode the time of each request."""

    def __init__(
        self,
        graphql: GraphQL[Any, Any],
        variant: str,
        counts: _Counts | None,
        split: _Split | None,
        storage: AsyncRedisStorage | None,
        wrapped: list[str],
    ) -> None:
        self.graphql = graphql
        self.variant = variant
        self.counts = counts
        self.split = split
        self.storage = storage
        self.wrapped = wrapped
        self.requests = 0
        self._request_times = split.wrap("request", graphql.__call__) if split is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http" and scope["path"] == STATS_PATH:
            await self._stats(send)
        else:
            self.requests += 1
            if self._request_times is not None:
                await self._request_times(scope, receive, send)
            else:
                await self.graphql(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.storage is not None:
                    with contextlib.suppress(Exception):
                        await self.storage.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _stats(self, send: Send) -> None:
        stats: dict[str, Any] = {
            "variant": self.variant,
            "pid": os.getpid(),
            "requests": self.requests,
            "limiter": self.counts.snapshot() if self.counts is not None else None,
            "caches": strawberry_cache_calls(),
            "split": self.split.snapshot() if self.split is not None else None,
            "wrapped": self.wrapped,
        }
        body = json.dumps(stats).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def strawberry_cache_calls() -> dict[str, list[int]]:
    """``[hits, misses]`` of Strawberry's ``ParserCache`` and ``ValidationCache`` so far.

    Each keeps one LRU cache per ``maxsize`` at module level, shared by every schema of the
    process (here the default size): read through a fresh instance of each.
    """
    parse = ParserCache().cached_parse_document.cache_info()
    validation = ValidationCache().cached_validate_document.cache_info()
    return {"parse": [parse.hits, parse.misses], "validation": [validation.hits, validation.misses]}


def _environ(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"bench_http_app: the environment variable {name} is not set")
    return value


def create_app() -> _BenchApp:
    """The app of the variant ``$QUOTAQL_BENCH_VARIANT`` (uvicorn's ``--factory``)."""
    variant = _environ("QUOTAQL_BENCH_VARIANT")
    if variant not in VARIANTS:
        raise RuntimeError(
            f"bench_http_app: QUOTAQL_BENCH_VARIANT={variant!r}; one of {', '.join(VARIANTS)}"
        )
    split = _Split() if os.environ.get("QUOTAQL_BENCH_SPLIT") == "1" else None
    counts: _Counts | None = None
    storage: AsyncRedisStorage | None = None
    wrapped: list[str] = []
    if variant == "none":
        schema = make_schema()
    elif variant == "depth":
        schema = make_schema(lambda: QueryDepthLimiter(max_depth=DEPTH_LIMIT))
    elif variant == FLOOR:
        counts = _Counts()
        tenants = {TENANT: (TENANT_CAPACITY, 1.0)}  # CONFIG_TOML's bench tier
        schema = make_schema(floor_extension(tenants, counts))
    elif variant == FLOOR_REDIS:
        counts = _Counts()
        tenants = {TENANT: (TENANT_CAPACITY, 1.0)}
        schema = make_schema(
            redis_floor_extension(tenants, counts, _environ("QUOTAQL_BENCH_REDIS_URL"))
        )
    elif variant == "cached":
        # Classes: Strawberry builds one of each per request; their LRU caches (the default
        # 128 entries) live at module level, across requests.
        schema = make_schema(ParserCache, ValidationCache)
    else:
        counts = _Counts()
        if variant == "redis":
            storage = AsyncRedisStorage.from_url(
                _environ("QUOTAQL_BENCH_REDIS_URL"), timeout=STORAGE_TIMEOUT_S
            )
        # Default identity: the X-API-Key header, a known tenant.
        limiter = CostLimiter.from_config(
            _environ("QUOTAQL_BENCH_CONFIG"),
            storage=storage if storage is not None else MemoryStorage(),
            recorder=counts,
        )
        if split is not None:
            wrapped = split.install(limiter)
        schema = make_schema(limiter)
    return _BenchApp(GraphQL(schema), variant, counts, split, storage, wrapped)
