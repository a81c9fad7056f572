"""Past ``max_keys``, the memory storages' overflow is shared by network, not by everyone.

A flood of client addresses fills the table (every state still matters: nothing to drop);
a new subject then gets no state of its own. When every new subject shared one overflow
state per quota, a flood from one network drained it and every new client anywhere was
refused (issue 22: a new honest client ran 0 of 5). Now a new address subject shares a
state with its IPv4 /24 or IPv6 /48 only; other subjects (keys, users), and addresses once
the bounded table of network states is full, share one state per quota as the last resort.
Every test runs on a clock that only moves when told.
"""

from __future__ import annotations

import ipaddress
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse
from prometheus_client import CollectorRegistry

from quotaql import MemoryStorage, Quota
from quotaql.config import load_config
from quotaql.config.identity import IdentityConfig
from quotaql.gate import Gate
from quotaql.identity import address_subject
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.storage import Debit, LeaseSpec, MemoryLeases
from quotaql.storage.keys import overflow_network
from tests.storage.test_memory_bounds import Clock

if TYPE_CHECKING:
    from quotaql.config import Config

TENANT = Quota("tenant", capacity=300, refill_per_second=1)
EXPORT = Quota("op:Export", capacity=100, refill_per_second=1)


def flood(storage: MemoryStorage, network: str, count: int, cost: float = 10) -> int:
    """``count`` new addresses of the IPv4 ``network`` (``"198.51.100"``), each debited
    ``cost`` once: how many were admitted."""
    admitted = 0
    for host in range(1, count + 1):
        admitted += storage.acquire(Debit(f"ip:{network}.{host}", cost, [TENANT])).allowed
    return admitted


# -- the network of a subject ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "network"),
    [
        ("ip:198.51.100.7", "198.51.100.0/24"),
        ("ip:2001:db8:1:2::/64", "2001:db8:1::/48"),  # identity's /64 folding
        ("ip:2001:db8:1:2::9", "2001:db8:1::/48"),  # ipv6_prefix = 128
        ("ip:2001:db8::/32", "2001:db8::/32"),  # ipv6_prefix = 32: never widened
        ("key:198.51.100.7", None),  # an API key spelled like an address is no address
        ("user:42", None),
        ("anonymous", None),
        ("ip:localhost", None),  # a server's name for a peer that has no address
        ("ip:", None),
        (None, None),  # the shared scope
    ],
)
def test_the_overflow_network_of_a_subject(subject: str | None, network: str | None) -> None:
    assert overflow_network(subject) == network


def test_every_address_subject_identity_makes_has_its_network() -> None:
    for address in ("203.0.113.9", "2001:db8:1:2::1", "::ffff:203.0.113.9"):
        for prefix in (32, 48, 64, 128):
            subject = address_subject(address, IdentityConfig(ipv6_prefix=prefix))
            network = overflow_network(subject)
            assert network is not None, subject
            parsed = ipaddress.ip_network(network)
            host = ipaddress.ip_network(subject.removeprefix("ip:"), strict=False)
            assert host.subnet_of(parsed)  # type: ignore[arg-type]


# -- rates -----------------------------------------------------------------------------------


def test_a_flood_from_one_network_does_not_lock_out_new_clients_of_other_networks() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=10)
    # 200 addresses of one /24: 10 get states of their own, the other 190 share the /24's.
    assert flood(storage, "198.51.100", 200) == 10 + 300 // 10
    assert storage.overflowing
    assert storage.overflowed == 190
    # A new honest client of another network runs normally: 5 of 5.
    honest = [storage.acquire(Debit("ip:203.0.113.9", 10, [TENANT])) for _ in range(5)]
    assert [decision.allowed for decision in honest] == [True] * 5
    assert honest[-1].remaining == 250
    # A new client of the flooded /24 shares its drained state: refused.
    assert not storage.acquire(Debit("ip:198.51.100.250", 1, [TENANT])).allowed
    # A new subject that is no address (a known key, a user) never shares an address's.
    assert storage.acquire(Debit("key:acme", 10, [TENANT])).remaining == 290
    assert storage.overflowed == 190 + 5 + 1 + 1
    assert storage.overflowed_shared == 1  # only the key: on its quota's last-resort state


def test_ipv6_subjects_overflow_per_48() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=1)
    assert storage.acquire(Debit("ip:203.0.113.9", 1, [TENANT])).allowed  # the table is full
    assert storage.acquire(Debit("ip:2001:db8:1:2::/64", 200, [TENANT])).remaining == 100
    assert storage.acquire(Debit("ip:2001:db8:1:ff::/64", 100, [TENANT])).remaining == 0
    assert not storage.acquire(Debit("ip:2001:db8:1:abcd::/64", 1, [TENANT])).allowed
    assert storage.acquire(Debit("ip:2001:db8:2::/64", 100, [TENANT])).remaining == 200


def test_a_refund_or_peek_of_an_overflowed_address_reads_its_networks_state() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=1)
    assert storage.acquire(Debit("ip:203.0.113.9", 1, [TENANT])).allowed
    assert storage.acquire(Debit("ip:198.51.100.1", 200, [TENANT])).remaining == 100
    storage.refund(Debit("ip:198.51.100.1", 50, [TENANT]))
    assert storage.peek("ip:198.51.100.2", [TENANT]).remaining == 150  # its network's
    assert storage.peek("ip:192.0.2.1", [TENANT]).remaining == 300  # another network: fresh
    assert storage.peek("key:acme", [TENANT]).remaining == 300  # the last resort, untouched


def test_several_quotas_overflow_per_network_too() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=2)
    quotas = [TENANT, EXPORT]
    assert storage.acquire(Debit("ip:203.0.113.9", 0, quotas, amounts=[1, 1])).allowed
    flooded = [
        storage.acquire(Debit(f"ip:198.51.100.{host}", 0, quotas, amounts=[10, 20])).allowed
        for host in range(1, 11)
    ]
    assert flooded == [True] * 5 + [False] * 5  # the /24's Export state: 100 / 20
    new = storage.acquire(Debit("ip:192.0.2.1", 0, quotas, amounts=[10, 20]))
    assert [status.remaining for status in new.quotas] == [290, 80]


def test_the_network_states_are_bounded_and_then_share_one_state_per_quota() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock, max_keys=1, max_networks=4)
    assert storage.acquire(Debit("key:acme", 1, [TENANT])).allowed  # the table is full
    for network in range(10):  # 10 networks: 4 get a state, 6 share the last resort
        storage.acquire(Debit(f"ip:10.0.{network}.1", 100, [TENANT]))
    assert len(storage._networks) == 4
    assert (storage.overflowed, storage.overflowed_shared) == (10, 6)
    assert storage.peek("ip:10.0.9.1", [TENANT]).remaining == 0  # 3 of 6 admitted there
    assert storage.peek("ip:10.0.0.1", [TENANT]).remaining == 200
    # Refilled network states make room for new networks again.
    clock.advance(100)
    assert storage.acquire(Debit("ip:10.0.20.1", 10, [TENANT])).remaining == 290
    assert len(storage._networks) <= 4
    assert storage.overflowed_shared == 6
    storage.clear()
    assert len(storage) == 0


def test_max_networks_is_checked() -> None:
    with pytest.raises(Exception, match="max_networks must be a positive integer"):
        MemoryStorage(max_networks=0)


# -- concurrency leases ----------------------------------------------------------------------


def test_lease_sets_overflow_per_network_too() -> None:
    leases = MemoryLeases(clock=Clock(), max_keys=2)
    spec = LeaseSpec("tier", maximum=3)
    for index, subject in enumerate(("ip:203.0.113.9", "key:acme")):  # the table is full
        assert leases.take(subject, [spec], f"own-{index}", ttl_ms=30_000).taken
    # Clients of one /24 that never release: 3 leases for the whole network.
    taken = [
        leases.take(f"ip:198.51.100.{host}", [spec], f"flood-{host}", ttl_ms=30_000).taken
        for host in range(1, 21)
    ]
    assert taken == [True] * 3 + [False] * 17
    # A new client of another network still runs; one of the flooded /24 does not.
    assert leases.take("ip:192.0.2.7", [spec], "honest", ttl_ms=30_000).taken
    assert not leases.take("ip:198.51.100.99", [spec], "late", ttl_ms=30_000).taken
    assert leases.take("user:42", [spec], "user", ttl_ms=30_000).taken  # the last resort
    assert (leases.overflowed, leases.overflowed_shared) == (20 + 1 + 1 + 1, 1)
    # Its lease lives in its network's set: counted, renewed, released there.
    assert leases.count("ip:198.51.100.1", "tier") == 3
    assert leases.renew("ip:198.51.100.1", ["tier"], ["flood-1"], ttl_ms=30_000) == 1
    assert leases.release("ip:198.51.100.1", ["tier"], "flood-1") == 1
    assert leases.take("ip:198.51.100.99", [spec], "late", ttl_ms=30_000).taken
    assert leases.count("ip:192.0.2.7", "tier") == 1


def test_lease_network_sets_are_bounded() -> None:
    leases = MemoryLeases(clock=Clock(), max_keys=1, max_networks=2)
    spec = LeaseSpec("tier", maximum=1)
    assert leases.take("key:acme", [spec], "own", ttl_ms=30_000).taken
    results = [
        leases.take(f"ip:10.0.{network}.1", [spec], f"l{network}", ttl_ms=30_000).taken
        for network in range(5)
    ]
    assert results == [True, True, True, False, False]  # 2 network sets, then one shared
    assert len(leases._networks) == 2
    assert leases.overflowed_shared == 3


# -- what an operator sees -------------------------------------------------------------------


def overflows(registry: CollectorRegistry, store: str, scope: str) -> float | None:
    labels = {names.LABEL_STORE: store, names.LABEL_SCOPE: scope}
    return registry.get_sample_value(names.OVERFLOW_TOTAL, labels)


def test_overflow_decisions_are_counted_by_store_and_scope() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    for store in names.OVERFLOW_STORES:  # every series from 0: increase() sees the first
        for scope in names.OVERFLOW_SCOPES:
            assert overflows(registry, store, scope) == 0
    storage = MemoryStorage(clock=Clock(), max_keys=1)
    leases = MemoryLeases(clock=Clock(), max_keys=1)
    metrics.watch_overflow(storage, names.STORE_STATES)
    metrics.watch_overflow(leases, names.STORE_LEASES)
    flood(storage, "198.51.100", 5)
    storage.acquire(Debit("key:acme", 1, [TENANT]))
    spec = LeaseSpec("tier", maximum=10)
    for host in range(1, 4):
        leases.take(f"ip:198.51.100.{host}", [spec], f"l{host}", ttl_ms=30_000)
    assert overflows(registry, names.STORE_STATES, names.OVERFLOW_NETWORK) == 4
    assert overflows(registry, names.STORE_STATES, names.OVERFLOW_QUOTA) == 1
    assert overflows(registry, names.STORE_LEASES, names.OVERFLOW_NETWORK) == 2
    assert overflows(registry, names.STORE_LEASES, names.OVERFLOW_QUOTA) == 0
    storage.acquire(Debit("user:7", 1, [TENANT]))
    assert overflows(registry, names.STORE_STATES, names.OVERFLOW_QUOTA) == 2  # read anew


def test_the_gate_counts_its_storages_fallbacks_and_lease_sets_overflows() -> None:
    # No time quota: one state per subject, the points' (the time quota's would be a second).
    toml = "[limits]\ntime = false\n[tiers.free]\ncapacity = 100\nrefill_per_second = 1\nmax_in_flight = 2\n"
    registry = CollectorRegistry()
    leases = MemoryLeases(max_keys=1)
    gate = Gate(
        load_config_text(toml),
        storage=MemoryStorage(max_keys=1),
        leases=leases,
        metrics=PrometheusMetrics(registry),
    )
    schema = build_schema("type Query { hello: String }")
    ops = [
        gate.admit(schema, parse("{ hello }"), request=request(f"198.51.100.{host}"))
        for host in range(1, 5)
    ]
    # The first address has sets of its own; the next share the /24's, of 2 leases.
    assert [op.refused for op in ops] == [False, False, False, True]
    assert overflows(registry, names.STORE_STATES, names.OVERFLOW_NETWORK) == 2
    assert overflows(registry, names.STORE_LEASES, names.OVERFLOW_NETWORK) == 3
    fallback = gate.limiter.core.fallback
    fallback.acquire(Debit("ip:192.0.2.1", 1, [TENANT]))  # as an outage would
    fallback._max_keys = 1
    fallback.acquire(Debit("ip:192.0.2.2", 1, [TENANT]))
    assert overflows(registry, names.STORE_STATES, names.OVERFLOW_NETWORK) == 3
    for op in ops:
        gate.finish(op)


def request(peer: str) -> dict[str, Any]:
    return {"type": "http", "client": (peer, 50000), "headers": []}


def load_config_text(text: str) -> Config:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "quotaql.toml"
        path.write_text(text, encoding="utf-8")
        return load_config(path)
