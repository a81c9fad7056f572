"""HTTP through uvicorn, driven by wrk: requests/s of the shop query with quotaql and without.

Issue 13 §4: one uvicorn worker per variant (a subprocess: ``bench_http_app.py``), each
driven in turn by ``wrk -t1 -c32`` with ``bench_http_post.lua``: ``none`` (no limiting),
``depth`` (Strawberry's ``QueryDepthLimiter``, the reference for noise), ``memory``
(quotaql on ``MemoryStorage``), ``redis`` (quotaql on ``AsyncRedisStorage``, against a
private redis-server) and ``cached`` (Strawberry's ``ParserCache`` and ``ValidationCache``, no
quotaql: issue 23's baseline). Rounds alternate the variants (ABBA); the figures are the
medians of the rounds' paired ratios against ``none`` and, for quotaql, against ``cached``.
Then, in other processes with timers in the gate, where a request's time goes (D11).

``QUOTAQL_BENCH_QUICK=1``: one round of 2 s per variant, for smoke tests.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import httpx
import redis

from _harness import (
    Target,
    fmt_int,
    fmt_ratio,
    fmt_us,
    print_table,
    print_targets,
    remaining_budget,
)
from bench_http_app import (
    CONFIG_TOML,
    DEPTH_LIMIT,
    FLOOR,
    FLOOR_REDIS,
    QUOTAQL_VARIANTS,
    STATS_PATH,
    TENANT,
    TENANT_CAPACITY,
    VARIANTS,
)

# The shop query and the private redis-server come from the test suite: one of each.
BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from tests.support.servers import RedisServer, free_port  # noqa: E402
from tests.support.shop_http import EXPENSIVE  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

# -- targets ---------------------------------------------------------------------------------
REDIS_RATIO_MIN = 0.92  # wrk req/s, quotaql on Redis / no limiting
MEMORY_RATIO_MIN = 0.97  # wrk req/s, quotaql on memory / no limiting
# Issue 23: against what a performance-minded Strawberry user serves (ParserCache and
# ValidationCache, no quotaql), the same bounds.
REDIS_CACHED_RATIO_MIN = 0.92  # wrk req/s, quotaql on Redis / cached Strawberry
MEMORY_CACHED_RATIO_MIN = 0.97  # wrk req/s, quotaql on memory / cached Strawberry

# -- workload --------------------------------------------------------------------------------
QUERY = EXPENSIVE  # { products(first: 10) { name reviews(first: 5) { stars } } }
ESTIMATE = 70.0  # 10 x (2 + 5 x 1): the demo shop's prices (tests/support/shop_http.py's too)
PRODUCTS = 10
CONNECTIONS = 32
THREADS = 1
WRK_REQUEST_TIMEOUT_S = 5  # wrk's --timeout: a slower answer is a socket error
LUA = BENCH_DIR / "bench_http_post.lua"
APP = "bench_http_app:create_app"
SPLIT_VARIANTS = ("none", "memory", "redis")
# The split runs one request at a time: an awaited piece's wall time is then its code and
# its round trip, not also the other requests the event loop serves meanwhile.
SPLIT_CONNECTIONS = 1
# Every process is bounded in time.
STARTUP_TIMEOUT_S = 60.0  # uvicorns start in parallel on a busy 2-core machine
STOP_TIMEOUT_S = 10.0  # SIGTERM, then SIGKILL to the PID
WRK_GRACE_S = 30.0  # wrk's process beyond its -d
STATS_TIMEOUT_S = 10.0
SETTLE_S = 0.3  # after a wrk run, for the requests still in flight to end
PORT_ATTEMPTS = 3
LABELS = {
    "none": "no limiting",
    "depth": f"QueryDepthLimiter(max_depth={DEPTH_LIMIT}) (reference for noise)",
    "memory": "quotaql CostLimiter, MemoryStorage",
    "redis": "quotaql CostLimiter, AsyncRedisStorage",
    FLOOR: "the floor: quotaql's default contract, most directly (_floor.py)",
    FLOOR_REDIS: "the floor with its bucket in Redis (_floor.py)",
    "cached": "Strawberry ParserCache + ValidationCache, no quotaql (the cached baseline)",
}
# The baselines each variant's paired ratio is taken against (per round).
BASELINE_NAMES = {"none": "no limiting", "cached": "the cached baseline"}
BASELINES = tuple(BASELINE_NAMES)


class Settings(NamedTuple):
    """Durations and counts of one run (the full run, or the quick one)."""

    quick: bool
    rounds: int  # per variant, after the warm-up
    round_s: int  # wrk -d of a timed run
    warmup_s: int  # wrk -d of each variant's untimed first run
    split_s: int  # wrk -d of each split process's run


FULL = Settings(quick=False, rounds=6, round_s=3, warmup_s=2, split_s=2)
QUICK = Settings(quick=True, rounds=1, round_s=2, warmup_s=1, split_s=1)


def settings() -> Settings:
    """``QUICK`` when ``$QUOTAQL_BENCH_QUICK`` is 1, else ``FULL``."""
    return QUICK if os.environ.get("QUOTAQL_BENCH_QUICK") == "1" else FULL


class Run(NamedTuple):
    """One wrk run against one server, checked."""

    requests: int
    seconds: float
    p50_us: float
    p99_us: float
    server_cpu_us: float | None  # the uvicorn process's CPU time per request

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


# -- pinning ---------------------------------------------------------------------------------


class Pinning(NamedTuple):
    """uvicorn on ``server_cpu``; wrk and redis-server on ``load_cpu``; or nothing."""

    server_cpu: int | None
    load_cpu: int | None
    why_not: str = ""

    @property
    def active(self) -> bool:
        return self.server_cpu is not None

    def prefix(self) -> list[str]:
        """The command prefix that starts a load process on ``load_cpu``."""
        return ["taskset", "-c", str(self.load_cpu)] if self.active else []

    def pin(self, pid: int, cpu: int | None) -> None:
        """Move every thread of ``pid`` to ``cpu`` (``taskset -a -p``)."""
        if cpu is None:
            return
        subprocess.run(
            ["taskset", "-a", "-p", "-c", str(cpu), str(pid)],
            check=True,
            capture_output=True,
            timeout=10,
        )


def pinning() -> Pinning:
    """Two CPUs of this process's affinity when ``taskset`` is on PATH, else none."""
    if shutil.which("taskset") is None:
        return Pinning(None, None, "taskset not found (Debian: util-linux)")
    if not hasattr(os, "sched_getaffinity"):
        return Pinning(None, None, "no CPU affinity on this platform")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return Pinning(None, None, f"this process may use one CPU only ({cpus})")
    return Pinning(cpus[0], cpus[1])


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (Linux ``/proc``), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- uvicorn ---------------------------------------------------------------------------------


def uvicorn_flavour() -> tuple[str, str]:
    """The event loop and HTTP parser: what uvicorn's ``auto`` picks here (uvloop and
    httptools when installed), or ``$QUOTAQL_BENCH_LOOP`` / ``$QUOTAQL_BENCH_HTTP``."""
    loop = os.environ.get("QUOTAQL_BENCH_LOOP") or (
        "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    )
    http = os.environ.get("QUOTAQL_BENCH_HTTP") or (
        "httptools" if importlib.util.find_spec("httptools") else "h11"
    )
    return loop, http


class Uvicorn:
    """One ``uvicorn --factory bench_http_app:create_app`` process serving one variant.

    Started by :meth:`spawn` (it binds a free loopback port itself: a port taken between
    the choice and the bind is chosen again), ready after :meth:`wait_ready`, stopped by
    :meth:`stop` by its PID (SIGTERM, then SIGKILL), whatever happened.
    """

    def __init__(self, variant: str, env: Mapping[str, str], directory: Path, *, split: bool):
        self.variant = variant
        self.split = split
        self.name = f"{variant}{' (split)' if split else ''}"
        self._env = {
            **os.environ,
            **env,
            "QUOTAQL_BENCH_VARIANT": variant,
            "QUOTAQL_BENCH_SPLIT": "1" if split else "0",
        }
        self._log_path = directory / f"uvicorn-{variant}{'-split' if split else ''}.log"
        self._log: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._attempts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def spawn(self) -> None:
        loop, http = uvicorn_flavour()
        self._attempts += 1
        self.port = free_port()
        command = [
            sys.executable, "-m", "uvicorn", "--factory", APP,
            "--app-dir", str(BENCH_DIR),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--workers", "1", "--no-access-log", "--log-level", "warning",
            "--loop", loop, "--http", http, "--lifespan", "on",
        ]  # fmt: skip
        if self._log is None:
            self._log = self._log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=REPO_ROOT,
            start_new_session=True,  # Ctrl-C reaches the bench, which stops it in order
        )

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:]) or "<empty log>"

    def wait_ready(self, deadline: float) -> None:
        """Until ``GET /__bench/stats`` answers (bounded by ``deadline``, monotonic)."""
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                tail = self.log_tail()
                if "address already in use" in tail.lower() and self._attempts < PORT_ATTEMPTS:
                    self.spawn()
                    continue
                raise RuntimeError(
                    f"uvicorn {self.name} exited with code {self.process.returncode} at"
                    f" startup:\n{tail}"
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + STATS_PATH, timeout=1).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"uvicorn {self.name} (pid {self.pid}) did not answer within"
                    f" {STARTUP_TIMEOUT_S:g} s:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def stats(self) -> dict[str, Any]:
        """What the app counted (``bench_http_app._BenchApp._stats``)."""
        response = httpx.get(self.url + STATS_PATH, timeout=STATS_TIMEOUT_S)
        response.raise_for_status()
        stats: dict[str, Any] = response.json()
        return stats

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()  # SIGKILL to its PID
                process.wait(timeout=STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None


# -- wrk -------------------------------------------------------------------------------------


def wrk_version() -> str:
    """``wrk -v``'s first line (wrk exits 1 after printing it)."""
    result = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=10, check=False)
    return (result.stdout + result.stderr).strip().splitlines()[0]


class Load:
    """Runs and checks wrk against the servers, one run at a time."""

    def __init__(self, pins: Pinning) -> None:
        self.pins = pins
        self.body = json.dumps({"query": QUERY})

    def run(self, server: Uvicorn, seconds: int, label: str, connections: int = CONNECTIONS) -> Run:
        """``wrk -t1 -c<connections> -d<seconds>s`` against ``server``; raises on any bad
        response, socket error, or decision of quotaql that is not an allowed one from its
        storage."""
        expect = ['"stars"']
        if server.variant in QUOTAQL_VARIANTS:
            expect.append('"throttleStatus"')
        env = {
            **os.environ,
            "QUOTAQL_WRK_BODY": self.body,
            "QUOTAQL_WRK_API_KEY": TENANT,
            "QUOTAQL_WRK_EXPECT": "\n".join(expect),
        }
        command = [
            *self.pins.prefix(), "wrk",
            f"-t{THREADS}", f"-c{connections}", f"-d{seconds}s",
            "--timeout", f"{WRK_REQUEST_TIMEOUT_S}s",
            "-s", str(LUA), f"{server.url}/graphql",
        ]  # fmt: skip
        before = server.stats()
        cpu_before = _cpu_seconds(server.pid)
        try:
            result = subprocess.run(
                command,
                env=env,
                capture_output=True,
                text=True,
                timeout=seconds + WRK_GRACE_S,  # then its PID gets SIGKILL
                check=False,
            )
        except subprocess.TimeoutExpired as expired:
            raise RuntimeError(
                f"{label}, {server.name}: wrk did not end within {seconds + WRK_GRACE_S:g} s"
            ) from expired
        cpu_after = _cpu_seconds(server.pid)
        time.sleep(SETTLE_S)
        after = server.stats()
        run = _parse_wrk(result, f"{label}, {server.name}")
        _check_counts(server, before, after, run.requests, connections, f"{label}, {server.name}")
        cpu = (
            None
            if cpu_before is None or cpu_after is None or not run.requests
            else (cpu_after - cpu_before) / run.requests * 1e6
        )
        return run._replace(server_cpu_us=cpu)


def _parse_wrk(result: subprocess.CompletedProcess[str], where: str) -> Run:
    lines = result.stdout.splitlines()
    summary = next((line for line in lines if line.startswith("QUOTAQL_WRK ")), None)
    if result.returncode != 0 or summary is None:
        raise RuntimeError(
            f"{where}: wrk failed (exit {result.returncode}):\n{result.stdout[-1500:]}"
            f"\n{result.stderr[-1500:]}"
        )
    fields = [int(value) for value in summary.split()[1:]]
    (requests, duration_us, _bytes, connect, read, write, status, timeout,
     bad_status, bad_body, p50, p99) = fields  # fmt: skip
    problems = {
        "connect errors": connect,
        "read errors": read,
        "write errors": write,
        "timeouts": timeout,
        "HTTP status >= 400 (wrk)": status,
        "status not 200": bad_status,
        'bodies with "errors" or without the data': bad_body,
    }
    found = {name: n for name, n in problems.items() if n}
    if found or requests == 0:
        example = next(
            (line.removeprefix("QUOTAQL_WRK_EXAMPLE ") for line in lines
             if line.startswith("QUOTAQL_WRK_EXAMPLE ")),
            "",
        )  # fmt: skip
        raise RuntimeError(
            f"{where}: {requests:,} requests, "
            + (", ".join(f"{n:,} {name}" for name, n in found.items()) or "none answered")
            + (f"; first bad response: {example}" if example else "")
        )
    return Run(requests, duration_us / 1e6, float(p50), float(p99), None)


def _check_counts(
    server: Uvicorn,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    answered: int,
    connections: int,
    where: str,
) -> None:
    """The app served at least what wrk counted (and at most the requests in flight
    more); quotaql decided each one from its storage, allowed, with no backend error."""
    served = after["requests"] - before["requests"]
    if not answered <= served <= answered + connections:
        raise RuntimeError(f"{where}: wrk counted {answered:,} answers, the app {served:,}")
    if server.variant == "cached":
        check_caches(before["caches"], after["caches"], answered, served, where)
    if server.variant not in QUOTAQL_VARIANTS:
        return
    was, now = before["limiter"], after["limiter"]
    decided = {
        source: count - was["decisions"].get(source, 0)
        for source, count in now["decisions"].items()
        if count != was["decisions"].get(source, 0)
    }
    problems = []
    other = {source: n for source, n in decided.items() if source != server.variant}
    if other:
        problems.append(f"decisions not from {server.variant}: {other}")
    mine = decided.get(server.variant, 0)
    if not answered <= mine <= served:
        problems.append(f"{mine:,} decisions from {server.variant} for {answered:,} answers")
    if now["refused"] != was["refused"]:
        problems.append(f"{now['refused'] - was['refused']:,} refused")
    if now["backend_errors"] != was["backend_errors"]:
        problems.append(f"backend errors: {now['backend_errors']}")
    if now["circuit_changes"] != was["circuit_changes"]:
        problems.append("the circuit breaker changed state")
    if problems:
        raise RuntimeError(f"{where}: not every request was an allowed decision: {problems}")


def check_caches(
    before: Mapping[str, Sequence[int]],
    after: Mapping[str, Sequence[int]],
    low: int,
    high: int,
    where: str,
) -> None:
    """The cached baseline took every document of a run from Strawberry's caches: no miss,
    and between ``low`` and ``high`` hits in each (``[hits, misses]`` before and after:
    ``bench_http_app.strawberry_cache_calls``). A miss would time a parse or a validation,
    a slower baseline (a target met too easily). Also bench_http_work's check."""
    problems = []
    for cache in ("parse", "validation"):
        (hits_before, misses_before), (hits_after, misses_after) = before[cache], after[cache]
        hits = hits_after - hits_before
        if misses_after != misses_before:
            problems.append(f"{cache}: {misses_after - misses_before:,} misses")
        if not low <= hits <= high:
            problems.append(f"{cache}: {hits:,} hits, not {low:,} to {high:,}")
    if problems:
        raise RuntimeError(f"{where}: Strawberry's caches did not answer every request: {problems}")


# -- checks before timing --------------------------------------------------------------------


def check_responses(servers: Mapping[str, Uvicorn]) -> dict[str, Any]:
    """One response per variant: the same data; quotaql's ``extensions.cost`` with the
    estimate, a lower actual cost (the refund path runs) and the tenant's budget; without
    quotaql, no limiting's body byte for byte."""
    replies = {}
    bodies = {}
    for name, server in servers.items():
        response = httpx.post(
            f"{server.url}/graphql", json={"query": QUERY}, headers={"X-API-Key": TENANT},
            timeout=STATS_TIMEOUT_S,
        )  # fmt: skip
        if response.status_code != 200:
            raise RuntimeError(f"check {name}: HTTP {response.status_code}: {response.text[:300]}")
        replies[name] = response.json()
        bodies[name] = response.content
    for name, body in bodies.items():
        if name not in QUOTAQL_VARIANTS and body != bodies["none"]:
            raise RuntimeError(
                f"check {name}: not no limiting's body byte for byte: {body[:300]!r} against"
                f" {bodies['none'][:300]!r}"
            )
    return check_replies([(f"check {name}", name, reply) for name, reply in replies.items()])


def check_replies(replies: Sequence[tuple[str, str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Replies to the shop query, each ``(where, variant, reply)``: the data of no limiting
    (10 products with reviews, the first ``none`` reply's); quotaql's ``extensions.cost``
    with the estimate, a lower actual cost (the refund path runs) and the tenant's budget;
    none without quotaql. Returns one quotaql cost, for the report (also bench_http_work's
    check)."""
    where, reference = next((where, r) for where, variant, r in replies if variant == "none")
    products = (reference.get("data") or {}).get("products") or []
    if len(products) != PRODUCTS or not all(product["reviews"] for product in products):
        raise RuntimeError(f"{where}: not {PRODUCTS} products with reviews: {reference}")
    cost: dict[str, Any] = {}
    for where, variant, reply in replies:
        if "errors" in reply or reply.get("data") != reference["data"]:
            raise RuntimeError(f"{where}: not the data of no limiting: {reply}")
        found = (reply.get("extensions") or {}).get("cost")
        if variant not in QUOTAQL_VARIANTS:
            if found is not None:
                raise RuntimeError(f"{where}: extensions.cost without quotaql: {found}")
            continue
        if (
            not isinstance(found, dict)
            or found.get("requestedQueryCost") != ESTIMATE
            or not 0 < found.get("actualQueryCost", ESTIMATE) < ESTIMATE
            or (found.get("throttleStatus") or {}).get("maximumAvailable") != TENANT_CAPACITY
        ):
            raise RuntimeError(
                f"{where}: expected extensions.cost with requestedQueryCost {ESTIMATE:g},"
                f" a lower actualQueryCost and the tenant's {TENANT_CAPACITY:g} points: {found}"
            )
        cost = found
    return cost


# -- the run ---------------------------------------------------------------------------------


def _orders(rounds: int) -> Iterator[tuple[int, Sequence[str]]]:
    """ABBA: the variants in order, then reversed, ... (each round has every variant once)."""
    for index in range(rounds):
        yield index, VARIANTS if index % 2 == 0 else VARIANTS[::-1]


def _spread(values: Sequence[float]) -> str:
    return f"{fmt_ratio(min(values))}-{fmt_ratio(max(values))}" if values else "-"


def main() -> list[Target]:
    for binary, package in (("wrk", "wrk"), ("redis-server", "redis-server")):
        if shutil.which(binary) is None:
            raise RuntimeError(
                f"{binary} not found on PATH: `make system-deps` (Debian: apt-get install"
                f" {package})"
            )
    run = settings()
    pins = pinning()
    loop, http = uvicorn_flavour()
    print(
        f"{'QUICK (QUOTAQL_BENCH_QUICK=1): ' if run.quick else ''}{run.rounds} round(s) of"
        f" {run.round_s} s per variant after a {run.warmup_s} s warm-up each; "
        f"{wrk_version()}, -t{THREADS} -c{CONNECTIONS}, {LUA.name}"
    )
    print(
        f"uvicorn {version('uvicorn')} (--loop {loop} --http {http}, one worker, --no-access-log"
        f" --log-level warning), strawberry-graphql {version('strawberry-graphql')}, graphql-core"
        f" {version('graphql-core')}, quotaql {version('quotaql')}, redis-py {redis.__version__}"
    )
    print(f"query: POST /graphql {json.dumps({'query': QUERY})}, X-API-Key {TENANT}")

    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quotaql-wrk-")))
        config = directory / "quotaql.toml"
        config.write_text(CONFIG_TOML, encoding="utf-8")
        server = stack.enter_context(RedisServer())
        redis_version = server.info("server")["redis_version"]
        assert server.pid is not None
        pins.pin(server.pid, pins.load_cpu)
        env = {"QUOTAQL_BENCH_CONFIG": str(config), "QUOTAQL_BENCH_REDIS_URL": server.url}
        servers = {name: Uvicorn(name, env, directory, split=False) for name in VARIANTS}
        splits = {name: Uvicorn(name, env, directory, split=True) for name in SPLIT_VARIANTS}
        for uvicorn in (*servers.values(), *splits.values()):
            stack.callback(uvicorn.stop)
            uvicorn.spawn()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for uvicorn in (*servers.values(), *splits.values()):
            uvicorn.wait_ready(deadline)
            pins.pin(uvicorn.pid, pins.server_cpu)
        if pins.active:
            timed = ", ".join(str(u.pid) for u in servers.values())
            split = ", ".join(str(u.pid) for u in splits.values())
            print(
                f"pinned (taskset): uvicorn (PIDs {timed}; split {split}) on CPU"
                f" {pins.server_cpu}; wrk and redis-server {redis_version} (PID {server.pid})"
                f" on CPU {pins.load_cpu}"
            )
        else:
            print(f"not pinned: {pins.why_not}")
        cost = check_responses(servers)
        check_responses(splits | {"depth": servers["depth"]})
        print(
            "checked one response per variant: the same data (10 products with reviews), no"
            " errors; without quotaql, no limiting's body byte for byte (the cached baseline's"
            " caches are then checked after every run: no miss); quotaql: requestedQueryCost"
            f" {fmt_int(cost['requestedQueryCost'])},"
            f" actualQueryCost {fmt_int(cost['actualQueryCost'])} (refunded), the tenant's"
            f" {TENANT_CAPACITY:g} points; startup {time.monotonic() - started:.0f} s\n"
        )

        load = Load(pins)
        for name in VARIANTS:
            load.run(servers[name], run.warmup_s, "warm-up")
        runs: dict[str, list[Run]] = {name: [] for name in VARIANTS}
        round_cost_s = len(VARIANTS) * (run.round_s + 1.0)
        split_cost_s = len(SPLIT_VARIANTS) * (run.split_s + 1.0)
        cut = ""
        for index, order in _orders(run.rounds):
            if index and remaining_budget() < round_cost_s + split_cost_s:
                cut = f"time budget: {index} of {run.rounds} rounds run"
                break
            for name in order:
                runs[name].append(load.run(servers[name], run.round_s, f"round {index + 1}"))

        split_stats = {}
        for name, uvicorn in splits.items():
            load.run(uvicorn, run.split_s, "split", SPLIT_CONNECTIONS)
            split_stats[name] = uvicorn.stats()

    targets = report(runs, cut)
    report_split(split_stats)
    print(f"section time: {time.monotonic() - started:.0f} s\n")
    print_targets(targets, title="Targets (a report: a miss does not fail the run)")
    return targets


def report(runs: Mapping[str, Sequence[Run]], cut: str) -> list[Target]:
    rounds = len(runs["none"])
    # Per baseline, each variant's req/s over the baseline's in the same round.
    paired = {
        baseline: {
            name: [r.rate / b.rate for r, b in zip(runs[name], runs[baseline], strict=True)]
            for name in VARIANTS
        }
        for baseline in BASELINES
    }
    rows = []
    for name in VARIANTS:
        rates = [r.rate for r in runs[name]]
        cpu = [r.server_cpu_us for r in runs[name] if r.server_cpu_us is not None]
        rows.append(
            [
                LABELS[name],
                fmt_int(round(statistics.median(rates))),
                fmt_int(round(min(rates))),
                fmt_int(round(max(rates))),
                fmt_us(statistics.median(r.p50_us for r in runs[name]) / 1e3),
                fmt_us(statistics.median(r.p99_us for r in runs[name]) / 1e3),
                fmt_us(statistics.median(cpu) if cpu else None),
                *(
                    cell
                    for baseline in BASELINES
                    for cell in (
                        fmt_ratio(statistics.median(paired[baseline][name])),
                        _spread(paired[baseline][name]),
                    )
                ),
            ]
        )
    print_table(
        [
            "wrk POST /graphql, shop query",
            "median req/s",
            "worst",
            "best",
            "p50 ms",
            "p99 ms",
            "uvicorn CPU µs/req",
            *(column for baseline in BASELINES for column in (f"/ {baseline} (paired)", "spread")),
        ],
        rows,
        title=(
            f"Requests/s over {rounds} round(s) per variant, ABBA order; '/ none' and '/ cached'"
            " are the medians of the rounds' ratios to no limiting and to the cached baseline"
            " in the same round, 'spread' their range" + (f" ({cut})" if cut else "")
        ),
    )
    against = {
        "none": [name for name in VARIANTS if name != "none"],
        "cached": list(QUOTAQL_VARIANTS),
    }
    print_table(
        [
            "round",
            *(f"{name} / {baseline}" for baseline, names in against.items() for name in names),
        ],
        [
            [
                str(index + 1),
                *(
                    fmt_ratio(paired[baseline][name][index])
                    for baseline, names in against.items()
                    for name in names
                ),
            ]
            for index in range(rounds)
        ],
        title=(
            "Per-round ratios to no limiting and to the cached baseline (each round: every"
            " variant once, ABBA)"
        ),
    )
    cpu = {
        name: statistics.median(c)
        if (c := [r.server_cpu_us for r in runs[name] if r.server_cpu_us is not None])
        else None
        for name in VARIANTS
    }
    over = [
        f"over {BASELINE_NAMES[baseline]}: "
        + ", ".join(
            f"{name} {value - base:+,.0f}" for name in names if (value := cpu[name]) is not None
        )
        for baseline, names in against.items()
        if (base := cpu[baseline]) is not None
    ]
    if over:
        print(
            "uvicorn CPU µs per request (medians of the timed rounds; what bounds one worker's"
            " throughput), " + "; ".join(over) + "\n"
        )
    return [
        Target(
            "wrk req/s, quotaql Redis / no limiting (median of paired rounds)",
            statistics.median(paired["none"]["redis"]),
            REDIS_RATIO_MIN,
            op=">=",
        ),
        Target(
            "wrk req/s, quotaql memory / no limiting (median of paired rounds)",
            statistics.median(paired["none"]["memory"]),
            MEMORY_RATIO_MIN,
            op=">=",
        ),
        Target(
            "wrk req/s, quotaql Redis / cached Strawberry (median of paired rounds)",
            statistics.median(paired["cached"]["redis"]),
            REDIS_CACHED_RATIO_MIN,
            op=">=",
        ),
        Target(
            "wrk req/s, quotaql memory / cached Strawberry (median of paired rounds)",
            statistics.median(paired["cached"]["memory"]),
            MEMORY_CACHED_RATIO_MIN,
            op=">=",
        ),
    ]


SPLIT_ROWS = {
    "request": "the whole request (the ASGI app, server side)",
    "gate.begin": "gate.begin (identify)",
    "gate.parse_document": "gate.parse_document (replaces Strawberry's parse)",
    "gate.screen": "gate.screen (static limits)",
    "gate.admit": "gate.admit (price, debit)",
    "gate.admit_async": "gate.admit_async (price, debit; awaits Redis)",
    "analyze": "  of which analyze (pricing)",
    "limiter.acquire": "  of which limiter.acquire",
    "gate.settle": "gate.settle (actual cost, refund)",
    "gate.settle_async": "gate.settle_async (actual cost, refund)",
    "actual": "  of which the actual cost",
    "limiter.refund": "  of which limiter.refund",
    "gate.respond": "gate.respond (status, headers)",
    "gate.results": "gate.results (extensions.cost)",
    "gate.finish": "gate.finish (record)",
}
GATE_ENTRY_POINTS = [name for name in SPLIT_ROWS if name.startswith("gate.")]


def report_split(stats: Mapping[str, Mapping[str, Any]]) -> None:
    """Median µs of each piece per call, and calls per request (D11)."""
    pieces = {name: s["split"] or {} for name, s in stats.items()}
    requests = {name: (p.get("request") or {}).get("calls") or 0 for name, p in pieces.items()}
    rows = []
    for piece, label in SPLIT_ROWS.items():
        cells = []
        seen = False
        for name in SPLIT_VARIANTS:
            entry = pieces[name].get(piece) or {}
            calls = entry.get("calls") or 0
            seen |= bool(calls)
            per_request = calls / requests[name] if requests[name] else 0
            cells += [
                fmt_us(entry.get("median_us")) if calls else "-",
                f"{per_request:.2f}" if calls else "-",
            ]
        if seen:
            rows.append([label, *cells])
    sums = []
    for name in SPLIT_VARIANTS:
        medians = [
            (pieces[name].get(piece) or {}).get("median_us") or 0.0
            for piece in GATE_ENTRY_POINTS
            if (pieces[name].get(piece) or {}).get("calls")
        ]
        sums += [fmt_us(sum(medians)) if medians else "-", ""]
    rows.append(["the gate: sum of its entry points' medians", *sums])
    print_table(
        [
            "where a request's time goes (µs, wall; Redis: round trips included)",
            *(f"{name} {column}" for name in SPLIT_VARIANTS for column in ("median", "calls/req")),
        ],
        rows,
        title=(
            "Split (D11): other uvicorn processes, each piece wrapped in a timer, one request"
            f" at a time (wrk -c{SPLIT_CONNECTIONS}): "
            + ", ".join(f"{name} {requests[name]:,} requests" for name in SPLIT_VARIANTS)
            + " (not the timed rounds: the timers cost time too)"
        ),
    )
    wrapped = {name: s.get("wrapped") or [] for name, s in stats.items()}
    missing = sorted(set(SPLIT_ROWS) - {"request"} - set(wrapped.get("memory", [])))
    if missing:
        print(f"not found in the gate, not timed: {', '.join(missing)}\n")


if __name__ == "__main__":
    main()
