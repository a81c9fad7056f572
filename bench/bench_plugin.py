"""The Strawberry extension's overhead: `schema.execute` with and without `CostLimiter`.

Paired A/B on the shared corpus (medium, large): no extensions vs `CostLimiter` with memory
storage vs the `CostLimiter` of the last commit before the request gate (`_previous`) vs
Strawberry's `QueryDepthLimiter` vs the cached baseline (Strawberry's `ParserCache` and
`ValidationCache`, no quotaql: issue 23); the same with Redis storage against a raw async PING;
and HTTP throughput through a real uvicorn with and without the extension (and with the one
before the gate).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import redis
import redis.asyncio
import strawberry
from graphql import build_schema, parse
from graphql.utilities import lexicographic_sort_schema, print_schema
from strawberry.asgi import GraphQL
from strawberry.extensions import ParserCache, QueryDepthLimiter, SchemaExtension, ValidationCache

import _previous
import quotaql.gate.pricing as gate_module
from _floor import FLOOR, floor_extension
from _harness import (
    Measurement,
    Target,
    fmt_int,
    fmt_ratio,
    fmt_us,
    measure_calls_interleaved,
    measure_interleaved,
    print_table,
    print_targets,
    ratio,
    remaining_budget,
)
from bench_cost import QUERIES, corpus_dir, load_cases
from bench_http_app import strawberry_cache_calls
from quotaql import Limiter, MemoryStorage
from quotaql.config import load_config
from quotaql.cost_analysis import analyze
from quotaql.cost_analysis.analyzer import CostReport
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.gate.charges import quotas_for
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage

# The private redis-server and the threaded uvicorn come from the test fixtures: one
# implementation of each, not two.
REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from tests.support.app_servers import UvicornServer  # noqa: E402
from tests.support.servers import RedisServer  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence

    from strawberry.types import ExecutionResult

    from bench_cost import Case
    from quotaql.config import Config
    from quotaql.policy.quota import Decision

# -- targets ---------------------------------------------------------------------------------
MEMORY_RATIO_MAX = 1.03  # execute with CostLimiter(memory) / without extensions
# execute with CostLimiter(memory) / with Strawberry's ParserCache + ValidationCache and no
# quotaql (issue 23: as fast as a performance-minded Strawberry user's schema)
CACHED_RATIO_MAX = 1.05
ACTUAL_US_MAX = 25.0  # the actual cost inside an execute, medium (µs: issue 12)
DEPTH_RATIO_MAX = 1.0  # execute with CostLimiter(memory) / with QueryDepthLimiter
BEFORE_RATIO_MAX = 1.01  # execute with CostLimiter(memory) / with the one before the gate
REDIS_EXTRA_MAX = 0.05  # (Redis - none - one round trip) / none
HTTP_RATIO_MIN = 0.95  # requests/s with the extension / without

# -- workloads -------------------------------------------------------------------------------
TIMED_QUERIES = ("medium", "large")
# Every list field returns exactly `first` items (the corpus asks for 1 to 5), never more than
# this: the actual cost then equals the estimate, so nothing is refunded (no second round trip).
MAX_LIST_ITEMS = 50
TENANT = "bench-tenant"
DEPTH_LIMIT = 100  # never reached by the corpus: we time the rule's walk, not a refusal
# Executes are timed call by call, in turns (_harness.measure_calls_interleaved): about this
# many seconds per set of turns, between these bounds on the number of rounds.
MEMORY_SET_SECONDS = 10.0  # nine variants
REDIS_SET_SECONDS = 8.0  # six variants (three are short)
IN_SITU_CALLS = 200  # executes timed piece by piece (no target uses them)
IN_SITU_SECONDS = 2.0
MIN_ROUNDS = 100
MAX_ROUNDS = 3_000
WARMUP_ROUNDS = 10
STORAGE_TIMEOUT_S = 1.0  # the Redis storage's per-call timeout (default 50 ms): see bench_limiter
# HTTP: a load generator in another process, CONCURRENCY requests in flight.
CONCURRENCY = 16
HTTP_REQUESTS = 400  # per round
HTTP_WARMUP_REQUESTS = 100
HTTP_ROUNDS = 10  # per server, alternating (with, without, before, before, without, with, ...)
HTTP_ROUND_TIME_LIMIT_S = 6.0
HTTP_REPLY_TIMEOUT_S = 20.0  # the load generator's answer to one command
HTTP_SECTION_TIME_LIMIT_S = 70.0

# A budget that never runs out in a run: 10^12 points, refilled at 1 per second. The HTTP
# section's API key is a known tenant's (the common case in production: an unknown key
# would count as the load generator's address, which the same budget would serve).
CONFIG_TOML = f"""\
[limits]
reload_interval = 0
[tiers.free]
capacity = 1e12
refill_per_second = 1
[tenants.{TENANT}]
tier = "free"
"""


# -- the corpus schema in Strawberry ---------------------------------------------------------


def _items(first: int) -> range:
    return range(max(0, min(first, MAX_LIST_ITEMS)))


COMMENT_BODY = "A comment of about sixty characters, as comments tend to be."


@strawberry.type
class Comment:
    id: strawberry.ID
    body: str

    @strawberry.field
    def author(self) -> User:
        return User.make(f"{self.id}-a")


@strawberry.type
class Post:
    id: strawberry.ID
    title: str

    @strawberry.field
    def comments(self, first: int = 10) -> list[Comment]:
        return [
            Comment(id=strawberry.ID(f"{self.id}-c{i}"), body=COMMENT_BODY) for i in _items(first)
        ]


@strawberry.type
class User:
    id: strawberry.ID
    name: str
    email: str

    @staticmethod
    def make(user_id: str) -> User:
        return User(
            id=strawberry.ID(user_id), name=f"User {user_id}", email=f"{user_id}@example.com"
        )

    @strawberry.field
    def posts(self, first: int = 10) -> list[Post]:
        return [
            Post(id=strawberry.ID(f"{self.id}-p{i}"), title=f"Post {i} by user {self.id}")
            for i in _items(first)
        ]

    @strawberry.field
    def followers(self, first: int = 10) -> list[User]:
        return [User.make(f"{self.id}-f{i}") for i in _items(first)]


@strawberry.type
class Query:
    @strawberry.field
    def users(self, first: int = 10) -> list[User]:
        return [User.make(str(i)) for i in _items(first)]

    @strawberry.field
    def user(self, id: strawberry.ID) -> User | None:
        return User.make(id)


def make_schema(*extensions: Any) -> strawberry.Schema:
    return strawberry.Schema(query=Query, extensions=list(extensions))


def check_schema(schema: strawberry.Schema, sdl: str, cases: list[Case]) -> None:
    """Refuse to time unless the Strawberry schema is the corpus schema and prices it the same.

    Prints both costs. The corpus SDL has no @cost/@listSize; the directive definitions are added
    when it lacks them (harmless otherwise).
    """
    graphql_schema = schema._schema
    corpus = build_schema(sdl if "directive @cost" in sdl else sdl + "\n" + COST_DIRECTIVES_SDL)
    mine, theirs = (
        print_schema(lexicographic_sort_schema(s)) for s in (graphql_schema, build_schema(sdl))
    )
    if mine != theirs:
        raise RuntimeError(f"the bench's Strawberry schema differs from the corpus:\n{mine}")
    rows, differ = [], []
    for case in cases:
        a = analyze(corpus, case.document, case.variables)
        b = analyze(schema, case.document, case.variables)
        rows.append(
            [case.name, fmt_int(a.cost), fmt_int(b.cost), fmt_int(a.depth), fmt_int(b.depth)]
        )
        if (a.cost, a.depth) != (b.cost, b.depth):
            differ.append(case.name)
    print_table(
        ["analyze", "cost, corpus SDL", "cost, Strawberry", "depth, SDL", "depth, Strawberry"],
        rows,
        title="The bench's Strawberry schema prints as the corpus SDL (sorted); same prices:",
    )
    if differ:
        raise RuntimeError(f"the two schemas price {', '.join(differ)} differently: not timed")


# -- helpers ---------------------------------------------------------------------------------


class _Recorder:
    """The limiter's metrics hook: counts decisions by source, refusals and backend errors.

    A decision from the local fallback (Redis failing) would time another code path.
    """

    def __init__(self) -> None:
        self.sources: Counter[str] = Counter()
        self.refused = 0
        self.failures: list[str] = []

    def decision(self, decision: Decision, seconds: float) -> None:
        self.sources[decision.source] += 1
        if not decision.allowed:
            self.refused += 1

    def backend_error(self, backend: str, error: BaseException) -> None:
        self.failures.append(f"{backend}: {type(error).__name__}: {error}")

    def circuit(self, backend: str, is_open: bool) -> None:
        self.failures.append(f"{backend}: breaker {'opened' if is_open else 'closed'}")

    def reset(self) -> None:
        self.sources.clear()
        self.refused = 0
        self.failures.clear()

    def problems(self, source: str, calls: int) -> list[str]:
        found = [*self.failures[:3]]
        if self.refused:
            found.append(f"{self.refused:,} refused")
        other = {name: n for name, n in self.sources.items() if name != source}
        if other:
            found.append(f"decisions not from {source}: {other}")
        if self.sources[source] != calls:
            found.append(f"{self.sources[source]:,} decisions from {source} for {calls:,} executes")
        return found


def _tenant(context: Any) -> str:
    return str(context["tenant"])


def _config(directory: Path) -> Config:
    path = directory / "quotaql.toml"
    path.write_text(CONFIG_TOML, encoding="utf-8")
    return load_config(path)


class _Executor:
    """``loop.run_until_complete(schema.execute(...))`` for one corpus case, counting calls.

    Every call gets a fresh context (as a server builds one per request); an error in a result
    is recorded (the figures would then be those of an error path).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, schema: strawberry.Schema, case: Case):
        self.loop = loop
        self.schema = schema
        self.source = case.source
        self.variables = case.variables
        self.calls = 0
        self.errors: list[str] = []

    def __call__(self) -> ExecutionResult:
        result = self.loop.run_until_complete(
            self.schema.execute(
                self.source, variable_values=self.variables, context_value={"tenant": TENANT}
            )
        )
        self.calls += 1
        if result.errors:
            self.errors.append(result.errors[0].message)
        return result


async def _noop() -> None:
    return None


def _rounds_for(fns: Mapping[str, Callable[[], object]], seconds: float) -> tuple[int, float]:
    """Rounds of turns that take about ``seconds``, from three untimed calls of each, and
    the seconds one round took."""
    round_s = 0.0
    for fn in fns.values():
        began = time.perf_counter()
        for _ in range(3):
            fn()
        round_s += (time.perf_counter() - began) / 3
    return max(MIN_ROUNDS, min(MAX_ROUNDS, int(seconds / round_s))), round_s


def _timed(fns: Mapping[str, Callable[[], object]], seconds: float) -> dict[str, Measurement]:
    rounds, round_s = _rounds_for(fns, seconds)
    # The time limit of what the rounds should take: MIN_ROUNDS of slow calls (the large
    # query without caches) take longer than ``seconds``.
    expected = max(seconds, (rounds + WARMUP_ROUNDS) * round_s)
    return measure_calls_interleaved(
        fns, calls=rounds, warmup=WARMUP_ROUNDS, time_limit=expected * 2.5
    )


def _check_results(case: Case, results: Mapping[str, ExecutionResult], priced: set[str]) -> float:
    """The same data from every variant, and the extension's figures: the estimate, no refund."""
    reference = results["none"]
    if reference.errors or reference.data is None:
        raise RuntimeError(f"{case.name}: execute failed: {reference.errors}")
    for name, result in results.items():
        if result.errors or result.data != reference.data:
            raise RuntimeError(f"{case.name}, {name}: not the same result: {result.errors}")
        cost = (result.extensions or {}).get("cost")
        if name not in priced:
            continue
        if (
            cost is None
            or "throttleStatus" not in cost
            or cost["requestedQueryCost"] != cost["actualQueryCost"]
        ):
            raise RuntimeError(f"{case.name}, {name}: unexpected extensions.cost: {cost!r}")
    return float(results[next(iter(priced))].extensions["cost"]["requestedQueryCost"])


def _print_notes(timings: Mapping[str, Measurement], query: str) -> None:
    notes = [f"  note: {name} on {query}: {t.note}" for name, t in timings.items() if t.note]
    if notes:
        print("\n".join(notes), end="\n\n")


def _target_row(name: str, value: float | None, target: Target | None = None) -> list[str]:
    if target is None:
        return [name, fmt_ratio(value), "", ""]
    return [name, fmt_ratio(value), target.bound, target.verdict]


def _delta(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a - b:+,.0f}"


# -- 1: memory storage vs no extensions vs QueryDepthLimiter --------------------------------


class NoopExtension(SchemaExtension):
    """A reference: an extension with CostLimiter's hooks doing nothing (Strawberry's share)."""

    def on_parse(self) -> Iterator[None]:
        yield

    async def on_execute(self) -> AsyncIterator[None]:
        yield

    def get_results(self) -> dict[str, Any]:
        return {}


class PingExtension(SchemaExtension):
    """A reference: an extension that awaits one async PING in ``on_execute``, nothing else.

    What blocking on one round trip inside an execute costs, whatever the extension does.
    """

    def __init__(self, client: redis.asyncio.Redis) -> None:
        super().__init__()
        self.client = client

    async def on_execute(self) -> AsyncIterator[None]:
        await self.client.ping()
        yield


MEMORY_LABELS = {
    "none": "no extensions",
    "memory": "CostLimiter, MemoryStorage",
    "before": f"CostLimiter before the gate ({_previous.BEFORE_GATE}), MemoryStorage",
    "depth": f"QueryDepthLimiter(max_depth={DEPTH_LIMIT})",
    "noop": "no-op extension, same hooks (ref.)",
    "static": "CostLimiter, no refund, no expose_cost (ref.)",
    "parsercache": "Strawberry's ParserCache alone (ref.: quotaql keeps parsed documents too)",
    "cached": "Strawberry's ParserCache + ValidationCache, no quotaql (the cached baseline)",
    FLOOR: "the floor: quotaql's default contract, most directly (_floor.py)",
}


def bench_memory(cases: dict[str, Case], config: Config) -> list[Target]:
    loop = asyncio.new_event_loop()
    recorders = {"memory": _Recorder(), "static": _Recorder()}
    floor_recorder = _Recorder()
    # The defaults (refund_unused, expose_cost) price the result too (actual_cost); without
    # both, the extension only prices the operation and debits it.
    static_config = replace(
        config, limits=replace(config.limits, refund_unused=False, expose_cost=False)
    )
    limiters = {
        name: CostLimiter(cfg, storage=MemoryStorage(), identify=_tenant, recorder=recorders[name])
        for name, cfg in (("memory", config), ("static", static_config))
    }
    schemas = {
        "none": make_schema(),
        "memory": make_schema(limiters["memory"]),
        "before": make_schema(_before_limiter(identify=_tenant)),
        "depth": make_schema(lambda: QueryDepthLimiter(max_depth=DEPTH_LIMIT)),
        "noop": make_schema(NoopExtension),
        "static": make_schema(limiters["static"]),
        "parsercache": make_schema(ParserCache),
        # What a performance-minded Strawberry user has (issue 23): parsed and validated once
        # per document text, no quotaql. Classes, as the docs register them.
        "cached": make_schema(ParserCache, ValidationCache),
        # quotaql's default contract on the common path, as directly as we could (issue 23).
        FLOOR: make_schema(floor_extension({TENANT: (1e12, 1.0)}, floor_recorder, _tenant)),
    }
    timings: dict[str, dict[str, Measurement]] = {}
    costs: dict[str, float] = {}
    calls: dict[str, int] = {}
    in_situ: dict[str, dict[str, float | None]] = {}
    try:
        for query in TIMED_QUERIES:
            case = cases[query]
            fns = {name: _Executor(loop, schema, case) for name, schema in schemas.items()}
            costs[query] = _check_results(
                case, {name: fn() for name, fn in fns.items()}, {"memory", "before", FLOOR}
            )
            for recorder in (*recorders.values(), floor_recorder):
                recorder.reset()
            before = fns["memory"].calls
            floor_before = fns[FLOOR].calls
            # Strawberry's caches serve these two: their hits and misses are checked too.
            cache_users = {name: fns[name].calls for name in ("cached", "parsercache")}
            caches_before = strawberry_cache_calls()
            timings[query] = _timed(fns, MEMORY_SET_SECONDS)
            calls[query] = fns["memory"].calls - before
            problems = [f"{n}: {fn.errors[0]}" for n, fn in fns.items() if fn.errors]
            for name, recorder in recorders.items():
                problems += recorder.problems("memory", fns[name].calls - before)
            problems += floor_recorder.problems(FLOOR, fns[FLOOR].calls - floor_before)
            ran = {name: fns[name].calls - n for name, n in cache_users.items()}
            problems += _cache_problems(
                caches_before,
                strawberry_cache_calls(),
                validated=ran["cached"],
                parsed=ran["cached"] + ran["parsercache"],
            )
            if problems:
                raise RuntimeError(
                    f"{query}: not every execute was a clean, allowed one: {problems}"
                )
            in_situ[query] = _in_situ(limiters["memory"], fns["memory"])
    finally:
        loop.close()

    rows = []
    for name, label in MEMORY_LABELS.items():
        row = [label]
        for query in TIMED_QUERIES:
            t = timings[query]
            row += [
                fmt_us(t[name].median_us),
                _delta(t[name].median_us, t["none"].median_us),
                fmt_ratio(ratio(t[name].median_us, t["none"].median_us)),
            ]
        rows.append(row)
    print_table(
        [
            "await schema.execute(...)",
            *(f"{q} {col}" for q in TIMED_QUERIES for col in ("µs", "added µs", "/ none")),
        ],
        rows,
        title=(
            "Paired A/B, memory storage: median µs per execute over "
            + ", ".join(f"{timings[q]['none'].samples:,} ({q})" for q in TIMED_QUERIES)
            + " rounds of one call each in turns (loop.run_until_complete included; costs "
            + ", ".join(f"{q} {fmt_int(costs[q])}" for q in TIMED_QUERIES)
            + f"; every decision allowed, from memory: {sum(calls.values()):,})"
        ),
    )
    for query in TIMED_QUERIES:
        _print_notes(timings[query], query)
    print(
        "Against the cached baseline (the floor: the least the default contract costs):"
        + "".join(
            f" {query}: memory {fmt_ratio(ratio(t['memory'].median_us, t['cached'].median_us))},"
            f" floor {fmt_ratio(ratio(t[FLOOR].median_us, t['cached'].median_us))};"
            for query, t in timings.items()
        ),
        end="\n\n",
    )

    targets: list[Target] = []
    for query in TIMED_QUERIES:
        t = timings[query]
        targets += [
            Target(
                f"execute CostLimiter(memory) / none, {query}",
                ratio(t["memory"].median_us, t["none"].median_us),
                MEMORY_RATIO_MAX,
            ),
            Target(
                f"execute CostLimiter(memory) / cached Strawberry, {query}",
                ratio(t["memory"].median_us, t["cached"].median_us),
                CACHED_RATIO_MAX,
            ),
            Target(
                f"execute CostLimiter(memory) / QueryDepthLimiter, {query}",
                ratio(t["memory"].median_us, t["depth"].median_us),
                DEPTH_RATIO_MAX,
            ),
            Target(
                f"execute CostLimiter(memory) / CostLimiter before the gate, {query}",
                ratio(t["memory"].median_us, t["before"].median_us),
                BEFORE_RATIO_MAX,
            ),
        ]
    targets.append(
        Target(
            "actual cost inside an execute, medium (µs)",
            in_situ["medium"]["actual_cost"],
            ACTUAL_US_MAX,
        )
    )
    print_table(
        ["ratio (same run)", "value", "target", "status"],
        [_target_row(t.name.removeprefix("execute "), t.value, t) for t in targets],
    )
    print(
        "execute CostLimiter(memory) / Strawberry's ParserCache alone (both keep parsed"
        " documents; no target): "
        + "; ".join(
            f"{q} {fmt_ratio(ratio(t['memory'].median_us, t['parsercache'].median_us))}"
            for q, t in ((q, timings[q]) for q in TIMED_QUERIES)
        )
    )
    print(
        "added µs: CostLimiter(memory) vs QueryDepthLimiter: "
        + "; ".join(
            f"{q} {_delta(timings[q]['memory'].median_us, timings[q]['none'].median_us)} vs "
            f"{_delta(timings[q]['depth'].median_us, timings[q]['none'].median_us)}"
            for q in TIMED_QUERIES
        )
        + "\n"
    )
    bench_breakdown(cases, config, schemas["none"], timings, in_situ)
    return targets


def _cache_problems(
    before: Mapping[str, Sequence[int]],
    after: Mapping[str, Sequence[int]],
    *,
    validated: int,
    parsed: int,
) -> list[str]:
    """What is wrong with Strawberry's caches over a timed set (``strawberry_cache_calls``
    before and after): the cached baseline must take every document from them, or it would
    time a parse or a validation (a slower baseline: a target met too easily)."""
    found = []
    for cache, hits in (("validation", validated), ("parse", parsed)):
        (hits_before, misses_before), (hits_after, misses_after) = before[cache], after[cache]
        if misses_after != misses_before:
            found.append(
                f"Strawberry's {cache} cache missed {misses_after - misses_before:,} times"
            )
        if hits_after - hits_before != hits:
            found.append(
                f"Strawberry's {cache} cache: {hits_after - hits_before:,} hits for {hits:,} calls"
            )
    return found


class _Timed:
    """Wraps a callable, appending the seconds of each call to ``spent``."""

    def __init__(self, fn: Callable[..., Any], spent: list[float]) -> None:
        self.fn = fn
        self.spent = spent

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.spent.append(time.perf_counter() - began)


class _TimedAsync(_Timed):
    """The same for a coroutine function: the seconds until its result, waits included."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return await self.fn(*args, **kwargs)
        finally:
            self.spent.append(time.perf_counter() - began)


def _in_situ(limiter: CostLimiter, execute: _Executor) -> dict[str, float | None]:
    """Median µs of the extension's three pieces as they run inside ``execute``, not alone.

    For a moment (restored before returning), the gate module's ``analyze`` and
    the report's ``actual`` (the actual cost, walking the plan) and the limiter's ``acquire``
    are wrapped in timers. Inside an execute, between graphql-core's validation and
    execution, the pieces run with cold caches: they take longer than in a loop of their own.
    """
    spent: dict[str, list[float]] = {"analyze": [], "actual_cost": [], "acquire": []}
    originals = (gate_module.analyze, CostReport.actual)
    gate_module.analyze = _Timed(originals[0], spent["analyze"])
    timed_actual = _Timed(originals[1], spent["actual_cost"])

    def actual(self: CostReport, *args: Any, **kwargs: Any) -> float:  # a method: bound
        return timed_actual(self, *args, **kwargs)  # type: ignore[no-any-return]

    CostReport.actual = actual  # type: ignore[method-assign]
    owner = limiter.limiter
    timer = _TimedAsync if inspect.iscoroutinefunction(owner.acquire) else _Timed
    owner.acquire = timer(owner.acquire, spent["acquire"])  # type: ignore[method-assign]
    deadline = time.monotonic() + IN_SITU_SECONDS
    try:
        for _ in range(IN_SITU_CALLS):
            execute()
            if time.monotonic() > deadline:
                break
    finally:
        gate_module.analyze = originals[0]
        CostReport.actual = originals[1]  # type: ignore[method-assign]
        del owner.acquire  # the method again
    return {name: statistics.median(s) * 1e6 if s else None for name, s in spent.items()}


def bench_breakdown(
    cases: dict[str, Case],
    config: Config,
    schema: strawberry.Schema,
    timings: Mapping[str, Mapping[str, Measurement]],
    in_situ: Mapping[str, Mapping[str, float | None]],
) -> None:
    """Where the extension's added time goes: its pieces alone, and timed inside execute."""
    model, limits = config.cost.model, config.cost.limits
    limiter = Limiter(MemoryStorage())
    quotas = quotas_for(config, f"id:{TENANT}", None)
    alone: dict[str, dict[str, Measurement]] = {}
    for query in TIMED_QUERIES:
        case = cases[query]
        data = schema.execute_sync(case.source, variable_values=case.variables).data
        # The extension analyzes Strawberry's own parsed document: parsed once here too.
        document = parse(case.source)
        report = analyze(schema, document, case.variables, None, model, limits)
        cost = report.cost
        alone[query] = measure_interleaved(
            {
                "analyze": partial(analyze, schema, document, case.variables, None, model, limits),
                "actual_cost": partial(report.actual, data),
                "acquire": partial(limiter.acquire, TENANT, cost, quotas),
            }
        )
    labels = {
        "analyze": "analyze (static price, before execution; plan cached)",
        "actual_cost": "CostReport.actual (the plan walked against the data, after)",
        "acquire": "Limiter(MemoryStorage()).acquire",
    }
    rows = []
    for name, label in labels.items():
        row = [label]
        for query in TIMED_QUERIES:
            row += [fmt_us(alone[query][name].median_us), fmt_us(in_situ[query][name])]
        rows.append(row)
    added_row = ["added by CostLimiter (paired A/B above)"]
    hooks_row = ["Strawberry's hooks (no-op extension, A/B above)"]
    rest_row = ["the rest (extension's own code, GC, caches)"]
    for query in TIMED_QUERIES:
        t = timings[query]
        none = t["none"].median_us
        added = _minus(t["memory"].median_us, none)
        hooks = _minus(t["noop"].median_us, none)
        pieces = list(in_situ[query].values())
        rest = (
            None
            if added is None or hooks is None or None in pieces
            else added - hooks - sum(p for p in pieces if p is not None)
        )
        added_row += ["", fmt_us(added)]
        hooks_row += ["", fmt_us(hooks)]
        rest_row += ["", fmt_us(rest)]
    print_table(
        [
            "where CostLimiter's time goes (µs)",
            *(f"{q} {col}" for q in TIMED_QUERIES for col in ("alone", "in execute")),
        ],
        [*rows, added_row, hooks_row, rest_row],
        title=(
            "Its pieces alone (calibrated 30 ms samples, median of up to 7, in turns) and timed "
            f"inside up to {IN_SITU_CALLS} executes (median)"
        ),
    )


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


# -- 2: Redis storage vs a round trip --------------------------------------------------------


def bench_redis(cases: dict[str, Case], config: Config) -> list[Target]:
    loop = asyncio.new_event_loop()
    recorder = _Recorder()
    memory_recorder = _Recorder()
    timings: dict[str, dict[str, Measurement]] = {}
    calls: dict[str, int] = {}
    in_situ: dict[str, dict[str, dict[str, float | None]]] = {}
    # The server is stopped (SIGTERM, then SIGKILL, by PID) when the block exits, error or not.
    with RedisServer() as server:
        print(f"private redis-server on {server.host}:{server.port} (pid {server.pid})")
        storage = AsyncRedisStorage.from_url(server.url, timeout=STORAGE_TIMEOUT_S)
        client = redis.asyncio.Redis.from_url(server.url)
        try:
            limiters = {
                "memory": CostLimiter(
                    config, storage=MemoryStorage(), identify=_tenant, recorder=memory_recorder
                ),
                "redis": CostLimiter(config, storage=storage, identify=_tenant, recorder=recorder),
            }
            schemas = {
                "none": make_schema(),
                "memory": make_schema(limiters["memory"]),
                "redis": make_schema(limiters["redis"]),
                "ping_extension": make_schema(partial(PingExtension, client)),
            }
            for query in TIMED_QUERIES:
                case = cases[query]
                executors = {name: _Executor(loop, s, case) for name, s in schemas.items()}
                _check_results(
                    case, {name: fn() for name, fn in executors.items()}, {"memory", "redis"}
                )
                recorder.reset()
                memory_recorder.reset()
                before = executors["redis"].calls
                fns: dict[str, Callable[[], object]] = {
                    **executors,
                    "ping": lambda: loop.run_until_complete(client.ping()),
                    "driver": lambda: loop.run_until_complete(_noop()),
                }
                timings[query] = _timed(fns, REDIS_SET_SECONDS)
                calls[query] = executors["redis"].calls - before
                problems = [f"{n}: {fn.errors[0]}" for n, fn in executors.items() if fn.errors]
                problems += recorder.problems("redis", calls[query])
                problems += memory_recorder.problems("memory", executors["memory"].calls - before)
                if problems:
                    raise RuntimeError(
                        f"{query}: not every execute was an allowed Redis decision: {problems}"
                    )
                in_situ[query] = {
                    name: _in_situ(limiters[name], executors[name]) for name in limiters
                }
            redis_version = server.info("server")["redis_version"]
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(storage.close())
                loop.run_until_complete(client.aclose())
            loop.close()

    labels = {
        "none": "no extensions",
        "memory": "CostLimiter, MemoryStorage (reference)",
        "redis": "CostLimiter, AsyncRedisStorage",
        "ping_extension": "extension awaiting one PING, no quotaql (ref.)",
        "ping": "async PING (one round trip)",
        "driver": "loop.run_until_complete(noop) (reference)",
    }
    rows = []
    for name, label in labels.items():
        row = [label]
        for query in TIMED_QUERIES:
            t = timings[query]
            row += [fmt_us(t[name].median_us), fmt_us(t[name].min_us)]
        rows.append(row)
    print_table(
        ["Redis: µs per call", *(f"{q} {col}" for q in TIMED_QUERIES for col in ("median", "min"))],
        rows,
        title=(
            f"Redis {redis_version}, private server on loopback, storage timeout "
            f"{STORAGE_TIMEOUT_S:g} s: median µs over "
            + ", ".join(f"{timings[q]['none'].samples:,} ({q})" for q in TIMED_QUERIES)
            + " rounds of one call each in turns; every decision allowed, from Redis: "
            f"{sum(calls.values()):,}"
        ),
    )
    for query in TIMED_QUERIES:
        _print_notes(timings[query], query)
    pieces = {
        "analyze": "analyze",
        "actual_cost": "actual cost (the plan walked)",
        "acquire": "limiter acquire (Redis: the round trip in it)",
    }
    print_table(
        [
            "timed inside execute (µs, median)",
            *(f"{q} {name}" for q in TIMED_QUERIES for name in ("memory", "Redis")),
        ],
        [
            [
                label,
                *(
                    fmt_us(in_situ[q][name][piece])
                    for q in TIMED_QUERIES
                    for name in ("memory", "redis")
                ),
            ]
            for piece, label in pieces.items()
        ],
        title=f"The extension's pieces, timed inside up to {IN_SITU_CALLS} executes each",
    )

    targets: list[Target] = []
    rows = []
    for query in TIMED_QUERIES:
        t = timings[query]
        none, red, ping, driver = (t[n].median_us for n in ("none", "redis", "ping", "driver"))
        trip = None if ping is None or driver is None else ping - driver
        extra = None if None in (none, red, trip) else red - none - trip
        target = Target(
            f"execute (Redis - none - round trip) / none, {query}",
            ratio(extra, none),
            REDIS_EXTRA_MAX,
        )
        targets.append(target)
        rows += [
            _target_row(target.name.removeprefix("execute "), target.value, target),
            _target_row(f"Redis / none, {query}", ratio(red, none)),
            [
                f"µs: Redis - none {_delta(red, none)}, round trip (PING - driver) "
                f"{fmt_us(trip)}, memory - none {_delta(t['memory'].median_us, none)}",
                "",
                "",
                "",
            ],
            [
                f"µs: Redis - memory {_delta(red, t['memory'].median_us)}, extension awaiting "
                f"one PING - none {_delta(t['ping_extension'].median_us, none)}",
                "",
                "",
                "",
            ],
        ]
    print_table(["figure (same run)", "value", "target", "status"], rows)
    return targets


# -- 3: HTTP throughput through uvicorn ------------------------------------------------------

# The load generator, run by this interpreter in another process: it reads one JSON command a
# line on stdin, runs that many POSTs, CONCURRENCY at a time, and answers one JSON line.
LOADGEN = r"""
import asyncio, json, sys, time
import httpx

async def run(client, cmd):
    url, total, deadline = cmd["url"], cmd["requests"], time.perf_counter() + cmd["time_limit"]
    body = cmd["body"].encode()
    headers = {"content-type": "application/json", "x-api-key": cmd["tenant"]}
    state = {"next": 0, "ok": 0, "bad": 0, "examples": []}

    async def worker():
        while state["next"] < total and time.perf_counter() < deadline:
            state["next"] += 1
            try:
                r = await client.post(url, content=body, headers=headers)
                payload = r.json() if r.status_code == 200 else None
                good = (
                    payload is not None
                    and "errors" not in payload
                    and payload.get("data") is not None
                    and (not cmd["priced"] or "throttleStatus" in
                         (payload.get("extensions") or {}).get("cost", {}))
                )
                why = "" if good else f"{r.status_code}: {r.text[:200]}"
            except Exception as error:
                good, why = False, f"{type(error).__name__}: {error}"
            if good:
                state["ok"] += 1
            else:
                state["bad"] += 1
                if len(state["examples"]) < 3:
                    state["examples"].append(why)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(cmd["concurrency"])))
    seconds = time.perf_counter() - started
    return {"ok": state["ok"], "bad": state["bad"], "examples": state["examples"],
            "seconds": seconds}

async def make_client(concurrency):
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(timeout=10, limits=limits)

with asyncio.Runner() as runner:
    clients = {}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        client = clients.get(cmd["url"])
        if client is None:
            client = clients[cmd["url"]] = runner.run(make_client(cmd["concurrency"]))
        print(json.dumps(runner.run(run(client, cmd))), flush=True)
    for client in clients.values():
        runner.run(client.aclose())
"""


class _LoadGenerator:
    """The load generator's process: started here, stopped here (by its PID), errors or not."""

    def __init__(self, stderr: IO[bytes]) -> None:
        self._stderr = stderr
        self.process = subprocess.Popen(
            [sys.executable, "-c", LOADGEN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        try:
            self._read(HTTP_REPLY_TIMEOUT_S)  # {"ready": true}
        except BaseException:
            self.stop()
            raise

    def _read(self, timeout: float) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout)
        line = stdout.readline() if ready else ""
        if not line:
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"the load generator did not answer in {timeout:g} s:\n{tail}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, **command: Any) -> dict[str, Any]:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        return self._read(HTTP_REPLY_TIMEOUT_S)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()  # SIGKILL to its PID
            self.process.wait(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def bench_http(cases: dict[str, Case], config: Config) -> list[Target]:
    case = cases["medium"]
    body = json.dumps({"query": case.source, "variables": case.variables})
    # Default identity: the X-API-Key header the load generator sends, a known key.
    schemas = {
        "with": make_schema(CostLimiter(config, storage=MemoryStorage())),
        "without": make_schema(),
        "before": make_schema(_before_limiter()),
    }
    rates: dict[str, list[float]] = {name: [] for name in schemas}
    cpu: dict[str, list[float]] = {name: [] for name in schemas}
    deadline = time.monotonic() + min(HTTP_SECTION_TIME_LIMIT_S, max(5.0, remaining_budget()))
    with contextlib.ExitStack() as stack:
        servers = {
            name: stack.enter_context(UvicornServer(GraphQL(schema)))
            for name, schema in schemas.items()
        }
        load = _LoadGenerator(stack.enter_context(tempfile.TemporaryFile()))
        stack.callback(load.stop)

        def one_round(name: str, requests: int) -> None:
            started_cpu = time.process_time()
            reply = load.run(
                url=f"{servers[name].url}/graphql",
                body=body,
                tenant=TENANT,
                requests=requests,
                concurrency=CONCURRENCY,
                time_limit=HTTP_ROUND_TIME_LIMIT_S,
                priced=name != "without",
            )
            server_cpu = time.process_time() - started_cpu
            if reply["bad"]:
                raise RuntimeError(
                    f"HTTP {name}: {reply['bad']} of {reply['ok'] + reply['bad']} requests failed:"
                    f" {reply['examples']}"
                )
            if reply["ok"] and requests != HTTP_WARMUP_REQUESTS:
                rates[name].append(reply["ok"] / reply["seconds"])
                cpu[name].append(server_cpu / reply["ok"] * 1e6)

        for name in schemas:
            one_round(name, HTTP_WARMUP_REQUESTS)  # connections opened, code specialized
        order = list(schemas)
        for index in range(HTTP_ROUNDS):
            if time.monotonic() > deadline:
                break
            for name in order if index % 2 == 0 else order[::-1]:
                one_round(name, HTTP_REQUESTS)

    medians = {name: statistics.median(r) if r else None for name, r in rates.items()}
    # Paired: each round measured the servers one after another, so a round's ratio is free
    # of the machine's slow drifts; the median of the rounds' ratios is the figure.
    paired = {
        name: statistics.median(a / b for a, b in zip(rates[name], rates["without"], strict=True))
        if rates[name] and len(rates[name]) == len(rates["without"])
        else None
        for name in ("with", "before")
    }
    http_labels = {
        "with": "with CostLimiter (memory)",
        "without": "without CostLimiter",
        "before": f"with CostLimiter before the gate ({_previous.BEFORE_GATE})",
    }
    rows = [
        [
            http_labels[name],
            fmt_int(round(medians[name])) if medians[name] else "-",
            fmt_int(round(max(rates[name]))) if rates[name] else "-",
            fmt_int(round(min(rates[name]))) if rates[name] else "-",
            fmt_us(statistics.median(cpu[name]) if cpu[name] else None),
            str(len(rates[name])),
        ]
        for name in schemas
    ]
    print_table(
        ["POST /graphql, medium", "median req/s", "best", "worst", "server CPU µs/req", "rounds"],
        rows,
        title=(
            f"HTTP: uvicorn {version('uvicorn')} (h11, asyncio) in a thread, "
            "strawberry.asgi.GraphQL; load from another process (httpx, "
            f"{CONCURRENCY} requests in flight, {HTTP_REQUESTS} per round, rounds alternating)"
        ),
    )
    target = Target(
        "HTTP req/s with / without CostLimiter, medium (paired rounds)",
        paired["with"],
        HTTP_RATIO_MIN,
        op=">=",
    )
    print_table(
        ["ratio (same run)", "value", "target", "status"],
        [
            _target_row(target.name, target.value, target),
            _target_row(
                "HTTP req/s with the one before the gate / without (paired rounds)",
                paired["before"],
            ),
            _target_row(
                "HTTP median req/s with / without", ratio(medians["with"], medians["without"])
            ),
            _target_row(
                "HTTP median req/s before the gate / without",
                ratio(medians["before"], medians["without"]),
            ),
        ],
    )
    return [target]


def _before_limiter(**options: Any) -> Any:
    """The ``CostLimiter`` of the last commit before the gate, configured like today's."""
    before = _previous.load()
    plugin = importlib.import_module(f"{before.__name__}.plugin")
    config = importlib.import_module(f"{before.__name__}.config")
    storage = importlib.import_module(f"{before.__name__}.storage.memory")
    with tempfile.TemporaryDirectory(prefix="quotaql-bench-before-") as directory:
        path = Path(directory) / "quotaql.toml"
        path.write_text(CONFIG_TOML, encoding="utf-8")
        loaded = config.load_config(path)
    return plugin.CostLimiter(loaded, storage=storage.MemoryStorage(), **options)


def main() -> list[Target]:
    corpus = corpus_dir()
    sdl = (corpus / "schema.graphql").read_text(encoding="utf-8")
    all_cases = load_cases(corpus)
    cases = {case.name: case for case in all_cases}
    print(f"corpus: {corpus} ({', '.join(QUERIES)})")
    print(
        f"strawberry-graphql {version('strawberry-graphql')}, graphql-core "
        f"{version('graphql-core')}, quotaql {version('quotaql')}, redis-py {redis.__version__}, "
        f"uvicorn {version('uvicorn')}, httpx {version('httpx')}"
    )
    print(
        f"resolvers: every list returns `first` items (at most {MAX_LIST_ITEMS}); strings built "
        "per object (ids, names, emails, titles; comment bodies of 60 characters)\n"
    )
    check_schema(make_schema(), sdl, all_cases)
    with tempfile.TemporaryDirectory(prefix="quotaql-bench-") as directory:
        config = _config(Path(directory))
    targets: list[Target] = []
    seconds: dict[str, float] = {}
    for name, section in (
        ("memory", bench_memory),
        ("redis", bench_redis),
        ("http", bench_http),
    ):
        started = time.monotonic()
        targets += section(cases, config)
        seconds[name] = time.monotonic() - started
    print("section times: " + ", ".join(f"{name} {s:.0f} s" for name, s in seconds.items()))
    print()
    print_targets(targets, title="Targets (a report: a miss does not fail the run)")
    return targets
