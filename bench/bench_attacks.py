"""Pay for the work done (issue 22): what each hostile request of the issue costs the worker,
per point it is charged, over a real uvicorn serving Strawberry and Ariadne.

For each attack, the same request is sent ``REPEAT`` times, one after the other, from one
address; the server's CPU seconds (user + system, every thread: ``time.process_time()`` in
the server) and the points it charged (``quotaql_cost_total``: charged - refunded, +
overage) are read before and after. The yardstick: 20 ms of worker time per point, at which
one client's default refill (50 points/s) buys one core. A request charged nothing is
reported as such (ms per point infinite): the attack then costs the server work that no
budget bounds.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from _harness import Target, print_table, print_targets
from bench_attacks_app import BODY_LIMIT, CONFIG_TOML, CPU_PATH, ITEMS, WIDE

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from tests.support.servers import free_port  # noqa: E402

MS_PER_POINT_MAX = 20.0
REPEAT = int(os.environ.get("QUOTAQL_ATTACK_REPEAT") or 5)
REQUEST_TIMEOUT_S = 30.0
STARTUP_TIMEOUT_S = 30.0
FRAMEWORKS = ("strawberry", "ariadne")
_COST_LINE = re.compile(r"^quotaql_cost_total\{([^}]*)\} ([0-9.e+-]+)$", re.MULTILINE)
_OVERAGE_LINE = re.compile(r"^quotaql_overage_total(?:\{[^}]*\})? ([0-9.e+-]+)$", re.MULTILINE)
_TIME_LINE = re.compile(r"^quotaql_time_seconds_total(?:\{[^}]*\})? ([0-9.e+-]+)$", re.MULTILINE)


class Attack(NamedTuple):
    name: str
    body: bytes


def _json(payload: Any) -> bytes:
    return json.dumps(payload).encode()


def _introspection() -> str:
    from graphql import get_introspection_query

    return get_introspection_query(descriptions=True)


def attacks() -> list[Attack]:
    fragments = 900
    # Each of WIDE fields selected by fragments/WIDE of them: within max_repeated_fields.
    spreads = " ".join(f"...F{i}" for i in range(fragments))
    definitions = " ".join(f"fragment F{i} on Wide {{ w{i % WIDE} }}" for i in range(fragments))
    # A list variable just under the 1 MiB body limit.
    values = list(range(140_000))
    variables = _json(
        {"query": "query($v: [Int!]) { count(values: $v) }", "variables": {"v": values}}
    )
    assert len(variables) < BODY_LIMIT, len(variables)
    wide = f"{{ wide {{ {spreads} }} }} {definitions}"
    unsized = "{ items(first: null) { id name } }"
    # Within max_tokens (15,000): parsed, validated and coerced, priced as one scalar field.
    literal = "{ count(values: [" + "1 " * 14_900 + "]) }"
    invalid = "{ count(values: [" + "a " * 14_900 + "]) }"  # each value a validation error
    deep = b'{"query": "{ hello }", "variables": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    return [
        Attack("honest: { hello }", _json({"query": "{ hello }"})),
        Attack("900 fragments side by side", _json({"query": wide})),
        Attack(f"list variable ({len(variables) // 1024} KB)", variables),
        Attack("introspection", _json({"query": _introspection()})),
        Attack("list literal of 14,900 tokens", _json({"query": literal})),
        Attack("list literal, 14,900 invalid values", _json({"query": invalid})),
        Attack(f"items(first: null) -> {ITEMS} items", _json({"query": unsized})),
        Attack("body nested 50,000 deep", deep),
        Attack("body null", b"null"),
        Attack("body invalid UTF-8", b'{"query": "{ hello \xff\xfe }"}'),
    ]  # fmt: skip


class Server:
    """``uvicorn --factory bench_attacks_app:create_app`` for one framework, stopped by PID."""

    def __init__(self, framework: str, config: Path, log: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "QUOTAQL_ATTACK_FRAMEWORK": framework,
               "QUOTAQL_ATTACK_CONFIG": str(config)}  # fmt: skip
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "bench_attacks_app:create_app",
             "--app-dir", str(BENCH_DIR), "--host", "127.0.0.1", "--port", str(self.port),
             "--no-access-log", "--log-level", "warning"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            cwd=REPO_ROOT, start_new_session=True,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"uvicorn ({framework}) exited: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/metrics", timeout=1).status_code == 200:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn ({framework}) did not start: {log.read_text()}")
            time.sleep(0.1)

    def cpu(self) -> float:
        """The server process's CPU seconds (``time.process_time``: every thread, finer
        than ``/proc``'s clock ticks)."""
        return float(httpx.get(self.url + CPU_PATH, timeout=10).json()["cpu"])

    def charged(self) -> tuple[float, float]:
        """Points charged so far: charged - refunded (+ overage, where counted); and the
        worker time the time quota was charged, in ms."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        total = 0.0
        for labels, value in _COST_LINE.findall(text):
            if 'outcome="charged"' in labels:
                total += float(value)
            elif 'outcome="refunded"' in labels:
                total -= float(value)
        total += sum(float(value) for value in _OVERAGE_LINE.findall(text))
        return total, 1000 * sum(float(value) for value in _TIME_LINE.findall(text))

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()


def _code(response: httpx.Response) -> str:
    """`` CODE`` of the response's first error (``extensions.code``), or nothing."""
    with contextlib.suppress(ValueError, KeyError, IndexError, TypeError, AttributeError):
        return f" {response.json()['errors'][0]['extensions']['code']}"
    return ""


class Result(NamedTuple):
    framework: str
    attack: str
    status: str
    ms: float
    points: float
    time_ms: float

    @property
    def ms_per_point(self) -> float:
        return self.ms / self.points if self.points > 0 else math.inf


def run_attack(server: Server, framework: str, attack: Attack, key: str) -> Result:
    headers = {"content-type": "application/json", "x-api-key": key}
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        client.post(server.url + "/graphql", content=attack.body, headers=headers)  # warm
        time.sleep(0.05)
        cpu, points = server.cpu(), server.charged()
        statuses = set()
        for _ in range(REPEAT):
            response = client.post(server.url + "/graphql", content=attack.body, headers=headers)
            statuses.add(f"{response.status_code}{_code(response)}")
        time.sleep(0.05)  # deferred refunds land
        spent = server.cpu() - cpu
        charged, timed = (
            after - before for after, before in zip(server.charged(), points, strict=True)
        )
    return Result(framework, attack.name, "/".join(sorted(statuses)),
                  spent * 1000 / REPEAT, charged / REPEAT, timed / REPEAT)  # fmt: skip


def main() -> list[Target]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="quotaql-attacks-") as tmp:
        config = Path(tmp) / "quotaql.toml"
        config.write_text(CONFIG_TOML, encoding="utf-8")
        for framework in FRAMEWORKS:
            server = Server(framework, config, Path(tmp) / f"{framework}.log")
            try:
                results.extend(
                    run_attack(server, framework, attack, f"attacker{number}")
                    for number, attack in enumerate(attacks())
                )
            finally:
                server.stop()
    print_table(
        [
            "framework",
            "attack",
            "status",
            "worker ms/request",
            "points/request",
            "ms/point",
            "time quota ms/request",
        ],
        [
            [
                r.framework,
                r.attack,
                r.status,
                f"{r.ms:.1f}",
                f"{r.points:g}",
                "unpaid" if math.isinf(r.ms_per_point) else f"{r.ms_per_point:.2f}",
                f"{r.time_ms:.1f}",
            ]
            for r in results
        ],
        title=f"Worker time per point charged ({REPEAT} requests each, one address)",
        left=2,
    )
    targets = [
        Target(
            f"{r.framework}: {r.attack} (ms per point)",
            None if math.isinf(r.ms_per_point) else r.ms_per_point,
            MS_PER_POINT_MAX,
        )
        for r in results
        if r.ms >= 1.0 or r.points > 0  # a request that cost under a millisecond is no attack
    ]
    print_targets(targets)
    return targets


if __name__ == "__main__":
    main()
