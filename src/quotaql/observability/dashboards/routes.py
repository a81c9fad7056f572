"""The overview's rows of consumption by route (root fields, operation names), of the
configuration each process runs, and the list of quotaql's alerts."""

from __future__ import annotations

from typing import Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards.panels import AlertList, Bars, Graph, Row, Stat
from quotaql.observability.dashboards.promql import (
    BUDGET_REFUSED,
    INSTANCE,
    JOB_MATCH,
    TIER_MATCH,
    increase_over_range,
    labels,
    quantile,
    rate,
    sel,
    sum_by,
    topk,
)

COORDINATE: Final = names.LABEL_COORDINATE
OPERATION: Final = names.LABEL_OPERATION_NAME
PID: Final = "pid"
"""The label prometheus-client's multiprocess mode gives a ``liveall`` gauge: the worker."""

ROUTES_RUNBOOK: Final = "Consumption by route"
"""The section of docs/runbook.md the route rows link to."""

_FIELD_COST: Final = sel(names.ROOT_FIELD_COST_TOTAL, JOB_MATCH)
_FIELD_REQUESTS: Final = sel(names.ROOT_FIELD_REQUESTS_TOTAL, JOB_MATCH)
_FIELD_REFUSED: Final = sel(names.ROOT_FIELD_REQUESTS_TOTAL, JOB_MATCH, BUDGET_REFUSED)
_FIELD_SKIPPED: Final = sel(names.ROOT_FIELDS_SKIPPED_TOTAL, JOB_MATCH, TIER_MATCH)
_NAME_COST: Final = sel(names.OPERATION_NAME_COST_TOTAL, JOB_MATCH)
_NAME_REQUESTS: Final = sel(names.OPERATION_NAME_REQUESTS_TOTAL, JOB_MATCH)
_NAME_REFUSED: Final = sel(names.OPERATION_NAME_REQUESTS_TOTAL, JOB_MATCH, BUDGET_REFUSED)

_PAID: Final = (
    "Points paid: what operations were charged, less what was refunded after they ran,"
    " plus any overage. "
)
_BY_FIELD: Final = (
    "An operation selecting several root fields counts under each, its points shared"
    " among them in proportion to their estimated cost; coordinates come from the schema,"
    " never from the client. "
)
_BY_NAME: Final = (
    f"Operation names are the client's: the busiest (top_operations, 20 by default) keep"
    f" their own label, every other is {names.OTHER_OPERATION!r}, unnamed operations"
    f" {names.ANONYMOUS_OPERATION!r}. "
)


def _mean(cost: str, requests: str, by: str) -> str:
    """Points per operation: the rate of ``cost`` over the rate of ``requests``, per ``by``."""
    return f"{sum_by(rate(cost), by)} / {sum_by(rate(requests), by)}"


ROOT_FIELDS: Final = Row("By root field", (
    Bars("Most expensive root fields in range", "short", 8,
         ((topk(f"{sum_by(increase_over_range(_FIELD_COST), COORDINATE)} > 0"),
           labels(COORDINATE)),),
         _PAID + "Per root field, over the dashboard's time range. " + _BY_FIELD),
    Graph("Points paid per second by root field", "short", 8,
          ((topk(sum_by(rate(_FIELD_COST), COORDINATE)), labels(COORDINATE)),),
          _PAID + "Per second, the ten root fields that cost the most. " + _BY_FIELD),
    Graph("Refused per second by root field", "reqps", 8,
          ((topk(f"{sum_by(rate(_FIELD_REFUSED), COORDINATE)} > 0"), labels(COORDINATE)),),
          "Operations refused by the budget (decision blocked or denied) per second, under"
          " each root field they selected. " + _BY_FIELD),
    Graph("Worker time p99 by root field", "s", 12,
          ((topk(quantile(0.99, names.ROOT_FIELD_TIME, (JOB_MATCH,), COORDINATE)),
            "p99 " + labels(COORDINATE)),),
          "The 99th percentile of the worker time (parse, validation, pricing, execution;"
          " the thread's CPU time) of the operations selecting each root field, the ten"
          " slowest. Measured where the time quota is on (the default). " + _BY_FIELD),
    Graph("Points per operation by root field", "short", 12,
          ((topk(_mean(_FIELD_COST, _FIELD_REQUESTS, COORDINATE)), labels(COORDINATE)),),
          "Points paid per operation selecting each root field (its share), the ten"
          " dearest. " + _BY_FIELD),
    Graph("Root fields skipped per second (partial answers)", "reqps", 24,
          ((topk(f"{sum_by(rate(_FIELD_SKIPPED), COORDINATE)} > 0"), labels(COORDINATE)),),
          "Root fields answered null with a RATE_LIMITED error at their path, neither run nor"
          " charged, because only their own quota ([tiers.<t>.fields]) refused while the rest"
          " of the operation ran ([limits] on_field_limit = \"skip\"), per second, in the tiers"
          " chosen; once per operation and field, however many aliases select it. "
          + _BY_FIELD),
), runbook=ROUTES_RUNBOOK)  # fmt: skip

OPERATIONS: Final = Row("Most expensive operations", (
    Bars("Most expensive operations in range", "short", 8,
         ((topk(f"{sum_by(increase_over_range(_NAME_COST), OPERATION)} > 0"),
           labels(OPERATION)),),
         _PAID + "Per operation name, over the dashboard's time range. " + _BY_NAME),
    Graph("Points per operation by name", "short", 8,
          ((topk(_mean(_NAME_COST, _NAME_REQUESTS, OPERATION)), labels(OPERATION)),),
          "Points paid per operation of each name, the ten dearest. " + _BY_NAME),
    Graph("Refused per second by operation name", "reqps", 8,
          ((topk(f"{sum_by(rate(_NAME_REFUSED), OPERATION)} > 0"), labels(OPERATION)),),
          "Operations refused by the budget (decision blocked or denied) per second, by"
          " name. " + _BY_NAME),
    Graph("Worker time p99 by operation name", "s", 24,
          ((topk(quantile(0.99, names.OPERATION_NAME_TIME, (JOB_MATCH,), OPERATION)),
            "p99 " + labels(OPERATION)),),
          "The 99th percentile of the worker time of the operations of each name, the ten"
          " slowest. " + _BY_NAME),
), runbook="Expensive operations")  # fmt: skip

_INFO: Final = sel(names.CONFIG_INFO, JOB_MATCH)

CONFIGURATION: Final = Row("Configuration", (
    Graph("Config generation by worker", "none", 12,
          ((f"max by ({INSTANCE}, {PID}) ({sel(names.CONFIG_GENERATION, JOB_MATCH)})",
            labels(INSTANCE, PID)),),
          "The generation of the configuration each process runs (1: the file it started"
          " with, one more per reload), per instance and worker (pid, under multiprocess"
          " mode). Workers of one deployment should step up together, within"
          " reload_interval and one poll of an edit."),
    Stat("Configuration digests", "none", 12,
         f"count by ({names.LABEL_DIGEST}) ({_INFO} == 1)",
         labels(names.LABEL_DIGEST),
         "How many processes run each configuration file, by its digest (12 hex digits of"
         " its SHA-256). More than one digest for more than a reload's time is the"
         " QuotaqlConfigDrift alert.", with_names=True),
), runbook="QuotaqlConfigDrift")  # fmt: skip

ALERTS: Final = Row("Alerts", (
    AlertList("quotaql alerts", 24,
              "The quotaql alerts firing or pending now (rules named Quotaql*, from"
              " alerts/quotaql.rules.yml loaded into Prometheus, or imported into Grafana);"
              " each alert's runbook_url opens its section of the runbook."),
), runbook="Runbook: quotaql alerts")  # fmt: skip
