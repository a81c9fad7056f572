"""``quotaql report``: the review before enforcing, built from canned query results, then read
from a real Prometheus scraping a real uvicorn app under staged enforcement."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.cli import app
from quotaql.cli.report import build, capacity_for, render
from quotaql.gate import staging
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.plugin import CostLimiter
from tests.support import strawberry_shop as shop
from tests.support.app_servers import UvicornServer
from tests.support.servers import PrometheusServer, free_port, scrape_config

if TYPE_CHECKING:
    from pathlib import Path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["report", *args], catch_exceptions=False, prog_name="quotaql")


# -- the review of canned results --------------------------------------------------------------


def bucket(tier: str, le: str, value: float) -> tuple[dict[str, str], float]:
    return {"tier": tier, "le": le}, value


CANNED: dict[str, list[tuple[dict[str, str], float]]] = {
    "tiers": [
        ({"tier": "free", "decision": "allowed"}, 960.0),
        ({"tier": "free", "decision": "blocked"}, 10.0),
        ({"tier": "free", "decision": "shadow_blocked"}, 30.0),
        ({"tier": "pro", "decision": "allowed"}, 500.0),
    ],
    "staged": [
        ({"tier": "free", "enforced": "true", "decision": "allowed"}, 95.0),
        ({"tier": "free", "enforced": "true", "decision": "blocked"}, 10.0),
        ({"tier": "free", "enforced": "false", "decision": "allowed"}, 865.0),
        ({"tier": "free", "enforced": "false", "decision": "shadow_blocked"}, 30.0),
    ],
    "would": [
        ({"tier": "free", "tenant": "acme", "quota": "tenant", "cause": "share"}, 25.0),
        ({"tier": "free", "tenant": "other", "quota": "field:Query.search", "cause": "share"}, 5.0),
    ],
    "cost": [
        ({"tier": "free", "tenant": "acme", "quota": "tenant"}, 2500.0),
        ({"tier": "free", "tenant": "other", "quota": "field:Query.search"}, 150.0),
    ],
    "capacity": [  # 40 refusals: 20 needed at most 1.25 times the capacity, 20 at most 1.5
        *(bucket("free", le, 0.0) for le in ("1.0", "1.05", "1.1")),
        bucket("free", "1.25", 20.0),
        *(bucket("free", le, 40.0) for le in ("1.5", "2.0", "3.0", "5.0", "10.0", "30.0")),
        bucket("free", "100.0", 40.0),
        bucket("free", "+Inf", 40.0),
    ],
    "tenants": [
        ({"tenant": "acme", "decision": "allowed"}, 75.0),
        ({"tenant": "acme", "decision": "shadow_blocked"}, 25.0),
        ({"tenant": "other", "decision": "allowed"}, 1385.0),
        ({"tenant": "other", "decision": "shadow_blocked"}, 5.0),
        ({"tenant": "other", "decision": "blocked"}, 10.0),
    ],
    "root_fields": [
        ({"coordinate": "Query.search", "decision": "shadow_blocked"}, 5.0),
        ({"coordinate": "Query.search", "decision": "allowed"}, 95.0),
        ({"coordinate": "Query.products", "decision": "allowed"}, 900.0),
    ],
    "operations": [({"operation_name": "Search", "decision": "shadow_blocked"}, 5.0)],
    "candidate": [],
}


def test_capacity_for_the_quantile_is_interpolated_within_its_bucket() -> None:
    buckets = {float(labels["le"]): value for labels, value in CANNED["capacity"]}
    # 1,000 operations: 10 refusals may stay; the 30th need of 40 is the last to fit.
    assert capacity_for(buckets, 1000) == pytest.approx(1.25 + 0.25 * 10 / 20)
    assert capacity_for(buckets, 2000) == pytest.approx(1.25)  # 20 may stay: the 20th
    assert capacity_for(buckets, 4000) == 1.0  # 40 may stay: enough now
    assert capacity_for({1.0: 0.0, 100.0: 0.0, math.inf: 5.0}, 10) == math.inf
    assert capacity_for({}, 10) == 1.0


def test_the_review_per_tier_tenant_root_field_and_operation() -> None:
    review = build(CANNED, source="http://prometheus:9090", since="24h")
    free, pro = review["tiers"]
    assert (free["name"], free["requests"], free["blocked"], free["would_refuse"]) == (
        "free",
        1000.0,
        10.0,
        30.0,
    )
    assert free["staged"] == {"enforced": 105.0, "shadow": 895.0, "would_refuse": 30.0}
    assert free["quotas"] == [
        {"quota": "tenant", "would_refuse": 25.0, "cost_needed": 2500.0},
        {"quota": "field:Query.search", "would_refuse": 5.0, "cost_needed": 150.0},
    ]
    assert free["cost_needed"] == 2650.0
    assert free["capacity_for_p99"] == pytest.approx(1.375)
    assert (pro["would_refuse"], pro["staged"], pro["capacity_for_p99"]) == (0.0, None, 1.0)
    acme = review["tenants"][0]
    assert (acme["name"], acme["would_refuse"], acme["would_refuse_share"]) == ("acme", 25, 0.25)
    assert acme["quotas"][0]["quota"] == "tenant"
    search = review["root_fields"][0]
    assert (search["name"], search["would_refuse"], search["cost_needed"]) == (
        "Query.search",
        5.0,
        150.0,
    )
    assert review["operations"][0]["name"] == "Search"
    assert review["candidate"] == {"available": False, "tenants": []}

    text = render(review)
    assert "quotaql report: from http://prometheus:9090; counts: increase() over 24h" in text
    tier_line = next(line for line in text.splitlines() if line.startswith("free "))
    for shown in ("1,000", "30", "10.5% enforced, 30", "2,650", "tenant 25 (+1)", "x1.38"):
        assert shown in tier_line
    assert "no quotaql_candidate_would_refuse_total series" in text


def test_the_candidate_section_lists_the_tenants_it_would_have_refused() -> None:
    canned = dict(CANNED)
    canned["candidate"] = [
        ({"tier": "free", "tenant": "acme", "would_refuse": "x"}, 4.0),
        ({"tier": "free", "tenant": "globex"}, 0.0),  # nothing: not listed
    ]
    review = build(canned, source="p", since=None)
    assert review["candidate"]["tenants"] == [{"tier": "free", "tenant": "acme", "would_refuse": 4}]
    assert review["since"] == "all"
    text = render(review)
    assert "tenants the candidate weights would have refused where the live file did not" in text
    assert "totals since each server process started" in text


def test_samples_that_are_not_counts_are_left_out() -> None:
    canned = {
        "tiers": [({"tier": "free", "decision": "allowed"}, math.nan),
                  ({"tier": "free", "decision": "blocked"}, math.inf),
                  ({"tier": "free", "decision": "shadow_blocked"}, 2.0)],
        "capacity": [bucket("free", "soon", 3.0), bucket("free", "+Inf", -1.0)],
    }  # fmt: skip
    review = build(canned, source="p", since="1h")
    (free,) = review["tiers"]
    assert (free["requests"], free["would_refuse"], free["capacity_for_p99"]) == (2, 2, 1.0)
    assert "free" in render(review)


def test_hostile_label_values_are_printed_escaped() -> None:
    canned = {"tenants": [({"tenant": "evil\x1b[31m\nline", "decision": "shadow_blocked"}, 1.0)]}
    text = render(build(canned, source="p", since="1h"))
    assert "evil\\x1b[31m\\x0aline" in text
    assert "\x1b" not in text


# -- the command's errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--since", "a day"), "not a Prometheus duration"),
        (("--selector", "{job='x'}"), "without braces"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    result = invoke("--prometheus", "http://127.0.0.1:1", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_an_unreachable_prometheus_is_one_error_line_and_exit_2() -> None:
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "quotaql.cli", "report", "--prometheus", f"http://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: cannot reach http://127.0.0.1:{port}")
    assert len(done.stderr.splitlines()) == 1
    result = invoke("--prometheus", "ftp://example.org")
    assert (result.exit_code, result.stderr.startswith("error: ftp://example.org")) == (2, True)


# -- a real Prometheus scraping a real uvicorn ---------------------------------------------------

JOB = "quotaql-report"
TENANTS = [f"tenant-{i}" for i in range(40)]
TOML = """
[limits]
enforce_share = 0.5
refund_unused = false
[tiers.free]
capacity = 70
refill_per_second = 0.001
[tiers.calm]
capacity = 70
refill_per_second = 0.001
mode = "shadow"
[tenants.observed]
tier = "calm"
""" + "".join(f'[tenants."{name}"]\ntier = "free"\n' for name in TENANTS)
CHEAP = "{ hello }"
DEAR = "query Dear { products(first: 10) { name reviews(first: 1) { stars } } }"  # 30 points


def post(client: httpx.Client, key: str, query: str) -> int:
    response = client.post("/graphql", json={"query": query}, headers={"x-api-key": key})
    return response.status_code


def test_a_real_prometheus_review_of_a_staged_rollout(tmp_path: Path) -> None:
    inside = next(t for t in TENANTS if staging.staged(0.5, "free", f"key:{t}") == "enforced")
    outside = next(t for t in TENANTS if staging.staged(0.5, "free", f"key:{t}") == "shadow")
    config = tmp_path / "quotaql.toml"
    config.write_text(TOML, encoding="utf-8")
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, tenant_allowlist=[inside, outside, "observed"])
    limiter = CostLimiter.from_config(config, metrics=metrics)
    served = Starlette(
        routes=[
            Mount("/metrics", metrics_app(registry)),
            Mount("/", GraphQL(shop.make_schema(limiter))),
        ]
    )
    with (
        UvicornServer(served) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        prometheus_yml = scrape_config(JOB, f"127.0.0.1:{server.port}", metrics_path="/metrics/")
        with PrometheusServer(prometheus_yml) as prometheus:
            statuses = {
                tenant: [post(client, tenant, DEAR) for _ in range(3)]
                for tenant in (inside, outside, "observed")
            }
            # The dear query costs 30 of 70 (nothing refunded): the third does not fit.
            assert statuses[inside] == [200, 200, 429]
            assert statuses[outside] == statuses["observed"] == [200, 200, 200]
            deadline = time.monotonic() + 15
            while not prometheus.holds(f'sum(quotaql_requests_total{{job="{JOB}"}})', 9):
                assert time.monotonic() < deadline, "the traffic was not scraped"
                time.sleep(0.2)
            selector = f'job="{JOB}"'
            as_json = invoke("--prometheus", prometheus.url, "--since", "all", "--selector",
                             selector, "--json")  # fmt: skip
            as_text = invoke("--prometheus", prometheus.url, "--selector", selector)
            refused = invoke("--prometheus", prometheus.url, "--selector", 'job=~"("')

    assert as_json.exit_code == 0, as_json.output
    review = json.loads(as_json.stdout)
    tiers = {row["name"]: row for row in review["tiers"]}
    free, calm = tiers["free"], tiers["calm"]
    assert (free["requests"], free["blocked"], free["would_refuse"]) == (6, 1, 1)
    assert free["staged"] == {"enforced": 3, "shadow": 3, "would_refuse": 1}
    assert [q["quota"] for q in free["quotas"]] == ["tenant"]
    assert free["cost_needed"] == 30
    # 2 of 6 refused, each 20 points short of 70: 90 / 70 is in the bucket up to 1.5.
    assert 1.25 < free["capacity_for_p99"] <= 1.5
    assert (calm["requests"], calm["would_refuse"], calm["staged"]) == (3, 1, None)
    tenants = {row["name"]: row for row in review["tenants"]}
    assert (tenants[outside]["would_refuse"], tenants[inside]["blocked"]) == (1, 1)
    assert tenants[outside]["quotas"][0]["quota"] == "tenant"
    assert tenants["observed"]["would_refuse"] == 1
    fields = {row["name"]: row for row in review["root_fields"]}
    assert fields["Query.products"]["would_refuse"] == 2
    assert {row["name"] for row in review["operations"]} == {"Dear"}
    assert review["candidate"]["available"] is False
    assert as_text.exit_code == 0, as_text.output
    assert "counts: increase() over 24h" in as_text.stdout
    assert "no quotaql_candidate_would_refuse_total series" in as_text.stdout
    assert refused.exit_code == 2
    assert refused.stderr.startswith(f"error: {prometheus.url} refused")
    assert len(refused.stderr.splitlines()) == 1
