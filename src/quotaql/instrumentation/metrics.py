"""Prometheus metrics of every decision (prometheus-client, on an injected registry).

:class:`PrometheusMetrics` is both the limiter's recorder (check latency, backend errors,
the breaker's state) and the extension's per-operation hook (decisions, cost, depth).
Series stay bounded: no tenant label except on ``quotaql_tenant_requests_total``, and there
only for an allowlist and a bounded top-N, every other tenant being ``other``.

Multiprocess servers (gunicorn/uvicorn workers): set ``PROMETHEUS_MULTIPROC_DIR`` before
the workers start, as prometheus-client documents; the circuit gauge then reports the most
open live worker (``multiprocess_mode="livemax"``: call prometheus-client's
``multiprocess.mark_process_dead(pid)`` when a worker exits, e.g. in gunicorn's
``child_exit`` hook) and the build info one value (``"max"``). Of the tuning gauges, the
assumed list sizes report the most recent value written by any worker (``"mostrecent"``)
and the largest list seen the maximum (``"max"``). The adaptive limits' gauges are per
worker: the pressure and the engaged state report the highest live worker's
(``"livemax"``), the multiplier the lowest (``"livemin"``). The gauges of what a process
holds or has waiting now (open subscriptions, leases in flight, delayed operations, the
refund queue) sum the live workers' (``"livesum"``).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import os
import threading
import time
import weakref
from bisect import bisect_left
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Final

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from prometheus_client import CollectorRegistry

    from quotaql.policy.quota import Decision

__all__ = ["DELAY_BUCKETS", "PrometheusMetrics", "TenantLabels", "metrics_app"]

DELAY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""The buckets of ``quotaql_delay_seconds``: from a few milliseconds (a turn a refill away)
to a minute (``max_delay`` is rarely longer). 1.0, the default threshold of the
``QuotaqlDelaysLong`` alert (``[alerts] delay_p99_seconds``), is an edge, so it is exact."""


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
        self.pressure = Gauge(
            names.PRESSURE,
            "The adaptive limits' pressure signal of each source, 0 (none) to 1 (saturated).",
            (names.LABEL_SOURCE,),
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.adaptive_multiplier = Gauge(
            names.ADAPTIVE_MULTIPLIER,
            "What each tier's charges are divided by (1: not scaled); in shadow mode, what"
            " would be.",
            (names.LABEL_TIER,),
            registry=registry,
            multiprocess_mode="livemin",
        )
        self.adaptive_engaged = Gauge(
            names.ADAPTIVE_ENGAGED,
            "1 while adaptive limits are engaged (in shadow mode: would be).",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.adaptive_transitions_total = Counter(
            _base(names.ADAPTIVE_TRANSITIONS_TOTAL),
            "Adaptive limits engaging and releasing.",
            (names.LABEL_TO,),
            registry=registry,
        )
        self.in_flight_gauge = Gauge(
            names.IN_FLIGHT,
            "Leases this process holds: operations (and subscriptions) of tiers with a"
            " concurrency limit running now.",
            (names.LABEL_TIER,),
            registry=registry,
            multiprocess_mode="livesum",  # every live worker's, summed
        )
        # Delays (on_limit = "delay"): what waited, how long, and what was refused or left.
        self.delay_seconds = Histogram(
            names.DELAY_SECONDS,
            "How long operations of delay tiers waited for their turn (only those that"
            " waited: its count is the operations delayed).",
            (names.LABEL_TIER,),
            buckets=DELAY_BUCKETS,
            registry=registry,
        )
        self.delayed_waiting = Gauge(
            names.DELAYED_WAITING,
            "Operations this process has waiting for their turn now (at most [limits]"
            " max_delayed).",
            registry=registry,
            multiprocess_mode="livesum",  # every live worker's, summed
        )
        self.delay_refused_total = Counter(
            _base(names.DELAY_REFUSED_TOTAL),
            "Operations of delay tiers refused RATE_LIMITED, by reason: queue (past max_delay"
            " or max_queued), process_full (max_delayed waiting already), sync (a sync server"
            " never waits).",
            (names.LABEL_TIER, names.LABEL_REASON),
            registry=registry,
        )
        self.delay_cancelled_total = Counter(
            _base(names.DELAY_CANCELLED_TOTAL),
            "Operations that left while waiting for their turn (the client went away); each"
            " was refunded its whole charge.",
            (names.LABEL_TIER,),
            registry=registry,
        )
        self._delay_tiers: set[str] = set()
        # The series below are collected through _BackendCollector, which first adds what
        # the watched refund queues, pipelines and lease keepers counted since (see sync).
        self.leases_total = Counter(
            _base(names.LEASES_TOTAL),
            "What became of concurrency leases: taken, refused, released, expired (before"
            " their release), release_failed, renewed, renew_failed, take_failed.",
            (names.LABEL_OUTCOME,),
            registry=None,
        )
        self.refunds_total = Counter(
            _base(names.REFUNDS_TOTAL),
            "Deferred refunds: queued, coalesced (into one already waiting), applied, lost"
            " (never applied) or unknown (sent, then the call failed: perhaps applied).",
            (names.LABEL_OUTCOME,),
            registry=None,
        )
        self.refund_queue = Gauge(
            names.REFUND_QUEUE,
            "Refunds waiting to be applied (coalesced ones count once).",
            registry=None,
            multiprocess_mode="livesum",
        )
        self.pipeline_commands = Counter(
            _base(names.PIPELINE_COMMANDS_TOTAL),
            "Commands the async Redis pipeline sent (a NOSCRIPT retry counts again).",
            (names.LABEL_BACKEND,),
            registry=None,
        )
        self.pipeline_batches = Counter(
            _base(names.PIPELINE_BATCHES_TOTAL),
            "Writes the async Redis pipeline made (commands / batches: the mean batch size).",
            (names.LABEL_BACKEND,),
            registry=None,
        )
        for outcome in names.LEASE_OUTCOMES:  # every series from 0: increase() sees the first
            self._child(self.leases_total, outcome)
        for outcome in names.REFUND_OUTCOMES:
            self._child(self.refunds_total, outcome)
        self._backend_lock = threading.Lock()
        self._refund_queues: weakref.WeakKeyDictionary[Any, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        # storage -> (its pipeline when last read, the batches and commands counted of it)
        self._pipelines: weakref.WeakKeyDictionary[Any, tuple[Any, int, int]] = (
            weakref.WeakKeyDictionary()
        )
        self._keepers: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()
        self._sync_at = 0.0
        self._multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        registry.register(_BackendCollector(self))
        self._pressure_sources: set[str] = set()
        self._adaptive_tiers: set[str] = set()
        build_info = Gauge(
            names.BUILD_INFO,
            "The running quotaql version (always 1).",
            (names.LABEL_VERSION,),
            registry=registry,
            multiprocess_mode="max",
        )
        build_info.labels(_quotaql_version()).set(1)
        self.estimate_ratio = Histogram(
            names.COST_ESTIMATE_RATIO,
            "Actual cost / estimated cost of each priced operation that ran.",
            cost_labels,
            buckets=names.RATIO_BUCKETS,
            registry=registry,
        )
        # The list metrics are collected through _TuningCollector, which first adds the
        # tallies waiting in this process (see list_sizes) to them.
        coordinate = (names.LABEL_COORDINATE,)
        self.list_returned = Histogram(
            names.LIST_RETURNED_ITEMS,
            "Items returned by each list whose size the pricing assumed (assumed_size,"
            " @listSize(assumedSize:), default_list_size), per schema coordinate.",
            coordinate,
            buckets=names.LIST_SIZE_BUCKETS,
            registry=None,
        )
        self.list_operation_max = Histogram(
            names.LIST_OPERATION_MAX_ITEMS,
            "Per operation, the items of its longest list of the coordinate whose size the"
            " pricing assumed.",
            coordinate,
            buckets=names.LIST_SIZE_BUCKETS,
            registry=None,
        )
        self.list_assumed = Gauge(
            names.LIST_ASSUMED_ITEMS,
            "The size the pricing assumed for the latest such list of the coordinate.",
            coordinate,
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.list_max_returned = Gauge(
            names.LIST_MAX_RETURNED_ITEMS,
            "The most items one such list of the coordinate returned since the process started.",
            coordinate,
            registry=None,
            multiprocess_mode="max",
        )
        self.list_sliced_ratio = Histogram(
            names.LIST_SLICED_RATIO,
            "Items returned / items asked for, per list sized by a slicing argument the"
            " client wrote (first: 5), per schema coordinate.",
            coordinate,
            buckets=names.RATIO_BUCKETS,
            registry=None,
        )
        self._lists: dict[str, _ListSeries] = {}
        self._sliced: dict[str, _Pending] = {}
        self._waiting: dict[_Pending, None] = {}  # tallies not yet added to their histogram
        self._tuning_lock = threading.Lock()
        self._flush_at = 0.0
        # Tally, then add to the histograms' bucket values directly (prometheus-client's
        # internals, checked on each child: see _adds_in_bulk); False: observe() each list.
        self._bulk = True
        registry.register(_TuningCollector(self))

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

    def refunds(self, outcome: str, count: int, cost: float) -> None:
        """Count deferred refunds the limiter applied, lost or lost track of (``outcome``
        ``applied``, ``lost``, ``unknown``), and the points of the last two
        (``quotaql_cost_total{outcome="refund_lost"}``: tenants paid up to that much more
        than they used)."""
        if count:
            self._child(self.refunds_total, outcome).inc(count)
        if cost and outcome != names.REFUND_APPLIED:
            self._child(self.cost_points, "", names.REFUND_LOST).inc(cost)

    # -- concurrency leases and the backend's own counters -------------------------------

    def leases(self, outcome: str, count: int = 1) -> None:
        """Count ``count`` leases of ``outcome`` (one of ``names.LEASE_OUTCOMES``)."""
        self._child(self.leases_total, outcome).inc(count)

    def in_flight(self, tier: str, count: int) -> None:
        """The leases this process holds for ``tier`` now."""
        self._child(self.in_flight_gauge, tier).set(count)

    # -- delays (on_limit = "delay") -----------------------------------------------------

    def delayed(self, tier: str, seconds: float) -> None:
        """Record that an operation of ``tier`` waited ``seconds`` for its turn
        (``quotaql_delay_seconds``; a negative wait counts as 0, a NaN or infinite one is
        ignored).

        Example:
            >>> from prometheus_client import CollectorRegistry
            >>> registry = CollectorRegistry()
            >>> metrics = PrometheusMetrics(registry)
            >>> metrics.delayed("free", 0.3)
            >>> registry.get_sample_value(
            ...     "quotaql_delay_seconds_bucket", {"tier": "free", "le": "0.5"}
            ... )
            1.0
        """
        if tier not in self._delay_tiers:
            self._delay_series(tier)
        if not seconds < _INF:  # NaN or +inf: it would poison the sum for good
            return
        self._child(self.delay_seconds, tier).observe(max(seconds, 0.0))

    def delay_refused(self, tier: str, reason: str) -> None:
        """Count an operation of a delay tier refused ``RATE_LIMITED`` (``reason`` is one of
        ``names.DELAY_REFUSED_REASONS``)."""
        if tier not in self._delay_tiers:
            self._delay_series(tier)
        self._child(self.delay_refused_total, tier, reason).inc()

    def delay_cancelled(self, tier: str) -> None:
        """Count an operation of ``tier`` that left while waiting (and was refunded)."""
        if tier not in self._delay_tiers:
            self._delay_series(tier)
        self._child(self.delay_cancelled_total, tier).inc()

    def delays_waiting(self, count: int) -> None:
        """The operations this process has waiting for their turn now."""
        self.delayed_waiting.set(count)

    def _delay_series(self, tier: str) -> None:
        """Create a delay tier's counters at 0 the first time it is seen, every reason's,
        so that ``rate()`` and ``increase()`` see its first refusal and cancellation."""
        self._delay_tiers.add(tier)
        for reason in names.DELAY_REFUSED_REASONS:
            self._child(self.delay_refused_total, tier, reason)
        self._child(self.delay_cancelled_total, tier)

    def watch_refunds(self, queue: Any) -> None:
        """Count what a :class:`~quotaql.limiter.refunds.RefundQueue` queued and coalesced, and how
        many refunds wait in it (read at each scrape, and at most once a second)."""
        with self._backend_lock:
            self._refund_queues.setdefault(queue, (0, 0))

    def watch_pipeline(self, storage: Any) -> None:
        """Count the writes and commands of an
        :class:`~quotaql.storage.redis.AsyncRedisStorage`'s pipeline (each event loop's)."""
        with self._backend_lock:
            self._pipelines.setdefault(storage, (None, 0, 0))

    def watch_leases(self, keeper: Any) -> None:
        """Count the renewals of a :class:`~quotaql.storage.leases.LeaseKeeper`."""
        with self._backend_lock:
            self._keepers.setdefault(keeper, (0, 0))

    def sync(self) -> None:
        """Add what the watched refund queues, pipelines and keepers counted since the last
        call to the metrics (a scrape does it first; under prometheus-client's multiprocess
        mode, where no scrape reads this process, :meth:`operation` does it once a second)."""
        with self._backend_lock:
            self._sync_at = time.monotonic() + _FLUSH_SECONDS
            waiting = 0
            for queue, (queued, coalesced) in list(self._refund_queues.items()):
                now_queued, now_coalesced = queue.queued, queue.coalesced
                if now_queued > queued:
                    self._child(self.refunds_total, names.REFUND_QUEUED).inc(now_queued - queued)
                if now_coalesced > coalesced:
                    self._child(self.refunds_total, names.REFUND_COALESCED).inc(
                        now_coalesced - coalesced
                    )
                self._refund_queues[queue] = (now_queued, now_coalesced)
                waiting += len(queue)
            self.refund_queue.set(waiting)
            for storage, (seen, seen_batches, seen_commands) in list(self._pipelines.items()):
                pipeline = getattr(storage, "pipeline", None)
                if pipeline is None:
                    continue
                batches, commands = (seen_batches, seen_commands) if pipeline is seen else (0, 0)
                backend = getattr(storage, "name", "redis")
                now_batches, now_commands = pipeline.batches, pipeline.commands
                if now_batches > batches:
                    self._child(self.pipeline_batches, backend).inc(now_batches - batches)
                if now_commands > commands:
                    self._child(self.pipeline_commands, backend).inc(now_commands - commands)
                self._pipelines[storage] = (pipeline, now_batches, now_commands)
            for keeper, (renewed, failed) in list(self._keepers.items()):
                now_renewed, now_failed = keeper.renewed, keeper.renew_failed
                if now_renewed > renewed:
                    self._child(self.leases_total, names.LEASE_RENEWED).inc(now_renewed - renewed)
                if now_failed > failed:
                    self._child(self.leases_total, names.LEASE_RENEW_FAILED).inc(
                        now_failed - failed
                    )
                self._keepers[keeper] = (now_renewed, now_failed)

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
        if self._multiprocess and time.monotonic() >= self._sync_at:
            self.sync()  # no scrape reads this process: its backend counters, once a second
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

    # -- adaptive limits (once a second) ---------------------------------------------------

    def adaptive(
        self, pressures: Mapping[str, float], multipliers: Mapping[str, float], *, engaged: bool
    ) -> None:
        """Set the pressure of each source, the multiplier of each tier and the engaged
        state. A source or a tier no longer given (a reload dropped it) goes back to 0 and
        1: no stale value stays behind."""
        for source in self._pressure_sources - set(pressures):
            self._child(self.pressure, source).set(0.0)
        for tier in self._adaptive_tiers - set(multipliers):
            self._child(self.adaptive_multiplier, tier).set(1.0)
        self._pressure_sources |= set(pressures)
        self._adaptive_tiers |= set(multipliers)
        for source, value in pressures.items():
            self._child(self.pressure, source).set(value)
        for tier, value in multipliers.items():
            self._child(self.adaptive_multiplier, tier).set(value)
        self.adaptive_engaged.set(1 if engaged else 0)

    def adaptive_transition(self, to: str) -> None:
        """Count one transition (``to`` is one of ``names.TRANSITIONS``)."""
        self._child(self.adaptive_transitions_total, to).inc()

    def adaptive_transitions(self) -> None:
        """Create both transition series at 0, so that ``increase()`` sees the first one."""
        for to in names.TRANSITIONS:
            self._child(self.adaptive_transitions_total, to)

    # -- the tuning metrics (quotaql tune) --------------------------------------------------
    # Called for a sampled fraction of the operations. list_sizes() may get dozens of lists
    # per operation, and Histogram.observe() costs ~1.5 µs: the observations are tallied per
    # coordinate and bucket first, then each histogram child gets one increment per bucket
    # hit (and one of its sum) instead of one observe() per list.

    def list_sizes(self, observations: Sequence[tuple[str, float, int, bool]]) -> None:
        """Record the lists one operation returned, after its actual cost is known.

        Each observation is ``(coordinate, assumed, returned, sliced)``, one per list
        instance of the response: ``coordinate`` the list field (``"Product.reviews"``, a
        schema coordinate: the only label), ``assumed`` the size the pricing assumed for
        this instance, ``returned`` the items it returned, ``sliced`` whether ``assumed``
        came from a slicing argument the client wrote (``first: 5``) rather than from
        ``assumed_size`` / ``@listSize(assumedSize:)`` / ``default_list_size``.

        Unsliced lists feed :data:`~quotaql.instrumentation.names.LIST_RETURNED_ITEMS`,
        ``LIST_OPERATION_MAX_ITEMS`` (this operation's longest list of each coordinate),
        ``LIST_ASSUMED_ITEMS`` and ``LIST_MAX_RETURNED_ITEMS``; sliced ones
        ``LIST_SLICED_RATIO`` (``returned / assumed``; an instance that asked for 0 counts
        as 1.0 when it returned nothing, else as ``names.RATIO_CAP``). An observation with
        a negative or non-finite number is ignored.

        The histograms' counts are tallied here and added to prometheus-client's values at
        most once a second, and whenever the registry is collected (a scrape, or
        ``get_sample_value``); :meth:`flush` adds them at once. Under prometheus-client's
        multiprocess mode, a scrape reads the workers' files instead: what a worker tallied
        in its last second reaches them with its next call after that second, or with
        :meth:`flush`.

        Example:
            >>> from prometheus_client import CollectorRegistry
            >>> registry = CollectorRegistry()
            >>> metrics = PrometheusMetrics(registry)
            >>> metrics.list_sizes([("Query.products", 10, 4, False),
            ...                     ("Product.reviews", 5, 5, True)])
            >>> registry.get_sample_value(
            ...     "quotaql_list_returned_items_bucket",
            ...     {"coordinate": "Query.products", "le": "5.0"},
            ... )
            1.0
        """
        longest: dict[_ListSeries, int] = {}
        size_index = _SIZE_INDEX
        top = len(size_index) - 1  # the largest finite edge: above it, the +Inf bucket
        with self._tuning_lock:
            lists = self._lists
            for coordinate, assumed, returned, is_sliced in observations:
                if not 0 <= assumed < _INF:
                    continue  # negative, NaN or infinite: nothing to learn from it
                if is_sliced:
                    self._sliced_list(coordinate, assumed, returned)
                    continue
                if 0 <= returned <= top:
                    try:
                        index = size_index[returned]
                    except TypeError:  # a float
                        index = bisect_left(_SIZE_BOUNDS, returned)
                elif top < returned < _INF:
                    index = _SIZE_INF
                else:
                    continue
                series = lists.get(coordinate)
                if series is None:
                    series = lists[coordinate] = _ListSeries(self, coordinate)
                pending = series.returned
                if pending.values is None:
                    pending.counts[index] += 1
                    pending.total += returned
                else:
                    pending.values.append(returned)
                if assumed != series.assumed:
                    series.assumed = assumed
                    series.assumed_gauge.set(assumed)
                if returned > longest.get(series, -1):
                    longest[series] = returned
            waiting = self._waiting
            for series, items in longest.items():
                waiting[series.returned] = None
                pending = series.operation_max
                waiting[pending] = None
                if pending.values is None:
                    pending.counts[bisect_left(_SIZE_BOUNDS, items)] += 1
                    pending.total += items
                else:
                    pending.values.append(items)
                if items > series.max_returned:
                    series.max_returned = items
                    series.max_gauge.set(items)
            now = time.monotonic()
            if now >= self._flush_at:
                self._flush_at = now + _FLUSH_SECONDS
                self._add_waiting()

    def _sliced_list(self, coordinate: str, asked: float, returned: float) -> None:
        """Tally one list sized by a slicing argument (under ``_tuning_lock``)."""
        if not 0 <= returned < _INF:
            return
        if asked > 0:
            ratio = min(returned / asked, names.RATIO_CAP)
        else:
            ratio = 1.0 if returned == 0 else names.RATIO_CAP
        pending = self._sliced.get(coordinate)
        if pending is None:
            child = self.list_sliced_ratio.labels(coordinate)
            pending = self._sliced[coordinate] = _Pending(child, _RATIO_BOUNDS, self._bulk)
        if pending.values is None:
            pending.counts[bisect_left(_RATIO_BOUNDS, ratio)] += 1
            pending.total += ratio
        else:
            pending.values.append(ratio)
        self._waiting[pending] = None

    def flush(self) -> None:
        """Add the list tallies waiting in this process to the histograms now (collecting
        the registry does it too; under multiprocess mode, call it when a worker stops)."""
        with self._tuning_lock:
            self._add_waiting()

    def _add_waiting(self) -> None:
        for pending in self._waiting:
            pending.add()
        self._waiting.clear()

    def estimate(self, operation_type: str, tier: str, estimated: float, actual: float) -> None:
        """Record how far one operation's estimate was from its actual cost.

        Called once per operation that was priced and ran: observes ``actual / estimated``
        in :data:`~quotaql.instrumentation.names.COST_ESTIMATE_RATIO` (labels
        ``operation_type`` and ``tier`` only). An estimate of 0 counts as 1.0 when the
        actual cost is 0 too, else as ``names.RATIO_CAP``; so does a ratio above the cap.
        Negative or non-finite costs are ignored.

        Example:
            >>> from prometheus_client import CollectorRegistry
            >>> registry = CollectorRegistry()
            >>> metrics = PrometheusMetrics(registry)
            >>> metrics.estimate("query", "free", estimated=70, actual=16)
            >>> registry.get_sample_value(
            ...     "quotaql_cost_estimate_ratio_bucket",
            ...     {"operation_type": "query", "tier": "free", "le": "0.25"},
            ... )
            1.0
        """
        if not (0 <= estimated < _INF and 0 <= actual < _INF):
            return
        if estimated > 0:
            ratio = min(actual / estimated, names.RATIO_CAP)
        else:
            ratio = 1.0 if actual == 0 else names.RATIO_CAP
        self._child(self.estimate_ratio, operation_type, tier).observe(ratio)

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


def _adds_in_bulk(child: Any, bounds: tuple[float, ...]) -> bool:
    """Whether prometheus-client's histogram ``child`` has the values :class:`_Pending`
    increments directly: its upper bounds ``bounds`` in ``_upper_bounds``, a value with an
    ``inc`` per bucket in ``_buckets``, and ``_sum`` (it has had them for years)."""
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    return (
        tuple(getattr(child, "_upper_bounds", ())) == bounds
        and isinstance(buckets, list)
        and len(buckets) == len(bounds)
        and all(callable(getattr(bucket, "inc", None)) for bucket in buckets)
        and callable(getattr(total, "inc", None))
    )


_INF = math.inf
_SIZE_BOUNDS: Final = (*names.LIST_SIZE_BUCKETS, _INF)
_RATIO_BOUNDS: Final = (*names.RATIO_BUCKETS, _INF)
_FLUSH_SECONDS: Final = 1.0
#: The bucket of a list of n items, for n from 0 to the largest finite edge (bisect is slower).
_SIZE_INDEX: Final = tuple(
    bisect_left(_SIZE_BOUNDS, n) for n in range(int(names.LIST_SIZE_BUCKETS[-1]) + 1)
)
_SIZE_INF: Final = len(_SIZE_BOUNDS) - 1


class _Pending:
    """Observations of one histogram child, tallied until :meth:`add` adds them.

    ``counts[i]`` is how many fell in bucket ``i`` (the first upper bound ``>=`` the value,
    as ``observe()`` decides) and ``total`` their sum: :meth:`add` increments each bucket hit
    once and the sum once, which leaves the child as that many ``observe()`` calls would.
    Where the child lacks those values (``values`` is then a list), the observations are
    kept as they are and observed one by one.
    """

    __slots__ = ("_buckets", "_child", "_sum", "counts", "total", "values")

    def __init__(self, child: Any, bounds: tuple[float, ...], bulk: bool) -> None:
        self._child = child
        self.counts = [0] * len(bounds)
        self.total = 0.0
        self.values: list[float] | None = None
        if bulk and _adds_in_bulk(child, bounds):
            self._buckets: list[Any] = child._buckets
            self._sum: Any = child._sum
        else:
            self.values = []

    def add(self) -> None:
        if self.values is not None:
            for value in self.values:
                self._child.observe(value)
            self.values.clear()
            return
        counts = self.counts
        buckets = self._buckets
        for index, count in enumerate(counts):
            if count:
                buckets[index].inc(count)
                counts[index] = 0
        if self.total:
            self._sum.inc(self.total)
            self.total = 0.0


class _ListSeries:
    """One coordinate's unsliced-list series, their children resolved once."""

    __slots__ = ("assumed", "assumed_gauge", "max_gauge", "max_returned", "operation_max",
                 "returned")  # fmt: skip

    def __init__(self, metrics: PrometheusMetrics, coordinate: str) -> None:
        bulk = metrics._bulk
        self.returned = _Pending(metrics.list_returned.labels(coordinate), _SIZE_BOUNDS, bulk)
        self.operation_max = _Pending(
            metrics.list_operation_max.labels(coordinate), _SIZE_BOUNDS, bulk
        )
        self.assumed_gauge: Any = metrics.list_assumed.labels(coordinate)
        self.max_gauge: Any = metrics.list_max_returned.labels(coordinate)
        self.assumed = -1.0  # no value yet: the first observation sets the gauge
        self.max_returned = -1


class _TuningCollector:
    """Collects the list metrics, after adding what :meth:`PrometheusMetrics.list_sizes`
    tallied to them (so that every collection, a scrape, sees every call made before it)."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics
        self._collected = (
            metrics.list_returned,
            metrics.list_operation_max,
            metrics.list_assumed,
            metrics.list_max_returned,
            metrics.list_sliced_ratio,
        )

    def describe(self) -> list[Any]:
        return [family for metric in self._collected for family in metric.describe()]

    def collect(self) -> Iterator[Any]:
        self._metrics.flush()
        for metric in self._collected:
            yield from metric.collect()


class _BackendCollector:
    """Collects the lease, refund and pipeline series, after adding what the watched
    objects counted since (:meth:`PrometheusMetrics.sync`), so that a scrape sees them."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics
        self._collected = (
            metrics.leases_total,
            metrics.refunds_total,
            metrics.refund_queue,
            metrics.pipeline_commands,
            metrics.pipeline_batches,
        )

    def describe(self) -> list[Any]:
        return [family for metric in self._collected for family in metric.describe()]

    def collect(self) -> Iterator[Any]:
        self._metrics.sync()
        for metric in self._collected:
            yield from metric.collect()


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
