"""The operation recorder: what the gate tells of a finished operation (metrics, its span)
and of everything on the way (rate-limited logs, the lease counts)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from quotaql.contract import error_code
from quotaql.gate import warn
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import clipped
from quotaql.instrumentation.routes import granted_rate
from quotaql.instrumentation.tenants import TenantNames, hashed
from quotaql.limiter.shards import shard_taken
from quotaql.policy.numbers import is_whole, left, points, seconds
from quotaql.storage.base import is_pipelined

if TYPE_CHECKING:
    from quotaql.gate.operation import Operation
    from quotaql.instrumentation.logs import StructuredLog
    from quotaql.instrumentation.metrics import PrometheusMetrics
    from quotaql.limiter.concurrency import Lease
    from quotaql.limiter.rate import AsyncLimiter, Limiter
    from quotaql.policy.quota import Decision
    from quotaql.storage.leases import LeaseKeeper

__all__ = ["OperationRecorder", "watch"]


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
            if op.timings:
                metrics.resolvers.record(op.timings, op.subject.key)
            if op.staged is not None or outcome in _BUDGET_DECIDED:
                tenant = (op.subject.key, self.names.name(op.subject))
                metrics.rollout.operation(op.tier.name, op.staged, outcome, decision, tenant)
        caution = warn.caution_of(op)  # counted whether or not the answer showed it
        if caution is not None and metrics is not None:
            metrics.warnings.warned(op.tier.name, caution.quota)
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
                shard = shard_taken(decision)  # sharded shared quotas (issue 26)
                if shard is not None:
                    attributes[names.ATTR_SHARD] = shard
            if lease is not None and lease.leases is not None:
                attributes[names.ATTR_IN_FLIGHT] = lease.in_flight
            if op.staged is not None:  # enforce_share: in the enforced share, or shadow
                attributes[names.ATTR_STAGED] = op.staged
            span.set_attributes(attributes)
            if caution is not None:
                span.add_event(names.EVENT_QUOTA_WARNING, {
                    names.ATTR_WARNING_QUOTA: caution.quota,
                    names.ATTR_WARNING_REMAINING: caution.remaining,
                    names.ATTR_WARNING_CAPACITY: caution.capacity,
                    names.ATTR_WARNING_RATE: caution.rate,
                    names.ATTR_WARNING_ENFORCED: caution.enforced,
                })  # fmt: skip
        return span

    def log_op(self, op: Operation, event: str, *args: object, wait: float | None = None) -> None:
        """Log one line a person can read about ``op`` (a refusal, a shadow refusal, a
        wait): what it is, whose (:attr:`names`), its tier, its cost, and why, every number
        rounded as clients see it; the same as ``extra`` fields (docs/logging.md).

        ``args`` may name the code of the limit ``op`` crossed where ``op`` does not tell
        it (a shadow refusal answers no error): the first upper-case code among them;
        ``wait``: the seconds a delayed operation waits. At most so many lines per event
        and per subject (:class:`~quotaql.instrumentation.logs.StructuredLog`); nothing is
        built for a line the rate limit drops (a flood of refusals)."""
        subject = op.subject
        suppressed = self.log.take(logging.INFO, event, subject.key)
        if suppressed is None:
            return
        line, fields = _described(op, event, _code_of(args), wait)
        fields["tenant"] = tenant = clipped(self.names.shown(subject))
        fields["identity"] = subject.source
        tier = fields["tier"] = op.tier.name
        verb = _VERBS.get(event, event.replace("_", " "))
        if op.staged is not None:
            fields[names.STAGED_LOG_FIELD] = op.staged
            if op.staged == "shadow" and event == names.SHADOW_BLOCKED:
                verb = _SHADOW_BY_SHARE
        self.log.emit(logging.INFO, event, suppressed, "%s", f"quotaql: {verb} {line[0]} of tenant"
                      f" {tenant} (tier {tier}){line[1]}", **fields)  # fmt: skip

    def say_once(self, event: str, message: str, level: int = logging.WARNING) -> None:
        """Log ``message`` the first time ``event`` happens, never again (not rate-limited:
        it cannot repeat)."""
        if event in self._said:
            return
        self._said.add(event)
        self.log.emit(level, event, 0, "%s", message)

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
# What the budget decided, refused or would have: the rollout's series (a capacity it needed).
_BUDGET_DECIDED = frozenset({names.BLOCKED, names.SHADOW_BLOCKED})


# What each event's line says was done to the operation.
_VERBS = {
    names.BLOCKED: "blocked",
    names.SHADOW_BLOCKED: "shadow mode would have blocked",
    names.DENIED: "denied",
    names.REJECTED: "rejected",
    names.UNKNOWN_KEY: "refused",
    names.TOO_MANY_CONCURRENT: "refused",
    names.TOO_MANY_SUBSCRIPTIONS: "refused",
    names.FAIL_CLOSED: "refused",
    names.DELAYED: "delayed",
    names.DELAY_CANCELLED: "gave back the debit of",
}
# A subject outside its enforce tier's enforce_share: shadow because of the share, not a mode.
_SHADOW_BY_SHARE = "shadow by enforce_share would have blocked"
_NAME_LIMIT = 100  # the characters of an operation name a line shows


def _code_of(args: tuple[object, ...]) -> str | None:
    """The first ``UPPER_CASE`` code among a caller's ``args`` (a message and its
    arguments, as callers passed them before, or the code alone)."""
    for arg in args:
        if isinstance(arg, str) and arg.isupper() and arg.replace("_", "").isalnum():
            return arg
    return None


def _described(
    op: Operation, event: str, code: str | None, wait: float | None
) -> tuple[tuple[str, str], dict[str, Any]]:
    """What ``op`` is (``query GetOrders``) and what its line says after its tenant and
    tier (``: costs 490 points, 210 of 300 left ...``), and the fields of the record."""
    report = op.report
    operation_type = op.operation_type
    kind = operation_type or "operation"
    name = report.operation_name if report is not None else op.operation_name
    name = clipped(name, _NAME_LIMIT) if name else None
    what = kind if name is None else f"{kind} {name}"
    if kind == "subscription" and op.events > 1:
        what += f" (event {op.events})"
    cost = report.cost if report is not None else op.charge
    decision = op.decision
    refusal = decision if decision is not None and not decision.allowed else None
    if code is None:
        code = op.code or op.violation
    if code is None and refusal is not None:
        code = error_code(refusal)
    fields: dict[str, Any] = {
        "cost": points(cost),
        "operation_type": operation_type,
        "operation_name": name,
        "code": code,
        "limited_by": None,
        "remaining": None,
        "limit": None,
        "retry_after": None,
    }
    tail = f": costs {_points(cost)}, " if cost else ": "
    if event == names.DELAYED:
        waits = seconds(wait if wait is not None else decision.delay if decision else 0.0)
        fields["delay"] = waits
        return (what, f"{tail}waits {waits} s for its turn"), fields
    if event == names.DELAY_CANCELLED:
        fields["refunded"] = refunded = points(op.refunded)
        return (what, f"{tail}its client left while it waited; {_points(refunded)} given back"), (
            fields
        )
    if refusal is not None:
        why = _refusal(refusal, event, fields)
        if event == names.BLOCKED and kind == "subscription" and op.events > 1:
            why += "; the subscription ends"
        return (what, tail + why), fields
    error = op.error
    why = code or "refused"
    if error is not None and error.message:
        why += ": " + clipped(error.message)
    return (what, tail + why), fields


def _points(value: float) -> str:
    """``1 point``, ``70 points``, ``2.5 points``."""
    shown = points(value)
    return f"{shown} point" if shown == 1 else f"{shown} points"


def _refusal(decision: Decision, event: str, fields: dict[str, Any]) -> str:
    """Why the limiter refused (a quota, what is left of it, when to retry), the numbers
    rounded as a client reads them; ``fields`` take them too."""
    quota, limit = decision.limited_by, points(decision.limit)
    retry = decision.retry_after
    fields["limited_by"], fields["limit"] = quota, limit
    if retry is not None and retry > 0:
        fields["retry_after"] = seconds(retry)
    if decision.reason == "exceeds_capacity":
        return f'more than quota "{quota}" ever holds ({limit}): {fields["code"]}'
    if decision.source == "fail_closed" or decision.reason == "backend_unavailable":
        return (
            f"the rate limiter is unavailable: {fields['code']}; retry in {seconds(retry or 1.0)} s"
        )
    whole = is_whole(decision.cost) and is_whole(decision.limit)
    fields["remaining"] = remaining = left(decision.remaining, whole)
    why = f'{remaining} of {limit} left on quota "{quota}"'
    if fields["retry_after"] is not None:
        why += f"; retry in {fields['retry_after']} s"
    if event == names.DENIED:
        why += " (deny cache)"
    return why


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
