"""The delay line (``on_limit = "delay"``): an operation over its rate waits for its turn,
its cost reserved, instead of being refused, within the process's ``max_delayed`` places."""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any

from quotaql._flow import Await
from quotaql.gate import charges
from quotaql.gate.slots import Slots
from quotaql.instrumentation import names
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from quotaql.adaptive import Adaptive
    from quotaql.config.values import LimitsConfig
    from quotaql.gate.operation import Operation
    from quotaql.gate.record import OperationRecorder
    from quotaql.policy.quota import Decision

__all__ = ["DelayLine"]


class DelayLine:
    """Where the operations of delay tiers wait for their turn, in this process.

    Args:
        record: the gate's recorder (metrics and log).
        refund_all: gives an operation's whole debit back at once, without waiting (its
            client left while it waited: it never ran).
    """

    def __init__(self, record: OperationRecorder, refund_all: Callable[[Operation], None]) -> None:
        self.metrics = record.metrics
        self._log = record.log_op
        self._say_once = record.say_once
        self._refund_all = refund_all
        self._waiting = Slots()  # operations waiting for their turn (one key)
        self._theirs = Slots()  # the same, per subject

    def waiting(self) -> int:
        """How many operations wait for their turn now."""
        return self._waiting.total()

    def may_wait(self, op: Operation, limits: LimitsConfig, can_await: bool) -> None:
        """Whether ``op`` (of a delay tier) may wait for its turn: it takes one of the
        process's ``max_delayed`` places (no subject more than its ``delayed_share`` of them,
        so that one tenant's waiters cannot take everyone's places) and its quotas their
        waits, or it is decided as if its tier refused (a sync server, or no place). In
        shadow mode it is decided with the waits (as enforce would) and runs at once."""
        if not can_await and limits.delay_sync != "sleep":
            op.waits = names.DELAY_SYNC
            self._say_once(
                "delay_sync",
                f'quotaql: tier "{op.tier.name}" has on_limit = "delay", but its operations'
                " come through a sync entry point (a WSGI server, Strawberry's execute_sync,"
                ' Gate.admit), where [limits] delay_sync = "refuse": over their rate they are'
                ' refused, never delayed (counted reason="sync"); serve them over ASGI'
                ' (schema.execute, Gate.admit_async) or set delay_sync = "sleep"',
            )
            return
        key = op.subject.key
        share = max(1, math.floor(limits.max_delayed * limits.delayed_share))
        if op.mode is not Mode.ENFORCE:
            op.waits = False  # decided as enforce would, never waits
        elif not self._waiting.take("", limits.max_delayed):
            op.waits = names.DELAY_PROCESS_FULL
            return
        elif self._theirs.take(key, share):
            op.waits = True
        else:
            self._waiting.give_back("")
            op.waits = names.DELAY_SUBJECT_FULL
            return
        op.quotas = charges.delayed(op.tier, op.quotas)

    def wait(
        self, op: Operation, delay: float, can_await: bool, adaptive: Adaptive | None
    ) -> Generator[Await, Any, None]:
        """``op`` waits ``delay`` seconds for its turn (its cost is reserved); its client
        gone before its turn (the flow closed), its whole debit goes back: it never ran."""
        tier = op.tier.name
        if self.metrics is not None:
            self.metrics.delayed(tier, delay)
            self.metrics.delays_waiting(self._waiting.total())
        if op.span is not None:
            op.span.set_attribute(names.ATTR_DELAY, delay)
            op.span.add_event(names.EVENT_DELAYED, {names.ATTR_DELAY: delay})
        self._log(op, names.DELAYED, wait=delay)
        try:
            if can_await:
                yield Await(asyncio.sleep(delay))
            else:  # [limits] delay_sync = "sleep": this thread waits
                time.sleep(delay)
        except BaseException:
            self._left(op)
            raise
        if op.started is not None and adaptive is not None:
            # Its latency sample starts at its turn: a wait is the limiter's doing, not the
            # service's (counted, it would read as pressure, tighten, and queue more).
            op.started = adaptive.clock()

    def _left(self, op: Operation) -> None:
        """``op`` was closed while waiting for its turn: give back its whole debit (it never
        ran, so it used none of it) without waiting (a closing flow cannot await)."""
        self._refund_all(op)
        op.refunded = op.charge
        if self.metrics is not None:
            self.metrics.delay_cancelled(op.tier.name)
        if op.span is not None:
            op.span.add_event(names.EVENT_DELAY_CANCELLED, {"quotaql.refund": op.charge})
        self._log(op, names.DELAY_CANCELLED)

    def stop_waiting(self, op: Operation) -> None:
        """Give back ``op``'s place among the operations waiting (if it holds one)."""
        if op.waits is True:
            op.waits = False
            self._waiting.give_back("")
            self._theirs.give_back(op.subject.key)
            if self.metrics is not None:
                self.metrics.delays_waiting(self._waiting.total())

    def refused(self, op: Operation, decision: Decision, waits: bool | str) -> None:
        """Count the refusal of an operation of a delay tier by one of its own quotas (the
        ``[global]`` quota never waits): its turn was too far or its tenant's line full
        (``queue``), or it could not wait at all (``process_full``, ``sync``)."""
        if self.metrics is None:
            return
        limited_by = decision.limited_by
        if any(quota.name == limited_by and quota.shared for quota in op.quotas):
            return
        reason = waits if isinstance(waits, str) else names.DELAY_QUEUE
        self.metrics.delay_refused(op.tier.name, reason)
