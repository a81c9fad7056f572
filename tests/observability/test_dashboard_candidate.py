"""The Tuning row's candidate panels: candidate weights against the live ones, by root field
(the exact mean and the quantiles), the tenants the candidate would refuse, and the state of
its file."""

from __future__ import annotations

from typing import Any

import pytest

from quotaql.instrumentation import names
from quotaql.observability.dashboards import overview_dashboard
from tests.observability.test_dashboard_routes import panel, rows


@pytest.fixture(scope="module")
def overview() -> dict[str, Any]:
    return overview_dashboard()


def exprs(dashboard: dict[str, Any], title: str) -> list[str]:
    return [target["expr"] for target in panel(dashboard, title)["targets"]]


def test_the_tuning_row_ends_with_the_candidate_panels(overview: dict[str, Any]) -> None:
    titles = [each["title"] for each in rows(overview)["Tuning"]]
    assert titles[-5:] == [
        "Root fields the candidate prices furthest from live",
        "Candidate ÷ live cost by root field p50 / p95",
        "Tenants the candidate would refuse, in range",
        "Candidate weights",
        "Candidate file refusals per second by reason",
    ]


def test_root_fields_are_compared_by_their_exact_mean_and_their_quantiles(
    overview: dict[str, Any],
) -> None:
    ratio = names.CANDIDATE_COST_RATIO
    by_field = 'job=~"$job", coordinate!=""'  # the per-operation series have it empty
    mean = (
        f"sum by (coordinate) (increase({ratio}_sum{{{by_field}}}[$__range]))"
        f" / sum by (coordinate) (increase({ratio}_count{{{by_field}}}[$__range]))"
    )
    furthest = panel(overview, "Root fields the candidate prices furthest from live")
    assert exprs(overview, furthest["title"]) == [
        f"topk(10, ({mean}) > 1)",
        f"topk(10, (1 / ({mean})) > 1)",
    ]
    assert all(target["instant"] for target in furthest["targets"])
    assert exprs(overview, "Candidate ÷ live cost by root field p50 / p95") == [
        f"histogram_quantile({q}, sum by (le, coordinate) "
        f"(rate({ratio}_bucket{{{by_field}}}[$__rate_interval])))"
        for q in ("0.5", "0.95")
    ]
    # The buckets span 1/16 to 16, with 1.0 an edge.
    bounds = names.CANDIDATE_RATIO_BUCKETS
    assert (bounds[0], bounds[-1]) == (1 / 16, 16.0)
    assert 1.0 in bounds


def test_would_refuse_by_tenant_and_the_file_s_state(overview: dict[str, Any]) -> None:
    (tenants,) = exprs(overview, "Tenants the candidate would refuse, in range")
    assert tenants == (
        "topk(10, sum by (tenant) (increase("
        f'{names.CANDIDATE_WOULD_REFUSE_TOTAL}{{job=~"$job", tier=~"$tier"}}[$__range])) > 0)'
    )
    (state,) = exprs(overview, "Candidate weights")
    assert state == f'min({names.CANDIDATE_LOADED}{{job=~"$job"}})'
    (errors,) = exprs(overview, "Candidate file refusals per second by reason")
    assert errors == (
        f'sum by (reason) (rate({names.CANDIDATE_ERRORS_TOTAL}{{job=~"$job"}}[$__rate_interval]))'
    )
