"""Multi-region enforcement (docs/scale-out.md): two or three regions, each deciding on its
own MemoryStorage through the real Limiter and token-bucket reference, each debiting the
others' admissions after a lag; over-admission measured against one global bucket."""

from __future__ import annotations

import random

import pytest

from quotaql import Quota
from quotaql.simulation import MultiRegion, greedy, over_admission_bound, worst_window_excess

C = 100.0  # capacity
R = 10.0  # refill per second
TICKS = 20_000  # 20 s of virtual time
QUOTA = Quota("tenant", capacity=C, refill_per_second=R)
# (interval_ms, delay_ms): lag L = interval + delay
LAGS = [(0, 0), (1, 0), (0, 1), (100, 0), (0, 250), (500, 500), (2000, 1000)]
TIGHT = 0.99  # the worst case reaches this share of the bound (unit costs: a whole token short)


def measure(quota: Quota, regions: int, interval: int, delay: int, traffic=None):
    sim = MultiRegion(quota, regions, interval_ms=interval, delay_ms=delay)
    run = sim.run(traffic or greedy(1.0, int(C)), ticks=TICKS)
    return sim, run, worst_window_excess(run.admitted, C, R / 1000)


def test_one_bucket_admits_what_a_token_bucket_allows():
    # The reference the regions are measured against: the same client on one global bucket.
    _, run, excess = measure(QUOTA, 1, 0, 0)
    assert excess <= 1e-9
    assert run.total == int(C + R * (TICKS - 1) / 1000)  # 299: C + r·T, whole requests


@pytest.mark.parametrize("regions", [2, 3])
@pytest.mark.parametrize(("interval", "delay"), LAGS)
def test_over_admission_stays_within_the_bound_and_reaches_it(regions, interval, delay):
    sim, _, excess = measure(QUOTA, regions, interval, delay)
    bound = over_admission_bound(regions, C, R, sim.lag_ms / 1000)
    assert bound == (0.0 if sim.lag_ms == 0 else (regions - 1) * (C + R * sim.lag_ms / 1000))
    assert excess <= bound + 1e-6
    if sim.lag_ms == 0:
        assert excess <= 1e-9  # synchronous: exactly one global bucket
    else:
        assert excess >= TIGHT * bound  # the bound is what an adversary gets


def test_two_regions_one_second_lag_figures():
    # The worked example of docs/scale-out.md: C = 100, r = 10/s, L = 1 s.
    _, run, excess = measure(QUOTA, 2, 500, 500)
    assert over_admission_bound(2, C, R, 1.0) == 110.0
    assert excess == pytest.approx(109.0)
    # The burst is paid back: over the whole 20 s the regions admitted one more than the
    # global bucket (299), both regions alike.
    assert run.total == 300.0
    assert run.by_region == [150.0, 150.0]


@pytest.mark.parametrize("regions", [2, 3])
@pytest.mark.parametrize(("interval", "delay"), [(0, 0), (100, 0), (500, 500)])
def test_capacity_shares_leave_only_the_refill_in_flight(regions, interval, delay):
    share = Quota("tenant", capacity=C / regions, refill_per_second=R)
    sim, _, excess = measure(share, regions, interval, delay)
    bound = over_admission_bound(regions, C, R, sim.lag_ms / 1000, region_capacity=C / regions)
    assert bound == pytest.approx((regions - 1) * R * sim.lag_ms / 1000)
    assert excess <= bound + 1e-6
    if sim.lag_ms:  # within one whole request per other region (unit costs)
        assert excess >= bound - (regions - 1) * 1.0


def test_forgiving_debt_breaks_the_bound():
    # Debits that do not fit must stay as debt: dropping them lets the excess grow with time.
    sim = MultiRegion(QUOTA, 2, interval_ms=500, delay_ms=500, forgive_debt=True)
    run = sim.run(greedy(1.0, int(C)), ticks=TICKS)
    excess = worst_window_excess(run.admitted, C, R / 1000)
    assert excess > 2 * over_admission_bound(2, C, R, 1.0)
    assert sum(region.forgiven for region in sim.regions) > 0


def random_traffic(seed: int):
    rng = random.Random(seed)
    costs = [1.0, 5.0, 30.0, C]

    def traffic(now: int, region: int):
        if rng.random() < 0.02:
            return [rng.choice(costs) for _ in range(rng.randint(1, 5))]
        return ()

    return traffic


def test_random_bursts_of_any_cost_up_to_capacity_stay_within_the_bound():
    bound = over_admission_bound(2, C, R, 0.5)
    worst = max(measure(QUOTA, 2, 200, 300, random_traffic(seed))[2] for seed in range(10))
    assert worst <= bound + 1e-6
    assert worst >= 0.9 * bound


def test_the_simulation_refuses_what_it_does_not_model():
    with pytest.raises(ValueError, match="token buckets"):
        MultiRegion(Quota("w", limit=10, window_seconds=1, algorithm="fixed_window"))
    with pytest.raises(ValueError, match="regions"):
        MultiRegion(QUOTA, 0)


def test_two_regions_each_on_its_own_redis_stay_within_the_bound() -> None:
    """The same adversary, each region deciding in its own real redis-server through the Lua
    scripts, the other region's admissions applied with the storage's charge (a debit past
    empty): the bound holds on the Lua path too, and is reached."""
    from quotaql import RedisStorage
    from tests.support.servers import RedisServer

    servers = [RedisServer().start(), RedisServer().start()]
    storages = []
    try:
        for server in servers:
            with server.client() as client:
                storages.append(RedisStorage(client, timeout=5.0))
        sim = MultiRegion(QUOTA, 2, interval_ms=500, delay_ms=500, storages=storages)
        run = sim.run(greedy(1.0, int(C)), ticks=6_000)
        excess = worst_window_excess(run.admitted, C, R / 1000)
        bound = over_admission_bound(2, C, R, 1.0)
        assert 0.9 * bound <= excess <= bound + 1e-6
        # The same run on the Python reference admits exactly the same.
        reference = MultiRegion(QUOTA, 2, interval_ms=500, delay_ms=500)
        assert reference.run(greedy(1.0, int(C)), ticks=6_000).admitted == run.admitted
    finally:
        for storage in storages:
            storage.close()
        for server in servers:
            server.stop()


def test_a_region_count_and_its_storages_must_agree() -> None:
    with pytest.raises(ValueError, match="one storage per region"):
        MultiRegion(QUOTA, 2, storages=[object()])


PARTITION = (20_000, 60_000)  # 40 s in which no publication gets through


def partitioned(regions: int, after: int | None, partition: tuple[int, int] = PARTITION):
    sim = MultiRegion(
        QUOTA, regions, interval_ms=500, delay_ms=500, partition=partition, partition_after=after
    )
    run = sim.run(greedy(1.0, int(C)), ticks=partition[1] + 20_000)
    return sim, worst_window_excess(run.admitted, C, R / 1000)


@pytest.mark.parametrize("regions", [2, 3])
def test_without_detection_a_partition_lets_the_excess_grow_with_its_length(regions):
    _, short = partitioned(regions, None, (20_000, 40_000))
    _, long = partitioned(regions, None, PARTITION)
    bound = over_admission_bound(regions, C, R, 1.0)
    assert long > short > bound
    assert long > 3 * bound  # r x 40 s per other region on top: unbounded in the partition


@pytest.mark.parametrize("regions", [2, 3])
def test_a_region_that_hears_nothing_enforces_its_share_and_the_bound_holds(regions):
    after = 2_000
    sim, excess = partitioned(regions, after)
    assert excess <= over_admission_bound(regions, C, R, (after + sim.lag_ms) / 1000) + 1e-6
    assert not any(region.partitioned for region in sim.regions)  # healed: full quota again


def test_a_partitioned_region_admits_its_share_meanwhile():
    sim = MultiRegion(
        QUOTA, 2, interval_ms=500, delay_ms=500, partition=(0, 60_000), partition_after=2_000
    )
    run = sim.run(greedy(1.0, int(C)), ticks=60_000)
    assert all(region.partitioned for region in sim.regions)
    # Each region: its own first burst (C) and 2 s at r before it noticed, then r/2.
    for admitted in run.by_region:
        assert admitted <= C + R * 2.0 + (R / 2) * 58.0 + 1


def test_partition_detection_needs_publications_and_a_timeout_longer_than_the_lag():
    with pytest.raises(ValueError, match="partition_after"):
        MultiRegion(QUOTA, 2, interval_ms=0, partition_after=1_000)
    with pytest.raises(ValueError, match="partition_after"):
        MultiRegion(QUOTA, 2, interval_ms=500, delay_ms=500, partition_after=1_000)
