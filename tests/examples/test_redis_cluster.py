"""examples/redis_cluster: the demo shop's budgets in a real 3-master Redis Cluster, under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from quotaql.demo.shop import CONFIG as DEMO_CONFIG
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis.cluster

    from tests.support.servers import RedisCluster

APP = Path(__file__).resolve().parents[2] / "examples" / "redis_cluster" / "app.py"
SHOPPERS = 200
# Free tier: 300 points, 30 a second. 20 products x (2 + 5 reviews x 1) = 140 up front;
# products have 1-7 reviews, so 110 in the end: each call spends 110 net.
PRODUCTS = "{ products(first: 20) { name reviews(first: 5) { stars } } }"
# Pro tier: 3000 points, and an ExportOrders operation quota of 100. 10 + 20 x 1 = 30.
EXPORT = "mutation ExportOrders { exportOrders(first: 20) { id } }"


def load_module() -> Any:
    """The example module, loaded from its file as ``uvicorn examples.redis_cluster.app:app``."""
    spec = importlib.util.spec_from_file_location("redis_cluster_example", APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop("redis_cluster_example", None)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def serve(app: Any) -> Iterator[UvicornServer]:
    """Run ``app`` under uvicorn; close its storage in uvicorn's loop before stopping.

    (UvicornServer runs without lifespan, so the example's own shutdown hook does not run.)
    """
    loops: list[asyncio.AbstractEventLoop] = []

    async def recording_loop(scope: Any, receive: Any, send: Any) -> None:
        loops.append(asyncio.get_running_loop())
        await app(scope, receive, send)

    with UvicornServer(recording_loop) as server:
        try:
            yield server
        finally:
            if loops:
                future = asyncio.run_coroutine_threadsafe(app.state.storage.close(), loops[0])
                future.result(timeout=10)


def post(server: UvicornServer, query: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/graphql", json={"query": query}, headers={"X-API-Key": key}, timeout=10
    )


def tenant_key(tenant: str) -> str:
    """The hash of a tenant's quotas (a known API key is the subject key:<tenant>)."""
    return f"quotaql:{{t:key:{tenant}}}:~q"


def no_backend_errors(server: UvicornServer) -> bool:
    """No Redis call failed (a CROSSSLOT would be a backend error, then a local decision)."""
    metrics = httpx.get(f"{server.url}/metrics/", timeout=10).text
    assert "quotaql_requests_total" in metrics
    return not any(line.startswith("quotaql_backend_errors_total{") for line in metrics.split("\n"))


def holder(cluster_client: redis.cluster.RedisCluster, key: str, quota: str = "tenant") -> int:
    """The port of the master that holds the state of ``quota`` in the hash ``key``: the
    slot's owner, which really has it."""
    node = cluster_client.get_node_from_key(key)
    slot = int(cluster_client.execute_command("CLUSTER KEYSLOT", key, target_nodes=node))
    assert slot == cluster_client.keyslot(key)
    with cluster_client.get_redis_connection(node) as direct:  # a plain connection to it
        assert direct.hexists(key, quota), f"{key} {quota} is not on {node.port}"
    return int(node.port)


@pytest.fixture
def cluster_env(
    redis_cluster: RedisCluster,
    cluster_client: redis.cluster.RedisCluster,  # every master emptied first
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> RedisCluster:
    nodes = ",".join(f"{redis_cluster.host}:{port}" for port in redis_cluster.ports)
    monkeypatch.setenv("QUOTAQL_REDIS_CLUSTER", nodes)
    # A loaded CI host can take over 0.1 s for the first call (slot discovery): a timeout
    # would be a backend error, which these tests count as a failure.
    monkeypatch.setenv("QUOTAQL_REDIS_TIMEOUT", "2")
    # The demo's configuration, and the shoppers' API keys as known free tenants (an
    # unknown key would count as the client's address: one subject for them all).
    config = tmp_path / "quotaql.toml"
    shoppers = "".join(f'[tenants.shopper-{i}]\ntier = "free"\n' for i in range(SHOPPERS))
    config.write_text(DEMO_CONFIG.read_text(encoding="utf-8") + shoppers, encoding="utf-8")
    monkeypatch.setenv("QUOTAQL_CONFIG", str(config))
    return redis_cluster


def one_tenant_per_master(cluster: RedisCluster) -> dict[int, str]:
    """A tenant whose keys land on each master: the tag ``t:<tenant>`` picks the slot."""
    tenants: dict[int, str] = {}
    for index in range(SHOPPERS):
        tenant = f"shopper-{index}"
        tenants.setdefault(cluster.node_for_key(tenant_key(tenant)), tenant)
        if len(tenants) == len(cluster.ports):
            return tenants
    raise AssertionError("no tenant for some master")


def test_tenants_spread_over_the_masters_and_get_429s(
    cluster_env: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    tenants = one_tenant_per_master(cluster_env)
    with serve(load_module().app) as server:
        for tenant in tenants.values():
            statuses = []
            while 429 not in statuses:  # each call spends 110 net; 30 a second come back
                response = post(server, PRODUCTS, tenant)
                statuses.append(response.status_code)
                assert len(statuses) <= 10, statuses
            assert statuses[:2] == [200, 200]
            body = response.json()
            assert body["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
            assert int(response.headers["Retry-After"]) >= 1
        allowed = post(server, PRODUCTS, "one-more").json()["extensions"]["cost"]
        assert (allowed["requestedQueryCost"], allowed["actualQueryCost"]) == (140, 110)
        assert no_backend_errors(server)
    where = {tenant: holder(cluster_client, tenant_key(tenant)) for tenant in tenants.values()}
    assert where == {tenant: port for port, tenant in tenants.items()}
    assert len(set(where.values())) == 3  # every master holds budgets


def test_an_operation_quota_shares_the_tenant_slot(
    cluster_env: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    with serve(load_module().app) as server:
        responses = [post(server, EXPORT, "demo-integration") for _ in range(4)]
        assert [r.status_code for r in responses] == [200, 200, 200, 429]  # 100 / 30
        assert len(responses[0].json()["data"]["exportOrders"]) == 20
        (error,) = responses[3].json()["errors"]
        assert error["extensions"]["code"] == "RATE_LIMITED"
        assert error["extensions"]["quota"] == "op:ExportOrders"  # the tighter of the two
        assert responses[3].headers["RateLimit-Policy"].count(";q=") == 2  # both quotas
        assert no_backend_errors(server)  # one script call on two keys: no CROSSSLOT
    # Both quotas are fields of the tenant's one hash: one key, one slot. The operation
    # quota (2 a second) still holds the 90 it lost.
    tenant = tenant_key("demo-integration")
    assert holder(cluster_client, tenant, "op:ExportOrders") == (
        cluster_client.get_node_from_key(tenant).port
    )


def test_a_global_quota_is_a_second_call_on_its_own_slot(
    cluster_env: RedisCluster, cluster_client: redis.cluster.RedisCluster, tmp_path: Path
) -> None:
    config = tmp_path / "global.toml"
    # A slow refill, so that the global bucket's key outlives the test (full keys expire).
    global_quota = "\n[global]\ncapacity = 100000\nrefill_per_second = 1\n"
    shoppers = Path(os.environ["QUOTAQL_CONFIG"]).read_text(encoding="utf-8")  # cluster_env's
    config.write_text(shoppers + global_quota, encoding="utf-8")
    global_master = cluster_env.node_for_key("quotaql:{global}:~q")
    tenants = one_tenant_per_master(cluster_env)
    elsewhere = next(tenant for port, tenant in tenants.items() if port != global_master)
    with serve(load_module().create_app(config_path=str(config))) as server:
        assert post(server, PRODUCTS, elsewhere).status_code == 200
        response = post(server, PRODUCTS, elsewhere)  # 220 spent: its key lives for 7 s
        assert response.status_code == 200
        assert "global" in response.headers["RateLimit-Policy"]
        assert no_backend_errors(server)
    assert holder(cluster_client, "quotaql:{global}:~q", "global") == global_master
    assert holder(cluster_client, tenant_key(elsewhere)) != global_master
