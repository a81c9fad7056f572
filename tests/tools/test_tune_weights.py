"""``quotaql tune --weights``: field weights from the resolver time the servers measured, robust
to a few subjects; ``--candidate`` writes the proposal to the candidate file.

End to end: a real uvicorn serving a Strawberry API with a slow resolver (60 ms) and a fast
one (6 ms), every operation sampled; a real Prometheus scrapes it; ``tune --weights
--prometheus`` proposes the slow field about ten times the fast one's weight.

The attack: two subjects make ``Query.slow`` look 100 times slower (many calls of a second
each); the proposal does not move, while the same slowness seen by every honest subject
moves it.
"""

from __future__ import annotations

import asyncio
import re
import time
import tomllib
from typing import TYPE_CHECKING, Any

import httpx
import strawberry
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.cli import app as cli
from quotaql.gate.timing import Timing
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.plugin import CostLimiter
from tests.support.app_servers import UvicornServer
from tests.support.servers import PrometheusServer, scrape_config

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

JOB = "quotaql-weights"
SLOW_SERIES = f'{{job="{JOB}", coordinate="Query.slow"}}'  # the series waited for


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


# -- the end-to-end proof --------------------------------------------------------------------


@strawberry.type
class Query:
    @strawberry.field
    async def slow(self) -> int:
        await asyncio.sleep(0.06)
        return 1

    @strawberry.field
    async def fast(self) -> int:
        await asyncio.sleep(0.006)
        return 2


E2E_TOML = """\
[cost]
tuning_sample = 1.0

[identity]
trusted_proxies = ["127.0.0.1/32"]

[tiers.free]
capacity = 1000000
refill_per_second = 100000
"""
ADDRESSES = [f"198.51.{i}.10" for i in range(12)]  # twelve networks: twelve subjects
QUERIES_EACH = 4


def test_a_slow_resolver_gets_about_ten_times_a_fast_ones_weight_through_a_real_prometheus(
    tmp_path: Path,
) -> None:
    config = tmp_path / "quotaql.toml"
    config.write_text(E2E_TOML, encoding="utf-8")
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = CostLimiter.from_config(config, metrics=metrics)
    graphql = GraphQL(strawberry.Schema(query=Query, extensions=[limiter]))
    app = Starlette(routes=[Mount("/metrics", metrics_app(registry)), Mount("/", graphql)])
    with UvicornServer(app) as server:
        scrape = scrape_config(JOB, server.url.removeprefix("http://"), metrics_path="/metrics/")
        with (
            PrometheusServer(scrape) as prometheus,
            httpx.Client(base_url=server.url, timeout=10) as client,
        ):
            for _ in range(QUERIES_EACH):
                for address in ADDRESSES:
                    response = client.post(
                        "/graphql",
                        json={"query": "{ slow fast }"},
                        headers={"X-Forwarded-For": address},
                    )
                    assert response.json()["data"] == {"slow": 1, "fast": 2}, response.text
            metrics.flush(final=True)  # the subjects' minute is over (as when a worker stops)
            calls = QUERIES_EACH * len(ADDRESSES)
            eventually(
                lambda: (
                    prometheus.holds(f"sum({names.RESOLVER_SECONDS}_count{SLOW_SERIES})", calls)
                    and prometheus.holds(
                        f"sum({names.RESOLVER_SUBJECT_SECONDS}_count{SLOW_SERIES})", len(ADDRESSES)
                    )
                ),
                30,
                "the calls and their subjects scraped",
            )
            result = invoke(
                "--config", str(config), "--prometheus", prometheus.url,
                "--selector", f'job="{JOB}"', "--weights", "--reference", "Query.fast",
                "--min-calls", "20",
            )  # fmt: skip

    assert result.exit_code == 0, result.output
    report = report_lines(result.stdout)
    change = next((line for line in report if line.startswith("Query.slow: weight")), None)
    assert change is not None, report
    found = re.fullmatch(r"Query\.slow: weight the schema's -> ([0-9.]+) .*", change)
    assert found is not None, change
    # 60 ms / 6 ms, give or take the event loop's latency (a busy machine adds to both).
    assert 4 <= float(found.group(1)) <= 12, report
    assert "  calls timed: 48, " in report[report.index(change) + 1]
    assert f'+"Query.slow" = {{ weight = {found.group(1)} }}' in result.stdout  # the diff
    assert config.read_text(encoding="utf-8") == E2E_TOML  # without --write


# -- the proposal, from the metrics of real registries -----------------------------------------

TOML = """\
# The shop.
[cost]
candidate = "quotaql.candidate.toml"
max_depth = 8

[cost.weights]
"Query.slow" = 10  # a database query
"""
HONEST = [f"key:tenant-{i}" for i in range(40)]
ATTACKERS = ["ip:203.0.1.66", "ip:203.0.2.66"]


def timed(metrics: PrometheusMetrics, subject: str, coordinate: str, seconds: float,
          calls: int) -> None:  # fmt: skip
    """One operation of ``subject`` calling ``coordinate``'s resolver ``calls`` times, each
    taking ``seconds``: what the gate records of a sampled operation."""
    tally = Timing()
    for _ in range(calls):
        tally.add(seconds)
    metrics.resolvers.record({coordinate: tally}, subject)


def honest(metrics: PrometheusMetrics, slow: float = 0.01) -> None:
    for subject in HONEST:
        for _ in range(5):
            timed(metrics, subject, "Query.fast", 0.001, 2)
            timed(metrics, subject, "Query.slow", slow, 2)


def dump_of(traffic: Callable[[PrometheusMetrics], None], tmp_path: Path) -> Path:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    traffic(metrics)
    metrics.flush(final=True)
    path = tmp_path / "metrics.txt"
    path.write_bytes(generate_latest(registry))
    return path


def shop(tmp_path: Path, text: str = TOML) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_two_subjects_making_a_field_look_100_times_slower_do_not_move_its_weight(
    tmp_path: Path,
) -> None:
    def attacked(metrics: PrometheusMetrics) -> None:
        honest(metrics)
        for subject in ATTACKERS:  # 100 x 10 ms, a thousand calls each
            for _ in range(10):
                timed(metrics, subject, "Query.slow", 1.0, 100)

    config = shop(tmp_path)
    result = invoke("--config", str(config), "--metrics", str(dump_of(attacked, tmp_path)),
                    "--weights")  # fmt: skip
    assert result.exit_code == 0, result.output
    report = report_lines(result.stdout)
    assert not any(line.startswith("Query.slow: weight") for line in report), report
    # By its calls alone (2,400 of them, 2,000 of the attackers') a call takes 835 ms: the
    # weight would have gone 10 -> 830. The middle half of its 42 subjects saw 5 to 10 ms.
    assert (
        "  Query.slow: its calls take 835 ms each on average, outside what the middle half of"
        " its subjects saw (5 ms to 10 ms per call, p25 to p75 of 42 subject-minutes): a few"
        " subjects' calls weigh too much in it; no weight proposed"
    ) in report
    assert "+++" not in result.stdout

    # Nor do two subjects making it look 100 times faster (to make it cheap).
    def cheapened(metrics: PrometheusMetrics) -> None:
        honest(metrics)
        for subject in ATTACKERS:
            for _ in range(10):
                timed(metrics, subject, "Query.slow", 0.0001, 100)

    dump = dump_of(cheapened, tmp_path)
    cheap = invoke("--config", str(config), "--metrics", str(dump), "--weights")
    assert cheap.exit_code == 0, cheap.output
    lines = report_lines(cheap.stdout)
    assert not any(line.startswith("Query.slow: weight") for line in lines), lines
    assert any(line.startswith("  Query.slow: its calls take 1.75 ms each") for line in lines)

    # The same slowness seen by every honest subject moves it: 1 s against 1 ms, 10 -> 1000.
    dump = dump_of(lambda metrics: honest(metrics, slow=1.0), tmp_path)
    moved = invoke("--config", str(config), "--metrics", str(dump), "--weights")
    assert moved.exit_code == 0, moved.output
    lines = report_lines(moved.stdout)
    assert "Query.slow: weight 10 -> 1000 (its calls take 1,000 times the reference's)" in lines, (
        lines
    )
    assert "  reference Query.fast: weight 1, 1 ms per call (400 calls)" in lines
    assert '-"Query.slow" = 10  # a database query' in moved.stdout
    assert '+"Query.slow" = 1000  # a database query' in moved.stdout


def test_a_weight_is_lowered_by_at_most_max_decrease_and_needs_enough_subjects(
    tmp_path: Path,
) -> None:
    config = shop(tmp_path)
    dump = dump_of(lambda metrics: honest(metrics, slow=0.001), tmp_path)  # as fast as fast
    halved = invoke("--config", str(config), "--metrics", str(dump), "--weights", "--write")
    assert halved.exit_code == 0, halved.output
    lines = report_lines(halved.stdout)
    assert "Query.slow: weight 10 -> 5 (its calls take 1 times the reference's)" in lines
    assert (
        "  lowered by at most a factor 2: to 5, where the evidence says 1"
        " (--allow-decrease lowers it all the way)"
    ) in lines
    assert tomllib.loads(config.read_text("utf-8"))["cost"]["weights"]["Query.slow"] == 5

    few = dump_of(lambda metrics: timed(metrics, "key:one", "Query.fast", 0.001, 500), tmp_path)
    alone = invoke("--config", str(config), "--metrics", str(few), "--weights")
    assert alone.exit_code == 0, alone.output
    assert (
        "  Query.fast: 1 subject-minutes timed (quotaql_resolver_subject_seconds), fewer than"
        " 10: a weight is proposed only from what many subjects saw"
    ) in report_lines(alone.stdout)


def test_candidate_writes_the_proposal_to_the_candidate_file_not_the_live_one(
    tmp_path: Path,
) -> None:
    config = shop(tmp_path)
    dump = dump_of(lambda metrics: honest(metrics, slow=0.05), tmp_path)  # 50 x fast
    result = invoke("--config", str(config), "--metrics", str(dump), "--weights", "--candidate")
    assert result.exit_code == 0, result.output
    assert config.read_text("utf-8") == TOML  # the live file is untouched
    candidate = tmp_path / "quotaql.candidate.toml"
    data = tomllib.loads(candidate.read_text("utf-8"))
    assert data == {"cost": {"max_depth": 8, "weights": {"Query.slow": 50}}}
    assert f"quotaql tune: {candidate}, from" in report_lines(result.stdout)[0]
    assert "wrote the candidate" in result.stderr

    # Run again with new evidence: the candidate is edited where it stands.
    dump = dump_of(lambda metrics: honest(metrics, slow=0.2), tmp_path)
    again = invoke("--config", str(config), "--metrics", str(dump), "--weights", "--candidate")
    assert again.exit_code == 0, again.output
    assert tomllib.loads(candidate.read_text("utf-8"))["cost"]["weights"]["Query.slow"] == 200
    assert config.read_text("utf-8") == TOML


def test_candidate_and_reference_errors_are_clear(tmp_path: Path) -> None:
    config = shop(tmp_path, '[cost.weights]\n"Query.slow" = 10\n')
    dump = str(dump_of(honest, tmp_path))
    nameless = invoke("--config", str(config), "--metrics", dump, "--weights", "--candidate")
    assert nameless.exit_code == 2
    assert (
        f'error: {config}: [cost] names no candidate: add candidate = "quotaql.candidate.toml"'
    ) in nameless.stderr
    both = invoke("--config", str(config), "--metrics", dump, "--candidate", "--write")
    assert both.exit_code == 2
    assert "--candidate writes the candidate file" in both.stderr
    unknown = invoke("--config", str(config), "--metrics", dump, "--weights",
                     "--reference", "Query.nothing")  # fmt: skip
    assert unknown.exit_code == 2
    assert "error: --reference Query.nothing: no resolver time measured for it" in unknown.stderr
    bad = invoke("--config", str(config), "--metrics", dump, "--weights", "--reference", "x{}")
    assert bad.exit_code == 2
    assert "is not a field coordinate" in bad.stderr

    broken = shop(tmp_path, '[cost]\ncandidate = "broken.toml"\n')
    (tmp_path / "broken.toml").write_text("[cost\n", encoding="utf-8")
    refused = invoke("--config", str(broken), "--metrics", dump, "--weights", "--candidate")
    assert refused.exit_code == 2
    assert "broken.toml: the candidate is not a TOML file" in refused.stderr
