"""The Tuning row's panels of candidate weights: a candidate ``[cost]`` table against the live
one on the sampled operations (docs/tuning.md, "Candidate weights, priced live")."""

from __future__ import annotations

from typing import Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards.panels import Bars, Graph, State
from quotaql.observability.dashboards.promql import (
    JOB_MATCH,
    TIER_MATCH,
    increase_over_range,
    labels,
    over_range,
    quantiles,
    rates_by,
    sel,
    sum_by,
    topk,
)

_COORDINATE: Final = names.LABEL_COORDINATE
_TENANT: Final = names.LABEL_TENANT
#: The ratio's series by root field (the others, by operation name, have it empty).
_BY_FIELD: Final = (JOB_MATCH, f'{_COORDINATE}!=""')
_MEAN: Final = (
    f"{over_range(f'{names.CANDIDATE_COST_RATIO}_sum', _COORDINATE, matchers=_BY_FIELD)}"
    f" / {over_range(f'{names.CANDIDATE_COST_RATIO}_count', _COORDINATE, matchers=_BY_FIELD)}"
)
_WOULD_REFUSE: Final = sel(names.CANDIDATE_WOULD_REFUSE_TOTAL, JOB_MATCH, TIER_MATCH)
_HELP: Final = (
    "Candidate weights ([cost] candidate): a sampled share of the operations "
    "(candidate_sample) is priced with the candidate file's [cost] table too, never charged. "
)

PANELS: Final = (
    Bars("Root fields the candidate prices furthest from live", "short", 8,
         ((topk(f"({_MEAN}) > 1"), f"{labels(_COORDINATE)} (candidate dearer)"),
          (topk(f"(1 / ({_MEAN})) > 1"), f"{labels(_COORDINATE)} (candidate cheaper)")),
         _HELP + "Per root field, over the dashboard's time range, how many times dearer "
         "(candidate ÷ live cost, mean of the sampled operations) or cheaper (live ÷ "
         "candidate) the candidate prices what the operations selected under it. Fields "
         "absent here are priced alike. Before promoting, every bar should be a change you "
         "meant.", thresholds=((None, "green"), (2, "orange"), (4, "red")), gradient=False),
    Graph("Candidate ÷ live cost by root field p50 / p95", "short", 8,
          quantiles(names.CANDIDATE_COST_RATIO, _BY_FIELD, _COORDINATE, (0.5, 0.95)),
          _HELP + "Quantiles of candidate cost ÷ live cost of the sampled operations, per "
          "root field (that field's own cost): 1 is the same price, 2 twice as dear, 0.5 half. "
          "Interpolated within the buckets (1/16 to 16, finer around 1): the bars beside give "
          "each field's exact mean."),
    Bars("Tenants the candidate would refuse, in range", "short", 8,
         ((topk(f"{sum_by(increase_over_range(_WOULD_REFUSE), _TENANT)} > 0"), labels(_TENANT)),),
         _HELP + "Sampled operations the live file allowed that the candidate would have "
         "refused, over the dashboard's time range, per tenant (labelled as the per-tenant "
         f"metric labels them; the rest {names.OTHER_TENANT!r}): their candidate debit was "
         "more than one of their quotas held, or past the candidate's max_cost. Multiply by "
         "1 / candidate_sample for all the traffic; `quotaql report` lists them."),
    State("Candidate weights", 6, f"min({sel(names.CANDIDATE_LOADED, JOB_MATCH)})", "state",
          (("not sampling", "orange"), ("sampling", "green")),
          _HELP + "sampling while every instance of the selected jobs prices its sample with "
          "a valid candidate; not sampling while one has none configured, or refused its file "
          "(the next panel says why; the live pricing is never affected)."),
    Graph("Candidate file refusals per second by reason", "ops", 18,
          (rates_by(sel(names.CANDIDATE_ERRORS_TOTAL, JOB_MATCH), names.LABEL_REASON),),
          _HELP + "Candidate files refused (each once per change of the file: the WARNING log "
          "candidate_refused names its file, line and key) and sampled operations it could "
          "not price, by reason: missing (no such file), too_large (past 1 MiB, refused before "
          "it is read), invalid (not a regular file, not TOML, or an unknown key or a wrong "
          "type), schema (a weight names a coordinate the schema does not have), pricing (an "
          "operation it could not price). The sampling stops until the file is fixed.",
          colours={names.CANDIDATE_SCHEMA: "red", names.CANDIDATE_INVALID: "orange"}),
)  # fmt: skip
"""The panels the Tuning row shows after its list and estimate panels."""
