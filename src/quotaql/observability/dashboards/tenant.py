"""The tenant dashboard: the drill-down into one tenant, then the selected tiers."""

from __future__ import annotations

from typing import Any, Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards import shared
from quotaql.observability.dashboards.board import (
    TENANT_UID,
    assemble,
    datasource_variable,
    job_variable,
    tenant_variable,
    tier_variable,
)
from quotaql.observability.dashboards.panels import Graph, Row, Stat
from quotaql.observability.dashboards.promql import (
    BUDGET_REFUSED,
    COST_MATCHERS,
    DECISION,
    JOB_MATCH,
    REQUESTS_BY_TIER,
    TENANT_MATCH,
    TIER,
    blocked_ratio_by_tier,
    increase_over_range,
    labels,
    quantiles,
    rates_by,
    sel,
    share,
    sum_by,
)

OPERATION_TYPE: Final = names.LABEL_OPERATION_TYPE

_TENANT_REQUESTS: Final = sel(names.TENANT_REQUESTS_TOTAL, JOB_MATCH, TENANT_MATCH)
_TENANT_BLOCKED: Final = sel(names.TENANT_REQUESTS_TOTAL, JOB_MATCH, TENANT_MATCH, BUDGET_REFUSED)
#: Every decision that refuses the operation (shadow_blocked and fail_open let it run).
_REFUSALS: Final = (
    f'{DECISION}=~"'
    + "|".join(
        (
            names.BLOCKED,
            names.DENIED,
            names.REJECTED,
            names.FAIL_CLOSED,
            names.UNKNOWN_KEY,
            names.TOO_MANY_SUBSCRIPTIONS,
            names.TOO_MANY_CONCURRENT,
        )
    )
    + '"'
)
_TENANT_REFUSED: Final = sel(names.TENANT_REQUESTS_TOTAL, JOB_MATCH, TENANT_MATCH, _REFUSALS)

TENANT: Final = Row("Tenant $tenant", (
    Graph("Tenant decisions per second", "reqps", 12,
          (rates_by(_TENANT_REQUESTS, DECISION),),
          "Operations per second of the tenant by limiter decision (opt-in per-tenant "
          f"metric; tenants outside the allowlist or top-N are {names.OTHER_TENANT!r})."),
    Graph("Tenant blocked ratio", "percentunit", 6,
          ((share(_TENANT_BLOCKED, _TENANT_REQUESTS), "blocked"),),
          "Share of the tenant's operations refused by the budget.", max_value=1),
    Stat("Tenant blocked in range", "short", 6,
         f"{sum_by(increase_over_range(_TENANT_BLOCKED))} or vector(0)",
         "Tenant blocked in range",
         "Operations of the tenant refused by the budget over the dashboard's time range.",
         instant=True),
    shared.decisions("Tenant refusals by reason", "reqps", 24, _TENANT_REFUSED,
                     "The tenant's refused operations per second by decision: blocked (over "
                     "budget), rejected (static limits), fail_closed (storage down), unknown_key "
                     "(the tenant is the address of a client sending unknown API keys), "
                     "too_many_subscriptions and too_many_concurrent (max_in_flight)."),
    Graph("Tenant utilisation", "percentunit", 24,
          ((sum_by(sel(names.TENANT_UTILISATION, JOB_MATCH, TENANT_MATCH)), "utilisation"),),
          "The points the tenant paid over the last five minutes / what its tier's quota "
          "grants in five minutes (its refill rate, or its limit per window), summed over "
          "the processes. Only for tenants with a label of their own (allowlisted, named, "
          f"top-N; never {names.OTHER_TENANT!r}). Above 100%: it is spending its burst."),
), runbook="Tenant utilisation")  # fmt: skip

TIER_ROW: Final = Row("Tier $tier", (
    Graph("Tier decisions per second", "reqps", 12,
          (rates_by(REQUESTS_BY_TIER, TIER, DECISION),),
          "Operations per second by tier and limiter decision."),
    Graph("Tier blocked ratio", "percentunit", 12,
          ((blocked_ratio_by_tier(), labels(TIER)),),
          "Share of operations refused by the budget, per tier.", max_value=1),
    Graph("Operations per second by type", "reqps", 8,
          (rates_by(REQUESTS_BY_TIER, TIER, OPERATION_TYPE),),
          "Operations per second by tier and operation type (query, mutation, ...)."),
    shared.cost_points("Tier cost charged / refunded per second",
                       "Cost points debited (charged) and given back (refunded) per tier."),
    shared.actual_vs_estimated("Tier actual vs estimated cost", TIER),
    Graph("Estimated cost p50 / p95 / p99", "short", 8,
          quantiles(names.QUERY_COST, COST_MATCHERS, TIER, (0.5, 0.95, 0.99)),
          "Quantiles of the estimated cost of operations per tier (cost points)."),
    shared.cost_heatmap("Tier estimated cost heatmap"),
    Graph("Query depth p50 / p95 (all tiers)", "short", 8,
          quantiles(names.QUERY_DEPTH, (JOB_MATCH,), OPERATION_TYPE, (0.5, 0.95)),
          "Quantiles of the depth of operations by operation type; the depth metric "
          "has no tier label, so this panel covers every tier."),
    shared.subscription_events(TIER),
    shared.subscription_decisions(TIER),
), runbook="QuotaqlBlockedRatioHigh")  # fmt: skip


def tenant_dashboard() -> dict[str, Any]:
    """The drill-down into one tenant (opt-in per-tenant metric) and the selected tiers,
    their subscriptions included."""
    return assemble(
        TENANT_UID,
        "quotaql / Tenant",
        "Drill-down: one tenant's decisions (opt-in per-tenant metric) and the selected "
        "tiers' decisions, cost and depth.",
        [datasource_variable(), job_variable(), tier_variable(), tenant_variable()],
        (TENANT, TIER_ROW),
    )
