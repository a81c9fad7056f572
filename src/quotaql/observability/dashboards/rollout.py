"""The overview's Rollout row: staged enforcement (``enforce_share``: enforced against shadow
decisions by tier), the refusals shadow mode let through and the capacity they needed (what
``quotaql report`` reviews before enforcing)."""

from __future__ import annotations

from typing import Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards.panels import Bars, Graph, Row
from quotaql.observability.dashboards.promql import (
    JOB_MATCH,
    TIER,
    TIER_MATCH,
    eq,
    increase_over_range,
    labels,
    quantile,
    rate,
    rates_by,
    ratio,
    sel,
    sum_by,
    topk,
)

ROLLOUT_RUNBOOK: Final = "Reviewing a rollout"
"""The section of docs/runbook.md the Rollout row links to."""

_ENFORCED: Final = names.LABEL_ENFORCED
_STAGED: Final = sel(names.STAGED_TOTAL, JOB_MATCH, TIER_MATCH)
_STAGED_IN: Final = sel(names.STAGED_TOTAL, JOB_MATCH, TIER_MATCH, eq(_ENFORCED, "true"))
_WOULD: Final = sel(names.WOULD_REFUSE_TOTAL, JOB_MATCH, TIER_MATCH)
_WHY: Final = (
    "Shadow by share: the tier enforces, but the subject is outside its enforce_share (a keyed"
    " hash of the subject, addresses by /24 or /48 network: stable across requests, workers"
    " and restarts). "
)

ROLLOUT: Final = Row("Rollout", (
    Graph("Staged decisions per second by tier", "reqps", 8,
          (rates_by(_STAGED, TIER, _ENFORCED),
           (sum_by(rate(sel(names.STAGED_EVENTS_TOTAL, JOB_MATCH, TIER_MATCH)), TIER,
                   _ENFORCED), "events " + labels(TIER, _ENFORCED))),
          "Operations (and subscription events after the first) of enforce tiers whose"
          " enforce_share is below 1, by tier: enforced=\"true\" in the enforced share,"
          " enforced=\"false\" in shadow because of the share. " + _WHY),
    Graph("Enforced share of staged operations", "percentunit", 8,
          ((ratio(sum_by(rate(_STAGED_IN), TIER), sum_by(rate(_STAGED), TIER), TIER),
            labels(TIER)),),
          "Of the staged operations, the share whose subject is enforced: close to the"
          " tier's enforce_share when many subjects send alike, off it when a few subjects"
          " send most of the traffic.", max_value=1.0),
    Graph("Would-be refusals per second by tier and cause", "reqps", 8,
          (rates_by(_WOULD, TIER, names.LABEL_CAUSE),),
          "Operations the budget refused that shadow mode let run, by why they ran:"
          " cause=\"mode\" (the tier's mode is shadow) or cause=\"share\" (outside"
          " enforce_share). " + _WHY),
    Bars("Would-be refusals in range by quota", "short", 12,
         ((topk(f"{sum_by(increase_over_range(_WOULD), TIER, names.LABEL_QUOTA)} > 0"),
           labels(TIER, names.LABEL_QUOTA)),),
         "The quotas that would have refused what shadow mode let through, over the"
         " dashboard's time range: the ones to raise, or to enforce as they are."),
    Graph("Capacity needed by refused operations, p50 / p99", "none", 12,
          tuple((quantile(q, names.REFUSAL_CAPACITY_RATIO, (JOB_MATCH, TIER_MATCH), TIER),
                 f"p{round(q * 100)} " + labels(TIER)) for q in (0.5, 0.99)),
          "Per operation the budget refused or would have, the capacity its quota would"
          " have needed for it to fit, as a multiple of the capacity it has (1.5: half as"
          " much again). quotaql report turns it into the capacity that would have let 99 %"
          " of a tier's operations through."),
), runbook=ROLLOUT_RUNBOOK)  # fmt: skip
