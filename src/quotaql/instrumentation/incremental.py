"""The series of ``@defer`` / ``@stream`` operations: the payloads sent after the initial
result, and how each operation ended (``quotaql.gate.incremental`` follows them)."""

from __future__ import annotations

from typing import Any

from quotaql.instrumentation import names

__all__ = ["Incremental"]


class Incremental:
    """The incremental delivery's series of one
    :class:`~quotaql.instrumentation.metrics.PrometheusMetrics` (its ``incremental``)."""

    def __init__(self, metrics: Any) -> None:
        self._metrics = metrics  # a PrometheusMetrics (not imported: it imports this module)

    def payload(self, tier: str) -> None:
        """Count one payload sent after the initial result."""
        self._metrics.incremental_payloads.labels(tier).inc()

    def ended(self, tier: str, outcome: str) -> None:
        """Count one operation that ended (``names.INCREMENTAL_OUTCOMES``); the first of a
        tier starts its other outcomes' series at 0, so that ``increase()`` sees them."""
        operations = self._metrics.incremental_operations
        if outcome != names.INCREMENTAL_UNFOLLOWED:
            for each in names.INCREMENTAL_OUTCOMES[:2]:
                operations.labels(tier, each)
        operations.labels(tier, outcome).inc()
