"""Instructions redis-server executes per decision script call, counted by callgrind.

Issue 13 §4 ("3 quotas <= 1.30 x PING"): ``bench_limiter`` times the round trips, on a
machine whose noise can be larger than the difference looked for. This module counts what
the server does instead, which is the same from run to run: a private ``redis-server`` runs
under ``valgrind --tool=callgrind``, is sent a number of ``EVALSHA`` calls of the script
quotaql sends for a set of quotas (pipelined, so that the client's pace does not matter),
and the instructions it executed are read from callgrind's total. Each figure is the
difference between a run of ``CALLS + WARMUP`` calls and one of ``WARMUP`` calls, divided by
``CALLS``: the server's start, the script's load and the first calls cancel out.

The rows: a script that returns at once (what any ``EVALSHA`` costs: the call, the Lua
state's reset), then quotaql's script for one token bucket (the one-quota case of
``bench_limiter``), three token buckets in one hash, token bucket + GCRA, and the three
quotas ``bench_limiter`` times (token bucket + GCRA + sliding counter). Ratios are against
the one-quota script, measured in the same run. A report, no target.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from _harness import fmt_int, fmt_ratio, print_table

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from tests.servers import free_port  # noqa: E402

from quotaql import Quota  # noqa: E402
from quotaql.storage.redis import _request, script_source  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Sequence

WARMUP = 200
CALLS = 1000
PIPELINE = 200  # calls per pipelined write
START_TIMEOUT_S = 60.0  # redis-server under valgrind starts slowly
STOP_TIMEOUT_S = 120.0

BUCKET = Quota("tenant", capacity=1e12, refill_per_second=1)
ROWS: tuple[tuple[str, tuple[str, ...] | None, tuple[Quota, ...]], ...] = (
    ("EVALSHA of 'return 1' (any script call)", None, (BUCKET,)),
    ("1 quota: token bucket", ("token_bucket",), (BUCKET,)),
    (
        "3 quotas: 3 token buckets, one hash",
        ("token_bucket",),
        (
            BUCKET,
            Quota("op:a", capacity=1e12, refill_per_second=1),
            Quota("op:b", capacity=1e12, refill_per_second=1),
        ),
    ),
    (
        "2 quotas: token bucket + gcra",
        ("token_bucket", "gcra"),
        (BUCKET, Quota("op:export", capacity=1e12, refill_per_second=1, algorithm="gcra")),
    ),
    (
        "3 quotas: tb + gcra + sliding counter (bench_limiter's)",
        ("token_bucket", "gcra", "sliding_counter"),
        (
            BUCKET,
            Quota("op:export", capacity=1e12, refill_per_second=1, algorithm="gcra"),
            Quota("daily", limit=1e12, window_seconds=86_400, algorithm="sliding_counter"),
        ),
    ),
)


def _instructions(source: str, quotas: Sequence[Quota], calls: int) -> int:
    """Instructions a fresh redis-server under callgrind executed in all, ``calls`` calls of
    ``source`` (with the request quotaql sends for ``quotas``) included."""
    directory = tempfile.mkdtemp(prefix="quotaql-bench-lua-")
    port = free_port()
    out = os.path.join(directory, "callgrind.out")
    process = subprocess.Popen(
        [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", directory,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server under valgrind did not start") from None
                time.sleep(0.1)
        sha = client.script_load(source)
        keys, args = _request("quotaql", "acquire", "tenant-000001", 1.0, quotas, None)
        pipe = client.pipeline(transaction=False)
        for index in range(calls):
            pipe.evalsha(sha, len(keys), *keys, *args)
            if index % PIPELINE == PIPELINE - 1:
                pipe.execute()
        pipe.execute()
        client.shutdown(nosave=True)
        _, err = process.communicate(timeout=STOP_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
    for line in err.decode(errors="replace").splitlines():
        if "Collected" in line:
            return int(line.split()[-1])
    raise RuntimeError("callgrind reported no total")


def per_call(source: str, quotas: Sequence[Quota]) -> float:
    """Instructions per call of ``source`` past the server's start and the warm-up."""
    return (
        _instructions(source, quotas, WARMUP + CALLS) - _instructions(source, quotas, WARMUP)
    ) / CALLS


def main() -> None:
    for binary in ("valgrind", "redis-server"):
        if shutil.which(binary) is None:
            raise RuntimeError(f"{binary} is not on PATH (apt-get install -y {binary})")
    figures = []
    for name, algorithms, quotas in ROWS:
        source = "return 1" if algorithms is None else script_source(algorithms)
        figures.append((name, per_call(source, quotas)))
    one = figures[1][1]
    trivial = figures[0][1]
    rows = [
        [name, fmt_int(round(count)), fmt_ratio(count / one), fmt_int(round(count - trivial))]
        for name, count in figures
    ]
    print_table(
        ["script call", "instructions/call", "/ 1 quota", "beyond any call"],
        rows,
        title=f"redis-server instructions per EVALSHA (callgrind; {CALLS} calls after {WARMUP})",
    )
