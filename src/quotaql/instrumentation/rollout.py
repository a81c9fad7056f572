"""The rollout's series: staged enforcement's decisions (``enforce_share``), the refusals
shadow mode let through by the quota that would have refused them, and the capacity each
refusal would have needed (what ``quotaql report`` reviews before enforcing).

Every label is bounded: tiers and quotas by the configuration, decisions and causes by fixed
sets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from quotaql.policy.quota import Decision

__all__ = ["Rollout", "capacity_ratio"]

# What a refusal by the budget says of its cause (not a failing storage: no capacity helps).
_BUDGET_REASONS: Final = frozenset({"rate_limited", "exceeds_capacity"})
_REFUSED: Final = frozenset({names.BLOCKED, names.SHADOW_BLOCKED})
_ENFORCED: Final = {"enforced": "true", "shadow": "false"}


def capacity_ratio(decision: Decision) -> float | None:
    """The capacity ``decision``'s refusing quota would have needed for the operation to fit
    then, over the capacity it has: (capacity + cost - remaining) / capacity, at least 1
    (None: no capacity to speak of, or a refusal no capacity changes).

    Example:
        >>> from quotaql.policy.quota import Decision
        >>> capacity_ratio(Decision(False, 150.0, 30.0, 300.0, 4.0, 9.0, "tenant", "memory",
        ...                         "rate_limited"))
        1.4
    """
    if decision.allowed or decision.reason not in _BUDGET_REASONS or not decision.limit > 0:
        return None
    deficit = max(0.0, decision.cost - max(0.0, decision.remaining))
    return min((decision.limit + deficit) / decision.limit, names.RATIO_CAP)


class Rollout:
    """The rollout's series of one :class:`~quotaql.instrumentation.metrics.PrometheusMetrics`
    (its ``rollout`` attribute), their children cached."""

    def __init__(self, metrics: Any) -> None:
        self._metrics = metrics  # a PrometheusMetrics (not imported: it imports this module)

    def operation(
        self,
        tier: str,
        staged: str | None,
        decision: str,
        refusal: Decision | None,
        tenant: tuple[str, str | None],
    ) -> None:
        """Count one finished operation of ``tier``: under staged enforcement (``staged``:
        ``enforced`` or ``shadow``; None: its tier is not staged) by ``decision``, and, when
        the budget refused it or would have (``refusal``), the quota and the capacity it would
        have needed; ``tenant``: its subject's key and shown name (labelled as
        ``quotaql_tenant_requests_total`` labels it)."""
        metrics = self._metrics
        child = metrics._child  # its cache of children, one per label set
        if staged is not None:
            child(metrics.staged_total, tier, _ENFORCED[staged], decision).inc()
        if refusal is None or decision not in _REFUSED:
            return
        ratio = capacity_ratio(refusal)
        if ratio is None:
            return
        child(metrics.refusal_capacity_ratio, tier, decision).observe(ratio)
        if decision == names.SHADOW_BLOCKED:
            quota = refusal.limited_by or names.OTHER_TENANT
            cause = names.CAUSE_SHARE if staged == "shadow" else names.CAUSE_MODE
            # A tenant with a label of its own has it; one without may count once more
            # towards the top-N here (a would-be refusal weighs twice: never a new label).
            label = metrics.tenants.label(*tenant)
            child(metrics.would_refuse_total, tier, label, quota, cause).inc()
            child(metrics.would_refuse_cost_total, tier, label, quota).inc(refusal.cost)

    def event(self, tier: str, staged: str | None, decision: str) -> None:
        """Count one subscription event (after the first) of a staged operation (``staged``:
        where its subject stands; None: not staged, nothing counted)."""
        if staged is None:
            return
        metrics = self._metrics
        metrics._child(metrics.staged_events_total, tier, _ENFORCED[staged], decision).inc()
