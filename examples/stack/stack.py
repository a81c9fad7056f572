"""A local stack from local binaries: Redis, the shop API on it, Prometheus with the rules.

    make stack                       # or: .venv/bin/python examples/stack/stack.py
    quotaql loadgen --url http://127.0.0.1:8000 --duration 60     # in another terminal

Everything listens on 127.0.0.1 (Redis on 6380, not the machine's 6379); every process is
stopped by its PID on Ctrl-C. ``--check`` starts the stack, drives a few seconds of load,
checks that Prometheus has quotaql's metrics and stops (what the test runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from quotaql.demo.loadgen import run_load

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "quotaql.rules.yml"


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        sys.exit(f"{name} not found: scripts/ensure-system-deps.sh installs it (as root)")
    return path


def _wait(url: str, what: str, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"{what} exited with status {process.returncode}")
        try:
            if httpx.get(url, timeout=1, follow_redirects=True).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    sys.exit(f"{what} did not answer at {url}")


class Stack:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.directory = Path(tempfile.mkdtemp(prefix="quotaql-stack-"))
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, command: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        log = (self.directory / f"{name}.log").open("wb")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, **kwargs)  # type: ignore[call-overload]
        log.close()
        self.processes.append((name, process))
        return process

    def up(self) -> None:
        args = self.args
        redis_dir = self.directory / "redis"
        redis_dir.mkdir()
        redis = self.start(
            "redis",
            [_binary("redis-server"), "--port", str(args.redis_port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(redis_dir)],
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while (
            subprocess.run(
                [_binary("redis-cli"), "-p", str(args.redis_port), "ping"],
                capture_output=True,
                check=False,
            ).stdout.strip()
            != b"PONG"
        ):
            if redis.poll() is not None or time.monotonic() > deadline:
                sys.exit("redis-server did not start: see " + str(self.directory / "redis.log"))
            time.sleep(0.1)
        env = {**os.environ, "QUOTAQL_REDIS_URL": f"redis://127.0.0.1:{args.redis_port}"}
        shop = self.start(
            "shop",
            [sys.executable, "-m", "uvicorn", "examples.shop_api.app:app",
             "--host", "127.0.0.1", "--port", str(args.port), "--log-level", "warning"],
            cwd=ROOT,
            env=env,
        )  # fmt: skip
        _wait(f"http://127.0.0.1:{args.port}/metrics/", "the shop API", shop)
        shutil.copy(RULES, self.directory / "quotaql.rules.yml")
        interval = "1s" if args.check else "5s"
        (self.directory / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
            "rule_files: [quotaql.rules.yml]\n"
            "scrape_configs:\n  - job_name: quotaql\n    metrics_path: /metrics/\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{args.port}']\n",
            encoding="utf-8",
        )
        prometheus = self.start(
            "prometheus",
            [_binary("prometheus"), f"--config.file={self.directory / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.directory / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{args.prometheus_port}"],
        )  # fmt: skip
        _wait(f"http://127.0.0.1:{args.prometheus_port}/-/ready", "prometheus", prometheus)

    def down(self) -> None:
        for _, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in reversed(self.processes):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)

    def check(self) -> bool:
        """A few seconds of load; then Prometheus must hold quotaql's decisions."""
        url = f"http://127.0.0.1:{self.args.port}"
        run_load(url, ["demo-polite", "demo-scraper"], duration=3, max_requests=2_000)
        query = f"http://127.0.0.1:{self.args.prometheus_port}/api/v1/query"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            result = httpx.get(query, params={"query": "sum(quotaql_requests_total)"}).json()
            values = result["data"]["result"]
            if values and float(values[0]["value"][1]) > 0:
                print(f"prometheus has quotaql_requests_total = {values[0]['value'][1]}")
                rules = httpx.get(query.replace("query", "rules")).json()["data"]["groups"]
                return bool(rules) and bool(rules[0]["rules"])
            time.sleep(0.5)
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000, help="the shop API")
    parser.add_argument("--redis-port", type=int, default=6380)
    parser.add_argument("--prometheus-port", type=int, default=9090)
    parser.add_argument("--check", action="store_true", help="start, load, verify, stop")
    args = parser.parse_args()
    if args.redis_port == 6379:
        parser.error("6379 is the machine's own Redis; pick another port")
    stack = Stack(args)
    try:
        stack.up()
        if args.check:
            ok = stack.check()
            print("stack check:", "OK" if ok else "FAILED")
            sys.exit(0 if ok else 1)
        print(
            f"shop API    http://127.0.0.1:{args.port}/graphql  (metrics: /metrics/)\n"
            f"Redis       redis://127.0.0.1:{args.redis_port}\n"
            f"Prometheus  http://127.0.0.1:{args.prometheus_port}  (alerts: /alerts)\n"
            f"load:       quotaql loadgen --url http://127.0.0.1:{args.port} --duration 60\n"
            "Ctrl-C stops everything."
        )
        while all(process.poll() is None for _, process in stack.processes):
            time.sleep(0.5)
        print("a process of the stack stopped; logs were in", stack.directory)
    except KeyboardInterrupt:
        pass
    finally:
        stack.down()


if __name__ == "__main__":
    main()
