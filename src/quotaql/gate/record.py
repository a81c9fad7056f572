"""The operation recorder: what the gate tells of a finished operation (metrics, its span)
and of everything on the way (rate-limited logs, the lease counts)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from quotaql.instrumentation import names
from quotaql.instrumentation.routes import granted_rate
from quotaql.instrumentation.tenants import TenantNames, hashed
from quotaql.storage.base import is_pipelined

if TYPE_CHECKING:
    from quotaql.gate.operation import Operation
    from quotaql.instrumentation.logs import StructuredLog
    from quotaql.instrumentation.metrics import PrometheusMetrics
    from quotaql.limiter.concurrency import Lease
    from quotaql.limiter.rate import AsyncLimiter, Limiter
    from quotaql.storage.leases import LeaseKeeper

__all__ = ["SHADOW_MESSAGE", "OperationRecorder", "watch"]

SHADOW_MESSAGE = "quotaql: shadow mode would have blocked %s"


class OperationRecorder:
    """Records operations in the gate's metrics (if any), spans and log.

    It is the concurrency limiter's :class:`~quotaql.limiter.concurrency.LeaseRecorder` too.
    """

    def __init__(
        self, metrics: PrometheusMetrics | None, log: StructuredLog, *, resolved: bool = False
    ) -> None:
        self.metrics = metrics
        self.log = log
        # What spans, logs and metric labels call a subject: a tenant by its name where
        # that name is not an API key (with a key_resolver, or allowlisted), else hashed.
        self.names = TenantNames(
            metrics.tenants.allowlist if metrics is not None else (), resolved=resolved
        )
        self._said: set[str] = set()  # what has been logged once

    def finished(self, op: Operation, lease: Lease | None) -> Any:
        """Count ``op`` (its outcome, cost, charge, refund) and set its span's attributes:
        the span, for the caller to end (None: not traced)."""
        report, decision = op.report, op.decision
        operation_type = op.operation_type or "unknown"
        outcome = op.outcome
        metrics = self.metrics
        if metrics is not None:
            charged = op.charge if op.debited or op.paid_minimum else 0.0
            metrics.operation(
                outcome,
                operation_type,
                op.tier.name,
                op.subject.key,
                cost=report.cost if report else None,
                depth=report.depth if report else None,
                actual=op.actual,
                charged=charged,
                refunded=op.refunded,
                identity=op.subject.source,
                overage=op.overage,
                name=self.names.name(op.subject),
                rate=granted_rate(op.tier.quota),
            )
            seconds = op.work.ns / 1e9 if op.work.ns and op.time is not None else None
            if report is not None:
                paid = charged - op.refunded + op.overage  # what it cost its subject in the end
                metrics.routes.record(outcome, report, paid, seconds)
            if outcome == names.REJECTED:
                metrics.rejection(op.code)
            if report is not None and op.actual is not None:
                metrics.estimate(operation_type, op.tier.name, report.cost, op.actual)
            if seconds is not None:
                metrics.worked(operation_type, op.tier.name, seconds)
            limited_by = _limited_by(op)
            if limited_by is not None:
                metrics.refused_by(op.tier.name, limited_by)
            if op.sizes:
                metrics.list_sizes(op.sizes, op.subject.key)
        span = op.span
        if span is not None:
            attributes: dict[str, Any] = {
                names.ATTR_OPERATION_TYPE: operation_type,
                names.ATTR_TENANT: self.names.shown(op.subject),
                names.ATTR_IDENTITY: op.subject.source,
                names.ATTR_TIER: op.tier.name,
                names.ATTR_DECISION: outcome,
            }
            if report is not None and report.operation_name:
                attributes[names.ATTR_OPERATION_NAME] = report.operation_name
            if report is not None:
                attributes[names.ATTR_COST_ESTIMATED] = report.cost
                attributes[names.ATTR_COST_MODEL] = report.model
                attributes[names.ATTR_DEPTH] = report.depth
            if op.actual is not None:
                attributes[names.ATTR_COST_ACTUAL] = op.actual
            if op.overage:
                attributes[names.ATTR_COST_OVERAGE] = op.overage
            if op.work.ns and op.time is not None:
                attributes[names.ATTR_TIME_MS] = op.work.ms
            limited = _limited_by(op)
            if limited is not None:
                attributes[names.ATTR_LIMITED_BY] = limited
            if op.events:
                attributes[names.ATTR_EVENTS] = op.events
            if op.error is not None:
                attributes[names.ATTR_CODE] = op.code or names.GRAPHQL_VALIDATION_FAILED
            if op.multiplier < 1.0:
                attributes[names.ATTR_ADAPTIVE_MULTIPLIER] = op.multiplier
            if decision is not None:
                attributes[names.ATTR_REMAINING] = decision.remaining
                attributes[names.ATTR_BACKEND] = decision.source
                if decision.retry_after:
                    attributes[names.ATTR_RETRY_AFTER] = decision.retry_after
            if lease is not None and lease.leases is not None:
                attributes[names.ATTR_IN_FLIGHT] = lease.in_flight
            span.set_attributes(attributes)
        return span

    def log_op(self, op: Operation, event: str, message: str, *args: object) -> None:
        """Log ``message % args`` about ``op`` with its subject (named or hashed: ``names``),
        tier and cost;
        nothing is built for a record the rate limit drops (a flood of refusals)."""
        suppressed = self.log.take(logging.INFO, event)
        if suppressed is None:
            return
        tenant, tier = self.names.shown(op.subject), op.tier.name
        self.log.emit(
            logging.INFO, event, suppressed, message + " (tenant %s, tier %s)", *args, tenant,
            tier, tenant=tenant, identity=op.subject.source, tier=tier, cost=op.cost,
        )  # fmt: skip

    def say_once(self, event: str, message: str, level: int = logging.WARNING) -> None:
        """Log ``message`` the first time ``event`` happens, never again."""
        if event in self._said:
            return
        self._said.add(event)
        self.log.log(level, event, message)

    # -- the concurrency limiter's events ---------------------------------------------------

    def leases(self, outcome: str) -> None:
        """Count what became of a lease."""
        if self.metrics is not None:
            self.metrics.leases(outcome)

    def in_flight(self, tier: str, count: int) -> None:
        """The leases this process holds of ``tier``."""
        if self.metrics is not None:
            self.metrics.in_flight(tier, count)

    def watch_leases(self, keeper: LeaseKeeper) -> None:
        """Export what a new keeper renews."""
        if self.metrics is not None:
            self.metrics.watch_leases(keeper)

    def lease_expired(self, lease: Lease, live_in: int, span: Any) -> None:
        """A lease expired before its operation ended: an event on its span, and a warning."""
        if span is not None:
            span.add_event(names.EVENT_LEASE_EXPIRED, {"quotaql.lease.live_in": live_in})
        tenant = hashed(lease.key)
        self.log.log(
            logging.WARNING,
            "lease_expired",
            "quotaql: a lease of tenant %s (tier %s) expired before its operation ended (a"
            " stall or a storage outage longer than lease_ttl): its slot may have been taken"
            " meanwhile",
            tenant,
            lease.tier,
            tenant=tenant,
            tier=lease.tier,
            limits=list(lease.names),
        )


def _limited_by(op: Operation) -> str | None:
    """The quota that refused ``op`` for its budget (blocked or denied), if one did."""
    decision = op.decision
    if decision is None or decision.allowed or op.outcome not in _BUDGET_REFUSED:
        return None
    return decision.limited_by


_BUDGET_REFUSED = frozenset({names.BLOCKED, names.DENIED})


def watch(metrics: PrometheusMetrics, limiter: Limiter | AsyncLimiter, identity: Any) -> None:
    """Have ``metrics`` read what the limiter's parts count themselves: the deferred
    refunds, the storage's pipeline, the memory storages' overflow past ``max_keys``, and
    ``identity``'s ``key_resolver`` lookups (None: no resolver)."""
    queue = limiter.refund_queue
    if queue is not None:
        metrics.watch_refunds(queue)
    storage = limiter.core.storage
    if is_pipelined(storage):
        metrics.watch_pipeline(storage)
    if identity is not None:
        metrics.watch_lookups(identity)
    for memory in (storage, limiter.core.fallback):
        if hasattr(memory, "overflowed_shared"):
            metrics.watch_overflow(memory, names.STORE_STATES)
