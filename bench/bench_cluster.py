"""Throughput per master (issue 26): async decisions on one Redis and on a 3-master Redis Cluster.

64 async callers on one event loop call ``AsyncRedisStorage.acquire`` for 1 and 3 quotas (the
tenants' own, one script call each), pipelined and not, against a private redis-server and a
private 3-master Redis Cluster started here (free loopback ports, stopped by PID). Two figures
per workload:

- decisions per second of this process (the client is one Python event loop: with the servers
  on the same 2 cores this is mostly what the client can send);
- redis-server CPU µs per decision (``INFO cpu``, summed over the masters), which sizes a
  master: ``1e6 / µs`` decisions per second at full use of its thread (docs/scale-out.md's
  ``t + o``).

The target (issue 26): async cluster, pipelined, ≥ 0.8 × standalone pipelined, same run.
``QUOTAQL_BENCH_QUICK=1``: a few calls per round, one round (a smoke run of the module).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from _harness import (
    Target,
    Throughput,
    fmt_int,
    fmt_ratio,
    fmt_us,
    measure_throughput,
    print_table,
    print_targets,
    ratio,
)
from quotaql import AsyncRedisStorage, Quota
from quotaql.storage import Debit

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from tests.support.servers import RedisCluster, RedisServer  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

# -- target ----------------------------------------------------------------------------------
CLUSTER_RATIO_MIN = 0.8  # async cluster pipelined / standalone pipelined decisions per second

# -- workloads -------------------------------------------------------------------------------
QUICK = os.environ.get("QUOTAQL_BENCH_QUICK") == "1"
CALLERS = 64
OPS_PER_CALLER = 5 if QUICK else 100  # 6,400 decisions per round
ROUNDS = 1 if QUICK else 7
TIME_LIMIT_S = 10.0 if QUICK else 60.0  # the timed rounds of all the workloads together
STORAGE_TIMEOUT_S = 1.0  # a scheduling hiccup of a shared VM is no timeout here
TENANTS = 192  # spread over the masters' slots (each caller its own three in turn)

UNLIMITED = Quota("tenant", capacity=1e12, refill_per_second=1)
UNLIMITED_3 = (
    UNLIMITED,
    Quota("op:export", capacity=1e12, refill_per_second=1, algorithm="gcra"),
    Quota("daily", limit=1e12, window_seconds=86_400, algorithm="sliding_counter"),
)
QUOTAS = {"1 quota": (UNLIMITED,), "3 quotas": UNLIMITED_3}


class _Workload:
    """One backend × pipelining × quotas: its storage, made on ``loop``, and its errors."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        client: Any,
        quotas: Sequence[Quota],
        *,
        pipeline: bool,
    ) -> None:
        self.loop = loop
        self.storage = AsyncRedisStorage(client, timeout=STORAGE_TIMEOUT_S, pipeline=pipeline)
        self.quotas = list(quotas)
        self.errors: dict[str, int] = {}
        self.refused = 0

    async def _caller(self, index: int, calls: int) -> None:
        acquire = self.storage.acquire
        quotas = self.quotas
        for turn in range(calls):
            tenant = f"tenant-{(index + turn * CALLERS) % TENANTS:04d}"
            try:
                decision = await acquire(Debit(tenant, 1, quotas))
            except Exception as exc:  # counted and reported, never hidden
                name = type(exc).__name__
                self.errors[name] = self.errors.get(name, 0) + 1
                continue
            if not decision.allowed:
                self.refused += 1

    def round(self, calls: int = OPS_PER_CALLER) -> Callable[[], object]:
        """One round: CALLERS tasks, each making ``calls`` decisions in a row."""

        async def run() -> None:
            await asyncio.gather(*(self._caller(i, calls) for i in range(CALLERS)))

        return lambda: self.loop.run_until_complete(run())

    def batch(self) -> float:
        """Mean commands per write of its pipeline(s) (0: not pipelined)."""
        pipeline = self.storage.pipeline
        return pipeline.commands / pipeline.batches if pipeline and pipeline.batches else 0.0

    def problems(self) -> str:
        parts = [f"{n:,} x {name}" for name, n in self.errors.items()]
        if self.refused:
            parts.append(f"{self.refused:,} refused")
        return ", ".join(parts)


def _cpu_us(ports: Sequence[int], host: str) -> float:
    """The servers' CPU time so far (user + system, INFO cpu), summed, µs."""
    total = 0.0
    for port in ports:
        with redis.Redis(host, port, socket_timeout=5) as client:
            cpu = client.info("cpu")
            total += (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6
    return total


def bench(server: RedisServer, cluster: RedisCluster) -> list[Target]:
    loop = asyncio.new_event_loop()
    backends = {
        "standalone": (server.async_client, [server.port]),
        "cluster": (cluster.async_client, cluster.ports),
    }
    workloads: dict[tuple[str, str, bool], _Workload] = {}
    for backend, (factory, _) in backends.items():
        for label, quotas in QUOTAS.items():
            for pipeline in (True, False):
                workloads[backend, label, pipeline] = _Workload(
                    loop, factory(), quotas, pipeline=pipeline
                )
    server_us: dict[tuple[str, str, bool], float] = {}
    batches: dict[tuple[str, str, bool], float] = {}
    try:
        for workload in workloads.values():  # connections opened, scripts loaded
            workload.round(1)()
        t: dict[tuple[str, str, bool], Throughput] = measure_throughput(
            {key: workload.round() for key, workload in workloads.items()},
            CALLERS * OPS_PER_CALLER,
            samples=ROUNDS,
            time_limit=TIME_LIMIT_S,
        )
        # redis-server CPU per decision: one more round of each, alone.
        for key, workload in workloads.items():
            ports = backends[key[0]][1]
            before = _cpu_us(ports, server.host)
            workload.round()()
            server_us[key] = (_cpu_us(ports, server.host) - before) / (CALLERS * OPS_PER_CALLER)
            batches[key] = workload.batch()
    finally:
        for workload in workloads.values():
            with contextlib.suppress(Exception):
                loop.run_until_complete(workload.storage.close())
        loop.close()

    rows = []
    for (backend, label, pipeline), figure in t.items():
        key = (backend, label, pipeline)
        us = server_us.get(key)
        masters = len(backends[backend][1])
        rows.append(
            [
                f"{backend}, {label}, {'pipelined' if pipeline else 'unpipelined'}",
                fmt_int(round(figure.median_ops)) if figure.median_ops else "-",
                fmt_us(figure.cpu_us),
                f"{batches.get(key, 0.0):.1f}" if pipeline else "1",
                fmt_us(us),
                fmt_int(round(1e6 / us)) if us else "-",
                fmt_int(round(0.5e6 / us)) if us else "-",
                str(masters),
            ]
        )
    print_table(
        [
            "async, 64 callers",
            "decisions/s",
            "client CPU µs",
            "batch",
            "server CPU µs",
            "per master, u = 1",
            "u = 0.5",
            "masters",
        ],
        rows,
        title=(
            f"{CALLERS} async callers x {OPS_PER_CALLER} decisions per round, median of"
            f" {ROUNDS} round(s) on one event loop{' (QUICK)' if QUICK else ''}; server CPU µs:"
            " redis-server CPU per decision summed over the masters (INFO cpu, one round);"
            " per master: 1e6 / it, decisions/s one master's thread serves at use u"
        ),
    )
    problems = {key: w.problems() for key, w in workloads.items() if w.problems()}
    for (backend, label, pipeline), text in problems.items():
        kind = "pipelined" if pipeline else "unpipelined"
        print(f"  WARNING: {backend}, {label}, {kind}: {text}")
    if problems:
        print()
    targets = []
    for label in QUOTAS:
        value = ratio(t["cluster", label, True].median_ops, t["standalone", label, True].median_ops)
        spoiled = ("cluster", label, True) in problems or ("standalone", label, True) in problems
        targets.append(
            Target(
                f"async cluster pipelined / standalone pipelined, {label}",
                None if spoiled else value,
                CLUSTER_RATIO_MIN,
                op=">=",
            )
        )
    print_table(
        ["ratio (same run)", "value"],
        [
            *(
                [
                    f"cluster / standalone, {label}, {'pipelined' if p else 'unpipelined'}",
                    fmt_ratio(
                        ratio(
                            t["cluster", label, p].median_ops, t["standalone", label, p].median_ops
                        )
                    ),
                ]
                for label in QUOTAS
                for p in (True, False)
            ),
            *(
                [
                    f"{backend} pipelined / unpipelined, {label}",
                    fmt_ratio(
                        ratio(
                            t[backend, label, True].median_ops, t[backend, label, False].median_ops
                        )
                    ),
                ]
                for backend in backends
                for label in QUOTAS
            ),
        ],
    )
    return targets


def main() -> list[Target]:
    print(f"quotaql {version('quotaql')}, redis-py {redis.__version__}")
    # Both are stopped (SIGTERM, then SIGKILL, by PID) when the blocks exit, error or not.
    with RedisServer() as server, RedisCluster() as cluster:
        print(
            f"private redis-server on {server.host}:{server.port}, 3-master cluster on"
            f" {', '.join(map(str, cluster.ports))}\n"
        )
        targets = bench(server, cluster)
    print_targets(targets, title="Targets (a report: a miss does not fail the run)")
    return targets


if __name__ == "__main__":
    main()
