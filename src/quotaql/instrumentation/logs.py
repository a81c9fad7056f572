"""Structured, rate-limited log records: an attack must not be able to flood the logs.

Every record goes to the ``quotaql`` logger with its fields as ``extra`` (``quotaql_event``
says what happened: ``blocked``, ``shadow_blocked``, ``backend_error``, ``circuit_opened``,
``circuit_closed``, ``config_reloaded``, ``config_reload_failed``, ``unknown_tier``,
``adaptive_engaged``, ``adaptive_released``, ``adaptive_failed``, ``pressure_failed``,
``pressure_slow``, ``too_many_concurrent``, ``lease_expired``, ``leases_in_memory``,
``refunds_lost``).
Each event kind may log ``burst`` records at once and ``per_second`` on average; the records
it drops are counted and the next record that passes says how many (``suppressed``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from quotaql.instrumentation import names
from quotaql.limiter import NullRecorder

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LogRecorder", "StructuredLog"]

logger = logging.getLogger(names.LOGGER)


class StructuredLog:
    """Log records with ``extra`` fields, at most ``per_second`` per event kind (burst ``burst``).

    Args:
        per_second: the average rate each event kind may log at.
        burst: how many records of one kind may pass at once.
        clock: seconds from a monotonic clock (tests inject their own).
    """

    def __init__(
        self,
        per_second: float = 5.0,
        burst: float = 20.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        target: logging.Logger = logger,
    ) -> None:
        self.per_second = per_second
        self.burst = burst
        self._clock = clock
        self._logger = target
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float, int]] = {}  # tokens, at, suppressed

    def log(self, level: int, event: str, message: str, *args: object, **fields: Any) -> bool:
        """Log ``message % args`` with ``fields`` as ``extra``; False when rate-limited."""
        suppressed = self.take(level, event)
        if suppressed is None:
            return False
        self.emit(level, event, suppressed, message, *args, **fields)
        return True

    def take(self, level: int, event: str) -> int | None:
        """Room for one record of ``event`` now: how many were suppressed before it, or
        None (disabled, or rate-limited: counted as suppressed). For callers whose fields
        cost something to build: build them only then, and :meth:`emit`."""
        if not self._logger.isEnabledFor(level):
            return None
        now = self._clock()
        with self._lock:
            tokens, at, suppressed = self._buckets.get(event, (self.burst, now, 0))
            tokens = min(self.burst, tokens + (now - at) * self.per_second)
            if tokens < 1:
                self._buckets[event] = (tokens, now, suppressed + 1)
                return None
            self._buckets[event] = (tokens - 1, now, 0)
        return suppressed

    def emit(
        self, level: int, event: str, suppressed: int, message: str, *args: object, **fields: Any
    ) -> None:
        """Write the record :meth:`take` made room for."""
        if suppressed:
            message += " (%d similar records suppressed)"
            args = (*args, suppressed)
        extra = {names.LOG_EVENT: event, "suppressed": suppressed, **fields}
        self._logger.log(level, message, *args, extra=extra)


class LogRecorder(NullRecorder):
    """The limiter's recorder for logs: backend errors and breaker changes (not decisions).

    A :class:`~quotaql.limiter.NullRecorder` underneath, so a limiter with only this
    recorder does not time its decisions.
    """

    def __init__(self, log: StructuredLog | None = None) -> None:
        self.log = log or StructuredLog()

    def backend_error(self, backend: str, error: BaseException) -> None:
        """Log a failed storage call."""
        self.log.log(
            logging.WARNING,
            "backend_error",
            "quotaql: the %s storage failed (%s: %s); the fail mode answers",
            backend,
            type(error).__name__,
            error,
            backend=backend,
            error_type=type(error).__name__,
        )

    def refunds(self, outcome: str, count: int, cost: float) -> None:
        """Log deferred refunds dropped: ``lost`` (never applied: Redis was out longer than
        ``refund_max_age``, or the queue was full) or ``unknown`` (sent, then the call
        failed; perhaps applied, never sent twice)."""
        if outcome == "applied" or not count:
            return
        self.log.log(
            logging.WARNING,
            "refunds_lost",
            "quotaql: %d refunds (%s points) were dropped (%s): their tenants paid up to that"
            " much more than they used",
            count,
            f"{cost:g}",
            outcome,
            outcome=outcome,
            count=count,
            cost=cost,
        )

    def circuit(self, backend: str, is_open: bool) -> None:
        """Log the breaker opening or closing."""
        if is_open:
            self.log.log(
                logging.WARNING,
                "circuit_opened",
                "quotaql: circuit opened in front of the %s storage; calls stop for a cool-down",
                backend,
                backend=backend,
            )
        else:
            self.log.log(
                logging.INFO,
                "circuit_closed",
                "quotaql: circuit closed; the %s storage answers again",
                backend,
                backend=backend,
            )
