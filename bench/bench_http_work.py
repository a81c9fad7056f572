"""Instructions per HTTP request of the shop query, counted by callgrind (bench_http's apps).

Issue 13 §4 asks, through uvicorn and wrk, quotaql on memory / no limiting >= 0.97 and on Redis
/ no limiting >= 0.92 (``bench_http``). Those are wall-clock ratios, and this VM's speed moves
2 x within seconds (the do-nothing reference ``QueryDepthLimiter`` reads 0.71-1.48 per round):
they cannot resolve the 3 % looked for. This module counts the work instead, which repeats from
run to run. Each app of ``bench_http_app`` (``none``, ``depth``, ``memory``, ``redis``,
``floor`` and ``cached``, Strawberry's ``ParserCache`` and ``ValidationCache`` without quotaql:
the same config, query and ``X-API-Key`` as ``bench_http``) is driven in process by a bare ASGI
loop (a real HTTP scope, a ``receive`` that gives the body, a ``send`` that keeps the messages;
no sockets, no uvicorn) under ``valgrind --tool=callgrind``: one request read in full,
``warmup`` requests, then ``requests`` more, one at a time (C=1) or 32 at a time (C=32:
``asyncio.gather`` of 32 per batch). A second run does the warm-up alone; instructions per
request are the difference of the two runs' totals divided by ``requests``.

The runs are processes of their own: one Python child under callgrind imports everything
(about 2.3 G instructions, 45 s under valgrind, that every run would repeat), then forks every
run at once, each waiting for its go, and lets them go two at a time (2 cores). A forked
process's callgrind total includes what its parent executed before the fork, the same for
every run, so the difference cancels it, with the app's build, the first request and the
warm-up. Forking all runs from one state gives each the same memory layout (the interpreter's
costs depend on where objects lie: another layout, from another environment or Python, can
move a variant by about 1 %, so compare the ratios of one run); the counted requests start
after ``gc.collect(); gc.freeze()`` (the young generations' collections are counted, the full
collections of the import-time heap, 0 or 1 in a run and 1-2 % each, are not), with
``PYTHONHASHSEED=0``. The figures repeat within 0.02 % (Redis: 0.2 %, its replies' timing).
Every response is checked: 200, the data of no limiting byte for byte, no errors, and for
quotaql ``extensions.cost``; every quotaql decision must come from the variant's storage
(none from a fallback), allowed, with no backend error; the cached baseline must take every
request but the first from Strawberry's two caches.

The ``floor`` app (``_floor.py``, served by ``bench_http`` too) does the work quotaql's
default contract asks for on the common path (identify a known key, parse and
validate once, price from the cached plan, debit a token bucket, time the worker, measure the
actual cost, refund, ``extensions.cost`` and the rate-limit headers), written as directly as
its authors could, without what a library needs off that path: a yardstick for how much of
quotaql's cost over the cached baseline is the contract's and how much its structure's.

The figure per variant is its "work ratio", instructions per request / none's at the same C,
and for quotaql also / cached's. The Targets (C=32, as wrk's 32 connections) are ``<= 1/0.97``
for memory and ``<= 1/0.92`` for Redis against ``none``, and (issue 23) ``<= 1.03`` for memory
and ``<= 1.06`` for Redis against ``cached``: **an instruction analogue of the wrk targets, not
the wrk targets**. Instructions are not
time: cache misses, branch mispredictions, system calls and the waits on Redis are not in them
(BENCHMARKS.md, "Where the gap is not"). The ``redis`` variant talks to a private
``redis-server`` that runs outside valgrind: its own instructions are NOT counted, only the
Python process's (the client side of Redis: encoding, the socket calls, decoding).

quotaql's worker-time clock (the time quota, ``gate/worktime.py``) is divided in the child by
valgrind's slowdown, measured on one pure-Python loop natively (the parent) and under valgrind
(the child): an operation of 1 ms natively is then charged its time once in ~25 requests, as
natively, not on every request as valgrind's 50-fold CPU time would make it.

Every wait is bounded (a run ``RUN_TIMEOUT_S``, the whole child ``CHILD_TIMEOUT_S``); on any
failure the runs and the child are killed by their PIDs. The module takes about 5 minutes.
``QUOTAQL_BENCH_QUICK=1``: a smoke run, fewer requests, C=1 only (the Targets are skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from _harness import Target

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

# -- targets: bench_http's wrk targets, as bounds on the work ratio ----------------------------
MEMORY_RATIO_MIN = 0.97  # wrk req/s, memory / none: the work ratio must stay <= 1/0.97
REDIS_RATIO_MIN = 0.92  # wrk req/s, Redis / none: the work ratio must stay <= 1/0.92
# Issue 23, against the cached baseline (Strawberry's ParserCache + ValidationCache, no quotaql):
MEMORY_CACHED_WORK_MAX = 1.03  # instructions per request, memory / cached
REDIS_CACHED_WORK_MAX = 1.06  # instructions per request, Redis / cached
TARGET_CONCURRENCY = 32  # wrk -c32

# -- processes ---------------------------------------------------------------------------------
PARALLEL = 2  # runs under valgrind at once (a 2-core machine)
RUN_TIMEOUT_S = 300.0  # one forked run; then SIGKILL to its PID
CHILD_TIMEOUT_S = 600.0  # the child under valgrind, start to exit; then SIGKILL to the PIDs
# Under valgrind the Python client is many times slower: a Redis call's timeout that cannot be
# missed while the run lives (a missed one would be decided by the local fallback).
VALGRIND_STORAGE_TIMEOUT_S = RUN_TIMEOUT_S
KILL_WAIT_S = 10.0
POLL_S = 0.25  # the child's look at the runs
REDIS_START_TIMEOUT_S = 30.0
HASH_SEED = "0"  # the child's PYTHONHASHSEED: the same dict and set layouts in every run
GO = b"g"  # what the child writes to a waiting run's pipe to start it
PIDS_FILE = "runs.pids"  # the runs' PIDs, one a line, for the parent to kill on a failure
LOG_TAIL_CHARS = 3000


class Settings(NamedTuple):
    """Requests per run and the concurrencies (the full run, or the quick one)."""

    quick: bool
    warmup: int  # requests before the counted ones (a multiple of every concurrency)
    requests: int  # the counted requests (a multiple of every concurrency)
    concurrencies: tuple[int, ...]


FULL = Settings(quick=False, warmup=32, requests=128, concurrencies=(1, 32))
QUICK = Settings(quick=True, warmup=8, requests=8, concurrencies=(1,))


def settings() -> Settings:
    """``QUICK`` when ``$QUOTAQL_BENCH_QUICK`` is 1, else ``FULL``."""
    return QUICK if os.environ.get("QUOTAQL_BENCH_QUICK") == "1" else FULL


class Job(NamedTuple):
    """One run: a variant at a concurrency, ``requests`` counted after the warm-up (0: the
    warm-up alone)."""

    variant: str
    concurrency: int
    requests: int

    @property
    def name(self) -> str:
        what = f"{self.requests} requests" if self.requests else "the warm-up alone"
        return f"{self.variant}, C={self.concurrency}, {what}"

    @property
    def stem(self) -> str:
        return f"{self.variant}-c{self.concurrency}-n{self.requests}"


# == a run: one app, a bare ASGI loop (under valgrind, in a process forked for it) ============


class _Exchange:
    """One request's ASGI channel: ``receive`` gives the body, ``send`` keeps the messages.

    After the body, ``receive`` waits for the response to end and then reports a disconnect
    (as a server does when the client goes): an app that listens for one is not cut short.
    """

    __slots__ = ("body", "ended", "given", "messages")

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.given = False
        self.messages: list[dict[str, Any]] = []
        self.ended: asyncio.Future[None] | None = None

    async def receive(self) -> dict[str, Any]:
        if not self.given:
            self.given = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        if self.ended is None:
            self.ended = asyncio.get_running_loop().create_future()
        await self.ended
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        if (
            message["type"] == "http.response.body"
            and not message.get("more_body", False)
            and self.ended is not None
            and not self.ended.done()
        ):
            self.ended.set_result(None)


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """An HTTP scope as uvicorn (httptools) builds it for a request from wrk."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 40000),
        "scheme": "http",
        "method": method,
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "state": {},
    }


async def _call(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[int, bytes]:
    """One request through ``app``: (status, body)."""
    exchange = _Exchange(body)
    await app(_scope(method, path, list(headers)), exchange.receive, exchange.send)
    messages = exchange.messages
    if not messages or messages[0]["type"] != "http.response.start":
        raise RuntimeError(f"{method} {path}: no http.response.start: {messages[:2]}")
    return messages[0]["status"], b"".join(
        m.get("body", b"") for m in messages[1:] if m["type"] == "http.response.body"
    )


class _Lifespan:
    """The app's lifespan, driven: started before the requests, shut down after them (the
    Redis storage is closed at its shutdown)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task: asyncio.Future[None] | None = None

    async def _step(self, message: str, expected: str) -> None:
        await self.inbox.put({"type": message})
        reply = await self.outbox.get()
        if reply["type"] != expected:
            raise RuntimeError(f"{message}: {reply}")

    async def start(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
        self.task = asyncio.ensure_future(self.app(scope, self.inbox.get, self.outbox.put))
        await self._step("lifespan.startup", "lifespan.startup.complete")

    async def stop(self) -> None:
        assert self.task is not None
        await self._step("lifespan.shutdown", "lifespan.shutdown.complete")
        await self.task


async def _drive(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Build the app; one request read in full, the warm-up, the counted requests, all
    checked; then the app's stats."""
    from bench_http_app import STATS_PATH, create_app

    app = create_app()
    lifespan = _Lifespan(app)
    await lifespan.start()
    body = json.dumps({"query": spec["query"]}).encode()
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"x-api-key", spec["tenant"].encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    quotaql = spec["quotaql"]
    concurrency = spec["concurrency"]

    # The first response is parsed (the parent checks it); every other one must carry the
    # same data byte for byte (strawberry's compact JSON, ``{"data":...`` first), then
    # nothing (no limiting) or quotaql's ``extensions.cost``, and no "errors".
    status, first_body = await _call(app, "POST", "/graphql", headers, body)
    if status != 200:
        raise RuntimeError(f"first request: HTTP {status}: {first_body[:300]!r}")
    first = json.loads(first_body)
    prefix = json.dumps({"data": first.get("data")}, separators=(",", ":"))[:-1].encode()
    if not first_body.startswith(prefix):
        raise RuntimeError(f"first request: not strawberry's compact JSON: {first_body[:300]!r}")
    tail = b',"extensions":{"cost":' if quotaql else b"}"
    start = len(prefix)
    bad = 0
    example = ""

    async def one() -> None:
        nonlocal bad, example
        status, answer = await _call(app, "POST", "/graphql", headers, body)
        ok = (
            status == 200
            and answer.startswith(prefix)
            and (answer.startswith(tail, start) if quotaql else answer[start:] == tail)
            and b'"errors"' not in answer
        )
        if not ok:
            bad += 1
            example = example or f"HTTP {status}: {answer[:300]!r}"

    async def requests(count: int) -> None:
        for _ in range(count // concurrency):
            if concurrency == 1:
                await one()
            else:
                await asyncio.gather(*[one() for _ in range(concurrency)])

    await requests(spec["warmup"])
    # The counted requests start from the same collector state in both runs: the young
    # generations empty, the heap built so far frozen (its full collections, 0 or 1 per run
    # and each worth 1-2 % of the figure, would make it jump; the young collections that the
    # requests' own garbage causes are counted).
    gc.collect()
    gc.freeze()
    await requests(spec["requests"])

    status, stats_body = await _call(app, "GET", STATS_PATH, headers[:1], b"")
    if status != 200:
        raise RuntimeError(f"GET {STATS_PATH}: HTTP {status}")
    await lifespan.stop()
    total = 1 + spec["warmup"] + spec["requests"]
    if bad:
        raise RuntimeError(f"{bad:,} of {total:,} responses bad; the first: {example}")
    return {"first": first, "stats": json.loads(stats_body), "requests": total}


# == the worker-time clock: as fast under valgrind as natively ================================
# quotaql measures each operation's CPU time (the time quota) and charges a subject's time to
# the storage once it adds up to 25 ms in a process (gate/worktime.py). Under valgrind the
# same work takes tens of times more CPU time, so an operation of 1 ms native would be
# charged on every request: a storage call the native server makes once in ~25 requests.
# The child divides quotaql's clock by valgrind's slowdown, measured on the same pure-Python
# loop natively (here) and under valgrind (in the child).
CALIBRATION_LOOPS = 5


def _calibration() -> int:
    """The least thread CPU time (ns) of a fixed pure-Python loop, of a few tries."""
    import time

    best = None
    for _ in range(CALIBRATION_LOOPS):
        began = time.thread_time_ns()
        total = 0
        for i in range(100_000):
            total += i * i % 7
        spent = time.thread_time_ns() - began
        best = spent if best is None else min(best, spent)
    assert best is not None
    return max(best, 1)


def _slow_clock(native_ns: int) -> float:
    """Divide quotaql's worker-time clock by this process's slowdown against ``native_ns``
    (the calibration loop natively): the slowdown."""
    from quotaql.gate import worktime

    slowdown = _calibration() / native_ns
    if slowdown > 1:
        clock, factor = worktime.CLOCK, slowdown

        def scaled() -> int:
            return int(clock() / factor)

        worktime.CLOCK = scaled
    return slowdown


# == the child under valgrind: the imports once, then a forked process per run ===============


def _run(job: Job, plan: Mapping[str, Any], go: int, write_ends: Sequence[int]) -> None:
    """In a forked process: wait for the parent's go, drive one app, write what it saw,
    exit (never returns)."""
    import time
    import traceback

    code = 1
    try:
        for end in write_ends:  # the parent's only: its exit is then an end of file here
            os.close(end)
        if os.read(go, 1) != GO:
            code = 3  # never told to go: the parent failed, or is gone
            return
        gc.enable()
        os.environ["QUOTAQL_BENCH_VARIANT"] = job.variant
        gc.collect()
        spec = {
            "query": plan["query"],
            "tenant": plan["tenant"],
            "quotaql": job.variant in plan["quotaql_variants"],
            "concurrency": job.concurrency,
            "warmup": plan["warmup"],
            "requests": job.requests,
        }
        began = time.monotonic()
        if plan["loop"] == "uvloop":
            import uvloop

            result = uvloop.run(_drive(spec))
        else:
            result = asyncio.run(_drive(spec))
        result |= {"pid": os.getpid(), "seconds": time.monotonic() - began}
        path = Path(plan["directory"]) / f"{job.stem}.json"
        path.write_text(json.dumps(result), encoding="utf-8")
        code = 0
    except BaseException:
        print(f"run {job.name} (PID {os.getpid()}) failed:", file=sys.stderr)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _child(plan_path: str) -> None:
    """``python bench_http_work.py --child PLAN``, under callgrind: import what every run
    needs, fork every run at once (each waits for its go), then let them go ``PARALLEL``
    at a time, each bounded by ``RUN_TIMEOUT_S``.

    Forking them all before any runs gives each the same memory to start from: the
    interpreter's costs depend on where objects lie (its method cache is indexed by the
    names' addresses, dicts keyed by objects by theirs), and a process that kept running
    between the forks (collecting, polling) would give each run a layout of its own, and
    the figures a jitter of about 1 %.
    """
    import signal
    import time

    import bench_http_app  # noqa: F401  (the imports every run shares, done before the forks)

    plan = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    if plan["loop"] == "uvloop":
        import uvloop  # noqa: F401
    slowdown = _slow_clock(plan["native_ns"])
    print(f"worker-time clock divided by valgrind's slowdown: {slowdown:.1f}", flush=True)
    jobs = [Job(*job) for job in plan["jobs"]]
    pipes = [os.pipe() for _ in jobs]
    write_ends = [end for _, end in pipes]
    pids = [0] * len(jobs)
    sys.stdout.flush()
    sys.stderr.flush()
    gc.collect()
    gc.disable()  # no collection between the forks
    for index, job in enumerate(jobs):
        pid = os.fork()
        if pid == 0:
            _run(job, plan, pipes[index][0], write_ends)
        pids[index] = pid
    gc.enable()
    for end, _ in pipes:
        os.close(end)
    (Path(plan["directory"]) / PIDS_FILE).write_text("".join(f"{pid}\n" for pid in pids))
    waiting = list(range(len(jobs)))
    running: dict[int, float] = {}  # index -> deadline
    failed = ""
    try:
        while (waiting or running) and not failed:
            while waiting and len(running) < PARALLEL:
                index = waiting.pop(0)
                os.write(write_ends[index], GO)
                running[index] = time.monotonic() + RUN_TIMEOUT_S
            time.sleep(POLL_S)
            for index, deadline in list(running.items()):
                done, status = os.waitpid(pids[index], os.WNOHANG)
                if done:
                    del running[index]
                    if (code := os.waitstatus_to_exitcode(status)) != 0:
                        failed = f"run {jobs[index].name} (PID {done}) exited with code {code}"
                elif time.monotonic() > deadline:
                    failed = (
                        f"run {jobs[index].name} (PID {pids[index]}) did not end within"
                        f" {RUN_TIMEOUT_S:g} s"
                    )
    finally:
        # A failure, or an exception here: every run not reaped goes, by its PID.
        for index in (*running, *waiting):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[index], signal.SIGKILL)
            os.waitpid(pids[index], 0)
    if failed:
        sys.exit(failed)


# == the parent: the child under callgrind, checks, the report ===============================


class Count(NamedTuple):
    """What a run executed in all (callgrind's total, the imports before its fork included),
    its wall time under valgrind, and what it saw."""

    instructions: int
    seconds: float
    seen: dict[str, Any]


def callgrind_total(path: Path) -> int:
    """The total of callgrind's out file (its ``summary:`` or ``totals:`` line, Ir)."""
    with path.open(encoding="utf-8", errors="replace") as out:
        for line in out:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{path}: no summary: or totals: line")


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:] or "<empty log>"
    except OSError:
        return "<no log>"


def _parent_of(pid: int) -> int | None:
    """The parent PID of ``pid`` (Linux ``/proc``), or None when it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _kill_runs(directory: Path, child: int) -> None:
    """SIGKILL to the PID of every run the child forked that still runs (its parent reaps it)."""
    import signal

    try:
        pids = [int(line) for line in (directory / PIDS_FILE).read_text().split()]
    except OSError:
        return
    for pid in pids:
        if _parent_of(pid) == child:  # still the child's: not a PID reused since
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def run_child(
    directory: Path, env: Mapping[str, str], jobs: Sequence[Job], plan: Mapping[str, Any]
) -> dict[Job, Count]:
    """The child under callgrind and its runs; each run's total and what it saw."""
    import subprocess

    plan_path = directory / "plan.json"
    plan_path.write_text(json.dumps({**plan, "jobs": jobs}), encoding="utf-8")
    log_path = directory / "child.log"
    command = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={directory}/callgrind.%p",
        sys.executable, str(Path(__file__).resolve()), "--child", str(plan_path),
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,  # Ctrl-C reaches the bench, which kills it by PID
        )
    try:
        process.wait(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"the child under valgrind (PID {process.pid}) did not end within"
            f" {CHILD_TIMEOUT_S:g} s; killed:\n{_tail(log_path)}"
        ) from None
    finally:
        if process.poll() is None:  # a timeout, or Ctrl-C: its runs first, then the child
            _kill_runs(directory, process.pid)
            process.kill()
            process.wait(timeout=KILL_WAIT_S)
    if process.returncode != 0:
        raise RuntimeError(
            f"the child under valgrind exited with code {process.returncode}:\n{_tail(log_path)}"
        )
    counts = {}
    for job in jobs:
        seen = json.loads((directory / f"{job.stem}.json").read_text(encoding="utf-8"))
        total = callgrind_total(directory / f"callgrind.{seen['pid']}")
        counts[job] = Count(total, seen["seconds"], seen)
    return counts


def check_run(job: Job, seen: Mapping[str, Any], warmup: int, quotaql: bool) -> None:
    """The app served every request the run sent; quotaql decided each one from the
    variant's storage (none from a fallback), allowed, with no backend error or breaker
    change; the cached baseline took every request but the first from Strawberry's caches."""
    from bench_http import check_caches

    stats = seen["stats"]
    sent = 1 + warmup + job.requests
    if seen["requests"] != sent or stats["requests"] != sent:
        raise RuntimeError(f"{job.name}: sent {sent:,}, the app served {stats['requests']:,}")
    if job.variant == "cached":
        # The run's first request fills both caches (one miss each; forked before any
        # request, the run starts with them empty): every later one is a hit.
        first = {"parse": [0, 1], "validation": [0, 1]}
        check_caches(first, stats["caches"], sent - 1, sent - 1, job.name)
    limiter = stats["limiter"]
    if not quotaql:
        if limiter is not None:
            raise RuntimeError(f"{job.name}: a limiter's stats without quotaql: {limiter}")
        return
    problems = []
    if limiter["decisions"] != {job.variant: sent}:
        problems.append(f"decisions {limiter['decisions']}, not {{{job.variant!r}: {sent}}}")
    if limiter["refused"]:
        problems.append(f"{limiter['refused']:,} refused")
    if limiter["backend_errors"]:
        problems.append(f"backend errors: {limiter['backend_errors']}")
    if limiter["circuit_changes"]:
        problems.append("the circuit breaker changed state")
    if problems:
        raise RuntimeError(f"{job.name}: not every request was an allowed decision: {problems}")


def _valgrind_version() -> str:
    import subprocess

    result = subprocess.run(
        ["valgrind", "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    return result.stdout.strip() or "valgrind"


def main() -> list[Target]:
    import shutil
    import tempfile
    import time
    from importlib.metadata import version

    from _harness import Target, fmt_int, print_table, print_targets
    from bench_http import LABELS, QUERY, check_replies, uvicorn_flavour
    from bench_http_app import CONFIG_TOML, QUOTAQL_VARIANTS, TENANT, VARIANTS

    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from tests.support.servers import RedisServer

    for binary in ("valgrind", "redis-server"):
        if shutil.which(binary) is None:
            raise RuntimeError(f"{binary} is not on PATH (apt-get install -y {binary})")
    run = settings()
    loop, _http = uvicorn_flavour()
    print(
        f"{'QUICK (QUOTAQL_BENCH_QUICK=1): ' if run.quick else ''}{_valgrind_version()}"
        f" --tool=callgrind; per run: 1 request read in full, {run.warmup} warm-up, then"
        f" {run.requests} counted (none in the warm-up's own run), at C="
        + ", ".join(str(c) for c in run.concurrencies)
        + f"; {PARALLEL} runs at a time, forked after the imports"
    )
    print(
        f"in process, a bare ASGI loop on {loop} (no sockets, no uvicorn); strawberry-graphql"
        f" {version('strawberry-graphql')}, graphql-core {version('graphql-core')}, quotaql"
        f" {version('quotaql')}; PYTHONHASHSEED={HASH_SEED}"
    )
    print(f"query: POST /graphql {json.dumps({'query': QUERY})}, X-API-Key {TENANT}")

    started = time.monotonic()
    jobs = [
        Job(variant, concurrency, requests)
        for variant in VARIANTS
        for concurrency in run.concurrencies
        for requests in (run.requests, 0)
    ]
    # The longest first (the counted runs, Redis the slowest): the two lanes end together.
    jobs.sort(key=lambda job: (-job.requests, job.variant != "redis", job.concurrency))
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quotaql-work-")))
        config = directory / "quotaql.toml"
        config.write_text(CONFIG_TOML, encoding="utf-8")
        server = stack.enter_context(RedisServer(startup_timeout=REDIS_START_TIMEOUT_S))
        redis_version = server.info("server")["redis_version"]
        print(
            f"redis variant: a private redis-server {redis_version} (PID {server.pid}, port"
            f" {server.port}) outside valgrind, its own instructions NOT counted; storage"
            f" timeout {VALGRIND_STORAGE_TIMEOUT_S:g} s"
        )
        env = {
            **os.environ,
            "PYTHONHASHSEED": HASH_SEED,
            "QUOTAQL_BENCH_CONFIG": str(config),
            "QUOTAQL_BENCH_REDIS_URL": server.url,
            "QUOTAQL_BENCH_TIMEOUT": f"{VALGRIND_STORAGE_TIMEOUT_S:g}",
            "QUOTAQL_BENCH_SPLIT": "0",
        }
        plan = {
            "directory": str(directory),
            "query": QUERY,
            "tenant": TENANT,
            "quotaql_variants": QUOTAQL_VARIANTS,
            "warmup": run.warmup,
            "loop": loop,
            "native_ns": _calibration(),
        }
        counts = run_child(directory, env, jobs, plan)
    for job, count in counts.items():
        check_run(job, count.seen, run.warmup, job.variant in QUOTAQL_VARIANTS)
    # Each run's first response, parsed: as bench_http checks its servers' replies.
    cost = check_replies([(job.name, job.variant, c.seen["first"]) for job, c in counts.items()])
    print(
        f"checked: {sum(c.seen['requests'] for c in counts.values()):,} responses in"
        f" {len(counts)} runs, each 200 with the data of no limiting (10 products with"
        " reviews) and no errors; quotaql: every decision from its storage, allowed,"
        f" requestedQueryCost {fmt_int(cost.get('requestedQueryCost'))}, actualQueryCost"
        f" {fmt_int(cost.get('actualQueryCost'))} (refunded)\n"
    )

    per_request = {
        (job.variant, job.concurrency): (
            count.instructions - counts[job._replace(requests=0)].instructions
        )
        / job.requests
        for job, count in counts.items()
        if job.requests
    }
    rows = []
    for variant in VARIANTS:
        cells = [LABELS[variant]]
        for concurrency in run.concurrencies:
            mine, none = per_request[variant, concurrency], per_request["none", concurrency]
            cached = per_request["cached", concurrency]
            cells += [
                fmt_int(round(mine)),
                f"{mine - none:+,.0f}",
                f"{mine / none:.4f}",
                f"{mine / cached:.4f}",
            ]
        rows.append(cells)
    print_table(
        [
            "in process, POST /graphql, shop query",
            *(
                f"C={concurrency} {column}"
                for concurrency in run.concurrencies
                for column in ("instructions/req", "over none", "/ none", "/ cached")
            ),
        ],
        rows,
        title=(
            "Instructions per request (callgrind: (total with the counted requests - total"
            f" with the warm-up alone) / {run.requests}); '/ none' and '/ cached' are the"
            " work ratios to no limiting and to the cached baseline. The redis-server's own"
            " instructions are not counted"
        ),
    )
    slowest = max(counts.items(), key=lambda item: item[1].seconds)
    print(
        f"runs: {len(counts)}, the slowest {slowest[1].seconds:.0f} s under valgrind"
        f" ({slowest[0].name}); section time {time.monotonic() - started:.0f} s\n"
    )

    skip = "" if TARGET_CONCURRENCY in run.concurrencies else "quick run: C=1 only"

    def work_ratio(variant: str, baseline: str) -> float | None:
        if skip:
            return None
        return per_request[variant, TARGET_CONCURRENCY] / per_request[baseline, TARGET_CONCURRENCY]

    targets = [
        Target(
            f"work per request, {variant} / {baseline} (instructions, C={TARGET_CONCURRENCY})",
            work_ratio(variant, baseline),
            bound,
            op="<=",
            skip_reason=skip,
        )
        for baseline, variant, bound in (
            ("none", "memory", 1 / MEMORY_RATIO_MIN),
            ("none", "redis", 1 / REDIS_RATIO_MIN),
            ("cached", "memory", MEMORY_CACHED_WORK_MAX),
            ("cached", "redis", REDIS_CACHED_WORK_MAX),
        )
    ]
    print(
        "An instruction analogue of bench_http's wrk targets (memory >= 0.97 and Redis >= 0.92"
        " as req/s ratios; here <= 1/0.97 and <= 1/0.92 against no limiting, and"
        f" <= {MEMORY_CACHED_WORK_MAX:g} and <= {REDIS_CACHED_WORK_MAX:g} against the cached"
        " baseline), not those targets: instructions are not time (cache misses, stalls,"
        " system calls and waits are not in them).\n"
    )
    print_targets(targets, title="Targets (a report: a miss does not fail the run)")
    return targets


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        sys.exit("run it with bench/run.py http_work (it runs itself as --child PLAN)")
