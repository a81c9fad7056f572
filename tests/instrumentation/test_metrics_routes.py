"""Consumption by route (root fields, operation names), tenants' utilisation and the
configuration in force, read back from real prometheus-client registries (a private one, and
the files of real worker processes under multiprocess mode)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from quotaql.cost_analysis import analyze
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.instrumentation.routes import granted_rate
from quotaql.instrumentation.tenants import hashed
from quotaql.plugin import CostLimiter
from quotaql.policy.quota import Quota
from tests.adapters.strawberry.test_extension import context
from tests.support import strawberry_shop as shop

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

TOML = """
[tiers.free]
capacity = 100
refill_per_second = 0.5
[tenants.vip]
tier = "free"
[tenants.acme]
tier = "free"
"""
# 70 estimated, 16 actual (products and their reviews), plus hello (1 point, estimated 1).
SHOP = "query Shop { products(first: 10) { name reviews(first: 5) { stars } } hello }"
SCHEMA = build_schema("type Query { products: [Int] hello: String }")


def build(write_config: Callable[..., Path], **kwargs: Any) -> tuple[Any, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, **kwargs)
    limiter = CostLimiter.from_config(write_config(base=TOML), metrics=metrics)
    return shop.make_schema(limiter), registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def values(registry: CollectorRegistry, metric: str, label: str) -> set[str]:
    """Every value of ``label`` among the samples of ``metric`` (a family name)."""
    return {
        s.labels[label]
        for family in registry.collect()
        if family.name == metric
        for s in family.samples
        if label in s.labels
    }


# -- root fields ------------------------------------------------------------------------------


def test_root_fields_count_decisions_the_points_paid_and_worker_time(
    write_config: Callable[..., Path],
) -> None:
    schema, registry = build(write_config, tenant_allowlist=["vip"])
    result = schema.execute_sync(SHOP, context_value=context("vip"))
    assert result.errors is None

    for coordinate in ("Query.products", "Query.hello"):
        assert (
            sample(registry, names.ROOT_FIELD_REQUESTS_TOTAL, coordinate=coordinate,
                   decision="allowed") == 1
        )  # fmt: skip
    charged = sample(registry, names.COST_TOTAL, tier="free", outcome="charged")
    refunded = sample(registry, names.COST_TOTAL, tier="free", outcome="refunded")
    paid = {
        c: sample(registry, names.ROOT_FIELD_COST_TOTAL, coordinate=c)
        for c in ("Query.products", "Query.hello")
    }
    assert charged - refunded > 0
    assert sum(paid.values()) == pytest.approx(charged - refunded)
    # Shared in proportion to the fields' estimates, as the analysis prices them.
    roots = analyze(schema, SHOP).root_field_costs
    share = roots["Query.products"].cost / sum(root.cost for root in roots.values())
    assert paid["Query.products"] == pytest.approx((charged - refunded) * share)
    timed = sample(registry, f"{names.OPERATION_TIME}_count", operation_type="query", tier="free")
    for coordinate in ("Query.products", "Query.hello"):
        assert sample(registry, f"{names.ROOT_FIELD_TIME}_count", coordinate=coordinate) == timed
    assert timed == 1  # the worker time is measured by default (the time quota)


def test_points_are_shared_among_root_fields_by_their_estimated_cost() -> None:
    weighted = build_schema(
        "directive @cost(weight: String!) on FIELD_DEFINITION\n"
        'type Query { products: [Int] @cost(weight: "6") hello: String @cost(weight: "2") }'
    )
    report = analyze(weighted, "{ products hello }")  # 60 + 2 points
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.routes.record("allowed", report, 31.0, 0.002)
    metrics.routes.record("allowed", report, 0.0, None)  # paid nothing (shadow, validate)

    assert sample(registry, names.ROOT_FIELD_COST_TOTAL, coordinate="Query.products") == 30
    assert sample(registry, names.ROOT_FIELD_COST_TOTAL, coordinate="Query.hello") == 1
    assert sample(registry, f"{names.ROOT_FIELD_TIME}_count", coordinate="Query.hello") == 1
    assert (
        sample(
            registry, names.ROOT_FIELD_REQUESTS_TOTAL, coordinate="Query.hello", decision="allowed"
        )
        == 2
    )


def test_refusals_count_under_the_root_fields_the_operation_selected(
    write_config: Callable[..., Path],
) -> None:
    schema, registry = build(write_config)
    for _ in range(3):  # 100 points: 70 debited, 16 kept; then 70 more do not fit twice
        schema.execute_sync(SHOP, context_value=context("vip"))

    refused = sample(
        registry, names.ROOT_FIELD_REQUESTS_TOTAL, coordinate="Query.products", decision="blocked"
    )
    assert refused == sample(
        registry, names.REQUESTS_TOTAL, decision="blocked", operation_type="query", tier="free"
    )
    assert refused >= 1


def test_fields_a_client_invents_never_become_a_coordinate(
    write_config: Callable[..., Path],
) -> None:
    schema, registry = build(write_config)
    for index in range(50):
        result = schema.execute_sync(
            f"{{ field{index} products {{ name }} }}", context_value=context("vip")
        )
        assert result.errors  # does not validate: rejected, no plan, no root field

    assert values(registry, _family(names.ROOT_FIELD_REQUESTS_TOTAL), "coordinate") == set()
    rejected = [
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == names.REQUESTS_TOTAL and s.labels["decision"] == names.REJECTED
    ]
    assert sum(rejected) == 50


# -- operation names --------------------------------------------------------------------------


def test_operation_names_label_the_busiest_and_pay_what_they_paid(
    write_config: Callable[..., Path],
) -> None:
    schema, registry = build(write_config)
    schema.execute_sync(SHOP, context_value=context("vip"))
    schema.execute_sync("{ hello }", context_value=context("vip"))

    assert (
        sample(
            registry, names.OPERATION_NAME_REQUESTS_TOTAL, operation_name="Shop", decision="allowed"
        )
        == 1
    )
    assert (
        sample(
            registry,
            names.OPERATION_NAME_REQUESTS_TOTAL,
            operation_name=names.ANONYMOUS_OPERATION,
            decision="allowed",
        )
        == 1
    )
    shop_paid = sample(registry, names.OPERATION_NAME_COST_TOTAL, operation_name="Shop")
    paid_by_fields = sum(
        sample(registry, names.ROOT_FIELD_COST_TOTAL, coordinate=c)
        for c in ("Query.products", "Query.hello")
    )
    anonymous = sample(
        registry, names.OPERATION_NAME_COST_TOTAL, operation_name=names.ANONYMOUS_OPERATION
    )
    assert shop_paid > 0
    assert shop_paid + anonymous == pytest.approx(paid_by_fields)


def test_a_flood_of_invented_operation_names_does_not_grow_the_label_set() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, top_operations=3)
    popular = analyze(SCHEMA, "query Popular { products }")
    for _ in range(20):
        metrics.routes.record("allowed", popular, 3.0, 0.001)
    for index in range(3_000):  # an attacker: a new name with each request
        report = analyze(SCHEMA, f"query Op{index}x{index * 7919} {{ hello }}")
        metrics.routes.record("allowed", report, 1.0, 0.001)
    metrics.routes.record("blocked", analyze(SCHEMA, "{ hello }"), 0.0, None)

    for metric in (
        names.OPERATION_NAME_REQUESTS_TOTAL,
        names.OPERATION_NAME_COST_TOTAL,
        names.OPERATION_NAME_TIME,
    ):
        labels = values(registry, _family(metric), names.LABEL_OPERATION_NAME)
        assert "Popular" in labels
        assert names.OTHER_OPERATION in labels
        assert len(labels) <= 3 + 2, labels  # top_operations, other, (anonymous)
    # Every operation is counted, under its name or "other".
    total = sum(
        s.value
        for family in registry.collect()
        if family.name == _family(names.OPERATION_NAME_REQUESTS_TOTAL)
        for s in family.samples
        if s.name == names.OPERATION_NAME_REQUESTS_TOTAL
    )
    assert total == 20 + 3_000 + 1
    assert len(metrics.routes._labels) <= 3 + 1  # the names remembered: bounded too


def test_a_huge_operation_name_is_labelled_by_its_hash() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, top_operations=2)
    name = "Q" + "x" * 10_000
    metrics.routes.record("allowed", analyze(SCHEMA, f"query {name} {{ hello }}"), 1.0, None)

    labels = values(registry, _family(names.OPERATION_NAME_COST_TOTAL), "operation_name")
    assert labels == {hashed(name)}
    assert all(len(label) <= names.MAX_OPERATION_NAME for label in labels)


# -- utilisation ------------------------------------------------------------------------------


def test_utilisation_is_paid_over_what_the_tier_grants_for_labelled_tenants_only() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(
        registry, tenant_allowlist=["acme"], top_tenants=0, utilisation_window=0.5
    )
    metrics.operation("allowed", "query", "free", "key:acme", name="acme", charged=3, rate=10)
    metrics.operation("allowed", "query", "free", "key:acme", name="acme", charged=2, rate=10)
    for index in range(100):  # unlabelled tenants: no series, however many
        metrics.operation("allowed", "query", "free", f"key:t{index}", charged=50, rate=10)

    # 5 points over a window of 0.5 s of a tier granting 10 points/s: its contract, in full.
    assert sample(registry, names.TENANT_UTILISATION, tenant="acme") == pytest.approx(1.0, rel=0.05)
    assert values(registry, names.TENANT_UTILISATION, "tenant") == {"acme"}
    time.sleep(1.1)  # two windows later, nothing paid: a scrape brings it down to 0
    assert sample(registry, names.TENANT_UTILISATION, tenant="acme") == 0


def test_utilisation_through_the_limiter_uses_the_tier_s_refill_rate(
    write_config: Callable[..., Path],
) -> None:
    schema, registry = build(write_config, tenant_allowlist=["acme"])
    schema.execute_sync(SHOP, context_value=context("acme"))
    paid = sample(registry, names.COST_TOTAL, tier="free", outcome="charged") - sample(
        registry, names.COST_TOTAL, tier="free", outcome="refunded"
    )

    expected = paid / (0.5 * names.UTILISATION_WINDOW)  # refill_per_second = 0.5
    assert sample(registry, names.TENANT_UTILISATION, tenant="acme") == pytest.approx(
        expected, rel=0.01
    )
    assert granted_rate(Quota("w", limit=600, window_seconds=60, algorithm="fixed_window")) == 10


# -- the configuration in force ---------------------------------------------------------------


def test_config_loaded_sets_the_generation_and_one_digest() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    first, second = "a" * 64, "b" * 64

    metrics.config_loaded(1, first)
    assert sample(registry, names.CONFIG_GENERATION) == 1
    assert sample(registry, names.CONFIG_INFO, digest="a" * 12) == 1
    metrics.config_loaded(2, second)
    metrics.config_loaded(2, second)  # the same file again: nothing changes
    assert sample(registry, names.CONFIG_GENERATION) == 2
    assert values(registry, names.CONFIG_INFO, "digest") == {"b" * 12}


WORKER = textwrap.dedent(
    """
    import sys
    from quotaql.instrumentation.metrics import PrometheusMetrics
    metrics = PrometheusMetrics()
    for generation, digest in enumerate(sys.argv[1:], start=1):
        metrics.config_loaded(generation, digest)
    print("ready", flush=True)
    sys.stdin.readline()  # stays alive until the test has read its files
    """
)


def test_multiprocess_mode_shows_each_worker_s_generation_and_digest(tmp_path: Path) -> None:
    directory = tmp_path / "prometheus-multiproc"
    directory.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    old, new = "0" * 64, "f" * 64
    workers = [
        subprocess.Popen(
            [sys.executable, "-W", "error", "-c", WORKER, *digests],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for digests in ((old,), (old, new))  # the second reloaded, the first did not
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline() == "ready\n"
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
        first, second = (str(worker.pid) for worker in workers)

        assert sample(registry, names.CONFIG_GENERATION, pid=first) == 1
        assert sample(registry, names.CONFIG_GENERATION, pid=second) == 2
        assert sample(registry, names.CONFIG_INFO, pid=first, digest=old[:12]) == 1
        assert sample(registry, names.CONFIG_INFO, pid=second, digest=new[:12]) == 1
        assert sample(registry, names.CONFIG_INFO, pid=second, digest=old[:12]) == 0
        running = {
            s.labels["digest"]
            for family in registry.collect()
            if family.name == names.CONFIG_INFO
            for s in family.samples
            if s.value == 1
        }
        assert running == {old[:12], new[:12]}  # two files: what QuotaqlConfigDrift counts
    finally:
        for worker in workers:
            if worker.stdin is not None:
                worker.stdin.close()
            assert worker.wait(timeout=60) == 0
            if worker.stdout is not None:
                worker.stdout.close()


def _family(metric: str) -> str:
    """The family name prometheus-client collects a counter under (without ``_total``)."""
    return metric.removesuffix("_total")


ROUTES_WORKER = textwrap.dedent(
    """
    import sys
    from graphql import build_schema
    from quotaql.cost_analysis import analyze
    from quotaql.instrumentation.metrics import PrometheusMetrics
    metrics = PrometheusMetrics()
    report = analyze(build_schema("type Query { hello: String }"), "query Hi { hello }")
    for _ in range(int(sys.argv[1])):
        metrics.routes.record("allowed", report, 2.0, 0.003)
    metrics.flush(final=True)  # what a worker calls when it stops
    """
)


def test_multiprocess_mode_sums_the_workers_route_tallies(tmp_path: Path) -> None:
    directory = tmp_path / "prometheus-multiproc"
    directory.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    for count in ("3", "4"):
        subprocess.run(
            [sys.executable, "-W", "error", "-c", ROUTES_WORKER, count],
            env=env,
            check=True,
            timeout=60,
        )
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]

    assert (
        sample(
            registry, names.ROOT_FIELD_REQUESTS_TOTAL, coordinate="Query.hello", decision="allowed"
        )
        == 7
    )
    assert sample(registry, names.OPERATION_NAME_COST_TOTAL, operation_name="Hi") == 14
    assert sample(registry, f"{names.OPERATION_NAME_TIME}_bucket", operation_name="Hi",
                  le="0.005") == 7  # fmt: skip
    assert sample(registry, f"{names.OPERATION_NAME_TIME}_bucket", operation_name="Hi",
                  le="0.0025") == 0  # fmt: skip
