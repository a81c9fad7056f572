"""The delay metrics (``on_limit = "delay"``), read back from real prometheus-client registries:
a private one, the text a scrape serves, and the multiprocess mode's files of real workers."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import DELAY_BUCKETS, PrometheusMetrics

if TYPE_CHECKING:
    from pathlib import Path


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def bucket(registry: CollectorRegistry, tier: str, le: str) -> float | None:
    return sample(registry, f"{names.DELAY_SECONDS}_bucket", tier=tier, le=le)


def test_delays_are_observed_per_tier_in_the_delay_buckets() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    for seconds in (0.004, 0.3, 1.0, 1.2, 45.0, 120.0):
        metrics.delayed("free", seconds)
    metrics.delayed("pro", 0.02)

    assert DELAY_BUCKETS == (
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    )  # fmt: skip
    assert sample(registry, f"{names.DELAY_SECONDS}_count", tier="free") == 6
    assert sample(registry, f"{names.DELAY_SECONDS}_sum", tier="free") == (
        0.004 + 0.3 + 1.0 + 1.2 + 45.0 + 120.0
    )
    assert bucket(registry, "free", "0.005") == 1
    assert bucket(registry, "free", "0.25") == 1
    assert bucket(registry, "free", "1.0") == 3  # an edge is in its own bucket: le is <=
    assert bucket(registry, "free", "2.5") == 4
    assert bucket(registry, "free", "60.0") == 5
    assert bucket(registry, "free", "+Inf") == 6
    assert bucket(registry, "pro", "0.01") == 0
    assert bucket(registry, "pro", "0.025") == 1
    assert sample(registry, f"{names.DELAY_SECONDS}_count", tier="pro") == 1
    # the buckets are exactly those: no edge in between
    edges = {
        s.labels["le"]
        for family in registry.collect()
        if family.name == names.DELAY_SECONDS
        for s in family.samples
        if s.name.endswith("_bucket") and s.labels["tier"] == "free"
    }
    assert edges == {*(str(float(edge)) for edge in DELAY_BUCKETS), "+Inf"}


def test_a_negative_delay_counts_as_none_and_a_nan_one_is_ignored() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    metrics.delayed("free", -0.001)  # a deadline a hair in the past
    metrics.delayed("free", math.nan)
    metrics.delayed("free", math.inf)

    assert sample(registry, f"{names.DELAY_SECONDS}_count", tier="free") == 1
    assert sample(registry, f"{names.DELAY_SECONDS}_sum", tier="free") == 0
    assert bucket(registry, "free", "0.005") == 1


def test_refusals_are_counted_by_tier_and_reason_every_reason_from_zero() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    assert names.DELAY_REFUSED_REASONS == ("queue", "process_full", "sync", "subject_full")
    metrics.delay_refused("free", names.DELAY_QUEUE)
    metrics.delay_refused("free", names.DELAY_QUEUE)
    metrics.delay_refused("free", names.DELAY_PROCESS_FULL)

    refused = names.DELAY_REFUSED_TOTAL
    assert sample(registry, refused, tier="free", reason="queue") == 2
    assert sample(registry, refused, tier="free", reason="process_full") == 1
    # The tier's other series exist at 0: rate() sees their first increment.
    assert sample(registry, refused, tier="free", reason="sync") == 0
    assert sample(registry, names.DELAY_CANCELLED_TOTAL, tier="free") == 0
    # A tier never seen has no series at all.
    assert sample(registry, refused, tier="pro", reason="queue") is None
    metrics.delay_refused("pro", names.DELAY_SYNC)
    assert sample(registry, refused, tier="pro", reason="sync") == 1
    assert sample(registry, refused, tier="pro", reason="queue") == 0


def test_cancellations_are_counted_by_tier() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    metrics.delayed("free", 0.1)  # the first sight of a tier creates its counters at 0
    assert sample(registry, names.DELAY_CANCELLED_TOTAL, tier="free") == 0
    for _ in range(3):
        metrics.delay_cancelled("free")
    metrics.delay_cancelled("pro")

    assert sample(registry, names.DELAY_CANCELLED_TOTAL, tier="free") == 3
    assert sample(registry, names.DELAY_CANCELLED_TOTAL, tier="pro") == 1
    assert sample(registry, names.DELAY_REFUSED_TOTAL, tier="pro", reason="queue") == 0


def test_the_waiting_gauge_is_set_to_the_process_count() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    assert sample(registry, names.DELAYED_WAITING) == 0
    metrics.delays_waiting(7)
    assert sample(registry, names.DELAYED_WAITING) == 7
    metrics.delays_waiting(2)
    assert sample(registry, names.DELAYED_WAITING) == 2
    metrics.delays_waiting(0)
    assert sample(registry, names.DELAYED_WAITING) == 0


def test_a_scrape_serves_the_names_of_names_py_with_their_types() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.delayed("free", 0.2)
    metrics.delay_refused("free", names.DELAY_PROCESS_FULL)
    metrics.delay_cancelled("free")
    metrics.delays_waiting(4)

    text = generate_latest(registry).decode()

    assert f"# TYPE {names.DELAY_SECONDS} histogram" in text
    assert f"# TYPE {names.DELAYED_WAITING} gauge" in text
    assert f"# TYPE {names.DELAY_REFUSED_TOTAL} counter" in text
    assert f"# TYPE {names.DELAY_CANCELLED_TOTAL} counter" in text
    assert f'{names.DELAY_SECONDS}_bucket{{le="0.25",tier="free"}} 1.0' in text
    assert f"{names.DELAYED_WAITING} 4.0" in text
    assert f'{names.DELAY_REFUSED_TOTAL}{{reason="process_full",tier="free"}} 1.0' in text
    assert f'{names.DELAY_CANCELLED_TOTAL}{{tier="free"}} 1.0' in text
    for name in (names.DELAY_SECONDS, names.DELAYED_WAITING, names.DELAY_REFUSED_TOTAL):
        assert f"# HELP {name} " in text


WORKER = textwrap.dedent(
    """
    import sys
    from quotaql.instrumentation.metrics import PrometheusMetrics
    metrics = PrometheusMetrics()
    waiting = int(sys.argv[1])
    for _ in range(waiting):
        metrics.delayed("free", 0.3)
    metrics.delay_refused("free", "process_full")
    metrics.delay_cancelled("free")
    metrics.delays_waiting(waiting)
    print("ready", flush=True)
    sys.stdin.readline()  # stays alive until the test has read its files
    """
)


def test_multiprocess_mode_sums_the_live_workers(tmp_path: Path) -> None:
    directory = tmp_path / "prometheus-multiproc"
    directory.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, count],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for count in ("3", "4")
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline() == "ready\n"

        def collected() -> CollectorRegistry:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
            return registry

        registry = collected()
        assert sample(registry, names.DELAYED_WAITING) == 7  # livesum: 3 + 4
        assert sample(registry, f"{names.DELAY_SECONDS}_count", tier="free") == 7
        assert bucket(registry, "free", "0.5") == 7
        assert bucket(registry, "free", "0.25") == 0
        assert sample(registry, names.DELAY_REFUSED_TOTAL, tier="free", reason="process_full") == 2
        assert sample(registry, names.DELAY_CANCELLED_TOTAL, tier="free") == 2
        # A worker gone (gunicorn's child_exit calls mark_process_dead): its waiting
        # operations no longer count; what it counted stays.
        mark_process_dead(workers[0].pid, str(directory))  # type: ignore[no-untyped-call]
        registry = collected()
        assert sample(registry, names.DELAYED_WAITING) == 4
        assert sample(registry, f"{names.DELAY_SECONDS}_count", tier="free") == 7
    finally:
        for worker in workers:
            if worker.stdin is not None:
                worker.stdin.close()
            worker.wait(timeout=60)
            if worker.stdout is not None:
                worker.stdout.close()
