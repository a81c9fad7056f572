"""Parity: the Lua script in Redis and the Python reference decide identically, bit for bit.

A hypothesis state machine drives a :class:`RedisStorage` (its script, with explicit
``now``) and a :class:`MemoryStorage` (the pure functions of ``quotaql.policy``, with the
same ``now``) through the same operations: time moving forward by random milliseconds,
acquires of random costs on random subsets (in random order) of five quotas, one per
algorithm, for three tenants (one of them the shared scope), refunds and peeks. Every
decision must be equal field for field (all but ``source``), floats with ``==``.

Redis expires keys by its real clock while ``now`` is simulated. A nearly full bucket
gets a TTL of a millisecond or two, so Redis would drop it in real time long before the
simulated clock gets there, and the two sides would differ for a reason that has nothing
to do with the math (and that could not happen in production, where ``now`` is the
server's clock too). So each script call runs in MULTI/EXEC followed by a PERSIST of its
keys: atomic, nothing can expire in between, and Redis then never expires anything. The
memory storage still drops each state when its TTL passes in simulated time, so the
machine also checks that a state past its TTL decides exactly like no state at all: the
property that makes expiring keys by TTL safe. (That every key has a correct TTL is
checked in ``test_contract.py``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from quotaql import MemoryStorage, Quota, RedisStorage
from quotaql.storage.base import Debit, check_arguments
from quotaql.storage.redis import _decision, _request

if TYPE_CHECKING:
    from collections.abc import Sequence

    import redis

    from quotaql.policy.quota import Decision

T0 = 1_700_000_000_000  # ms: the scale of a real Redis TIME (float rounding depends on it)
TENANTS = ("acme", "{a} b\0ü", None)
SETTINGS = settings(max_examples=75, stateful_step_count=30, deadline=None)

# Round parameters, and costs in halves: every amount is exactly representable.
ROUND_QUOTAS = (
    Quota("tb", capacity=10, refill_per_second=2),
    Quota("gcra", capacity=8, refill_per_second=4, algorithm="gcra"),
    Quota("log", limit=12, window_seconds=3, algorithm="sliding_log"),
    Quota("ctr", limit=12, window_seconds=2, algorithm="sliding_counter"),
    Quota("fix", limit=9, window_seconds=1.5, algorithm="fixed_window"),
    # Buckets that reserve (leaky buckets as queues): a cost that fits within max_delay is
    # allowed at once and waits its turn; the bucket goes below empty.
    Quota("tbq", capacity=6, refill_per_second=3, max_delay=1.5),
    Quota("gcraq", capacity=5, refill_per_second=2, algorithm="gcra", max_delay=3, max_queued=2),
)
HALVES = st.integers(0, 26).map(lambda n: n / 2)

# Awkward parameters and arbitrary float costs: parity must not depend on round numbers.
ODD_QUOTAS = (
    Quota("tb", capacity=7.3, refill_per_second=2.9),
    Quota("gcra", capacity=6.1, refill_per_second=17.24, algorithm="gcra"),
    Quota("log", limit=13.7, window_seconds=1.7, algorithm="sliding_log"),
    Quota("ctr", limit=11.3, window_seconds=2.3, algorithm="sliding_counter"),
    Quota("fix", limit=9.9, window_seconds=0.7, algorithm="fixed_window"),
    Quota("tbq", capacity=5.7, refill_per_second=3.3, max_delay=0.77, max_queued=3),
    Quota("gcraq", capacity=4.9, refill_per_second=7.1, algorithm="gcra", max_delay=2.3),
)
FLOATS = st.one_of(
    st.floats(0, 15, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 0.1, 0.3, 1 / 3, 5e-324, 6.1, 7.3, 13.7]),
)

STEPS = st.one_of(st.just(0), st.integers(1, 3), st.integers(0, 4000))
# How long before a refund its debit was made (None: a refund of no known debit, "now"):
# within the same window, across one window boundary, or long gone.
DEBIT_AGES = st.one_of(st.none(), st.just(0), st.integers(1, 3), st.integers(0, 12_000))


class TransactionalScript:
    """The storage's own script and codecs, each call in MULTI/EXEC with a PERSIST of its keys.

    Mirrors :class:`RedisStorage`'s ``acquire``/``refund``/``peek`` (validation, the request
    encoding, the decision decoding); only the call is wrapped (see the module docstring).
    """

    def __init__(self, storage: RedisStorage) -> None:
        self.storage = storage

    def _call(self, mode: str, debit: Debit) -> Any:
        prefix = self.storage.prefix
        keys, args = _request(prefix, mode, debit)
        pipe = self.storage.client.pipeline(transaction=True)
        self.storage.script_for(debit.quotas)(keys=keys, args=args, client=pipe)
        for key in keys:
            pipe.persist(key)
        return pipe.execute()[0]

    def acquire(self, debit: Debit) -> Decision:
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        raw = self._call("acquire", debit)
        return _decision(raw, debit.quotas, debit.amount, debit.amounts)

    def refund(self, debit: Debit) -> None:
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        amount, quotas, amounts = debit.amount, debit.quotas, debit.amounts
        if quotas and (amount > 0 if amounts is None else any(amounts)):
            self._call("refund", debit)

    def charge(self, debit: Debit) -> None:
        check_arguments(debit.amount, debit.quotas, debit.amounts)
        amount, quotas, amounts = debit.amount, debit.quotas, debit.amounts
        if quotas and (amount > 0 if amounts is None else any(amounts)):
            self._call("charge", debit)

    def peek(self, tenant: str | None, quotas: Sequence[Quota], now: int) -> Decision:
        check_arguments(0, quotas)
        return _decision(self._call("peek", Debit(tenant, 0, quotas, now)), quotas, 0.0)


def same(lua: Decision, python: Decision) -> bool:
    return lua._replace(source=python.source) == python


def parity_machine(
    redis_client: redis.Redis, quotas: tuple[Quota, ...], costs: st.SearchStrategy[float]
) -> type[RuleBasedStateMachine]:
    subsets = st.lists(st.sampled_from(quotas), min_size=1, max_size=len(quotas), unique=True)
    tenants = st.sampled_from(TENANTS)

    class Parity(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            redis_client.flushall()
            self.storage = RedisStorage(redis_client, timeout=5.0)
            self.lua = TransactionalScript(self.storage)
            self.python = MemoryStorage(clock=lambda: T0 / 1000)
            self.now = T0
            self.log: list[str] = []

        def teardown(self) -> None:
            self.storage.close()

        def _explain(self, lua: object, python: object) -> str:
            history = "\n  ".join(self.log)
            return f"after:\n  {history}\nlua:    {lua}\npython: {python}"

        @rule(ms=STEPS)
        def advance(self, ms: int) -> None:
            self.now += ms
            self.log.append(f"now = T0 + {self.now - T0}")

        @rule(tenant=tenants, cost=costs, chosen=subsets)
        def acquire(self, tenant: str | None, cost: float, chosen: list[Quota]) -> None:
            self.log.append(f"acquire({tenant!r}, {cost!r}, {[q.name for q in chosen]})")
            lua = self.lua.acquire(Debit(tenant, cost, chosen, self.now))
            python = self.python.acquire(Debit(tenant, cost, chosen, self.now))
            assert same(lua, python), self._explain(lua, python)

        @rule(tenant=tenants, chosen=subsets, data=st.data())
        def acquire_each_its_own(
            self, tenant: str | None, chosen: list[Quota], data: st.DataObject
        ) -> None:
            # Root-field quotas: one amount per quota in the same all-or-nothing call.
            each = data.draw(st.lists(costs, min_size=len(chosen), max_size=len(chosen)))
            self.log.append(f"acquire({tenant!r}, costs={each!r}, {[q.name for q in chosen]})")
            lua = self.lua.acquire(Debit(tenant, each[0], chosen, self.now, each))
            python = self.python.acquire(Debit(tenant, each[0], chosen, self.now, each))
            assert same(lua, python), self._explain(lua, python)

        def _at(self, back: int | None) -> int | None:
            """The time of the debit a refund gives back: ``back`` ms ago (None: now)."""
            return None if back is None else self.now - back

        @rule(tenant=tenants, chosen=subsets, data=st.data(), back=DEBIT_AGES)
        def refund_each_its_own(
            self, tenant: str | None, chosen: list[Quota], data: st.DataObject, back: int | None
        ) -> None:
            each = data.draw(st.lists(costs, min_size=len(chosen), max_size=len(chosen)))
            at = self._at(back)
            names = [q.name for q in chosen]
            self.log.append(f"refund({tenant!r}, amounts={each!r}, {names}, at={at})")
            self.lua.refund(Debit(tenant, each[0], chosen, self.now, each, at))
            self.python.refund(Debit(tenant, each[0], chosen, self.now, each, at))

        @rule(tenant=tenants, amount=costs, chosen=subsets, back=DEBIT_AGES)
        def refund(
            self, tenant: str | None, amount: float, chosen: list[Quota], back: int | None
        ) -> None:
            at = self._at(back)
            self.log.append(f"refund({tenant!r}, {amount!r}, {[q.name for q in chosen]}, at={at})")
            self.lua.refund(Debit(tenant, amount, chosen, self.now, None, at))
            self.python.refund(Debit(tenant, amount, chosen, self.now, None, at))

        @rule(tenant=tenants, amount=costs, chosen=subsets)
        def charge(self, tenant: str | None, amount: float, chosen: list[Quota]) -> None:
            # Another region's admissions: debited whether they fit or not.
            self.log.append(f"charge({tenant!r}, {amount!r}, {[q.name for q in chosen]})")
            self.lua.charge(Debit(tenant, amount, chosen, self.now))
            self.python.charge(Debit(tenant, amount, chosen, self.now))

        @rule(tenant=tenants, chosen=subsets)
        def peek(self, tenant: str | None, chosen: list[Quota]) -> None:
            lua = self.lua.peek(tenant, chosen, self.now)
            python = self.python.peek(tenant, chosen, self.now)
            assert same(lua, python), self._explain(lua, python)

        @invariant()
        def every_quota_of_every_tenant_agrees(self) -> None:
            for tenant in TENANTS:
                lua = self.lua.peek(tenant, quotas, self.now)
                python = self.python.peek(tenant, quotas, self.now)
                assert same(lua, python), self._explain(lua, python)

    return Parity


def test_lua_and_python_decide_alike_with_round_numbers(redis_client: redis.Redis) -> None:
    run_state_machine_as_test(parity_machine(redis_client, ROUND_QUOTAS, HALVES), settings=SETTINGS)


def test_lua_and_python_decide_alike_to_the_last_bit_with_arbitrary_floats(
    redis_client: redis.Redis,
) -> None:
    run_state_machine_as_test(parity_machine(redis_client, ODD_QUOTAS, FLOATS), settings=SETTINGS)


@pytest.mark.parametrize("q", ODD_QUOTAS, ids=lambda q: q.algorithm)
def test_lua_and_python_decide_alike_when_the_clock_goes_back(
    redis_client: redis.Redis, q: Quota
) -> None:
    # Redis TIME can step back (NTP, a failover to a replica with another clock); the
    # memory storage's clock is monotonic, but both run the same math and must agree.
    storage = RedisStorage(redis_client, timeout=5.0)
    python = MemoryStorage(clock=lambda: T0 / 1000)
    try:
        script = [
            ("acquire", 2.5, T0 + 1_000),
            ("acquire", 2, T0 + 1_600),
            ("acquire", 1.5, T0 + 200),  # back in time
            ("acquire", 1, T0 + 1_700),
            ("refund", 0.5, T0 + 1_800),
            ("acquire", 2, T0 + 2_500),
            ("acquire", 3, T0 + 3_400),
        ]
        for step, (op, amount, now) in enumerate(script):
            if op == "refund":
                storage.refund(Debit("acme", amount, [q], now))
                python.refund(Debit("acme", amount, [q], now))
                continue
            lua = storage.acquire(Debit("acme", amount, [q], now))
            expected = python.acquire(Debit("acme", amount, [q], now))
            assert same(lua, expected), (
                f"step {step} ({op} {amount} at T0+{now - T0}):\n{lua}\n{expected}"
            )
            lua, expected = storage.peek("acme", [q], now), python.peek("acme", [q], now)
            assert same(lua, expected), f"peek after step {step}:\n{lua}\n{expected}"
    finally:
        storage.close()
