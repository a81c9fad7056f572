"""``quotaql tune`` is robust to a few subjects: many short lists from a few clients do not
lower a size, a tune run at most halves one, and the evidence says how many subjects the
lists came from.

The attack, end to end: a real uvicorn serving the API (Strawberry, and Ariadne) records the
tuning metrics of every operation; ten addresses send queries of 50 aliased empty
``Customer.orders`` lists against five honest addresses whose lists hold 40 orders; a real
Prometheus scrapes the server, and ``quotaql tune --prometheus`` reads it. By the lists alone
(2,000 empty against 20 of 40: the issue's 10,000 against 100, scaled down five times to
keep the test short) p99 is 0, and tune used to propose ``assumed_size`` 50 -> 0: a
400-order query would then be priced 1 point.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import strawberry
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.cli import app as cli
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.instrumentation.subjects import subject_class
from quotaql.plugin import CostLimiter
from tests.support.app_servers import UvicornServer
from tests.support.servers import PrometheusServer, scrape_config

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

TOML = """
[cost]
tuning_sample = 1.0

[cost.weights]
"Customer.orders" = { assumed_size = 50 }

[identity]
trusted_proxies = ["127.0.0.1/32"]

[tiers.free]
capacity = 1000000
refill_per_second = 100000
"""
HONEST_ORDERS = 40
ALIASES = 50
ATTACKERS = [f"203.0.{i}.66" for i in range(10)]  # ten networks: ten subjects
HONEST = [f"198.51.{i}.10" for i in range(5)]  # five honest networks
QUERIES_EACH = 4
HONEST_QUERY = '{ customer(id: "c1") { orders { id } } }'
ATTACK_QUERY = "{ " + " ".join(f'a{i}: customer(id: "empty") {{ orders {{ id }} }}' for i in range(ALIASES)) + " }"  # fmt: skip
JOB = "quotaql-shop"
ORDERS_SERIES = f'{{job="{JOB}", coordinate="Customer.orders"}}'  # the series waited for


def orders_of(customer: str) -> int:
    return 0 if customer == "empty" else HONEST_ORDERS


# -- the API, on Strawberry and on Ariadne ---------------------------------------------------


@strawberry.type
class Order:
    id: strawberry.ID


@strawberry.type
class Customer:
    id: strawberry.ID

    @strawberry.field
    def orders(self) -> list[Order]:
        return [Order(id=strawberry.ID(str(n))) for n in range(orders_of(self.id))]


@strawberry.type
class Query:
    @strawberry.field
    def customer(self, id: strawberry.ID) -> Customer:
        return Customer(id=id)


def strawberry_app(config: Path, metrics: PrometheusMetrics) -> Any:
    limiter = CostLimiter.from_config(config, metrics=metrics)
    return GraphQL(strawberry.Schema(query=Query, extensions=[limiter]))


SDL = (
    COST_DIRECTIVES_SDL
    + """
type Query { customer(id: ID!): Customer! }
type Customer { id: ID! orders: [Order!]! }
type Order { id: ID! }
"""
)


def ariadne_app(config: Path, metrics: PrometheusMetrics) -> Any:
    from ariadne import ObjectType, QueryType, make_executable_schema

    from quotaql.ariadne import CostLimiter

    query, customer = QueryType(), ObjectType("Customer")
    query.set_field("customer", lambda _, info, id: {"id": id})
    customer.set_field(
        "orders", lambda obj, info: [{"id": str(n)} for n in range(orders_of(obj["id"]))]
    )
    schema = make_executable_schema(SDL, query, customer)
    return CostLimiter.from_config(config, metrics=metrics).asgi(schema)


APPS: dict[str, Callable[[Path, PrometheusMetrics], Any]] = {
    "strawberry": strawberry_app,
    "ariadne": ariadne_app,
}


# -- helpers -------------------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["tune", *args], catch_exceptions=False, prog_name="quotaql")


def report_lines(output: str) -> list[str]:
    return [line[2:] for line in output.splitlines() if line.startswith("# ")]


def eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.25)


def send(client: httpx.Client, query: str, address: str) -> None:
    response = client.post("/graphql", json={"query": query}, headers={"X-Forwarded-For": address})
    assert response.status_code == 200, response.text
    assert "errors" not in response.json(), response.text


# -- the attack, end to end ----------------------------------------------------------------


@pytest.mark.parametrize("framework", list(APPS))
def test_ten_addresses_of_empty_lists_do_not_lower_a_size_through_a_real_prometheus(
    framework: str, tmp_path: Path
) -> None:
    config = tmp_path / "quotaql.toml"
    config.write_text(TOML, encoding="utf-8")
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    graphql = APPS[framework](config, metrics)
    app = Starlette(routes=[Mount("/metrics", metrics_app(registry)), Mount("/", graphql)])
    with UvicornServer(app) as server:
        scrape = scrape_config(JOB, server.url.removeprefix("http://"), metrics_path="/metrics/")
        with (
            PrometheusServer(scrape) as prometheus,
            httpx.Client(base_url=server.url, timeout=10) as client,
        ):
            for _ in range(QUERIES_EACH):
                for address in ATTACKERS:
                    send(client, ATTACK_QUERY, address)
                for address in HONEST:
                    send(client, HONEST_QUERY, address)
            metrics.flush(final=True)  # the subjects' minute is over (as when a worker stops)
            lists = QUERIES_EACH * (len(ATTACKERS) * ALIASES + len(HONEST))
            eventually(
                lambda: (
                    prometheus.holds(
                        f"sum({names.LIST_RETURNED_ITEMS}_count{ORDERS_SERIES})", lists
                    )
                    and prometheus.holds(
                        f"sum({names.LIST_SUBJECT_MAX_ITEMS}_count{ORDERS_SERIES})",
                        len(ATTACKERS) + len(HONEST),
                    )
                ),
                30,
                "the traffic and its subjects scraped",
            )
            source = ("--config", str(config), "--prometheus", prometheus.url)
            selector = ("--selector", f'job="{JOB}"')
            result = invoke(*source, *selector)
            all_the_way = invoke(*source, *selector, "--allow-decrease")

    assert result.exit_code == 0, result.output
    report = report_lines(result.stdout)
    assert not any(line.startswith("Customer.orders: assumed_size") for line in report), report
    assert "no change proposed" in report
    # The lists alone say 0; the subjects (15, each counted once) say 40, and name themselves.
    assert (
        "  Customer.orders: its lists alone say 0 items (assumed 50), but p99 of its subjects'"
        " longest lists is 40 (15 subject-minutes): many short lists of a few subjects do not"
        " lower a size; it stays"
    ) in report
    assert "+++" not in result.stdout  # no diff
    assert all_the_way.exit_code == 0, all_the_way.output
    assert "+++" not in all_the_way.stdout  # --allow-decrease lifts the factor, not the subjects
    assert config.read_text(encoding="utf-8") == TOML


# -- what the metrics keep, and what tune makes of them --------------------------------------


def dump_of(traffic: Callable[[PrometheusMetrics], None], tmp_path: Path) -> Path:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    traffic(metrics)
    metrics.flush(final=True)
    path = tmp_path / "metrics.txt"
    path.write_bytes(generate_latest(registry))
    return path


def orders_config(tmp_path: Path) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text('[cost.weights]\n"Customer.orders" = { assumed_size = 50 }\n', "utf-8")
    return path


def test_more_subjects_than_honest_ones_a_hundred_to_one_still_only_halve_a_size(
    tmp_path: Path,
) -> None:
    """Past the subjects' quantile (200 attacking networks against one honest client) the
    size is still lowered by a factor 2 at most, and the evidence says why."""

    def traffic(metrics: PrometheusMetrics) -> None:
        for i in range(200):
            metrics.list_sizes([("Customer.orders", 50, 0, False)] * 50, f"ip:10.{i}.0.1")
        for _ in range(100):
            metrics.list_sizes([("Customer.orders", 50, 40, False)], "key:honest")

    config = orders_config(tmp_path)
    metrics_file = dump_of(traffic, tmp_path)

    result = invoke("--config", str(config), "--metrics", str(metrics_file))
    all_the_way = invoke(
        "--config", str(config), "--metrics", str(metrics_file), "--allow-decrease"
    )
    thrice = invoke("--config", str(config), "--metrics", str(metrics_file), "--max-decrease", "3")

    report = report_lines(result.stdout)
    assert "Customer.orders: assumed_size 50 -> 25 (its lists were much shorter than assumed)" in (
        report
    )
    assert (
        "  subjects: 201 subject-minutes (each subject, an address by its network, counts once"
        " a minute); their longest lists: p50 0, p99 0"
    ) in report
    assert (
        "  lowered by at most a factor 2: to 25, where the evidence says 0 (--allow-decrease"
        " lowers it all the way)"
    ) in report
    assert '+"Customer.orders" = { assumed_size = 25 }' in result.stdout
    assert '+"Customer.orders" = { assumed_size = 0 }' in all_the_way.stdout
    assert '+"Customer.orders" = { assumed_size = 17 }' in thrice.stdout  # ceil(50 / 3)


def test_addresses_of_one_network_are_one_subject(tmp_path: Path) -> None:
    """Ten addresses of one /24 (and sixty-four /64s of one /48) count as one subject each:
    with three honest clients they are two of five, and p99 of the five is 40."""

    def traffic(metrics: PrometheusMetrics) -> None:
        empty = [("Customer.orders", 50, 0, False)] * 50
        for _ in range(5):  # 18,500 empty lists against 120 of 40: p99 of the lists is 0
            for i in range(10):
                metrics.list_sizes(empty, f"ip:203.0.113.{i}")
            for i in range(64):
                metrics.list_sizes(empty, f"ip:2001:db8:7:{i:x}::/64")
        for tenant in ("a", "b", "c"):
            metrics.list_sizes([("Customer.orders", 50, 40, False)] * 40, f"key:{tenant}")

    result = invoke(
        "--config", str(orders_config(tmp_path)), "--metrics", str(dump_of(traffic, tmp_path))
    )

    assert "+++" not in result.stdout
    assert any("(5 subject-minutes)" in line for line in report_lines(result.stdout))
    assert subject_class("ip:203.0.113.9") == "ip:203.0.113.0/24"
    assert subject_class("ip:2001:db8:7:3f::/64") == "ip:2001:db8:7::/48"
    assert subject_class("key:acme") == "key:acme"


def test_lowering_needs_the_subjects_and_raising_does_not(tmp_path: Path) -> None:
    """Metrics without subjects (a library call without one, servers of an older quotaql):
    no size goes down, a size that is too small still goes up."""

    def traffic(metrics: PrometheusMetrics) -> None:
        for _ in range(200):
            lists = [("Customer.orders", 50, 2, False), ("Order.lines", 10, 30, False)]
            metrics.list_sizes(lists)

    result = invoke(
        "--config", str(orders_config(tmp_path)), "--metrics", str(dump_of(traffic, tmp_path))
    )

    report = report_lines(result.stdout)
    assert '+"Order.lines" = { assumed_size = 30 }' in result.stdout
    assert "-" + '"Customer.orders"' not in result.stdout  # its line is context, unchanged
    assert (
        "  Customer.orders: its lists say 2 items (assumed 50), but no subject was counted"
        " (quotaql_list_subject_max_items): a size is lowered only as far as most subjects"
        " allow, so it stays (servers of an older quotaql?)"
    ) in report
    assert "  subjects: none counted (quotaql_list_subject_max_items)" in report


def test_a_flood_of_subjects_keeps_a_bounded_uniform_sample() -> None:
    """20,000 subjects in one period: the process keeps at most twice LIST_SUBJECTS_KEPT of
    them, observes LIST_SUBJECTS_KEPT, and the sample is not the first ones to arrive."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    for i in range(20_000):
        size = 0 if i < 10_000 else 40  # the first half all empty
        metrics.list_sizes([("Customer.orders", 50, size, False)], f"key:t{i}")
        kept = metrics._lists["Customer.orders"].subjects.maxima
        assert len(kept) < 2 * names.LIST_SUBJECTS_KEPT
    metrics.flush(final=True)

    def sample(le: str) -> float | None:
        return registry.get_sample_value(
            f"{names.LIST_SUBJECT_MAX_ITEMS}_bucket", {"coordinate": "Customer.orders", "le": le}
        )

    assert sample("+Inf") == names.LIST_SUBJECTS_KEPT
    empty = sample("0.0")
    assert empty is not None
    # Half of a uniform sample of 256 (binomial: sd 8): far from all, far from none.
    assert 0.4 * names.LIST_SUBJECTS_KEPT < empty < 0.6 * names.LIST_SUBJECTS_KEPT


def test_a_subject_counts_once_a_period_by_its_longest_list() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, subject_period=3600)
    for items in (3, 17, 5):
        metrics.list_sizes([("Customer.orders", 50, items, False)] * 10, "key:a")
    metrics.list_sizes([("Customer.orders", 50, 1, False)], "key:b")
    metrics.flush()  # the hour is not over: nothing yet
    labels = {"coordinate": "Customer.orders"}
    count = f"{names.LIST_SUBJECT_MAX_ITEMS}_count"
    assert registry.get_sample_value(count, labels) == 0
    metrics.flush(final=True)
    assert registry.get_sample_value(count, labels) == 2
    assert registry.get_sample_value(f"{names.LIST_SUBJECT_MAX_ITEMS}_sum", labels) == 18
    metrics.list_sizes([("Customer.orders", 50, 2, False)], "key:a")  # a new period
    metrics.flush(final=True)
    assert registry.get_sample_value(count, labels) == 3


def test_a_size_goes_down_no_lower_than_most_subjects_longest_lists(tmp_path: Path) -> None:
    """Three clients send a thousand empty lists each; thirty others lists of 1 to 5. By the
    lists p99 is 0; by the subjects it is 5: lowered to 5 (all the way with
    --allow-decrease), and the evidence says why not to 0."""

    def traffic(metrics: PrometheusMetrics) -> None:
        for i in range(3):
            for _ in range(20):
                metrics.list_sizes([("Customer.orders", 50, 0, False)] * 50, f"key:bulk-{i}")
        for i in range(30):
            metrics.list_sizes([("Customer.orders", 50, 1 + i % 5, False)], f"key:t{i}")

    result = invoke(
        "--config",
        str(orders_config(tmp_path)),
        "--metrics",
        str(dump_of(traffic, tmp_path)),
        "--allow-decrease",
    )

    report = report_lines(result.stdout)
    assert "Customer.orders: assumed_size 50 -> 5 (its lists were much shorter than assumed)" in (
        report
    )
    assert (
        "  lowered no further than p99 of the subjects' longest lists, 5 (33 subject-minutes;"
        " the lists alone say 0)"
    ) in report
    assert '+"Customer.orders" = { assumed_size = 5 }' in result.stdout
