"""The floor: the least work a Strawberry extension does for quotaql's default contract.

A yardstick for issue 23, not a limiter: ``bench_http_work`` counts its instructions per
request beside ``CostLimiter``'s and the cached baseline's, to tell how much of quotaql's
cost over Strawberry's two caches is the work its default contract asks for, done in the
most direct Python its authors could write, and how much is quotaql's own structure.

Per request, on the common path only (a known API key, an allowed decision, a document seen
before), it does what ``CostLimiter`` does with the bench's configuration (every default:
enforce, ``refund_unused``, ``expose_cost``, the time quota):

- reads the ``X-API-Key`` and ``GraphQL-Cost`` headers and finds the tenant's tier;
- parses within the parser limits, once per text (quotaql's ``parse_document``, cached);
- validates once per document (Strawberry's validation the first time, then skipped);
- prices with quotaql's cached plan (``analyze``) and debits a token bucket (capacity,
  refill) in process memory, with a ``Decision``-like record told to the recorder;
- measures the worker time (``time.thread_time_ns`` around parsing, pricing and
  execution) and adds it to what the tenant owes its time quota;
- measures the actual cost from the data (the plan's walk) and refunds what was not used;
- answers ``extensions.cost`` and the ``RateLimit`` / ``RateLimit-Policy`` /
  ``X-RateLimit-*`` headers.

It leaves out everything off that path: unknown keys, addresses and principals, tiers chosen
by a hook, the deny cache, refusals and their errors, shadow mode, batches sharing a
response, subscriptions, concurrency limits, delays, adaptive limits, Redis, metrics beyond
one decision record, spans, reloads. It is not thread-safe.

:class:`RedisFloor` (variant ``floor_redis``) is the same with its bucket in Redis, through
redis-py's asyncio client: one ``EVALSHA`` a request (refill and debit in a Lua script),
refunds summed per key and sent once every ``FLUSH_EVERY`` requests, as quotaql defers them.
Its worker time stays in process memory.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import redis.asyncio
from strawberry.extensions import SchemaExtension

from quotaql.cost_analysis import analyze
from quotaql.cost_analysis.analyzer import parse_document

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

__all__ = [
    "FLOOR",
    "FLOOR_REDIS",
    "Floor",
    "RedisFloor",
    "floor_extension",
    "redis_floor_extension",
]

FLOOR = "floor"  # the variant's name, and its decisions' source
FLOOR_REDIS = "floor_redis"  # the same with its bucket in Redis
FLUSH_EVERY = 32  # the Redis floor's refunds: sent once every this many requests
_CHARGE_AT_MS = 25.0  # as quotaql's ledger: a tenant's time is charged once it adds up


class _Decision(NamedTuple):
    allowed: bool
    source: str


class _State:
    """What every request of one app shares: tenants, buckets, documents, the recorder."""

    def __init__(
        self,
        tenants: dict[str, tuple[float, float]],
        recorder: Any,
        identify: Callable[[Any], str] | None,
    ) -> None:
        self.tenants = tenants  # API key -> (capacity, refill per second)
        self.identify = identify
        self.buckets: dict[str, list[float]] = {}  # key -> [tokens, last monotonic s]
        self.owed: dict[str, float] = {}  # key -> worker ms not charged yet
        self.time_spent: dict[str, float] = {}  # key -> worker ms charged
        self.documents: dict[str, Any] = {}
        self.valid: set[int] = set()
        self.recorder = recorder
        self.policies: dict[tuple[float, float], bytes] = {}


class Floor(SchemaExtension):
    """One request's hooks (see the module's docstring)."""

    state: _State

    def on_operation(self) -> Iterator[None]:
        ctx = self.execution_context
        context = ctx.context
        identify = self.state.identify
        if identify is None:
            headers = context["request"].headers
            key = headers.get("x-api-key")
            self.header = headers.get("graphql-cost")  # read, as quotaql reads it
        else:  # in process: no request, the tenant from the context (bench_plugin)
            key, self.header = identify(context), None
        self.key = key
        self.tier = self.state.tenants[key]
        self.began = time.thread_time_ns()
        self.cost: dict[str, Any] = {}
        yield
        state = self.state
        ms = (time.thread_time_ns() - self.began) / 1e6
        owed = state.owed.pop(key, 0.0) + ms
        if owed >= _CHARGE_AT_MS:
            state.time_spent[key] = state.time_spent.get(key, 0.0) + owed
        else:
            state.owed[key] = owed

    def on_parse(self) -> Iterator[None]:
        ctx = self.execution_context
        query = ctx.query
        documents = self.state.documents
        document = documents.get(query)
        if document is None:
            document = documents[query] = parse_document(query)
        ctx.graphql_document = document
        yield

    def on_validate(self) -> Iterator[None]:
        ctx = self.execution_context
        key = id(ctx.graphql_document)
        known = key in self.state.valid
        if known:
            ctx.pre_execution_errors = []
        yield
        if not known and ctx.pre_execution_errors == []:
            self.state.valid.add(key)

    def on_execute(self) -> Iterator[None]:
        ctx = self.execution_context
        state = self.state
        report = analyze(ctx.schema, ctx.graphql_document, ctx.variables, ctx.operation_name)
        capacity, refill = self.tier
        key = self.key
        now = time.monotonic()
        bucket = state.buckets.get(key)
        if bucket is None:
            bucket = state.buckets[key] = [capacity, now]
        tokens = bucket[0] + (now - bucket[1]) * refill
        tokens = capacity if tokens > capacity else tokens
        cost = report.cost
        bucket[0], bucket[1] = tokens - cost, now
        state.recorder.decision(_Decision(True, FLOOR), 0.0)
        yield
        result = ctx.result
        actual = report.actual(result.data, result.errors)
        kept = actual if actual > 1.0 else 1.0
        if cost > kept:
            bucket[0] = min(capacity, bucket[0] + cost - kept)
        remaining = bucket[0]
        self.answer(cost, actual, remaining)

    def answer(self, cost: float, actual: float, remaining: float) -> None:
        """``extensions.cost`` and the five rate-limit headers (where there is a response)."""
        capacity, refill = self.tier
        self.cost = {
            "requestedQueryCost": cost,
            "actualQueryCost": actual,
            "throttleStatus": {
                "maximumAvailable": capacity,
                "currentlyAvailable": remaining,
                "restoreRate": refill,
            },
        }
        policies = self.state.policies
        policy = policies.get(self.tier)
        if policy is None:
            policy = policies[self.tier] = (
                f'"tenant";q={capacity:g};w={math.ceil(capacity / refill)}'.encode()
            )
        response = self.execution_context.context.get("response")
        if response is None:  # in process: nothing to write headers on
            return
        left = max(0, math.floor(remaining))
        reset = max(0, math.ceil((capacity - remaining) / refill))
        response.headers.raw.extend(
            (
                (b"ratelimit-policy", policy),
                (b"ratelimit", f'"tenant";r={left};t={reset}'.encode()),
                (b"x-ratelimit-limit", f"{capacity:g}".encode()),
                (b"x-ratelimit-remaining", str(left).encode()),
                (b"x-ratelimit-reset", str(reset).encode()),
            )
        )

    def get_results(self) -> dict[str, Any]:
        return {"cost": self.cost} if self.cost else {}


def floor_extension(
    tenants: dict[str, tuple[float, float]],
    recorder: Any,
    identify: Callable[[Any], str] | None = None,
) -> type[Floor]:
    """A :class:`Floor` class of its own (Strawberry builds one per request) sharing one
    state: ``tenants`` by API key, ``recorder`` told each decision; ``identify(context)``
    instead of the ``X-API-Key`` header (in process, without a request)."""
    return type("Floor", (Floor,), {"state": _State(tenants, recorder, identify)})


_BUCKET = """
local t = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local cap, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
local cost, now = tonumber(ARGV[3]), tonumber(ARGV[4])
local tokens = tonumber(t[1]) or cap
local ts = tonumber(t[2]) or now
tokens = math.min(cap, tokens + (now - ts) * rate / 1000)
if tokens >= cost then tokens = tokens - cost end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
return tostring(tokens)
"""
_REFUND = "return redis.call('HINCRBYFLOAT', KEYS[1], 'tokens', ARGV[1])"


class RedisFloor(Floor):
    """:class:`Floor` with its bucket in Redis (see the module's docstring)."""

    client: redis.asyncio.Redis
    pending: dict[str, float]  # key -> points to refund at the next flush
    count: list[int]  # requests since the last flush
    shas: list[str]  # the two scripts' SHA1s, once loaded

    async def on_execute(self) -> AsyncIterator[None]:  # type: ignore[override]
        ctx = self.execution_context
        report = analyze(ctx.schema, ctx.graphql_document, ctx.variables, ctx.operation_name)
        capacity, refill = self.tier
        key = f"floor:{self.key}"
        cost = report.cost
        client = self.client
        if not self.shas:
            self.shas.append(await client.script_load(_BUCKET))
            self.shas.append(await client.script_load(_REFUND))
        now_ms = int(time.time() * 1000)
        remaining = float(
            await client.evalsha(self.shas[0], 1, key, capacity, refill, cost, now_ms)
        )
        self.state.recorder.decision(_Decision(True, FLOOR_REDIS), 0.0)
        yield
        result = ctx.result
        actual = report.actual(result.data, result.errors)
        kept = actual if actual > 1.0 else 1.0
        if cost > kept:
            self.pending[key] = self.pending.get(key, 0.0) + cost - kept
            remaining = min(capacity, remaining + cost - kept)
        self.count[0] += 1
        if self.count[0] >= FLUSH_EVERY:
            self.count[0] = 0
            batch = dict(self.pending)
            self.pending.clear()
            for name, amount in batch.items():
                await client.evalsha(self.shas[1], 1, name, amount)
        self.answer(cost, actual, remaining)


def redis_floor_extension(
    tenants: dict[str, tuple[float, float]], recorder: Any, url: str
) -> type[RedisFloor]:
    """A :class:`RedisFloor` class of its own, on the Redis server at ``url``."""
    return type(
        "RedisFloor",
        (RedisFloor,),
        {
            "state": _State(tenants, recorder, None),
            "client": redis.asyncio.Redis.from_url(url),
            "pending": {},
            "count": [0],
            "shas": [],
        },
    )
