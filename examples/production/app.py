"""quotaql in production: FastAPI + Strawberry + Redis, several uvicorn workers, Prometheus.

    rm -rf /run/quotaql-metrics && mkdir -p /run/quotaql-metrics
    PROMETHEUS_MULTIPROC_DIR=/run/quotaql-metrics REDIS_URL=redis://127.0.0.1:6379/0 \
      QUOTAQL_CONFIG=quotaql.toml QUOTAQL_API_KEYS='{"sk_live_4f7a": "acme"}' \
      uvicorn app:app --workers 4 --log-config logging.yaml

docs/production.md explains every line; tests/examples/test_production.py runs this file.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING

import strawberry
from fastapi import FastAPI
from strawberry.fastapi import GraphQLRouter

from quotaql.asgi import BodyLimit
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


# -- your schema (here, a small catalog) --------------------------------------------------


@strawberry.type
class Review:
    stars: int


@strawberry.type
class Product:
    id: strawberry.ID
    name: str

    @strawberry.field
    def reviews(self, first: int = 5) -> list[Review]:
        return [Review(stars=1 + i % 5) for i in range(min(first, 20))]


@strawberry.type
class Query:
    @strawberry.field
    def products(self, first: int = 10) -> list[Product]:
        return [Product(id=strawberry.ID(str(i)), name=f"Product {i}") for i in range(first)]


# -- quotaql ------------------------------------------------------------------------------

# One Redis for every worker and every server: the budgets are shared.
storage = AsyncRedisStorage.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
# API key -> tenant (from your secret store; here a JSON object in the environment): with a
# resolver, [tenants] names tenants, never keys, and logs and metrics may show the names.
api_keys: dict[str, str] = json.loads(os.environ.get("QUOTAQL_API_KEYS", "{}"))
# Each worker records its own metrics; under PROMETHEUS_MULTIPROC_DIR, /metrics serves them
# summed (docs/operations.md). Tenants named in the allowlist get a label of their own.
metrics = PrometheusMetrics(tenant_allowlist=["acme", "globex"], top_tenants=20)
limiter = CostLimiter.from_config(
    os.environ.get("QUOTAQL_CONFIG", "quotaql.toml"),
    storage=storage,
    metrics=metrics,
    key_resolver=lambda key, context: api_keys.get(key),
)
schema = strawberry.Schema(query=Query, extensions=[limiter])
# Checked at import: a quotaql.toml whose weights or field quotas name what the schema does
# not have stops the worker from starting, and hot reloads are checked against it.
limiter.gate.check(schema)


@contextlib.asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    await limiter.gate.astart()  # a Redis that may evict budgets: the worker does not start
    yield
    await limiter.gate.aflush()  # the refunds still waiting are applied
    await storage.close()


api = FastAPI(lifespan=lifespan)
api.include_router(GraphQLRouter(schema), prefix="/graphql")
api.mount("/metrics", metrics_app())
# A request body past 64 KB, or a JSON body nested or sized to stall its parser, is refused
# before anything reads it (413 / 400), its address charged.
app = BodyLimit(api, max_bytes=64_000, limiter=limiter)
