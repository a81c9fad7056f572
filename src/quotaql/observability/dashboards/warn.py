"""The overview's row of the warnings before the wall (``warn_at``): which quotas run low
before they refuse, next to the refusals they announce."""

from __future__ import annotations

from typing import Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards.panels import Bars, Graph, Row
from quotaql.observability.dashboards.promql import (
    COST_MATCHERS,
    TIER,
    increase_over_range,
    labels,
    rate,
    rates_by,
    sel,
    sum_by,
    topk,
)

WARNINGS_RUNBOOK: Final = "Warnings before the wall"
"""The section of docs/runbook.md the row links to."""

_QUOTA: Final = names.LABEL_QUOTA
_WARNINGS: Final = sel(names.QUOTA_WARNINGS_TOTAL, *COST_MATCHERS)
_REFUSALS: Final = sel(names.QUOTA_REFUSALS_TOTAL, *COST_MATCHERS)
_HELP: Final = (
    "A warning before the wall: an operation that ran and left its subject below "
    "1 - warn_at of a quota ([limits] warn_at, per tier) answered extensions.cost.warning "
    "and the quotaql-warn parameter of its RateLimit header (docs/strawberry.md). "
)


def _legend(prefix: str, *by: str) -> str:
    return f"{prefix} {labels(*by)}"


WARNINGS: Final = Row("Warnings before the wall", (
    Graph("Quota warnings per second by quota", "reqps", 8,
          (rates_by(_WARNINGS, _QUOTA),),
          _HELP + "Warned operations per second, by the quota they were warned about "
          "(tenant, user, op:<name>, field:<coordinate>; never global, which is every "
          "tenant's). Shadow-mode tiers warn too."),
    Graph("Warnings and budget refusals per second by tier", "reqps", 8,
          ((sum_by(rate(_WARNINGS), TIER), _legend("warned", TIER)),
           (sum_by(rate(_REFUSALS), TIER), _legend("refused", TIER))),
          _HELP + "Per tier, warnings against refusals by the budget: clients that slow "
          "down when warned keep the refusals flat while the warnings rise; refusals that "
          "follow every warning are clients that do not read them."),
    Bars("Warned quotas in range", "short", 8,
         ((topk(f"{sum_by(increase_over_range(_WARNINGS), TIER, _QUOTA)} > 0"),
           labels(TIER, _QUOTA)),),
         _HELP + "Warnings over the dashboard's time range, per tier and quota: a quota "
         "warned about all day is too small for what its subjects do (raise it, or tell "
         "them), or its subjects ignore the warnings."),
), runbook=WARNINGS_RUNBOOK)  # fmt: skip
