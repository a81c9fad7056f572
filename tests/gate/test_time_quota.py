"""The time quota through the gate: the worker time an operation took (parsing, validation,
pricing, execution: the thread's CPU time) is charged to its subject when the gate is done
with it, checked before the next one runs (``RATE_LIMITED``, ``extensions.quota = "time"``),
remembered by the deny cache, counted, on the span; its configuration and its errors; and
how the measure shares an event loop's thread.

Operations really execute (graphql-core) with resolvers that burn CPU for a set time, on a
real ``MemoryStorage`` on a frozen clock (nothing refills between operations).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import time
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from graphql import GraphQLError, build_schema, execute, parse
from graphql.validation import ValidationRule
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.config.values import DEFAULT_TIME, time_quota
from quotaql.errors import ConfigError
from quotaql.gate import Gate, Operation, charges, worktime
from quotaql.gate.operation import Work
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

T = TypeVar("T")

SCHEMA = build_schema("type Query { slow(ms: Int = 50): Int  hello: String }")
TOML = """
[limits]
{limits}
[tiers.free]
capacity = 1000
refill_per_second = 50
{tier}
[tenants.greedy]
tier = "free"
[tenants.honest]
tier = "free"
"""
TIGHT = "time = { capacity_ms = 100, refill_ms_per_second = 20 }"


def burn(ms: float) -> None:
    """Keep this thread's CPU busy for ``ms`` milliseconds of CPU time."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        sum(range(200))


class Root:
    def slow(self, info: Any, ms: int = 50) -> int:
        burn(ms)
        return ms

    def hello(self, info: Any) -> str:
        return "world"


def request(key: str) -> dict[str, Any]:
    return {"type": "http", "client": ("203.0.113.9", 1), "headers": [(b"x-api-key", key.encode())]}


def on_a_thread_of_its_own(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on a new thread, as a server's thread runs operations: its
    measure is its own, whatever operations other tests of this process dropped in
    execution on theirs without finishing them (one held by a context variable that
    outlives its test would take a share of the thread's time)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args).result(timeout=60)


class World:
    def __init__(self, tmp_path: Path, *, limits: str = "", tier: str = TIGHT, **gate: Any):
        path = tmp_path / "quotaql.toml"
        path.write_text(TOML.format(limits=limits, tier=tier), encoding="utf-8")
        # A frozen clock: no refill between operations, so that what is left is exact.
        self.gate = Gate(load_config(path), storage=MemoryStorage(clock=lambda: 1_000.0), **gate)

    def run(self, key: str, query: str) -> Operation:
        return on_a_thread_of_its_own(self._run, key, query)

    def _run(self, key: str, query: str) -> Operation:
        op = self.gate.begin(request=request(key))
        document = self.gate.parse(SCHEMA, query, op=op)
        op = self.gate.admit(SCHEMA, document, op=op)
        if op.runs:
            result = execute(SCHEMA, parse(query), root_value=Root())
            self.gate.settle(op, result.data, result.errors)
        self.gate.finish(op)
        return op

    def time_left(self, key: str) -> float:
        config = self.gate.config
        quota = charges.time_quota(config, config.tiers["free"])
        assert quota is not None
        return self.gate.limiter.peek(f"key:{key}", [quota]).remaining


def test_a_slow_cheap_query_is_refused_by_the_time_quota_and_an_honest_one_runs_on(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    ran = [world.run("greedy", "{ slow(ms: 60) }") for _ in range(2)]
    assert all(not op.refused for op in ran)
    assert all(op.cost == 0 for op in ran)  # cheap in points: a scalar
    # Its resolver's CPU time, and a little.
    assert all(60 <= op.work.ms < 120 for op in ran), [op.work.ms for op in ran]
    # 100 ms at most, 120+ taken: in debt, refused before the third runs.
    refused = world.run("greedy", "{ slow(ms: 60) }")
    assert refused.code == "RATE_LIMITED"
    error = refused.errors[0]
    assert error.extensions is not None
    assert error.extensions["quota"] == "time"
    assert error.message.startswith("Your operations have taken all the worker time they may")
    retry = error.extensions["retryAfter"]
    wait = (sum(op.work.ms for op in ran) - 100) / 20  # the debt at 20 ms a second
    assert wait <= retry <= 1.1 * wait + 0.01  # jittered up by at most 10 %
    assert int(refused.headers["Retry-After"]) >= 1
    # Remembered: the next one is refused before anything is parsed or asked of the storage.
    denied = world.run("greedy", "{ slow(ms: 60) }")
    assert denied.outcome == names.DENIED
    assert denied.errors[0].extensions["quota"] == "time"  # type: ignore[index]
    assert denied.work.ns == 0  # nothing parsed
    # Another subject is not touched.
    assert not world.run("honest", "{ hello }").refused


def test_the_points_decision_does_not_show_the_time_quota(tmp_path: Path) -> None:
    world = World(tmp_path)
    op = world.run("honest", "{ hello }")
    assert op.decision is not None
    assert [status.name for status in op.decision.quotas] == ["tenant"]
    assert op.headers["RateLimit-Policy"] == '"tenant";q=1000;w=20'
    assert op.headers["X-RateLimit-Remaining"] == "999"


def test_honest_operations_are_charged_in_batches_not_one_storage_call_each(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, tier="")  # the default budget: the tier's points' worth
    assert world.gate.config.limits.time is DEFAULT_TIME
    tier = world.gate.config.tiers[world.gate.config.limits.default_tier]
    budget = charges.time_quota(world.gate.config, tier)
    assert budget is not None
    assert budget.capacity == max(DEFAULT_TIME.capacity, tier.quota.maximum * 20)
    world.run("greedy", "{ hello }")  # the first compiles the schema's prices: not this test's
    ops = [world.run("honest", "{ hello }") for _ in range(3)]
    taken = sum(op.work.ms for op in ops)
    assert 0 < taken < worktime.CHARGE_AT_MS  # each about a millisecond here
    assert world.time_left("honest") == budget.capacity  # owed, not charged yet
    slow = world.run("honest", "{ slow(ms: 30) }")  # over the threshold: charged, with the rest
    assert world.time_left("honest") == pytest.approx(
        budget.capacity - taken - slow.work.ms, abs=1.0
    )


def test_cpu_time_not_wall_time_is_charged(tmp_path: Path) -> None:
    assert worktime.CLOCK_SOURCE == "thread_cpu"  # Linux has it

    class Sleepy(Root):
        def slow(self, info: Any, ms: int = 50) -> int:
            time.sleep(ms / 1000)  # waiting (a database, a service): no worker time
            return ms

    world = World(tmp_path)
    op = world.gate.admit(SCHEMA, parse("{ slow(ms: 80) }"), request=request("greedy"))
    result = execute(SCHEMA, parse("{ slow(ms: 80) }"), root_value=Sleepy())
    world.gate.settle(op, result.data, result.errors)
    world.gate.finish(op)
    assert op.work.ms < 20


def test_a_document_refused_by_validation_pays_the_time_its_validation_took(
    tmp_path: Path,
) -> None:
    class Slow(ValidationRule):
        """A rule that takes 40 ms and refuses the document."""

        def enter_document(self, *_: Any) -> None:
            burn(40)
            self.report_error(GraphQLError("refused, slowly"))

    world = World(tmp_path)
    op = world.gate.begin(request=request("greedy"))
    errors = world.gate.parse(SCHEMA, "{ hello }", [Slow], op=op)
    assert isinstance(errors, list)
    assert op.work.ms >= 40
    world.gate.reject(op, errors)
    world.gate.finish(op)
    assert world.time_left("greedy") == pytest.approx(100 - op.work.ms, abs=0.01)


def test_a_subject_in_debt_is_refused_for_invalid_documents_too(tmp_path: Path) -> None:
    """Documents that never reach pricing (they fail validation, slowly) are checked
    against the time quota when they pay the minimum: once in debt, the subject's next
    requests are refused before anything is parsed."""

    class Slow(ValidationRule):
        def enter_document(self, *_: Any) -> None:
            burn(60)
            self.report_error(GraphQLError("refused, slowly"))

    world = World(tmp_path)
    works = []
    for _ in range(4):
        op = world.gate.begin(request=request("greedy"))
        errors = world.gate.parse(SCHEMA, "{ hello }", [Slow], op=op)
        if isinstance(errors, list) and not op.refused:
            world.gate.reject(op, errors)
        world.gate.finish(op)
        works.append((op.outcome, op.work.ms, op.decision))
    outcomes = [outcome for outcome, _, _ in works]
    # 60 ms each: two paid (120 > 100), the third found the debt, the fourth was denied.
    assert outcomes[:2] == [names.REJECTED, names.REJECTED]
    decision = works[2][2]
    assert decision is not None
    assert not decision.allowed
    assert decision.limited_by == "time"
    assert outcomes[3] == names.DENIED
    assert works[3][1] == 0  # refused before parsing: no work


def test_the_time_quota_is_off_by_tier_or_for_every_tier(tmp_path: Path) -> None:
    for limits, tier in (("", "time = false"), ("time = false", "")):
        world = World(tmp_path, limits=limits, tier=tier)
        assert world.gate.config.tiers["free"].time is (not tier)
        for _ in range(4):
            op = world.run("greedy", "{ slow(ms: 60) }")
            assert not op.refused
            assert op.time is None


def test_a_tier_s_own_time_quota_replaces_the_default(tmp_path: Path) -> None:
    world = World(
        tmp_path,
        limits="time = { capacity_ms = 1, refill_ms_per_second = 1 }",
        tier="time = { capacity_ms = 5000, refill_ms_per_second = 100 }",
    )
    assert world.gate.config.tiers["free"].time == time_quota(5000, 100)
    assert world.gate.config.limits.time == time_quota(1, 1)
    for _ in range(3):
        assert not world.run("greedy", "{ slow(ms: 60) }").refused


@pytest.mark.parametrize(
    ("line", "key", "phrase"),
    [
        ("time = 5", "limits.time", "expected a table { capacity_ms = ..., refill_ms_per"),
        ("time = true", "limits.time", "or false for none, got a boolean (true)"),
        (
            "time = { capacity_ms = 0, refill_ms_per_second = 1 }",
            "limits.time.capacity_ms",
            "expected a finite number > 0, got 0",
        ),
        (
            'time = { capacity_ms = 10, refill_ms_per_second = "1" }',
            "limits.time.refill_ms_per_second",
            "expected a finite number > 0, got a string",
        ),
        (
            "time = { capacity_ms = 10 }",
            "limits.time",
            "needs capacity_ms and refill_ms_per_second; missing: refill_ms_per_second",
        ),
        (
            "time = { capacity = 10, refill_ms_per_second = 1 }",
            "limits.time.capacity",
            "did you mean 'capacity_ms'?",
        ),
    ],
)
def test_a_wrong_time_quota_is_located(tmp_path: Path, line: str, key: str, phrase: str) -> None:
    for table, prefix in (("[limits]", "limits"), ("[tiers.free]\ncapacity = 1\n"
                                                    "refill_per_second = 1", "tiers.free")):  # fmt: skip
        path = tmp_path / "quotaql.toml"
        path.write_text(f"# quotaql\n{table}\n{line}\n", encoding="utf-8")
        with pytest.raises(ConfigError) as raised:
            load_config(path)
        error = raised.value
        assert error.key == key.replace("limits", prefix, 1)
        assert error.file == str(path)
        assert error.line == 2 + table.count("\n") + 1
        assert phrase in error.reason, error.reason


def test_the_time_quota_is_counted_and_on_the_span(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    world = World(tmp_path, metrics=PrometheusMetrics(registry), tracer_provider=provider)
    ops = [world.run("greedy", "{ slow(ms: 60) }") for _ in range(3)]
    assert ops[-1].code == "RATE_LIMITED"
    sample = registry.get_sample_value
    seconds = sum(op.work.ns for op in ops) / 1e9
    assert sample(names.TIME_SECONDS_TOTAL, {"tier": "free"}) == pytest.approx(seconds)
    assert sample(f"{names.OPERATION_TIME}_count", {"tier": "free", "operation_type": "query"}) == 3
    refused = {"tier": "free", "quota": names.QUOTA_TIME}
    assert sample(names.QUOTA_REFUSALS_TOTAL, refused) == 1
    spans = [span.attributes or {} for span in exporter.get_finished_spans()]
    assert [round(span[names.ATTR_TIME_MS]) for span in spans] == [round(op.work.ms) for op in ops]
    assert spans[-1][names.ATTR_LIMITED_BY] == "time"
    assert names.ATTR_LIMITED_BY not in spans[0]


# -- the measure on one thread -------------------------------------------------------------


def test_operations_in_execution_at_once_share_the_thread_s_time() -> None:
    def measure() -> None:
        a, b = Work(), Work()
        worktime.run(a)
        worktime.run(b)
        burn(40)
        worktime.ran(a)
        burn(20)
        worktime.ran(b)
        assert a.ms == pytest.approx(20, abs=6)  # half of the first 40
        assert b.ms == pytest.approx(40, abs=6)  # the other half, and the 20 alone

    on_a_thread_of_its_own(measure)


def test_an_exclusive_phase_is_its_operation_s_alone() -> None:
    def measure() -> None:
        waiting, parsing = Work(), Work()
        worktime.run(waiting)  # an operation awaiting its database on this loop
        worktime.start(parsing)  # another's document parsed and validated meanwhile
        burn(30)
        worktime.stop(parsing)
        worktime.ran(waiting)
        assert parsing.ms == pytest.approx(30, abs=6)
        assert waiting.ms < 3

    on_a_thread_of_its_own(measure)


def test_an_operation_never_settled_takes_no_share_once_it_is_gone() -> None:
    """An adapter that dropped an operation in execution (never settled, never finished)
    must not halve every later operation's measure on that thread for good."""

    def measure() -> None:
        leaked, cyclic = Work(), Work()
        worktime.run(leaked)
        worktime.run(cyclic)
        garbage: list[object] = [cyclic]
        garbage.append(garbage)  # collected by the collector, not by its count
        del leaked, cyclic, garbage
        gc.collect()
        work = Work()
        worktime.run(work)
        burn(20)
        worktime.ran(work)
        assert work.ms == pytest.approx(20, abs=6)

    on_a_thread_of_its_own(measure)


def test_the_time_check_of_a_new_subject_takes_no_room_in_a_full_memory_storage() -> None:
    """Checked at cost 0, the time quota writes nothing: a full table does not overflow
    for it, and a charge that went to an overflow state is read back from there."""
    from quotaql.limiter import Limiter
    from quotaql.policy.quota import Quota

    storage = MemoryStorage(max_keys=1, clock=lambda: 1_000.0)
    limiter = Limiter(storage)
    tenant, time_q = Quota("tenant", capacity=10, refill_per_second=1), DEFAULT_TIME
    decision = limiter.acquire("ip:198.51.100.7", 1, [tenant, time_q], costs=[1, 0])
    assert decision.allowed
    assert (len(storage), storage.overflowed) == (1, 0)  # the tenant's state only
    # The table is full: a new subject's time is charged to its network's overflow state...
    limiter.charge("ip:198.51.100.8", 20_000, [time_q])
    # ... and its next check reads it there: in debt, refused.
    refused = limiter.acquire("ip:198.51.100.8", 1, [tenant, time_q], costs=[1, 0])
    assert not refused.allowed
    assert refused.limited_by == "time"


def test_a_phase_that_ends_on_another_thread_counts_nothing() -> None:
    import threading

    work = Work()
    worktime.start(work)
    burn(10)
    thread = threading.Thread(target=worktime.stop, args=(work,))
    thread.start()
    thread.join()
    assert work.ns == 0
    assert work.phase is None


def test_unset_the_time_quota_is_the_tier_s_points_worth_at_20_ms_a_point(
    tmp_path: Path,
) -> None:
    """A tier's budget in points buys 20 ms of worker time a point (never less than the
    default's 10 s at 500 ms/s): a tenant of a large tier is not refused for the time its
    honest traffic takes; an explicit ``[limits] time`` applies as written."""
    from quotaql.config.values import LimitsConfig, TierConfig
    from quotaql.policy.quota import Quota

    big = TierConfig("big", Quota("tenant", capacity=1e6, refill_per_second=1_000))
    small = TierConfig("small", Quota("tenant", capacity=10, refill_per_second=1))
    window = TierConfig(
        "window", Quota("tenant", limit=60_000, window_seconds=60, algorithm="fixed_window")
    )
    path = tmp_path / "quotaql.toml"
    path.write_text("[tiers.free]\ncapacity = 100\nrefill_per_second = 1\n", encoding="utf-8")
    config = load_config(path)
    assert config.limits.time is DEFAULT_TIME
    worth = {t.name: charges.time_quota(config, t) for t in (big, small, window)}
    assert (worth["big"].capacity, worth["big"].refill_per_second) == (2e7, 20_000)
    assert worth["small"] == DEFAULT_TIME  # never less than the default
    assert worth["window"].refill_per_second == 1_000 * 20
    assert charges.time_quota(config, big) is worth["big"]  # one object per tier
    explicit = dataclasses.replace(config, limits=LimitsConfig(time=time_quota(10_000, 500)))
    assert charges.time_quota(explicit, big) == time_quota(10_000, 500)
