"""The gate's start on a Redis that may evict its keys (private redis-servers under
``maxmemory`` with ``allkeys-lru``): a sync storage fails the gate's construction, an async one
``Gate.astart`` (the ASGI lifespan), unless ``[redis] allow_eviction``; a reload that allows
it lets a refused storage run; ``quotaql_redis_eviction`` follows the verdict."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.errors import EvictionRefused
from quotaql.gate import Gate
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.storage.eviction import RECHECK_SECONDS
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage
from tests.support.servers import RedisServer, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SCHEMA = build_schema("type Query { hello: String }")
HELLO = parse("{ hello }")
REQUEST = {"type": "http", "client": ("203.0.113.9", 5123), "headers": []}
TOML = """
[limits]
reload_interval = 0.05
[tiers.free]
capacity = 10
refill_per_second = 1
"""
ALLOW = """
[redis]
allow_eviction = true
"""


@pytest.fixture
def evicting() -> Iterator[RedisServer]:
    args = ["--maxmemory", str(64 * 1024 * 1024), "--maxmemory-policy", "allkeys-lru"]
    with RedisServer(args) as server:
        yield server


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(text, encoding="utf-8")
    return path


def eviction(registry: CollectorRegistry, policy: str, verdict: str) -> float | None:
    labels = {"policy": policy, "verdict": verdict}
    return registry.get_sample_value(names.REDIS_EVICTION, labels)


def test_a_sync_storage_on_an_evicting_redis_fails_the_gate_s_construction(
    tmp_path: Path, evicting: RedisServer
) -> None:
    storage = RedisStorage.from_url(evicting.url, timeout=2.0)
    try:
        with pytest.raises(EvictionRefused, match="maxmemory-policy allkeys-lru"):
            Gate(load_config(write(tmp_path, TOML)), storage=storage)
    finally:
        storage.close()


def test_allow_eviction_builds_the_gate_and_exports_the_verdict(
    tmp_path: Path, evicting: RedisServer
) -> None:
    registry = CollectorRegistry()
    storage = RedisStorage.from_url(evicting.url, timeout=2.0)
    try:
        gate = Gate(
            load_config(write(tmp_path, TOML + ALLOW)),
            storage=storage,
            metrics=PrometheusMetrics(registry),
        )
        # Checked at construction, before any operation.
        assert eviction(registry, "allkeys-lru", names.EVICTION_ALLOWED) == 1
        op = gate.admit(SCHEMA, HELLO, request=REQUEST)
    finally:
        storage.close()
    assert not op.refused
    assert op.decision is not None
    assert op.decision.source == "redis"


def test_a_redis_not_reached_at_construction_is_checked_at_the_first_call(
    tmp_path: Path,
) -> None:
    port = free_port()
    storage = RedisStorage.from_url(f"redis://127.0.0.1:{port}/0", timeout=0.5)
    try:
        gate = Gate(load_config(write(tmp_path, TOML)), storage=storage)  # does not raise
        assert storage.eviction.check is None
        args = ["--maxmemory", str(64 * 1024 * 1024), "--maxmemory-policy", "volatile-lfu"]
        with RedisServer(args, port=port):
            op = gate.admit(SCHEMA, HELLO, request=REQUEST)
    finally:
        storage.close()
    # The first call found the evicting Redis: refused, and the fail mode (local) decided.
    assert op.decision is not None
    assert op.decision.source == "fallback"
    check = storage.eviction.check
    assert check is not None
    assert (check.policy, check.verdict) == ("volatile-lfu", names.EVICTION_REFUSED)


def test_astart_refuses_an_async_storage_on_an_evicting_redis(
    tmp_path: Path, evicting: RedisServer
) -> None:
    async def start(text: str) -> BaseException | None:
        storage = AsyncRedisStorage.from_url(evicting.url, timeout=2.0)
        try:
            gate = Gate(load_config(write(tmp_path, text)), storage=storage)
            await gate.astart()
        except EvictionRefused as refused:
            return refused
        finally:
            await storage.close()
        return None

    refused = asyncio.run(start(TOML))
    assert isinstance(refused, EvictionRefused)
    assert f"{evicting.host}:{evicting.port}" in str(refused)
    assert asyncio.run(start(TOML + ALLOW)) is None


def test_a_reload_that_allows_eviction_lets_a_refused_storage_run(
    tmp_path: Path, evicting: RedisServer
) -> None:
    path = write(tmp_path, TOML)
    registry = CollectorRegistry()

    async def main() -> list[Any]:
        storage = AsyncRedisStorage.from_url(evicting.url, timeout=2.0)
        try:
            gate = Gate.from_config(path, storage=storage, metrics=PrometheusMetrics(registry))
            sources = [(await gate.admit_async(SCHEMA, HELLO, request=REQUEST)).decision]
            assert eviction(registry, "allkeys-lru", names.EVICTION_REFUSED) == 1  # a scrape
            path.write_text(TOML + ALLOW, encoding="utf-8")
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # the reload takes two looks at the file
                await asyncio.sleep(0.06)
                sources.append((await gate.admit_async(SCHEMA, HELLO, request=REQUEST)).decision)
                if sources[-1] is not None and sources[-1].source == "redis":
                    break
            return sources
        finally:
            await storage.close()

    decisions = asyncio.run(main())
    assert decisions[0] is not None
    assert decisions[0].source == "fallback"  # refused: the fail mode decided
    assert decisions[-1] is not None
    assert decisions[-1].source == "redis"
    assert eviction(registry, "allkeys-lru", names.EVICTION_ALLOWED) == 1
    assert eviction(registry, "allkeys-lru", names.EVICTION_REFUSED) == 0


def test_the_gauge_follows_a_policy_fixed_while_the_storage_refused(
    tmp_path: Path, evicting: RedisServer
) -> None:
    registry = CollectorRegistry()

    async def main() -> tuple[float | None, Any]:
        storage = AsyncRedisStorage.from_url(evicting.url, timeout=2.0)
        try:
            gate = Gate(
                load_config(write(tmp_path, TOML)),
                storage=storage,
                metrics=PrometheusMetrics(registry),
            )
            await gate.admit_async(SCHEMA, HELLO, request=REQUEST)
            refused = eviction(registry, "allkeys-lru", names.EVICTION_REFUSED)
            with evicting.client() as admin:
                admin.config_set("maxmemory-policy", "noeviction")
            await asyncio.sleep(RECHECK_SECONDS)
            op = await gate.admit_async(SCHEMA, HELLO, request=REQUEST)
            return refused, op.decision
        finally:
            await storage.close()

    refused, decision = asyncio.run(main())
    assert refused == 1
    assert decision is not None
    assert decision.source == "redis"
    assert eviction(registry, "allkeys-lru", names.EVICTION_REFUSED) == 0
    assert eviction(registry, "noeviction", names.EVICTION_SAFE) == 1
