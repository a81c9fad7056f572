"""The generated Grafana dashboards: committed files current, PromQL valid, names from one source."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest

from quotaql.instrumentation import names
from quotaql.observability.dashboards import (
    OVERVIEW_FILE,
    TEMPLATE_VARIABLES,
    TENANT_FILE,
    dashboard_queries,
    overview_dashboard,
    render,
    substitute,
    tenant_dashboard,
    write_dashboards,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.models import dashboard as dashboard_models

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
PROVISIONING = DASHBOARDS / "provisioning"
PROMTOOL = "/usr/bin/promtool"

REGENERATE = (
    "run `quotaql dashboards --out dashboards/` (or, without the CLI command: "
    'python -c "from pathlib import Path; from quotaql.observability.dashboards import '
    "write_dashboards; write_dashboards(Path('dashboards'))\") and commit the result"
)

METRICS = {
    names.INCREMENTAL_PAYLOADS_TOTAL,  # @defer / @stream (issue 25)
    names.INCREMENTAL_OPERATIONS_TOTAL,
    names.SHARD_CALLS_TOTAL,  # sharded shared quotas (issue 26)
    names.REQUESTS_TOTAL,
    names.QUERY_COST,
    names.QUERY_ACTUAL_COST,
    names.QUERY_DEPTH,
    names.COST_TOTAL,
    names.OVERAGE_TOTAL,
    names.TIME_SECONDS_TOTAL,
    names.OPERATION_TIME,
    names.QUOTA_REFUSALS_TOTAL,
    names.QUOTA_WARNINGS_TOTAL,
    names.CHECK_DURATION,
    names.BACKEND_ERRORS_TOTAL,
    names.CIRCUIT_OPEN,
    names.TENANT_REQUESTS_TOTAL,
    names.BUILD_INFO,
    names.IDENTITY_TOTAL,
    names.KEY_LOOKUPS_TOTAL,
    names.OVERFLOW_TOTAL,
    names.SUBSCRIPTION_EVENTS_TOTAL,
    names.SUBSCRIPTIONS_OPEN,
    names.LIST_RETURNED_ITEMS,
    names.LIST_ASSUMED_ITEMS,
    names.LIST_SLICED_RATIO,
    names.COST_ESTIMATE_RATIO,
    names.PRESSURE,
    names.ADAPTIVE_MULTIPLIER,
    names.ADAPTIVE_ENGAGED,
    names.ADAPTIVE_TRANSITIONS_TOTAL,
    names.IN_FLIGHT,
    names.LEASES_TOTAL,
    names.REFUNDS_TOTAL,
    names.REFUND_QUEUE,
    names.REDIS_EVICTION,
    names.PIPELINE_COMMANDS_TOTAL,
    names.PIPELINE_BATCHES_TOTAL,
    names.PIPELINE_REDIRECTS_TOTAL,
    names.DELAY_SECONDS,
    names.DELAYED_WAITING,
    names.DELAY_REFUSED_TOTAL,
    names.DELAY_CANCELLED_TOTAL,
    names.REJECTIONS_TOTAL,
    names.PRESSURE_IGNORED_TOTAL,
    names.ADAPTIVE_CULPRITS,
    names.ROOT_FIELD_COST_TOTAL,
    names.ROOT_FIELD_REQUESTS_TOTAL,
    names.ROOT_FIELD_TIME,
    names.OPERATION_NAME_COST_TOTAL,
    names.OPERATION_NAME_REQUESTS_TOTAL,
    names.OPERATION_NAME_TIME,
    names.TENANT_UTILISATION,
    names.CONFIG_GENERATION,
    names.CONFIG_INFO,
    names.STAGED_TOTAL,
    names.STAGED_EVENTS_TOTAL,
    names.WOULD_REFUSE_TOTAL,
    names.REFUSAL_CAPACITY_RATIO,
    names.ROOT_FIELDS_SKIPPED_TOTAL,
    names.CANDIDATE_COST_RATIO,
    names.CANDIDATE_WOULD_REFUSE_TOTAL,
    names.CANDIDATE_ERRORS_TOTAL,
    names.CANDIDATE_LOADED,
    names.RESOLVER_SECONDS,  # issue 25: the Tuning row's resolver time
}

OVERVIEW_ROWS = [
    (
        "Overview",
        ["Decisions per second", "Blocked ratio", "Fail-open / fail-closed decisions"],
    ),
    ("Alerts", ["quotaql alerts"]),
    (
        "Warnings before the wall",
        [
            "Quota warnings per second by quota",
            "Warnings and budget refusals per second by tier",
            "Warned quotas in range",
        ],
    ),
    (
        "Adaptive",
        [
            "Pressure by source",
            "Adaptive multiplier by tier",
            "Adaptive limits",
            "Adaptive transitions in range",
            "Pressure left out for everyone",
            "Subjects paying their own multiplier",
        ],
    ),
    (
        "Identity",
        [
            "Operations by identity source",
            "Anonymous and unknown-key share",
            "Unknown-key and subscription-cap refusals",
            "API key lookups per second",
        ],
    ),
    (
        "Rollout",
        [
            "Staged decisions per second by tier",
            "Enforced share of staged operations",
            "Would-be refusals per second by tier and cause",
            "Would-be refusals in range by quota",
            "Capacity needed by refused operations, p50 / p99",
        ],
    ),
    (
        "Cost",
        [
            "Cost charged / refunded per second",
            "Estimated cost heatmap",
            "Actual vs estimated cost",
            "Overage charged per second",
        ],
    ),
    ("Rejections", ["Rejections per second by code", "Rejections in range by code"]),
    (
        "By root field",
        [
            "Most expensive root fields in range",
            "Points paid per second by root field",
            "Refused per second by root field",
            "Worker time p99 by root field",
            "Points per operation by root field",
            "Root fields skipped per second (partial answers)",
        ],
    ),
    (
        "Most expensive operations",
        [
            "Most expensive operations in range",
            "Points per operation by name",
            "Refused per second by operation name",
            "Worker time p99 by operation name",
        ],
    ),
    (
        "Worker time",
        [
            "Worker time per second by tier",
            "Worker time per operation p50 / p99",
            "Budget refusals by quota",
        ],
    ),
    (
        "Tuning",
        [
            "Fields whose estimates are furthest off",
            "Lists longer than their slicing argument",
            "Actual ÷ estimated cost p50 / p95",
            "Operations costing more than estimated",
            "Resolver time by field in range",
            "Resolver time per call, top fields",
            "Root fields the candidate prices furthest from live",
            "Candidate ÷ live cost by root field p50 / p95",
            "Tenants the candidate would refuse, in range",
            "Candidate weights",
            "Candidate file refusals per second by reason",
        ],
    ),
    (
        "Subscriptions",
        [
            "Subscriptions open",
            "Subscription events per second",
            "Subscriptions by decision",
            "Incremental payloads and endings",
        ],
    ),
    (
        "Concurrency",
        [
            "Operations in flight by tier",
            "Concurrency refusals per second",
            "Lease outcomes per second",
        ],
    ),
    (
        "Delay",
        [
            "Delay p50 / p99 by tier",
            "Delayed operations per second by tier",
            "Delay refusals per second by reason",
            "Operations waiting now",
            "Delays cancelled per second",
        ],
    ),
    ("Latency", ["Check latency p50 / p95 / p99", "Check latency heatmap"]),
    (
        "Backend",
        [
            "Backend errors per second",
            "Circuit breaker state",
            "Deferred refunds per second",
            "Refund queue",
            "Redis pipeline: commands per write",
            "Redis Cluster redirections per second",
            "Memory storage overflow per second",
            "Redis eviction check by verdict",
            "Redis eviction policies",
            "Sharded shared quota: shard calls per second",
            "Sharded shared quota by shard",
        ],
    ),
    ("Configuration", ["Config generation by worker", "Configuration digests"]),
    (
        "Tenants",
        [
            "Top blocked tenants",
            "Top tenants by requests",
            "Tenants closest to their contract",
            "Top cost by tier",
        ],
    ),
]
TENANT_ROWS = [
    (
        "Tenant $tenant",
        [
            "Tenant decisions per second",
            "Tenant blocked ratio",
            "Tenant blocked in range",
            "Tenant refusals by reason",
            "Tenant utilisation",
        ],
    ),
    (
        "Tier $tier",
        [
            "Tier decisions per second",
            "Tier blocked ratio",
            "Operations per second by type",
            "Tier cost charged / refunded per second",
            "Tier actual vs estimated cost",
            "Estimated cost p50 / p95 / p99",
            "Tier estimated cost heatmap",
            "Query depth p50 / p95 (all tiers)",
            "Tier subscription events per second",
            "Tier subscriptions by decision",
        ],
    ),
]

# Values a Grafana would put in: "All" on the regex variables, then specific selections.
SUBSTITUTIONS = [
    {"job": ".*", "tier": ".*", "tenant": "acme", "__rate_interval": "1m", "__range": "6h"},
    {
        "job": "api|worker",
        "tier": "free",
        "tenant": "other",
        "__rate_interval": "2m",
        "__range": "1d",
    },
]


@pytest.fixture(scope="module")
def dashboards() -> dict[str, dict[str, Any]]:
    return {"overview": overview_dashboard(), "tenant": tenant_dashboard()}


def _rows(dashboard: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(row title, its panels): an expanded row's panels follow it, a collapsed one carries them."""
    rows: list[tuple[str, list[dict[str, Any]]]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], list(panel.get("panels", []))))
        else:
            assert rows, f"panel {panel['title']!r} is above the first row"
            rows[-1][1].append(panel)
    return rows


def _all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for _, panels in _rows(dashboard) for panel in panels]


def _panel(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    (found,) = [panel for panel in _all_panels(dashboard) if panel["title"] == title]
    return found


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in dashboard["templating"]["list"]}


# -- the committed files -------------------------------------------------------------------------


def test_committed_dashboards_match_a_regeneration(tmp_path: Path) -> None:
    written = write_dashboards(tmp_path)

    assert [path.name for path in written] == [OVERVIEW_FILE, TENANT_FILE]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([OVERVIEW_FILE, TENANT_FILE])
    for path in written:
        committed = DASHBOARDS / path.name
        assert committed.is_file(), f"dashboards/{path.name} is missing: {REGENERATE}"
        assert committed.read_bytes() == path.read_bytes(), (
            f"dashboards/{path.name} differs from what the generator writes: {REGENERATE}"
        )


def test_generation_is_deterministic(tmp_path: Path) -> None:
    first = [path.read_bytes() for path in write_dashboards(tmp_path / "a")]
    second = [path.read_bytes() for path in write_dashboards(tmp_path / "b")]

    assert first == second
    assert render(overview_dashboard()) == render(overview_dashboard())


def test_render_is_sorted_indented_json_with_a_final_newline() -> None:
    text = render({"b": 1, "a": {"d": [], "c": "x"}})

    assert text == '{\n  "a": {\n    "c": "x",\n    "d": []\n  },\n  "b": 1\n}\n'


# -- dashboard metadata ----------------------------------------------------------------------------


def test_uids_titles_tags_schema_version(dashboards: dict[str, dict[str, Any]]) -> None:
    overview, tenant = dashboards["overview"], dashboards["tenant"]
    schema_version = dashboard_models.Dashboard().schema_version

    assert (overview["uid"], overview["title"]) == ("quotaql-overview", "quotaql / Overview")
    assert (tenant["uid"], tenant["title"]) == ("quotaql-tenant", "quotaql / Tenant")
    for dashboard in (overview, tenant):
        assert dashboard["tags"] == ["quotaql"]
        assert dashboard["schemaVersion"] == schema_version
        assert isinstance(schema_version, int)
        assert "id" not in dashboard, "a numeric id is per Grafana instance: uid only"
        assert "version" not in dashboard


@pytest.mark.parametrize("which", ["overview", "tenant"])
def test_no_timestamps_and_stable_panel_ids(
    dashboards: dict[str, dict[str, Any]], which: str
) -> None:
    dashboard = dashboards[which]
    text = render(dashboard)

    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text), "a timestamp in the output"
    for key in ("created", "updated", "iteration"):
        assert f'"{key}"' not in text
    ids = [panel["id"] for panel in _every_panel(dashboard)]
    assert sorted(ids) == list(range(1, len(ids) + 1))


def _every_panel(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows and panels, in document order."""
    return [panel for top in dashboard["panels"] for panel in [top, *top.get("panels", [])]]


def _row(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    (row,) = [p for p in dashboard["panels"] if p["type"] == "row" and p["title"] == title]
    return row


# -- layout ---------------------------------------------------------------------------------------


def test_overview_rows_and_panels_in_order(dashboards: dict[str, dict[str, Any]]) -> None:
    rows = _rows(dashboards["overview"])

    assert [
        (title, [panel["title"] for panel in panels]) for title, panels in rows
    ] == OVERVIEW_ROWS
    # The per-tenant metric is opt-in: its row starts collapsed, the others expanded.
    assert [_row(dashboards["overview"], title)["collapsed"] for title, _ in rows] == [
        *[False] * (len(OVERVIEW_ROWS) - 1),
        True,
    ]


def test_tenant_rows_and_panels_in_order(dashboards: dict[str, dict[str, Any]]) -> None:
    rows = _rows(dashboards["tenant"])

    assert [(title, [panel["title"] for panel in panels]) for title, panels in rows] == TENANT_ROWS


@pytest.mark.parametrize("which", ["overview", "tenant"])
def test_panels_fit_the_grid_without_overlapping(
    dashboards: dict[str, dict[str, Any]], which: str
) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in _every_panel(dashboards[which]):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps another panel"
                cells.add((x, y))


@pytest.mark.parametrize("which", ["overview", "tenant"])
def test_every_panel_and_query_uses_the_datasource_variable(
    dashboards: dict[str, dict[str, Any]], which: str
) -> None:
    panels = _all_panels(dashboards[which])

    assert panels
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        if panel["type"] == "alertlist":  # Grafana's own alerts: no query
            continue
        assert panel["targets"], f"{panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_units(dashboards: dict[str, dict[str, Any]]) -> None:
    overview, tenant = dashboards["overview"], dashboards["tenant"]

    def unit(dashboard: dict[str, Any], title: str) -> str:
        return str(_panel(dashboard, title)["fieldConfig"]["defaults"]["unit"])

    assert unit(overview, "Decisions per second") == "reqps"
    assert unit(overview, "Blocked ratio") == "percentunit"
    assert unit(overview, "Fail-open / fail-closed decisions") == "reqps"
    assert unit(overview, "Check latency p50 / p95 / p99") == "s"
    assert _panel(overview, "Check latency heatmap")["options"]["yAxis"]["unit"] == "s"
    assert unit(tenant, "Tenant decisions per second") == "reqps"
    assert unit(tenant, "Tenant blocked ratio") == "percentunit"
    assert unit(tenant, "Tier blocked ratio") == "percentunit"


# -- variables ------------------------------------------------------------------------------------


def test_variables(dashboards: dict[str, dict[str, Any]]) -> None:
    overview, tenant = _variables(dashboards["overview"]), _variables(dashboards["tenant"])

    assert list(overview) == ["datasource", "job", "tier"]
    assert list(tenant) == ["datasource", "job", "tier", "tenant"]
    for variables in (overview, tenant):
        datasource = variables["datasource"]
        assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
        assert datasource["current"]["value"] == "prometheus"
        job, tier = variables["job"], variables["tier"]
        assert job["type"] == tier["type"] == "query"
        assert job["query"] == f"label_values({names.BUILD_INFO}, job)"
        assert tier["query"] == f'label_values({names.REQUESTS_TOTAL}{{job=~"$job"}}, tier)'
        for variable in (job, tier):
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert variable["multi"] is True
            assert variable["includeAll"] is True
            assert variable["allValue"] == ".*"
            assert variable["current"]["value"] == ["$__all"]
    tenant_variable = tenant["tenant"]
    assert tenant_variable["query"] == (
        f'label_values({names.TENANT_REQUESTS_TOTAL}{{job=~"$job"}}, tenant)'
    )
    assert tenant_variable["multi"] is False
    assert tenant_variable["includeAll"] is False


@pytest.mark.parametrize("which", ["overview", "tenant"])
def test_exprs_use_only_documented_variables_and_regex_matchers(
    dashboards: dict[str, dict[str, Any]], which: str
) -> None:
    dashboard = dashboards[which]
    defined = set(_variables(dashboard)) | {"__rate_interval", "__range"}

    for expr in dashboard_queries(dashboard):
        used = {a or b for a, b in re.findall(r"\$\{(\w+)\}|\$(\w+)", expr)}
        assert used <= set(TEMPLATE_VARIABLES), expr
        assert used <= defined, expr
        assert 'job=~"$job"' in expr, expr
        assert "$job" not in expr.replace('job=~"$job"', ""), expr
        assert "$tier" not in expr.replace('tier=~"$tier"', ""), expr
        assert "$tenant" not in expr.replace('tenant="$tenant"', ""), expr
        if "rate(" in expr:
            assert "[$__rate_interval]" in expr or "[$__range]" in expr, expr


# -- queries ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("which", "count"), [("overview", 98), ("tenant", 19)])
def test_dashboard_queries_returns_every_expr(
    dashboards: dict[str, dict[str, Any]], which: str, count: int
) -> None:
    dashboard = dashboards[which]
    queries = dashboard_queries(dashboard)

    assert len(queries) == count
    assert len(queries) == render(dashboard).count('"expr":')
    assert queries == [t["expr"] for p in _all_panels(dashboard) for t in p.get("targets", [])]
    # The collapsed Tenants row's panels are included.
    if which == "overview":
        assert any(names.TENANT_REQUESTS_TOTAL in query for query in queries)


def test_every_metric_in_an_expr_is_a_name_from_names(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    used: set[str] = set()
    for dashboard in dashboards.values():
        for expr in dashboard_queries(dashboard):
            for metric in re.findall(r"quotaql_[a-z_]+", expr):
                used.add(re.sub(r"_(bucket|sum|count)$", "", metric))
        for variable in dashboard["templating"]["list"]:
            used.update(re.findall(r"quotaql_[a-z_]+", str(variable.get("query", ""))))

    assert used <= METRICS, f"not in quotaql.instrumentation.names: {sorted(used - METRICS)}"
    assert used == METRICS, f"on no panel nor variable: {sorted(METRICS - used)}"


def test_latency_quantiles_and_heatmaps(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]
    quantiles = [t["expr"] for t in _panel(overview, "Check latency p50 / p95 / p99")["targets"]]

    assert quantiles == [
        f"histogram_quantile({q}, sum by (le, backend) "
        f'(rate({names.CHECK_DURATION}_bucket{{job=~"$job"}}[$__rate_interval])))'
        for q in ("0.5", "0.95", "0.99")
    ]
    heatmaps = [
        panel
        for dashboard in dashboards.values()
        for panel in _all_panels(dashboard)
        if panel["type"] == "heatmap"
    ]
    assert len(heatmaps) == 3
    for panel in heatmaps:
        (target,) = panel["targets"]
        assert target["format"] == "heatmap"
        assert target["legendFormat"] == "{{le}}"
        assert target["expr"].startswith("sum by (le) (rate(quotaql_")
        assert "_bucket{" in target["expr"]
        assert panel["options"]["calculate"] is False


def test_blocked_ratio_and_actual_vs_estimated(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]
    ratio = _panel(overview, "Blocked ratio")["targets"][0]["expr"]
    numerator, _, denominator = ratio.partition(" / ")
    actual_vs_estimated = [
        t["expr"] for t in _panel(overview, "Actual vs estimated cost")["targets"]
    ]

    assert f'decision=~"{names.BUDGET_REFUSED}"' in numerator  # by the storage or the cache
    assert "decision" not in denominator
    assert names.REQUESTS_TOTAL in denominator
    assert actual_vs_estimated == [
        f'sum(rate({metric}_sum{{job=~"$job", tier=~"$tier"}}[$__rate_interval]))'
        for metric in (names.QUERY_COST, names.QUERY_ACTUAL_COST)
    ]


def test_overage_panel(dashboards: dict[str, dict[str, Any]]) -> None:
    panel = _panel(dashboards["overview"], "Overage charged per second")
    (target,) = panel["targets"]
    assert target["expr"] == (
        f'sum by (tier) (rate({names.OVERAGE_TOTAL}{{job=~"$job", tier=~"$tier"}}'
        "[$__rate_interval]))"
    )
    assert target["legendFormat"] == "{{tier}}"
    assert "charge_overage" in panel["description"]


def test_warning_panels_sit_next_to_the_refusals(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]
    matchers = '{job=~"$job", tier=~"$tier"}'
    by_quota = _panel(overview, "Quota warnings per second by quota")
    assert [t["expr"] for t in by_quota["targets"]] == [
        f"sum by (quota) (rate({names.QUOTA_WARNINGS_TOTAL}{matchers}[$__rate_interval]))"
    ]
    assert "warn_at" in by_quota["description"]
    against = _panel(overview, "Warnings and budget refusals per second by tier")
    assert [(t["expr"], t["legendFormat"]) for t in against["targets"]] == [
        (f"sum by (tier) (rate({metric}{matchers}[$__rate_interval]))", f"{legend} {{{{tier}}}}")
        for metric, legend in (
            (names.QUOTA_WARNINGS_TOTAL, "warned"),
            (names.QUOTA_REFUSALS_TOTAL, "refused"),
        )
    ]
    (in_range,) = _panel(overview, "Warned quotas in range")["targets"]
    assert names.QUOTA_WARNINGS_TOTAL in in_range["expr"]
    # Near the refusals: right under the overview's decisions and the alerts.
    titles = [title for title, _ in _rows(overview)]
    assert titles.index("Warnings before the wall") == titles.index("Alerts") + 1


def test_worker_time_panels(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]

    def exprs(title: str) -> list[str]:
        return [t["expr"] for t in _panel(overview, title)["targets"]]

    matchers = '{job=~"$job", tier=~"$tier"}'
    assert exprs("Worker time per second by tier") == [
        f"sum by (tier) (rate({names.TIME_SECONDS_TOTAL}{matchers}[$__rate_interval]))"
    ]
    assert exprs("Worker time per operation p50 / p99") == [
        f"histogram_quantile({q}, sum by (le, tier) "
        f"(rate({names.OPERATION_TIME}_bucket{matchers}[$__rate_interval])))"
        for q in ("0.5", "0.99")
    ]
    assert exprs("Budget refusals by quota") == [
        f"sum by (quota) (rate({names.QUOTA_REFUSALS_TOTAL}{matchers}[$__rate_interval]))"
    ]
    refusals = _panel(overview, "Budget refusals by quota")
    assert _fixed_colours(refusals) == {names.QUOTA_TIME: "red"}
    unit = _panel(overview, "Worker time per second by tier")["fieldConfig"]["defaults"]["unit"]
    assert unit == "s"


def test_tuning_panels(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]

    def exprs(title: str) -> list[str]:
        return [t["expr"] for t in _panel(overview, title)["targets"]]

    furthest = _panel(overview, "Fields whose estimates are furthest off")
    mean = (
        f'sum by (coordinate) (increase({names.LIST_RETURNED_ITEMS}_sum{{job=~"$job"}}[$__range]))'
        f' / sum by (coordinate) (increase({names.LIST_RETURNED_ITEMS}_count{{job=~"$job"}}[$__range]))'
    )
    assumed = f'max by (coordinate) ({names.LIST_ASSUMED_ITEMS}{{job=~"$job"}})'
    # Both directions, each a factor above 1, the top 10 fields; instant, over the range.
    assert exprs("Fields whose estimates are furthest off") == [
        f"topk(10, ({assumed} / ({mean})) > 1)",
        f"topk(10, (({mean}) / {assumed}) > 1)",
    ]
    assert [t["legendFormat"] for t in furthest["targets"]] == [
        "{{coordinate}} (assumed too high)",
        "{{coordinate}} (assumed too low)",
    ]
    assert all(t["instant"] for t in furthest["targets"])
    assert furthest["type"] == "bargauge"
    (longer,) = exprs("Lists longer than their slicing argument")
    assert 'le="1.0"' in longer
    assert longer.endswith(" > 0)")
    assert f"{names.LIST_SLICED_RATIO}_count" in longer
    assert exprs("Actual ÷ estimated cost p50 / p95") == [
        f"histogram_quantile({q}, sum by (le, tier) "
        f'(rate({names.COST_ESTIMATE_RATIO}_bucket{{job=~"$job", tier=~"$tier"}}[$__rate_interval])))'
        for q in ("0.5", "0.95")
    ]
    (under,) = exprs("Operations costing more than estimated")
    assert 'le="1.0"' in under
    assert under.startswith("((sum by (tier) (rate(")
    assert ") or 0 * sum by (tier) (" in under  # 0, not absent, without under-estimates
    # The edge the panels count above is one of the ratio histograms' buckets.
    assert 1.0 in names.RATIO_BUCKETS
    unit = _panel(overview, "Operations costing more than estimated")["fieldConfig"]["defaults"]
    assert (unit["unit"], unit["max"]) == ("percentunit", 1)


def test_resolver_time_panels(dashboards: dict[str, dict[str, Any]]) -> None:
    """Issue 25: the sampled operations' resolver time, top fields by total and per call."""
    overview = dashboards["overview"]
    total = _panel(overview, "Resolver time by field in range")
    (target,) = total["targets"]
    assert target["expr"] == (
        f"topk(10, sum by (coordinate) (increase({names.RESOLVER_SECONDS}_sum"
        '{job=~"$job"}[$__range])) > 0)'
    )
    assert target["instant"]
    assert target["legendFormat"] == "{{coordinate}}"
    assert total["fieldConfig"]["defaults"]["unit"] == "s"
    (per_call,) = _panel(overview, "Resolver time per call, top fields")["targets"]
    assert per_call["expr"] == (
        f'topk(10, sum by (coordinate) (rate({names.RESOLVER_SECONDS}_sum{{job=~"$job"}}'
        f"[$__rate_interval])) / sum by (coordinate) (rate({names.RESOLVER_SECONDS}_count"
        '{job=~"$job"}[$__rate_interval])))'
    )


def _fixed_colours(panel: dict[str, Any]) -> dict[str, str]:
    """The series a panel gives a fixed colour: {legend name: colour}."""
    colours = {}
    for override in panel["fieldConfig"]["overrides"]:
        assert override["matcher"]["id"] == "byName"
        (prop,) = override["properties"]
        assert prop["id"] == "color"
        assert prop["value"]["mode"] == "fixed"
        colours[override["matcher"]["options"]] = prop["value"]["fixedColor"]
    return colours


SUSPECT = {
    names.SOURCE_ANONYMOUS,
    names.SOURCE_UNKNOWN_KEY,
    names.SOURCE_REJECTED_KEY,
    names.SOURCE_UNVERIFIED_KEY,
    names.SOURCE_LIMITED_KEY,
}


def test_identity_panels_single_out_anonymous_and_unknown_keys(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    overview = dashboards["overview"]
    sources = _panel(overview, "Operations by identity source")
    share = _panel(overview, "Anonymous and unknown-key share")
    refusals = _panel(overview, "Unknown-key and subscription-cap refusals")

    assert set(names.SUSPECT_SOURCES) == SUSPECT
    assert set(names.IDENTITY_SOURCES) >= SUSPECT
    # Every source, by source; the suspect ones in fixed colours, anonymous in red.
    (target,) = sources["targets"]
    assert target["expr"] == (
        f'sum by (source) (rate({names.IDENTITY_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    )
    assert target["legendFormat"] == "{{source}}"
    for panel in (sources, share):
        assert set(_fixed_colours(panel)) == SUSPECT
        assert _fixed_colours(panel)[names.SOURCE_ANONYMOUS] == "red"
    # The share in all is 0, not absent, when nothing is suspect; per source, a share of all.
    total, per_source = (t["expr"] for t in share["targets"])
    suspect = 'source=~"' + "|".join(names.SUSPECT_SOURCES) + '"'
    assert total.startswith("(sum(rate(")
    assert ") or vector(0)) / sum(rate(" in total
    assert suspect in total
    assert suspect in per_source
    assert " / ignoring (source) group_left () sum(" in per_source
    assert share["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert share["fieldConfig"]["defaults"]["max"] == 1
    (refused,) = refusals["targets"]
    assert 'decision=~"unknown_key|too_many_subscriptions"' in refused["expr"]
    assert refused["expr"].startswith(f"sum by (decision) (rate({names.REQUESTS_TOTAL}{{")
    assert {names.UNKNOWN_KEY, names.TOO_MANY_SUBSCRIPTIONS} <= set(names.DECISIONS)
    assert refusals["fieldConfig"]["defaults"]["unit"] == "reqps"
    # The key_resolver's load: lookups by outcome, the ones not made (limited) in blue.
    lookups = _panel(overview, "API key lookups per second")
    (target,) = lookups["targets"]
    assert target["expr"] == (
        f'sum by (outcome) (rate({names.KEY_LOOKUPS_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    )
    assert _fixed_colours(lookups) == {names.LOOKUP_LIMITED: "blue", names.LOOKUP_FAILED: "red"}


def test_subscription_panels(dashboards: dict[str, dict[str, Any]]) -> None:
    overview, tenant = dashboards["overview"], dashboards["tenant"]

    def exprs(dashboard: dict[str, Any], title: str) -> list[str]:
        return [t["expr"] for t in _panel(dashboard, title)["targets"]]

    assert exprs(overview, "Subscriptions open") == [
        f'sum({names.SUBSCRIPTIONS_OPEN}{{job=~"$job"}})'
    ]
    events = f'{names.SUBSCRIPTION_EVENTS_TOTAL}{{job=~"$job", tier=~"$tier"}}'
    assert exprs(overview, "Subscription events per second") == [
        f"sum by (decision) (rate({events}[$__rate_interval]))"
    ]
    assert exprs(tenant, "Tier subscription events per second") == [
        f"sum by (tier, decision) (rate({events}[$__rate_interval]))"
    ]
    for dashboard, title in ((overview, "Subscriptions by decision"),
                             (tenant, "Tier subscriptions by decision")):  # fmt: skip
        (expr,) = exprs(dashboard, title)
        assert 'operation_type="subscription"' in expr
        assert names.REQUESTS_TOTAL in expr
    colours = _fixed_colours(_panel(overview, "Subscription events per second"))
    assert colours[names.ALLOWED] == "green"
    assert colours[names.BLOCKED] == "red"


def test_adaptive_panels(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]

    def exprs(title: str) -> list[str]:
        return [t["expr"] for t in _panel(overview, title)["targets"]]

    # The most pressured instance per source, the tightest per tier: what an operator must
    # see first is the worst of the instances.
    assert exprs("Pressure by source") == [f'max by (source) ({names.PRESSURE}{{job=~"$job"}})']
    assert exprs("Adaptive multiplier by tier") == [
        f'min by (tier) ({names.ADAPTIVE_MULTIPLIER}{{job=~"$job", tier=~"$tier"}})'
    ]
    assert exprs("Adaptive limits") == [f'max({names.ADAPTIVE_ENGAGED}{{job=~"$job"}})']
    assert exprs("Adaptive transitions in range") == [
        f'sum by (to) (increase({names.ADAPTIVE_TRANSITIONS_TOTAL}{{job=~"$job"}}[$__range]))'
    ]
    pressure = _panel(overview, "Pressure by source")["fieldConfig"]["defaults"]
    assert (pressure["unit"], pressure["max"]) == ("percentunit", 1)
    assert _panel(overview, "Adaptive multiplier by tier")["fieldConfig"]["defaults"]["max"] == 1
    engaged = _panel(overview, "Adaptive limits")
    mapped = engaged["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {value: entry["text"] for value, entry in mapped.items()} == {
        "0": "released",
        "1": "engaged",
    }
    assert names.LABEL_TO == "to"
    assert names.TRANSITIONS == ("engaged", "released")


def test_concurrency_panels(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]

    def exprs(title: str) -> list[str]:
        return [t["expr"] for t in _panel(overview, title)["targets"]]

    assert exprs("Operations in flight by tier") == [
        f'sum by (tier) ({names.IN_FLIGHT}{{job=~"$job", tier=~"$tier"}})'
    ]
    assert exprs("Concurrency refusals per second") == [
        f"sum by (tier) (rate({names.REQUESTS_TOTAL}"
        f'{{job=~"$job", tier=~"$tier", decision="{names.TOO_MANY_CONCURRENT}"}}'
        "[$__rate_interval]))"
    ]
    assert exprs("Lease outcomes per second") == [
        f'sum by (outcome) (rate({names.LEASES_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    ]
    overrides = _panel(overview, "Lease outcomes per second")["fieldConfig"]["overrides"]
    colours = {
        o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"] for o in overrides
    }
    assert colours[names.LEASE_EXPIRED] == "red"
    assert set(colours) <= set(names.LEASE_OUTCOMES)


def test_delay_panels(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]

    def exprs(title: str) -> list[str]:
        return [t["expr"] for t in _panel(overview, title)["targets"]]

    selected = '{job=~"$job", tier=~"$tier"}'
    assert exprs("Delay p50 / p99 by tier") == [
        f"histogram_quantile({q}, sum by (le, tier) "
        f"(rate({names.DELAY_SECONDS}_bucket{selected}[$__rate_interval])))"
        for q in ("0.5", "0.99")
    ]
    assert [t["legendFormat"] for t in _panel(overview, "Delay p50 / p99 by tier")["targets"]] == [
        "p50 {{tier}}",
        "p99 {{tier}}",
    ]
    # The histogram's count is the operations delayed: one per operation that waited.
    assert exprs("Delayed operations per second by tier") == [
        f"sum by (tier) (rate({names.DELAY_SECONDS}_count{selected}[$__rate_interval]))"
    ]
    assert exprs("Delay refusals per second by reason") == [
        f"sum by (reason) (rate({names.DELAY_REFUSED_TOTAL}{selected}[$__rate_interval]))"
    ]
    # The gauge has no tier: the sum over every instance (and worker) of the jobs.
    assert exprs("Operations waiting now") == [f'sum({names.DELAYED_WAITING}{{job=~"$job"}})']
    assert exprs("Delays cancelled per second") == [
        f"sum by (tier) (rate({names.DELAY_CANCELLED_TOTAL}{selected}[$__rate_interval]))"
    ]
    colours = _fixed_colours(_panel(overview, "Delay refusals per second by reason"))
    assert set(colours) == set(names.DELAY_REFUSED_REASONS)
    assert colours[names.DELAY_PROCESS_FULL] == "red"
    units = {
        title: _panel(overview, title)["fieldConfig"]["defaults"]["unit"]
        for title in ("Delay p50 / p99 by tier", "Delay refusals per second by reason")
    }
    assert units == {
        "Delay p50 / p99 by tier": "s",
        "Delay refusals per second by reason": "reqps",
    }
    # The row sits between the other limits (concurrency) and the check latency.
    titles = [title for title, _ in _rows(overview)]
    assert titles.index("Delay") == titles.index("Concurrency") + 1
    assert titles.index("Latency") == titles.index("Delay") + 1


def test_backend_refund_and_pipeline_panels(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]

    def exprs(title: str) -> list[str]:
        return [t["expr"] for t in _panel(overview, title)["targets"]]

    assert exprs("Deferred refunds per second") == [
        f'sum by (outcome) (rate({names.REFUNDS_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    ]
    assert exprs("Refund queue") == [f'sum by (instance) ({names.REFUND_QUEUE}{{job=~"$job"}})']
    per_write, writes = exprs("Redis pipeline: commands per write")
    commands = (
        f'sum by (backend) (rate({names.PIPELINE_COMMANDS_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    )
    batches = (
        f'sum by (backend) (rate({names.PIPELINE_BATCHES_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    )
    assert per_write == f"{commands}\n  / {batches}"
    assert writes == batches
    overrides = _panel(overview, "Deferred refunds per second")["fieldConfig"]["overrides"]
    colours = {
        o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"] for o in overrides
    }
    assert (colours[names.REFUND_LOST_OUTCOME], colours[names.REFUND_UNKNOWN]) == ("red", "orange")
    # Past max_keys: decisions on a network's overflow state or on a quota's last resort.
    assert exprs("Memory storage overflow per second") == [
        f'sum by (store, scope) (rate({names.OVERFLOW_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    ]
    overflow = _fixed_colours(_panel(overview, "Memory storage overflow per second"))
    assert overflow == {"states quota": "red", "leases quota": "red"}


def test_rejection_panels_count_by_code(dashboards: dict[str, dict[str, Any]]) -> None:
    overview = dashboards["overview"]
    (by_code,) = _panel(overview, "Rejections per second by code")["targets"]
    assert by_code["expr"] == (
        f'sum by (code) (rate({names.REJECTIONS_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    )
    (in_range,) = _panel(overview, "Rejections in range by code")["targets"]
    assert in_range["expr"] == (
        f'topk(10, sum by (code) (increase({names.REJECTIONS_TOTAL}{{job=~"$job"}}[$__range])) > 0)'
    )
    overrides = _panel(overview, "Rejections per second by code")["fieldConfig"]["overrides"]
    colours = {
        o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"] for o in overrides
    }
    assert colours[names.TOO_MANY_VARIABLE_VALUES] == "orange"
    titles = [title for title, _ in _rows(overview)]
    assert titles.index("Rejections") == titles.index("Cost") + 1


def test_tenant_refusals_count_every_refusing_decision(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    (target,) = _panel(dashboards["tenant"], "Tenant refusals by reason")["targets"]
    refusing = re.search(r'decision=~"([^"]+)"', target["expr"])

    assert refusing is not None
    assert set(refusing[1].split("|")) == set(names.DECISIONS) - {
        names.ALLOWED,
        names.SHADOW_BLOCKED,
        names.FAIL_OPEN,
        names.VALIDATED,  # priced and answered: not a refusal
    }
    assert 'tenant="$tenant"' in target["expr"]


# -- substitute -----------------------------------------------------------------------------------


def test_substitute() -> None:
    expr = 'rate(m{job=~"$job", tier=~"${tier}"}[$__rate_interval]) + increase(m[$__range])'

    assert substitute(expr, job="api", tier=".*", __rate_interval="1m", __range="1h") == (
        'rate(m{job=~"api", tier=~".*"}[1m]) + increase(m[1h])'
    )
    # Grafana's built-ins may be given without their leading underscores.
    assert substitute("[$__rate_interval]", rate_interval="5m") == "[5m]"
    # $tier is not a prefix match of $tiers, nor $job of $jobs.
    assert substitute("$tiers $tier", tiers="A", tier="B") == "A B"
    assert substitute("no variables") == "no variables"
    with pytest.raises(KeyError, match=r"\$tenant"):
        substitute('m{tenant="$tenant"}', job="x")


# -- PromQL validity -------------------------------------------------------------------------------


def _promtool() -> str:
    found = shutil.which("promtool") or (PROMTOOL if Path(PROMTOOL).is_file() else None)
    if found is None:
        # Fail, never skip: without promtool nothing proves the exprs parse.
        pytest.fail(
            "promtool not found (install prometheus' promtool, e.g. apt install prometheus)"
        )
    return found


def _check_rules(exprs: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` on one recording rule per expr: it parses every expr's PromQL."""
    rules = [{"record": f"quotaql_dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]
    # JSON is YAML: no YAML library needed to write the rule file.
    path.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}, indent=2))
    return subprocess.run(
        [_promtool(), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize("values", SUBSTITUTIONS, ids=["all", "selected"])
def test_every_expr_is_valid_promql_once_substituted(
    dashboards: dict[str, dict[str, Any]], values: dict[str, str], tmp_path: Path
) -> None:
    exprs = [
        substitute(expr, **values)
        for dashboard in dashboards.values()
        for expr in dashboard_queries(dashboard)
    ]

    result = _check_rules(exprs, tmp_path / "rules.yml")

    assert result.returncode == 0, f"promtool rejected an expr:\n{result.stdout}{result.stderr}"
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_promtool_check_rejects_invalid_promql(tmp_path: Path) -> None:
    # The check above proves something only if promtool really parses the exprs.
    result = _check_rules(["sum by (tier) (rate(m[1m])", 'm{job=~"$job"}'], tmp_path / "bad.yml")

    assert result.returncode != 0
    assert "parse error" in result.stdout + result.stderr


# -- provisioning --------------------------------------------------------------------------------


def _parse_yaml(text: str) -> Any:
    """The YAML subset the provisioning files use: block mappings, block sequences, scalars."""
    lines = [
        [len(raw) - len(raw.lstrip(" ")), raw.strip()]
        for raw in text.splitlines()
        if raw.strip() and not raw.strip().startswith("#")
    ]
    value, end = _parse_block(lines, 0, lines[0][0])
    assert end == len(lines), f"unparsed YAML from line {lines[end]}"
    return value


def _parse_block(lines: list[list[Any]], i: int, indent: int) -> tuple[Any, int]:
    if lines[i][1].startswith("- "):
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            lines[i] = [indent + 2, lines[i][1][2:]]  # "- key: v" opens a mapping at indent + 2
            item, i = _parse_block(lines, i, indent + 2)
            items.append(item)
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
        key, colon, value = lines[i][1].partition(":")
        assert colon, f"not a mapping entry: {lines[i][1]!r}"
        assert key not in mapping, f"duplicate key {key!r}"
        value = value.strip()
        i += 1
        if value:
            mapping[key] = _scalar(value)
        elif i < len(lines) and lines[i][0] > indent:
            mapping[key], i = _parse_block(lines, i, lines[i][0])
        else:
            mapping[key] = None
    return mapping, i


def _scalar(text: str) -> Any:
    if text[0] in "\"'" and text[-1] == text[0]:
        return text[1:-1]
    if text in {"true", "false"}:
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def test_yaml_subset_parser() -> None:
    assert _parse_yaml("a: 1\nb:\n  - c: 'x'\n    d: true\n  - c: y\ne:\n  f: g\n") == {
        "a": 1,
        "b": [{"c": "x", "d": True}, {"c": "y"}],
        "e": {"f": "g"},
    }


def test_dashboard_provisioning_points_at_the_dashboards_folder() -> None:
    text = (PROVISIONING / "dashboards.yml").read_text(encoding="utf-8")
    config = _parse_yaml(text)

    assert text.startswith("#"), "the file starts with comments on how to mount it"
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file"
    assert provider["allowUiUpdates"] is False
    path = provider["options"]["path"]
    assert path == "/var/lib/grafana/dashboards"
    # The comments show the mount that puts the generated JSON files at that path.
    assert f"./dashboards:{path}" in text


def test_datasource_provisioning_is_the_datasource_variable_default(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    text = (PROVISIONING / "datasources.yml").read_text(encoding="utf-8")
    config = _parse_yaml(text)

    assert text.startswith("#")
    assert config["apiVersion"] == 1
    (datasource,) = config["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["uid"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    for dashboard in dashboards.values():
        variable = _variables(dashboard)["datasource"]
        assert variable["query"] == datasource["type"]
        assert variable["current"]["value"] == datasource["uid"]
        assert variable["current"]["text"] == datasource["name"]


def test_provisioning_holds_only_the_two_files() -> None:
    assert sorted(p.name for p in PROVISIONING.iterdir()) == ["dashboards.yml", "datasources.yml"]
    assert sorted(p.name for p in DASHBOARDS.glob("*.json")) == [OVERVIEW_FILE, TENANT_FILE]
