"""No free work: what a refusal from the deny cache costs against the Redis round trip it
replaces, and what the static pass costs against the validation it runs before."""

from __future__ import annotations

import sys
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

from graphql import build_schema, parse, validate

from _harness import (
    Target,
    fmt_ratio,
    fmt_us,
    measure_interleaved,
    print_table,
    print_targets,
    ratio,
)
from bench_cost import QUERIES, corpus_dir, load_cases
from quotaql.config import load_config
from quotaql.cost_analysis.model import SAFE_LIMITS
from quotaql.cost_analysis.screen import screen
from quotaql.gate import Gate
from quotaql.storage import Debit
from quotaql.storage.redis import RedisStorage

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from tests.support.servers import RedisServer  # noqa: E402

DENY_MAX_US = 20.0  # one refusal from the deny cache, identity and error included
SCREEN_RATIO_MAX = 0.02  # the static pass / validate, on every corpus operation
DENIALS = 10_000  # refusals counted against Redis's own command statistics

CONFIG = """
[limits]
reload_interval = 0
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tenants.acme]
tier = "free"
"""
EXPENSIVE = "{ hello }"


def _request(key: str) -> dict[str, Any]:
    return {"type": "http", "client": ("203.0.113.9", 40000),
            "headers": [(b"x-api-key", key.encode())]}  # fmt: skip


def bench_deny(server: RedisServer, tmp: Path) -> list[Target]:
    """``Gate.begin`` for a subject Redis refused (the deny cache answers), against one
    decision of ``RedisStorage`` (what the same request cost before: a Redis round trip)."""
    path = tmp / "quotaql.toml"
    path.write_text(CONFIG, encoding="utf-8")
    schema = build_schema("type Query { hello: String }")
    storage = RedisStorage.from_url(server.url, timeout=1.0)
    gate = Gate(load_config(path), storage=storage)
    refused = _request("acme")
    for _ in range(101):  # 100 points: the 101st is refused by Redis, and remembered
        op = gate.admit(schema, parse(EXPENSIVE), request=refused)
    assert op.code == "RATE_LIMITED", op.code
    denied = gate.begin(request=refused)
    assert denied.denied, "the deny cache did not answer"
    quota = gate.config.tier_of("acme").quota
    with server.client() as client:
        timings = measure_interleaved(
            {
                "deny": partial(gate.begin, request=refused),
                "redis": partial(storage.acquire, Debit("key:other", 0.0, [quota])),
                "ping": client.ping,
            }
        )
        calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
        for _ in range(DENIALS):
            assert gate.begin(request=refused).denied
        redis_calls = client.info("commandstats")["cmdstat_evalsha"]["calls"] - calls
    storage.close()
    deny_us, redis_us = timings["deny"].median_us, timings["redis"].median_us
    rows = [
        ["refusal from the deny cache (Gate.begin)", fmt_us(deny_us)],
        ["one RedisStorage decision (the round trip it replaces)", fmt_us(redis_us)],
        ["PING", fmt_us(timings["ping"].median_us)],
        ["deny / redis decision", fmt_ratio(ratio(deny_us, redis_us))],
        [f"script calls during {DENIALS:,} more refusals", str(redis_calls)],
    ]
    print_table(["deny cache", "median"], rows, title="A refused subject's next request")
    return [
        Target("deny-cache refusal µs", deny_us, DENY_MAX_US),
        Target(f"script calls of {DENIALS:,} deny-cache refusals", float(redis_calls), 0.0),
    ]


def bench_screen() -> list[Target]:
    corpus = corpus_dir()
    schema = build_schema((corpus / "schema.graphql").read_text(encoding="utf-8"))
    targets = []
    rows = []
    for case in load_cases(corpus):
        timings = measure_interleaved(
            {
                "screen": partial(screen, case.document, SAFE_LIMITS),
                "validate": partial(validate, schema, case.document),
            }
        )
        value = ratio(timings["screen"].median_us, timings["validate"].median_us)
        rows.append([case.name, fmt_us(timings["screen"].median_us),
                     fmt_us(timings["validate"].median_us), fmt_ratio(value)])  # fmt: skip
        targets.append(Target(f"screen/validate {case.name}", value, SCREEN_RATIO_MAX))
    print_table(["corpus", "static pass", "validate", "ratio"], rows,
                title="The static pass before validation")  # fmt: skip
    return targets


def main() -> list[Target]:
    import tempfile

    print(f"quotaql {version('quotaql')}, graphql-core {version('graphql-core')}; {QUERIES}")
    targets = bench_screen()
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as server:
        print(f"private redis-server on {server.host}:{server.port} (pid {server.pid})\n")
        targets += bench_deny(server, Path(tmp))
    print_targets(targets, title="Targets (a report: a miss does not fail the run)")
    return targets
