"""The circuit breaker: stops calling a failing storage for a while, then probes it.

The limiter (:mod:`quotaql.limiter`) asks it before each storage call; it is its own
module so that any caller of a remote backend can use it (and it can be tested alone).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Stops calling a failing storage for a while, then lets one probe through.

    Closed: every call goes to the storage. After ``failure_threshold`` failures in a row
    (or one timeout: a hung server costs a full timeout per call) it opens: no call goes
    to the storage for ``reset_timeout`` seconds. Then one probe call is let through
    (half-open); its success closes the breaker, its failure opens it again.
    """

    def __init__(
        self,
        failure_threshold: int = 3,
        reset_timeout: float = 5.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(failure_threshold, bool) or not isinstance(failure_threshold, int):
            raise ConfigError(f"failure_threshold must be an integer, got {failure_threshold!r}")
        if failure_threshold < 1:
            raise ConfigError(f"failure_threshold must be at least 1, got {failure_threshold}")
        if not isinstance(reset_timeout, int | float) or not reset_timeout > 0:
            raise ConfigError(f"reset_timeout must be seconds > 0, got {reset_timeout!r}")
        self.failure_threshold = failure_threshold
        self.reset_timeout = float(reset_timeout)
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def is_open(self) -> bool:
        """True while calls are kept away from the storage (open or half-open)."""
        return self._opened_at is not None

    def retry_after(self) -> float:
        """Seconds until the next probe is allowed (0 when closed)."""
        opened_at = self._opened_at
        if opened_at is None:
            return 0.0
        return max(0.0, opened_at + self.reset_timeout - self._clock())

    def allow(self) -> bool:
        """May this call go to the storage?"""
        if self._opened_at is None:
            return True  # closed: the common case, no lock
        return self._allow_while_open()

    def _allow_while_open(self) -> bool:
        with self._lock:
            opened_at = self._opened_at
            if opened_at is None:  # closed by another thread meanwhile
                return True
            if self._probing or self._clock() < opened_at + self.reset_timeout:
                return False
            self._probing = True  # half-open: this caller is the probe
            return True

    def success(self) -> bool:
        """Record a successful call; True when this closed an open breaker."""
        if not self._failures and self._opened_at is None:
            return False  # the common case: nothing to reset, no lock
        with self._lock:
            was_open = self._opened_at is not None
            self._failures = 0
            self._opened_at = None
            self._probing = False
            return was_open

    def abandon(self) -> None:
        """A call ended without an answer either way (cancelled): let another probe try."""
        with self._lock:
            self._probing = False

    def failure(self, *, timeout: bool = False) -> bool:
        """Record a failed call; True when this opened the breaker."""
        with self._lock:
            self._failures += 1
            was_open = self._opened_at is not None
            if was_open or timeout or self._failures >= self.failure_threshold:
                self._opened_at = self._clock()
                self._probing = False
                return not was_open
            return False
