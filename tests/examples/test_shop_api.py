"""examples/shop_api: the demo's app on its own under uvicorn, in memory and on Redis."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from quotaql.demo.run import SCRAPE
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from tests.support.servers import RedisServer

APP = Path(__file__).resolve().parents[2] / "examples" / "shop_api" / "app.py"


def load_app() -> Any:
    spec = importlib.util.spec_from_file_location("shop_api_example", APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop("shop_api_example", None)
    spec.loader.exec_module(module)
    return module.app


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_the_example_serves_and_limits(
    backend: str, monkeypatch: pytest.MonkeyPatch, fresh_redis_server: RedisServer
) -> None:
    if backend == "redis":
        monkeypatch.setenv("QUOTAQL_REDIS_URL", fresh_redis_server.url)
    else:
        monkeypatch.delenv("QUOTAQL_REDIS_URL", raising=False)
    with UvicornServer(load_app()) as server:
        headers = {"X-API-Key": "demo-scraper"}
        first = httpx.post(f"{server.url}/graphql", json={"query": SCRAPE}, headers=headers)
        second = httpx.post(f"{server.url}/graphql", json={"query": SCRAPE}, headers=headers)
        assert first.status_code == 200
        assert first.json()["extensions"]["cost"]["requestedQueryCost"] == 280
        assert second.status_code == 429
        assert second.json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
        assert "quotaql_requests_total" in httpx.get(f"{server.url}/metrics/").text
    if backend == "redis":
        with fresh_redis_server.client() as client:
            assert client.hexists("quotaql:{t:key:demo-scraper}:~q", "tenant")
