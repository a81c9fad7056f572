"""Delay instead of refuse through the gate (``on_limit = "delay"``, issue 13 §1), in memory:
a burst queues and runs at the bucket's rate, the bounds (``max_delay``, ``max_queued``,
``[limits] max_delayed``), a client that leaves while waiting, sync servers, shadow mode, the
deny cache, and what metrics, spans and logs show.

The hostile cases are here too: a tenant that fills its queue gets no more than the rate, a
reserve-then-leave loop gains nothing, many identities cannot park more than
``max_delayed`` operations, a cost above capacity never queues.

Real Redis and three uvicorn worker processes are in tests/http/test_delay.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.contract import COST_EXCEEDS_CAPACITY, RATE_LIMITED
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.errors import ConfigError
from quotaql.gate import Gate, Operation, charges
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + """
type Query {
  hello: String
  three: Int @cost(weight: "3")
  items(first: Int): [Hit] @listSize(slicingArguments: ["first"])
  big: [Hit] @listSize(assumedSize: 50)
}
type Hit { id: ID }
type Subscription { ticks: Int }
"""
)
HELLO = parse("{ hello }")  # costs 0: pays min_charge, 1
THREE = parse("{ three }")  # 3
BIG = parse("{ big { id } }")  # 50: more than the bucket ever holds
TICKS = parse("subscription { ticks }")

CAPACITY, RATE, MAX_DELAY = 5, 20.0, 1.0
TOML = f"""
[limits]
retry_jitter = 0
max_delayed = 1000
[tiers.free]
capacity = {CAPACITY}
refill_per_second = {RATE}
on_limit = "delay"
max_delay = {MAX_DELAY}
max_queued = 100
[tiers.short]
capacity = {CAPACITY}
refill_per_second = {RATE}
on_limit = "delay"
max_delay = {MAX_DELAY}
max_queued = 3
[tiers.refusing]
capacity = {CAPACITY}
refill_per_second = {RATE}
[tiers.watched]
capacity = {CAPACITY}
refill_per_second = {RATE}
on_limit = "delay"
mode = "shadow"
[tenants.acme]
tier = "free"
[tenants.line]
tier = "short"
[tenants.plain]
tier = "refusing"
[tenants.quiet]
tier = "watched"
"""
# A start may come a little before its exact slot: the bucket's time is in whole ms.
EARLY = 0.005


def scope(key: str, address: str = "203.0.113.9") -> dict[str, Any]:
    return {"type": "http", "client": (address, 40000),
            "headers": [(b"x-api-key", key.encode())] if key else []}  # fmt: skip


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    def write(text: str = TOML, extra: str = "") -> Path:
        path = tmp_path / "quotaql.toml"
        path.write_text(text + extra, encoding="utf-8")
        return path

    return write


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def gate(write: Callable[..., Path], registry: CollectorRegistry) -> Gate:
    return Gate(load_config(write()), metrics=PrometheusMetrics(registry))


async def burst(
    gate: Gate, count: int, key: str = "acme", document: Any = HELLO
) -> list[tuple[float, Operation]]:
    """``count`` operations of ``key`` at once: when each was let run (seconds after the
    burst started), and what the gate made of it."""
    started = time.monotonic()

    async def one() -> tuple[float, Operation]:
        op = await gate.admit_async(SCHEMA, document, request=scope(key))
        return time.monotonic() - started, op

    return list(await asyncio.gather(*(one() for _ in range(count))))


def remaining(gate: Gate, key: str = "acme") -> float:
    quota = gate.config.tier_of(key).quota
    decision = gate.limiter.peek(f"key:{key}", [quota])
    return float(decision.remaining)  # type: ignore[union-attr]


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_a_burst_queues_and_runs_at_the_bucket_s_rate(
    gate: Gate, registry: CollectorRegistry
) -> None:
    results = asyncio.run(burst(gate, 60))

    ran = sorted(at for at, op in results if not op.refused)
    refused = [op for _, op in results if op.refused]
    # The burst's capacity at once, then max_delay's worth of the rate, in turn.
    assert CAPACITY + RATE * MAX_DELAY <= len(ran) <= CAPACITY + RATE * MAX_DELAY + 3
    for index, at in enumerate(ran):  # never before its turn: the rate holds
        turn = max(0, index + 1 - CAPACITY) / RATE
        assert at >= turn - EARLY, (index, at, turn)
    assert ran[-1] >= MAX_DELAY * 0.9  # they waited: queued, not only refused
    assert all(op.code == RATE_LIMITED and op.status == 429 for op in refused)
    # a refusal's retry is when the same request could wait again, within max_delay
    retry = refused[0].decision.retry_after  # type: ignore[union-attr]
    assert retry is not None
    assert 0 < retry <= 1 / RATE + 0.01
    delayed = [op for _, op in results if not op.refused and op.decision.delay > 0]  # type: ignore[union-attr]
    assert len(delayed) == len(ran) - CAPACITY
    assert all(op.outcome == names.ALLOWED for op in delayed)  # delayed, then allowed
    assert sample(registry, names.DELAY_SECONDS + "_count", tier="free") == len(delayed)
    assert sample(registry, names.DELAY_REFUSED_TOTAL, tier="free", reason="queue") >= 1
    assert sample(registry, names.DELAYED_WAITING) == 0  # every place given back


def test_max_queued_bounds_the_tenant_s_line(gate: Gate, registry: CollectorRegistry) -> None:
    results = asyncio.run(burst(gate, 20, "line"))

    ran = [op for _, op in results if not op.refused]
    assert len(ran) == CAPACITY + 3  # the bucket, then 3 waiting: the line is full
    refused = [op for _, op in results if op.refused]
    assert all(op.code == RATE_LIMITED for op in refused)
    # the line's refusal waits for the first in line to leave it, not for max_delay
    retry = refused[0].decision.retry_after  # type: ignore[union-attr]
    assert retry is not None
    assert retry <= 1 / RATE + 0.01
    # each refusal the storage made is counted; the deny cache answered the others
    denied = [op for op in refused if op.outcome == names.DENIED]
    assert sample(registry, names.DELAY_REFUSED_TOTAL, tier="short", reason="queue") == len(
        refused
    ) - len(denied)


def test_a_tier_that_refuses_never_waits(gate: Gate, registry: CollectorRegistry) -> None:
    results = asyncio.run(burst(gate, 20, "plain"))

    assert sum(not op.refused for _, op in results) == CAPACITY
    assert max(at for at, _ in results) < MAX_DELAY / 2
    assert all(op.decision.delay == 0 for _, op in results)  # type: ignore[union-attr]
    assert sample(registry, names.DELAY_SECONDS + "_count", tier="refusing") == 0
    assert sample(registry, names.DELAY_REFUSED_TOTAL, tier="refusing", reason="queue") == 0


def test_a_cost_above_capacity_is_refused_and_never_queued(gate: Gate) -> None:
    results = asyncio.run(burst(gate, 3, document=BIG))

    assert [op.code for _, op in results] == [COST_EXCEEDS_CAPACITY] * 3
    assert max(at for at, _ in results) < MAX_DELAY / 2
    # nothing was reserved for them: the bucket is full, but for the minimum each paid
    assert remaining(gate) >= CAPACITY - 3


def test_a_client_that_leaves_while_waiting_gets_its_whole_debit_back(
    gate: Gate, registry: CollectorRegistry
) -> None:
    async def main() -> None:
        for _ in range(CAPACITY):  # the bucket, spent
            assert not (await gate.admit_async(SCHEMA, HELLO, request=scope("acme"))).refused
        waiters = [
            asyncio.create_task(gate.admit_async(SCHEMA, HELLO, request=scope("acme")))
            for _ in range(10)
        ]
        await asyncio.sleep(0.02)  # each reserved its turn and waits
        assert gate._delays.waiting() == 10
        assert remaining(gate) == 0
        for waiter in waiters:
            waiter.cancel()
        for waiter in waiters:
            with pytest.raises(asyncio.CancelledError):
                await waiter
        assert gate._delays.waiting() == 0
        await gate.aflush()
        # the ten reservations went back: the next ten run at once after the refill of
        # their few ms, not behind ten phantom turns
        ahead = time.monotonic()
        more = await asyncio.gather(
            *(gate.admit_async(SCHEMA, HELLO, request=scope("acme")) for _ in range(2))
        )
        assert not any(op.refused for op in more)
        assert time.monotonic() - ahead < 10 / RATE

    asyncio.run(main())
    assert sample(registry, names.DELAY_CANCELLED_TOTAL, tier="free") == 10
    assert sample(registry, names.DELAYED_WAITING) == 0


def test_waiters_that_leave_free_their_places_in_the_line(
    gate: Gate, registry: CollectorRegistry
) -> None:
    """The attack: fill the tenant's line (``max_queued`` 3), leave (each leaver refunded),
    and the tenant's other clients would be refused for places nobody holds until those
    turns pass. A leaver's refund names its turn: its place goes with it."""

    async def main() -> list[Operation]:
        for _ in range(CAPACITY):  # the bucket, spent
            assert not (await gate.admit_async(SCHEMA, HELLO, request=scope("line"))).refused
        waiters = [
            asyncio.create_task(gate.admit_async(SCHEMA, HELLO, request=scope("line")))
            for _ in range(3)
        ]
        await asyncio.sleep(0.02)  # each reserved its turn and waits: the line is full
        assert gate._delays.waiting() == 3
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await gate.aflush()
        # at once, long before the first of the three turns that were left: three may wait
        return list(
            await asyncio.gather(
                *(gate.admit_async(SCHEMA, HELLO, request=scope("line")) for _ in range(4))
            )
        )

    started = time.monotonic()
    ops = asyncio.run(main())
    assert time.monotonic() - started < 4 / RATE + MAX_DELAY  # bounded
    assert [op.refused for op in ops].count(False) == 3  # the line's three places
    assert sample(registry, names.DELAY_CANCELLED_TOTAL, tier="short") == 3


def test_reserving_then_leaving_again_and_again_gains_nothing(gate: Gate) -> None:
    """The attack: reserve a turn, disconnect (refunded), repeat; then run greedily. The
    refunds give back exactly what each reserved: what ran stays within the bucket's rate."""

    async def main() -> tuple[int, float]:
        started = time.monotonic()
        for _ in range(100):
            waiters = [
                asyncio.create_task(gate.admit_async(SCHEMA, HELLO, request=scope("acme")))
                for _ in range(10)
            ]
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            for waiter in waiters:
                waiter.cancel()
            results = await asyncio.gather(*waiters, return_exceptions=True)
            ran = sum(isinstance(result, Operation) and not result.refused for result in results)
            if ran:
                return ran, started
        return 0, started

    ran, started = asyncio.run(main())
    greedy = asyncio.run(burst(gate, 60))
    elapsed = time.monotonic() - started
    total = ran + sum(not op.refused for _, op in greedy)
    # everything that ran, since the start, within capacity + rate × the time it took
    assert total <= CAPACITY + RATE * elapsed + 1


def test_many_identities_park_at_most_max_delayed_operations(
    write: Callable[..., Path], registry: CollectorRegistry
) -> None:
    """The attack: many addresses each with a budget of its own, each queueing, would park
    unbounded coroutines and sockets; ``max_delayed`` caps them per process, the rest are
    decided as if the tier refused."""
    gate = Gate(
        load_config(write(TOML.replace("max_delayed = 1000", "max_delayed = 100"))),
        metrics=PrometheusMetrics(registry),
    )
    peak = 0

    async def main() -> list[Operation]:
        nonlocal peak

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, gate._delays.waiting())
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        try:
            return list(
                await asyncio.gather(
                    *(
                        gate.admit_async(SCHEMA, HELLO, request=scope("", f"198.51.100.{i // 10}"))
                        for i in range(2000)  # 200 addresses, ten at once each
                    )
                )
            )
        finally:
            watcher.cancel()

    ops = asyncio.run(main())
    assert 0 < peak <= 100
    assert gate._delays.waiting() == 0
    process_full = sample(registry, names.DELAY_REFUSED_TOTAL, tier="free", reason="process_full")
    assert process_full > 0
    assert sum(op.refused for op in ops) >= process_full


def test_one_tenant_s_waiters_cannot_take_everyone_s_waiting_places(
    write: Callable[..., Path], registry: CollectorRegistry
) -> None:
    """The attack: two addresses parking 10 waiters each filled ``max_delayed = 20``, and an
    honest client over its budget then had 0 of 3 delayed. No subject holds more than its
    ``delayed_share`` (a quarter by default) of the places: the honest client waits."""
    gate = Gate(
        load_config(write(TOML.replace("max_delayed = 1000", "max_delayed = 20"))),
        metrics=PrometheusMetrics(registry),
    )

    async def main() -> tuple[list[Operation], list[Operation]]:
        greedy = [
            asyncio.ensure_future(gate.admit_async(SCHEMA, HELLO, request=scope("", address)))
            for address in ("198.51.100.1", "198.51.100.2")
            for _ in range(CAPACITY + 10)  # its bucket, then 10 that want to wait
        ]
        await asyncio.sleep(0.05)  # they are parked now (their turns are up to 0.5 s away)
        honest = [
            await gate.admit_async(SCHEMA, HELLO, request=scope("", "203.0.113.50"))
            for _ in range(CAPACITY)
        ]
        honest += await asyncio.gather(
            *(gate.admit_async(SCHEMA, HELLO, request=scope("", "203.0.113.50")) for _ in range(3))
        )
        return list(await asyncio.gather(*greedy)), honest

    greedy, honest = asyncio.run(main())
    assert [op.refused for op in honest] == [False] * (CAPACITY + 3)
    assert sum(op.waits is not None and op.decision.delay > 0 for op in honest) == 3
    share = 20 // 4
    assert sum(op.refused for op in greedy) == 2 * (10 - share)  # past their share each
    assert sample(registry, names.DELAY_REFUSED_TOTAL, tier="free", reason="subject_full") == 10
    assert gate._delays.waiting() == 0


def test_delayed_share_is_read_and_checked(write: Callable[..., Path]) -> None:
    assert load_config(write("[limits]\ndelayed_share = 0.5\n")).limits.delayed_share == 0.5
    assert load_config(write("")).limits.delayed_share == 0.25
    with pytest.raises(ConfigError, match="delayed_share"):
        load_config(write("[limits]\ndelayed_share = 1.5\n"))


def test_a_sync_server_refuses_instead_of_parking_its_thread(
    gate: Gate, registry: CollectorRegistry
) -> None:
    started = time.monotonic()
    ops = [gate.admit(SCHEMA, HELLO, request=scope("acme")) for _ in range(20)]

    assert time.monotonic() - started < MAX_DELAY / 2  # nothing waited
    assert sum(not op.refused for op in ops) == CAPACITY
    assert all(op.decision.delay == 0 for op in ops)  # type: ignore[union-attr]
    storage_refused = sum(op.refused and op.outcome != names.DENIED for op in ops)
    assert storage_refused >= 1
    assert (
        sample(registry, names.DELAY_REFUSED_TOTAL, tier="free", reason="sync") == storage_refused
    )


def test_delay_sync_sleep_parks_the_thread_until_its_turn(write: Callable[..., Path]) -> None:
    gate = Gate(load_config(write(TOML.replace("max_delayed = 1000",
                                                'max_delayed = 1000\ndelay_sync = "sleep"'))))  # fmt: skip
    started = time.monotonic()
    ops = [gate.admit(SCHEMA, HELLO, request=scope("acme")) for _ in range(CAPACITY + 4)]
    elapsed = time.monotonic() - started

    assert not any(op.refused for op in ops)
    assert elapsed >= 4 / RATE - EARLY  # each of the four waited its turn
    assert gate._delays.waiting() == 0


def test_shadow_mode_decides_as_enforce_would_and_never_waits(
    gate: Gate, registry: CollectorRegistry
) -> None:
    results = asyncio.run(burst(gate, 40, "quiet"))

    assert not any(op.refused for _, op in results)
    assert max(at for at, _ in results) < MAX_DELAY / 2
    delayed = [op for _, op in results if op.decision.delay > 0]  # type: ignore[union-attr]
    assert delayed  # what enforce would have made wait
    over = [op for _, op in results if not op.decision.allowed]  # type: ignore[union-attr]
    assert over
    assert all(op.outcome == names.SHADOW_BLOCKED for op in over)
    assert sample(registry, names.DELAY_SECONDS + "_count", tier="watched") == 0
    assert sample(registry, names.DELAY_REFUSED_TOTAL, tier="watched", reason="queue") == len(over)


def test_subscriptions_never_wait(gate: Gate) -> None:
    async def main() -> list[Operation]:
        return list(
            await asyncio.gather(
                *(gate.admit_async(SCHEMA, TICKS, request=scope("acme")) for _ in range(10))
            )
        )

    ops = asyncio.run(main())
    assert sum(not op.refused for op in ops) == CAPACITY
    assert all(op.decision.delay == 0 for op in ops)  # type: ignore[union-attr]
    for op in ops:
        gate.finish(op)


def test_the_global_quota_never_waits(
    write: Callable[..., Path], registry: CollectorRegistry
) -> None:
    gate = Gate(
        load_config(write(extra="[global]\ncapacity = 3\nrefill_per_second = 0.001\n")),
        metrics=PrometheusMetrics(registry),
    )
    results = asyncio.run(burst(gate, 10))

    assert sum(not op.refused for _, op in results) == 3
    assert all(op.decision.limited_by == "global" for _, op in results if op.refused)  # type: ignore[union-attr]
    assert max(at for at, _ in results) < MAX_DELAY / 2
    assert sample(registry, names.DELAY_REFUSED_TOTAL, tier="free", reason="queue") == 0


def test_the_deny_cache_does_not_refuse_a_request_that_could_wait(gate: Gate) -> None:
    """A refusal of a delay quota says when *that* cost could wait: a cheaper request may
    wait now (a line that is not full, a turn within ``max_delay``), so it is asked of the
    storage, not refused from memory as a bucket's refusal would extrapolate."""

    async def main() -> None:
        for _ in range(CAPACITY):
            await gate.admit_async(SCHEMA, HELLO, request=scope("acme"))
        waiting = [
            asyncio.create_task(gate.admit_async(SCHEMA, HELLO, request=scope("acme")))
            for _ in range(18)
        ]
        await asyncio.sleep(0)  # 18 turns taken: the last at 0.9 s
        three = await gate.admit_async(SCHEMA, THREE, request=scope("acme"))
        assert three.code == RATE_LIMITED  # its turn would be at 1.05 s: past max_delay
        assert len(gate._refusals.denials) == 1
        cheap = await gate.admit_async(SCHEMA, HELLO, request=scope("acme"))
        assert not cheap.refused  # its turn, at 0.95 s, is within max_delay: it waited
        assert cheap.decision.delay > 0  # type: ignore[union-attr]
        await asyncio.gather(*waiting)

    asyncio.run(main())


def test_a_delay_shows_on_the_span_and_in_the_log(
    write: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gate = Gate(load_config(write()), tracer_provider=provider)

    async def main() -> list[Operation]:
        ops = []
        for _ in range(CAPACITY + 1):
            op = await gate.admit_async(SCHEMA, HELLO, request=scope("acme"))
            gate.finish(op)
            ops.append(op)
        return ops

    with caplog.at_level(logging.INFO, logger=names.LOGGER):
        ops = asyncio.run(main())
    delay = ops[-1].decision.delay  # type: ignore[union-attr]
    assert delay > 0
    span = exporter.get_finished_spans()[-1]
    assert span.attributes is not None
    assert span.attributes[names.ATTR_DELAY] == pytest.approx(delay)
    assert [event.name for event in span.events if event.name == names.EVENT_DELAYED] == [
        names.EVENT_DELAYED
    ]
    assert any(getattr(r, names.LOG_EVENT, None) == names.DELAYED for r in caplog.records)


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('on_limit = "wait"\n', "on_limit: expected one of"),
        ("max_delay = 2\n", 'max_delay needs on_limit = "delay"'),
        ("max_queued = 2\n", 'max_queued needs on_limit = "delay"'),
        ('on_limit = "delay"\nmax_delay = 0\n', "max_delay"),
        ('on_limit = "delay"\nmax_delay = 61\n', "max_delay"),
        ('on_limit = "delay"\nmax_queued = 0\n', "max_queued"),
        ('on_limit = "delay"\nmax_queued = true\n', "max_queued"),
    ],
)
def test_bad_delay_keys_name_the_file_line_and_key(
    write: Callable[..., Path], extra: str, message: str
) -> None:
    path = write("[tiers.free]\ncapacity = 5\nrefill_per_second = 1\n" + extra)
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(path)
    assert str(path) in str(raised.value)
    assert ":4:" in str(raised.value) or ":5:" in str(raised.value) or ":1:" in str(raised.value)


def test_a_delay_tier_needs_bucket_quotas(write: Callable[..., Path]) -> None:
    window = '[tiers.free]\nlimit = 5\nwindow_seconds = 10\nalgorithm = "fixed_window"\n'
    with pytest.raises(ConfigError, match="needs token_bucket or gcra"):
        load_config(write(window + 'on_limit = "delay"\n'))
    operation = (
        '[tiers.free]\ncapacity = 5\nrefill_per_second = 1\non_limit = "delay"\n'
        "[tiers.free.operations.Export]\nlimit = 5\nwindow_seconds = 10\n"
        'algorithm = "sliding_log"\n'
    )
    with pytest.raises(ConfigError, match="'op:Export' is sliding_log"):
        load_config(write(operation))
    tenant = (
        '[tiers.free]\ncapacity = 5\nrefill_per_second = 1\non_limit = "delay"\n'
        '[tenants.acme]\ntier = "free"\nlimit = 5\nwindow_seconds = 10\n'
        'algorithm = "fixed_window"\n'
    )
    with pytest.raises(ConfigError, match="tenant 'acme'"):
        load_config(write(tenant))


def test_bad_process_keys_are_refused(write: Callable[..., Path]) -> None:
    for extra, message in (
        ("max_delayed = -1\n", "max_delayed"),
        ('delay_sync = "block"\n', "delay_sync"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(write("[limits]\n" + extra))


def test_delay_defaults(write: Callable[..., Path]) -> None:
    config = load_config(
        write('[tiers.free]\ncapacity = 5\nrefill_per_second = 1\non_limit = "delay"\n')
    )
    tier = config.tiers["free"]
    assert (tier.max_delay, tier.max_queued) == (1.0, 10)
    assert (config.limits.max_delayed, config.limits.delay_sync) == (1000, "refuse")
    waiting = charges.delayed(tier, (tier.quota,))[0]
    assert (waiting.max_delay, waiting.max_queued) == (1.0, 10)
    assert waiting.state_name == tier.quota.state_name  # one state: only refusals change


def test_a_wait_is_not_latency_to_adaptive_limits(write: Callable[..., Path]) -> None:
    """The feedback loop: had the wait been part of an operation's latency sample, queueing
    would read as the service being slow, adaptive limits would tighten, and more would
    queue. The sample starts at the operation's turn."""
    gate = Gate(load_config(write(extra='[adaptive]\nmode = "shadow"\nsources = ["latency"]\n')))
    adaptive = gate.adaptive
    assert adaptive is not None

    async def main() -> tuple[float, Operation]:
        for _ in range(CAPACITY):
            gate.finish(await gate.admit_async(SCHEMA, HELLO, request=scope("acme")))
        asked = adaptive.clock()
        return asked, await gate.admit_async(SCHEMA, HELLO, request=scope("acme"))

    asked, op = asyncio.run(main())
    delay = op.decision.delay  # type: ignore[union-attr]
    assert delay > 0
    assert op.started is not None
    assert op.started >= asked + delay - EARLY  # measured from its turn, not from its ask


class Decisions:
    """A recorder: how many decisions the storage made."""

    def __init__(self) -> None:
        self.count = 0

    def decision(self, decision: Any, seconds: float) -> None:
        self.count += 1

    def backend_error(self, backend: str, error: BaseException) -> None:
        pass

    def circuit(self, backend: str, is_open: bool) -> None:
        pass


def test_larger_costs_after_a_delay_refusal_are_refused_from_memory(
    write: Callable[..., Path],
) -> None:
    """The attack: a refused client raises its cost by one each time so that no refusal the
    deny cache keeps matches, and every try costs the storage a call. A delay quota's
    refusal holds for any larger cost (its turn is later still, its line as full)."""
    recorder = Decisions()
    gate = Gate(load_config(write()), recorder=recorder)

    async def main() -> list[Operation]:
        for _ in range(CAPACITY):
            await gate.admit_async(SCHEMA, HELLO, request=scope("acme"))
        waiting = [
            asyncio.create_task(gate.admit_async(SCHEMA, HELLO, request=scope("acme")))
            for _ in range(18)
        ]
        await asyncio.sleep(0)
        assert (await gate.admit_async(SCHEMA, THREE, request=scope("acme"))).refused
        asked = recorder.count
        tries = [
            await gate.admit_async(SCHEMA, parse(f"{{ items(first: {n}) {{ id }} }}"),
                                   request=scope("acme"))
            for n in (4, 5)
        ]  # fmt: skip
        assert recorder.count == asked  # the storage was not asked again
        await asyncio.gather(*waiting)
        return tries

    tries = asyncio.run(main())
    assert [op.outcome for op in tries] == [names.DENIED, names.DENIED]
    assert all(op.code == RATE_LIMITED for op in tries)
