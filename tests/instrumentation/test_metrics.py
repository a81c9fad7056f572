"""Metrics of the extension and the limiter, read back from a real prometheus-client registry."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.errors import CostAnalysisError, LimitExceeded
from quotaql.instrumentation import instruments, names
from quotaql.instrumentation.metrics import PrometheusMetrics, TenantLabels, metrics_app
from quotaql.instrumentation.tenants import hashed
from quotaql.plugin import CostLimiter
from tests.adapters.strawberry.test_extension import EXPENSIVE, _dead_redis_storage, context
from tests.support import strawberry_shop as shop
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

TOML = """
[limits]
{extra}
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tenants.vip]
tier = "free"
[tenants.x]
tier = "free"
[tenants.t]
tier = "free"
"""


def build(
    write_config: Callable[..., Path], extra: str = "", **kwargs: Any
) -> tuple[Any, CollectorRegistry]:
    registry = CollectorRegistry()
    limiter = CostLimiter.from_config(
        write_config(base=TOML.format(extra=extra)),
        metrics=PrometheusMetrics(registry, tenant_allowlist=["key:vip"]),
        **kwargs,
    )
    return shop.make_schema(limiter), registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def requests(registry: CollectorRegistry, decision: str, operation_type: str = "query") -> float:
    return sample(
        registry,
        names.REQUESTS_TOTAL,
        decision=decision,
        operation_type=operation_type,
        tier="free",
    )


def test_allowed_blocked_and_rejected_operations_are_counted(
    write_config: Callable[..., Path],
) -> None:
    schema, registry = build(write_config)
    for _ in range(4):  # 70 up front, 16 in the end: 100 -> 84 -> 68; the next two are refused
        schema.execute_sync(EXPENSIVE, context_value=context("vip"))
    assert requests(registry, names.ALLOWED) == 2
    assert requests(registry, names.BLOCKED) == 1  # by the budget
    assert requests(registry, names.DENIED) == 1  # the same again, by the deny cache
    schema.execute_sync(
        "query Q($n: Int!) { products(first: $n) { name } }", context_value=context("x")
    )
    assert requests(registry, names.REJECTED) == 1
    # Cost histograms: 4 estimates of 70 (refused ones too), 2 actual costs of 16.
    query_free = {"operation_type": "query", "tier": "free"}
    assert sample(registry, f"{names.QUERY_COST}_count", **query_free) == 4
    assert sample(registry, f"{names.QUERY_COST}_sum", **query_free) == 280
    assert sample(registry, f"{names.QUERY_ACTUAL_COST}_sum", **query_free) == 32
    assert sample(registry, f"{names.QUERY_DEPTH}_count", operation_type="query") == 4
    # Two of 70, and the minimum charge (1) of the rejected one.
    assert sample(registry, names.COST_TOTAL, tier="free", outcome="charged") == 141
    assert sample(registry, names.COST_TOTAL, tier="free", outcome="refunded") == 108
    # The limiter's decisions are timed, under the backend that made them: two allowed, one
    # refused, the rejected one's minimum charge (the denied one asked nothing).
    assert sample(registry, f"{names.CHECK_DURATION}_count", backend="memory") == 4
    # Tenants: the allowlisted one by name, the others as "other" (no top-N here).
    assert sample(registry, names.TENANT_REQUESTS_TOTAL, tenant="key:vip", decision="allowed") == 2
    assert sample(registry, names.TENANT_REQUESTS_TOTAL, tenant="other", decision="rejected") == 1


def test_rejections_are_counted_by_their_code(write_config: Callable[..., Path]) -> None:
    schema, registry = build(write_config)

    def rejections(code: str) -> float:
        return sample(registry, names.REJECTIONS_TOTAL, code=code)

    # Every code is exported from the start (at 0), so that increase() sees the first one.
    assert [rejections(code) for code in names.REJECTION_CODES] == [0.0] * len(
        names.REJECTION_CODES
    )
    too_many = "query Q($v: Int) { products(first: $v) { name } }"
    for _ in range(2):
        schema.execute_sync(too_many, variable_values={"v": list(range(5_000))},
                            context_value=context("x"))  # fmt: skip
    schema.execute_sync("query Q($n: Int!) { products(first: $n) { name } }",
                        context_value=context("x"))  # fmt: skip
    schema.execute_sync("{ products(first: 1) { nope } }", context_value=context("x"))
    schema.execute_sync(too_many, variable_values={"v": 1}, context_value=context("x"))
    assert rejections(names.TOO_MANY_VARIABLE_VALUES) == 2
    assert rejections("BAD_USER_INPUT") == 1
    assert rejections(names.GRAPHQL_VALIDATION_FAILED) == 1
    assert requests(registry, names.REJECTED) == 3
    assert requests(registry, names.REJECTED, "unknown") == 1  # the document never validated
    assert requests(registry, names.ALLOWED) == 1
    # Each paid the minimum charge (1); the allowed one its price (2, refunded to 2).
    assert sample(registry, names.COST_TOTAL, tier="free", outcome="charged") == 4 + 2


def test_a_rejection_of_an_unknown_code_counts_as_other() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.rejection("SOMETHING_A_CLIENT_MADE_UP")
    metrics.rejection(None)
    assert sample(registry, names.REJECTIONS_TOTAL, code=names.OTHER_CODE) == 1
    assert sample(registry, names.REJECTIONS_TOTAL, code=names.GRAPHQL_VALIDATION_FAILED) == 1


def test_field_pairs_and_introspection_rejections_are_counted_by_their_code(
    write_config: Callable[..., Path],
) -> None:
    schema, registry = build(write_config, '[cost]\nintrospection = "off"')
    spreads = "{ hello " + " ".join(f"...X{i}" for i in range(70)) + " }"
    for document in (spreads, spreads, "{ __schema { queryType { name } } }"):
        assert schema.execute_sync(document, context_value=context("x")).errors
    assert sample(registry, names.REJECTIONS_TOTAL, code="TOO_MANY_FIELD_PAIRS") == 2
    assert sample(registry, names.REJECTIONS_TOTAL, code="INTROSPECTION_DISABLED") == 1


def test_every_code_the_analysis_raises_is_a_rejection_code() -> None:
    def codes(error: type[CostAnalysisError]) -> set[str]:
        return {error.code}.union(*(codes(sub) for sub in error.__subclasses__()))

    abstract = {CostAnalysisError.code, LimitExceeded.code}  # never raised themselves
    assert codes(CostAnalysisError) - abstract <= set(names.REJECTION_CODES)


def test_build_info_is_one(write_config: Callable[..., Path]) -> None:
    _, registry = build(write_config)
    (metric,) = [m for m in registry.collect() if m.name == names.BUILD_INFO]
    (value,) = metric.samples
    assert value.value == 1
    assert value.labels["version"]


def test_shadow_blocked_is_counted_and_not_charged(write_config: Callable[..., Path]) -> None:
    schema, registry = build(write_config, 'mode = "shadow"\nrefund_unused = false')
    for _ in range(3):  # 70 each: the second and third would be refused
        assert schema.execute_sync(EXPENSIVE, context_value=context("t")).errors is None
    assert requests(registry, names.ALLOWED) == 1
    assert requests(registry, names.SHADOW_BLOCKED) == 2
    assert sample(registry, names.COST_TOTAL, tier="free", outcome="charged") == 70


@pytest.mark.parametrize(("mode", "decision"), [("open", "fail_open"), ("closed", "fail_closed")])
def test_a_dead_redis_is_counted_as_backend_errors_and_fail_modes(
    write_config: Callable[..., Path], mode: str, decision: str
) -> None:
    schema, registry = build(
        write_config, f'on_backend_error = "{mode}"', storage=_dead_redis_storage()
    )
    for _ in range(5):
        schema.execute_sync("{ hello }", context_value=context("t"))
    assert requests(registry, decision) == 5
    errors = sum(
        s.value
        for m in registry.collect()
        if m.name == names.BACKEND_ERRORS_TOTAL.removesuffix("_total")
        for s in m.samples
        if s.name == names.BACKEND_ERRORS_TOTAL and s.labels["backend"] == "redis"
    )
    assert 1 <= errors < 5  # the breaker opened: not every request paid a call
    assert sample(registry, names.CIRCUIT_OPEN, backend="redis") == 1
    assert sample(registry, names.COST_TOTAL, tier="free", outcome="charged") == 0


def test_tenant_labels_stay_bounded_under_rotating_keys() -> None:
    labels = TenantLabels(allowlist=["acme"], top_n=5)
    seen = {labels.label(f"key-{i % 997}-{i}") for i in range(20_000)}
    seen |= {labels.label("acme")}
    for _ in range(50):  # a heavy tenant after the set is full gets no label of its own
        labels.label("heavy")
    assert "acme" in seen
    assert len(seen) <= 1 + 5 + 1  # allowlist, top-N, "other"
    assert labels.label("heavy") == names.OTHER_TENANT


def test_an_allowlist_of_tenant_names_labels_them_by_name(
    write_config: Callable[..., Path],
) -> None:
    """The form docs/observability.md shows: ``tenant_allowlist=["vip"]``, the [tenants]
    name, labels the tenant ``vip`` (not a hash); an unlisted tenant whose name is its API
    key stays hashed among the top-N."""
    registry = CollectorRegistry()
    limiter = CostLimiter.from_config(
        write_config(base=TOML.format(extra="")),
        metrics=PrometheusMetrics(registry, tenant_allowlist=["vip"], top_tenants=5),
    )
    schema = shop.make_schema(limiter)
    for tenant in ("vip", "x"):
        schema.execute_sync("{ products(first: 1) { name } }", context_value=context(tenant))
    assert sample(registry, names.TENANT_REQUESTS_TOTAL, tenant="vip", decision="allowed") == 1
    labels = {
        sample.labels["tenant"]
        for metric in registry.collect()
        if metric.name == names.TENANT_REQUESTS_TOTAL.removesuffix("_total")
        for sample in metric.samples
    }
    assert labels == {"vip", hashed("key:x")}


def test_top_n_tenants_get_a_hashed_label() -> None:
    labels = TenantLabels(top_n=2)
    first = labels.label("sk_live_secret_key")
    assert first.startswith("h:")
    assert "secret" not in first
    assert labels.label("sk_live_secret_key") == first  # stable


def test_metrics_app_serves_the_registry_over_http(write_config: Callable[..., Path]) -> None:
    schema, registry = build(write_config)
    app = Starlette(routes=[Mount("/metrics", metrics_app(registry)), Mount("/", GraphQL(schema))])
    with UvicornServer(app) as server:
        ok = httpx.post(f"{server.url}/graphql", json={"query": "{ hello }"}, timeout=10)
        assert ok.status_code == 200
        text = httpx.get(f"{server.url}/metrics/", timeout=10).text
    assert (
        'quotaql_requests_total{decision="allowed",operation_type="query",tier="free"} 1.0' in text
    )
    assert "quotaql_check_duration_seconds_bucket" in text


WORKER = textwrap.dedent(
    """
    import sys
    from quotaql.instrumentation.metrics import PrometheusMetrics
    metrics = PrometheusMetrics()
    for _ in range(int(sys.argv[1])):
        metrics.operation("allowed", "query", "free", "t", cost=5, charged=5)
    metrics.circuit("redis", sys.argv[1] == "3")
    """
)


def test_multiprocess_mode_sums_two_worker_processes(tmp_path: Path) -> None:
    directory = tmp_path / "prometheus-multiproc"
    directory.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    for count in ("3", "4"):  # two real worker processes, one after the other
        subprocess.run([sys.executable, "-c", WORKER, count], env=env, check=True, timeout=60)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    labels = {"decision": "allowed", "operation_type": "query", "tier": "free"}
    assert registry.get_sample_value(names.REQUESTS_TOTAL, labels) == 7
    assert registry.get_sample_value(names.COST_TOTAL, {"tier": "free", "outcome": "charged"}) == 35
    assert registry.get_sample_value(names.CIRCUIT_OPEN, {"backend": "redis"}) == 1  # max


def test_the_instrument_table_builds_every_metric_as_the_attribute_declared() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    kinds = {"Counter", "Gauge", "Histogram"}
    declared = {
        attribute: kind
        for attribute, kind in instruments.Instruments.__annotations__.items()
        if kind in kinds
    }
    rows = instruments.EVERY_INSTRUMENT

    assert declared == {row.attribute: row.kind.capitalize() for row in rows}
    assert len({row.name for row in rows}) == len(rows)
    for row in rows:
        assert type(getattr(metrics, row.attribute)).__name__ == row.kind.capitalize()
    exported = {family.name for family in registry.collect()}
    assert exported == {row.name.removesuffix("_total") for row in rows}


def test_an_unknown_graphql_cost_value_is_counted_as_a_rejection_by_its_code(
    write_config: Callable[..., Path],
) -> None:
    from graphql import parse

    from quotaql.gate import Gate

    registry = CollectorRegistry()
    gate = Gate.from_config(
        write_config(base=TOML.format(extra="")), metrics=PrometheusMetrics(registry)
    )
    request = {"type": "http", "client": ("203.0.113.9", 1),
               "headers": [(b"x-api-key", b"vip"), (b"graphql-cost", b"estimate")]}  # fmt: skip
    op = gate.admit(shop.make_schema(), parse("{ hello }"), request=request)
    assert (op.code, op.status) == ("BAD_COST_HEADER", 400)
    gate.finish(op)
    assert sample(registry, names.REJECTIONS_TOTAL, code="BAD_COST_HEADER") == 1
