"""The dashboards' rows of consumption by route and configuration, their runbook links, the
alert list, and the Grafana version and schema the JSON is written for."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from quotaql.instrumentation import names
from quotaql.observability.alerts import ALERT_NAMES, runbook_anchor
from quotaql.observability.dashboards import overview_dashboard, tenant_dashboard
from quotaql.observability.dashboards.board import MIN_GRAFANA, SCHEMA_VERSION
from quotaql.observability.dashboards.panels import ALERT_PREFIX
from quotaql.observability.thresholds import AlertsConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.models import dashboard as dashboard_models

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "runbook.md"
OBSERVABILITY = ROOT / "docs" / "observability.md"
#: The first Grafana release of each dashboard schemaVersion the SDK may write (Grafana's
#: DashboardMigrator: migration 42 shipped in 12.2). An SDK that writes a newer one fails
#: here until this table, MIN_GRAFANA and docs/observability.md say which Grafana reads it.
FIRST_GRAFANA = {42: "12.2"}


@pytest.fixture(scope="module")
def dashboards() -> dict[str, dict[str, Any]]:
    return {"overview": overview_dashboard(), "tenant": tenant_dashboard()}


def rows(dashboard: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            current = found[panel["title"]] = list(panel.get("panels", []))
        else:
            current.append(panel)
    return found


def anchors(markdown: str) -> set[str]:
    fenced = False
    found = set()
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.*)", line)):
            found.add(runbook_anchor(match[1]))
    return found


def panel(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    (found,) = [p for ps in rows(dashboard).values() for p in ps if p["title"] == title]
    return found


# -- runbook links ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["overview", "tenant"])
def test_every_row_links_each_of_its_panels_to_a_section_of_the_runbook(
    dashboards: dict[str, dict[str, Any]], which: str
) -> None:
    headings = anchors(RUNBOOK.read_text(encoding="utf-8"))
    base = AlertsConfig().runbook_base_url

    for title, panels in rows(dashboards[which]).items():
        assert panels, title
        urls = {link["url"] for p in panels for link in p.get("links", [])}
        assert len(urls) == 1, f"row {title!r}: its panels link to {urls or 'nothing'}"
        (url,) = urls
        page, _, anchor = url.partition("#")
        assert page == base
        assert anchor in headings, f"row {title!r}: no heading #{anchor} in docs/runbook.md"
        for p in panels:
            (link,) = p["links"]
            assert (link["title"], link["targetBlank"]) == ("Runbook", True)


def test_the_route_rows_link_to_their_own_sections(dashboards: dict[str, dict[str, Any]]) -> None:
    by_row = {
        title: panels[0]["links"][0]["url"].partition("#")[2]
        for title, panels in rows(dashboards["overview"]).items()
    }
    assert by_row["By root field"] == "consumption-by-route"
    assert by_row["Most expensive operations"] == "expensive-operations"
    assert by_row["Configuration"] == "quotaqlconfigdrift"
    assert by_row["Tenants"] == "tenant-utilisation"


# -- the alert list ---------------------------------------------------------------------------


def test_the_alert_list_shows_quotaql_s_firing_and_pending_alerts(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    titles = list(rows(dashboards["overview"]))
    alert_list = panel(dashboards["overview"], "quotaql alerts")

    assert titles.index("Alerts") == 1  # right under the overview
    assert alert_list["type"] == "alertlist"
    options = alert_list["options"]
    assert options["alertName"] == ALERT_PREFIX
    assert all(name.startswith(ALERT_PREFIX) for name in ALERT_NAMES)
    assert options["stateFilter"]["firing"] is True
    assert options["stateFilter"]["pending"] is True
    assert options["stateFilter"]["normal"] is False
    assert "targets" not in alert_list


# -- descriptions that say what the query counts ----------------------------------------------


def test_the_blocked_ratio_counts_blocked_and_denied_and_says_so(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    blocked = panel(dashboards["overview"], "Blocked ratio")

    for target in blocked["targets"]:
        assert f'decision=~"{names.BUDGET_REFUSED}"' in target["expr"]
    assert "blocked" in blocked["description"]
    assert "denied" in blocked["description"]


def test_route_panels_group_by_coordinate_and_operation_name_only(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    overview = rows(dashboards["overview"])
    for title, label in (("By root field", "coordinate"), ("Most expensive operations",
                                                            "operation_name")):  # fmt: skip
        for p in overview[title]:
            for target in p["targets"]:
                expr = target["expr"]
                assert f"by ({label})" in expr or f"by (le, {label})" in expr, expr
                assert expr.startswith("topk(10, "), expr  # never every client-chosen name
                assert "{{" + label + "}}" in target["legendFormat"]


def test_utilisation_is_per_tenant_on_both_dashboards(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    (closest,) = panel(dashboards["overview"], "Tenants closest to their contract")["targets"]
    (own,) = panel(dashboards["tenant"], "Tenant utilisation")["targets"]

    assert names.TENANT_UTILISATION in closest["expr"]
    assert "sum by (tenant)" in closest["expr"]
    assert f'{names.TENANT_UTILISATION}{{job=~"$job", tenant="$tenant"}}' in own["expr"]


def test_config_panels_show_each_worker_and_each_digest(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    (generation,) = panel(dashboards["overview"], "Config generation by worker")["targets"]
    (digests,) = panel(dashboards["overview"], "Configuration digests")["targets"]

    assert generation["expr"] == (
        f'max by (instance, pid) ({names.CONFIG_GENERATION}{{job=~"$job"}})'
    )
    assert digests["expr"] == f'count by (digest) ({names.CONFIG_INFO}{{job=~"$job"}} == 1)'


# -- the Grafana they are written for ---------------------------------------------------------


def test_the_schema_version_is_the_sdk_s_and_the_documented_grafana_reads_it(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    emitted = dashboard_models.Dashboard().schema_version
    text = OBSERVABILITY.read_text(encoding="utf-8")

    assert emitted == SCHEMA_VERSION, "the SDK writes another schemaVersion: see FIRST_GRAFANA"
    assert FIRST_GRAFANA[SCHEMA_VERSION] == MIN_GRAFANA
    for dashboard in dashboards.values():
        assert dashboard["schemaVersion"] == SCHEMA_VERSION
        # What Grafana reads of the JSON model, as this schema version has it.
        assert isinstance(dashboard["templating"]["list"], list)
        for p in dashboard["panels"]:
            assert set(p["gridPos"]) == {"h", "w", "x", "y"}
            assert isinstance(p["id"], int)
    assert f"Grafana {MIN_GRAFANA} or later" in text
    assert f"schemaVersion {SCHEMA_VERSION}" in text
