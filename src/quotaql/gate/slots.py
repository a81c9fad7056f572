"""Places per key, in this process: open subscriptions per subject, operations waiting."""

from __future__ import annotations

import threading

__all__ = ["Slots"]


class Slots:
    """Places per key, in this process: open subscriptions per subject (``[limits]
    max_subscriptions``), operations waiting for their turn (``[limits] max_delayed``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._total = 0

    def take(self, key: str, limit: int | None) -> bool:
        with self._lock:
            count = self._open.get(key, 0)
            if limit is not None and count >= limit:
                return False
            self._open[key] = count + 1
            self._total += 1
            return True

    def give_back(self, key: str) -> None:
        with self._lock:
            count = self._open.get(key, 0)
            if count == 0:
                return
            if count > 1:
                self._open[key] = count - 1
            else:
                del self._open[key]
            self._total -= 1

    def total(self) -> int:
        return self._total  # one int: read without the lock
