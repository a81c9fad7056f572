"""Shared timing, target and table helpers for the benchmarks (no pytest-benchmark)."""

from __future__ import annotations

import gc
import math
import os
import platform
import signal
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

__all__ = [
    "SAMPLES",
    "Measurement",
    "Target",
    "Throughput",
    "environment",
    "fmt_int",
    "fmt_ratio",
    "fmt_us",
    "measure",
    "measure_calls_interleaved",
    "measure_interleaved",
    "measure_throughput",
    "print_table",
    "print_targets",
    "ratio",
    "remaining_budget",
    "restart_budget",
]

K = TypeVar("K")

SAMPLES = 7
# Calibration grows the loop count until a sample takes MIN_SAMPLE_S, then aims at TARGET_SAMPLE_S:
# long enough to dwarf timer resolution and loop overhead, short enough to take several samples
# between the noise bursts of a shared 2-core machine.
MIN_SAMPLE_S = 0.020
TARGET_SAMPLE_S = 0.030
# A measurement that needs more than this (calibration + samples) is cut short: a pathological case,
# e.g. an analyzer that expands fragment bombs, must not stall the whole run.
MEASUREMENT_TIME_LIMIT_S = 10.0
# Slow operations (one call longer than a sample) take fewer samples, down to MIN_SAMPLES.
SOFT_MEASUREMENT_S = 2.0
MIN_SAMPLES = 3
# Each benchmark module must finish in under 3 minutes; its measurements share this budget
# (bench/run.py starts it again for every module, so `make bench` gives each its figures).
RUN_BUDGET_S = 150.0

_started = time.monotonic()


def remaining_budget() -> float:
    """Seconds left of the current module's time budget."""
    return RUN_BUDGET_S - (time.monotonic() - _started)


def restart_budget() -> None:
    """Give the next module a whole budget (bench/run.py calls it before each module)."""
    global _started
    _started = time.monotonic()


@dataclass(frozen=True, slots=True)
class Measurement:
    """The timing of one operation: median and minimum µs per call over the samples.

    ``median_us`` is ``None`` when there is no figure; ``note`` then says why.
    ``result`` is what the operation returned on its first (untimed) call.
    """

    median_us: float | None
    min_us: float | None = None
    loops: int = 0
    samples: int = 0
    result: Any = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.median_us is not None


class _MeasurementTimeoutError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Plan:
    """A calibrated operation: loops per sample, that sample's seconds, its first result."""

    fn: Callable[[], object]
    loops: int
    sample_s: float
    result: Any

    def sample_us(self) -> float:
        """One sample, in µs per call."""
        return _sample(self.fn, self.loops) / self.loops * 1e6


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise _MeasurementTimeoutError in the timed code after ``seconds`` (POSIX main thread)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def on_alarm(_signum: int, _frame: object) -> None:
        raise _MeasurementTimeoutError

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _sample(fn: Callable[[], object], loops: int) -> float:
    """Seconds for ``loops`` calls of ``fn``, after a full collection.

    The collector stays enabled while timing (unlike timeit): the garbage an operation creates is
    part of what it costs a server.
    """
    gc.collect()
    timer = time.perf_counter
    iterations = range(loops)
    start = timer()
    for _ in iterations:
        fn()
    return timer() - start


def _calibrate(fn: Callable[[], object]) -> tuple[int, float]:
    """Loops per sample so that a sample takes about TARGET_SAMPLE_S, and that sample's seconds."""
    loops = 1
    while True:
        elapsed = _sample(fn, loops)
        if elapsed >= MIN_SAMPLE_S:
            scaled = max(1, round(loops * TARGET_SAMPLE_S / elapsed))
            return scaled, elapsed * scaled / loops
        # Jump straight to the right order of magnitude, but by at most 10x per step so that a
        # first call made slow by cold caches does not overshoot.
        factor = 10 if elapsed <= 0 else min(10, max(2, math.ceil(MIN_SAMPLE_S / elapsed)))
        loops *= factor


def measure(fn: Callable[[], object], *, samples: int = SAMPLES) -> Measurement:
    """Time ``fn``: calibrate, warm up, take ``samples`` samples and keep the median µs per call.

    Never raises for a slow operation: past MEASUREMENT_TIME_LIMIT_S (or the run's remaining
    budget) the measurement stops and comes back without a figure. Errors from ``fn`` propagate.
    """
    return measure_interleaved({"": fn}, samples=samples)[""]


def measure_interleaved(
    fns: Mapping[K, Callable[[], object]], *, samples: int = SAMPLES
) -> dict[K, Measurement]:
    """Time several operations as :func:`measure` does, taking their samples in turns.

    Each operation is calibrated and warmed up on its own, then the samples go round-robin
    (a, b, c, a, b, c, ...): a burst of noise from the machine's neighbours lands on one round of
    every operation rather than on all the samples of one, so the ratios between them are steadier.
    """
    results: dict[K, Measurement] = {}
    plans: dict[K, _Plan] = {}
    for name, fn in fns.items():
        limit = min(MEASUREMENT_TIME_LIMIT_S, remaining_budget())
        if limit <= 0:
            results[name] = Measurement(None, note="skipped: run time budget spent")
            continue
        try:
            with _time_limit(limit):
                result = fn()
                loops, sample_s = _calibrate(fn)
                _sample(fn, loops)  # warm-up: let the specializing interpreter settle
        except _MeasurementTimeoutError:
            results[name] = Measurement(None, note=f"timed out after {limit:g} s")
            continue
        plans[name] = _Plan(fn, loops, sample_s, result)

    if plans:
        round_s = sum(plan.sample_s for plan in plans.values())
        count = max(MIN_SAMPLES, min(samples, int(SOFT_MEASUREMENT_S * len(plans) / round_s)))
        per_call_us: dict[K, list[float]] = {name: [] for name in plans}
        limit = min(MEASUREMENT_TIME_LIMIT_S * len(plans), remaining_budget())
        if limit > 0:
            try:
                with _time_limit(limit):
                    for _ in range(count):
                        for name, plan in plans.items():
                            per_call_us[name].append(plan.sample_us())
            except _MeasurementTimeoutError:
                pass  # keep the samples already taken
        for name, plan in plans.items():
            taken = per_call_us[name]
            results[name] = (
                Measurement(
                    median_us=statistics.median(taken),
                    min_us=min(taken),
                    loops=plan.loops,
                    samples=len(taken),
                    result=plan.result,
                )
                if taken
                else Measurement(None, result=plan.result, note="no sample within the time limit")
            )
    return {name: results[name] for name in fns}


def measure_calls_interleaved(
    fns: Mapping[K, Callable[[], object]],
    *,
    calls: int = 2_000,
    warmup: int = 20,
    time_limit: float | None = None,
) -> dict[K, Measurement]:
    """Time operations that each wait on a round trip, call by call, in turns.

    For I/O-bound calls (tens of µs or more, mostly waiting on a server) on a shared machine,
    the neighbours' bursts last milliseconds: a 30 ms sample lands in or out of one as a whole,
    and the medians of :func:`measure_interleaved` then move by tens of percent between runs.
    Here every round calls each operation once, starting from a different one each round, and
    times each call: all of them see the same conditions at a scale of microseconds. The figure
    is the median µs over ``calls`` rounds (``min_us`` the fastest call, ``loops`` 1). Each
    operation first runs ``warmup`` times untimed. Bounded like :func:`measure`, or by
    ``time_limit`` seconds for the whole set: past it, the calls already timed are kept.
    """
    names = list(fns)
    results: dict[K, Measurement] = {}
    limit = min(
        MEASUREMENT_TIME_LIMIT_S * max(1, len(names)) if time_limit is None else time_limit,
        remaining_budget(),
    )
    if limit <= 0:
        note = "skipped: run time budget spent"
        return {name: Measurement(None, note=note) for name in names}
    first = {name: fns[name]() for name in names}
    taken: dict[K, list[float]] = {name: [] for name in names}
    timer = time.perf_counter
    gc.collect()
    try:
        with _time_limit(limit):
            for _ in range(warmup):
                for name in names:
                    fns[name]()
            for index in range(calls):
                start = index % len(names)
                for name in names[start:] + names[:start]:
                    fn = fns[name]
                    began = timer()
                    fn()
                    taken[name].append(timer() - began)
    except _MeasurementTimeoutError:
        pass  # keep the calls already timed
    for name in names:
        us = [seconds * 1e6 for seconds in taken[name]]
        cut = f"time limit: {len(us):,} of {calls:,} calls timed" if len(us) < calls else ""
        results[name] = (
            Measurement(statistics.median(us), min(us), 1, len(us), first[name], cut)
            if us
            else Measurement(None, result=first[name], note="no call within the time limit")
        )
    return results


@dataclass(frozen=True, slots=True)
class Throughput:
    """Operations per second of one workload: the median and the best over its rounds.

    ``cpu_us`` is the median CPU time of this process per operation (``time.process_time``, all
    threads, system time included): for an event loop it is what bounds the throughput.
    ``median_ops`` is ``None`` when there is no figure; ``note`` then says why.
    """

    median_ops: float | None
    max_ops: float | None = None
    cpu_us: float | None = None
    operations: int = 0
    rounds: int = 0
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.median_ops is not None


def _timed_round(fn: Callable[[], object], operations: int) -> tuple[float, float]:
    """One round of ``fn`` after a full collection: (operations per second, CPU µs each)."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return operations / wall, cpu / operations * 1e6


def measure_throughput(
    rounds: Mapping[K, Callable[[], object]],
    operations: int,
    *,
    samples: int = SAMPLES,
    time_limit: float | None = None,
) -> dict[K, Throughput]:
    """Operations per second of workloads that each run ``operations`` operations per call.

    A call of ``rounds[name]`` is one round: a fixed amount of work (e.g. spread over concurrent
    callers on an event loop). Each workload gets one warm-up round, then the rounds go
    round-robin as in :func:`measure_interleaved`, ``gc.collect()`` before each. The figure is
    the median over the rounds of ``operations`` / seconds. Bounded like :func:`measure`, or by
    ``time_limit`` seconds for the timed rounds of all workloads: past it (or the run's budget)
    each workload comes back with the rounds already taken.
    """
    results: dict[K, Throughput] = {}
    ready: list[K] = []
    for name, fn in rounds.items():
        limit = min(MEASUREMENT_TIME_LIMIT_S, remaining_budget())
        if limit <= 0:
            results[name] = Throughput(None, note="skipped: run time budget spent")
            continue
        try:
            with _time_limit(limit):
                _timed_round(fn, operations)  # warm-up: connections opened, code specialized
        except _MeasurementTimeoutError:
            results[name] = Throughput(None, note=f"warm-up timed out after {limit:g} s")
            continue
        ready.append(name)

    taken: dict[K, list[tuple[float, float]]] = {name: [] for name in ready}
    limit = min(
        MEASUREMENT_TIME_LIMIT_S * len(ready) if time_limit is None else time_limit,
        remaining_budget(),
    )
    if ready and limit > 0:
        try:
            with _time_limit(limit):
                for _ in range(samples):
                    for name in ready:
                        taken[name].append(_timed_round(rounds[name], operations))
        except _MeasurementTimeoutError:
            pass  # keep the rounds already taken
    for name in ready:
        rates = [rate for rate, _ in taken[name]]
        results[name] = (
            Throughput(
                median_ops=statistics.median(rates),
                max_ops=max(rates),
                cpu_us=statistics.median(cpu for _, cpu in taken[name]),
                operations=operations,
                rounds=len(rates),
            )
            if rates
            else Throughput(None, operations=operations, note="no round within the time limit")
        )
    return {name: results[name] for name in rounds}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either figure is missing."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


@dataclass(frozen=True, slots=True)
class Target:
    """A figure and the bound it should meet. A report, not an assertion: missing one fails no run.

    ``value`` None means no figure: SKIP when ``skip_reason`` says why (node absent), else FAIL.
    """

    name: str
    value: float | None
    limit: float
    op: Literal["<=", "<", ">=", ">"] = "<="
    skip_reason: str = ""

    @property
    def status(self) -> Literal["PASS", "FAIL", "SKIP"]:
        if self.value is None:
            return "SKIP" if self.skip_reason else "FAIL"
        met = {
            "<=": self.value <= self.limit,
            "<": self.value < self.limit,
            ">=": self.value >= self.limit,
            ">": self.value > self.limit,
        }[self.op]
        return "PASS" if met else "FAIL"

    @property
    def verdict(self) -> str:
        """The status, with the reason for a SKIP."""
        return f"{self.status} ({self.skip_reason})" if self.status == "SKIP" else self.status

    @property
    def bound(self) -> str:
        return f"{self.op} {self.limit:g}"


def fmt_us(value: float | None) -> str:
    """Microseconds with a precision that suits the magnitude; '-' for no figure."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_ratio(value: float | None) -> str:
    """A ratio: three significant digits below 1, two decimals above (4.00, not 4); '-' if none."""
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 1 else f"{value:.2f}"


def fmt_int(value: object) -> str:
    """An integral number (costs may be floats) with thousands separators."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str = "", left: int = 1
) -> None:
    """Print a fixed-width table: the first ``left`` columns align left, the others right."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(w) if i < left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    if title:
        print(title)
    print(line(headers))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))
    print()


def print_targets(targets: Sequence[Target], *, title: str = "Targets") -> None:
    """Print targets as a table, one line each with value, bound and PASS/FAIL/SKIP."""
    rows = [[t.name, fmt_ratio(t.value), t.bound, t.verdict] for t in targets]
    print_table(["target", "value", "bound", "status"], rows, title=title, left=1)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for entry in cpuinfo:
                if entry.startswith("model name"):
                    return entry.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> str:
    """One line naming the interpreter, CPU count and CPU model, for the figures' context."""
    return (
        f"{platform.python_implementation()} {platform.python_version()} on {platform.system()}, "
        f"{os.cpu_count()} CPUs ({_cpu_model()})"
    )
