"""Partial answers counted: the root fields an operation ran without because only their own
quotas refused (``[limits] on_field_limit = "skip"``).

Bounded labels: a ``coordinate`` is a root field of the schema that has a quota of its own
(``[tiers.<t>.fields]``), a ``tier`` one of the configuration's.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Skips"]


class Skips:
    """The ``quotaql_root_fields_skipped_total`` series of one
    :class:`~quotaql.instrumentation.metrics.PrometheusMetrics`, their children cached.

    Example:
        >>> from prometheus_client import CollectorRegistry
        >>> from quotaql.instrumentation.metrics import PrometheusMetrics
        >>> registry = CollectorRegistry()
        >>> metrics = PrometheusMetrics(registry)
        >>> metrics.skips.skipped(["Query.search"], "free")
        >>> registry.get_sample_value(
        ...     "quotaql_root_fields_skipped_total", {"coordinate": "Query.search", "tier": "free"}
        ... )
        1.0
    """

    def __init__(self, metrics: Any) -> None:
        self._metrics = metrics  # a PrometheusMetrics (not imported: it imports this module)
        self._children: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def skipped(self, coordinates: Iterable[str], tier: str) -> None:
        """One operation of ``tier`` ran without the root fields of ``coordinates``."""
        for coordinate in coordinates:
            key = (coordinate, tier)
            child = self._children.get(key)
            if child is None:
                with self._lock:
                    child = self._metrics.root_fields_skipped.labels(coordinate, tier)
                    self._children[key] = child
            child.inc()
