"""docs/production.md's app (examples/production) run as the page says: FastAPI + Strawberry +
Redis under ``uvicorn --workers 2``, multiprocess metrics, the logging recipe, a hot reload
that every worker applies in time, and a real Prometheus scraping it with the generated rules."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.docs import ROOT
from tests.support.servers import PrometheusServer, bind_loopback, spawn, terminate
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis

    from tests.support.servers import RedisServer

EXAMPLE = ROOT / "examples" / "production"
PAGE = ROOT / "docs" / "production.md"
KEYS = {"sk_live_acme": "acme", "sk_live_globex": "globex"}
RELOAD_S = 0.5  # the test's reload_interval: an edit is applied within two looks
QUERY = "{ products(first: 10) { name reviews(first: 2) { stars } } }"
STARTUP_S = 60.0


class Production:
    """The example app under ``uvicorn --workers 2`` (its own process group), on a socket
    bound here; its stdout (the JSON log lines) in a file."""

    def __init__(self, directory: Path, redis_url: str) -> None:
        self.directory = directory
        self.config = directory / "quotaql.toml"
        text = (EXAMPLE / "quotaql.toml").read_text(encoding="utf-8")
        self.config.write_text(
            text.replace("reload_interval = 2.0", f"reload_interval = {RELOAD_S}"), "utf-8"
        )
        self.metrics_dir = directory / "metrics"
        self.metrics_dir.mkdir()
        self.log = directory / "stdout.log"
        self._socket = bind_loopback()
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "QUOTAQL_CONFIG": str(self.config),
            "QUOTAQL_API_KEYS": json.dumps(KEYS),
            "PROMETHEUS_MULTIPROC_DIR": str(self.metrics_dir),
        }
        fd = self._socket.fileno()
        with self.log.open("wb") as out:
            self.process = spawn(
                [sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(EXAMPLE),
                 "--fd", str(fd), "--workers", "2", "--log-config",
                 str(EXAMPLE / "logging.yaml"), "--no-access-log"],
                cwd=directory, env=env, pass_fds=(fd,), stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"uvicorn exited: {self.output()}")
            try:
                if self.post("{ __typename }").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"uvicorn did not start: {self.output()}")

    def post(self, query: str, key: str | None = None, **headers: str) -> httpx.Response:
        if key is not None:
            headers["X-API-Key"] = key
        # A new connection each time: the kernel spreads them over the workers.
        return httpx.post(f"{self.url}/graphql", json={"query": query}, headers=headers,
                          timeout=10)  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.output().splitlines() if line.startswith("{")]

    def metrics(self) -> dict[str, list[Any]]:
        text = httpx.get(f"{self.url}/metrics/", timeout=10).text
        return {family.name: family.samples for family in text_string_to_metric_families(text)}

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # uvicorn and its workers, by group
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        terminate(self.process)
        self._socket.close()
        return int(self.process.returncode or 0)


@pytest.fixture(scope="module")
def production(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[Production]:
    app = Production(tmp_path_factory.mktemp("production"), redis_server.url)
    try:
        app.wait_ready()
        yield app
    finally:
        app.stop()


def test_the_page_shows_the_files_the_test_runs() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for name, fence in (("app.py", "python file:"), ("quotaql.toml", "toml file:")):
        match = re.search(
            rf"^```{fence}examples/production/{re.escape(name)}\n(.*?)^```", page, re.S | re.M
        )
        assert match is not None, name
        assert match.group(1) == (EXAMPLE / name).read_text(encoding="utf-8"), name
    assert (EXAMPLE / "logging.yaml").read_text(encoding="utf-8") in page


def test_allowed_refused_and_named(production: Production, redis_client: redis.Redis) -> None:
    ok = production.post(QUERY, "sk_live_acme")
    assert ok.status_code == 200
    cost = ok.json()["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 40  # 10 products x (2 + 2 reviews x 1)
    assert isinstance(cost["throttleStatus"]["currentlyAvailable"], int)
    assert ok.headers["RateLimit-Policy"] == '"tenant";q=3000;w=10'
    # 300 points, 40 each (all used: no refund), refilled at 30 a second: on any
    # machine answering under 1.3 s a request, the first seven pass and a later one is refused.
    answers = [production.post(QUERY, "sk_live_globex") for _ in range(12)]
    assert [answer.status_code for answer in answers[:7]] == [200] * 7
    refused = next((answer for answer in answers if answer.status_code == 429), None)
    assert refused is not None, [answer.status_code for answer in answers]
    assert int(refused.headers["Retry-After"]) >= 1
    too_big = httpx.post(f"{production.url}/graphql", content=b"{" + b" " * 70_000 + b"}",
                         headers={"content-type": "application/json"}, timeout=10)  # fmt: skip
    assert too_big.status_code == 413


def test_the_logs_are_json_lines_naming_the_tenant(production: Production) -> None:
    for _ in range(15):
        production.post(QUERY, "sk_live_globex")
    assert eventually(
        lambda: any(r.get("quotaql_event") == "blocked" for r in production.records()),
        10,
        every=0.05,
    )
    blocked = next(r for r in production.records() if r.get("quotaql_event") == "blocked")
    assert (blocked["tenant"], blocked["tier"], blocked["code"]) == (
        "globex",
        "free",
        "RATE_LIMITED",
    )
    assert "of tenant globex (tier free)" in blocked["message"]
    assert "sk_live" not in production.output()  # keys never reach the logs


def test_every_worker_applies_an_edit_within_two_looks(production: Production) -> None:
    before = production.post(QUERY, "sk_live_acme").json()["extensions"]["cost"]
    assert before["requestedQueryCost"] == 40
    text = production.config.read_text(encoding="utf-8")
    edited = production.directory / "quotaql.toml.new"
    edited.write_text(text.replace('"Product" = 2', '"Product" = 5'), encoding="utf-8")
    edited.replace(production.config)  # by atomic rename, as the page says
    edit = time.monotonic()

    def reloaded() -> bool:
        lines = [r for r in production.records() if r.get("quotaql_event") == "config_reloaded"]
        return len(lines) >= 2  # one per worker, each in its own reload thread

    took = eventually(reloaded, 15, every=0.05)
    assert took is not None, production.output()
    assert took <= 2 * RELOAD_S + 2.0  # two looks, and a busy machine's scheduling
    costs = {production.post(QUERY, "sk_live_acme").json()["extensions"]["cost"]["requestedQueryCost"]
             for _ in range(30)}  # fmt: skip
    assert costs == {70}, f"{time.monotonic() - edit:.1f} s after the edit: {costs}"
    # What Prometheus sees: both workers (a series each, by pid) at generation 2, running
    # the file whose digest is the new one.
    families = production.metrics()
    generations = {s.labels["pid"]: s.value for s in families["quotaql_config_generation"]}
    assert len(generations) == 2
    assert set(generations.values()) == {2}
    digest = hashlib.sha256(production.config.read_bytes()).hexdigest()[:12]
    running = {(s.labels["pid"], s.labels["digest"]) for s in families["quotaql_config_info"]
               if s.value == 1}  # fmt: skip
    assert {d for _, d in running} == {digest}
    assert {pid for pid, _ in running} == set(generations)


def test_metrics_are_summed_over_the_workers_and_scraped_by_prometheus(
    production: Production,
) -> None:
    production.post(QUERY, "sk_live_acme")
    families = production.metrics()
    requests = families["quotaql_requests"]
    assert sum(s.value for s in requests if s.name == "quotaql_requests_total") >= 10
    tenants = {s.labels.get("tenant") for s in families["quotaql_tenant_requests"]}
    assert "acme" in tenants  # named: the key resolver's tenant
    alerts = subprocess.run(
        [str(Path(sys.executable).parent / "quotaql"), "alerts", "--out", str(production.directory)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert alerts.returncode == 0
    rules = (production.directory / "quotaql.rules.yml").read_text(encoding="utf-8")
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [quotaql.rules.yml]\n"
        "scrape_configs:\n"
        "  - job_name: graphql\n"
        "    metrics_path: /metrics/\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{production.port}']}}]\n"
    )
    with PrometheusServer(config, {"quotaql.rules.yml": rules}) as prometheus:
        assert eventually(lambda: bool(prometheus.query("quotaql_requests_total")), 30, every=0.05)
        groups = prometheus.api("rules")["groups"]
        assert sum(len(group["rules"]) for group in groups) >= 10
        (up,) = prometheus.query('up{job="graphql"}')
        assert up["value"][1] == "1"


def test_the_workers_stop_cleanly(tmp_path: Path, redis_server: RedisServer) -> None:
    app = Production(tmp_path, redis_server.url)
    try:
        app.wait_ready()
        app.post(QUERY, "sk_live_acme")
    finally:
        code = app.stop()
    assert code == 0, app.output()
    assert "Traceback" not in app.output()
