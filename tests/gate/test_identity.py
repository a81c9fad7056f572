"""Who pays: namespaced subjects, known keys, trusted proxies, IPv6 networks, hooks.

Requests here are bare ASGI scopes (what every ASGI server hands an app); the frameworks'
own request objects are covered over real servers in tests/adapters/integrations.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaql.config import load_config
from quotaql.errors import ConfigError
from quotaql.identity import (
    Identity,
    IdentityConfig,
    Subject,
    address_subject,
    client_address,
)
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import StructuredLog

if TYPE_CHECKING:
    from pathlib import Path

TENANTS = {"acme": object(), "203.0.113.9": object()}


def scope(peer: str | None = "203.0.113.9", **headers: str | list[str]) -> dict[str, Any]:
    raw = [
        (name.replace("_", "-").encode(), each.encode())
        for name, value in headers.items()
        for each in (value if isinstance(value, list) else [value])
    ]
    found: dict[str, Any] = {"type": "http", "headers": raw}
    if peer is not None:
        found["client"] = (peer, 50123)
    return found


def subject(request: dict[str, Any], config: IdentityConfig | None = None, **hooks: Any) -> Subject:
    return Identity(**hooks).subject(request, None, config or IdentityConfig(), TENANTS)


# -- namespaces and known keys ------------------------------------------------------------


def test_a_known_key_is_its_tenant_and_an_unknown_key_is_its_address() -> None:
    assert subject(scope(x_api_key="acme")) == Subject("key:acme", "key", tenant="acme")
    rotated = [subject(scope(x_api_key=f"k-{i}")) for i in range(50)]
    assert {s.key for s in rotated} == {"ip:203.0.113.9"}  # 50 new keys, one budget
    assert {s.source for s in rotated} == {"unknown_key"}
    assert subject(scope()).key == "ip:203.0.113.9"


def test_a_key_spelled_like_an_address_never_shares_the_addresses_budget() -> None:
    # "203.0.113.9" is a known key here: its tenant is key:203.0.113.9, not ip:...
    as_key = subject(scope(peer="198.51.100.1", x_api_key="203.0.113.9"))
    as_address = subject(scope(peer="203.0.113.9"))
    assert as_key.key == "key:203.0.113.9"
    assert as_address.key == "ip:203.0.113.9"
    assert as_key.key != as_address.key
    # And unknown, it is its sender's address, not the address it spells.
    config = IdentityConfig()
    unknown = Identity().subject(
        scope(peer="198.51.100.1", x_api_key="203.0.113.77"), None, config, {}
    )
    assert unknown.key == "ip:198.51.100.1"


def test_unknown_keys_can_be_refused_or_taken_as_tenants() -> None:
    reject = subject(scope(x_api_key="nope"), IdentityConfig(unknown_keys="reject"))
    assert (reject.key, reject.source, reject.rejected) == ("ip:203.0.113.9", "rejected_key", True)
    unsafe = subject(scope(x_api_key="nope"), IdentityConfig(unknown_keys="tenant"))
    assert (unsafe.key, unsafe.source, unsafe.tenant) == ("ukey:nope", "unverified_key", None)
    # A known key is never refused.
    assert not subject(scope(x_api_key="acme"), IdentityConfig(unknown_keys="reject")).rejected


def test_the_key_header_is_configurable_and_only_that_header_counts() -> None:
    config = IdentityConfig(api_key_header="Authorization-Key")
    assert subject(scope(authorization_key="acme"), config).key == "key:acme"
    assert subject(scope(x_api_key="acme"), config).key == "ip:203.0.113.9"


def test_a_huge_key_is_not_looked_up_and_counts_as_the_address() -> None:
    calls: list[str] = []

    def resolver(key: str, context: Any) -> str | None:
        calls.append(key)
        return "acme"

    assert subject(scope(x_api_key="k" * 5000), key_resolver=resolver).key == "ip:203.0.113.9"
    assert calls == []


def test_no_key_no_principal_no_address_is_anonymous() -> None:
    assert subject(scope(peer=None)) == Subject("anonymous", "anonymous")
    assert subject(None) == Subject("anonymous", "anonymous")  # type: ignore[arg-type]


# -- the key resolver ---------------------------------------------------------------------


def test_a_key_resolver_maps_keys_to_tenants_and_tenant_names_stop_being_keys() -> None:
    keys = {"sk_live_1": "acme", "sk_live_2": "acme"}  # a rotated key: the same tenant
    resolver = lambda key, context: keys.get(key)  # noqa: E731
    assert subject(scope(x_api_key="sk_live_1"), key_resolver=resolver).key == "key:acme"
    assert subject(scope(x_api_key="sk_live_2"), key_resolver=resolver).key == "key:acme"
    # With a resolver, knowing a tenant's name is not knowing a key.
    assert subject(scope(x_api_key="acme"), key_resolver=resolver).key == "ip:203.0.113.9"
    # Not even where unknown keys are tenants: the key "acme" is not the tenant acme (its
    # budget, its [tenants] tier).
    unverified = subject(
        scope(x_api_key="acme"), IdentityConfig(unknown_keys="tenant"), key_resolver=resolver
    )
    assert (unverified.key, unverified.tenant) == ("ukey:acme", None)


def test_key_resolutions_are_cached_bounded_and_expire() -> None:
    now = [0.0]
    calls: list[str] = []

    def resolver(key: str, context: Any) -> str | None:
        calls.append(key)
        return "acme" if key == "good" else None

    identity = Identity(
        key_resolver=resolver, key_cache_size=3, key_cache_ttl=10, clock=lambda: now[0]
    )
    config = IdentityConfig()
    for _ in range(5):
        identity.subject(scope(x_api_key="good"), None, config, {})
        identity.subject(scope(x_api_key="bad"), None, config, {})  # negative answers too
    assert calls == ["good", "bad"]
    for i in range(10):  # a flood of new keys: one lookup each, the cache stays at 3
        identity.subject(scope(x_api_key=f"flood-{i}"), None, config, {})
    assert len(identity._unknown._entries) == 3
    assert calls[-1] == "flood-9"
    identity.subject(scope(x_api_key="good"), None, config, {})  # never evicted by the flood
    identity.subject(scope(x_api_key="bad"), None, config, {})  # evicted: looked up again
    assert calls[-1] == "bad"
    identity.subject(scope(x_api_key="second"), None, config, {})
    now[0] = 11.0
    identity.subject(scope(x_api_key="flood-9"), None, config, {})  # expired
    assert calls[-1] == "flood-9"


class CountingResolver:
    """``key_resolver``: ``good`` is acme's key (``KNOWN``), any other key unknown."""

    def __init__(self) -> None:
        self.known = {"good": "acme", "other-good": "globex"}
        self.calls: list[str] = []

    def __call__(self, key: str, context: Any) -> str | None:
        self.calls.append(key)
        return self.known.get(key)


def test_an_address_drives_the_resolver_at_most_resolver_rate_lookups_a_second() -> None:
    # A refused address sending invented keys: one lookup each was one database query each.
    now = [0.0]
    resolver = CountingResolver()
    identity = Identity(key_resolver=resolver, clock=lambda: now[0])
    config = IdentityConfig(resolver_rate=2.0, resolver_burst=5)
    found = [
        identity.subject(scope(x_api_key=f"invented-{i}"), None, config, {}) for i in range(300)
    ]
    assert len(resolver.calls) == 5  # the burst, then nothing until it refills
    assert {(s.key, s.source) for s in found[:5]} == {("ip:203.0.113.9", "unknown_key")}
    assert {(s.key, s.source) for s in found[5:]} == {("ip:203.0.113.9", "limited_key")}
    now[0] = 1.0  # two lookups a second
    for i in range(300, 310):
        identity.subject(scope(x_api_key=f"invented-{i}"), None, config, {})
    assert len(resolver.calls) == 7
    # Another address has a budget of its own; an IPv6 client's is its /64's.
    other = identity.subject(scope("198.51.100.7", x_api_key="invented-x"), None, config, {})
    assert (other.source, resolver.calls[-1]) == ("unknown_key", "invented-x")
    for i in range(8):
        identity.subject(scope(f"2001:db8:1:2::{i + 1}", x_api_key=f"v6-{i}"), None, config, {})
    assert sum(key.startswith("v6-") for key in resolver.calls) == 5
    assert identity.lookups == {"known": 0, "unknown": 13, "failed": 0, "limited": 306}


def test_a_network_drives_the_resolver_at_most_eight_times_what_one_address_does() -> None:
    # Each /64 of a /48 (or address of a /24) is an address with a burst of its own: the
    # network's budget bounds them together, and leaves other networks theirs.
    now = [0.0]
    resolver = CountingResolver()
    identity = Identity(key_resolver=resolver, clock=lambda: now[0])
    config = IdentityConfig(resolver_rate=1.0, resolver_burst=2)
    for i in range(200):
        identity.subject(scope(f"2001:db8:1:{i:x}::1", x_api_key=f"v6-{i}"), None, config, {})
        identity.subject(scope(f"198.51.100.{i}", x_api_key=f"v4-{i}"), None, config, {})
    assert sum(key.startswith("v6-") for key in resolver.calls) == 16
    assert sum(key.startswith("v4-") for key in resolver.calls) == 16
    other = identity.subject(scope("2001:db8:2::1", x_api_key="elsewhere"), None, config, {})
    assert (other.source, resolver.calls[-1]) == ("unknown_key", "elsewhere")
    now[0] = 1.0  # the /48 refills 8 lookups a second, however many /64s ask
    for i in range(200, 300):
        identity.subject(scope(f"2001:db8:1:{i:x}::1", x_api_key=f"v6-{i}"), None, config, {})
    assert sum(key.startswith("v6-") for key in resolver.calls) == 24
    # A client limited per /48 (or wider) has one budget: its network's is its own.
    wide = IdentityConfig(resolver_rate=1.0, resolver_burst=2, ipv6_prefix=48)
    for i in range(10):
        identity.subject(scope(f"2001:db8:3:{i:x}::1", x_api_key=f"w-{i}"), None, wide, {})
    assert sum(key.startswith("w-") for key in resolver.calls) == 2


def test_cached_and_once_accepted_keys_never_wait_for_their_addresses_budget() -> None:
    # A NAT: one client floods invented keys, acme's key comes from the same address.
    now = [0.0]
    resolver = CountingResolver()
    identity = Identity(key_resolver=resolver, key_cache_ttl=10, clock=lambda: now[0])
    config = IdentityConfig(resolver_rate=1.0, resolver_burst=3)
    nat = scope("203.0.113.9", x_api_key="good")
    assert identity.subject(nat, None, config, {}).key == "key:acme"
    for i in range(50):
        identity.subject(scope(x_api_key=f"invented-{i}"), None, config, {})
        assert identity.subject(nat, None, config, {}).key == "key:acme"  # cached
    assert resolver.calls.count("good") == 1
    now[0] = 20.0  # acme's cache entry expired; the flood drains the refilled budget again
    for i in range(50, 100):
        identity.subject(scope(x_api_key=f"invented-{i}"), None, config, {})
    assert identity.subject(nat, None, config, {}).key == "key:acme"  # revalidated anyway
    assert resolver.calls.count("good") == 2
    # A key never accepted waits for the address's budget: it counts as the address now,
    # and is its tenant once the budget has a lookup again.
    fresh = scope(x_api_key="other-good")
    assert identity.subject(fresh, None, config, {}).source == "limited_key"
    now[0] = 21.0
    assert identity.subject(fresh, None, config, {}).key == "key:globex"
    # A key revoked since: its lookup says unknown, and it is no longer taken as good.
    del resolver.known["good"]
    now[0] = 40.0
    for i in range(100, 110):
        identity.subject(scope(x_api_key=f"invented-{i}"), None, config, {})
    assert identity.subject(nat, None, config, {}).source == "unknown_key"  # revalidated
    now[0] = 60.0
    for i in range(110, 120):
        identity.subject(scope(x_api_key=f"invented-{i}"), None, config, {})
    assert identity.subject(nat, None, config, {}).source == "limited_key"  # waits now


@pytest.mark.parametrize("unknown_keys", ["address", "reject", "tenant"])
def test_a_key_not_looked_up_counts_as_its_address_whatever_unknown_keys_says(
    unknown_keys: str,
) -> None:
    # Not looked up is not known to be unknown: never a 401, never a tenant of its own.
    identity = Identity(key_resolver=CountingResolver())
    config = IdentityConfig(unknown_keys=unknown_keys, resolver_burst=1)  # type: ignore[arg-type]
    identity.subject(scope(x_api_key="invented-1"), None, config, {})
    found = identity.subject(scope(x_api_key="invented-2"), None, config, {})
    assert (found.key, found.source, found.rejected) == ("ip:203.0.113.9", "limited_key", False)


def test_the_lookup_budgets_are_bounded() -> None:
    identity = Identity(key_resolver=CountingResolver(), key_cache_size=2_000)
    config = IdentityConfig(resolver_burst=1)
    for i in range(3_000):
        identity.subject(scope(f"10.0.{i // 250}.{i % 250}", x_api_key=f"k{i}"), None, config, {})
    assert len(identity._budget._buckets) == 2_000
    # Never a table of a few, even without a cache: addresses taking turns stay limited.
    uncached = Identity(key_resolver=(resolver := CountingResolver()), key_cache_size=0)
    for i in range(100):
        for peer in ("198.51.100.1", "198.51.100.2"):
            uncached.subject(scope(peer, x_api_key=f"{peer}-{i}"), None, config, {})
    assert len(resolver.calls) == 2


def test_a_failing_hook_is_logged_and_counts_as_no_answer(caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: Any) -> str:
        raise RuntimeError("database down")

    caplog.set_level("ERROR", logger=names.LOGGER)
    found = Identity(key_resolver=broken, log=StructuredLog()).subject(
        scope(x_api_key="sk"), None, IdentityConfig(), {}
    )
    assert found.key == "ip:203.0.113.9"
    assert [r.quotaql_event for r in caplog.records] == ["key_resolver_failed"]
    assert "database down" in caplog.records[0].getMessage()


def test_a_lookup_that_fails_is_not_cached_as_an_unknown_key() -> None:
    # A database outage must not turn valid keys into unknown ones for the cache's ttl, nor
    # refuse them: while it lasts they count as their address.
    down = [True]

    def resolver(key: str, context: Any) -> str | None:
        if down[0]:
            raise ConnectionError("database down")
        return "acme"

    identity = Identity(key_resolver=resolver, key_cache_ttl=60)
    config = IdentityConfig(unknown_keys="reject")
    during = identity.subject(scope(x_api_key="sk"), None, config, {})
    assert (during.key, during.source, during.rejected) == ("ip:203.0.113.9", "unknown_key", False)
    down[0] = False
    assert identity.subject(scope(x_api_key="sk"), None, config, {}).key == "key:acme"


def test_an_async_resolver_is_awaited_on_async_servers_and_refused_on_sync_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def resolver(key: str, context: Any) -> str | None:
        await asyncio.sleep(0)
        return "acme" if key == "sk" else None

    identity = Identity(key_resolver=resolver, log=StructuredLog(), key_cache_ttl=0)

    async def resolve() -> Subject:
        flow = identity.resolve(scope(x_api_key="sk"), None, IdentityConfig(), {}, can_await=True)
        value: Any = None
        try:
            while True:
                step = flow.send(value)
                value = await step.awaitable
        except StopIteration as stop:
            found: Subject = stop.value
            return found

    assert asyncio.run(resolve()).key == "key:acme"
    # A sync server cannot await it: a hook failure (logged), never a "never awaited" warning.
    caplog.set_level("ERROR", logger=names.LOGGER)
    assert identity.subject(scope(x_api_key="sk"), None, IdentityConfig(), {}).key == (
        "ip:203.0.113.9"
    )
    assert "synchronously" in caplog.records[-1].getMessage()


def test_identify_gets_its_own_namespace_and_none_goes_on_with_the_default() -> None:
    assert subject(scope(), identify=lambda ctx: "org-7").key == "id:org-7"
    assert subject(scope(), identify=lambda ctx: "key:acme").key == "id:key:acme"  # no escape
    assert subject(scope(x_api_key="acme"), identify=lambda ctx: None).key == "key:acme"
    assert subject(scope(x_api_key="acme"), identify=lambda ctx: "  ").key == "key:acme"


def test_a_principal_is_a_user_or_a_user_inside_a_known_keys_tenant() -> None:
    principal = lambda context: 42  # noqa: E731
    alone = subject(scope(), principal=principal)
    assert (alone.key, alone.source, alone.user) == ("user:42", "user", None)
    inside = subject(scope(x_api_key="acme"), principal=principal)
    assert (inside.key, inside.user) == ("key:acme", "42")
    # An unknown key with a principal: the user pays, never a fresh key budget.
    assert subject(scope(x_api_key="junk"), principal=principal).key == "user:42"


# -- the client address and trusted proxies ------------------------------------------------

PROXY = IdentityConfig(trusted_proxies=("10.0.0.0/8", "127.0.0.1/32"))


def test_proxy_headers_are_ignored_unless_the_peer_is_a_trusted_proxy() -> None:
    spoofed = scope(peer="198.51.100.4", x_forwarded_for="1.2.3.4", forwarded="for=5.6.7.8")
    assert client_address(spoofed, IdentityConfig()) == "198.51.100.4"
    assert client_address(spoofed, PROXY) == "198.51.100.4"  # the peer is no proxy of ours


def test_the_first_untrusted_address_from_the_right_is_the_client() -> None:
    behind = scope(peer="10.0.0.2", x_forwarded_for="6.6.6.6, 203.0.113.9, 10.0.0.7")
    assert client_address(behind, PROXY) == "203.0.113.9"


@given(st.lists(st.text(max_size=40).filter(lambda t: "," not in t), max_size=20))
def test_a_spoofed_leftmost_part_never_changes_the_subject(spoofed: list[str]) -> None:
    # What the client writes comes first; what the trusted proxy appended comes last.
    header = ", ".join([*spoofed, "203.0.113.9"])
    request = scope(peer="127.0.0.1", x_forwarded_for=header)
    assert client_address(request, PROXY) == "203.0.113.9"


def test_repeated_proxy_headers_are_read_as_one_list() -> None:
    request = scope(peer="10.0.0.2", x_forwarded_for=["6.6.6.6", "203.0.113.9, 10.1.1.1"])
    assert client_address(request, PROXY) == "203.0.113.9"


def test_a_fixed_number_of_hops() -> None:
    one = IdentityConfig(trusted_hops=1)  # one proxy in front: the last entry is the client
    request = scope(peer="192.0.2.10", x_forwarded_for="6.6.6.6, 203.0.113.9")
    assert client_address(request, one) == "203.0.113.9"
    two = IdentityConfig(trusted_hops=2)
    request = scope(peer="192.0.2.10", x_forwarded_for="6.6.6.6, 203.0.113.9, 192.0.2.11")
    assert client_address(request, two) == "203.0.113.9"
    # With trusted_proxies too, a peer outside them is the client itself.
    both = IdentityConfig(trusted_hops=1, trusted_proxies=("192.0.2.0/24",))
    assert client_address(scope(peer="198.51.100.1", x_forwarded_for="6.6.6.6"), both) == (
        "198.51.100.1"
    )


def test_a_fixed_chain_behind_a_proxy_on_a_unix_socket() -> None:
    # nginx in front over a unix socket: no peer address, but the header of a fixed chain
    # says who the client is (else every client shares "anonymous").
    one = IdentityConfig(trusted_hops=1)
    request = scope(peer=None, x_forwarded_for="6.6.6.6, 203.0.113.9")
    assert client_address(request, one) == "203.0.113.9"
    assert client_address(scope(peer=None), one) is None  # no header: still no address
    # Trusted networks cannot name a unix socket: its header is not read.
    proxies = IdentityConfig(trusted_proxies=("10.0.0.0/8",))
    assert client_address(request, proxies) is None


def test_the_forwarded_header_when_the_proxies_write_it() -> None:
    config = IdentityConfig(trusted_proxies=("10.0.0.0/8",), forwarded_header="forwarded")
    request = scope(
        peer="10.0.0.2",
        forwarded='for=6.6.6.6;proto=http, for="[2001:db8:cafe::17]:4711";by=10.0.0.2',
        x_forwarded_for="7.7.7.7",
    )
    assert client_address(request, config) == "2001:db8:cafe::17"
    assert client_address(request, PROXY) == "7.7.7.7"  # the other header is not read


def test_garbage_from_a_trusted_hop_stops_at_the_last_good_address() -> None:
    for junk in ("unknown", "_hidden", "", "not an ip", "[::1", "1.2.3.4.5"):
        request = scope(peer="10.0.0.2", x_forwarded_for=f"6.6.6.6, {junk}")
        assert client_address(request, PROXY) == "10.0.0.2", junk


def test_a_hostile_proxy_header_costs_what_a_short_one_does() -> None:
    header = ", ".join(["10.0.0.9"] * 50_000) + ", 203.0.113.9, 10.0.0.3"
    request = scope(peer="10.0.0.2", x_forwarded_for=header)
    assert client_address(request, PROXY) == "203.0.113.9"


def test_ports_brackets_zones_and_ipv4_mapped_addresses() -> None:
    for entry, expected in (
        ("203.0.113.9:8443", "203.0.113.9"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ('"[2001:db8::1]"', "2001:db8::1"),
        ("fe80::1%eth0", "fe80::1"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
    ):
        request = scope(peer="10.0.0.2", x_forwarded_for=entry)
        assert client_address(request, PROXY) == expected, entry
    assert client_address(scope(peer="::ffff:198.51.100.3"), IdentityConfig()) == "198.51.100.3"


def test_ipv6_clients_are_counted_per_network() -> None:
    config = IdentityConfig()
    a = address_subject("2001:db8:1:2:aaaa::1", config)
    b = address_subject("2001:db8:1:2:ffff::9", config)
    assert a == b == "ip:2001:db8:1:2::/64"
    assert address_subject("2001:db8:1:3::1", config) != a
    assert address_subject("2001:db8:1:2::1", IdentityConfig(ipv6_prefix=128)) == (
        "ip:2001:db8:1:2::1"
    )
    assert address_subject("203.0.113.9", config) == "ip:203.0.113.9"
    # A /64's many addresses are one budget: rotating them changes nothing.
    network = ipaddress.IPv6Network("2001:db8:7:7::/64")
    keys = {address_subject(str(network[i * 7919]), config) for i in range(100)}
    assert keys == {"ip:2001:db8:7:7::/64"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"unknown_keys": "ignore"}, "unknown_keys must be one of"),
        ({"trusted_proxies": ("10.0.0.0/33",)}, "is not an IP network"),
        ({"trusted_proxies": "10.0.0.0/8"}, "must be a list of CIDRs"),
        ({"trusted_hops": 99}, "trusted_hops must be an integer from 0 to 32"),
        ({"ipv6_prefix": 0}, "ipv6_prefix must be an integer from 1 to 128"),
        ({"forwarded_header": "x-real-ip"}, "forwarded_header must be one of"),
        ({"api_key_header": "x api key"}, "api_key_header must be an HTTP header name"),
        ({"resolver_rate": 0}, "resolver_rate must be a finite number above 0"),
        ({"resolver_rate": float("inf")}, "resolver_rate must be a finite number above 0"),
        ({"resolver_burst": 0}, "resolver_burst must be an integer from 1 to 1000000000"),
        ({"resolver_burst": 2.5}, "resolver_burst must be an integer from 1 to 1000000000"),
        # Past a float's range, each lookup raised OverflowError on the request path.
        ({"resolver_burst": 10**400}, "resolver_burst must be an integer from 1 to 1000000000"),
    ],
)
def test_bad_identity_settings_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        IdentityConfig(**kwargs)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("resolver_rate = 0", "expected a finite number > 0, got 0"),
        ('resolver_rate = "fast"', "expected a finite number > 0, got"),
        ("resolver_burst = 0", "expected an integer from 1 to 1000000000, got 0"),
        ("resolver_burst = 1.5", "expected an integer from 1 to 1000000000, got"),
        (f"resolver_burst = {10**400}", "expected an integer from 1 to 1000000000, got 1000"),
    ],
)
def test_bad_lookup_budgets_in_the_file_name_the_file_line_and_key(
    tmp_path: Path, line: str, reason: str
) -> None:
    path = tmp_path / "quotaql.toml"
    path.write_text(f'[identity]\nunknown_keys = "address"\n{line}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    key = line.partition(" = ")[0]
    assert (info.value.key, info.value.line) == (f"identity.{key}", 3)
    assert str(info.value).startswith(f"{path}:3: identity.{key}: {reason}")


def test_the_lookup_budgets_are_read_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "quotaql.toml"
    path.write_text("[identity]\nresolver_rate = 0.5\nresolver_burst = 3\n", encoding="utf-8")
    identity = load_config(path).identity
    assert (identity.resolver_rate, identity.resolver_burst) == (0.5, 3)
    assert (IdentityConfig().resolver_rate, IdentityConfig().resolver_burst) == (2.0, 20)


def test_identity_sources_match_the_metric_label_values() -> None:
    from typing import get_args

    from quotaql.identity import IdentitySource

    assert get_args(IdentitySource) == names.IDENTITY_SOURCES


def test_a_websocket_client_may_send_its_key_in_connection_init() -> None:
    context = {"connection_params": {"X-API-Key": "acme"}}
    found = Identity().subject(scope(), context, IdentityConfig(), TENANTS)
    assert found.key == "key:acme"
    # The header wins when both are there, and junk params are ignored.
    header = Identity().subject(scope(x_api_key="203.0.113.9"), context, IdentityConfig(), TENANTS)
    assert header.key == "key:203.0.113.9"
    for junk in ({"X-API-Key": 7}, ["acme"], None):
        other = Identity().subject(scope(), {"connection_params": junk}, IdentityConfig(), TENANTS)
        assert other.key == "ip:203.0.113.9"


def test_a_django_user_that_cannot_be_loaded_is_no_principal_not_a_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from django.http import HttpRequest
    from django.utils.functional import SimpleLazyObject

    from tests.support.frameworks import configure_django

    configure_django()  # the same settings as the Django servers of the integration tests

    def session_store_down() -> Any:
        raise ConnectionError("session store down")

    request = HttpRequest()
    request.META["REMOTE_ADDR"] = "203.0.113.9"
    request.user = SimpleLazyObject(session_store_down)
    caplog.set_level("ERROR", logger=names.LOGGER)
    found = Identity(log=StructuredLog()).subject(request, None, IdentityConfig(), {})
    assert (found.key, found.user) == ("ip:203.0.113.9", None)
    assert [r.quotaql_event for r in caplog.records] == ["django_user_failed"]
