"""End to end on a real Prometheus: every dashboard query has data, the alerts fire.

A real uvicorn serves the shop API (memory-free: Redis storage on a private redis-server)
and its /metrics; a real ``prometheus`` scrapes it every second and evaluates the generated
rules every second. Traffic: polite tenants, a flooding tenant, then a Redis kill. The
rules are generated from an ``[alerts]`` table with short windows and ``for: 0s`` (the
test-only overrides the issue allows; the shipped rules keep production values).
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.config import AlertsConfig
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.observability.alerts import alert_rules, render_rules
from quotaql.observability.dashboards import (
    dashboard_queries,
    overview_dashboard,
    substitute,
    tenant_dashboard,
)
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.observability.prometheus import PrometheusServer
from tests.plugin import shop
from tests.plugin.asgi import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.servers import RedisServer

JOB = "quotaql-live"
FLOODER = "flooder"
TOML = """
[limits]
on_backend_error = "open"
[tiers.free]
capacity = 200
refill_per_second = 5
[tenants.flooder]
tier = "free"
[tenants.polite-1]
tier = "free"
[tenants.polite-2]
tier = "free"
"""
# Short windows so a minute of test traffic is enough; for: 0s everywhere.
TEST_ALERTS = AlertsConfig(
    rate_window="20s",
    blocked_ratio_for="0s",
    block_spike_window="20s",
    block_spike_min_rate=0.5,
    block_spike_for="0s",
    check_latency_for="0s",
    backend_errors_per_second=0.01,
    backend_errors_for="0s",
    failing_window="20s",
    failing_for="0s",
    circuit_open_for="0s",
    many_tenants_limited=1,
    many_tenants_limited_for="0s",
    metrics_absent_for="0s",
)
EXPENSIVE = "{ products(first: 10) { name reviews(first: 5) { stars } } }"  # 70, actual 16
CHEAP = "{ products(first: 2) { name } }"  # 4


def tenant_label(tenant: str) -> str:
    """The label the metrics give a top-N tenant (see TenantLabels)."""
    return "h:" + hashlib.sha256(tenant.encode()).hexdigest()[:12]


def prometheus_config(app_port: int) -> str:
    return f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [quotaql.rules.yml]
scrape_configs:
  - job_name: {JOB}
    metrics_path: /metrics/
    static_configs:
      - targets: ["127.0.0.1:{app_port}"]
"""


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.5)


def post(client: httpx.Client, tenant: str, query: str) -> int:
    response = client.post("/graphql", json={"query": query}, headers={"X-API-Key": tenant})
    return response.status_code


def test_dashboards_have_data_and_alerts_fire(
    write_config: Callable[..., Path], fresh_redis_server: RedisServer
) -> None:
    registry = CollectorRegistry()
    limiter = CostLimiter.from_config(
        write_config(base=TOML),
        storage=AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.2),
        metrics=PrometheusMetrics(registry, top_tenants=5),
    )
    app = Starlette(
        routes=[
            Mount("/metrics", metrics_app(registry)),
            Mount("/", GraphQL(shop.make_schema(limiter))),
        ]
    )
    rules = render_rules(alert_rules(TEST_ALERTS))
    with (
        UvicornServer(app) as server,
        PrometheusServer(prometheus_config(server.port), {"quotaql.rules.yml": rules}) as prom,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        eventually(lambda: prom.query(f'up{{job="{JOB}"}} == 1'), 30, "the first scrape")
        # Traffic, bounded in count: polite tenants, then a flood from one tenant.
        statuses: list[int] = []
        deadline = time.monotonic() + 40
        for round_ in range(30):
            if time.monotonic() > deadline:
                break
            statuses.extend(post(client, polite, CHEAP) for polite in ("polite-1", "polite-2"))
            statuses.extend(post(client, FLOODER, EXPENSIVE) for _ in range(15))
            if round_ % 5 == 0:
                time.sleep(0.5)  # let a few scrapes see the counters grow
        assert 429 in statuses, "the flood was never blocked"
        eventually(
            lambda: prom.query(
                f'sum(quotaql_requests_total{{job="{JOB}", decision="blocked"}}) > 20'
            ),
            30,
            "blocked requests in Prometheus",
        )
        # Redis goes away: the limiter fails open, counts backend errors, opens its circuit.
        fresh_redis_server.kill()
        for _ in range(6):
            for _ in range(10):
                assert post(client, "polite-1", CHEAP) == 200
            time.sleep(1)

        values = {
            "job": JOB,
            "tier": ".*",
            "tenant": tenant_label(f"key:{FLOODER}"),
            "__rate_interval": "20s",
            "__range": "5m",
        }
        queries = [
            substitute(expr, **values)
            for dashboard in (overview_dashboard(), tenant_dashboard())
            for expr in dashboard_queries(dashboard)
        ]
        assert len(queries) >= 30

        def empty() -> list[str]:
            return [query for query in queries if not prom.query(query)]

        missing = empty()
        deadline = time.monotonic() + 30
        while missing and time.monotonic() < deadline:
            time.sleep(1)
            missing = empty()
        assert not missing, "dashboard queries without data:\n" + "\n".join(missing)

        def firing() -> set[str]:
            alerts = prom.api("alerts")["alerts"]
            return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

        wanted = {"QuotaqlBlockSpike", "QuotaqlBackendErrors"}
        active = eventually(lambda: wanted <= firing() and firing(), 60, f"alerts {wanted}")
        assert wanted <= active
        assert "QuotaqlFailingOpen" in active
        assert "QuotaqlCircuitOpen" in active
        assert "QuotaqlMetricsAbsent" not in active
