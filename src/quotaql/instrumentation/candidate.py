"""The series of candidate weights: how far a candidate ``[cost]`` table prices the sampled
operations from the live one, whom it would have refused, and the state of its file.

Every label stays bounded as the consumption-by-route series' do: a root field's
``coordinate`` comes from the priced plan (only fields of the schema), an
``operation_name`` from the same top-N as ``quotaql_operation_name_*``
(:class:`~quotaql.instrumentation.routes.Routes`), a ``tenant`` from the same
:class:`~quotaql.instrumentation.tenants.TenantLabels` as ``quotaql_tenant_requests_total``,
a ``reason`` from ``names.CANDIDATE_REASONS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["CandidateMetrics", "cost_ratio"]


def cost_ratio(candidate: float, live: float) -> float:
    """``candidate / live``, at most ``names.RATIO_CAP`` (so that the histogram's ``_sum``
    stays finite); a live cost of 0 gives 1.0 when the candidate's is 0 too, else the cap.

    Example:
        >>> cost_ratio(20.0, 10.0), cost_ratio(0.0, 0.0), cost_ratio(1e308, 1e-3)
        (2.0, 1.0, 1000.0)
    """
    if live > 0:
        ratio = candidate / live
        return ratio if ratio < names.RATIO_CAP else names.RATIO_CAP  # inf and NaN: the cap
    return 1.0 if candidate == 0 else names.RATIO_CAP


class CandidateMetrics:
    """The candidate weights' series of one
    :class:`~quotaql.instrumentation.metrics.PrometheusMetrics` (its ``candidate``).

    Example:
        >>> from prometheus_client import CollectorRegistry
        >>> from quotaql.instrumentation.metrics import PrometheusMetrics
        >>> registry = CollectorRegistry()
        >>> metrics = PrometheusMetrics(registry)
        >>> metrics.candidate.compared("Shop", 10.0, 20.0, [("Query.products", 9.0, 18.0)])
        >>> registry.get_sample_value(
        ...     "quotaql_candidate_cost_ratio_sum",
        ...     {"operation_name": "", "coordinate": "Query.products"},
        ... )
        2.0
    """

    def __init__(self, metrics: Any) -> None:
        self._metrics = metrics  # a PrometheusMetrics (not imported: it imports this module)
        for reason in names.CANDIDATE_REASONS:  # from 0: increase() sees the first error
            metrics._child(metrics.candidate_errors, reason)
        metrics.candidate_loaded.set(0)

    def compared(
        self,
        operation_name: str | None,
        live: float,
        candidate: float,
        roots: Iterable[tuple[str, float, float]],
    ) -> None:
        """One sampled operation named ``operation_name``, priced ``live`` by the live
        weights and ``candidate`` by the candidate's; ``roots``: each root field it selected,
        ``(coordinate, live cost, candidate cost)``."""
        metrics = self._metrics
        histogram = metrics.candidate_cost_ratio
        label = metrics.routes._operation_label(operation_name)
        metrics._child(histogram, label, "").observe(cost_ratio(candidate, live))
        for coordinate, live_root, candidate_root in roots:
            metrics._child(histogram, "", coordinate).observe(cost_ratio(candidate_root, live_root))

    def would_refuse(self, tier: str, subject: str, name: str | None) -> None:
        """The candidate would have refused an operation of ``tier`` that the live file
        allowed, of the subject ``subject`` (its namespaced key) whose tenant name, where it
        may be shown, is ``name``: labelled as ``quotaql_tenant_requests_total`` labels it."""
        metrics = self._metrics
        tenant = metrics.tenants.label(subject, name)
        metrics._child(metrics.candidate_would_refuse, tier, tenant).inc()

    def error(self, reason: str) -> None:
        """Count a candidate file refused, or an operation it could not price (``reason``:
        one of ``names.CANDIDATE_REASONS``)."""
        metrics = self._metrics
        metrics._child(metrics.candidate_errors, reason).inc()

    def loaded(self, loaded: bool) -> None:
        """Whether a valid candidate prices the sampled operations now."""
        self._metrics.candidate_loaded.set(1 if loaded else 0)
