"""The demo shop with its budgets in Redis Cluster (run from the repository root).

    QUOTAQL_REDIS_CLUSTER=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 \\
        uvicorn examples.redis_cluster.app:app --port 8002

``QUOTAQL_REDIS_CLUSTER`` lists some of the cluster's nodes (``host:port``, comma-separated;
one reachable node is enough, the client discovers the others). ``QUOTAQL_CONFIG`` points
at another ``quotaql.toml`` (default: the demo's).

How the budgets spread over the cluster: a tenant's quotas are the fields of one hash,
``quotaql:{t:<tenant>}:~q``. Redis Cluster hashes only the part between braces (the hash
tag), so every key of one tenant (a user's ``per_user`` hash too) lands in one slot, and the
one Lua script that checks and debits them all at once (its tier's ``tenant`` quota, an
operation quota such as ``op:ExportOrders``) is a single-slot call: no ``CROSSSLOT`` error.
Different tenants hash to different slots, so tenants spread over the masters. A
``[global]`` quota, one budget for all tenants, is in ``quotaql:{global}:~q``, on a slot of
its own: quotaql takes it with a second call after the tenant's, and gives the tenant's
debit back if it refuses.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from redis.asyncio.cluster import ClusterNode, RedisCluster
from starlette.applications import Starlette
from starlette.routing import Mount

from quotaql.demo.shop import create_app as create_shop
from quotaql.storage.redis import AsyncRedisStorage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

DEFAULT_NODES = "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"


def startup_nodes(spec: str) -> list[ClusterNode]:
    """``"10.0.0.1:7000,10.0.0.2:7000"`` -> the nodes ``RedisCluster`` starts from."""
    nodes = []
    for address in spec.split(","):
        host, _, port = address.strip().rpartition(":")
        nodes.append(ClusterNode(host, int(port)))
    return nodes


def create_app(nodes: str | None = None, config_path: str | None = None) -> Starlette:
    """The shop, its budgets in the cluster at ``nodes`` (default: ``$QUOTAQL_REDIS_CLUSTER``)."""
    spec = nodes or os.environ.get("QUOTAQL_REDIS_CLUSTER") or DEFAULT_NODES
    client = RedisCluster(startup_nodes=startup_nodes(spec))  # connects on first use
    # The storage talks to the same nodes through its own connections, with `timeout` as
    # the bound of each call and no retries: a slow or dead cluster must not stall
    # requests. Failures go to the limiter's breaker and `on_backend_error` (quotaql.toml).
    # The first call also discovers the cluster's slots: give a loaded host some room with
    # QUOTAQL_REDIS_TIMEOUT (seconds).
    timeout = float(os.environ.get("QUOTAQL_REDIS_TIMEOUT") or 0.1)
    storage = AsyncRedisStorage(client, timeout=timeout)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await storage.close()  # uvicorn is stopping: close the cluster connections

    shop = create_shop(storage=storage, config_path=config_path or os.environ.get("QUOTAQL_CONFIG"))
    app = Starlette(routes=[Mount("/", shop)], lifespan=lifespan)
    app.state.storage = storage
    return app


app = create_app()
