"""The demo's shop API on its own, as an ASGI app for uvicorn (run from the repository root).

    uvicorn examples.shop_api.app:app --port 8000

Budgets are in memory, or in Redis when ``QUOTAQL_REDIS_URL`` is set (``redis://...``);
``QUOTAQL_CONFIG`` points at another ``quotaql.toml`` (default: the demo's, with free, pro
and enterprise tiers). GraphQL and GraphiQL answer at ``/graphql``, metrics at ``/metrics/``.
"""

from __future__ import annotations

import os

from quotaql.demo.shop import create_app
from quotaql.storage.redis import AsyncRedisStorage

redis_url = os.environ.get("QUOTAQL_REDIS_URL")
app = create_app(
    storage=AsyncRedisStorage.from_url(redis_url) if redis_url else None,
    config_path=os.environ.get("QUOTAQL_CONFIG") or None,
)
