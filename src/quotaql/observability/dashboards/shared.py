"""The panels, texts and colours both dashboards show (the tenant dashboard's per tier)."""

from __future__ import annotations

from typing import Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards.panels import Graph
from quotaql.observability.dashboards.promql import (
    JOB_MATCH,
    TIER_MATCH,
    eq,
    rates_by,
    sel,
)

DECISION: Final = names.LABEL_DECISION
TIER: Final = names.LABEL_TIER

#: The decisions an operator must not miss, in colours that say how much they matter.
DECISION_COLOURS: Final = {
    names.ALLOWED: "green",
    names.BLOCKED: "red",
    names.DENIED: "dark-red",
    names.VALIDATED: "blue",
    names.SHADOW_BLOCKED: "orange",
    names.UNKNOWN_KEY: "orange",
    names.TOO_MANY_SUBSCRIPTIONS: "blue",
    names.TOO_MANY_CONCURRENT: "purple",
}

ACTUAL_VS_ESTIMATED_HELP: Final = (
    "Cost points per second: the analyzer's estimate, made before execution, against the "
    "actual cost measured from the result. A lasting gap means the list sizes the cost model "
    "assumes (@listSize, the default list size) are off."
)
COST_HEATMAP_HELP: Final = (
    "Distribution of the estimated cost of operations (cost points, log-spaced buckets)."
)

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


def subscription_events(*by: str) -> Graph:
    """Subscription events per second by decision (and ``by``: per tier, in plain colours)."""
    return Graph(
        "Tier subscription events per second" if by else "Subscription events per second",
        _EVENTS_HELP,
        "ops",
        (rates_by(_EVENTS_BY_TIER, *by, DECISION),),
        width=12 if by else 9,
        colours=None if by else DECISION_COLOURS,
    )


def subscription_decisions(*by: str) -> Graph:
    """Subscriptions per second by decision (and ``by``: per tier, in plain colours)."""
    return Graph(
        "Tier subscriptions by decision" if by else "Subscriptions by decision",
        _SUBSCRIPTION_DECISIONS_HELP,
        "reqps",
        (rates_by(_SUBSCRIPTIONS_BY_TIER, *by, DECISION),),
        width=12 if by else 9,
        colours=None if by else DECISION_COLOURS,
    )
