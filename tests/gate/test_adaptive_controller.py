"""Adaptive limits, the controller on its own (quotaql.adaptive): the signal's sources, the
fairness cap, hysteresis, step, floor and quantization, on an injected clock; and the
``[adaptive]`` table's errors."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import math
import random
import threading
import time
import warnings
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pytest
from graphql import GraphQLError

from quotaql.adaptive import (
    MAX_CULPRITS,
    PRESSURE_SOURCES,
    QUANTUM,
    SAMPLES_PER_SECOND,
    Adaptive,
    AdaptiveConfig,
    fair_weights,
    quantize,
    unexpected_error,
)
from quotaql.config import load_config
from quotaql.errors import ConfigError
from quotaql.gate.charges import scaled
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import StructuredLog
from quotaql.policy.quota import Quota

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class Clock:
    """Seconds that move only when told to."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Pressure:
    """A pressure callable whose value the test sets, counting its calls."""

    def __init__(self, value: Any = 0.0) -> None:
        self.value = value
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        value = self.value
        if isinstance(value, BaseException):
            raise value
        return value() if callable(value) else value


def controller(
    pressure: Callable[[], Any] | None = None, clock: Clock | None = None, **settings: Any
) -> Adaptive:
    settings.setdefault("mode", "enforce")
    if pressure is not None:
        settings.setdefault("sources", ("callable",))
    return Adaptive(
        AdaptiveConfig(**settings),
        pressure=pressure,
        clock=clock or Clock(),
        log=StructuredLog(),
        tiers=("free",),
    )


def run(adaptive: Adaptive, clock: Clock, seconds: int) -> list[tuple[bool, float]]:
    """Advance one second at a time, polling: (engaged, multiplier) after each second."""
    states = []
    for _ in range(seconds):
        clock.now += 1.0
        adaptive.poll()
        states.append((adaptive.engaged, adaptive.multiplier))
    return states


# -- hysteresis ---------------------------------------------------------------------------


def test_engages_only_after_pressure_held_for_engage_for() -> None:
    clock, pressure = Clock(), Pressure(0.9)
    adaptive = controller(pressure, clock, engage_for=5.0)

    # Seen high at the first update, engaged at the update 5 s later.
    states = run(adaptive, clock, 6)
    assert [engaged for engaged, _ in states] == [False] * 5 + [True]
    assert [m for _, m in states] == [1.0] * 5 + [0.9]


def test_a_dip_below_engage_at_restarts_the_wait() -> None:
    clock, pressure = Clock(), Pressure(0.9)
    adaptive = controller(pressure, clock, engage_for=3.0)

    run(adaptive, clock, 3)  # above for three updates: 2 s held
    pressure.value = 0.49  # just under engage_at
    run(adaptive, clock, 1)
    pressure.value = 0.5  # at engage_at counts
    assert [engaged for engaged, _ in run(adaptive, clock, 4)] == [False, False, False, True]


def test_releases_only_after_pressure_held_low_for_release_for() -> None:
    clock, pressure = Clock(), Pressure(0.8)
    adaptive = controller(pressure, clock, engage_for=0.0, release_for=10.0)
    run(adaptive, clock, 3)
    assert adaptive.engaged

    pressure.value = 0.3  # between release_at and engage_at: stays engaged, target 0.7
    assert all(engaged for engaged, _ in run(adaptive, clock, 30))
    assert adaptive.multiplier == 0.7
    pressure.value = 0.2  # at release_at counts
    states = run(adaptive, clock, 11)
    assert [engaged for engaged, _ in states] == [True] * 10 + [False]


def test_pressure_between_the_thresholds_resets_the_release_wait() -> None:
    clock, pressure = Clock(), Pressure(0.8)
    adaptive = controller(pressure, clock, engage_for=0.0, release_for=3.0)
    run(adaptive, clock, 2)
    for _ in range(5):  # low for 2 s, then up again: never 3 s in a row
        pressure.value = 0.1
        run(adaptive, clock, 3)
        pressure.value = 0.4
        run(adaptive, clock, 1)
        assert adaptive.engaged


def test_transitions_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    clock, pressure = Clock(), Pressure(0.9)
    transitions: list[str] = []
    adaptive = Adaptive(
        AdaptiveConfig(mode="enforce", sources=("callable",), engage_for=0, release_for=0),
        pressure=pressure,
        clock=clock,
        log=StructuredLog(),
        tiers=("free", "pro"),
        on_transition=transitions.append,
    )
    with caplog.at_level(logging.INFO, logger=names.LOGGER):
        run(adaptive, clock, 5)
        pressure.value = 0.0
        run(adaptive, clock, 5)

    assert transitions == [names.ENGAGED, names.RELEASED]
    records = [(r.levelno, r.quotaql_event) for r in caplog.records if hasattr(r, "quotaql_event")]
    assert records == [(logging.WARNING, "adaptive_engaged"), (logging.INFO, "adaptive_released")]
    engaged = caplog.records[0]
    assert "the tiers free, pro are debited cost / m, m down to 0.25" in engaged.getMessage()
    assert engaged.pressures == {"callable": 0.9}
    assert engaged.mode == "enforce"


# -- step, floor, quantization --------------------------------------------------------------


def test_the_multiplier_moves_at_most_step_per_second_down_and_back_up() -> None:
    clock, pressure = Clock(), Pressure(1.0)
    adaptive = controller(pressure, clock, engage_for=0.0, release_for=0.0, step=0.2)

    down = [m for _, m in run(adaptive, clock, 5)]
    assert down == [0.8, 0.6, 0.4, 0.25, 0.25]  # to the floor, not below
    pressure.value = 0.0
    up = [m for _, m in run(adaptive, clock, 6)]
    assert up == [0.45, 0.65, 0.85, 1.0, 1.0, 1.0]
    assert not adaptive.engaged


def test_after_an_idle_gap_the_multiplier_moves_by_the_seconds_that_passed() -> None:
    clock, pressure = Clock(), Pressure(1.0)
    adaptive = controller(pressure, clock, engage_for=0.0, step=0.1)
    run(adaptive, clock, 1)
    assert adaptive.multiplier == 0.9

    clock.now += 4.0  # no operation for 4 s
    adaptive.poll()
    assert adaptive.multiplier == 0.5


def test_the_target_follows_the_pressure_while_engaged() -> None:
    clock, pressure = Clock(), Pressure(0.6)
    adaptive = controller(pressure, clock, engage_for=0.0, step=1.0)
    run(adaptive, clock, 2)
    assert adaptive.multiplier == 0.4  # 1 - 0.6
    pressure.value = 0.35  # lower, still engaged: m climbs
    run(adaptive, clock, 1)
    assert (adaptive.engaged, adaptive.multiplier) == (True, 0.65)


def test_the_floor_holds_whatever_the_pressure() -> None:
    clock, pressure = Clock(), Pressure(1.0)
    adaptive = controller(pressure, clock, engage_for=0.0, floor=0.5, step=1.0)

    assert {m for _, m in run(adaptive, clock, 10)} == {0.5}


def test_quantized_multipliers_are_few_whatever_the_pressure_walks() -> None:
    """A random pressure, random steps, an off-grid floor: m is only ever on the grid or
    the floor, so the set of debits an operation of one cost can be charged stays small."""
    rng = random.Random(13)
    clock, pressure = Clock(), Pressure(0.0)
    adaptive = controller(pressure, clock, engage_for=0.0, release_for=2.0, floor=0.23,
                          step=0.037)  # fmt: skip
    seen = set()
    for _ in range(3000):
        pressure.value = rng.random()
        clock.now += rng.choice((0.5, 1.0, 1.0, 2.5))
        adaptive.poll()
        seen.add(adaptive.multiplier)
    grid = {round(k * QUANTUM, 2) for k in range(21)}
    assert seen <= grid | {0.23}
    assert 0.23 in seen  # the floor was reached
    assert min(seen) == 0.23
    assert len(seen) <= 17  # 0.25 .. 1.0 by 0.05, and the floor


@pytest.mark.parametrize(
    ("m", "floor", "expected"),
    [(0.999, 0.25, 1.0), (0.974, 0.25, 0.95), (0.7000000000000001, 0.25, 0.7), (0.01, 0.25, 0.25),
     (0.24, 0.23, 0.25), (0.22, 0.23, 0.23), (1.2, 0.5, 1.0)],
)  # fmt: skip
def test_quantize(m: float, floor: float, expected: float) -> None:
    assert quantize(m, floor) == expected


# -- the callable source ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "pressure"),
    [(0.4, 0.4), (2, 1.0), (-3.5, 0.0), (math.inf, 1.0), (-math.inf, 0.0), (1, 1.0)],
)
def test_a_callable_is_clamped(value: Any, pressure: float) -> None:
    clock = Clock()
    adaptive = controller(Pressure(value), clock)
    run(adaptive, clock, 1)
    assert adaptive.pressures == {"callable": pressure}


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (float("nan"), "returned NaN"),
        (RuntimeError("metrics backend down"), "raised RuntimeError: metrics backend down"),
        ("0.9", "returned str, not a number"),
        (None, "returned NoneType, not a number"),
        (True, "returned bool, not a number"),
    ],
    ids=["nan", "exception", "string", "none", "bool"],
)
def test_a_failing_callable_is_no_pressure_and_is_logged_at_most_once_a_minute(
    value: Any, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock, pressure = Clock(), Pressure(value)
    adaptive = controller(pressure, clock, engage_for=0.0)
    with caplog.at_level(logging.WARNING, logger=names.LOGGER):
        states = run(adaptive, clock, 130)

    assert pressure.calls == 130  # read once a second, no more
    assert states == [(False, 1.0)] * 130  # never engaged by a broken signal
    failed = [r for r in caplog.records if getattr(r, "quotaql_event", None) == "pressure_failed"]
    assert len(failed) == 3  # at 0 s, 60 s, 120 s
    assert said in failed[0].getMessage()
    assert [record.failures for record in failed] == [1, 61, 121]


def test_an_async_callable_is_refused_without_a_never_awaited_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def pressure() -> float:
        return 1.0

    clock = Clock()
    adaptive = controller(pressure, clock, engage_for=0.0)
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger=names.LOGGER):
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be one
        run(adaptive, clock, 3)
        gc.collect()

    assert not adaptive.engaged
    assert "returned an awaitable (pass a plain function)" in caplog.text
    assert asyncio.iscoroutinefunction(pressure)


def test_a_fraction_or_another_real_number_counts() -> None:
    clock = Clock()
    adaptive = controller(Pressure(Fraction(3, 4)), clock)
    run(adaptive, clock, 1)
    assert adaptive.pressures == {"callable": 0.75}


def test_a_failing_update_keeps_the_multiplier_and_never_fails_the_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in an update hook (the metrics) is logged; the request path goes on."""
    clock, pressure = Clock(), Pressure(1.0)
    adaptive = controller(pressure, clock, engage_for=0.0)
    run(adaptive, clock, 3)
    m = adaptive.multiplier

    def broken(_: Adaptive) -> None:
        raise RuntimeError("registry gone")

    adaptive.on_update = broken
    with caplog.at_level(logging.ERROR, logger=names.LOGGER):
        run(adaptive, clock, 2)  # raises nothing
    assert "adaptive_failed" in [r.quotaql_event for r in caplog.records]
    assert "RuntimeError: registry gone" in caplog.text
    assert adaptive.multiplier <= m


def test_a_callable_that_recovers_counts_again() -> None:
    clock, pressure = Clock(), Pressure(RuntimeError("down"))
    adaptive = controller(pressure, clock, engage_for=0.0)
    run(adaptive, clock, 3)
    pressure.value = 0.8
    run(adaptive, clock, 1)
    assert adaptive.engaged


def test_a_slow_callable_is_logged_and_read_at_most_once_a_second_under_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real clock, eight threads polling as fast as they can for 1.5 s: one thread
    reads the callable (the others go on at once), at most once a second."""
    calls: list[float] = []
    meanwhile: list[int] = []  # polls the other threads made while the callable ran

    def slow() -> float:
        calls.append(time.monotonic())
        before = sum(polls)
        time.sleep(0.03)
        meanwhile.append(sum(polls) - before)
        return 0.1

    adaptive = Adaptive(
        AdaptiveConfig(mode="enforce", sources=("callable",)), pressure=slow, log=StructuredLog()
    )
    polls = [0] * 8
    stop = time.monotonic() + 1.5

    def hammer(index: int) -> None:
        while time.monotonic() < stop:
            adaptive.poll()
            polls[index] += 1

    with caplog.at_level(logging.WARNING, logger=names.LOGGER):
        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)

    assert 1 <= len(calls) <= 2
    assert all(b - a >= 0.99 for a, b in itertools.pairwise(calls))
    assert sum(polls) > 100
    assert min(meanwhile) > 0  # nobody waited for the thread reading the callable
    assert "the pressure callable took" in caplog.text


# -- the measured sources and the fairness cap -----------------------------------------------


def feed(
    adaptive: Adaptive,
    clock: Clock,
    tenants: dict[str, tuple[int, float, bool]],
    seconds: int,
    costs: dict[str, float] | None = None,
) -> None:
    """For ``seconds`` seconds, each tenant settles ``n`` operations a second that took
    ``latency`` seconds (and failed or not), each of cost ``costs[tenant]`` (default 1);
    the controller polls after each second."""
    costs = costs or {}
    for _ in range(seconds):
        for tenant, (count, latency, failed) in tenants.items():
            for _ in range(count):
                adaptive.observe(tenant, latency, failed, clock.now, costs.get(tenant, 1.0))
        clock.now += 1.0
        adaptive.poll()


def latency_controller(clock: Clock, **settings: Any) -> Adaptive:
    settings = {"sources": ("latency", "errors"), "engage_for": 2.0, "min_samples": 20,
                **settings}  # fmt: skip
    return controller(None, clock, **settings)


def test_many_slow_tenants_engage() -> None:
    clock = Clock()
    adaptive = latency_controller(clock)
    slow = {f"t{i}": (5, 1.5 if i < 5 else 0.01, False) for i in range(10)}  # half of them

    feed(adaptive, clock, slow, 5)
    assert adaptive.pressures["latency"] == 1.0  # p90 1.5 s, saturated at 1 s
    assert adaptive.engaged
    assert adaptive.multiplier < 1.0


def test_one_tenant_s_slow_queries_alone_do_not_engage() -> None:
    """One tenant of ten sends 90 % of the operations, all of them slow: its weight is
    capped, the p90 stays the others' (§3.3: a sleeping resolver for one tenant of ten)."""
    clock = Clock()
    adaptive = latency_controller(clock, sources=("latency",))
    tenants = {"greedy": (90, 5.0, False), **{f"t{i}": (1, 0.01, False) for i in range(9)}}

    feed(adaptive, clock, tenants, 30)
    assert adaptive.pressures == {"latency": 0.0}
    assert not adaptive.engaged
    # Without the cap (and without counting subjects) the same samples are an overload.
    uncapped = latency_controller(Clock(), max_tenant_share=1.0, min_subjects=1)
    feed(uncapped, uncapped.clock, tenants, 5)  # type: ignore[arg-type]
    assert uncapped.engaged


def test_with_many_tenants_one_weighs_at_most_its_share() -> None:
    clock = Clock()
    adaptive = latency_controller(clock, max_tenant_share=0.05)
    tenants = {"greedy": (400, 5.0, True), **{f"t{i}": (2, 0.01, False) for i in range(40)}}

    feed(adaptive, clock, tenants, 10)
    assert not adaptive.engaged
    measured = adaptive.measure(clock.now)
    assert measured.window["latency"] == 0.0
    # Its share, capped: < 0.5 over the window; and none without it (one subject).
    assert measured.window["errors"] == pytest.approx((0.05 - 0.01) / (0.1 - 0.01))
    assert measured.counted == {"latency": 0.0, "errors": 0.0}
    assert measured.ignored == {}  # below engage_at anyway: nothing to say


def test_unexpected_errors_engage_and_client_errors_never_do() -> None:
    clock = Clock()
    adaptive = latency_controller(clock)
    tenants = {f"t{i}": (5, 0.01, i < 6) for i in range(10)}  # 60 % unexpected errors

    feed(adaptive, clock, tenants, 4)
    assert adaptive.pressures["errors"] == 1.0
    assert adaptive.engaged

    not_found = GraphQLError("no such product", extensions={"code": "NOT_FOUND"})
    wrapped = GraphQLError(not_found.message, original_error=not_found)  # located_error's
    assert not unexpected_error([not_found, wrapped])
    assert not unexpected_error([{"message": "boom", "path": ["a"]}])  # formatted: unknown
    assert not unexpected_error(None)
    assert not unexpected_error([])
    assert unexpected_error([not_found, GraphQLError("x", original_error=KeyError("id"))])


def test_below_min_samples_there_is_no_pressure() -> None:
    clock = Clock()
    adaptive = latency_controller(clock, min_samples=50)
    feed(adaptive, clock, {f"t{i}": (1, 9.0, True) for i in range(4)}, 10)  # 40 in 10 s

    assert adaptive.pressures == {"latency": 0.0, "errors": 0.0}
    assert not adaptive.engaged


def test_old_samples_leave_the_window() -> None:
    clock = Clock()
    adaptive = latency_controller(clock, window=5.0, engage_for=0.0, release_for=0.0)
    feed(adaptive, clock, {f"t{i}": (5, 2.0, False) for i in range(10)}, 3)
    assert adaptive.engaged

    feed(adaptive, clock, {f"t{i}": (5, 0.01, False) for i in range(10)}, 6)
    assert adaptive.pressures["latency"] == 0.0
    assert not adaptive.engaged


def test_a_flood_of_samples_keeps_a_bounded_reservoir_per_second() -> None:
    clock = Clock()
    adaptive = latency_controller(clock)
    for index in range(20_000):
        adaptive.observe(f"t{index % 50}", 0.01 if index % 2 else 2.0, False, clock.now)

    samples = [len(bucket.samples) for bucket in adaptive._buckets]
    assert max(samples) == SAMPLES_PER_SECOND
    assert sum(samples) == SAMPLES_PER_SECOND
    measured = adaptive.measure(clock.now)  # a uniform sample: half slow, p90 slow
    assert measured.window["latency"] == measured.counted["latency"] == 1.0


# -- subjects, not requests ------------------------------------------------------------------

ATTACKERS = ("ip:198.51.100.7", "ip:203.0.113.9")
HONEST = {f"key:t{i}": (2, 0.01, False) for i in range(8)}


def test_two_failing_addresses_never_engage_and_pay_their_own_multiplier() -> None:
    """The attack: two addresses send 5 failing 1-point queries a second each, eight honest
    tenants 2 good ones. The window is 38 % failures (pressure 1), from two subjects: it
    counts for nobody else; those two pay the floor at once."""
    clock = Clock()
    adaptive = latency_controller(clock, sources=("errors",), engage_for=0.0)
    tenants = {**HONEST, **dict.fromkeys(ATTACKERS, (5, 0.01, True))}

    feed(adaptive, clock, tenants, 20)

    measured = adaptive.measured
    assert measured is not None
    assert measured.window["errors"] == 1.0
    assert measured.counted["errors"] == 0.0
    assert adaptive.pressures == {"errors": 0.0}
    assert adaptive.ignored == {"errors": names.IGNORED_FEW_SUBJECTS}
    assert measured.subjects["errors"] == 2
    assert not adaptive.engaged
    assert adaptive.multiplier == 1.0
    assert adaptive.culprits == {
        "ip:198.51.100.0/24": 0.25,
        "ip:203.0.113.0/24": 0.25,
    }
    assert adaptive.multiplier_for("ip:198.51.100.7") == 0.25
    assert adaptive.multiplier_for("ip:198.51.100.200") == 0.25  # its network
    assert adaptive.multiplier_for("key:t0") == 1.0
    # Without counting subjects, the same traffic engages for everyone (as it did).
    naive = latency_controller(Clock(), sources=("errors",), engage_for=0.0, min_subjects=1)
    feed(naive, naive.clock, tenants, 20)  # type: ignore[arg-type]
    assert naive.engaged
    assert naive.multiplier == 0.25


def test_five_failing_subjects_engage_for_everyone() -> None:
    clock = Clock()
    adaptive = latency_controller(clock, sources=("errors",), engage_for=0.0)
    failing = {f"key:f{i}": (2, 0.01, True) for i in range(5)}

    feed(adaptive, clock, {**HONEST, **failing}, 10)

    assert adaptive.pressures["errors"] == 1.0  # the fifth alone is an eighth of the rest
    assert adaptive.ignored == {}
    assert adaptive.engaged
    assert adaptive.multiplier < 1.0
    assert adaptive.multiplier_for("key:t0") == adaptive.multiplier
    assert adaptive.multiplier_for("key:f0") == 0.25  # who causes it pays first


def test_many_addresses_of_one_network_are_one_subject() -> None:
    clock = Clock()
    adaptive = latency_controller(clock, sources=("errors",), engage_for=0.0)
    one_network = {f"ip:203.0.113.{i}": (2, 0.01, True) for i in range(6)}
    one_ipv6 = {f"ip:2001:db8:7:{i:x}::/64": (2, 0.01, True) for i in range(6)}

    feed(adaptive, clock, {**HONEST, **one_network, **one_ipv6}, 10)

    assert adaptive.ignored == {"errors": names.IGNORED_FEW_SUBJECTS}
    assert not adaptive.engaged
    assert set(adaptive.culprits) == {"ip:203.0.113.0/24", "ip:2001:db8:7::/48"}


def test_cheap_failing_queries_among_costly_ones_cannot_engage() -> None:
    """Ten addresses of ten networks sending failing 1-point queries, against ten tenants'
    200-point ones: ten subjects (half the subjects, most of the operations), 2.4 % of what
    the window's operations were charged."""
    clock = Clock()
    adaptive = latency_controller(clock, sources=("errors",), engage_for=0.0)
    cheap = {f"ip:10.{i}.0.1": (5, 0.01, True) for i in range(10)}
    honest = {f"key:t{i}": (1, 0.01, False) for i in range(10)}
    costs = dict.fromkeys(honest, 200.0)

    feed(adaptive, clock, {**honest, **cheap}, 10, costs)

    measured = adaptive.measured
    assert measured is not None
    assert measured.subjects["errors"] == 10
    assert measured.window["errors"] == 1.0
    assert measured.cost_share["errors"] == pytest.approx(50 / 2050)
    assert adaptive.ignored == {"errors": names.IGNORED_COST_SHARE}
    assert adaptive.pressures["errors"] == 0.0
    assert not adaptive.engaged
    assert len(adaptive.culprits) == 10
    # The same ten spending as much as the honest tenants: a real share of the work.
    spending = latency_controller(Clock(), sources=("errors",), engage_for=0.0)
    feed(spending, spending.clock, {**honest, **cheap}, 10, {**costs, **dict.fromkeys(cheap, 40.0)})  # type: ignore[arg-type]  # fmt: skip
    assert spending.engaged


def test_a_slow_few_pay_for_their_latency_alone() -> None:
    clock = Clock()
    adaptive = latency_controller(clock, sources=("latency",), engage_for=0.0)
    slow = dict.fromkeys(ATTACKERS, (5, 3.0, False))

    feed(adaptive, clock, {**HONEST, **slow}, 10)

    assert adaptive.ignored == {"latency": names.IGNORED_FEW_SUBJECTS}
    assert not adaptive.engaged
    assert adaptive.multiplier_for(ATTACKERS[0]) == 0.25
    assert adaptive.multiplier_for("key:t1") == 1.0


def test_culprits_are_bounded_and_leave_with_their_samples() -> None:
    clock = Clock()
    adaptive = latency_controller(
        clock, sources=("errors",), engage_for=0.0, window=3.0, min_cost_share=0.0
    )
    flood = {f"ip:10.{i // 250}.{i % 250}.1": (1, 0.01, True) for i in range(300)}
    honest = {f"key:t{i}": (5, 0.01, False) for i in range(300)}

    feed(adaptive, clock, {**honest, **flood}, 3)
    assert len(adaptive.culprits) == MAX_CULPRITS
    assert adaptive.engaged  # 300 subjects: an overload, counted for everyone

    feed(adaptive, clock, honest, 4)  # the failing ones stop: their samples leave the window
    assert adaptive.culprits == {}
    assert adaptive.multiplier_for("ip:10.0.0.1") == adaptive.multiplier


def test_shadow_mode_names_the_culprits_and_applies_nothing() -> None:
    clock = Clock()
    adaptive = latency_controller(clock, sources=("errors",), engage_for=0.0, mode="shadow")
    feed(adaptive, clock, {**HONEST, **dict.fromkeys(ATTACKERS, (5, 0.01, True))}, 10)

    assert len(adaptive.culprits) == 2
    assert adaptive.multiplier_for(ATTACKERS[0]) == 1.0


def test_ignored_pressure_is_logged_at_most_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    adaptive = latency_controller(clock, sources=("errors",), engage_for=0.0)
    with caplog.at_level(logging.WARNING, logger=names.LOGGER):
        feed(adaptive, clock, {**HONEST, **dict.fromkeys(ATTACKERS, (5, 0.01, True))}, 70)
    records = [r for r in caplog.records if r.quotaql_event == "pressure_ignored"]
    assert len(records) == 2  # at 1 s and 61 s
    assert records[0].getMessage() == (
        "quotaql: the errors pressure of the window, 1.00, does not count for everyone: it"
        " comes from fewer than min_subjects (5) subjects (2 subjects past the target; the"
        " operations that show it hold 38% of the cost); 2 subjects pay cost / m themselves"
    )


@pytest.mark.parametrize("seed", range(20))
def test_fair_weights_cap_every_tenant_at_its_share(seed: int) -> None:
    rng = random.Random(seed)
    share = rng.choice((0.05, 0.1, 0.2, 0.3, 0.5))
    counts = {f"t{i}": rng.choice((1, 2, 5, 50, 500)) for i in range(rng.randint(1, 60))}
    weights = fair_weights(counts, share)

    totals = {tenant: weights[tenant] * count for tenant, count in counts.items()}
    whole = sum(totals.values())
    assert all(0 < weight <= 1.0 for weight in weights.values())
    if share * len(counts) > 1:
        assert max(totals.values()) <= share * whole * (1 + 1e-9)
        # Water-filling: a tenant under the cap keeps every sample.
        cap = max(totals.values())
        assert all(weights[t] == 1.0 for t, total in totals.items() if total < cap * (1 - 1e-9))
    else:  # too few tenants to cap: each weighs the same
        assert max(totals.values()) == pytest.approx(min(totals.values()))


# -- configuration -----------------------------------------------------------------------------


def test_reconfigure_keeps_the_state_and_clamps_to_a_new_floor() -> None:
    clock, pressure = Clock(), Pressure(1.0)
    adaptive = controller(pressure, clock, engage_for=0.0, step=1.0)
    run(adaptive, clock, 2)
    assert (adaptive.engaged, adaptive.multiplier) == (True, 0.25)

    adaptive.configure(AdaptiveConfig(mode="enforce", sources=("callable",), floor=0.5))
    assert (adaptive.engaged, adaptive.multiplier) == (True, 0.5)
    adaptive.configure(AdaptiveConfig(mode="shadow", sources=("callable",), floor=0.5))
    assert (adaptive.multiplier, adaptive.computed) == (1.0, 0.5)  # shadow applies nothing
    adaptive.configure(AdaptiveConfig(mode="off"))
    assert (adaptive.engaged, adaptive.multiplier, adaptive.computed) == (False, 1.0, 1.0)


def test_shadow_computes_and_applies_nothing() -> None:
    clock, pressure = Clock(), Pressure(0.9)
    adaptive = controller(pressure, clock, mode="shadow", engage_for=0.0)
    run(adaptive, clock, 10)

    assert adaptive.engaged
    assert adaptive.computed == 0.25
    assert adaptive.multiplier == 1.0


def test_callable_without_a_pressure_function_is_refused() -> None:
    with pytest.raises(ConfigError, match='sources lists "callable": give the gate'):
        Adaptive(AdaptiveConfig(mode="enforce", sources=("callable",)))
    with pytest.raises(TypeError, match="pressure must be a callable, got float"):
        Adaptive(AdaptiveConfig(), pressure=0.5)  # type: ignore[arg-type]


def test_scale_divides_clamps_and_leaves_the_global_quota() -> None:
    tenant = Quota("tenant", capacity=100, refill_per_second=10)
    field = Quota("field:Query.x", capacity=30, refill_per_second=1)
    platform = Quota("global", capacity=10_000, refill_per_second=100, shared=True)
    quotas = (tenant, field, platform)

    assert scaled(AdaptiveConfig(), quotas, (10.0, 5.0, 10.0), 10.0, 0.5) == (20.0, 10.0, 10.0)
    # 80 / 0.25 = 320 > 100: clamped to the capacity, never COST_EXCEEDS_CAPACITY because of
    # pressure; an amount above the capacity on its own stays what it is.
    assert scaled(AdaptiveConfig(), quotas, (80.0, 40.0, 80.0), 80.0, 0.25) == (100.0, 40.0, 80.0)
    debits = scaled(AdaptiveConfig(scale_global=True), quotas, None, 10.0, 0.5)
    assert debits == (20.0, 20.0, 20.0)
    assert scaled(AdaptiveConfig(), quotas, None, 10.0, 1.0) == (10.0, 10.0, 10.0)


def test_the_source_names_are_the_metric_label_values() -> None:
    assert PRESSURE_SOURCES == names.PRESSURE_SOURCES


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mode": "on"}, "mode must be one of off, shadow, enforce, got 'on'"),
        ({"sources": ()}, "sources must name at least one source"),
        ({"sources": ("latency", "latency")}, "sources names a source twice"),
        ({"sources": ("load",)}, "sources: unknown source 'load'"),
        ({"tiers": ()}, "tiers must name at least one tier"),
        ({"floor": 0.0}, "floor must be a number above 0 and at most 1, got 0.0"),
        ({"floor": float("nan")}, "floor must be a number above 0"),
        ({"latency_percentile": 1.0}, "latency_percentile must be a number above 0 and below 1"),
        ({"window": 0.5}, "window must be a finite number at least 1, got 0.5"),
        ({"min_samples": 0}, "min_samples must be an integer >= 1, got 0"),
        ({"min_subjects": 0}, "min_subjects must be an integer >= 1, got 0"),
        ({"min_subjects": 2.0}, "min_subjects must be an integer >= 1, got 2.0"),
        ({"min_cost_share": 1.5}, "min_cost_share must be a number at least 0 and at most 1"),
        ({"latency_saturate": 0.1}, "latency_saturate must be above latency_target (0.25)"),
        ({"error_saturate": 0.01}, "error_saturate must be above error_target (0.01)"),
        ({"release_at": 0.5}, "engage_at must be above release_at (0.5)"),
        ({"step": True}, "step must be a number above 0 and at most 1, got True"),
    ],
)
def test_adaptive_config_checks_itself(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        AdaptiveConfig(**settings)


TIERS = """
[tiers.free]
capacity = 100
refill_per_second = 10
[tiers.internal]
capacity = 100
refill_per_second = 10
essential = true
"""


@pytest.mark.parametrize(
    ("text", "line", "key", "reason"),
    [
        ('[adaptive]\nmode = "on"\n', 2, "adaptive.mode",
         'expected one of "off", "shadow", "enforce", got a string ("on")'),
        ("[adaptive]\nmod = 1\n", 2, "adaptive.mod", "unknown key; did you mean 'mode'?"),
        ('[adaptive]\nsources = ["latency", "latncy"]\n', 2, "adaptive.sources[1]",
         'unknown pressure source "latncy"; did you mean "latency"?'),
        ('[adaptive]\nsources = ["cpu"]\n', 2, "adaptive.sources[0]",
         'unknown pressure source "cpu"; expected one of: "latency", "errors", "callable"'),
        ('[adaptive]\nsources = ["errors", "errors"]\n', 2, "adaptive.sources[1]",
         '"errors" is listed twice'),
        ("[adaptive]\nsources = []\n", 2, "adaptive.sources",
         'expected at least one of "latency", "errors", "callable"'),
        ('[adaptive]\nsources = "latency"\n', 2, "adaptive.sources",
         'expected an array of strings, got a string ("latency")'),
        ('[adaptive]\ntiers = ["fre"]\n', 10, "adaptive.tiers[0]",
         'no tier named "fre"; did you mean "free"?'),
        ('[adaptive]\ntiers = ["internal"]\n', 10, "adaptive.tiers[0]",
         'tier "internal" is essential (tiers.internal.essential = true): an essential tier'
         " is never scaled; list it here or mark it essential, not both"),
        ("[adaptive]\ntiers = []\n", 10, "adaptive.tiers",
         "expected at least one tier (leave tiers out: every tier that is not essential)"),
        ("[adaptive]\nfloor = 1.5\n", 2, "adaptive.floor",
         "expected a number above 0 and at most 1, got 1.5"),
        ('[adaptive]\nwindow = "10s"\n', 2, "adaptive.window",
         'expected a finite number at least 1, got a string ("10s")'),
        ("[adaptive]\nengage_for = -1\n", 2, "adaptive.engage_for",
         "expected a finite number at least 0, got -1"),
        ("[adaptive]\nmin_samples = 2.5\n", 2, "adaptive.min_samples",
         "expected an integer >= 0, got a float (2.5)"),
        ("[adaptive]\nmin_samples = 0\n", 2, "adaptive.min_samples",
         "expected an integer >= 1, got 0"),
        ("[adaptive]\nmin_subjects = 0\n", 2, "adaptive.min_subjects",
         "expected an integer >= 1, got 0"),
        ('[adaptive]\nmin_subjects = "5"\n', 2, "adaptive.min_subjects",
         'expected an integer >= 0, got a string ("5")'),
        ("[adaptive]\nmin_cost_share = -0.1\n", 2, "adaptive.min_cost_share",
         "expected a number at least 0 and at most 1, got -0.1"),
        ("[adaptive]\nmin_cost_share = 2\n", 2, "adaptive.min_cost_share",
         "expected a number at least 0 and at most 1, got 2"),
        ("[adaptive]\nglobal = 1\n", 2, "adaptive.global",
         "expected true or false, got an integer (1)"),
        ("[adaptive]\nlatency_target = 2.0\n", 2, "adaptive.latency_target",
         "expected a number below latency_saturate (1), got 2"),
        ("[adaptive]\nlatency_saturate = 0.5\nlatency_target = 0.8\n", 3, "adaptive.latency_target",
         "expected a number below latency_saturate (0.5), got 0.8"),
        ("[adaptive]\nlatency_target = 0.8\nlatency_saturate = 0.5\n", 3,
         "adaptive.latency_saturate", "expected a number above latency_target (0.8), got 0.5"),
        ("[adaptive]\nrelease_at = 0.7\n", 2, "adaptive.release_at",
         "expected a number below engage_at (0.5), got 0.7"),
        ("[adaptive]\nerror_saturate = 0.005\n", 2, "adaptive.error_saturate",
         "expected a number above error_target (0.01), got 0.005"),
        ("[tiers.pro]\ncapacity = 1\nrefill_per_second = 1\nessential = 'yes'\n", 4,
         "tiers.pro.essential", 'expected true or false, got a string ("yes")'),
    ],
)  # fmt: skip
def test_adaptive_table_errors_name_file_line_and_key(
    tmp_path: Path, text: str, line: int, key: str, reason: str
) -> None:
    path = tmp_path / "quotaql.toml"
    body = text if text.startswith("[tiers.pro]") else (TIERS if "tiers" in text else "") + text
    if text.startswith("[tiers.pro]"):
        body = '[limits]\ndefault_tier = "pro"\n' + text
        line += 2
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)

    assert (raised.value.file, raised.value.line, raised.value.key) == (str(path), line, key)
    assert raised.value.reason == reason


def test_the_adaptive_table_and_essential_load(tmp_path: Path) -> None:
    path = tmp_path / "quotaql.toml"
    path.write_text(
        TIERS
        + "[tiers.pro]\ncapacity = 1\nrefill_per_second = 1\n"
        + '[adaptive]\nmode = "shadow"\nsources = ["errors", "latency"]\nfloor = 0.4\n'
        + "min_samples = 10\nglobal = true\nwindow = 30\nmin_subjects = 3\n"
        + "min_cost_share = 0.5\n",
        encoding="utf-8",
    )
    config = load_config(path)

    assert config.adaptive == AdaptiveConfig(
        mode="shadow", sources=("errors", "latency"), floor=0.4, min_samples=10,
        min_subjects=3, min_cost_share=0.5,
        scale_global=True, window=30.0,
    )  # fmt: skip
    assert config.adaptive_tiers == {"free", "pro"}  # every tier but the essential one
    assert config.tiers["internal"].essential
    assert not config.tiers["free"].essential
    path.write_text(TIERS + '[adaptive]\ntiers = ["free"]\n', encoding="utf-8")
    assert load_config(path).adaptive_tiers == {"free"}
