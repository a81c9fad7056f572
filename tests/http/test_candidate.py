"""Candidate weights priced live, over real HTTP: Strawberry's ASGI app served by uvicorn, its
budgets in a private redis-server. Every operation is sampled; the candidate doubles a type's
weight, and ``/metrics`` shows a ratio of 2 for the root field that selects it while every
response is priced and charged by the live weights alone; an edit of the candidate is read
on the reload timer, without a request asking for it."""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.plugin import CostLimiter
from tests.support import strawberry_shop as shop
from tests.support.limited_apps import serving
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

INTERVAL = 0.2
TOML = f"""
[cost]
candidate = "quotaql.candidate.toml"
candidate_sample = 1.0
[limits]
reload_interval = {INTERVAL}
[tiers.free]
capacity = 1000
refill_per_second = 0.001
[tenants.acme]
tier = "free"
"""
# The shop prices a Product 2 (@cost); the candidate says 4, then 6.
DOUBLED = '[cost.weights]\n"Product" = 4\n'
TRIPLED = '[cost.weights]\n"Product" = 6\n'
PRODUCTS = "{ products(first: 3) { name } hello }"  # live: 3 × 2 = 6 (hello: 0)
ROOT = {"operation_name": "", "coordinate": "Query.products"}


def write(path: Path, text: str) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(text, encoding="utf-8")
    os.replace(part, path)  # atomic: the timer never sees half a file


def app_of(config: Path, registry: CollectorRegistry) -> Any:
    def build(storage: Any) -> Starlette:
        limiter = CostLimiter.from_config(config, storage=storage,
                                          metrics=PrometheusMetrics(registry))  # fmt: skip
        schema = shop.make_schema(limiter)

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            yield
            await storage.close()

        routes = [Mount("/metrics", metrics_app(registry)), Mount("/", GraphQL(schema))]
        return Starlette(routes=routes, lifespan=lifespan)

    return build


def post(url: str, query: str) -> dict[str, Any]:
    response = httpx.post(f"{url}/graphql", json={"query": query},
                          headers={"X-API-Key": "acme"}, timeout=10)  # fmt: skip
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert "errors" not in body, body
    return body


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample ``/metrics`` shows: {(name, sorted labels): value}."""
    text = httpx.get(f"{url}/metrics/", timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_doubled_weight_shows_on_metrics_and_an_edit_is_read_on_the_timer(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    config, candidate = tmp_path / "quotaql.toml", tmp_path / "quotaql.candidate.toml"
    write(candidate, DOUBLED)
    write(config, TOML)
    registry = CollectorRegistry()
    with serving(request, "redis", app_of(config, registry)) as server:
        available = 1000.0
        for _ in range(3):
            cost = post(server.url, PRODUCTS)["extensions"]["cost"]
            # Priced, debited and refunded by the live weights alone.
            assert cost["requestedQueryCost"] == 6
            available -= cost["actualQueryCost"]
            assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(available, abs=1)
        samples = scrape(server.url)
        ratio = f"{names.CANDIDATE_COST_RATIO}"
        assert value(samples, f"{ratio}_count", **ROOT) == 3
        assert value(samples, f"{ratio}_sum", **ROOT) == pytest.approx(6.0)  # 2, three times
        hello = {"operation_name": "", "coordinate": "Query.hello"}
        assert value(samples, f"{ratio}_sum", **hello) == pytest.approx(3.0)  # 0 against 0
        assert value(samples, names.CANDIDATE_LOADED) == 1
        assert value(samples, names.CANDIDATE_WOULD_REFUSE_TOTAL, tier="free", tenant="acme") == 0

        # Edited while it runs: read within the reload interval and one more look.
        write(candidate, TRIPLED)
        edited = time.monotonic()

        def tripled() -> bool:
            post(server.url, PRODUCTS)
            samples = scrape(server.url)
            above_two = value(samples, f"{ratio}_count", **ROOT) - value(
                samples, f"{ratio}_bucket", **ROOT, le="2.0"
            )
            return above_two > 0

        assert eventually(tripled, 10, every=0.05) is not None, "the edit was never read"
        took = time.monotonic() - edited
        assert took <= 2 * INTERVAL + 1.5, f"read {took:.2f} s after the edit"
        cost = post(server.url, PRODUCTS)["extensions"]["cost"]
        assert cost["requestedQueryCost"] == 6  # the live price, still
