"""Consumption by route and by tenant: root fields, operation names and utilisation.

Every label stays bounded whatever clients send: a root field's ``coordinate`` comes from the
priced plan (only fields of the schema), an ``operation_name`` from a Space-Saving top-N
(:class:`~quotaql.instrumentation.tenants.TenantLabels`, ``other`` beyond, a name longer than
``names.MAX_OPERATION_NAME`` hashed), and the utilisation gauge exists only for tenants that
have a label of their own.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Final, Protocol

from quotaql.instrumentation import names
from quotaql.instrumentation.tallies import Pending
from quotaql.instrumentation.tenants import TenantLabels, hashed

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Priced", "Routes", "granted_rate"]


class _RootCost(Protocol):
    @property
    def cost(self) -> float: ...


class Priced(Protocol):
    """What is read of a priced operation's report (a ``cost_analysis.CostReport``)."""

    @property
    def root_field_costs(self) -> Mapping[str, _RootCost]: ...

    @property
    def operation_name(self) -> str | None: ...


def granted_rate(quota: Any) -> float:
    """The points per second ``quota`` grants in the long run: a bucket's refill rate, a
    window's limit over its length (0: unknown)."""
    rate = quota.refill_per_second
    if rate is not None:
        return float(rate)
    limit, window = quota.limit, quota.window_seconds
    if limit is not None and window:
        return float(limit) / float(window)
    return 0.0


class Routes:
    """The series of root fields, operation names and tenants' utilisation of one
    :class:`~quotaql.instrumentation.metrics.PrometheusMetrics`, their children cached."""

    def __init__(self, metrics: Any, top_operations: int, window: float) -> None:
        self._metrics = metrics  # a PrometheusMetrics (not imported: it imports this module)
        self.window = window
        self.operations = TenantLabels((), top_operations)
        self._labels: dict[str | None, str] = {None: names.ANONYMOUS_OPERATION}
        # coordinate or operation label -> its series, their children resolved once
        self._fields: dict[str, _Series] = {}
        self._named: dict[str, _Series] = {}
        self._waiting: dict[_Series, None] = {}  # tallied since they were last added
        self._flush_at = 0.0
        self._lock = threading.Lock()
        self._digest: str | None = None  # the digest of the configuration loaded last
        # tenant label -> [rate, half start, this half's points, the last half's points]
        self._used: dict[str, list[float]] = {}

    # -- root fields and operation names ---------------------------------------------------

    def record(self, decision: str, report: Priced, paid: float, seconds: float | None) -> None:
        """Count one priced operation (``report``, its
        :class:`~quotaql.cost_analysis.CostReport`) under each root field it selected and
        under its name: ``paid`` the points it paid in the end (charged - refunded +
        overage), ``seconds`` its worker time (None: not measured).

        Example:
            >>> from graphql import build_schema
            >>> from prometheus_client import CollectorRegistry
            >>> from quotaql.cost_analysis import analyze
            >>> from quotaql.instrumentation.metrics import PrometheusMetrics
            >>> schema = build_schema("type Query { products: [Int] }")
            >>> report = analyze(schema, "query Shop { products }")
            >>> registry = CollectorRegistry()
            >>> metrics = PrometheusMetrics(registry)
            >>> metrics.routes.record("allowed", report, paid=11, seconds=None)
            >>> registry.get_sample_value(
            ...     "quotaql_root_field_cost_total", {"coordinate": "Query.products"}
            ... )
            11.0
        """
        now = time.monotonic()
        roots = report.root_field_costs  # computed once per plan (the report is cached)
        if seconds is not None:
            bucket = bisect_left(_TIME_BOUNDS, seconds) if 0 <= seconds < _INF else -1
        label = self._operation_label(report.operation_name)
        with self._lock:
            waiting = self._waiting
            if roots:
                total = 0.0
                for root in roots.values():
                    total += root.cost
                fields = self._fields
                for coordinate, root in roots.items():
                    series = fields.get(coordinate)
                    if series is None:
                        series = fields[coordinate] = self._series(coordinate, field=True)
                    requests = series.requests
                    requests[decision] = requests.get(decision, 0) + 1
                    if paid:
                        series.paid += paid * root.cost / total if total > 0 else paid / len(roots)
                    if seconds is not None and bucket >= 0:
                        series.time.tally(seconds, bucket)
                    waiting[series] = None
            series = self._named.get(label)
            if series is None:
                series = self._named[label] = self._series(label, field=False)
            requests = series.requests
            requests[decision] = requests.get(decision, 0) + 1
            series.paid += paid
            if seconds is not None and bucket >= 0:
                series.time.tally(seconds, bucket)
            waiting[series] = None
            if now >= self._flush_at:
                self._flush_at = now + _FLUSH_SECONDS
                self._add_waiting()

    def flush(self) -> None:
        """Add what :meth:`record` tallied to the counters and histograms now (a collection
        of the registry does it first; :meth:`record` at most once a second)."""
        with self._lock:
            self._add_waiting()

    def _add_waiting(self) -> None:
        for series in self._waiting:
            series.add()
        self._waiting.clear()

    def _series(self, label: str, *, field: bool) -> _Series:
        metrics = self._metrics
        if field:
            return _Series(
                metrics.root_field_requests.labels,
                metrics.root_field_cost.labels(label),
                metrics.root_field_time.labels(label),
                label,
            )
        return _Series(
            metrics.operation_name_requests.labels,
            metrics.operation_name_cost.labels(label),
            metrics.operation_name_time.labels(label),
            label,
        )

    def _operation_label(self, name: str | None) -> str:
        """The ``operation_name`` of an operation named ``name``."""
        label = self._labels.get(name)
        if label is not None:  # anonymous, or a name with a label of its own
            return label
        assert name is not None
        if len(name) > names.MAX_OPERATION_NAME:  # its hash: no label is ever that long
            label = self.operations.label(name, hashed(name))
        else:
            label = self.operations.label(name, name)
        if label != names.OTHER_OPERATION:
            self._labels[name] = label  # at most top_operations names
        return label

    # -- utilisation -------------------------------------------------------------------------

    def used(self, tenant: str, rate: float, paid: float) -> None:
        """``tenant`` (a label of its own) paid ``paid`` points under a tier granting ``rate``
        points per second: its utilisation gauge follows."""
        now = time.monotonic()
        with self._lock:
            state = self._used.get(tenant)
            if state is None:
                state = self._used[tenant] = [rate, now, 0.0, 0.0]
            state[0] = rate
            self._roll(state, now)
            state[2] += paid
            value = self._value(state, now)
        self._metrics._child(self._metrics.tenant_utilisation, tenant).set(value)

    def refresh(self) -> None:
        """Bring every tenant's utilisation up to now (a scrape does it first; a tenant
        that stopped paying goes down to 0)."""
        now = time.monotonic()
        metrics = self._metrics
        with self._lock:
            values = []
            for tenant, state in self._used.items():
                self._roll(state, now)
                values.append((tenant, self._value(state, now)))
        for tenant, value in values:
            metrics._child(metrics.tenant_utilisation, tenant).set(value)

    def _roll(self, state: list[float], now: float) -> None:
        """Start a new window if the current one is over (the last one empty if both are)."""
        window = self.window
        elapsed = now - state[1]
        if elapsed < window:
            return
        if elapsed < 2 * window:
            state[3], state[2] = state[2], 0.0
            state[1] += window
        else:
            state[3] = state[2] = 0.0
            state[1] = now

    def _value(self, state: list[float], now: float) -> float:
        """What was paid over the last window (a sliding counter: the current window's
        points, and the last one's weighed by how much of it is still inside) ÷ what the
        tier grants in a window."""
        rate = state[0]
        if rate <= 0:
            return 0.0
        window = self.window
        inside = max(0.0, 1.0 - (now - state[1]) / window)
        return (state[2] + state[3] * inside) / (rate * window)

    # -- the configuration in force ----------------------------------------------------------

    def config_loaded(self, generation: int, digest: str) -> None:
        """See :meth:`PrometheusMetrics.config_loaded`."""
        metrics = self._metrics
        digest = digest[:12]
        with self._lock:
            previous, self._digest = self._digest, digest
            metrics.config_generation.set(generation)
            if previous is not None and previous != digest:
                child = metrics._children.pop((id(metrics.config_info), (previous,)), None)
                if metrics._multiprocess:  # prometheus-client cannot remove a series there
                    if child is not None:
                        child.set(0)
                else:
                    metrics.config_info.remove(previous)
            metrics._child(metrics.config_info, digest).set(1)


class _Series:
    """One coordinate's or operation name's children (its requests by decision, its points,
    its worker time) and what was tallied for them since they were last added to."""

    __slots__ = ("__weakref__", "_children", "_cost", "_labels", "label", "paid", "requests",
                 "time")  # fmt: skip

    def __init__(self, labels: Any, cost: Any, histogram: Any, label: str) -> None:
        self._labels = labels  # the requests counter's labels(): (label, decision)
        self._children: dict[str, Any] = {}
        self._cost = cost
        self.label = label
        self.requests: dict[str, int] = {}
        self.paid = 0.0
        self.time = Pending(histogram, _TIME_BOUNDS, bulk=True)

    def add(self) -> None:
        """Add the tallies to the children, and start them again."""
        children = self._children
        for decision, count in self.requests.items():
            child = children.get(decision)
            if child is None:
                child = children[decision] = self._labels(self.label, decision)
            child.inc(count)
        self.requests.clear()
        if self.paid:
            self._cost.inc(self.paid)
            self.paid = 0.0
        self.time.add()


_INF = math.inf
_TIME_BOUNDS: Final = (*names.TIME_BUCKETS, _INF)
_FLUSH_SECONDS: Final = 1.0
