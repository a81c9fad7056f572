"""What an operation holds while it runs: one of its subject's subscription slots
(``[limits] max_subscriptions``) and its concurrency lease (``max_in_flight``), taken
before it is debited and given back when it ends, however it ends."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from quotaql._flow import TakeLease
from quotaql.contract import (
    IN_FLIGHT,
    IN_FLIGHT_SUBSCRIPTIONS,
    RATE_LIMITER_UNAVAILABLE,
    TOO_MANY_CONCURRENT,
    rate_limit_error,
    too_many_concurrent_error,
)
from quotaql.gate import charges
from quotaql.gate.charges import SUBSCRIPTION_LEASES, TIER_LEASES
from quotaql.gate.operation import Outcome
from quotaql.gate.slots import Slots
from quotaql.instrumentation import names
from quotaql.limiter.concurrency import Lease
from quotaql.policy.modes import Mode
from quotaql.policy.quota import Decision
from quotaql.storage.leases import new_lease_id

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from graphql import GraphQLError

    from quotaql.config.values import LimitsConfig
    from quotaql.cost_analysis import CostReport
    from quotaql.gate.operation import Operation
    from quotaql.gate.record import OperationRecorder
    from quotaql.limiter.concurrency import ConcurrencyLimiter, Taken
    from quotaql.storage.leases import LeaseSpec

__all__ = ["Holdings", "limited_by"]


class Holdings:
    """The subscription slots and concurrency leases of one gate's operations.

    Args:
        concurrency: the concurrency limiter the leases are taken through.
        record: the gate's recorder (metrics and log).
        refuse: refuses an operation with a limiter's error (and its HTTP status).
    """

    limits: LimitsConfig  # the [limits] in force (configure: at once, and at each reload)

    def __init__(
        self,
        concurrency: ConcurrencyLimiter,
        record: OperationRecorder,
        refuse: Callable[[Operation, GraphQLError], GraphQLError],
    ) -> None:
        self.concurrency = concurrency
        self.metrics = record.metrics
        self._log = record.log_op
        self._refuse = refuse
        self._slots = Slots()  # open subscriptions per subject

    def configure(self, limits: LimitsConfig) -> None:
        """Take the ``[limits]`` in force (the retry time of a concurrency refusal)."""
        self.limits = limits

    def open_subscriptions(self) -> int:
        """How many subscriptions this process holds open."""
        return self._slots.total()

    def lease_first(self, op: Operation, report: CostReport) -> Generator[Any, Any, bool]:
        """The lease of an operation of a tier with a concurrency limit, before its debit:
        True when it may run; refused, its subscription slot is given back."""
        in_flight = charges.in_flight(op.tier)
        assert in_flight is not None  # the caller looked
        specs = in_flight.specs(report.operation_type, report.root_field_costs)
        if specs is not None and not specs:
            return True  # no limit applies to this one (a root field's only, not selected)
        try:
            runs: bool = yield from self._take_lease(op, specs)
        except BaseException:
            self.free_slot(op)
            raise
        if not runs:
            self.free_slot(op)
        return runs

    def _take_lease(
        self, op: Operation, specs: tuple[LeaseSpec, ...] | None
    ) -> Generator[Any, Any, bool]:
        """A lease for ``op`` in the sets of ``specs`` (None: a subscription its tier
        allows none of): True when it may run (with a lease, or without one in shadow mode
        or failing open), False when it was refused (``TOO_MANY_CONCURRENT``, or the
        storage failed under ``closed``)."""
        key = op.subject.key
        if specs is None:  # max_subscriptions_in_flight = 0
            return self._in_flight_refused(op, IN_FLIGHT_SUBSCRIPTIONS, 0, None)
        lease = new_lease_id()
        try:
            taken: Taken = yield TakeLease(key, specs, lease)
        except BaseException:  # closed while taking: it may have been taken, give it back
            if not self.concurrency.is_async:  # (async: once the take is answered)
                self.concurrency.release_later(
                    Lease(lease, key, tuple(spec.name for spec in specs), None, None, "", 0,
                           self.concurrency.store)
                )  # fmt: skip
            raise
        result = taken.result
        names_ = tuple(spec.name for spec in taken.specs)
        if result is None:  # the storage failed: open runs without a lease, closed refuses
            op.lease = Lease(lease, key, names_, None, None, op.tier.name, 0, taken.stray)
            self.concurrency.watch(op, op.lease)
            if self.concurrency.rates.on_backend_error != "closed" or op.mode is not Mode.ENFORCE:
                return True
            # As the limiter's own fail-closed decision: its quotas' sizes, nothing debited.
            retry = max(self.concurrency.rates.breaker.retry_after(), 1.0)
            limit = min((quota.maximum for quota in op.quotas), default=math.inf)
            decision = Decision(
                False, op.charge, 0.0, limit, retry, 0.0, None, "fail_closed",
                "backend_unavailable",
            )  # fmt: skip
            op.decided(decision)
            self._refuse(op, rate_limit_error(decision))
            self._log(op, names.FAIL_CLOSED, RATE_LIMITER_UNAVAILABLE)
            return False
        if result.taken:
            count = result.in_flight[0] if result.in_flight else 0
            keeper = self.concurrency.keeper_of(taken.leases)
            op.lease = Lease(lease, key, names_, taken.leases, keeper, op.tier.name, count,
                             taken.stray)  # fmt: skip
            self.concurrency.watch(op, op.lease)
            self.concurrency.held(op.tier.name, 1)
            return True
        if taken.stray is not None:  # refused by the local fallback: the stray take goes back
            self.concurrency.release_later(
                Lease(lease, key, names_, None, None, "", 0, taken.stray)
            )
        refusing = result.limited_by or names_[0]
        maximum = next(spec.maximum for spec in taken.specs if spec.name == refusing)
        return self._in_flight_refused(op, limited_by(refusing), maximum, result.next_free_ms)

    def _in_flight_refused(
        self, op: Operation, limited_by: str, maximum: int, next_free_ms: int | None
    ) -> bool:
        """A full lease set: refuse ``op`` (``TOO_MANY_CONCURRENT``, nothing debited, not
        remembered by the deny cache: a slot may free at any moment), or in shadow mode
        let it run without a lease; True when it runs."""
        if op.mode is not Mode.ENFORCE:
            op.violated(TOO_MANY_CONCURRENT)
            self._log(op, names.SHADOW_BLOCKED, TOO_MANY_CONCURRENT)
            return True
        error = too_many_concurrent_error(limited_by, maximum, self._in_flight_wait(next_free_ms))
        self._refuse(op, error)
        op.outcome = Outcome.TOO_MANY_CONCURRENT
        self._log(op, names.TOO_MANY_CONCURRENT, TOO_MANY_CONCURRENT)
        return False

    def release(self, op: Operation, *, end_span: bool = False) -> Any:
        """Give ``op``'s lease back now: None when done, or a coroutine that does it (async
        lease storage; with ``end_span``, it ends ``op``'s span once done)."""
        lease = op.lease
        if lease is None:
            return None
        op.lease = None
        self.concurrency.unwatch(op)
        return self.concurrency.give_back(lease, op.span if end_span else None)

    def let_go(self, op: Operation) -> None:
        """``op``'s flow is being closed (its client left): its lease goes back."""
        lease = op.lease
        if lease is not None:
            op.lease = None
            self.concurrency.unwatch(op)
            self.concurrency.release_later(lease)

    def _in_flight_wait(self, next_free_ms: int | None) -> float:
        """The ``Retry-After`` of a concurrency refusal: ``concurrency_retry_after``, or
        less when the earliest lease of the full set expires sooner, jittered."""
        limits = self.limits
        retry = limits.concurrency_retry_after
        if next_free_ms is not None:
            retry = min(retry, max(next_free_ms, 10) / 1000)
        if limits.retry_jitter:
            retry *= 1.0 + limits.retry_jitter * random.random()  # noqa: S311
        return round(retry, 3)

    def take_slot(self, op: Operation, limit: int | None) -> bool:
        """One of the subject's subscription slots for ``op``; False when all are taken."""
        if not self._slots.take(op.subject.key, limit):
            return False
        op.slot = True
        if self.metrics is not None:
            self.metrics.subscriptions(self._slots.total())
        return True

    def free_slot(self, op: Operation) -> None:
        if not op.slot:
            return
        op.slot = False
        self._slots.give_back(op.subject.key)
        if self.metrics is not None:
            self.metrics.subscriptions(self._slots.total())


def limited_by(name: str) -> str:
    """The ``limited_by`` of a refusing lease set: ``in_flight`` (the tier's),
    ``in_flight:subscriptions``, ``in_flight:field:<coordinate>``."""
    if name == TIER_LEASES:
        return IN_FLIGHT
    if name == SUBSCRIPTION_LEASES:
        return IN_FLIGHT_SUBSCRIPTIONS
    return f"{IN_FLIGHT}:{name}"  # FIELD_LEASES: in_flight:field:<coordinate>
