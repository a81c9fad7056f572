"""``quotaql demo``, run as a user runs it: a subprocess, its output, its server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import httpx

from quotaql.demo.run import SCRAPE
from tests.support.servers import free_port

if TYPE_CHECKING:
    from tests.support.servers import RedisServer

QUOTAQL = [sys.executable, "-m", "quotaql.cli"]
SUMMARY = re.compile(
    r"^(demo-[a-z]+): (\d+) requests, (\d+) allowed, (\d+) blocked, (\d+) warned", re.MULTILINE
)


def run_demo(*args: str) -> dict[str, tuple[int, int, int, int]]:
    done = subprocess.run(
        [*QUOTAQL, "demo", "--no-serve", "--duration", "5", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = {
        name: (int(r), int(a), int(b), int(w)) for name, r, a, b, w in SUMMARY.findall(done.stdout)
    }
    assert set(found) == {"demo-polite", "demo-integration", "demo-scraper"}, done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    return found


def check_story(found: dict[str, tuple[int, int, int, int]]) -> None:
    polite, scraper = found["demo-polite"], found["demo-scraper"]
    assert polite[0] >= 5
    assert polite[2] == 0  # the polite free user is never blocked
    assert polite[3] == 0  # nor warned: it stays far above a fifth of its budget
    assert scraper[2] >= 1  # the scraper is
    assert scraper[1] < scraper[0] / 2  # most of its requests are refused
    # Each scrape that runs (280 of 300) leaves it below a fifth: warned before the wall.
    assert scraper[3] >= 1
    assert scraper[3] <= scraper[1]  # only an answer that ran warns
    assert sum(found["demo-integration"][1:3]) == found["demo-integration"][0]


def test_demo_on_memory() -> None:
    check_story(run_demo())


def test_demo_on_redis(fresh_redis_server: RedisServer) -> None:
    check_story(run_demo("--redis", fresh_redis_server.url))
    with fresh_redis_server.client() as client:  # the budgets really were in Redis
        assert any(key.startswith(b"quotaql:{t:key:demo-scraper}") for key in client.keys("*"))


def test_demo_keeps_serving_and_shows_a_429() -> None:
    port = free_port()
    process = subprocess.Popen(
        [*QUOTAQL, "demo", "--duration", "1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not any("curl -i" in line for line in lines):
            line = process.stdout.readline()
            assert line or process.poll() is None, "".join(lines)
            lines.append(line)
            assert time.monotonic() < deadline, "".join(lines)
        url = f"http://127.0.0.1:{port}"
        headers = {"X-API-Key": "curl-user"}
        statuses = []
        for _ in range(2):  # as the printed curl command: the second call is refused
            response = httpx.post(f"{url}/graphql", json={"query": SCRAPE}, headers=headers)
            statuses.append(response.status_code)
        assert statuses == [200, 429]
        assert response.headers["X-Cost-Estimated"] == "280"  # cost_headers: the estimate
        assert "X-Cost-Actual" not in response.headers  # a refusal ran nothing
        assert int(response.headers["Retry-After"]) >= 1
        assert response.headers["RateLimit-Policy"].startswith('"tenant";q=300')
        # /metrics (what a default Prometheus job scrapes) and /metrics/ both serve the
        # Prometheus text format, not GraphiQL
        for path in ("/metrics", "/metrics/"):
            scraped = httpx.get(f"{url}{path}", headers={"Accept": "text/html"})
            assert scraped.status_code == 200, path
            assert scraped.headers["Content-Type"].startswith("text/plain"), path
            assert 'quotaql_requests_total{decision="blocked"' in scraped.text, path
            assert "<html" not in scraped.text.lower(), path
        printed = "".join(lines)
        assert f"metrics       {url}/metrics\n" in printed
        assert f"curl -i {url}/graphql -H 'X-API-Key: demo-scraper'" in printed
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
    assert process.returncode == 0


def test_loadgen_counts_the_warned_answers_apart() -> None:
    from rich.console import Console

    from quotaql.demo.loadgen import run_load
    from quotaql.demo.shop import create_app
    from tests.support.app_servers import UvicornServer

    console = Console(record=True, width=120)
    with UvicornServer(create_app()) as server:
        result = run_load(
            server.url, ["demo-integration"], duration=10, concurrency=1, max_requests=18,
            console=console,
        )  # fmt: skip
    assert result.requests == 18
    # Its third export (30 points each, 90 of the ExportOrders quota's 100, refilled 2 a
    # second) leaves less than a fifth of that quota: its answer warns.
    assert 1 <= result.warned["demo-integration"] <= result.statuses["demo-integration"][200]
    assert "warned" in console.export_text()
