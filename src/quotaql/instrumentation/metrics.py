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

import itertools
import math
import os
import threading
import time
import weakref
from bisect import bisect_left
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Final

from quotaql.instrumentation import instruments, names
from quotaql.instrumentation.candidate import CandidateMetrics
from quotaql.instrumentation.incremental import Incremental
from quotaql.instrumentation.resolvers import ResolverTimes
from quotaql.instrumentation.rollout import Rollout
from quotaql.instrumentation.routes import Routes
from quotaql.instrumentation.skips import Skips
from quotaql.instrumentation.subjects import SubjectMaxima, class_hash
from quotaql.instrumentation.tallies import Pending
from quotaql.instrumentation.tenants import TenantLabels
from quotaql.instrumentation.warn import Warnings

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from quotaql.policy.quota import Decision

__all__ = ["DELAY_BUCKETS", "PrometheusMetrics", "TenantLabels", "metrics_app"]

DELAY_BUCKETS: Final = names.DELAY_BUCKETS
"""The buckets of ``quotaql_delay_seconds``, as ``names.DELAY_BUCKETS`` gives them."""


def _base(counter_name: str) -> str:
    """prometheus-client adds ``_total`` to a counter's name itself."""
    return counter_name.removesuffix("_total")


def _instrument(row: instruments.Instrument) -> Counter | Gauge | Histogram:
    """The instrument of one row of ``instruments.INSTRUMENTS``, on no registry yet."""
    from prometheus_client import Counter, Gauge, Histogram  # noqa: PLC0415

    if row.kind == "counter":
        return Counter(_base(row.name), row.help, row.labels, registry=None)
    if row.kind == "gauge":
        return Gauge(
            row.name, row.help, row.labels, registry=None, multiprocess_mode=row.multiprocess_mode
        )
    return Histogram(row.name, row.help, row.labels, buckets=row.buckets, registry=None)


def _quotaql_version() -> str:
    try:
        return version("quotaql")
    except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
        return "unknown"


class PrometheusMetrics(instruments.Instruments):
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
        subject_period: seconds of one period of ``quotaql_list_subject_max_items``
            (``names.LIST_SUBJECT_PERIOD``, a minute: ``quotaql tune`` reports subject-minutes;
            tests shorten it).
        top_operations: how many operation names (the busiest) get their own label in the
            series by operation name (``names.TOP_OPERATIONS``; every other is ``other``).
        utilisation_window: seconds of the window of ``quotaql_tenant_utilisation``
            (``names.UTILISATION_WINDOW``; tests shorten it).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        tenant_allowlist: Iterable[str] = (),
        top_tenants: int = 0,
        subject_period: float = names.LIST_SUBJECT_PERIOD,
        top_operations: int = names.TOP_OPERATIONS,
        utilisation_window: float = names.UTILISATION_WINDOW,
    ) -> None:
        from prometheus_client import REGISTRY  # noqa: PLC0415

        if not 0 < subject_period < _INF:
            raise ValueError(f"subject_period must be a positive number, got {subject_period}")
        if not 0 < utilisation_window < _INF:
            raise ValueError(
                f"utilisation_window must be a positive number, got {utilisation_window}"
            )
        registry = REGISTRY if registry is None else registry
        self.registry = registry
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._operations: dict[tuple[str, str, str, str | None], tuple[Any, ...]] = {}
        self.tenants = TenantLabels(tenant_allowlist, top_tenants)
        for row in instruments.EVERY_INSTRUMENT:
            setattr(self, row.attribute, _instrument(row))
        self._delay_tiers: set[str] = set()
        for outcome in names.LEASE_OUTCOMES:  # every series from 0: increase() sees the first
            self._child(self.leases_total, outcome)
        for outcome in names.REFUND_OUTCOMES:
            self._child(self.refunds_total, outcome)
        for outcome in names.KEY_LOOKUP_OUTCOMES:
            self._child(self.key_lookups, outcome)
        for store_scope in itertools.product(names.OVERFLOW_STORES, names.OVERFLOW_SCOPES):
            self._child(self.overflow, *store_scope)
        for code in names.REJECTION_CODES:
            self._child(self.rejections, code)
        self._backend_lock = threading.Lock()
        self._refund_queues: weakref.WeakKeyDictionary[Any, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        # storage -> (its pipeline when last read, the batches and commands counted of it)
        self._pipelines: weakref.WeakKeyDictionary[Any, tuple[Any, int, int]] = (
            weakref.WeakKeyDictionary()
        )
        self._keepers: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()
        self._overflows: weakref.WeakKeyDictionary[Any, tuple[str, int, int]] = (
            weakref.WeakKeyDictionary()  # memory storage -> (store, network, quota) counted
        )
        # identity -> its lookups by outcome when last read
        self._identities: weakref.WeakKeyDictionary[Any, dict[str, int]] = (
            weakref.WeakKeyDictionary()
        )
        # Redis storages whose eviction check is exported, and the verdicts set to 1 so far.
        self._evictions: weakref.WeakSet[Any] = weakref.WeakSet()
        self._eviction_labels: set[tuple[str, str]] = set()
        self._sync_at = 0.0
        self._multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self._pressure_sources: set[str] = set()
        self._adaptive_tiers: set[str] = set()
        self.build_info.labels(_quotaql_version()).set(1)
        self._lists: dict[str, _ListSeries] = {}
        self._sliced: dict[str, Pending] = {}
        self._waiting: dict[Pending, None] = {}  # tallies not yet added to their histogram
        self._tuning_lock = threading.Lock()
        self._flush_at = 0.0
        self._subject_period = subject_period
        self._period_end: float | None = None  # None: no subject seen since the last period
        # Tally, then add to the histograms' bucket values directly (prometheus-client's
        # internals, checked on each child: see _adds_in_bulk); False: observe() each list.
        self._bulk = True
        self.routes = Routes(self, top_operations, utilisation_window)
        self.rollout = Rollout(self)  # staged enforcement, would-be refusals (issue 25)
        self.skips = Skips(self)  # partial answers (on_field_limit = "skip")
        self.warnings = Warnings(self)
        self.candidate = CandidateMetrics(self)  # candidate weights against the live ones
        self.resolvers = ResolverTimes(self, subject_period)  # (quotaql tune --weights)
        self.incremental = Incremental(self)  # @defer / @stream
        self._register(registry)

    def _register(self, registry: CollectorRegistry) -> None:
        """Register the instruments in the table's order: each one the registry collects
        itself, and the collector of each group of the others where its first one is."""
        groups: dict[str, list[Any]] = {}
        for row in instruments.EVERY_INSTRUMENT:
            if row.collected != "registry":
                groups.setdefault(row.collected, []).append(getattr(self, row.attribute))
        for row in instruments.EVERY_INSTRUMENT:
            if row.collected == "registry":
                registry.register(getattr(self, row.attribute))
            elif row.collected in groups:
                registry.register(_Collector(self, row.collected, groups.pop(row.collected)))

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

    def watch_overflow(self, storage: Any, store: str) -> None:
        """Count a memory storage's decisions on overflow states (``store``: states, leases)."""
        with self._backend_lock:
            self._overflows.setdefault(storage, (store, 0, 0))

    def watch_lookups(self, identity: Any) -> None:
        """Count the ``key_resolver`` lookups of an :class:`~quotaql.identity.Identity`."""
        with self._backend_lock:
            self._identities.setdefault(identity, {})

    def watch_eviction(self, storage: Any) -> None:
        """Export what a Redis storage's eviction check found (``quotaql_redis_eviction``,
        read at each scrape: storage/eviction.py)."""
        with self._backend_lock:
            self._evictions.add(storage)

    def _sync_eviction(self) -> None:
        """1 for each watched storage's verdict, 0 for a verdict no longer found."""
        found: set[tuple[str, str]] = set()
        for storage in list(self._evictions):
            check = storage.eviction.check
            if check is not None:
                found.add((check.policy, check.verdict))
        for labels in self._eviction_labels - found:
            self._child(self.redis_eviction, *labels).set(0)
        for labels in found:
            self._child(self.redis_eviction, *labels).set(1)
        self._eviction_labels |= found

    def sync(self) -> None:
        """Add what the watched refund queues, pipelines and keepers counted since the last
        call to the metrics (a scrape does it first; under prometheus-client's multiprocess
        mode, where no scrape reads this process, :meth:`operation` does it once a second)."""
        with self._backend_lock:
            self._sync_at = time.monotonic() + _FLUSH_SECONDS
            waiting = 0
            for queue, (queued, coalesced) in list(self._refund_queues.items()):
                now_queued, now_coalesced = queue.queued, queue.coalesced
                self._add(self.refunds_total, names.REFUND_QUEUED, now_queued - queued)
                self._add(self.refunds_total, names.REFUND_COALESCED, now_coalesced - coalesced)
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
                self._add(self.pipeline_batches, backend, now_batches - batches)
                self._add(self.pipeline_commands, backend, now_commands - commands)
                self._pipelines[storage] = (pipeline, now_batches, now_commands)
            for keeper, (renewed, failed) in list(self._keepers.items()):
                now_renewed, now_failed = keeper.renewed, keeper.renew_failed
                self._add(self.leases_total, names.LEASE_RENEWED, now_renewed - renewed)
                self._add(self.leases_total, names.LEASE_RENEW_FAILED, now_failed - failed)
                self._keepers[keeper] = (now_renewed, now_failed)
            for storage, (store, *seen) in list(self._overflows.items()):  # network, quota
                shared = storage.overflowed_shared
                counts = list(map(max, (storage.overflowed - shared, shared), seen))
                for scope, count, before in zip(names.OVERFLOW_SCOPES, counts, seen, strict=True):
                    if count > before:
                        self._child(self.overflow, store, scope).inc(count - before)
                self._overflows[storage] = (store, *counts)
            for identity, seen in list(self._identities.items()):
                lookups = dict(identity.lookups)
                for outcome, count in lookups.items():
                    self._add(self.key_lookups, outcome, count - seen.get(outcome, 0))
                self._identities[identity] = lookups
            self._sync_eviction()
        self.routes.flush()
        self.routes.refresh()

    def _add(self, counter: Counter, label: str, count: int) -> None:
        """Add what a watched object counted since it was last read, if anything."""
        if count > 0:
            self._child(counter, label).inc(count)

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
        overage: float = 0.0,
        name: str | None = None,
        rate: float = 0.0,
    ) -> None:
        """Count one operation (``decision`` is one of ``names.DECISIONS``, ``identity`` one
        of ``names.IDENTITY_SOURCES``) of the subject ``tenant`` (its namespaced key), whose
        tenant name, where it may be shown (:class:`~quotaql.instrumentation.tenants.
        TenantNames`), is ``name``. ``rate``: the points per second its tier grants
        (:func:`~quotaql.instrumentation.routes.granted_rate`); with it, a tenant with a
        label of its own has its utilisation followed (``quotaql_tenant_utilisation``)."""
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
        label = self.tenants.label(tenant, name)
        self._child(self.tenant_requests, label, decision).inc()
        if rate and label != names.OTHER_TENANT:
            self.routes.used(label, rate, charged - refunded + overage)
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
        if overage:
            self._child(self.overage_total, tier).inc(overage)

    def config_loaded(self, generation: int, digest: str) -> None:
        """The process runs the configuration of ``generation`` (1: the first file) whose
        digest is ``digest`` (its first 12 characters are the label): sets
        ``quotaql_config_generation`` and ``quotaql_config_info{digest}`` (the previous
        digest's series removed; under multiprocess mode, where prometheus-client cannot
        remove a series, set to 0)."""
        self.routes.config_loaded(generation, digest)

    def worked(self, operation_type: str, tier: str, seconds: float) -> None:
        """Count the worker time one operation took (charged to its subject's time quota)."""
        self._child(self.time_seconds, tier).inc(seconds)
        self._child(self.operation_time, operation_type, tier).observe(seconds)

    def refused_by(self, tier: str, quota: str) -> None:
        """Count an operation refused by the budget, by the quota that refused it."""
        self._child(self.quota_refusals, tier, quota).inc()

    def rejection(self, code: str | None) -> None:
        """Count one rejected operation under its error's ``code`` (None: graphql-core's
        validation, whose errors carry none; a code of no quotaql refusal: ``other``)."""
        if code is None:
            code = names.GRAPHQL_VALIDATION_FAILED
        elif code not in names.REJECTION_CODES:
            code = names.OTHER_CODE
        self._child(self.rejections, code).inc()

    def event(self, decision: str, tier: str, charged: float, staged: str | None = None) -> None:
        """Count one subscription event after the first, and the points it was charged."""
        self._child(self.subscription_events, decision, tier).inc()
        self.rollout.event(tier, staged, decision)  # enforce_share's place, if staged
        if charged:
            self._child(self.cost_points, tier, names.CHARGED).inc(charged)

    def subscriptions(self, open_now: int) -> None:
        """Follow how many subscriptions are open."""
        self.subscriptions_open.set(open_now)

    # -- adaptive limits (once a second) ---------------------------------------------------

    def adaptive(
        self,
        pressures: Mapping[str, float],
        multipliers: Mapping[str, float],
        *,
        engaged: bool,
        culprits: int = 0,
    ) -> None:
        """Set the pressure of each source, the multiplier of each tier, the engaged state
        and how many subjects pay their own multiplier. A source or a tier no longer given
        (a reload dropped it) goes back to 0 and 1: no stale value stays behind."""
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
        self.adaptive_culprits.set(culprits)

    def pressure_ignored(self, source: str, reason: str) -> None:
        """Count one update at which ``source``'s pressure did not count for everyone
        (``reason`` is one of ``names.PRESSURE_IGNORED_REASONS``)."""
        self._child(self.pressure_ignored_total, source, reason).inc()

    def adaptive_transition(self, to: str) -> None:
        """Count one transition (``to`` is one of ``names.TRANSITIONS``)."""
        self._child(self.adaptive_transitions_total, to).inc()

    def adaptive_transitions(self) -> None:
        """Create both transition series at 0, and those of the measured sources' ignored
        pressure, so that ``increase()`` sees the first one."""
        for to in names.TRANSITIONS:
            self._child(self.adaptive_transitions_total, to)
        for source in (names.PRESSURE_LATENCY, names.PRESSURE_ERRORS):
            for reason in names.PRESSURE_IGNORED_REASONS:
                self._child(self.pressure_ignored_total, source, reason)

    # -- the tuning metrics (quotaql tune) --------------------------------------------------
    # Called for a sampled fraction of the operations. list_sizes() may get dozens of lists
    # per operation, and Histogram.observe() costs ~1.5 µs: the observations are tallied per
    # coordinate and bucket first, then each histogram child gets one increment per bucket
    # hit (and one of its sum) instead of one observe() per list.

    def list_sizes(
        self, observations: Sequence[tuple[str, float, int, bool]], subject: str | None = None
    ) -> None:
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

        ``subject`` is who paid for the operation (the gate's subject key). Its class
        (:func:`~quotaql.instrumentation.subjects.subject_class`: an address by its /24 or
        /48 network) feeds ``LIST_SUBJECT_MAX_ITEMS``: once per period
        (``subject_period``, a minute) and coordinate, the longest list it returned in the
        period, so that a subject sending many lists weighs no more than one sending a
        few. A process keeps at most ``names.LIST_SUBJECTS_KEPT`` subjects per coordinate
        and period (beyond, a uniform sample of them, by a keyed hash), and only hashes.

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
        who = None if subject is None else class_hash(subject)
        now = time.monotonic()
        with self._tuning_lock:
            if self._period_end is not None and now >= self._period_end:
                self._close_period()
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
                series.returned.tally(returned, index)
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
                pending.tally(items)
                if items > series.max_returned:
                    series.max_returned = items
                    series.max_gauge.set(items)
                if who is not None:
                    series.subjects.add(who, items)
            if who is not None and longest and self._period_end is None:
                self._period_end = now + self._subject_period
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
            pending = self._sliced[coordinate] = Pending(child, _RATIO_BOUNDS, self._bulk)
        pending.tally(ratio)
        self._waiting[pending] = None

    def flush(self, *, final: bool = False) -> None:
        """Add the list tallies waiting in this process to the histograms now (collecting
        the registry does it too), and the subjects' longest lists of a period that is
        over. ``final``: the current period is over too (under multiprocess mode, call
        ``flush(final=True)`` when a worker stops)."""
        with self._tuning_lock:
            end = self._period_end
            if end is not None and (final or time.monotonic() >= end):
                self._close_period()
            self._add_waiting()
        self.routes.flush()
        self.resolvers.flush(final=final)

    def _close_period(self) -> None:
        """Each coordinate's subjects of the period: their longest lists, observed once
        each (under ``_tuning_lock``)."""
        self._period_end = None
        waiting = self._waiting
        for series in self._lists.values():
            pending = series.subject_max
            for items in series.subjects.close():
                pending.tally(items)
                waiting[pending] = None

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


_INF = math.inf
_SIZE_BOUNDS: Final = (*names.LIST_SIZE_BUCKETS, _INF)
_RATIO_BOUNDS: Final = (*names.RATIO_BUCKETS, _INF)
_FLUSH_SECONDS: Final = 1.0
#: The bucket of a list of n items, for n from 0 to the largest finite edge (bisect is slower).
_SIZE_INDEX: Final = tuple(
    bisect_left(_SIZE_BOUNDS, n) for n in range(int(names.LIST_SIZE_BUCKETS[-1]) + 1)
)
_SIZE_INF: Final = len(_SIZE_BOUNDS) - 1


class _ListSeries:
    """One coordinate's unsliced-list series, their children resolved once."""

    __slots__ = ("assumed", "assumed_gauge", "max_gauge", "max_returned", "operation_max",
                 "returned", "subject_max", "subjects")  # fmt: skip

    def __init__(self, metrics: PrometheusMetrics, coordinate: str) -> None:
        bulk = metrics._bulk
        self.returned = Pending(metrics.list_returned.labels(coordinate), _SIZE_BOUNDS, bulk)
        self.operation_max = Pending(
            metrics.list_operation_max.labels(coordinate), _SIZE_BOUNDS, bulk
        )
        self.assumed_gauge: Any = metrics.list_assumed.labels(coordinate)
        self.max_gauge: Any = metrics.list_max_returned.labels(coordinate)
        self.subjects = SubjectMaxima(names.LIST_SUBJECTS_KEPT)
        self.subject_max = Pending(metrics.list_subject_max.labels(coordinate), _SIZE_BOUNDS, bulk)
        self.assumed = -1.0  # no value yet: the first observation sets the gauge
        self.max_returned = -1


class _Collector:
    """Collects a group of instruments after bringing them up to date, so that every
    collection (a scrape) sees every call made before it: ``backend`` (the lease, refund and
    pipeline series) after :meth:`PrometheusMetrics.sync` added what the watched objects
    counted since; ``tuning`` (the list metrics) after :meth:`PrometheusMetrics.flush` added
    what :meth:`PrometheusMetrics.list_sizes` tallied."""

    def __init__(self, metrics: PrometheusMetrics, group: str, collected: Sequence[Any]) -> None:
        self._update = metrics.sync if group == "backend" else metrics.flush
        self._collected = tuple(collected)

    def describe(self) -> list[Any]:
        return [family for metric in self._collected for family in metric.describe()]

    def collect(self) -> Iterator[Any]:
        self._update()
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
