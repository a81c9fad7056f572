"""The panels of the dashboards as values (a graph, a heatmap, bars, a stat, a state) and the
one builder that turns each into its grafana-foundation-sdk panel, with the shared defaults."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol, Self, TypeVar

from quotaql.instrumentation import names
from quotaql.observability.dashboards.promql import LE, labels

# The SDK's classic (v1) dashboard model warns at import time that a v2 schema exists; v2 is
# not what Grafana's file provisioning of classic dashboards reads, so v1 is the right model.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.builders import bargauge, heatmap, prometheus, stat, timeseries
    from grafana_foundation_sdk.builders import common as common_builders
    from grafana_foundation_sdk.builders import dashboard as dashboard_builders
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as dashboard_models
    from grafana_foundation_sdk.models.heatmap import HeatmapColorMode, HeatmapColorScale
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat, QueryEditorMode

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from grafana_foundation_sdk.cog import variants
    from grafana_foundation_sdk.cog.builder import Builder

    from quotaql.observability.dashboards.promql import Query

DATASOURCE_TYPE: Final = "prometheus"
DATASOURCE_UID: Final = "prometheus"
"""The default of the ``datasource`` variable: the uid provisioning/datasources.yml gives."""
DATASOURCE_NAME: Final = "Prometheus"
DS: Final = common.DataSourceRef(type_val=DATASOURCE_TYPE, uid="${datasource}")
"""The data source of every panel and query: the ``datasource`` variable."""

_HEIGHT: Final = 8
_GREEN: Final = ((None, "green"),)

# Each kind of panel lists its short fields first and its description last, so that the rows
# of a dashboard read as tables: the title, unit and width on a line, then the queries, then
# what the panel shows.


class Graph(NamedTuple):
    """A time series panel: one query per series group, all on one unit from 0."""

    title: str
    unit: str
    width: int
    queries: Sequence[Query]
    description: str
    max_value: float | None = None
    colours: Mapping[str, str] | None = None
    """Fixed colours of the series of these legends: the ones an operator must not miss
    look the same on every panel, whatever the palette."""


class Heatmap(NamedTuple):
    """The buckets of a histogram over time (``expr``: their rates by ``le``)."""

    title: str
    unit: str
    width: int
    expr: str
    description: str


class Bars(NamedTuple):
    """Horizontal bars of instant queries (a top N over the dashboard's time range)."""

    title: str
    unit: str
    width: int
    queries: Sequence[Query]
    description: str
    thresholds: Sequence[tuple[float | None, str]] = _GREEN
    gradient: bool = True
    """Colour the bars green to red by their value (else by ``thresholds``)."""
    drill_down: str = ""
    """The uid of the dashboard a click on a bar opens, for the bar's tenant."""


class Stat(NamedTuple):
    """One number: the last value of ``expr``."""

    title: str
    unit: str
    width: int
    expr: str
    legend: str
    description: str
    instant: bool = False
    with_names: bool = False
    """Show each series' name (its legend) beside its value."""


class State(NamedTuple):
    """A 0/1 gauge shown as a word on a background of its colour (``states``: 0's, then
    1's, each a text and a colour)."""

    title: str
    width: int
    expr: str
    legend: str
    states: tuple[tuple[str, str], tuple[str, str]]
    description: str
    with_names: bool = False


class AlertList(NamedTuple):
    """Grafana's alert list: the quotaql alerts firing or pending now (Grafana-managed and
    data-source-managed rules, names starting with ``Quotaql``)."""

    title: str
    width: int
    description: str


Panel = Graph | Heatmap | Bars | Stat | State | AlertList


class Row(NamedTuple):
    """A row of panels; a collapsed row carries them (Grafana's layout for collapsed rows)."""

    title: str
    panels: Sequence[Panel]
    collapsed: bool = False
    runbook: str = ""
    """The heading of its section of docs/runbook.md: each of its panels links to it."""


def build(panel: Panel, runbook: str = "") -> Builder[dashboard_models.Panel]:
    """The grafana-foundation-sdk builder of ``panel``, linking to ``runbook`` (a URL)."""
    links: list[Builder[dashboard_models.DashboardLink]] = []
    if runbook:
        links.append(_runbook_link(runbook))
    match panel:
        case Graph():
            return _graph(panel).links(links)
        case Heatmap():
            return _heatmap(panel).links(links)
        case Bars():
            return _bars(panel).links(links)
        case Stat():
            return _stat(panel).links(links)
        case State():
            return _state(panel).links(links)
        case AlertList():
            return _alert_list(panel).links(links)


def _runbook_link(url: str) -> dashboard_builders.DashboardLink:
    return dashboard_builders.DashboardLink("Runbook").url(url).target_blank(True)


ALERT_PREFIX: Final = "Quotaql"
"""What the names of quotaql's alerts start with (the alert list's filter)."""


def _alert_list(spec: AlertList) -> dashboard_builders.Panel:
    """Grafana's ``alertlist`` panel (no builder of its own in the SDK): its options as
    Grafana 10+ stores them (unified alerting)."""
    options = {
        "viewMode": "list",
        "groupMode": "default",
        "groupBy": [],
        "maxItems": 20,
        "sortOrder": 1,
        "dashboardAlerts": False,
        "alertName": ALERT_PREFIX,
        "alertInstanceLabelFilter": "",
        "stateFilter": {
            "firing": True,
            "pending": True,
            "noData": False,
            "normal": False,
            "error": True,
        },
    }
    return _framed(dashboard_builders.Panel().type("alertlist"), spec).options(options)


def _target(
    expr: str,
    legend: str,
    ref_id: str = "A",
    *,
    instant: bool = False,
    heatmap_format: bool = False,
) -> prometheus.Dataquery:
    query = (
        prometheus.Dataquery()
        .datasource(DS)
        .expr(expr)
        .legend_format(legend)
        .ref_id(ref_id)
        .editor_mode(QueryEditorMode.CODE)
    )
    query = query.instant() if instant else query.range()
    if heatmap_format:
        query = query.format(PromQueryFormat.HEATMAP)
    return query


def _targets(
    queries: Sequence[Query], *, instant: bool = False
) -> list[Builder[variants.Dataquery]]:
    return [
        _target(expr, legend, chr(ord("A") + index), instant=instant)
        for index, (expr, legend) in enumerate(queries)
    ]


def _thresholds(steps: Sequence[tuple[float | None, str]]) -> dashboard_builders.ThresholdsConfig:
    return (
        dashboard_builders.ThresholdsConfig()
        .mode(dashboard_models.ThresholdsMode.ABSOLUTE)
        .steps([dashboard_models.Threshold(value=value, color=color) for value, color in steps])
    )


def _reduce_last() -> common_builders.ReduceDataOptions:
    return common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False)


class _Framed(Protocol):
    """What every panel builder of the SDK has."""

    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: common.DataSourceRef) -> Self: ...
    def span(self, w: int) -> Self: ...
    def height(self, h: int) -> Self: ...


_P = TypeVar("_P", bound=_Framed)


def _framed(panel: _P, spec: Panel) -> _P:
    """``panel`` with what every panel has: the title, description and width of ``spec``,
    the data source and the height."""
    return (
        panel.title(spec.title)
        .description(spec.description)
        .datasource(DS)
        .span(spec.width)
        .height(_HEIGHT)
    )


def _graph(graph: Graph) -> timeseries.Panel:
    panel = (
        _framed(timeseries.Panel(), graph)
        .targets(_targets(graph.queries))
        .unit(graph.unit)
        .min(0)
        .line_width(1)
        .fill_opacity(10)
        .show_points(common.VisibilityMode.NEVER)
        .legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .calcs(["mean", "max", "lastNotNull"])
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if graph.max_value is not None:
        panel = panel.max(graph.max_value)
    for name, colour in (graph.colours or {}).items():
        value = {"mode": "fixed", "fixedColor": colour}
        panel = panel.override_by_name(
            name, [dashboard_models.DynamicConfigValue(id_val="color", value=value)]
        )
    return panel


def _heatmap(spec: Heatmap) -> heatmap.Panel:
    return (
        _framed(heatmap.Panel(), spec)
        .with_target(_target(spec.expr, labels(LE), heatmap_format=True))
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit(spec.unit))
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.LE))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(HeatmapColorMode.SCHEME)
            .scheme("Spectral")
            .scale(HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(64)
        )
        .tooltip(heatmap.HeatmapTooltip().mode(common.TooltipDisplayMode.SINGLE).y_histogram(True))
    )


def _bars(bars: Bars) -> bargauge.Panel:
    panel = (
        _framed(bargauge.Panel(), bars)
        .targets(_targets(bars.queries, instant=True))
        .unit(bars.unit)
        .min(0)
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .reduce_options(_reduce_last())
        .thresholds(_thresholds(bars.thresholds))
    )
    if bars.gradient:
        panel = panel.color_scheme(
            dashboard_builders.FieldColor().mode(
                dashboard_models.FieldColorModeId.CONTINUOUS_GR_YL_RD
            )
        )
    if bars.drill_down:
        panel = panel.data_links([_tenant_link(bars.drill_down)])
    return panel


def _tenant_link(uid: str) -> dashboard_builders.DashboardLink:
    tenant = names.LABEL_TENANT
    url = (
        f"/d/{uid}?${{__url_time_range}}&${{datasource:queryparam}}"
        f"&${{job:queryparam}}&var-{tenant}=${{__field.labels.{tenant}}}"
    )
    title = f"Drill down into ${{__field.labels.{tenant}}}"
    return dashboard_builders.DashboardLink(title).url(url)


def _number(spec: Stat | State, unit: str, *, instant: bool = False) -> stat.Panel:
    """A stat panel of the last value of ``spec.expr`` (beside its name: ``with_names``)."""
    panel = (
        _framed(stat.Panel(), spec)
        .with_target(_target(spec.expr, spec.legend, instant=instant))
        .unit(unit)
        .graph_mode(common.BigValueGraphMode.NONE)
        .reduce_options(_reduce_last())
    )
    if spec.with_names:
        panel = panel.text_mode(common.BigValueTextMode.VALUE_AND_NAME)
    return panel


def _stat(spec: Stat) -> stat.Panel:
    return (
        _number(spec, spec.unit, instant=spec.instant)
        .thresholds(_thresholds(_GREEN))
        .color_mode(common.BigValueColorMode.VALUE)
    )


def _state(spec: State) -> stat.Panel:
    (off, off_colour), (on, on_colour) = spec.states
    mapping = {
        "0": dashboard_models.ValueMappingResult(text=off, color=off_colour, index=0),
        "1": dashboard_models.ValueMappingResult(text=on, color=on_colour, index=1),
    }
    return (
        _number(spec, "none")
        .mappings([dashboard_models.ValueMap(options=mapping)])
        .thresholds(_thresholds(((None, off_colour), (1, on_colour))))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .no_value("no data")
    )
