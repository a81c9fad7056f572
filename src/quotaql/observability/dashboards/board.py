"""What both dashboards share around their rows: uids, template variables, the dashboard's
settings, stable panel ids, and the JSON they are written as."""

from __future__ import annotations

import itertools
import json
import warnings
from typing import TYPE_CHECKING, Any, Final

from quotaql.instrumentation import names
from quotaql.observability.alerts import runbook_anchor
from quotaql.observability.dashboards.panels import (
    DATASOURCE_NAME,
    DATASOURCE_TYPE,
    DATASOURCE_UID,
    DS,
    build,
)
from quotaql.observability.dashboards.promql import JOB, JOB_MATCH, sel
from quotaql.observability.thresholds import AlertsConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.builders import dashboard as dashboard_builders
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as dashboard_models

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from grafana_foundation_sdk.cog.builder import Builder

    from quotaql.observability.dashboards.panels import Row

OVERVIEW_UID: Final = "quotaql-overview"
TENANT_UID: Final = "quotaql-tenant"
OVERVIEW_FILE: Final = f"{OVERVIEW_UID}.json"
TENANT_FILE: Final = f"{TENANT_UID}.json"
TAGS: Final = ("quotaql",)

_ALL_REGEX: Final = ".*"
_RUNBOOK: Final = AlertsConfig().runbook_base_url
SCHEMA_VERSION: Final = 42
"""The dashboard ``schemaVersion`` grafana-foundation-sdk writes (tests check it still does)."""
MIN_GRAFANA: Final = "12.2"
"""The first Grafana whose dashboard schema is ``SCHEMA_VERSION`` (its migration 42): the
oldest the dashboards are written for (docs/observability.md)."""


# -- variables ---------------------------------------------------------------------------------


def _all_option() -> dashboard_models.VariableOption:
    return dashboard_models.VariableOption(selected=True, text=["All"], value=["$__all"])


def datasource_variable() -> dashboard_builders.DatasourceVariable:
    return (
        dashboard_builders.DatasourceVariable("datasource")
        .label("Data source")
        .type(DATASOURCE_TYPE)
        .current(
            dashboard_models.VariableOption(
                selected=True, text=DATASOURCE_NAME, value=DATASOURCE_UID
            )
        )
    )


def _query_variable(
    name: str, label: str, query: str, *, multi: bool
) -> dashboard_builders.QueryVariable:
    variable = (
        dashboard_builders.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(query)
        .definition(query)
        .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(multi)
    )
    if multi:
        # "All" as one short regex rather than the alternation of every value.
        variable = variable.all_value(_ALL_REGEX).current(_all_option())
    return variable


def job_variable() -> dashboard_builders.QueryVariable:
    return _query_variable("job", "Job", f"label_values({names.BUILD_INFO}, {JOB})", multi=True)


def tier_variable() -> dashboard_builders.QueryVariable:
    query = f"label_values({sel(names.REQUESTS_TOTAL, JOB_MATCH)}, {names.LABEL_TIER})"
    return _query_variable("tier", "Tier", query, multi=True)


def tenant_variable() -> dashboard_builders.QueryVariable:
    query = f"label_values({sel(names.TENANT_REQUESTS_TOTAL, JOB_MATCH)}, {names.LABEL_TENANT})"
    return _query_variable("tenant", "Tenant", query, multi=False)


# -- the dashboard -----------------------------------------------------------------------------


def assemble(
    uid: str,
    title: str,
    description: str,
    variables: Iterable[Builder[dashboard_models.VariableModel]],
    rows: Iterable[Row],
) -> dict[str, Any]:
    """The dashboard of ``rows`` as JSON values, its panels numbered in document order."""
    builder = (
        dashboard_builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(list(TAGS))
        .editable()
        .timezone("browser")
        .time("now-6h", "now")
        .refresh("30s")
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .variables(list(variables))
        .annotation(
            dashboard_builders.AnnotationQuery()
            .name("Annotations & Alerts")
            .datasource(common.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
            .built_in(1)
        )
        .link(
            dashboard_builders.DashboardLink("quotaql dashboards")
            .type(dashboard_models.DashboardLinkType.DASHBOARDS)
            .tags(list(TAGS))
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for row_spec in rows:
        row = dashboard_builders.Row(row_spec.title).collapsed(row_spec.collapsed)
        runbook = runbook_url(row_spec.runbook) if row_spec.runbook else ""
        if row_spec.collapsed:
            # A collapsed row carries its panels (Grafana's layout for collapsed rows).
            for panel in row_spec.panels:
                row = row.with_panel(build(panel, runbook))
            builder = builder.with_row(row)
        else:
            builder = builder.with_row(row)
            for panel in row_spec.panels:
                builder = builder.with_panel(build(panel, runbook))
    model = builder.build()
    _number_panels(model.panels or [])
    dashboard: dict[str, Any] = json.loads(json.dumps(model, cls=JSONEncoder))
    return dashboard


def _number_panels(
    panels: Sequence[dashboard_models.Panel | dashboard_models.RowPanel],
) -> None:
    """Stable panel ids, 1, 2, ... in document order (rows, then the panels they carry)."""
    ids = itertools.count(1)
    for panel in panels:
        panel.id_val = next(ids)
        if isinstance(panel, dashboard_models.RowPanel):
            for inner in panel.panels:
                inner.id_val = next(ids)


def runbook_url(heading: str) -> str:
    """The URL of the section ``heading`` of docs/runbook.md (where the alerts link)."""
    return f"{_RUNBOOK}#{runbook_anchor(heading)}"


def render(dashboard: dict[str, Any]) -> str:
    """The dashboard as committed: JSON with sorted keys, two-space indent, final newline."""
    return json.dumps(dashboard, sort_keys=True, indent=2) + "\n"


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL ``expr`` of the dashboard's panels, collapsed rows' panels included."""
    return [
        target["expr"]
        for panel in _panels(dashboard)
        for target in panel.get("targets", [])
        if "expr" in target
    ]
