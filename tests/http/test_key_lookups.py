"""A refused address stops driving the ``key_resolver``, over real uvicorn servers.

Strawberry's ASGI app and Ariadne's, each with a resolver that counts its calls (a database
lookup in production): a drained address sending invented keys gets a bounded number of
lookups, none of its requests run, and an honest tenant behind the same address (a NAT)
keeps getting in with its key.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from strawberry.asgi import GraphQL

from quotaql import ariadne as ariadne_adapter
from quotaql.identity import IdentityConfig
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from tests.support import ariadne_shop, strawberry_shop
from tests.support.app_servers import UvicornServer
from tests.support.shop_http import EXPORT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# The default tier (every address) holds 3 exports; the tenants' tier 1000 points.
TOML = """
[limits]
reload_interval = 0
[tiers.free]
capacity = 30
refill_per_second = 0.001
[tiers.pro]
capacity = 1000
refill_per_second = 0.001
[tenants.acme]
tier = "pro"
[tenants.globex]
tier = "pro"
"""
KEYS = {"sk_live_acme": "acme", "sk_live_globex": "globex"}
FLOOD = 300


class Resolver:
    """``key_resolver(key, context)``: the tenant of ``key`` in ``KEYS``; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, key: str, context: Any) -> str | None:
        with self._lock:
            self.calls.append(key)
        return KEYS.get(key)

    def invented(self) -> int:
        """How many lookups the invented keys cost."""
        with self._lock:
            return sum(key.startswith("invented-") for key in self.calls)


class Served(NamedTuple):
    kind: str
    resolver: Resolver
    client: httpx.Client
    registry: CollectorRegistry
    spans: InMemorySpanExporter


def app(kind: str, path: Path, resolver: Resolver, **options: Any) -> Any:
    if kind == "strawberry":
        limiter = CostLimiter.from_config(path, key_resolver=resolver, **options)
        return GraphQL(strawberry_shop.make_schema(limiter))
    ariadne = ariadne_adapter.CostLimiter.from_config(path, key_resolver=resolver, **options)
    return ariadne.asgi(ariadne_shop.make_schema())


@pytest.fixture(params=["strawberry", "ariadne"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    resolver = Resolver()
    registry, spans = CollectorRegistry(), InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    options = {"metrics": PrometheusMetrics(registry), "tracer_provider": provider}
    kind = str(request.param)
    with (
        UvicornServer(app(kind, path, resolver, **options)) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        yield Served(kind, resolver, client, registry, spans)
    for shop in (strawberry_shop, ariadne_shop):
        shop.resolver_calls.clear()


def ask(client: httpx.Client, query: str = "{ hello }", key: str | None = None) -> httpx.Response:
    headers = {} if key is None else {"X-API-Key": key}
    return client.post("/graphql", json={"query": query}, headers=headers)


def flood(
    url: str, keys: list[str], in_flight: int = 8, addresses: list[str] | None = None
) -> list[int]:
    """POST ``{ hello }`` once with each of ``keys``, ``in_flight`` at a time: the statuses
    (each from its ``addresses`` entry, told by the trusted proxy's ``X-Forwarded-For``).

    Concurrent, as a flood is (one request at a time waits out TCP's delayed ACKs)."""

    async def run() -> list[int]:
        limit = asyncio.Semaphore(in_flight)
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:

            async def one(key: str, address: str | None) -> int:
                headers = {"X-API-Key": key}
                if address is not None:
                    headers["X-Forwarded-For"] = address
                async with limit:
                    response = await client.post(
                        "/graphql", json={"query": "{ hello }"}, headers=headers
                    )
                    return response.status_code

            sent = addresses if addresses is not None else [None] * len(keys)
            return await asyncio.gather(*(one(k, a) for k, a in zip(keys, sent, strict=True)))

    return asyncio.run(run())


def drain(client: httpx.Client) -> None:
    """Spend the address's budget (no key: the client's address pays)."""
    statuses = [ask(client, EXPORT).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]


def lookups_allowed(seconds: float) -> float:
    """The most lookups one address may cause in ``seconds``: the burst, and the rate after."""
    config = IdentityConfig()
    return config.resolver_burst + config.resolver_rate * seconds + 1


def test_invented_keys_from_a_drained_address_cost_a_bounded_number_of_lookups(
    served: Served,
) -> None:
    kind, resolver, client, registry, spans = served
    drain(client)
    started = time.monotonic()
    statuses = flood(str(client.base_url), [f"invented-{i}" for i in range(FLOOD)])
    elapsed = time.monotonic() - started
    assert statuses == [429] * FLOOD  # 0 admitted: each counted as the drained address
    shop = strawberry_shop if kind == "strawberry" else ariadne_shop
    assert "hello" not in shop.resolver_calls
    assert resolver.invented() <= lookups_allowed(elapsed)
    assert resolver.invented() < FLOOD / 5  # was one lookup per invented key: 300
    # Counted: the lookups made and the keys not looked up, and how each subject was found.
    lookups = {
        outcome: registry.get_sample_value(names.KEY_LOOKUPS_TOTAL, {"outcome": outcome})
        for outcome in names.KEY_LOOKUP_OUTCOMES
    }
    assert lookups == {
        "known": 0,
        "unknown": resolver.invented(),
        "failed": 0,
        "limited": FLOOD - resolver.invented(),
    }
    limited = registry.get_sample_value(names.IDENTITY_TOTAL, {"source": "limited_key"})
    assert limited == FLOOD - resolver.invented()
    identities = [span.attributes.get(names.ATTR_IDENTITY) for span in spans.get_finished_spans()]
    assert identities.count("limited_key") == FLOOD - resolver.invented()


def test_an_honest_tenant_behind_the_flooding_address_keeps_getting_in(served: Served) -> None:
    resolver, client = served.resolver, served.client
    first = ask(client, key="sk_live_acme")  # acme's key, looked up once and cached
    assert first.status_code == 200
    assert first.json()["extensions"]["cost"]["throttleStatus"]["maximumAvailable"] == 1000
    drain(client)  # the address the attacker shares with acme (a NAT) runs dry
    started = time.monotonic()
    for start in range(0, FLOOD, 50):
        invented = [f"invented-{i}" for i in range(start, start + 50)]
        assert flood(str(client.base_url), invented) == [429] * 50
        during = ask(client, key="sk_live_acme")  # acme, behind the same address, meanwhile
        assert during.status_code == 200
        cost = during.json()["extensions"]["cost"]["throttleStatus"]
        assert cost["maximumAvailable"] == 1000  # its own tenant's budget
    elapsed = time.monotonic() - started
    assert resolver.calls.count("sk_live_acme") == 1  # never looked up again, never limited
    assert resolver.invented() <= lookups_allowed(elapsed)
    # A key this process never saw: once the address's lookups refill (1 / resolver_rate
    # seconds after the flood), it is looked up and is its tenant.
    deadline = time.monotonic() + 3 / IdentityConfig().resolver_rate
    while (answer := ask(client, key="sk_live_globex")).status_code != 200:
        assert time.monotonic() < deadline, answer.json()
        time.sleep(0.1)
    assert answer.json()["extensions"]["cost"]["throttleStatus"]["maximumAvailable"] == 1000


@pytest.fixture(params=["strawberry", "ariadne"])
def proxied(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    """As ``served``, behind a trusted proxy (the test client, on 127.0.0.1) that tells each
    request's client address in ``X-Forwarded-For``."""
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML + '[identity]\ntrusted_proxies = ["127.0.0.1/32"]\n', encoding="utf-8")
    resolver, registry = Resolver(), CollectorRegistry()
    kind = str(request.param)
    limiter = app(kind, path, resolver, metrics=PrometheusMetrics(registry))
    with (
        UvicornServer(limiter) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        yield Served(kind, resolver, client, registry, InMemorySpanExporter())


ROTATED = 600  # invented keys, one from each of as many /64 networks of one /48


def test_rotating_ipv6_networks_within_a_48_finds_no_fresh_lookup_budget(proxied: Served) -> None:
    # An IPv6 client owns a /48 (65,536 /64s, each an address subject with a burst of its
    # own): one invented key from each /64 was one lookup each, 600 of 600.
    resolver, client = proxied.resolver, proxied.client
    tenant = "2001:db8:7:ffff::1"  # acme, in the same /48 (a site whose other host floods)
    assert available(ask_from(client, tenant, "sk_live_acme")) == 1000
    addresses = [f"2001:db8:7:{i:x}::1" for i in range(ROTATED)]
    started = time.monotonic()
    statuses = flood(
        str(client.base_url), [f"invented-{i}" for i in range(ROTATED)], addresses=addresses
    )
    elapsed = time.monotonic() - started
    assert statuses.count(200) == ROTATED  # each counted as its /64's address (3 exports)
    scale = 8  # the /48's lookups: 8 times an address's
    assert resolver.invented() <= scale * lookups_allowed(elapsed)
    limited = proxied.registry.get_sample_value(names.KEY_LOOKUPS_TOTAL, {"outcome": "limited"})
    assert limited == ROTATED - resolver.invented() > 0
    # acme keeps getting in, without a lookup; another /48 has a budget of its own.
    assert available(ask_from(client, tenant, "sk_live_acme")) == 1000
    assert resolver.calls.count("sk_live_acme") == 1
    assert ask_from(client, "2001:db8:8::1", "invented-other").status_code == 200
    assert resolver.calls[-1] == "invented-other"


def available(response: httpx.Response) -> int:
    assert response.status_code == 200, response.text
    found: int = response.json()["extensions"]["cost"]["throttleStatus"]["maximumAvailable"]
    return found


def ask_from(client: httpx.Client, address: str, key: str) -> httpx.Response:
    headers = {"X-API-Key": key, "X-Forwarded-For": address}
    return client.post("/graphql", json={"query": "{ hello }"}, headers=headers)
