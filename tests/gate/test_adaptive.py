"""Adaptive limits through the gate: what a tenant of an adaptive tier is admitted while the
service is under pressure, what an essential tier keeps, shadow mode, refunds at the debit's
own multiplier, the deny cache, the metrics, the span, the logs and the configuration.

The budgets live in a real ``MemoryStorage`` on an injected clock, shared with the adaptive
controller: simulated seconds, exact refills. Operations really execute (graphql-core), so
their errors are what the error source sees; a resolver "takes time" by moving the clock.
"""

from __future__ import annotations

import heapq
import logging
import random
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import GraphQLError, build_schema, execute, parse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql import ariadne
from quotaql.config import load_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.errors import ConfigError
from quotaql.gate import Gate, Operation, current_operation
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + """
type Query {
  products(first: Int = 10): [Product] @listSize(slicingArguments: ["first"])
  big(first: Int = 80): [Product] @listSize(slicingArguments: ["first"])
  missing: Product
  broken: Product
}
type Product { id: ID }
type Subscription { ticks: Int @cost(weight: "30") }
"""
)
TEN = "{ products(first: 10) { id } }"  # costs 10
BROKEN = "{ broken { id } }"  # costs 1, and its resolver crashes
TOML = """
[limits]
deny_cache_size = 0
[tiers.free]
capacity = 100
refill_per_second = 10
[tiers.ops]
capacity = 100
refill_per_second = 10
essential = true
[tenants.greedy]
tier = "free"
[tenants.ops]
tier = "ops"
{tenants}
[adaptive]
mode = "{mode}"
sources = {sources}
engage_for = {engage_for}
release_for = 0
{extra}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now


class Pressure:
    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def __call__(self) -> float:
        return self.value


def request(key: str) -> dict[str, Any]:
    return {"type": "http", "client": ("203.0.113.9", 1), "headers": [(b"x-api-key", key.encode())]}


class World:
    """A gate on a memory storage, both on one simulated clock, with a pressure dial."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        mode: str = "enforce",
        sources: str = '["callable"]',
        extra: str = "",
        tenants: str = "",
        engage_for: float = 0,
        metrics: PrometheusMetrics | None = None,
        tracer_provider: Any = None,
        **gate: Any,
    ) -> None:
        self.path = tmp_path / "quotaql.toml"
        self.path.write_text(
            TOML.format(
                mode=mode, sources=sources, extra=extra, tenants=tenants, engage_for=engage_for
            ),
            encoding="utf-8",
        )
        self.clock = Clock()
        self.pressure = Pressure()
        self.storage = MemoryStorage(clock=self.clock)
        if "callable" in sources:
            gate.setdefault("pressure", self.pressure)
        self.gate = Gate(
            load_config(self.path),
            storage=self.storage,
            metrics=metrics,
            tracer_provider=tracer_provider,
            **gate,
        )
        if self.gate.adaptive is not None:
            self.gate.adaptive.clock = self.clock

    @property
    def adaptive(self) -> Any:
        return self.gate.adaptive

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.now += seconds

    def run(self, tenant: str, query: str = TEN, *, settle: bool = True) -> Operation:
        """One operation of ``tenant``, executed for real when admitted, then settled."""
        document = parse(query)
        op = self.gate.admit(SCHEMA, document, request=request(tenant))
        if op.runs and settle:
            result = execute(SCHEMA, document, root_value=self)
            self.gate.settle(op, result.data, result.errors)
        self.gate.finish(op)
        return op

    def remaining(self, tenant: str, tier: str = "free") -> float:
        quota = self.gate.config.tiers[tier].quota
        return self.gate.limiter.peek(f"key:{tenant}", [quota]).remaining

    # resolvers (the root value's attributes)
    def products(self, info: Any, first: int = 10) -> list[dict[str, str]]:
        assert current_operation() is not None  # the gate's operation, while it runs
        return [{"id": str(i)} for i in range(first)]

    def big(self, info: Any, first: int = 80) -> list[dict[str, str]]:
        return [{"id": "only one"}]  # actual cost 1: most of it comes back

    def missing(self, info: Any) -> None:
        raise GraphQLError("no such product", extensions={"code": "NOT_FOUND"})

    def broken(self, info: Any) -> None:
        raise RuntimeError("database connection lost")


def admitted_per_second(world: World, tenant: str, seconds: int, tries: int = 10) -> float:
    """A greedy client: ``tries`` operations of cost 10 a second for ``seconds`` seconds;
    the cost points admitted per second."""
    admitted = 0.0
    for _ in range(seconds * tries):
        world.tick(1.0 / tries)
        op = world.run(tenant)
        if not op.refused:
            admitted += op.cost
    return admitted / seconds


def engage(world: World, pressure: float, seconds: int = 12) -> None:
    world.pressure.value = pressure
    for _ in range(seconds):  # m steps down by 0.1 a second
        world.tick()
        world.adaptive.poll()


# -- what is admitted --------------------------------------------------------------------------


def test_a_greedy_tenant_is_admitted_m_times_its_refill_rate_while_engaged(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    admitted_per_second(world, "greedy", 10)  # its burst first
    assert admitted_per_second(world, "greedy", 30) == pytest.approx(10, abs=10 / 30 + 0.01)

    engage(world, 0.6)
    assert (world.adaptive.engaged, world.adaptive.multiplier) == (True, 0.4)
    admitted_per_second(world, "greedy", 10)  # drain what it saved meanwhile
    rate = admitted_per_second(world, "greedy", 60)
    assert rate == pytest.approx(0.4 * 10, abs=10 / 60 + 0.01)  # m × refill, ± one operation
    op = world.run("greedy")
    assert op.multiplier == 0.4
    assert op.costs == (25.0,)  # 10 / 0.4

    engage(world, 0.0)  # released, m back to 1 (0.1 a second)
    assert (world.adaptive.engaged, world.adaptive.multiplier) == (False, 1.0)
    admitted_per_second(world, "greedy", 10)
    assert admitted_per_second(world, "greedy", 30) == pytest.approx(10, abs=10 / 30 + 0.01)


def test_an_essential_tier_is_never_scaled(tmp_path: Path) -> None:
    world = World(tmp_path)
    engage(world, 1.0)
    assert world.adaptive.multiplier == 0.25

    admitted_per_second(world, "ops", 10)  # its burst
    rate = admitted_per_second(world, "ops", 60)
    assert rate == pytest.approx(10, abs=10 / 60 + 0.01)  # its whole refill
    op = world.run("ops")
    assert (op.multiplier, op.costs, op.base) == (1.0, None, None)
    assert "ops" not in world.gate.config.adaptive_tiers


def test_tiers_lists_the_only_scaled_tiers(tmp_path: Path) -> None:
    world = World(
        tmp_path,
        extra='tiers = ["pro"]',
        tenants='[tiers.pro]\ncapacity = 100\nrefill_per_second = 10\n[tenants.p]\ntier = "pro"',
    )
    engage(world, 1.0)

    assert world.run("greedy").multiplier == 1.0
    assert world.run("p").multiplier == 0.25


def test_shadow_mode_computes_and_exports_m_but_applies_nothing(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    world = World(tmp_path, mode="shadow", metrics=PrometheusMetrics(registry))
    engage(world, 0.9)

    assert (world.adaptive.engaged, world.adaptive.computed) == (True, 0.25)
    assert world.adaptive.multiplier == 1.0
    admitted_per_second(world, "greedy", 10)
    assert admitted_per_second(world, "greedy", 30) == pytest.approx(10, abs=10 / 30 + 0.01)
    op = world.run("greedy")
    assert (op.multiplier, op.costs) == (1.0, None)
    sample = registry.get_sample_value
    assert sample(names.ADAPTIVE_MULTIPLIER, {"tier": "free"}) == 0.25  # what would apply
    assert sample(names.ADAPTIVE_MULTIPLIER, {"tier": "ops"}) == 1.0
    assert sample(names.ADAPTIVE_ENGAGED) == 1.0


def test_a_charge_above_the_capacity_after_scaling_is_clamped_to_it(tmp_path: Path) -> None:
    world = World(tmp_path)
    engage(world, 1.0)

    op = world.run("greedy", "{ big(first: 80) { id } }")  # 80 / 0.25 = 320 > 100
    assert op.costs == (100.0,)
    assert op.decision.allowed  # never COST_EXCEEDS_CAPACITY because of pressure
    # Actual 1: 79 of 80 points come back, at the debit's own factor (100 / 80).
    assert op.refunded == 79
    assert world.remaining("greedy") == pytest.approx(100 - 100 + 79 * 100 / 80)
    world.tick(5)
    op = world.run("greedy", "{ big(first: 120) { id } }")  # above the capacity on its own
    assert op.decision.reason == "exceeds_capacity"


def test_the_global_quota_is_left_alone_unless_asked(tmp_path: Path) -> None:
    extra = "[global]\ncapacity = 1000\nrefill_per_second = 100\n"
    alone = World(tmp_path, extra="\n" + extra)
    engage(alone, 0.5)
    assert alone.run("greedy").costs == (20.0, 10.0)
    scaled = World(tmp_path, extra="global = true\n" + extra)
    engage(scaled, 0.5)
    assert scaled.run("greedy").costs == (20.0, 20.0)
    assert scaled.run("ops").costs is None  # an essential tier pays the global quota as is


def test_requests_refused_before_pricing_pay_the_minimum_scaled(tmp_path: Path) -> None:
    world = World(tmp_path)
    engage(world, 1.0)
    errors = world.gate.parse(SCHEMA, "{ nope }")
    assert isinstance(errors, list)

    op = world.gate.admit(SCHEMA, errors, request=request("greedy"))
    assert op.refused
    assert world.remaining("greedy") == 100 - 1 / 0.25


def test_a_subscription_s_later_events_pay_the_multiplier_in_force(tmp_path: Path) -> None:
    world = World(tmp_path)
    op = world.run("greedy", "subscription { ticks }", settle=False)
    assert (op.multiplier, op.decision.remaining) == (1.0, 70.0)
    assert world.gate.event(op) is None  # the first event: paid by the start

    world.pressure.value = 0.5
    for _ in range(5):  # at the same instant: the bucket does not refill meanwhile
        world.adaptive.update(world.clock.now)
    assert world.adaptive.multiplier == 0.5
    assert world.gate.event(op) is None
    assert op.multiplier == 0.5
    assert op.decision.remaining == pytest.approx(70 - 30 / 0.5)
    world.pressure.value = 0.0
    for _ in range(5):
        world.adaptive.update(world.clock.now)
    error = world.gate.event(op)  # released: 30 again, of the 10 left
    assert (op.multiplier, op.costs) == (1.0, None)
    assert error is not None
    assert (error.extensions or {})["code"] == "RATE_LIMITED"
    assert 2.0 <= op.decision.retry_after <= 2.2  # (30 - 10) / 10, jittered; not 60's 5 s


# -- refunds -----------------------------------------------------------------------------------


def test_a_refund_uses_the_multiplier_of_its_own_debit_never_the_current_one(
    tmp_path: Path,
) -> None:
    """The attack: pay at m = 1, get the refund at m = 0.25 (four times the points back)."""
    world = World(tmp_path)
    world.run("greedy", "{ products(first: 50) { id } }")  # 50 spent: room to gain
    start = world.remaining("greedy")
    assert start == 50

    cheap = world.gate.admit(SCHEMA, parse(TEN), request=request("greedy"))
    assert cheap.multiplier == 1.0
    world.pressure.value = 1.0
    world.adaptive.update(world.clock.now)  # pressure rises between debit and refund
    world.adaptive.update(world.clock.now)
    assert world.adaptive.multiplier < 1.0
    world.gate.settle(cheap, {"products": [{"id": "1"}]})  # actual 1: 9 come back
    assert cheap.refunded == 9
    assert world.remaining("greedy") == start - 10 + 9  # not - 10 + 36

    # The other way: paid at 0.8, refunded after the release: 9 / 0.8 back, no less.
    dear = world.gate.admit(SCHEMA, parse(TEN), request=request("greedy"))
    m = dear.multiplier
    assert m < 1.0
    world.pressure.value = 0.0
    for _ in range(5):
        world.adaptive.update(world.clock.now)
    assert world.adaptive.multiplier == 1.0
    world.gate.settle(dear, {"products": [{"id": "1"}]})
    assert world.remaining("greedy") == pytest.approx(start - 1 - 10 / m + 9 / m)


def test_no_sequence_of_multiplier_changes_lets_a_tenant_gain(tmp_path: Path) -> None:
    """Random pressure moves between debits and refunds: every operation ends up paying
    its actual cost at the multiplier of its own debit, exactly."""
    rng = random.Random(7)
    world = World(tmp_path, extra="step = 1.0\nfloor = 0.25\n")
    expected = 100.0
    for _ in range(200):
        world.pressure.value = rng.choice((0.0, 0.3, 0.6, 0.9))
        world.adaptive.update(world.clock.now)
        first = rng.choice((4, 6, 10))
        op = world.gate.admit(SCHEMA, parse(f"{{ products(first: {first}) {{ id }} }}"),
                              request=request("greedy"))  # fmt: skip
        world.pressure.value = rng.choice((0.0, 0.3, 0.6, 0.9))
        world.adaptive.update(world.clock.now)
        if op.refused:
            continue
        returned = rng.randint(1, first)
        world.gate.settle(op, {"products": [{"id": "x"}] * returned})
        expected -= returned / op.multiplier
        # Exact within the storage's resolution (its states are rounded to 1e-5 points).
        assert world.remaining("greedy") == pytest.approx(expected, abs=1e-3)
        if world.remaining("greedy") < 45:
            world.tick(10)  # refill to the top
            expected = 100.0
    assert expected < 100.0


# -- the measured signal through real executions (§3.3) ------------------------------------------

TENANTS = "\n".join(f'[tenants.t{i}]\ntier = "free"' for i in range(10))


def measured_world(tmp_path: Path, sources: str) -> World:
    return World(tmp_path, sources=sources, tenants=TENANTS, engage_for=2,
                 extra="min_samples = 20\nwindow = 10\n")  # fmt: skip


def rounds(
    world: World,
    count: int,
    queries: dict[str, str],
    burst: dict[str, int] | None = None,
    delays: dict[str, float] | None = None,
) -> dict[str, int]:
    """``count`` seconds of concurrent traffic: at the start of each second every tenant
    sends its query ``burst`` times (default once); each admitted operation runs and is
    settled ``delays`` seconds later (default 10 ms), in the order the clock reaches them,
    possibly seconds later. Returns how many of each tenant's operations were refused."""
    burst, delays = burst or {}, delays or {}
    refused = dict.fromkeys(queries, 0)
    pending: list[tuple[float, int, Operation, Any]] = []
    for _ in range(count):
        start = world.clock.now
        for tenant, query in queries.items():
            for _ in range(burst.get(tenant, 1)):
                document = parse(query)
                op = world.gate.admit(SCHEMA, document, request=request(tenant))
                if op.runs:
                    done = start + delays.get(tenant, 0.01)
                    heapq.heappush(pending, (done, id(op), op, document))
                else:
                    refused[tenant] += 1
                    world.gate.finish(op)
        while pending and pending[0][0] <= start + 1.0:
            done, _, op, document = heapq.heappop(pending)
            world.clock.now = done
            result = execute(SCHEMA, document, root_value=world)
            world.gate.settle(op, result.data, result.errors)
            world.gate.finish(op)
        world.clock.now = start + 1.0
    return refused


def test_one_tenant_spending_its_budget_on_slow_queries_does_not_engage(tmp_path: Path) -> None:
    world = measured_world(tmp_path, '["latency"]')
    queries = {f"t{i}": TEN for i in range(10)}
    delays = {"t0": 3.0}  # its resolver sleeps 3 s, every time

    refused = rounds(world, 40, queries, {"t0": 12}, delays)  # more than its budget
    assert refused["t0"] > 300
    assert sum(refused.values()) == refused["t0"]
    assert world.adaptive.pressures == {"latency": 0.0}
    assert not world.adaptive.engaged
    assert world.run("t1").multiplier == 1.0

    delays.update({f"t{slow}": 3.0 for slow in range(1, 5)})  # five of ten slow: overload
    rounds(world, 10, queries, None, delays)
    assert world.adaptive.pressures["latency"] == 1.0
    assert world.adaptive.engaged


def test_client_errors_and_invalid_documents_are_no_pressure(tmp_path: Path) -> None:
    world = measured_world(tmp_path, '["errors"]')
    queries = {f"t{i}": "{ missing { id } }" for i in range(10)}  # NOT_FOUND, every time

    rounds(world, 20, queries)
    for tenant in queries:  # and documents that do not even parse or validate
        for text in ("{ missing", "{ nope }"):
            errors = world.gate.parse(SCHEMA, text)
            world.gate.admit(SCHEMA, errors, request=request(tenant))
    rounds(world, 5, queries)
    assert world.adaptive.pressures == {"errors": 0.0}
    assert not world.adaptive.engaged

    broken = {f"t{i}": "{ broken { id } }" for i in range(10)}  # a resolver crashes
    rounds(world, 5, broken)
    assert world.adaptive.pressures["errors"] == 1.0
    assert world.adaptive.engaged


def test_two_failing_tenants_pay_their_own_multiplier_and_nobody_else_does(
    tmp_path: Path,
) -> None:
    """Two tenants of ten whose every operation fails: the window's errors pressure is 1,
    from two subjects; it engages nothing for the others, and the two pay the floor. The
    metrics count the pressure left out, the span says whose multiplier applied."""
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    world = World(
        tmp_path, sources='["errors"]', tenants=TENANTS, engage_for=2,
        extra="min_samples = 20\nwindow = 10\n", metrics=PrometheusMetrics(registry),
        tracer_provider=provider,
    )  # fmt: skip
    queries = {f"t{i}": TEN for i in range(2, 10)} | {"t0": BROKEN, "t1": BROKEN}

    rounds(world, 10, queries)
    assert world.adaptive.ignored == {"errors": names.IGNORED_FEW_SUBJECTS}
    assert not world.adaptive.engaged
    exporter.clear()
    failing, honest = world.run("t0", BROKEN), world.run("t5")

    assert (failing.multiplier, failing.costs) == (0.25, (4.0,))  # a 1-point query debits 4
    assert (honest.multiplier, honest.costs) == (1.0, None)
    sample = registry.get_sample_value
    ignored = {"source": "errors", "reason": names.IGNORED_FEW_SUBJECTS}
    assert (sample(names.PRESSURE_IGNORED_TOTAL, ignored) or 0) >= 5
    assert sample(names.PRESSURE_IGNORED_TOTAL, {**ignored, "reason": "cost_share"}) == 0.0
    assert sample(names.ADAPTIVE_CULPRITS) == 2.0
    assert sample(names.PRESSURE, {"source": "errors"}) == 0.0
    assert sample(names.ADAPTIVE_ENGAGED) == 0.0
    spans = [span.attributes or {} for span in exporter.get_finished_spans()]
    assert [span.get(names.ATTR_ADAPTIVE_MULTIPLIER) for span in spans] == [0.25, None]
    assert [span.get(names.ATTR_ADAPTIVE_OWN) for span in spans] == [True, None]

    # An outage: the database behind ``broken`` is down, and five tenants of ten use it in
    # their usual queries (their cost: a third of the window's).
    queries.update({f"t{i}": TEN[:-1] + "broken { id } }" for i in range(5)})
    rounds(world, 10, queries)
    assert world.adaptive.ignored == {}
    assert world.adaptive.engaged
    assert world.run("t9").multiplier < 1.0


# -- the deny cache ---------------------------------------------------------------------------


def test_the_deny_cache_refuses_a_scaled_retry_without_asking_the_storage(
    tmp_path: Path,
) -> None:
    """The cache compares a kept refusal with the scaled debit: the same operation retried
    while engaged is refused from memory, as it is without adaptation (real time here: the
    cache runs on the monotonic clock)."""
    path = tmp_path / "quotaql.toml"
    path.write_text(
        TOML.replace("deny_cache_size = 0", "deny_cache_size = 100").format(
            mode="enforce", sources='["callable"]', extra="step = 1.0", tenants="", engage_for=0
        ),
        encoding="utf-8",
    )
    gate = Gate(load_config(path), pressure=lambda: 1.0)
    outcomes = []
    for _ in range(5):
        op = gate.admit(SCHEMA, parse(TEN), request=request("greedy"))
        outcomes.append(op.outcome)
        gate.finish(op)
    # 40 a time from 100: two fit, the third is refused by the storage, the rest from memory.
    assert outcomes == [names.ALLOWED, names.ALLOWED, names.BLOCKED, names.DENIED, names.DENIED]
    assert op.decision.retry_after > 0


# -- what an operator sees -----------------------------------------------------------------------


def test_the_metrics_follow_the_signal(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    world = World(tmp_path, metrics=PrometheusMetrics(registry))
    sample = registry.get_sample_value
    transitions = names.ADAPTIVE_TRANSITIONS_TOTAL
    assert sample(names.ADAPTIVE_ENGAGED) == 0.0  # the series exist from the start
    assert sample(names.PRESSURE, {"source": "callable"}) == 0.0
    assert sample(transitions, {"to": "engaged"}) == 0.0
    assert sample(transitions, {"to": "released"}) == 0.0

    engage(world, 0.8)
    assert sample(names.PRESSURE, {"source": "callable"}) == 0.8
    assert sample(names.ADAPTIVE_ENGAGED) == 1.0
    assert sample(names.ADAPTIVE_MULTIPLIER, {"tier": "free"}) == 0.25
    assert sample(names.ADAPTIVE_MULTIPLIER, {"tier": "ops"}) == 1.0
    assert sample(transitions, {"to": "engaged"}) == 1.0

    engage(world, 0.0)
    assert sample(names.ADAPTIVE_ENGAGED) == 0.0
    assert sample(names.ADAPTIVE_MULTIPLIER, {"tier": "free"}) == 1.0
    assert sample(transitions, {"to": "released"}) == 1.0
    # The charged points are the operations' cost, whatever their budgets were debited.
    engage(world, 0.8)
    world.run("greedy")
    charged = sample(names.COST_TOTAL, {"tier": "free", "outcome": "charged"})
    assert charged == 10.0


def test_the_span_says_the_multiplier_when_it_applied(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    world = World(tmp_path, tracer_provider=provider)
    world.run("greedy")
    engage(world, 0.6)
    world.run("greedy")
    world.run("ops")

    spans = [span.attributes or {} for span in exporter.get_finished_spans()]
    assert [span.get(names.ATTR_ADAPTIVE_MULTIPLIER) for span in spans] == [None, 0.4, None]


# -- configuration -------------------------------------------------------------------------------


def test_callable_without_a_pressure_function_is_refused_at_construction(tmp_path: Path) -> None:
    world = World(tmp_path, pressure=lambda: 0.0)
    with pytest.raises(ConfigError) as raised:
        Gate(load_config(world.path))
    assert (raised.value.file, raised.value.key) == (str(world.path), "adaptive.sources")
    assert 'lists "callable", but the gate has no pressure callable' in raised.value.reason
    with pytest.raises(TypeError, match="pressure must be a callable"):
        Gate(load_config(world.path), pressure=0.7)  # type: ignore[arg-type]


def test_a_pressure_function_nothing_reads_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=names.LOGGER):
        World(tmp_path, sources='["latency"]', pressure=lambda: 0.0)
    assert [r.quotaql_event for r in caplog.records] == ["pressure_unused"]


def test_an_unfair_share_is_said_at_startup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=names.LOGGER):
        World(tmp_path, sources='["latency"]', extra="max_tenant_share = 0.2\nmin_subjects = 1")
        World(tmp_path, sources='["latency"]', extra="max_tenant_share = 0.2")  # one subject
        # of five never engages alone: nothing to say
    (record,) = caplog.records
    assert record.quotaql_event == "adaptive_unfair"
    assert "max_tenant_share = 0.2 lets one tenant alone reach engage_at" in record.getMessage()


def reload(admit: Callable[[], Operation], done: Callable[[], bool]) -> None:
    """An operation (the gate knows its schema: its reload thread looks), then until the
    thread took the file as it is now (``done``: applied or refused), then an operation."""
    admit()
    deadline = time.monotonic() + 10
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done(), "the reload thread did not take the file within 10 s"
    admit()


def test_a_reload_carries_the_state_over_and_can_turn_it_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    world = World(tmp_path, metrics=PrometheusMetrics(registry))
    text = world.path.read_text(encoding="utf-8").replace(
        "[limits]\n", "[limits]\nreload_interval = 0.02\n"
    )
    world.path.write_text(text, encoding="utf-8")
    gate = Gate.from_config(
        world.path, storage=world.storage, pressure=world.pressure, metrics=world.gate.metrics
    )
    world.gate = gate
    gate.adaptive.clock = world.clock  # type: ignore[union-attr]
    engage(world, 1.0)
    controller = gate.adaptive

    # The tier becomes essential: from the next operation it is not scaled; the controller
    # (its samples, its state) is the same object.
    world.path.write_text(text.replace("[tiers.free]\n", "[tiers.free]\nessential = true\n"))
    reload(lambda: world.run("greedy"), lambda: gate.config.tiers["free"].essential)
    assert gate.adaptive is controller
    assert controller is not None
    assert controller.engaged
    assert world.run("greedy").multiplier == 1.0
    # A file listing "callable" for a gate without a pressure function is refused whole.
    other = tmp_path / "other.toml"
    latency = text.replace('sources = ["callable"]', 'sources = ["latency"]')
    other.write_text(latency, encoding="utf-8")
    bare = Gate.from_config(other)
    other.write_text(text, encoding="utf-8")

    def failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.quotaql_event == "config_reload_failed"]

    with caplog.at_level(logging.ERROR, logger=names.LOGGER):
        reload(lambda: bare.admit(SCHEMA, parse(TEN), request=request("greedy")),
               lambda: bool(failures()))  # fmt: skip
    failed = failures()
    assert 'adaptive.sources: lists "callable"' in failed[0].getMessage()
    assert bare.config.adaptive.sources == ("latency",)
    # Off: nothing is scaled any more, the gauges go back to neutral.
    world.path.write_text(text.replace('mode = "enforce"', 'mode = "off"'))
    reload(lambda: world.run("greedy"), lambda: gate.adaptive is None)
    assert gate.adaptive is None
    assert world.run("greedy").multiplier == 1.0
    assert registry.get_sample_value(names.ADAPTIVE_ENGAGED) == 0.0
    assert registry.get_sample_value(names.ADAPTIVE_MULTIPLIER, {"tier": "free"}) == 1.0


def test_the_adapters_give_their_gate_the_pressure_callable(tmp_path: Path) -> None:
    config = load_config(World(tmp_path).path)
    for adapter in (CostLimiter, ariadne.CostLimiter):
        limiter = adapter(config, pressure=lambda: 0.7)
        assert limiter.gate.adaptive is not None
        limiter.gate.adaptive.poll()
        assert limiter.gate.adaptive.pressures == {"callable": 0.7}
        with pytest.raises(ConfigError, match="no pressure callable"):
            adapter(config)
