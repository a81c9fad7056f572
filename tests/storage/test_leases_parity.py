"""Parity: leases.lua in Redis and MemoryLeases answer every call identically.

A hypothesis state machine drives a :class:`RedisLeases` and a :class:`MemoryLeases` with
the same ``now`` through random sequences: time moving by steps that land on, just before
and just after lease expiries; takes over random subsets (in random order) of three limits
with random maxima and ttls, for three tenants (one hostile, one the shared scope), with
deterministic lease ids drawn from a small pool (so that ids are taken again, released
twice, renewed after expiry); releases, renews of several ids, counts. Every answer must be
equal, and every set's count too after each step. A rule moves time onto a lease's expiry
(or a millisecond either side), where live and expired meet.

Redis expires keys by its real clock while ``now`` is simulated: every ttl here is at least
60 s, so a key's real TTL (raised to the longest ttl given to it) outlives any example, and
expiry is only ever decided by the scores, as in production.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from quotaql.storage import LeaseSpec, MemoryLeases, RedisLeases, RedisStorage

if TYPE_CHECKING:
    import redis

T0 = 1_700_000_000_000
TTLS = (60_000, 60_001, 90_000)
TENANTS = ("acme", "{a} b\0ü", None)
NAMES = ("tier", "field:Query.search", "subscriptions")
LEASES = ("op-0", "op-1", "op-2", "op-3", "op-4", "a b {x}", "ключ\n")
SETTINGS = settings(max_examples=60, stateful_step_count=40, deadline=None)
STEPS = st.one_of(
    st.just(0),
    st.integers(1, 3),
    st.sampled_from([59_999, 60_000, 60_001, 90_000]),
    st.integers(0, 130_000),
)


def test_memory_and_redis_leases_answer_alike(redis_client: redis.Redis) -> None:
    storage = RedisStorage(redis_client, timeout=5.0)

    class Machine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            redis_client.flushall()
            self.redis = RedisLeases(storage)
            self.memory = MemoryLeases(clock=lambda: 0.0)
            self.now = T0

        @rule(ms=STEPS)
        def advance(self, ms: int) -> None:
            self.now += ms

        @rule(which=st.integers(0, 20), offset=st.sampled_from([-1, 0, 0, 1]))
        def jump_to_an_expiry(self, which: int, offset: int) -> None:
            # Onto a lease's expiry (or next to it), where live and expired meet.
            expiries = sorted(
                {
                    expiry
                    for lease_set in self.memory._sets.values()
                    for expiry in lease_set.members.values()
                    if expiry + offset > self.now
                }
            )
            if expiries:
                self.now = expiries[which % len(expiries)] + offset

        @rule(
            tenant=st.sampled_from(TENANTS),
            names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
            maxima=st.lists(st.integers(1, 3), min_size=3, max_size=3),
            lease=st.sampled_from(LEASES),
            ttl=st.sampled_from(TTLS),
        )
        def take(
            self, tenant: str | None, names: list[str], maxima: list[int], lease: str, ttl: int
        ) -> None:
            specs = [LeaseSpec(name, maximum) for name, maximum in zip(names, maxima, strict=False)]
            lua = self.redis.take(tenant, specs, lease, ttl, self.now)
            python = self.memory.take(tenant, specs, lease, ttl, self.now)
            assert lua == python

        @rule(
            tenant=st.sampled_from(TENANTS),
            names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
            lease=st.sampled_from(LEASES),
        )
        def release(self, tenant: str | None, names: list[str], lease: str) -> None:
            lua = self.redis.release(tenant, names, lease, self.now)
            assert lua == self.memory.release(tenant, names, lease, self.now)

        @rule(
            tenant=st.sampled_from(TENANTS),
            names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
            leases=st.lists(st.sampled_from(LEASES), max_size=5),
            ttl=st.sampled_from(TTLS),
        )
        def renew(self, tenant: str | None, names: list[str], leases: list[str], ttl: int) -> None:
            lua = self.redis.renew(tenant, names, leases, ttl, self.now)
            assert lua == self.memory.renew(tenant, names, leases, ttl, self.now)

        @invariant()
        def every_set_counts_alike(self) -> None:
            for tenant in TENANTS:
                for name in NAMES:
                    lua = self.redis.count(tenant, name, self.now)
                    assert lua == self.memory.count(tenant, name, self.now), (tenant, name)

    try:
        run_state_machine_as_test(Machine, settings=SETTINGS)
    finally:
        storage.close()
