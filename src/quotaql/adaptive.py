"""Adaptive limits: tighten the budgets of chosen tiers while the service is overloaded.

A **pressure** signal in [0, 1] is the largest of its configured sources:

- ``latency``: a percentile of the execution time of the operations this process ran
  (admitted to settled) over the last ``window`` seconds, against a target:
  ``(p - latency_target) / (latency_saturate - latency_target)``, clamped;
- ``errors``: the share of those operations that ended with an **unexpected** error (a
  resolver raised something that is not a ``GraphQLError``: a bug, a timeout, a database
  down), against ``error_target`` and ``error_saturate`` alike. Client errors (a
  ``GraphQLError`` a resolver raised on purpose, such as ``NOT_FOUND``; a document that does
  not parse or validate; a refusal) never count;
- ``callable``: what ``Gate(pressure=fn)`` returns, read at most once a second.

Both measured sources weigh each tenant's samples so that no tenant holds more than
``max_tenant_share`` of the window (:func:`fair_weights`): one tenant's slow or failing
queries cannot move the percentile for everyone, many tenants' can (that is an overload).

They count **subjects, not requests** (a subject's class:
:func:`~quotaql.instrumentation.subjects.subject_class`, an address by its /24 or /48
network). The pressure that counts for everyone is the window's without the
``min_subjects - 1`` subjects that contribute most to it (those whose own operations are
furthest past the target), and none at all when the operations that show it (failed ones,
ones slower than ``latency_target``) were charged less than ``min_cost_share`` of what the
window's operations were: fewer than ``min_subjects`` subjects, or cheap failing queries
among costly good ones, cannot engage adaptation for every tenant (:attr:`Adaptive.ignored`
says why a pressure was left out).
The subjects that cause the pressure **pay first**: while a source's pressure over the
whole window is at or above ``engage_at``, each subject whose own operations are past it
(at most :data:`MAX_CULPRITS`, the largest contributors) is debited ``cost / m`` at its own
multiplier, ``max(floor, 1 - its own pressure)``, at once, whether adaptation is engaged for
everyone or not (:meth:`Adaptive.multiplier_for`).

Once pressure stays at or above ``engage_at`` for ``engage_for`` seconds adaptation
**engages**: the multiplier ``m`` moves towards ``max(floor, 1 - pressure)``, at most ``step``
per second, quantized to :data:`QUANTUM`. It is **released** once pressure stays at or below
``release_at`` for ``release_for``, and ``m`` climbs back to 1 at ``step`` per second.

The multiplier is applied to the **charge**, never to the stored refill rate (a bucket's
state is the time it is full again: a lower rate would read the same state as *more*
tokens): an adaptive tier's quotas are debited ``cost / m``, at most each quota's maximum
(so pressure never makes an operation ``COST_EXCEEDS_CAPACITY``), and an operation's refund
is scaled by the factor its own debit used. A greedy tenant is admitted ``m × refill`` cost
points a second; the state in Redis stays valid for every worker, whatever each one's ``m``.

Everything here is per process: each worker measures the operations it ran and throttles
what it admits. The update runs at most once a second, on the request path of whichever
operation comes first after the second (a non-blocking lock: the others go on with the
current ``m``); the multiplier an operation reads is one attribute.

Example:
    >>> clock = [0.0]
    >>> adaptive = Adaptive(AdaptiveConfig(mode="enforce", sources=("callable",),
    ...                     engage_for=2.0), pressure=lambda: 0.7, clock=lambda: clock[0])
    >>> for second in range(5):
    ...     clock[0] = float(second)
    ...     adaptive.poll()
    ...     print(second, adaptive.engaged, adaptive.multiplier)
    0 False 1.0
    1 False 1.0
    2 True 0.9
    3 True 0.8
    4 True 0.7

    It goes on down to ``max(floor, 1 - pressure)``, 0.3, and stays there while the pressure
    does.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Final

from graphql import GraphQLError

from quotaql.config.adaptive import (
    ADAPTIVE_MODES,
    PRESSURE_SOURCES,
    AdaptiveConfig,
    AdaptiveMode,
    PressureSource,
)
from quotaql.errors import ConfigError
from quotaql.instrumentation import names
from quotaql.instrumentation.subjects import subject_class
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping

    from quotaql.instrumentation.logs import StructuredLog

__all__ = [
    "ADAPTIVE_MODES",
    "PRESSURE_SOURCES",
    "QUANTUM",
    "Adaptive",
    "AdaptiveConfig",
    "AdaptiveMode",
    "Measured",
    "PressureSource",
    "fair_weights",
    "quantize",
    "unexpected_error",
]

QUANTUM: Final = 0.05
"""The multiplier's grid: ``m`` is a multiple of it (or the floor), so the set of debits an
operation can be charged stays small (a deny cache entry, a Redis script argument)."""
UPDATE_INTERVAL: Final = 1.0
"""Seconds between two updates of the signal and the multiplier (at most one per interval)."""
SLOW_CALLABLE: Final = 0.01
"""A ``pressure`` callable slower than this (seconds) is logged (``pressure_slow``): it runs
on the request path, once a second."""
SAMPLES_PER_SECOND: Final = 512
"""The samples kept per second of the window (a uniform reservoir of the operations that
settled in it): memory and the once-a-second update stay bounded whatever the traffic."""
FAILURE_LOG_INTERVAL: Final = 60.0
"""Seconds between two ``pressure_failed`` records while the callable keeps failing (and
between two ``pressure_ignored`` records of one source)."""
MAX_CULPRITS: Final = 64
"""The most subjects that pay their own multiplier at once (the largest contributors to the
pressure): a flood of addresses cannot make the table grow."""
MEASURED_SOURCES: Final[tuple[str, ...]] = ("latency", "errors")


def quantize(m: float, floor: float) -> float:
    """``m`` on the :data:`QUANTUM` grid, within ``[floor, 1]`` (the floor itself may be off
    the grid: the values are the grid's and the floor)."""
    if m <= floor:
        return floor
    grid = round(round(m / QUANTUM) * QUANTUM, 2)
    return 1.0 if grid >= 1.0 else max(floor, grid)


def fair_weights(counts: Mapping[str, float], share: float) -> dict[str, float]:
    """The weight of one unit (a sample, a point of cost) of each tenant, so that no tenant
    weighs more than ``share`` of all the units (water-filling: the largest tenants are
    capped at the same total, the others keep theirs).

    With fewer than ``1 / share`` tenants no such cap exists; every tenant then weighs the
    same in all (one of three tenants is a third of the traffic, whatever it sends).

    Example:
        >>> weights = fair_weights({"a": 90, "b": 5, "c": 5}, 0.5)
        >>> round(weights["a"] * 90, 6), weights["b"] * 5
        (10.0, 5.0)
    """
    if not counts:
        return {}
    ordered = sorted(counts.values(), reverse=True)
    if share * len(ordered) <= 1.0:
        return {tenant: 1.0 / count for tenant, count in counts.items()}
    rest = float(sum(ordered))
    cap = math.inf
    for capped, count in enumerate(ordered):
        if share * capped >= 1.0:  # unreachable: a cap exists before (see the docstring)
            break
        candidate = share * rest / (1.0 - share * capped)
        if candidate >= count:
            cap = candidate
            break
        rest -= count
    if cap == math.inf:
        return {tenant: 1.0 / count for tenant, count in counts.items()}
    return {tenant: min(1.0, cap / count) for tenant, count in counts.items()}


def _quantile(pairs: list[tuple[float, float]], q: float, *, ordered: bool = False) -> float:
    """The ``q`` quantile of weighted values ``(value, weight)``: the smallest value whose
    cumulative weight reaches ``q`` of the total (within rounding). ``ordered``: the pairs
    are sorted by value already."""
    if not ordered:
        pairs.sort()
    total = math.fsum(weight for _, weight in pairs)
    goal = q * total - 1e-9 * total
    cumulative = 0.0
    for value, weight in pairs:
        cumulative += weight
        if cumulative >= goal:
            return value
    return pairs[-1][0]


def _ramp(value: float, target: float, saturate: float) -> float:
    """0 at ``target`` and below, 1 at ``saturate`` and above, linear between."""
    return min(1.0, max(0.0, (value - target) / (saturate - target)))


def unexpected_error(errors: Iterable[Any] | None) -> bool:
    """Whether an execution's ``errors`` hold an unexpected one: a ``GraphQLError`` whose
    ``original_error`` is an exception that is not itself a ``GraphQLError`` (a resolver
    crashed). A ``GraphQLError`` raised on purpose, validation errors and formatted errors
    (dicts: nothing says what raised them) are the client's."""
    if not errors:
        return False
    for error in errors:
        if isinstance(error, GraphQLError):
            original = error.original_error
            if original is not None and not isinstance(original, GraphQLError):
                return True
    return False


_Sample = tuple[str, float, bool, float]
"""``(subject class, seconds, failed, cost)``."""


class _Bucket:
    """One second of samples, a uniform reservoir."""

    __slots__ = ("samples", "second", "seen")

    def __init__(self) -> None:
        self.second = -1
        self.seen = 0
        self.samples: list[_Sample] = []


def _seconds(sample: _Sample) -> float:
    return sample[1]


def _counts(samples: list[_Sample]) -> dict[str, float]:
    """How many samples of ``samples`` each subject has."""
    counts: dict[str, float] = {}
    for who, _, _, _ in samples:
        counts[who] = counts.get(who, 0.0) + 1.0
    return counts


class Measured:
    """What the measured sources say of one window (:meth:`Adaptive.measure`).

    Attributes:
        counted: each measured source's pressure that counts for everyone.
        window: each measured source's pressure over every sample of the window.
        ignored: the sources whose window pressure reached ``engage_at`` and did not count
            for everyone, and why (``names.IGNORED_FEW_SUBJECTS``,
            ``names.IGNORED_COST_SHARE``).
        subjects: per source, how many subjects' operations were past its target more
            often than the target allows.
        cost_share: per source, the share of what the window's operations were charged
            (each at least 1) that the operations showing the pressure were charged
            (failed ones; ones slower than ``latency_target``).
        culprits: the subjects (classes) that pay their own multiplier, and what it is.
    """

    __slots__ = ("cost_share", "counted", "culprits", "ignored", "subjects", "window")

    def __init__(self) -> None:
        self.counted: dict[str, float] = dict.fromkeys(MEASURED_SOURCES, 0.0)
        self.window: dict[str, float] = dict.fromkeys(MEASURED_SOURCES, 0.0)
        self.ignored: dict[str, str] = {}
        self.subjects: dict[str, int] = dict.fromkeys(MEASURED_SOURCES, 0)
        self.cost_share: dict[str, float] = dict.fromkeys(MEASURED_SOURCES, 0.0)
        self.culprits: dict[str, float] = {}


class Adaptive:
    """The pressure signal and the multiplier of one process (see the module).

    Args:
        config: the ``[adaptive]`` table.
        pressure: ``pressure() -> float``, the ``callable`` source: read at most once a
            second, on the request path (it must return in well under 10 ms: return a value
            computed elsewhere). Clamped to [0, 1]; NaN, a non-number, an awaitable or an
            exception counts as 0 and is logged (``pressure_failed``, at most once a minute).
        clock: seconds from a monotonic clock (``time.monotonic``; tests set their own, as
            the attribute ``clock`` too).
        log: where transitions and failures are logged.
        tiers: the names of the tiers it scales (for the log records).
        on_update: called with this object after each update (metrics).
        on_transition: called with ``"engaged"`` or ``"released"`` on each transition.

    Attributes:
        multiplier: what adaptive tiers' charges are divided by now: the computed
            multiplier in ``enforce`` mode, 1 otherwise. One attribute: the hot path reads it.
            A subject that causes the pressure may pay less (:meth:`multiplier_for`).
        computed: the multiplier the controller computed (also in ``shadow`` mode).
        culprits: the subjects (classes) that pay their own multiplier because their own
            operations cause the pressure, and that multiplier (also in ``shadow`` mode).
        ignored: the measured sources whose pressure was not counted for everyone at the
            last update, and why (see :class:`Measured`).
        measured: what the measured sources said at the last update (None before).
        measures: a configured source needs the operations' samples (:meth:`observe`).
        engaged: adaptation is engaged (in shadow mode: would be).
        pressure: the latest pressure, the largest of ``pressures``.
        pressures: the latest value of each configured source.
        next_update: the clock's time of the next update.
    """

    __slots__ = (
        "_blaming",
        "_buckets",
        "_crossed_since",
        "_failure_logged",
        "_failures",
        "_ignored_logged",
        "_lock",
        "_m",
        "_own",
        "_pressure",
        "_updated",
        "_updating",
        "clock",
        "computed",
        "config",
        "culprits",
        "engaged",
        "ignored",
        "log",
        "measured",
        "measures",
        "multiplier",
        "next_update",
        "on_transition",
        "on_update",
        "pressure",
        "pressures",
        "tiers",
    )

    def __init__(
        self,
        config: AdaptiveConfig,
        *,
        pressure: Callable[[], float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: StructuredLog | None = None,
        tiers: Collection[str] = (),
        on_update: Callable[[Adaptive], None] | None = None,
        on_transition: Callable[[str], None] | None = None,
    ) -> None:
        if pressure is not None and not callable(pressure):
            raise TypeError(f"pressure must be a callable, got {type(pressure).__name__}")
        self._pressure = pressure
        self.clock = clock
        self.log = log
        self.on_update = on_update
        self.on_transition = on_transition
        self._lock = threading.Lock()  # the samples
        self._updating = threading.Lock()  # one update at a time, never waited for
        self.multiplier = 1.0
        self.computed = 1.0
        self._m = 1.0
        self.engaged = False
        self.pressure = 0.0
        # Since when the pressure has been past the threshold that switches the state
        # (engage_at while released, release_at while engaged); None: it is not.
        self._crossed_since: float | None = None
        self._updated: float | None = None
        self._failures = 0
        self._failure_logged: float | None = None
        self._ignored_logged: dict[str, float] = {}
        self.culprits: dict[str, float] = {}
        self._own: dict[str, float] = {}  # the culprits whose multiplier applies (enforce)
        self._blaming: set[str] = set()  # the sources that named culprits at the last update
        self.ignored: dict[str, str] = {}
        self.measured: Measured | None = None
        self.next_update = -math.inf
        self.config = config
        self.tiers: tuple[str, ...] = tuple(tiers)
        self.pressures: dict[str, float] = {}
        self._buckets: list[_Bucket] = []
        self.configure(config, tiers)

    def configure(self, config: AdaptiveConfig, tiers: Collection[str] = ()) -> None:
        """Apply a new ``[adaptive]`` table (a reload): the samples, the engaged state and
        the multiplier carry over (within the new floor); ``enforce`` applies at once."""
        if "callable" in config.sources and config.enabled and self._pressure is None:
            raise ConfigError(
                '[adaptive] sources lists "callable": give the gate its pressure callable'
                " (Gate(pressure=fn), or the adapter's pressure= keyword)"
            )
        with self._lock:
            span = math.ceil(config.window)
            if len(self._buckets) != span:
                kept = sorted(
                    (bucket for bucket in self._buckets if bucket.second >= 0),
                    key=lambda bucket: bucket.second,
                )[-span:]
                self._buckets = [_Bucket() for _ in range(span)]
                for bucket in kept:
                    self._buckets[bucket.second % span] = bucket
        self.config = config
        self.measures = config.enabled and config.measures
        self.tiers = tuple(tiers)
        self.pressures = dict.fromkeys(config.sources, 0.0)
        if not config.enabled:
            if self.engaged:  # released without a transition: a crossing to engage starts anew
                self._crossed_since = None
            self.engaged = False
            self._m = 1.0
            self.culprits, self._blaming = {}, set()
        self._m = min(1.0, max(config.floor, self._m))
        self.computed = quantize(self._m, config.floor) if self._m < 1.0 else 1.0
        self.multiplier = self.computed if config.mode is Mode.ENFORCE else 1.0
        self.culprits = {who: max(config.floor, m) for who, m in self.culprits.items()}
        self._own = self.culprits if config.mode is Mode.ENFORCE else {}

    # -- the hot path ----------------------------------------------------------------------

    def multiplier_for(self, subject: str) -> float:
        """What an operation of ``subject`` (its key: ``key:acme``, ``ip:203.0.113.9``) of
        an adaptive tier is divided by now: :attr:`multiplier`, or the subject's own when
        its operations cause the pressure and it is lower."""
        own = self._own
        if own:
            mine = own.get(subject_class(subject))
            if mine is not None and mine < self.multiplier:
                return mine
        return self.multiplier

    def observe(
        self, tenant: str, seconds: float, failed: bool, now: float, cost: float = 1.0
    ) -> None:
        """One operation that ran: ``tenant`` (who paid), how long it took from admission to
        settlement, whether it ended with an unexpected error, the clock now, and what it
        was charged (``cost``: its weight in the cost share of the subjects)."""
        second = int(now)
        with self._lock:
            buckets = self._buckets
            bucket = buckets[second % len(buckets)]
            if bucket.second != second:
                if second < bucket.second:
                    return  # a sample older than the window (a clock that went back)
                bucket.second, bucket.seen = second, 0
                bucket.samples = []
            bucket.seen += 1
            samples = bucket.samples
            if len(samples) < SAMPLES_PER_SECOND:
                samples.append((subject_class(tenant), seconds, failed, cost))
                return
            slot = int(random.random() * bucket.seen)  # noqa: S311  (a reservoir, not a secret)
            if slot < SAMPLES_PER_SECOND:
                samples[slot] = (subject_class(tenant), seconds, failed, cost)

    def poll(self, now: float | None = None) -> None:
        """Update the signal and the multiplier if a second has passed since the last
        update; return at once otherwise, or while another thread updates."""
        if now is None:
            now = self.clock()
        if now < self.next_update or not self._updating.acquire(blocking=False):
            return
        try:
            if now < self.next_update:
                return  # another thread updated meanwhile
            self.next_update = now + UPDATE_INTERVAL
            self.update(now)
        except Exception as error:  # a bug here (or in a hook) must not fail the request
            if self.log is not None:
                self.log.log(
                    logging.ERROR,
                    "adaptive_failed",
                    "quotaql: the adaptive limits' update failed (%s: %s); the multiplier stays %g",
                    type(error).__name__,
                    error,
                    self.multiplier,
                    error_type=type(error).__name__,
                )
        finally:
            self._updating.release()

    # -- once a second ---------------------------------------------------------------------

    def update(self, now: float) -> None:
        """Read the sources, step the hysteresis and the multiplier (:meth:`poll` calls it
        at most once a second; tests may call it directly)."""
        config = self.config
        elapsed = UPDATE_INTERVAL if self._updated is None else max(0.0, now - self._updated)
        self._updated = now
        pressures: dict[str, float] = {}
        if config.measures:
            measured = self.measured = self.measure(now)
            for source in MEASURED_SOURCES:
                if source in config.sources:
                    pressures[source] = measured.counted[source]
            self.ignored = {s: r for s, r in measured.ignored.items() if s in config.sources}
            self.culprits = measured.culprits
            self._own = self.culprits if config.mode is Mode.ENFORCE else {}
            self._say_ignored(measured, now)
        else:
            self.culprits, self._own, self.ignored = {}, {}, {}
        if "callable" in config.sources:
            pressures["callable"] = self._read_callable(now)
        self.pressures = pressures
        pressure = self.pressure = max(pressures.values(), default=0.0)
        if self.engaged:
            crossed, hold = pressure <= config.release_at, config.release_for
        else:
            crossed, hold = pressure >= config.engage_at, config.engage_for
        if not crossed:
            self._crossed_since = None
        else:
            if self._crossed_since is None:
                self._crossed_since = now
            if now - self._crossed_since >= hold:
                self._transition(not self.engaged, now)
        target = max(config.floor, 1.0 - pressure) if self.engaged else 1.0
        limit = config.step * max(1.0, elapsed / UPDATE_INTERVAL)
        m = self._m + max(-limit, min(limit, target - self._m))
        self._m = m = min(1.0, max(config.floor, m))
        self.computed = quantize(m, config.floor)
        self.multiplier = self.computed if config.mode is Mode.ENFORCE else 1.0
        if self.on_update is not None:
            self.on_update(self)

    def measure(self, now: float) -> Measured:
        """What the ``latency`` and ``errors`` sources say of the samples in the window
        ending ``now`` (no pressure below ``min_samples``): the pressure of the whole
        window, the pressure that counts for everyone, and the subjects that pay their own
        multiplier (see the module). Each subject's samples weigh at most
        ``max_tenant_share`` of the window."""
        config = self.config
        oldest = int(now) - len(self._buckets) + 1
        samples: list[_Sample] = []
        with self._lock:
            for bucket in self._buckets:
                if oldest <= bucket.second <= now:
                    samples.extend(bucket.samples)
        measured = Measured()
        if len(samples) < config.min_samples:
            self._blaming = set()
            return measured
        samples.sort(key=_seconds)  # once: every subset keeps the order the percentile needs
        share = config.max_tenant_share
        units = fair_weights(_counts(samples), share)
        engage_at = config.engage_at
        blaming: set[str] = set()
        for source in MEASURED_SOURCES:
            errors = source == "errors"
            target = config.latency_target
            window = measured.window[source] = self._signal(source, samples, units)
            if window <= 0.0:  # the usual case: no pressure to attribute (nor to trim)
                self._blaming.discard(source)
                continue
            expected = config.error_target if errors else 1.0 - config.latency_percentile
            # Each subject's excess over the target, in weight: sum(weight * (bad - expected)),
            # and what the operations that show the pressure were charged (each at least 1).
            excess: dict[str, float] = {}
            bad_cost = total_cost = 0.0
            for who, seconds, failed, cost in samples:
                weight = units[who]
                bad = failed if errors else seconds > target
                charged = max(cost, 1.0)
                total_cost += charged
                if bad:
                    bad_cost += charged
                excess[who] = excess.get(who, 0.0) + weight * ((1.0 if bad else 0.0) - expected)
            causing = sorted((who for who, e in excess.items() if e > 0), key=excess.__getitem__)
            causing.reverse()  # the largest contributors first
            measured.subjects[source] = len(causing)
            counted = window
            if config.min_subjects > 1 and causing:
                left_out = set(causing[: config.min_subjects - 1])
                rest = [sample for sample in samples if sample[0] not in left_out]
                counted = 0.0
                if rest:
                    counted = self._signal(source, rest, fair_weights(_counts(rest), share))
            if counted < engage_at <= window:
                measured.ignored[source] = names.IGNORED_FEW_SUBJECTS
            held = measured.cost_share[source] = bad_cost / total_cost
            if counted > 0 and held < config.min_cost_share:
                if counted >= engage_at:
                    measured.ignored[source] = names.IGNORED_COST_SHARE
                counted = 0.0
            measured.counted[source] = counted
            hold = config.release_at if source in self._blaming else engage_at
            if window >= hold and source in config.sources:
                blaming.add(source)
                self._blame(source, causing, samples, measured.culprits)
        self._blaming = blaming
        return measured

    def _signal(self, source: str, samples: list[_Sample], units: Mapping[str, float]) -> float:
        """``source``'s pressure of ``samples`` (sorted by seconds), each weighing its
        subject's weight."""
        config = self.config
        if source == "latency":
            pairs = [(seconds, units[who]) for who, seconds, _, _ in samples]
            latency = _quantile(pairs, config.latency_percentile, ordered=True)
            return _ramp(latency, config.latency_target, config.latency_saturate)
        total = failed = 0.0
        for who, _, bad, _ in samples:
            weight = units[who]
            total += weight
            if bad:
                failed += weight
        return _ramp(failed / total, config.error_target, config.error_saturate)

    def _blame(
        self, source: str, causing: list[str], samples: list[_Sample], culprits: dict[str, float]
    ) -> None:
        """The largest contributors whose own pressure is at or above ``engage_at`` pay
        ``max(floor, 1 - their own pressure)`` (at most :data:`MAX_CULPRITS` of them)."""
        config = self.config
        wanted = set(causing[:MAX_CULPRITS])
        own: dict[str, list[_Sample]] = {}
        for sample in samples:
            if sample[0] in wanted:
                own.setdefault(sample[0], []).append(sample)
        for who in causing[:MAX_CULPRITS]:
            mine = own[who]  # in the window's order, by seconds
            pressure = self._signal(source, mine, dict.fromkeys((who,), 1.0))
            if pressure >= config.engage_at:
                m = quantize(max(config.floor, 1.0 - pressure), config.floor)
                culprits[who] = min(m, culprits.get(who, 1.0))

    def _say_ignored(self, measured: Measured, now: float) -> None:
        """Log a source's pressure left out for everyone (at most once a minute each)."""
        if self.log is None:
            return
        for source, reason in measured.ignored.items():
            logged = self._ignored_logged.get(source)
            if logged is not None and now - logged < FAILURE_LOG_INTERVAL:
                continue
            self._ignored_logged[source] = now
            config = self.config
            why = (
                f"it comes from fewer than min_subjects ({config.min_subjects}) subjects"
                if reason == names.IGNORED_FEW_SUBJECTS
                else f"the operations that show it hold less than min_cost_share"
                f" ({config.min_cost_share:g}) of the window's cost"
            )
            paying = len(self.culprits)
            self.log.log(
                logging.WARNING,
                "pressure_ignored",
                "quotaql: the %s pressure of the window, %.2f, does not count for everyone:"
                " %s (%d subjects past the target; the operations that show it hold %.0f%%"
                " of the cost); %d subjects pay cost / m themselves",
                source, measured.window[source], why, measured.subjects[source],
                100 * measured.cost_share[source], paying,
                source=source, reason=reason, pressure=measured.window[source],
                subjects=measured.subjects[source], culprits=paying,
            )  # fmt: skip

    def _read_callable(self, now: float) -> float:
        function = self._pressure
        if function is None:
            return 0.0
        started = time.perf_counter()
        try:
            value: Any = function()
        except Exception as error:  # a bug in the callable must not fail the request
            self._spent(time.perf_counter() - started)
            return self._failed(now, f"raised {type(error).__name__}: {error}")
        self._spent(time.perf_counter() - started)
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if callable(close):
                close()  # never awaited: no "coroutine was never awaited" warning
            return self._failed(now, "returned an awaitable (pass a plain function)")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return self._failed(now, f"returned {type(value).__name__}, not a number")
        number = float(value)  # a NumPy scalar or a Fraction too
        if math.isnan(number):
            return self._failed(now, "returned NaN")
        self._failures = 0
        return min(1.0, max(0.0, number))

    def _spent(self, seconds: float) -> None:
        if seconds > SLOW_CALLABLE and self.log is not None:
            self.log.log(
                logging.WARNING,
                "pressure_slow",
                "quotaql: the pressure callable took %.1f ms; it runs on the request path"
                " once a second: return a value computed elsewhere",
                seconds * 1000,
                seconds=seconds,
            )

    def _failed(self, now: float, what: str) -> float:
        self._failures += 1
        logged = self._failure_logged
        if self.log is not None and (logged is None or now - logged >= FAILURE_LOG_INTERVAL):
            self._failure_logged = now
            self.log.log(
                logging.WARNING,
                "pressure_failed",
                "quotaql: the pressure callable %s; counted as no pressure (%d failures in a row)",
                what,
                self._failures,
                failures=self._failures,
            )
        return 0.0

    def _transition(self, engaged: bool, now: float) -> None:
        self.engaged = engaged
        self._crossed_since = None
        config = self.config
        to = names.ENGAGED if engaged else names.RELEASED
        if self.log is not None:
            sources = ", ".join(f"{source} {value:.2f}" for source, value in self.pressures.items())
            shadow = " (shadow mode: nothing is applied)" if config.mode is Mode.SHADOW else ""
            tiers = ", ".join(self.tiers) or "none"
            if engaged:
                self.log.log(
                    logging.WARNING,
                    "adaptive_engaged",
                    "quotaql: adaptive limits engaged: pressure %.2f (%s) at or above %g for"
                    " %gs; the tiers %s are debited cost / m, m down to %g%s",
                    self.pressure, sources, config.engage_at, config.engage_for, tiers,
                    quantize(1.0 - self.pressure, config.floor), shadow,
                    pressure=self.pressure, pressures=dict(self.pressures), mode=config.mode,
                    tiers=list(self.tiers),
                )  # fmt: skip
            else:
                self.log.log(
                    logging.INFO,
                    "adaptive_released",
                    "quotaql: adaptive limits released: pressure %.2f (%s) at or below %g for"
                    " %gs; m returns to 1 by %g a second%s",
                    self.pressure, sources, config.release_at, config.release_for, config.step,
                    shadow, pressure=self.pressure, pressures=dict(self.pressures),
                    mode=config.mode, tiers=list(self.tiers),
                )  # fmt: skip
        if self.on_transition is not None:
            self.on_transition(to)
