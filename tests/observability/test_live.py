"""End to end on a real Prometheus: every dashboard query has data, the alerts fire.

A real uvicorn serves the shop API (memory-free: Redis storage on a private redis-server)
and its /metrics; a real ``prometheus`` scrapes it every second and evaluates the generated
rules every second. Traffic: polite tenants, a flooding tenant, a subscriber over a websocket
that opens one subscription too many and runs out of budget mid-stream, then a Redis kill;
all along, a client guessing API keys (refused: ``unknown_keys = "reject"``), clients
without a key on the same app served over a Unix socket (no client address: ``anonymous``,
as behind a proxy that loses it) and an internal endpoint that takes unknown keys as
tenants (``unknown_keys = "tenant"``). The rules are generated from an ``[alerts]`` table
with short windows and ``for: 0s`` (the test-only overrides the issue allows; the shipped
rules keep production values).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import time
from collections.abc import AsyncGenerator  # noqa: TC003  (Strawberry reads annotations at runtime)
from typing import TYPE_CHECKING, Any

import httpx
import strawberry
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL
from websockets.sync.client import connect

from quotaql.config import AlertsConfig
from quotaql.cost_analysis.directives import Cost, ListSize
from quotaql.gate import staging
from quotaql.instrumentation import names
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
from tests.support import strawberry_shop as shop
from tests.support.app_servers import UvicornServer
from tests.support.servers import PrometheusServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.support.servers import RedisServer

JOB = "quotaql-live"
FLOODER = "flooder"
SUBSCRIBER = "streamer"
TOML = """
[identity]
unknown_keys = "reject"
[limits]
on_backend_error = "open"
max_subscriptions = 1
[tiers.free]
capacity = 200
refill_per_second = 5
[tenants.flooder]
tier = "free"
[tenants.polite-1]
tier = "free"
[tenants.polite-2]
tier = "free"
[tenants.streamer]
tier = "free"
# Runs over its estimates (an overage each time) and takes more worker time than its
# tiny time quota refills: refused by the time quota after its first few operations.
[tiers.greedy]
capacity = 200
refill_per_second = 5
time = { capacity_ms = 5, refill_ms_per_second = 1 }
[tenants.greedy]
tier = "greedy"
# Concurrency limits: two queries at once, no subscription at all.
[tiers.narrow]
capacity = 200
refill_per_second = 5
max_in_flight = 2
max_subscriptions_in_flight = 0
[tenants.narrow]
tier = "narrow"
# Shadow: pressure, multiplier and transitions reach Prometheus, nothing is scaled.
[adaptive]
mode = "shadow"
sources = ["callable", "latency"]
engage_for = 1
"""
# An internal endpoint behind a gateway that (we are told) verified every key already; in
# memory, it keeps making the decisions of issue 25 while Redis is down: a tier enforced on
# half its subjects, warnings before the wall, every operation timed for tuning.
INTERNAL_TOML = """
[identity]
unknown_keys = "tenant"
[limits]
warn_at = 0.5
enforce_share = 0.5
[cost]
tuning_sample = 1.0
[tiers.free]
capacity = 150
refill_per_second = 5
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
    anonymous_for="0s",
    unknown_keys_for="0s",
    unverified_keys_for="0s",
    adaptive_engaged_for="0s",
    leases_expired_for="0s",
    refunds_lost_for="0s",
    delays_long_for="0s",
    delay_process_full_for="0s",
    time_refusals_for="0s",
    metrics_absent_for="0s",
)
IDENTITY_ALERTS = {"QuotaqlAnonymousRequests", "QuotaqlUnknownApiKeys", "QuotaqlUnverifiedApiKeys"}
DELAY_ALERTS = {"QuotaqlDelaysLong", "QuotaqlDelayProcessFull"}
EXPENSIVE = "{ products(first: 10) { name reviews(first: 5) { stars } } }"  # 70, actual 16
CHEAP = "{ products(first: 2) { name } }"  # 4
# 30 points at the start (the first event), 30 per later event: a free budget of 200 pays
# for about six events, then an event is blocked and ends the subscription.
TICKS = "subscription { ticks(count: 20, interval: 0.05) }"


@strawberry.type
class Subscription:
    """The shop's ``ticks``, but slow enough for a second subscription to find it open."""

    @strawberry.subscription(directives=[Cost(weight="30")])
    async def ticks(self, count: int = 3, interval: float = 0.0) -> AsyncGenerator[int, None]:
        for i in range(count):
            await asyncio.sleep(interval)
            yield i


# Priced 2 (one product of weight 2): the resolver returns the whole catalog, so each one is
# charged an overage of 6 after it ran (the Overage panel's data), and takes 5 ms of worker
# time (its validation is kept: the resolver spends it), so that the greedy tier's time
# quota refuses it after a few operations.
OVERAGE = "{ catalog(first: 1) { name } }"


@strawberry.type(name="Query")
class LiveQuery(shop.Query):
    """The shop's queries, and a list whose resolver ignores its ``first``."""

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    def catalog(self, first: int = 1) -> list[shop.Product]:
        del first
        began = time.thread_time()  # 5 ms of worker time: the greedy tier's time quota
        while time.thread_time() - began < 0.005:
            pass
        return [
            shop.Product(id=strawberry.ID(str(i)), name=f"product {i}")
            for i in range(shop.CATALOG_SIZE)
        ]


def make_schema(limiter: CostLimiter) -> strawberry.Schema:
    return strawberry.Schema(
        query=LiveQuery, mutation=shop.Mutation, subscription=Subscription, extensions=[limiter]
    )


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


def post(client: httpx.Client, tenant: str | None, query: str, path: str = "/graphql") -> int:
    headers = {"X-API-Key": tenant} if tenant is not None else {}
    response = client.post(path, json={"query": query}, headers=headers)
    return response.status_code


def subscribe_twice(ws_url: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Over one graphql-transport-ws connection: subscription ``a``, then ``b`` while ``a``
    is open (``max_subscriptions = 1``); ``b``'s answer, and ``a``'s payloads to its end."""
    headers = {"X-API-Key": SUBSCRIBER}
    with connect(ws_url, subprotocols=["graphql-transport-ws"], additional_headers=headers) as ws:

        def receive() -> dict[str, Any]:
            message: dict[str, Any] = json.loads(ws.recv(10))
            return message

        ws.send(json.dumps({"type": "connection_init"}))
        assert receive()["type"] == "connection_ack"
        ws.send(json.dumps({"type": "subscribe", "id": "a", "payload": {"query": TICKS}}))
        first = receive()
        assert (first["id"], first["type"]) == ("a", "next"), first
        ws.send(json.dumps({"type": "subscribe", "id": "b", "payload": {"query": TICKS}}))
        second: dict[str, Any] = {}
        payloads = [first["payload"]]
        while True:
            message = receive()
            if message["id"] == "b":
                second = second or message
            elif message["type"] == "next":
                payloads.append(message["payload"])
            else:
                assert message["type"] == "complete", message
                break
        return second, payloads


def refused_subscription(ws_url: str, tenant: str) -> dict[str, Any]:
    """The answer to one subscription of ``tenant`` (a tier that allows none)."""
    headers = {"X-API-Key": tenant}
    with connect(ws_url, subprotocols=["graphql-transport-ws"], additional_headers=headers) as ws:
        ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(ws.recv(10))["type"] == "connection_ack"
        ws.send(json.dumps({"type": "subscribe", "id": "n", "payload": {"query": TICKS}}))
        message: dict[str, Any] = json.loads(ws.recv(10))
        return message


def delay_traffic(metrics: PrometheusMetrics) -> None:
    """What the gate records for operations of a delay tier (recorded here directly, so that
    the Delay row has data and the delay alerts fire whatever the traffic): waits of 0.2 and
    2 seconds (a p99 above 1s), a refusal for each reason, a client that left, and some
    waiting."""
    metrics.delayed("free", 0.2)
    metrics.delayed("free", 2.0)
    for reason in names.DELAY_REFUSED_REASONS:
        metrics.delay_refused("free", reason)
    metrics.delay_cancelled("free")
    metrics.delays_waiting(3)


def tuning_traffic(metrics: PrometheusMetrics) -> None:
    """What the gate records for an operation it samples for tuning (recorded here directly,
    so that the Tuning row has data whatever the gate samples): reviews shorter than
    assumed, products longer, a related list longer than its first: argument, one estimate
    too high and one too low."""
    metrics.list_sizes(
        [
            ("Query.products", 10, 40, False),
            ("Product.reviews", 10, 2, False),
            ("Product.related", 5, 7, True),
            ("Product.related", 5, 5, True),
        ]
    )
    metrics.estimate("query", "free", 70, 16)
    metrics.estimate("query", "free", 10, 30)


def staged_pair() -> tuple[str, str]:
    """Two unknown keys of the internal endpoint's free tier (``ukey:``): one in its
    enforced half, one in its shadow half."""
    keys = [f"int-{index}" for index in range(64)]
    enforced = next(key for key in keys if staging.place("free", f"ukey:{key}") < 0.5)
    shadow = next(key for key in keys if staging.place("free", f"ukey:{key}") >= 0.5)
    return enforced, shadow


def recorded_traffic(metrics: PrometheusMetrics) -> None:
    """What the gate records for partial answers, candidate weights and @defer/@stream
    (recorded here directly, as the tuning and delay traffic: each has its own tests over
    real servers; here the rows need data whatever the traffic)."""
    metrics.skips.skipped(["Query.products"], "free")
    metrics.rollout.event("free", "shadow", "allowed")  # a subscription event, staged
    metrics.candidate.loaded(True)
    metrics.candidate.compared("Named", 4, 8, [("Query.products", 4, 8)])
    metrics.candidate.compared(None, 70, 35, [("Product.reviews", 70, 35)])
    metrics.candidate.would_refuse("free", f"key:{FLOODER}", FLOODER)
    metrics.candidate.error("invalid")
    metrics.incremental.payload("free")
    metrics.incremental.ended("free", "completed")
    metrics.incremental.ended("free", "abandoned")
    for outcome in ("called", "retried", "spared"):  # a sharded [global] quota's calls
        metrics.shard_calls(outcome, 1, 1)


def internal_traffic(client: httpx.Client, pair: tuple[str, str]) -> None:
    """Both halves of the staged tier overspend (the enforced one refused, the shadow one
    would be), warned first; the enforced one's refusals by root field and operation name."""
    for key in pair:
        for _ in range(3):
            post(client, key, EXPENSIVE, "/internal/graphql")
    for _ in range(5):
        post(client, pair[0], "query Flood " + EXPENSIVE, "/internal/graphql")


def codes(payload: dict[str, Any]) -> list[str]:
    return [error["extensions"]["code"] for error in payload.get("errors") or []]


def test_dashboards_have_data_and_alerts_fire(
    write_config: Callable[..., Path], fresh_redis_server: RedisServer, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    # The flooder is allowlisted by its [tenants] name (its API key, without a key_resolver):
    # the tenant dashboard's picker and every per-tenant panel know it as "flooder".
    metrics = PrometheusMetrics(registry, tenant_allowlist=[FLOODER], top_tenants=5)
    config_path = write_config(base=TOML)
    # What the gate reports on loading its file (the lead's hot reload calls it).
    metrics.config_loaded(1, hashlib.sha256(config_path.read_bytes()).hexdigest())
    limiter = CostLimiter.from_config(
        config_path,
        storage=AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.2),
        metrics=metrics,
        pressure=lambda: 0.9,  # an overloaded service, as the application's own signal says
    )
    internal_toml = tmp_path / "internal.toml"
    internal_toml.write_text(INTERNAL_TOML, encoding="utf-8")
    internal = CostLimiter.from_config(internal_toml, metrics=metrics)  # in memory
    app = Starlette(
        routes=[
            Mount("/metrics", metrics_app(registry)),
            Mount("/internal", GraphQL(make_schema(internal))),
            Mount("/", GraphQL(make_schema(limiter))),
        ]
    )
    rules = render_rules(alert_rules(TEST_ALERTS))
    with (
        UvicornServer(app, unix_socket=True) as server,
        PrometheusServer(prometheus_config(server.port), {"quotaql.rules.yml": rules}) as prom,
        httpx.Client(base_url=server.url, timeout=10) as client,
        server.unix_client(timeout=10) as no_address,
    ):

        def identity_traffic() -> None:
            """A key guesser, keyless clients nobody can tell apart, an unverified key."""
            for _ in range(3):
                assert post(client, secrets.token_hex(8), CHEAP) == 401  # UNKNOWN_API_KEY
            for _ in range(2):
                assert post(no_address, None, CHEAP) == 200  # anonymous
            assert post(client, "internal-batch-7", CHEAP, "/internal/graphql") == 200
            # 70 spreads side by side: refused before validation (TOO_MANY_FIELD_PAIRS).
            spreads = "{ hello " + " ".join(f"...X{i}" for i in range(70)) + " }"
            assert post(client, "polite-1", spreads) == 200

        eventually(lambda: prom.query(f'up{{job="{JOB}"}} == 1'), 30, "the first scrape")
        # Traffic, bounded in count: polite tenants, then a flood from one tenant.
        statuses: list[int] = []
        deadline = time.monotonic() + 40
        for round_ in range(30):
            if time.monotonic() > deadline:
                break
            statuses.extend(post(client, polite, CHEAP) for polite in ("polite-1", "polite-2"))
            statuses.extend(post(client, FLOODER, EXPENSIVE) for _ in range(15))
            post(client, "greedy", OVERAGE)  # runs over its estimate: charged an overage
            post(client, "polite-2", "query Named { products(first: 2) { name } }")
            tuning_traffic(metrics)
            delay_traffic(metrics)
            if round_ % 5 == 0:
                time.sleep(0.5)  # let a few scrapes see the counters grow
        assert 429 in statuses, "the flood was never blocked"
        # A subscriber: one subscription too many, and events until its budget runs out.
        second, payloads = subscribe_twice(server.url.replace("http", "ws", 1) + "/graphql")
        assert codes(second["payload"]) == ["TOO_MANY_SUBSCRIPTIONS"], second
        assert codes(payloads[-1]) == ["RATE_LIMITED"], payloads[-1]
        assert len(payloads) > 2, "no event was charged before the budget ran out"
        # A tier with concurrency limits: queries take and give back leases, a subscription
        # is refused (the tier allows none).
        for _ in range(3):
            assert post(client, "narrow", CHEAP) == 200
        ws_url = server.url.replace("http", "ws", 1) + "/graphql"
        refused = refused_subscription(ws_url, "narrow")
        payload = refused["payload"]
        errors = payload if refused["type"] == "error" else payload["errors"]
        assert [error["extensions"]["code"] for error in errors] == ["TOO_MANY_CONCURRENT"]
        identity_traffic()
        eventually(
            lambda: prom.query(
                f'sum(quotaql_requests_total{{job="{JOB}", decision=~"blocked|denied"}}) > 20'
            ),
            30,
            "blocked requests in Prometheus",
        )
        # Redis goes away: the limiter fails open, counts backend errors, opens its circuit.
        fresh_redis_server.kill()
        pair = staged_pair()
        for _ in range(6):
            for _ in range(10):
                assert post(client, "polite-1", CHEAP) == 200
            identity_traffic()  # an unknown key is refused even while failing open
            tuning_traffic(metrics)
            delay_traffic(metrics)
            recorded_traffic(metrics)
            internal_traffic(client, pair)
            time.sleep(1)

        values = {
            "job": JOB,
            "tier": ".*",
            "tenant": FLOODER,
            "__rate_interval": "20s",
            "__range": "5m",
        }
        queries = [
            substitute(expr, **values)
            for dashboard in (overview_dashboard(), tenant_dashboard())
            for expr in dashboard_queries(dashboard)
            # A Redis Cluster's redirections: none on this one server (their counts are
            # read as Prometheus reads them in tests/storage/test_cluster_pipeline.py).
            if names.PIPELINE_REDIRECTS_TOTAL not in expr
        ]
        assert len(queries) >= 40
        # Beyond "some data": each new kind of decision reached Prometheus.
        queries += [
            f'{metric}{{job="{JOB}", {label}="{value}"}} > 0'
            for metric, label, value in (
                ("quotaql_identity_total", "source", "anonymous"),
                ("quotaql_identity_total", "source", "rejected_key"),
                ("quotaql_identity_total", "source", "unverified_key"),
                ("quotaql_requests_total", "decision", "unknown_key"),
                ("quotaql_requests_total", "decision", "too_many_subscriptions"),
                ("quotaql_subscription_events_total", "decision", "allowed"),
                ("quotaql_subscription_events_total", "decision", "blocked"),
                ("quotaql_pressure", "source", "callable"),
                ("quotaql_adaptive_transitions_total", "to", "engaged"),
                ("quotaql_adaptive_multiplier", "tier", "free"),
                ("quotaql_requests_total", "decision", "too_many_concurrent"),
                ("quotaql_leases_total", "outcome", "taken"),
                ("quotaql_leases_total", "outcome", "released"),
                ("quotaql_refunds_total", "outcome", "queued"),
                ("quotaql_refunds_total", "outcome", "applied"),
                ("quotaql_pipeline_commands_total", "backend", "redis"),
                ("quotaql_pipeline_batches_total", "backend", "redis"),
                ("quotaql_delay_refused_total", "reason", "process_full"),
                ("quotaql_delay_refused_total", "reason", "queue"),
                ("quotaql_delay_refused_total", "reason", "sync"),
                ("quotaql_delay_cancelled_total", "tier", "free"),
                ("quotaql_overage_total", "tier", "greedy"),
                ("quotaql_quota_refusals_total", "quota", "time"),
                ("quotaql_root_field_requests_total", "decision", "blocked"),
                ("quotaql_operation_name_requests_total", "operation_name", "Named"),
                ("quotaql_tenant_requests_total", "tenant", FLOODER),
                ("quotaql_tenant_utilisation", "tenant", FLOODER),
                ("quotaql_config_info", "digest", metrics.routes._digest or "none"),
                ("quotaql_staged_total", "enforced", "true"),
                ("quotaql_staged_total", "enforced", "false"),
                ("quotaql_would_refuse_total", "cause", "share"),
                ("quotaql_quota_warnings_total", "tier", "free"),
                ("quotaql_resolver_seconds_count", "coordinate", "Query.products"),
            )
        ]
        # The tenant picker lists the flooder by its name, never its hash.
        (variable,) = [v for v in tenant_dashboard()["templating"]["list"] if v["name"] == "tenant"]
        selector = re.fullmatch(r"label_values\((.*), tenant\)", variable["query"])
        assert selector is not None, variable["query"]
        picker = prom.api("label/tenant/values", **{"match[]": substitute(selector[1], job=JOB)})
        assert FLOODER in picker, picker
        assert tenant_label(f"key:{FLOODER}") not in picker

        def empty() -> list[str]:
            return [query for query in queries if not prom.query(query)]

        missing = empty()
        deadline = time.monotonic() + 30
        while missing and time.monotonic() < deadline:
            # Still traffic while Prometheus is asked: a 20s rate of what stopped before the
            # first look ages out of its window on a busy machine.
            recorded_traffic(metrics)
            internal_traffic(client, pair)
            time.sleep(1)
            missing = empty()
        assert not missing, "dashboard queries without data:\n" + "\n".join(missing)

        def firing() -> set[str]:
            alerts = prom.api("alerts")["alerts"]
            return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

        def fired() -> set[str]:
            """Every alert that was firing at some point of the run: the identity traffic
            may have left the 20s windows by now, and a resolved alert leaves /alerts."""
            series = prom.query('max_over_time(ALERTS{alertstate="firing"}[5m])')
            return {entry["metric"]["alertname"] for entry in series}

        wanted = {"QuotaqlBlockSpike", "QuotaqlBackendErrors", "QuotaqlAdaptiveEngaged"}
        active = eventually(lambda: wanted <= firing() and firing(), 60, f"alerts {wanted}")
        assert wanted <= active
        assert "QuotaqlFailingOpen" in active
        assert "QuotaqlCircuitOpen" in active
        assert "QuotaqlMetricsAbsent" not in active
        eventually(lambda: fired() >= IDENTITY_ALERTS, 30, f"alerts {IDENTITY_ALERTS}")
        eventually(lambda: fired() >= DELAY_ALERTS, 30, f"alerts {DELAY_ALERTS}")
