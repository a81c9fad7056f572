"""The tuning metrics (list sizes, estimate ratios), read back from real prometheus-client
registries: the text a scrape serves, prometheus-client's own parser, its multiprocess mode."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import threading
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics

if TYPE_CHECKING:
    from pathlib import Path

TUNING = (
    names.LIST_RETURNED_ITEMS,
    names.LIST_OPERATION_MAX_ITEMS,
    names.LIST_ASSUMED_ITEMS,
    names.LIST_MAX_RETURNED_ITEMS,
    names.LIST_SLICED_RATIO,
    names.COST_ESTIMATE_RATIO,
)


def new() -> tuple[PrometheusMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return PrometheusMetrics(registry), registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def buckets(registry: CollectorRegistry, metric: str, coordinate: str) -> dict[str, float]:
    """``{le: cumulative count}`` of one coordinate's histogram, from the served text."""
    text = generate_latest(registry).decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{metric}_bucket" and sample.labels["coordinate"] == coordinate:
                found[sample.labels["le"]] = sample.value
    return found


def tuning_samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of the tuning metrics as a scrape serves them (no ``_created``)."""
    text = generate_latest(registry).decode()
    return sorted(
        (
            (sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name.startswith(TUNING) and not sample.name.endswith("_created")
        ),
        key=lambda sample: (sample[0], sorted(sample[1].items())),
    )


# -- list_sizes ------------------------------------------------------------------------------


def test_unsliced_lists_feed_the_size_histograms_and_gauges() -> None:
    metrics, registry = new()
    # One operation: 3 products (assumed 10), with 0, 4 and 12 reviews (assumed 5 each).
    metrics.list_sizes(
        [
            ("Query.products", 10, 3, False),
            ("Product.reviews", 5, 0, False),
            ("Product.reviews", 5, 4, False),
            ("Product.reviews", 5, 12, False),
        ]
    )
    # A second one: a single product with 7 reviews.
    metrics.list_sizes([("Query.products", 10, 1, False), ("Product.reviews", 5, 7, False)])

    reviews = buckets(registry, names.LIST_RETURNED_ITEMS, "Product.reviews")
    assert reviews["0.0"] == 1
    assert reviews["3.0"] == 1
    assert reviews["5.0"] == 2  # 0 and 4
    assert reviews["8.0"] == 3  # and 7
    assert reviews["15.0"] == 4  # and 12
    assert reviews["+Inf"] == 4
    assert value(registry, f"{names.LIST_RETURNED_ITEMS}_sum", coordinate="Product.reviews") == 23
    # Per operation, the longest list of each coordinate: 12, then 7.
    longest = buckets(registry, names.LIST_OPERATION_MAX_ITEMS, "Product.reviews")
    assert (longest["5.0"], longest["8.0"], longest["15.0"], longest["+Inf"]) == (0, 1, 2, 2)
    assert (
        value(registry, f"{names.LIST_OPERATION_MAX_ITEMS}_sum", coordinate="Product.reviews") == 19
    )
    assert value(registry, names.LIST_ASSUMED_ITEMS, coordinate="Product.reviews") == 5
    assert value(registry, names.LIST_ASSUMED_ITEMS, coordinate="Query.products") == 10
    assert value(registry, names.LIST_MAX_RETURNED_ITEMS, coordinate="Product.reviews") == 12
    assert value(registry, names.LIST_MAX_RETURNED_ITEMS, coordinate="Query.products") == 3
    # Nothing was sliced.
    assert buckets(registry, names.LIST_SLICED_RATIO, "Product.reviews") == {}


def test_the_assumed_gauge_follows_the_latest_list_and_the_maximum_never_falls() -> None:
    metrics, registry = new()
    metrics.list_sizes([("Query.orders", 10, 40, False)])
    metrics.list_sizes([("Query.orders", 25, 2, False)])  # the config was reloaded

    assert value(registry, names.LIST_ASSUMED_ITEMS, coordinate="Query.orders") == 25
    assert value(registry, names.LIST_MAX_RETURNED_ITEMS, coordinate="Query.orders") == 40


def test_sliced_lists_feed_the_ratio_histogram_only() -> None:
    metrics, registry = new()
    metrics.list_sizes(
        [
            ("Query.products", 20, 20, True),  # 1.0
            ("Query.products", 20, 5, True),  # 0.25
            ("Query.products", 4, 6, True),  # 1.5: the resolver returned more than asked
            ("Query.products", 0, 0, True),  # asked for none, got none: 1.0
            ("Query.products", 0, 3, True),  # asked for none, got 3: the cap
        ]
    )

    ratio = buckets(registry, names.LIST_SLICED_RATIO, "Query.products")
    assert ratio["0.25"] == 1
    assert ratio["1.0"] == 3
    assert ratio["1.5"] == 4
    assert ratio["10.0"] == 4
    assert ratio["+Inf"] == 5
    total = value(registry, f"{names.LIST_SLICED_RATIO}_sum", coordinate="Query.products")
    assert total == 1 + 0.25 + 1.5 + 1 + names.RATIO_CAP
    assert buckets(registry, names.LIST_RETURNED_ITEMS, "Query.products") == {}
    assert value(registry, names.LIST_ASSUMED_ITEMS, coordinate="Query.products") is None


def test_long_lists_fall_in_the_inf_bucket_and_floats_where_observe_puts_them() -> None:
    metrics, registry = new()
    metrics.list_sizes(
        [
            ("Query.log", 10, 10_000, False),
            ("Query.log", 10, 10_001, False),
            ("Query.log", 10, 10**12, False),
            ("Query.log", 10, 2.5, False),  # not an int: bucket 3
        ]
    )

    log = buckets(registry, names.LIST_RETURNED_ITEMS, "Query.log")
    assert (log["2.0"], log["3.0"], log["10000.0"], log["+Inf"]) == (0, 1, 2, 4)
    assert value(registry, names.LIST_MAX_RETURNED_ITEMS, coordinate="Query.log") == 10**12


def test_invalid_observations_are_ignored() -> None:
    metrics, registry = new()
    nan, inf = math.nan, math.inf
    metrics.list_sizes(
        [
            ("Query.a", 10, -1, False),
            ("Query.a", 10, nan, False),  # type: ignore[list-item]
            ("Query.a", 10, inf, False),  # type: ignore[list-item]
            ("Query.a", nan, 3, False),
            ("Query.a", -5, 3, False),
            ("Query.a", inf, 3, True),
            ("Query.a", 5, nan, True),  # type: ignore[list-item]
            ("Query.a", 5, -2, True),
        ]
    )
    metrics.list_sizes([])

    assert tuning_samples(registry) == []
    metrics.list_sizes([("Query.a", 10, 3, False)])
    assert buckets(registry, names.LIST_RETURNED_ITEMS, "Query.a")["+Inf"] == 1


def test_the_only_label_is_the_coordinate_and_series_do_not_grow_with_traffic() -> None:
    metrics, registry = new()
    coordinates = ["Query.products", "Product.reviews", "Review.comments"]
    for i in range(2_000):  # many operations of every shape
        metrics.list_sizes(
            [(coordinates[i % 3], 10, i % 50, False), (coordinates[(i + 1) % 3], 5, i % 7, True)]
        )
        metrics.estimate("query", "free", 10 + i, i)
    samples = tuning_samples(registry)

    for name, labels, _ in samples:
        if name.startswith(names.COST_ESTIMATE_RATIO):
            assert set(labels) - {"le"} == {"operation_type", "tier"}, name
        else:
            assert set(labels) - {"le"} == {"coordinate"}, name
    assert {labels["coordinate"] for _, labels, _ in samples if "coordinate" in labels} == set(
        coordinates
    )
    # Per coordinate: 23 buckets + count + sum for each of the three histograms, two gauges.
    edges = len(names.LIST_SIZE_BUCKETS) + 1
    ratio_edges = len(names.RATIO_BUCKETS) + 1
    assert len(samples) == 3 * (2 * (edges + 2) + 2 + ratio_edges + 2) + (ratio_edges + 2)


def test_a_scrape_sees_every_call_before_it_and_flush_adds_the_tallies() -> None:
    metrics, registry = new()
    metrics.list_sizes([("Query.a", 10, 1, False)])  # the first call adds at once
    metrics.list_sizes([("Query.a", 10, 2, False)])  # the next ones wait (up to a second)
    children = metrics.list_returned.labels("Query.a")
    assert children._sum.get() == 1  # prometheus-client's own value: not yet added

    metrics.flush()
    assert children._sum.get() == 3
    metrics.list_sizes([("Query.a", 10, 4, False)])
    # Collecting the registry adds what waits before it reads the values.
    assert value(registry, f"{names.LIST_RETURNED_ITEMS}_sum", coordinate="Query.a") == 7
    assert value(registry, f"{names.LIST_RETURNED_ITEMS}_count", coordinate="Query.a") == 3


def test_a_restricted_registry_sees_the_calls_too() -> None:
    metrics, registry = new()
    metrics.list_sizes([("Query.a", 10, 1, False)])
    metrics.list_sizes([("Query.a", 10, 2, False)])
    restricted = registry.restricted_registry([f"{names.LIST_RETURNED_ITEMS}_count"])

    text = generate_latest(restricted).decode()  # type: ignore[arg-type]
    assert f'{names.LIST_RETURNED_ITEMS}_count{{coordinate="Query.a"}} 2.0' in text


OBSERVATION = st.tuples(
    st.sampled_from(["Query.a", "Query.b", "B.c"]),
    st.one_of(st.integers(0, 100), st.floats(0, 50)),
    st.one_of(st.integers(0, 20_000), st.integers(-3, -1), st.floats(0, 30)),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(OBSERVATION, max_size=30), max_size=6))
def test_tallies_equal_one_observe_per_list(operations: list[list[tuple]]) -> None:  # type: ignore[type-arg]
    """The tallied path, the observe() fallback and plain prometheus-client histograms fed
    one observe() per list give the same samples."""
    fast, fast_registry = new()
    slow, slow_registry = new()
    slow._bulk = False  # as where prometheus-client's histograms lacked the bucket values
    reference = CollectorRegistry()
    returned = Histogram(
        names.LIST_RETURNED_ITEMS, "", ["coordinate"], buckets=names.LIST_SIZE_BUCKETS,
        registry=reference,
    )  # fmt: skip
    longest = Histogram(
        names.LIST_OPERATION_MAX_ITEMS, "", ["coordinate"], buckets=names.LIST_SIZE_BUCKETS,
        registry=reference,
    )  # fmt: skip
    ratio = Histogram(
        names.LIST_SLICED_RATIO, "", ["coordinate"], buckets=names.RATIO_BUCKETS,
        registry=reference,
    )  # fmt: skip
    for operation in operations:
        fast.list_sizes(operation)
        slow.list_sizes(operation)
        maxima: dict[str, float] = {}
        for coordinate, assumed, items, sliced in operation:
            if items < 0:
                continue
            if sliced:
                share = 1.0 if assumed == 0 and items == 0 else items / assumed if assumed else 1e3
                ratio.labels(coordinate).observe(min(share, names.RATIO_CAP))
            else:
                returned.labels(coordinate).observe(items)
                maxima[coordinate] = max(maxima.get(coordinate, -1), items)
        for coordinate, items in maxima.items():
            longest.labels(coordinate).observe(items)

    histograms = [
        s for s in tuning_samples(fast_registry) if not s[0].startswith(names.LIST_ASSUMED_ITEMS)
        and not s[0].startswith(names.LIST_MAX_RETURNED_ITEMS)
    ]  # fmt: skip
    same(histograms, tuning_samples(reference))
    same(tuning_samples(fast_registry), tuning_samples(slow_registry))


def same(
    found: list[tuple[str, dict[str, str], float]],
    expected: list[tuple[str, dict[str, str], float]],
) -> None:
    """The same samples; the sums of floats may differ in their last bits (another order)."""
    assert [(name, labels) for name, labels, _ in found] == [
        (name, labels) for name, labels, _ in expected
    ]
    assert [v for _, _, v in found] == pytest.approx([v for _, _, v in expected], rel=1e-12)


def test_threads_lose_no_list() -> None:
    metrics, registry = new()

    def work() -> None:
        for i in range(500):
            metrics.list_sizes([("Query.a", 10, i % 20, False), ("Query.b", 5, 3, True)])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert value(registry, f"{names.LIST_RETURNED_ITEMS}_count", coordinate="Query.a") == 2_000
    assert value(registry, f"{names.LIST_RETURNED_ITEMS}_sum", coordinate="Query.a") == 4 * sum(
        i % 20 for i in range(500)
    )
    assert value(registry, f"{names.LIST_OPERATION_MAX_ITEMS}_count", coordinate="Query.a") == 2_000
    assert value(registry, f"{names.LIST_SLICED_RATIO}_count", coordinate="Query.b") == 2_000
    assert value(registry, names.LIST_MAX_RETURNED_ITEMS, coordinate="Query.a") == 19


# -- estimate ------------------------------------------------------------------------------


def test_estimate_records_actual_over_estimated_per_operation_type_and_tier() -> None:
    metrics, registry = new()
    metrics.estimate("query", "free", 70, 16)  # 0.23
    metrics.estimate("query", "free", 10, 10)  # 1.0
    metrics.estimate("query", "free", 10, 30)  # 3.0: under-estimated
    metrics.estimate("query", "free", 0, 0)  # nothing either way: 1.0
    metrics.estimate("query", "free", 0, 5)  # estimated nothing, cost something: the cap
    metrics.estimate("mutation", "pro", 20, 10)
    for bad in ((math.nan, 1), (1, math.nan), (-1, 1), (1, -1), (math.inf, 1), (1, math.inf)):
        metrics.estimate("query", "free", *bad)

    def bucket(le: str, operation_type: str = "query", tier: str = "free") -> float | None:
        return value(
            registry,
            f"{names.COST_ESTIMATE_RATIO}_bucket",
            operation_type=operation_type,
            tier=tier,
            le=le,
        )

    assert (bucket("0.1"), bucket("0.25"), bucket("1.0"), bucket("5.0"), bucket("+Inf")) == (
        0,
        1,
        3,
        4,
        5,
    )
    query_free = {"operation_type": "query", "tier": "free"}
    total = value(registry, f"{names.COST_ESTIMATE_RATIO}_sum", **query_free)
    assert total == pytest.approx(16 / 70 + 1 + 3 + 1 + names.RATIO_CAP)
    assert bucket("0.5", "mutation", "pro") == 1


# -- multiprocess mode -----------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import sys, time
    from quotaql.instrumentation.metrics import PrometheusMetrics
    metrics = PrometheusMetrics()
    items = int(sys.argv[1])
    metrics.list_sizes([("Query.a", int(sys.argv[2]), items, False), ("Query.b", 4, 2, True)])
    metrics.list_sizes([("Query.a", int(sys.argv[2]), items, False)])
    metrics.estimate("query", "free", 10, 5)
    if sys.argv[3] == "flush":
        metrics.flush()
    else:  # the periodic addition: a call more than a second after the first
        time.sleep(1.05)
        metrics.list_sizes([])
    """
)


def test_multiprocess_mode_sums_the_workers_lists(tmp_path: Path) -> None:
    directory = tmp_path / "prometheus-multiproc"
    directory.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    for argv in (["3", "10", "flush"], ["40", "20", "wait"]):  # two real worker processes
        subprocess.run([sys.executable, "-c", WORKER, *argv], env=env, check=True, timeout=60)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))

    a = {"coordinate": "Query.a"}
    assert registry.get_sample_value(f"{names.LIST_RETURNED_ITEMS}_count", a) == 4
    assert registry.get_sample_value(f"{names.LIST_RETURNED_ITEMS}_sum", a) == 86
    assert registry.get_sample_value(f"{names.LIST_OPERATION_MAX_ITEMS}_count", a) == 4
    assert registry.get_sample_value(f"{names.LIST_MAX_RETURNED_ITEMS}", a) == 40  # max
    assert registry.get_sample_value(f"{names.LIST_ASSUMED_ITEMS}", a) == 20  # most recent
    b = {"coordinate": "Query.b", "le": "0.5"}
    assert registry.get_sample_value(f"{names.LIST_SLICED_RATIO}_bucket", b) == 2
    query_free = {"operation_type": "query", "tier": "free"}
    assert registry.get_sample_value(f"{names.COST_ESTIMATE_RATIO}_count", query_free) == 2
