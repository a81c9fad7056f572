"""The warnings before the wall (``warn_at``) in the metrics: one counter, by tier and by
the quota each warning named (both from the configuration: bounded)."""

from __future__ import annotations

from typing import Any

__all__ = ["Warnings"]


class Warnings:
    """``quotaql_quota_warnings_total`` of one
    :class:`~quotaql.instrumentation.metrics.PrometheusMetrics`, its children cached."""

    def __init__(self, metrics: Any) -> None:
        self._metrics = metrics  # a PrometheusMetrics (not imported: it imports this module)

    def warned(self, tier: str, quota: str) -> None:
        """Count one operation whose answer warned about ``quota`` (of ``tier``)."""
        metrics = self._metrics
        metrics._child(metrics.quota_warnings, tier, quota).inc()
