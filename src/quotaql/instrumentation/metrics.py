"""Prometheus metrics of every decision (prometheus-client, on an injected registry).

:class:`PrometheusMetrics` is both the limiter's recorder (check latency, backend errors,
the breaker's state) and the extension's per-operation hook (decisions, cost, depth).
Series stay bounded: no tenant label except on ``quotaql_tenant_requests_total``, and there
only for an allowlist and a bounded top-N, every other tenant being ``other``.

Multiprocess servers (gunicorn/uvicorn workers): set ``PROMETHEUS_MULTIPROC_DIR`` before
the workers start, as prometheus-client documents; the circuit gauge then reports the most
open live worker (``multiprocess_mode="livemax"``: call prometheus-client's
``multiprocess.mark_process_dead(pid)`` when a worker exits, e.g. in gunicorn's
``child_exit`` hook) and the build info one value (``"max"``).
"""

from __future__ import annotations

import hashlib
import heapq
import os
import threading
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client import CollectorRegistry

    from quotaql.policy.quota import Decision

__all__ = ["PrometheusMetrics", "TenantLabels", "metrics_app"]


def _base(counter_name: str) -> str:
    """prometheus-client adds ``_total`` to a counter's name itself."""
    return counter_name.removesuffix("_total")


def _quotaql_version() -> str:
    try:
        return version("quotaql")
    except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
        return "unknown"


class TenantLabels:
    """Which tenants get their own label value: an allowlist, then a bounded top-N.

    The top-N is counted with the Space-Saving algorithm over ``8 × top_n`` counters (a
    bounded memory however many tenants there are); a tenant enters the labelled set once
    it ranks in the top ``top_n`` while the set has room, and keeps its label afterwards, so
    at most ``len(allowlist) + top_n + 1`` values ever exist. Allowlisted tenants appear as
    they are; top-N tenants as ``h:<12 hex digits of SHA-256>`` (a tenant is often an API
    key, which must not end up in a metrics database).
    """

    def __init__(self, allowlist: Iterable[str] = (), top_n: int = 0) -> None:
        if top_n < 0:
            raise ValueError(f"top_n must be >= 0, got {top_n}")
        self.allowlist = frozenset(allowlist)
        self.top_n = top_n
        self._labelled: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._capacity = 8 * top_n
        self._lock = threading.Lock()

    def label(self, tenant: str) -> str:
        """The label value for ``tenant``."""
        if tenant in self.allowlist:
            return tenant
        known = self._labelled.get(tenant)
        if known is not None:
            return known
        if len(self._labelled) >= self.top_n:  # no room left (or no top-N): no counting
            return names.OTHER_TENANT
        with self._lock:
            return self._count(tenant)

    def _count(self, tenant: str) -> str:
        counts = self._counts
        if tenant in counts:
            counts[tenant] += 1
        elif len(counts) < self._capacity:
            counts[tenant] = 1
        else:  # Space-Saving: the new tenant takes over the smallest counter
            smallest = min(counts, key=counts.__getitem__)
            counts[tenant] = counts.pop(smallest) + 1
        if len(self._labelled) < self.top_n and tenant in heapq.nlargest(
            self.top_n, counts, key=counts.__getitem__
        ):
            digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()
            self._labelled[tenant] = f"h:{digest[:12]}"
            return self._labelled[tenant]
        return names.OTHER_TENANT


class PrometheusMetrics:
    """The metrics of DESIGN.md §5 on ``registry`` (prometheus-client's global one by default).

    Example:
        >>> from prometheus_client import CollectorRegistry, generate_latest
        >>> registry = CollectorRegistry()
        >>> metrics = PrometheusMetrics(registry)
        >>> metrics.operation("allowed", "query", "free", "acme", cost=12, depth=3, charged=12)
        >>> registry.get_sample_value(
        ...     "quotaql_requests_total",
        ...     {"decision": "allowed", "operation_type": "query", "tier": "free"},
        ... )
        1.0

    Args:
        registry: where the metrics are registered.
        tenant_allowlist: tenants whose requests are counted under their own label.
        top_tenants: how many more tenants (the busiest, hashed) get their own label.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        tenant_allowlist: Iterable[str] = (),
        top_tenants: int = 0,
    ) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram  # noqa: PLC0415

        registry = REGISTRY if registry is None else registry
        self.registry = registry
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._operations: dict[tuple[str, str, str, str | None], tuple[Any, ...]] = {}
        self.tenants = TenantLabels(tenant_allowlist, top_tenants)
        operation_labels = (names.LABEL_DECISION, names.LABEL_OPERATION_TYPE, names.LABEL_TIER)
        cost_labels = (names.LABEL_OPERATION_TYPE, names.LABEL_TIER)
        self.requests = Counter(
            _base(names.REQUESTS_TOTAL),
            "GraphQL operations seen by quotaql, by decision.",
            operation_labels,
            registry=registry,
        )
        self.query_cost = Histogram(
            names.QUERY_COST,
            "Estimated (requested) cost of each operation, before it runs.",
            cost_labels,
            buckets=names.COST_BUCKETS,
            registry=registry,
        )
        self.actual_cost = Histogram(
            names.QUERY_ACTUAL_COST,
            "Actual cost of each executed operation, from the data it returned.",
            cost_labels,
            buckets=names.COST_BUCKETS,
            registry=registry,
        )
        self.depth = Histogram(
            names.QUERY_DEPTH,
            "Field nesting depth of each operation.",
            (names.LABEL_OPERATION_TYPE,),
            buckets=names.DEPTH_BUCKETS,
            registry=registry,
        )
        self.cost_points = Counter(
            _base(names.COST_TOTAL),
            "Cost points charged to budgets, and refunded after execution.",
            (names.LABEL_TIER, names.LABEL_OUTCOME),
            registry=registry,
        )
        self.check_duration = Histogram(
            names.CHECK_DURATION,
            "Time of one limiter decision, storage round trips included.",
            (names.LABEL_BACKEND,),
            buckets=names.CHECK_DURATION_BUCKETS,
            registry=registry,
        )
        self.backend_errors = Counter(
            _base(names.BACKEND_ERRORS_TOTAL),
            "Failed calls to the limiter's storage.",
            (names.LABEL_BACKEND, names.LABEL_ERROR_TYPE),
            registry=registry,
        )
        self.circuit_open = Gauge(
            names.CIRCUIT_OPEN,
            "1 while the circuit breaker in front of the storage is open.",
            (names.LABEL_BACKEND,),
            registry=registry,
            multiprocess_mode="livemax",  # a dead worker's open breaker is forgotten
        )
        self.tenant_requests = Counter(
            _base(names.TENANT_REQUESTS_TOTAL),
            "Operations per tenant (allowlisted or top-N; every other tenant is 'other').",
            (names.LABEL_TENANT, names.LABEL_DECISION),
            registry=registry,
        )
        self.identity = Counter(
            _base(names.IDENTITY_TOTAL),
            "Operations by how their subject (who pays) was identified.",
            (names.LABEL_SOURCE,),
            registry=registry,
        )
        self.subscription_events = Counter(
            _base(names.SUBSCRIPTION_EVENTS_TOTAL),
            "Subscription events after the first: charged (allowed) or refused (blocked).",
            (names.LABEL_DECISION, names.LABEL_TIER),
            registry=registry,
        )
        self.subscriptions_open = Gauge(
            names.SUBSCRIPTIONS_OPEN,
            "Subscriptions open now.",
            registry=registry,
            multiprocess_mode="livesum",  # every live worker's, summed
        )
        build_info = Gauge(
            names.BUILD_INFO,
            "The running quotaql version (always 1).",
            (names.LABEL_VERSION,),
            registry=registry,
            multiprocess_mode="max",
        )
        build_info.labels(_quotaql_version()).set(1)

    # -- the limiter's recorder ----------------------------------------------------------
    # Every label set is bounded (decisions, operation types, tiers from the config, backends,
    # error types, tenants through TenantLabels), so the children are cached per label tuple:
    # prometheus-client's labels() costs ~0.6 µs a call, and an operation records seven.

    def decision(self, decision: Decision, seconds: float) -> None:
        """Time one limiter decision (under the backend that made it)."""
        self._child(self.check_duration, decision.source).observe(seconds)

    def backend_error(self, backend: str, error: BaseException) -> None:
        """Count a failed storage call."""
        self._child(self.backend_errors, backend, type(error).__name__).inc()

    def circuit(self, backend: str, is_open: bool) -> None:
        """Follow the breaker's state."""
        self._child(self.circuit_open, backend).set(1 if is_open else 0)

    # -- the extension's hook ------------------------------------------------------------

    def operation(
        self,
        decision: str,
        operation_type: str,
        tier: str,
        tenant: str,
        *,
        cost: float | None = None,
        depth: int | None = None,
        actual: float | None = None,
        charged: float = 0.0,
        refunded: float = 0.0,
        identity: str | None = None,
    ) -> None:
        """Count one operation (``decision`` is one of ``names.DECISIONS``, ``identity`` one
        of ``names.IDENTITY_SOURCES``)."""
        key = (decision, operation_type, tier, identity)
        children = self._operations.get(key)
        if children is None:  # once per label set: labels() is the expensive part
            children = self._operations[key] = (
                self.requests.labels(decision, operation_type, tier),
                self.query_cost.labels(operation_type, tier),
                self.depth.labels(operation_type),
                self.actual_cost.labels(operation_type, tier),
                self.cost_points.labels(tier, names.CHARGED),
                self.cost_points.labels(tier, names.REFUNDED),
                None if identity is None else self.identity.labels(identity),
            )
        (requests, query_cost, query_depth, actual_cost, charged_points, refunded_points,
         identified) = children  # fmt: skip
        requests.inc()
        if identified is not None:
            identified.inc()
        self._child(self.tenant_requests, self.tenants.label(tenant), decision).inc()
        if cost is not None:
            query_cost.observe(cost)
        if depth is not None:
            query_depth.observe(depth)
        if actual is not None:
            actual_cost.observe(actual)
        if charged:
            charged_points.inc(charged)
        if refunded:
            refunded_points.inc(refunded)

    def event(self, decision: str, tier: str, charged: float) -> None:
        """Count one subscription event after the first, and the points it was charged."""
        self._child(self.subscription_events, decision, tier).inc()
        if charged:
            self._child(self.cost_points, tier, names.CHARGED).inc(charged)

    def subscriptions(self, open_now: int) -> None:
        """Follow how many subscriptions are open."""
        self.subscriptions_open.set(open_now)

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached.

        Every label set here is bounded (decisions, operation types, tiers from the config,
        backends, error types, tenants through TenantLabels), so the children are kept:
        prometheus-client's ``labels()`` costs ~0.6 µs, and an operation records seven.
        """
        key = (id(metric), labels)  # this object keeps its metrics alive: ids are stable
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


def metrics_app(registry: CollectorRegistry | None = None) -> Any:
    """An ASGI app serving ``registry`` in the Prometheus text format: mount it at ``/metrics``.

    Under prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set), it
    serves what every worker process recorded, summed, as prometheus-client documents;
    ``registry`` is then ignored.

    Example::

        app = Starlette(routes=[Mount("/metrics", metrics_app()), Mount("/", graphql_app)])
    """
    from prometheus_client import REGISTRY, CollectorRegistry, make_asgi_app  # noqa: PLC0415

    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        from prometheus_client.multiprocess import MultiProcessCollector  # noqa: PLC0415

        aggregated = CollectorRegistry()
        MultiProcessCollector(aggregated, path=directory)  # type: ignore[no-untyped-call]
        return make_asgi_app(aggregated)
    return make_asgi_app(REGISTRY if registry is None else registry)
