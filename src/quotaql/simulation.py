"""Multi-region enforcement in simulation: local decisions, asynchronous sync of debits.

Each region decides on its own storage (a :class:`~quotaql.storage.memory.MemoryStorage`
by default, or a Redis storage per region) through a real :class:`~quotaql.limiter.Limiter`,
on a virtual clock (integer milliseconds, no sleeps). Every ``interval_ms`` each region
publishes what it admitted since its last publication; the others receive it ``delay_ms``
later and debit it in full with the storage's ``charge`` (a debit made whether it fits or
not): a debit that does not fit puts the bucket below empty, and the debt is paid back from
its refill before the region admits anything again. A debit made just after a publication
waits the whole interval, so the lag of a debit is at most ``interval_ms + delay_ms``.

``docs/scale-out.md`` derives the over-admission bound this accepts
(:func:`over_admission_bound`); ``tests/tools/test_scale_out.py`` measures it
(:func:`worst_window_excess`).

Example:
    >>> from quotaql import Quota
    >>> quota = Quota("tenant", capacity=100, refill_per_second=10)
    >>> two = MultiRegion(quota, regions=2, interval_ms=500, delay_ms=500)
    >>> run = two.run(greedy(1.0, 100), ticks=3_000)
    >>> excess = worst_window_excess(run.admitted, 100, 10 / 1000)
    >>> bound = over_admission_bound(2, 100, 10, lag_seconds=1.0)
    >>> bound, 0.9 * bound <= excess <= bound
    (110.0, True)
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from quotaql.limiter import Limiter
from quotaql.storage.base import Debit
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from quotaql.policy.quota import Quota

__all__ = [
    "MultiRegion",
    "Region",
    "Run",
    "Sync",
    "Traffic",
    "greedy",
    "over_admission_bound",
    "worst_window_excess",
]

#: What a client sends at virtual time ``now`` (ms) to region ``region``: the costs it
#: tries, in order; it stops at the first refusal in that region for that millisecond.
Traffic = Callable[[int, int], Iterable[float]]


def greedy(cost: float, most: int) -> Traffic:
    """A client hitting every region as fast as it is allowed: ``cost`` per request, up
    to ``most`` requests per region per millisecond (stopping at the first refusal)."""

    def traffic(now: int, region: int) -> Iterable[float]:
        del now, region
        return itertools.repeat(cost, most)

    return traffic


@dataclass
class Region:
    """One region: its own storage and limiter, and its side of the sync.

    Attributes:
        storage: the region's storage (its Redis, in production).
        limiter: decides the region's requests on ``storage``.
        unpublished: what this region admitted since its last publication.
        inbox: ``(arrival ms, amount, source)`` of the other regions' publications on
            their way.
        heard: when this region last heard from each region (ms).
        partitioned: it enforces its share (it has not heard from another for too long).
        admitted: the total this region admitted.
        forgiven: debits dropped because they did not fit (only with ``forgive_debt``).
    """

    storage: Any
    limiter: Limiter
    unpublished: float = 0.0
    inbox: deque[tuple[int, float, int]] = field(default_factory=deque)
    heard: list[int] = field(default_factory=list)
    partitioned: bool = False
    admitted: float = 0.0
    forgiven: float = 0.0


@dataclass
class Run:
    """What a :meth:`MultiRegion.run` admitted.

    Attributes:
        admitted: the total admitted by all regions in each millisecond, in order.
        by_region: the total each region admitted.
    """

    admitted: list[float]
    by_region: list[float]

    @property
    def total(self) -> float:
        """Everything admitted."""
        return sum(self.admitted)


@dataclass(frozen=True, slots=True)
class Sync:
    """How the regions hear of each other's debits (each as in :class:`MultiRegion`).

    Attributes:
        interval_ms: each region publishes its debits every ``interval_ms`` (0: each
            admission at once).
        delay_ms: how long a publication takes to reach the other regions.
        forgive_debt: drop the part of a received debit that does not fit.
        partition: ``(start, end)`` ms in which the regions cannot reach each other.
        partition_after: how long (ms) a region hears nothing from another before it
            enforces only its share (None: never).
    """

    interval_ms: int = 0
    delay_ms: int = 0
    forgive_debt: bool = False
    partition: tuple[int, int] | None = None
    partition_after: int | None = None

    @property
    def lag_ms(self) -> int:
        """The longest a debit takes to reach the other regions."""
        return lag_of(self.interval_ms, self.delay_ms)


class MultiRegion:
    """``regions`` regions enforcing one tenant's quota, each locally, synced with a lag.

    Args:
        quota: each region's quota (a token bucket); with ``regions=1`` the simulation is
            one global bucket.
        regions: how many regions.
        interval_ms: each region publishes its debits every ``interval_ms`` (0: each
            admission at once).
        delay_ms: how long a publication takes to reach the other regions.
        forgive_debt: drop the part of a received debit that does not fit in the bucket
            instead of keeping it as debt (the wrong design: over-admission then grows with
            time; shown by the tests).
        key: the tenant.
        storages: one storage per region (each with ``acquire``, ``peek`` and ``charge``,
            e.g. a :class:`~quotaql.storage.redis.RedisStorage` on each region's own
            redis-server); by default a MemoryStorage each on the virtual clock.
        partition: ``(start, end)`` ms: the regions cannot reach each other then; what is
            published meanwhile is lost.
        partition_after: a region that has heard nothing from another region for this long
            (ms) enforces only its share of the quota (``C/N``, ``r/N``: it debits each cost
            ``N`` times) until it hears again. Regions then publish every interval, even
            nothing, so that silence means a partition. None: never (a partition then lets
            the excess grow with its length).
    """

    def __init__(
        self,
        quota: Quota,
        regions: int = 2,
        *,
        interval_ms: int = 0,
        delay_ms: int = 0,
        forgive_debt: bool = False,
        key: str = "tenant",
        storages: Sequence[Any] | None = None,
        partition: tuple[int, int] | None = None,
        partition_after: int | None = None,
    ) -> None:
        if quota.algorithm != "token_bucket":
            raise ValueError("the simulation models token buckets")
        if regions < 1 or interval_ms < 0 or delay_ms < 0:
            raise ValueError("regions >= 1, interval_ms >= 0 and delay_ms >= 0")
        if partition_after is not None and (
            interval_ms < 1 or partition_after <= lag_of(interval_ms, delay_ms)
        ):
            raise ValueError(
                "partition_after needs publications every interval_ms >= 1 and must be"
                " longer than the lag (interval_ms + delay_ms)"
            )
        self.quota = quota
        self.key = key
        self.sync = Sync(interval_ms, delay_ms, forgive_debt, partition, partition_after)
        self.now = 0
        if storages is not None and len(storages) != regions:
            raise ValueError(f"one storage per region: {len(storages)} for {regions}")
        self.regions: list[Region] = []
        for index in range(regions):
            storage = (
                storages[index] if storages is not None else MemoryStorage(clock=self._seconds)
            )
            region = Region(storage, Limiter(storage, defer_refunds=False))
            region.heard = [0] * regions
            self.regions.append(region)

    @property
    def lag_ms(self) -> int:
        """The longest a debit takes to reach the other regions."""
        return self.sync.lag_ms

    def _seconds(self) -> float:
        return self.now / 1000

    def run(self, traffic: Traffic, ticks: int) -> Run:
        """Drive ``traffic`` for ``ticks`` milliseconds from now; what was admitted."""
        admitted: list[float] = []
        for _ in range(ticks):
            admitted.append(self.step(traffic))
            self.now += 1
        return Run(admitted, [region.admitted for region in self.regions])

    def step(self, traffic: Traffic) -> float:
        """One millisecond: publish, deliver, then each region serves ``traffic`` in turn.

        Returns what the regions admitted in it.
        """
        now = self.now
        sync = self.sync
        if sync.interval_ms and now % sync.interval_ms == 0:
            for index in range(len(self.regions)):
                self._publish(index)
        total = 0.0
        shares = len(self.regions)
        for index, region in enumerate(self.regions):
            self._deliver(region)
            after = sync.partition_after
            cut_off = after is not None and any(
                now - heard > after for other, heard in enumerate(region.heard) if other != index
            )
            region.partitioned = cut_off
            for cost in traffic(now, index):
                debit = cost * shares if cut_off else cost  # its share: C/N, r/N
                decision = region.limiter.acquire(self.key, debit, [self.quota], now=now)
                if not decision.allowed:
                    break
                region.admitted += cost
                region.unpublished += cost
                total += cost
                if not sync.interval_ms:
                    self._publish(index)
                    for other in self.regions:
                        self._deliver(other)  # delay 0: before the next decision
        return total

    def _publish(self, index: int) -> None:
        source = self.regions[index]
        sync = self.sync
        amount, source.unpublished = source.unpublished, 0.0
        if amount == 0 and sync.partition_after is None:
            return  # without partition detection, silence says nothing
        partition = sync.partition
        if partition is not None and partition[0] <= self.now < partition[1]:
            return  # lost: the regions cannot reach each other
        for other, region in enumerate(self.regions):
            if other != index:
                region.inbox.append((self.now + sync.delay_ms, amount, index))

    def _deliver(self, region: Region) -> None:
        inbox = region.inbox
        quota = [self.quota]
        while inbox and inbox[0][0] <= self.now:
            _, amount, source = inbox.popleft()
            region.heard[source] = self.now
            if amount == 0:
                continue
            if self.sync.forgive_debt:  # only what fits: the rest is dropped
                held = max(0.0, region.storage.peek(self.key, quota, now=self.now).remaining)
                region.forgiven += max(0.0, amount - held)
                amount = min(amount, held)
            region.storage.charge(Debit(self.key, amount, quota, self.now))


def lag_of(interval_ms: int, delay_ms: int) -> int:
    """The longest a debit takes to reach the other regions: ``interval_ms + delay_ms``."""
    return interval_ms + delay_ms


def worst_window_excess(admitted: list[float], capacity: float, rate_per_ms: float) -> float:
    """The most that ``admitted`` (per millisecond) exceeds one global token bucket by, over
    any window: ``max over t0 <= t1`` of what was admitted in ``[t0, t1]`` minus
    ``capacity + rate × (t1 - t0)``, what one bucket of that capacity and rate can admit in
    it at most (0 or less: never more than one bucket)."""
    best = -capacity
    lowest = 0.0  # min over t0 <= t1 of (admitted before t0) - rate × t0
    before = 0.0  # admitted before t1
    for t1, amount in enumerate(admitted):
        lowest = min(lowest, before - rate_per_ms * t1)
        before += amount
        best = max(best, before - rate_per_ms * t1 - lowest - capacity)
    return best


def over_admission_bound(
    regions: int,
    capacity: float,
    rate_per_second: float,
    lag_seconds: float,
    region_capacity: float | None = None,
) -> float:
    """The most ``regions`` regions, each enforcing a token bucket of ``region_capacity``
    (``capacity`` by default) and refill ``rate_per_second``, with every debit reaching the
    others within ``lag_seconds``, admit beyond one global bucket of ``capacity``, over any
    window: ``N·C' − C + (N − 1)·r·L`` (``(N − 1)·(C + r·L)`` when ``C' = C``), and
    ``max(0, C' − C)`` when ``L = 0``. See ``docs/scale-out.md`` for the derivation."""
    share = capacity if region_capacity is None else region_capacity
    if lag_seconds <= 0 or regions == 1:
        return max(0.0, share - capacity)
    return regions * share - capacity + (regions - 1) * rate_per_second * lag_seconds
