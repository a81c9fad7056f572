"""The panels both dashboards show (the tenant dashboard's per tier), and their texts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards.panels import Graph, Heatmap
from quotaql.observability.dashboards.promql import (
    COST_MATCHERS,
    DECISION,
    JOB_MATCH,
    TIER,
    TIER_MATCH,
    bucket_rates,
    eq,
    labels,
    rate,
    rates_by,
    sel,
    sum_by,
)

if TYPE_CHECKING:
    from quotaql.observability.dashboards.promql import Query

OUTCOME: Final = names.LABEL_OUTCOME

#: The decisions an operator must not miss, in colours that say how much they matter.
_DECISION_COLOURS: Final = {
    names.ALLOWED: "green",
    names.BLOCKED: "red",
    names.DENIED: "dark-red",
    names.VALIDATED: "blue",
    names.SHADOW_BLOCKED: "orange",
    names.UNKNOWN_KEY: "orange",
    names.TOO_MANY_SUBSCRIPTIONS: "blue",
    names.TOO_MANY_CONCURRENT: "purple",
}

# -- subscriptions -----------------------------------------------------------------------------

# GraphQL's own operation type (not a quotaql name).
_SUBSCRIPTION: Final = "subscription"

_SUBSCRIPTIONS_BY_TIER: Final = sel(
    names.REQUESTS_TOTAL, JOB_MATCH, TIER_MATCH, eq(names.LABEL_OPERATION_TYPE, _SUBSCRIPTION)
)
_EVENTS_BY_TIER: Final = sel(names.SUBSCRIPTION_EVENTS_TOTAL, JOB_MATCH, TIER_MATCH)

_EVENTS_HELP: Final = (
    "Events of open subscriptions after their first (which the subscription's start paid): "
    "allowed (delivered and charged the subscription's price again), blocked (the subject's "
    "budget ran out: the event is not delivered and the subscription ends with "
    "RATE_LIMITED), shadow_blocked (would have been blocked; shadow mode delivered it)."
)
_SUBSCRIPTION_DECISIONS_HELP: Final = (
    "Subscriptions per second by decision, counted when they end: allowed (ran until it "
    "completed or its client closed it), blocked (refused at the start, or ended by an event "
    "over budget), too_many_subscriptions (refused at the start: the subject already held "
    "[limits] max_subscriptions open), rejected (static limits), fail_open / fail_closed."
)


def decisions(
    title: str, unit: str, width: int, selector: str, description: str, *by: str
) -> Graph:
    """The rates of ``selector`` per decision (and per ``by``): the decisions in their fixed
    colours, unless split further."""
    return Graph(
        title,
        unit,
        width,
        (rates_by(selector, *by, DECISION),),
        description,
        colours=None if by else _DECISION_COLOURS,
    )


def subscription_events(*by: str) -> Graph:
    """Subscription events per second by decision (and ``by``: per tier)."""
    title = "Tier subscription events per second" if by else "Subscription events per second"
    return decisions(title, "ops", 12 if by else 9, _EVENTS_BY_TIER, _EVENTS_HELP, *by)


def subscription_decisions(*by: str) -> Graph:
    """Subscriptions per second by decision (and ``by``: per tier)."""
    title = "Tier subscriptions by decision" if by else "Subscriptions by decision"
    return decisions(
        title, "reqps", 12 if by else 9, _SUBSCRIPTIONS_BY_TIER, _SUBSCRIPTION_DECISIONS_HELP, *by
    )


# -- cost --------------------------------------------------------------------------------------

_ACTUAL_VS_ESTIMATED_HELP: Final = (
    "Cost points per second: the analyzer's estimate, made before execution, against the "
    "actual cost measured from the result. A lasting gap means the list sizes the cost model "
    "assumes (@listSize, the default list size) are off."
)
_COST_HEATMAP_HELP: Final = (
    "Distribution of the estimated cost of operations (cost points, log-spaced buckets)."
)


def cost_points(title: str, description: str) -> Graph:
    """Cost points charged and refunded per second, per tier."""
    query = sum_by(rate(sel(names.COST_TOTAL, *COST_MATCHERS)), TIER, OUTCOME)
    return Graph(title, "short", 8, ((query, labels(TIER, OUTCOME)),), description)


def cost_heatmap(title: str) -> Heatmap:
    """The estimated cost of operations, bucket by bucket over time."""
    expr = bucket_rates(names.QUERY_COST, *COST_MATCHERS)
    return Heatmap(title, "short", 8, expr, _COST_HEATMAP_HELP)


def actual_vs_estimated(title: str, *by: str) -> Graph:
    """Cost points per second, estimated against actual (per ``by``)."""
    return Graph(title, "short", 8, _actual_vs_estimated(*by), _ACTUAL_VS_ESTIMATED_HELP)


def _actual_vs_estimated(*by: str) -> tuple[Query, ...]:
    suffix = f" {labels(*by)}" if by else ""
    return (
        (sum_by(rate(sel(f"{names.QUERY_COST}_sum", *COST_MATCHERS)), *by), f"estimated{suffix}"),
        (
            sum_by(rate(sel(f"{names.QUERY_ACTUAL_COST}_sum", *COST_MATCHERS)), *by),
            f"actual{suffix}",
        ),
    )
