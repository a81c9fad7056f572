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
quotas ``bench_limiter`` times (token bucket + GCRA + sliding counter), and the two floors
``bench_limiter`` also times: hand-written scripts that do the least one and three token
buckets of one tenant can. Ratios are against quotaql's one-quota script, measured in the same
run. The server runs its cron once a second (``--hz 1``): at the default 10 Hz, its timed
work added to each call in proportion to the call's slowed-down length, and the counts moved
by up to 3 % between runs; at 1 Hz they repeat within 0.2 %. A report, no target.
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
from tests.support.servers import free_port  # noqa: E402

from bench_limiter import (  # noqa: E402
    MINIMAL_3_ARGS,
    MINIMAL_3_BUCKETS_LUA,
    MINIMAL_ARGS,
    MINIMAL_TOKEN_BUCKET_LUA,
)
from quotaql import Quota  # noqa: E402
from quotaql.storage import Debit  # noqa: E402
from quotaql.storage.redis import _request, script_source  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Sequence

WARMUP = 200
CALLS = 1000
PIPELINE = 200  # calls per pipelined write
# One server cron a second: its timed work adds to calls in proportion to their slowed-down
# length under valgrind; at 1 Hz the counts repeat within 0.1 %.
SERVER_ARGS: tuple[str, ...] = ("--hz", "1", "--dynamic-hz", "no")
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
# The floors bench_limiter times: hand-written scripts that do the least one and three token
# buckets can (no spec to read, no other algorithm, no reservation, no expiry field).
FLOORS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("floor: minimal 1-bucket script (bench_limiter's)", MINIMAL_TOKEN_BUCKET_LUA, MINIMAL_ARGS),
    ("floor: minimal 3-bucket script, one hash", MINIMAL_3_BUCKETS_LUA, MINIMAL_3_ARGS),
)


def _instructions(source: str, keys: Sequence[str], args: Sequence[str], calls: int) -> int:
    """Instructions a fresh redis-server under callgrind executed in all, ``calls`` calls of
    ``source`` with ``keys`` and ``args`` included."""
    directory = tempfile.mkdtemp(prefix="quotaql-bench-lua-")
    port = free_port()
    out = os.path.join(directory, "callgrind.out")
    process = subprocess.Popen(
        [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", directory, *SERVER_ARGS,
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


def per_call(source: str, keys: Sequence[str], args: Sequence[str]) -> float:
    """Instructions per call of ``source`` past the server's start and the warm-up."""
    return (
        _instructions(source, keys, args, WARMUP + CALLS)
        - _instructions(source, keys, args, WARMUP)
    ) / CALLS


def main() -> None:
    for binary in ("valgrind", "redis-server"):
        if shutil.which(binary) is None:
            raise RuntimeError(f"{binary} is not on PATH (apt-get install -y {binary})")
    figures = []
    for name, algorithms, quotas in ROWS:
        source = "return 1" if algorithms is None else script_source(algorithms)
        keys, args = _request("quotaql", "acquire", Debit("tenant-000001", 1.0, quotas))
        figures.append((name, per_call(source, keys, args)))
    for name, source, args in FLOORS:
        figures.append((name, per_call(source, ["bench:floor"], args)))
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
