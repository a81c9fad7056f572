"""Sharded shared quotas (``[global] shards = N``): N buckets of C/N and r/N on N hash tags,
a subject on its home shard and its second one at most, refunds and overages on the shard
debited, shards remembered empty spared; the over-admission against one exact bucket
measured against the bound docs/scale-out.md writes, and one subject hammering.

In process, on the real ``MemoryStorage`` behind the real ``Limiter`` (it shards as the
Redis storages do: the flows choose the shard), with explicit ``now=`` where time matters.
The Redis Cluster side is tests/storage/test_shards_cluster.py.
"""

from __future__ import annotations

import random
import textwrap
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
from prometheus_client import CollectorRegistry
from redis.crc import key_slot

from quotaql import Limiter, MemoryStorage, Quota
from quotaql.config import load_config
from quotaql.errors import ConfigError
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.limiter.shards import RetriedStatus, SparedStatus, homes
from quotaql.simulation import worst_window_excess
from quotaql.storage.base import Debit
from quotaql.storage.keys import CLUSTER_SLOTS, ShardKey, shard_key, tenant_part
from quotaql.storage.redis import redis_key

if TYPE_CHECKING:
    from pathlib import Path

C, R, N = 300.0, 30.0, 3  # the shared quota: capacity, refill per second, shards
GLOBAL = Quota("global", capacity=C, refill_per_second=R, shared=True, shards=N)
TENANT = Quota("tenant", capacity=10_000, refill_per_second=1_000)
SHARD = Quota("global", capacity=C / N, refill_per_second=R / N, shared=True)  # one shard


def subject_on(home: int, second: int | None = None, prefix: str = "s") -> str:
    """A subject key whose home shard is ``home`` (and second ``second``)."""
    for i in range(10_000):
        key = f"{prefix}{i}"
        h, o = homes(key, N)
        if h == home and (second is None or o == second):
            return key
    raise AssertionError("no such subject")


def total_calls(registry: CollectorRegistry, outcome: str) -> float:
    """``quotaql_shard_calls_total`` of ``outcome``, over every shard."""
    return sum(
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == names.SHARD_CALLS_TOTAL and sample.labels["outcome"] == outcome
    )


def left(storage: MemoryStorage, shard: int, now: int) -> float:
    """What shard ``shard`` holds at ``now``."""
    return storage.peek(shard_key(shard, N), [SHARD], now).remaining


def test_shard_tags_land_on_their_third_of_the_slots() -> None:
    # A 3-master cluster's default split: 0-5460, 5461-10922, 10923-16383.
    split = [(0, 5460), (5461, 10922), (10923, 16383)]
    for shards in (2, 3, 4, 6, 8, 64):
        for i in range(shards):
            key = redis_key("quotaql", shard_key(i, shards), SHARD)
            slot = key_slot(key.encode())
            assert i * CLUSTER_SLOTS / shards < slot < (i + 1) * CLUSTER_SLOTS / shards
    masters = {
        next(
            m
            for m, (lo, hi) in enumerate(split)
            if lo <= key_slot(f"{{{shard_key(i, 3)}}}".encode()) <= hi
        )
        for i in range(3)
    }
    assert masters == {0, 1, 2}
    # N = 1 is the one tag of today; a tenant can never name a shard's state.
    assert redis_key("quotaql", None, GLOBAL) == "quotaql:{global}:~q"
    tag = str(shard_key(1, 3))
    assert redis_key("quotaql", tag, TENANT) == f"quotaql:{{t:{tag}}}:~q"
    assert tenant_part(tag) != tenant_part(ShardKey(tag)) != tenant_part(None)


def test_subjects_spread_over_the_shards_stably() -> None:
    counts = Counter(homes(f"key:{i}", N)[0] for i in range(3000))
    assert all(900 < counts[shard] < 1100 for shard in range(N)), counts
    assert all(homes(f"key:{i}", N) == homes(f"key:{i}", N) for i in range(100))
    assert all(home != second for home, second in (homes(f"k{i}", N) for i in range(1000)))
    seconds = Counter(homes(f"k{i}", N) for i in range(3000) if homes(f"k{i}", N)[0] == 0)
    assert set(seconds) == {(0, 1), (0, 2)}  # a drained shard's subjects go different ways


def test_a_refused_home_shard_is_tried_once_on_the_second_and_refunded_there() -> None:
    storage = MemoryStorage()
    limiter = Limiter(storage, defer_refunds=False)
    subject = subject_on(0, 1)
    storage.acquire(Debit(shard_key(0, N), C / N, [SHARD], 0))  # home drained
    decision = limiter.acquire(subject, 10, [TENANT, GLOBAL], now=0)
    assert decision.allowed
    assert decision.quotas[1].__class__ is RetriedStatus
    assert (left(storage, 0, 0), left(storage, 1, 0), left(storage, 2, 0)) == (0, 90, 100)
    limiter.refund(subject, 10, [TENANT, GLOBAL], decision=decision, now=0)
    assert (left(storage, 0, 0), left(storage, 1, 0)) == (0, 100)  # back where it was taken
    limiter.charge(subject, 5, [TENANT, GLOBAL], decision=decision, now=0)
    assert (left(storage, 0, 0), left(storage, 1, 0)) == (0, 95)  # the overage too
    # Its home shard allowing again, a decision goes there (and its refund too).
    allowed = limiter.acquire(subject, 10, [TENANT, GLOBAL], now=4_000)  # 40 refilled
    assert allowed.quotas[1].__class__ is not RetriedStatus
    limiter.refund(subject, 10, [TENANT, GLOBAL], decision=allowed, now=4_000)
    assert left(storage, 0, 4_000) == 40
    # Both drained: refused after two shard calls, the tenant's debit given back.
    storage.acquire(Debit(shard_key(1, N), 100, [SHARD], 4_000))
    storage.acquire(Debit(shard_key(0, N), 40, [SHARD], 4_000))
    refused = limiter.acquire(subject, 10, [TENANT, GLOBAL], now=4_000)
    assert not refused.allowed
    assert refused.limited_by == "global"
    assert refused.quotas[1].__class__ is RetriedStatus  # the second shard's answer


def test_one_shard_is_exactly_the_shared_quota_of_today() -> None:
    one = Quota("global", capacity=C, refill_per_second=R, shared=True)
    assert one == replace(GLOBAL, shards=1)
    storage = MemoryStorage()
    decision = Limiter(storage).acquire("a", 100, [TENANT, one], now=0)
    assert decision.quotas[1] == ("global", C, C - 100, decision.quotas[1].reset_after, 0.0, True)
    assert storage.peek(None, [one], 0).remaining == pytest.approx(C - 100)  # one state


def _drive(subjects: list[str], rate_per_s: float, seconds: int, seed: int = 7) -> list[float]:
    """Cost-1 requests of random ``subjects`` at ``rate_per_s`` (above r) for ``seconds``,
    on a fresh sharded quota: what was admitted, per ms."""
    limiter = Limiter(MemoryStorage())
    rng = random.Random(seed)
    admitted = [0.0] * (seconds * 1000)
    step = 1000 / rate_per_s
    t = 0.0
    while t < len(admitted):
        now = int(t)
        if limiter.acquire(rng.choice(subjects), 1, [GLOBAL], now=now).allowed:
            admitted[now] += 1
        t += step
    return admitted


def test_over_admission_against_one_exact_bucket_is_within_the_written_bound() -> None:
    # docs/scale-out.md: any window of T admits at most C + r·T in all (excess <= 0); with
    # demand on every shard, every shard drains: the run admits C + r·T but for whole units.
    seconds = 10
    admitted = _drive([f"key:{i}" for i in range(300)], 150, seconds)
    excess = worst_window_excess(admitted, C, R / 1000)
    assert excess <= 0
    exact = C + R * seconds  # one bucket, the same greedy demand: 600
    assert exact - N <= sum(admitted) <= exact  # measured: the shards' fractions left


def test_one_subject_hammering_drains_two_shards_at_most() -> None:
    # The attack: a subject asking far above r gets its home and second shard, at most
    # 2·(C/N + r/N·T); the third keeps its share for the subjects on it.
    seconds = 5
    attacker = subject_on(0, 1, "attacker")
    admitted = _drive([attacker], 400, seconds)
    bound = 2 * (C / N + R / N * seconds)  # 300 of the 450 of one bucket
    assert bound - 2 * N <= sum(admitted) <= bound  # whole requests: a unit per shard short
    limiter = Limiter(storage := MemoryStorage())
    for ms in range(0, seconds * 1000, 3):  # 333/s for 5 s, and then a victim on shard 2
        limiter.acquire(attacker, 1, [GLOBAL], now=ms)
    victim = subject_on(2, prefix="victim")
    served = sum(
        limiter.acquire(victim, 1, [GLOBAL], now=seconds * 1000).allowed for _ in range(150)
    )
    assert served == C / N  # its shard whole: the attacker never reached it
    assert left(storage, 0, seconds * 1000) <= 1
    assert left(storage, 1, seconds * 1000) <= 1


def test_a_shard_remembered_empty_is_spared_and_counted() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    storage = MemoryStorage()
    limiter = Limiter(storage, recorder=metrics)
    quota = Quota("global", capacity=3, refill_per_second=0.3, shared=True, shards=N)
    one = Quota("global", capacity=1, refill_per_second=0.1, shared=True)
    now = storage.now()
    subject = subject_on(0, 1)
    for shard in (0, 1):  # both of its shards empty for 10 s
        storage.acquire(Debit(shard_key(shard, N), 1, [one], now))

    def calls(outcome: str, shard: int) -> float:
        labels = {"outcome": outcome, "shard": str(shard)}
        return registry.get_sample_value("quotaql_shard_calls_total", labels) or 0.0

    first = limiter.acquire(subject, 1, [quota])
    assert not first.allowed
    assert (calls("called", 0), calls("retried", 1)) == (1, 1)
    again = limiter.acquire(subject, 1, [quota])  # both remembered: no call at all
    assert not again.allowed
    assert again.limited_by == "global"
    assert again.quotas[0].__class__ is SparedStatus  # the span says: spared
    assert 0 < (again.retry_after or 0) <= 10
    assert (calls("spared", 0), calls("spared", 1)) == (1, 1)
    assert (calls("called", 0), calls("retried", 1)) == (1, 1)
    other = subject_on(0, 2, "other")  # home remembered empty: straight to its second
    assert limiter.acquire(other, 1, [quota]).allowed
    assert (calls("spared", 0), calls("retried", 2), calls("called", 2)) == (2, 1, 0)
    assert total_calls(registry, "called") == 1
    assert len(limiter.core.shard_denials) == 2  # bounded: one entry per shard


def test_config_global_shards(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[global]\ncapacity = 300\nrefill_per_second = 30\nshards = 3\n")
    assert load_config(good).global_quota == GLOBAL
    for value, message in (("0", "from 1 to 64"), ("65", "from 1 to 64"), ('"3"', "a string")):
        bad = tmp_path / "bad.toml"
        bad.write_text(
            textwrap.dedent(f"""\
                [global]
                capacity = 300
                refill_per_second = 30
                shards = {value}
            """)
        )
        with pytest.raises(ConfigError, match=rf"bad.toml:4: global.shards: .*{message}"):
            load_config(bad)
    with pytest.raises(ConfigError, match="shards needs a shared quota"):
        Quota("tenant", capacity=1, refill_per_second=1, shards=2)
    with pytest.raises(ValueError, match="same shards"):
        Limiter(MemoryStorage()).acquire("a", 1, [GLOBAL, replace(GLOBAL, name="g2", shards=2)])


GATE_SCHEMA = """
type Query { products(first: Int = 10): [Product] hello: String }
type Product { id: ID name: String }
"""


def test_the_gate_traces_and_counts_a_sharded_global_quota(tmp_path: Path) -> None:
    # End to end in process: [global] shards = 3 from the file, a subject's second shard and
    # a refusal without a call on the operation's span, the calls in the metric.
    from graphql import build_schema, parse
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from quotaql.gate import Gate

    path = tmp_path / "quotaql.toml"
    path.write_text(
        "[tiers.free]\ncapacity = 100000\nrefill_per_second = 1000\n"
        "[global]\ncapacity = 60\nrefill_per_second = 0.001\nshards = 3\n"
        '[tenants."acme"]\ntier = "free"\n',
        encoding="utf-8",
    )
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gate = Gate(load_config(path), metrics=PrometheusMetrics(registry), tracer_provider=provider)
    assert gate.config.global_quota is not None
    assert gate.config.global_quota.shards == N
    schema, query = build_schema(GATE_SCHEMA), parse("{ products(first: 4) { name } }")
    request = {"type": "http", "client": ("203.0.113.9", 1), "headers": [(b"x-api-key", b"acme")]}
    codes = []
    for _ in range(20):  # 40 of 60 reachable: two shards of 20, then refused
        op = gate.admit(schema, query, request=request)
        gate.finish(op)
        codes.append(op.code)
    assert codes == [None] * 10 + ["RATE_LIMITED"] * 10  # 4 points each: its two shards

    shards = [span.attributes.get(names.ATTR_SHARD) for span in exporter.get_finished_spans()]
    assert shards[:5] == [None] * 5  # its home shard
    assert shards[5:] == ["second"] * 15  # then its second; refused there (the deny cache)
    called = total_calls(registry, "called")
    retried = total_calls(registry, "retried")
    spared = total_calls(registry, "spared")
    assert (called, retried) == (6, 6)  # the 11th asked both; the gate's cache then answers
    assert spared == 5  # the home shard, remembered empty: not asked from the 6th on


def test_a_tenant_named_like_a_shard_never_reaches_its_state() -> None:
    # The attack: a subject whose key spells a shard's tag, with a quota of the shard's
    # name, drains its own state only (memory keys by class; Redis tags tenants t:/h:).
    storage = MemoryStorage()
    limiter = Limiter(storage)
    own = Quota("global", capacity=C / N, refill_per_second=R / N)  # not shared
    tag = str(shard_key(0, N))
    assert not limiter.acquire(tag, C, [own], now=0).allowed  # more than it holds
    assert limiter.acquire(tag, C / N, [own], now=0).allowed  # drained, its own
    assert left(storage, 0, 0) == C / N
    assert storage.peek(tag, [own], 0).remaining == 0


def test_windows_shard_and_a_cost_above_a_shard_is_too_large() -> None:
    # A window quota: N windows of L/N; a cost above C/N fits no shard (no retry: none would).
    window = Quota(
        "global", limit=30, window_seconds=10, algorithm="fixed_window", shared=True, shards=N
    )
    limiter = Limiter(MemoryStorage())
    subject = subject_on(0, 1)
    admitted = sum(limiter.acquire(subject, 1, [window], now=0).allowed for _ in range(40))
    assert admitted == 2 * 30 / N  # its two windows of 10
    too_large = limiter.acquire("key:x", C / N + 1, [GLOBAL], now=0)
    assert too_large.reason == "exceeds_capacity"
    assert too_large.retry_after is None
    assert too_large.quotas[0].__class__ is not RetriedStatus
