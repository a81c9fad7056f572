"""The tenant dashboard: the drill-down into one tenant, then the selected tiers."""

from __future__ import annotations

from typing import Any, Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards.board import (
    TENANT_UID,
    assemble,
    datasource_variable,
    job_variable,
    tenant_variable,
    tier_variable,
)
from quotaql.observability.dashboards.panels import Graph, Heatmap, Row, Stat
from quotaql.observability.dashboards.promql import (
    BUDGET_REFUSED,
    COST_MATCHERS,
    JOB_MATCH,
    REQUESTS_BY_TIER,
    TENANT_MATCH,
    actual_vs_estimated,
    blocked_ratio_by_tier,
    bucket_rates,
    cost_rates,
    increase_over_range,
    labels,
    quantiles,
    rate,
    rates_by,
    ratio,
    sel,
    sum_by,
)
from quotaql.observability.dashboards.shared import (
    ACTUAL_VS_ESTIMATED_HELP,
    COST_HEATMAP_HELP,
    DECISION,
    DECISION_COLOURS,
    TIER,
    subscription_decisions,
    subscription_events,
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

TENANT: Final = Row(
    "Tenant $tenant",
    (
        Graph(
            "Tenant decisions per second",
            "Operations per second of the tenant by limiter decision (opt-in per-tenant "
            f"metric; tenants outside the allowlist or top-N are {names.OTHER_TENANT!r}).",
            "reqps",
            (rates_by(_TENANT_REQUESTS, DECISION),),
            width=12,
        ),
        Graph(
            "Tenant blocked ratio",
            "Share of the tenant's operations refused by the budget.",
            "percentunit",
            ((ratio(sum_by(rate(_TENANT_BLOCKED)), sum_by(rate(_TENANT_REQUESTS))), "blocked"),),
            width=6,
            max_value=1,
        ),
        Stat(
            "Tenant blocked in range",
            "Operations of the tenant refused by the budget over the dashboard's time range.",
            f"{sum_by(increase_over_range(_TENANT_BLOCKED))} or vector(0)",
            "Tenant blocked in range",
            "short",
            width=6,
            instant=True,
        ),
        Graph(
            "Tenant refusals by reason",
            "The tenant's refused operations per second by decision: blocked (over budget), "
            "rejected (static limits), fail_closed (storage down), unknown_key (the tenant is "
            "the address of a client sending unknown API keys), too_many_subscriptions and "
            "too_many_concurrent (max_in_flight).",
            "reqps",
            (rates_by(_TENANT_REFUSED, DECISION),),
            width=24,
            colours=DECISION_COLOURS,
        ),
    ),
)

TIER_ROW: Final = Row(
    "Tier $tier",
    (
        Graph(
            "Tier decisions per second",
            "Operations per second by tier and limiter decision.",
            "reqps",
            (rates_by(REQUESTS_BY_TIER, TIER, DECISION),),
            width=12,
        ),
        Graph(
            "Tier blocked ratio",
            "Share of operations refused by the budget, per tier.",
            "percentunit",
            ((blocked_ratio_by_tier(), labels(TIER)),),
            width=12,
            max_value=1,
        ),
        Graph(
            "Operations per second by type",
            "Operations per second by tier and operation type (query, mutation, ...).",
            "reqps",
            (rates_by(REQUESTS_BY_TIER, TIER, OPERATION_TYPE),),
            width=8,
        ),
        Graph(
            "Tier cost charged / refunded per second",
            "Cost points debited (charged) and given back (refunded) per tier.",
            "short",
            ((cost_rates(TIER, names.LABEL_OUTCOME), labels(TIER, names.LABEL_OUTCOME)),),
            width=8,
        ),
        Graph(
            "Tier actual vs estimated cost",
            ACTUAL_VS_ESTIMATED_HELP,
            "short",
            actual_vs_estimated(TIER),
            width=8,
        ),
        Graph(
            "Estimated cost p50 / p95 / p99",
            "Quantiles of the estimated cost of operations per tier (cost points).",
            "short",
            quantiles(names.QUERY_COST, COST_MATCHERS, TIER, (0.5, 0.95, 0.99)),
            width=8,
        ),
        Heatmap(
            "Tier estimated cost heatmap",
            COST_HEATMAP_HELP,
            bucket_rates(names.QUERY_COST, *COST_MATCHERS),
            "short",
            width=8,
        ),
        Graph(
            "Query depth p50 / p95 (all tiers)",
            "Quantiles of the depth of operations by operation type; the depth metric "
            "has no tier label, so this panel covers every tier.",
            "short",
            quantiles(names.QUERY_DEPTH, (JOB_MATCH,), OPERATION_TYPE, (0.5, 0.95)),
            width=8,
        ),
        subscription_events(TIER),
        subscription_decisions(TIER),
    ),
)


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
