"""examples/graphql_core: quotaql on a plain graphql-core server, under a real uvicorn."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from quotaql.storage.redis import AsyncRedisStorage
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis

    from tests.support.servers import RedisServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graphql_core"
# Free tier: 100 points, 1 a second. 10 books x (2 + 5 reviews x 1) = 70 up front; two
# reviews each come back, so 10 x (2 + 2) = 40 in the end: 30 refunded.
BOOKS = "{ books(first: 10) { title reviews { stars } } }"
DEEP = "{ books { similar { similar { similar { similar { title } } } } } }"  # depth 6 > 5


def load(name: str) -> Any:
    """The example's module ``name``, loaded from its file (``examples`` is not a package)."""
    module_name = f"graphql_core_example_{name}"
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLE / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop(module_name, None)
    spec.loader.exec_module(module)
    return module


def post(
    server: UvicornServer, query: str, key: str = "reader", variables: dict[str, Any] | None = None
) -> httpx.Response:
    return httpx.post(
        f"{server.url}/graphql",
        json={"query": query, "variables": variables},
        headers={"X-API-Key": key},
        timeout=10,
    )


@pytest.fixture
def server() -> Iterator[UvicornServer]:
    with UvicornServer(load("app").app) as running:  # the module's own app, as uvicorn runs it
        yield running


def test_allowed_query_has_data_cost_and_headers(server: UvicornServer) -> None:
    response = post(server, BOOKS)
    assert response.status_code == 200
    body = response.json()
    assert "errors" not in body
    assert len(body["data"]["books"]) == 10
    assert body["data"]["books"][0] == {"title": "Book 0", "reviews": [{"stars": 5}, {"stars": 4}]}
    cost = body["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 70
    assert cost["actualQueryCost"] == 40
    assert cost["throttleStatus"]["maximumAvailable"] == 100
    assert cost["throttleStatus"]["restoreRate"] == 1
    assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(60, abs=1)
    assert response.headers["RateLimit-Policy"] == '"tenant";q=100;w=100'
    assert response.headers["RateLimit"].startswith('"tenant";r=60;t=')
    assert response.headers["X-RateLimit-Limit"] == "100"
    assert response.headers["X-RateLimit-Remaining"] == "60"
    assert "Retry-After" not in response.headers


def test_over_budget_is_429_with_retry_after(server: UvicornServer) -> None:
    assert post(server, BOOKS).status_code == 200  # 60 left: not enough for another 70
    response = post(server, BOOKS)
    assert response.status_code == 429
    body = response.json()
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    assert error["extensions"]["quota"] == "tenant"
    assert error["message"].startswith("This query costs 70 points but only 6")
    # Between the two calls the bucket refilled a little (1 point a second): 60 and a bit.
    assert error["extensions"]["remaining"] == pytest.approx(60, abs=3)
    assert body["extensions"]["cost"]["actualQueryCost"] is None  # nothing ran
    retry = int(response.headers["Retry-After"])
    assert retry == pytest.approx(10, abs=3)  # 10 points short at 1 a second
    assert retry == pytest.approx(error["extensions"]["retryAfter"], abs=1)
    assert response.headers["X-RateLimit-Remaining"] in {"60", "61", "62"}
    # Another tenant has its own budget; acme is on the pro tier.
    assert post(server, BOOKS, key="someone-else").status_code == 200
    pro = post(server, BOOKS, key="acme").json()["extensions"]["cost"]["throttleStatus"]
    assert pro["maximumAvailable"] == 5000


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("{ books(first: 600) { title } }", "QUERY_TOO_COMPLEX"),  # 1200 > max_cost 1000
        (DEEP, "QUERY_TOO_DEEP"),
        ("{ books { title ", "GRAPHQL_PARSE_FAILED"),
    ],
)
def test_static_limits_answer_their_code_and_pay_the_minimum(
    server: UvicornServer, query: str, code: str
) -> None:
    response = post(server, query)
    assert response.status_code == 200
    body = response.json()
    assert body["data"] is None
    assert [error["extensions"]["code"] for error in body["errors"]] == [code]
    assert response.headers["X-RateLimit-Remaining"] == "99"  # [limits] min_charge: 1
    after = post(server, BOOKS).json()["extensions"]["cost"]["throttleStatus"]
    assert after["currentlyAvailable"] == pytest.approx(59, abs=0.5)  # 100 - 1 - 40


def test_graphql_core_validation_errors_are_answered(server: UvicornServer) -> None:
    response = post(server, "{ books { isbn } }")
    assert response.status_code == 200
    (error,) = response.json()["errors"]
    assert "isbn" in error["message"]
    bad = httpx.post(f"{server.url}/graphql", content=b"not json", timeout=10)
    assert bad.status_code == 400


def test_refund_is_visible_in_currently_available(server: UvicornServer) -> None:
    first = post(server, BOOKS).json()["extensions"]["cost"]["throttleStatus"]
    assert first["currentlyAvailable"] == pytest.approx(60, abs=1)  # 100 - 40, not 100 - 70
    # Priced with the request's variables: 20 books x 2 = 40; 12 exist, so 24 in the end.
    cheap = "query Titles($n: Int!) { books(first: $n) { title } }"
    second = post(server, cheap, variables={"n": 20}).json()["extensions"]["cost"]
    assert (second["requestedQueryCost"], second["actualQueryCost"]) == (40, 24)
    spent = first["currentlyAvailable"] - second["throttleStatus"]["currentlyAvailable"]
    assert spent == pytest.approx(24, abs=3)  # 40 taken, 16 given back (+ a little refill)


def test_budgets_in_redis_through_create_app(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    storage = AsyncRedisStorage.from_url(redis_server.url, timeout=0.5)
    app = load("app").create_app(storage=storage)
    loops: list[asyncio.AbstractEventLoop] = []

    async def recording_loop(scope: Any, receive: Any, send: Any) -> None:
        loops.append(asyncio.get_running_loop())
        await app(scope, receive, send)

    with UvicornServer(recording_loop) as running:
        first = post(running, BOOKS, key="redis-reader")
        second = post(running, BOOKS, key="redis-reader")
        # The storage's connections belong to uvicorn's loop: close them there.
        asyncio.run_coroutine_threadsafe(storage.close(), loops[0]).result(timeout=10)
    assert first.status_code == 200
    assert first.json()["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == (
        pytest.approx(60, abs=1)
    )
    assert second.status_code == 429
    # The subject key:<tenant>'s hash holds its tier quota.
    assert redis_client.hexists("quotaql:{t:key:redis-reader}:~q", "tenant")


def test_cost_limit_rule_refuses_a_too_deep_query() -> None:
    rule = load("validation_rule")
    assert rule.check("{ books(first: 3) { title reviews { stars } } }") == []
    (error,) = rule.check(DEEP)
    assert error.extensions["code"] == "QUERY_TOO_DEEP"
    assert (error.extensions["value"], error.extensions["limit"]) == (6, 5)
    (error,) = rule.check("{ books(first: 600) { title } }")
    assert error.extensions["code"] == "QUERY_TOO_COMPLEX"
    # graphql-core's own rules still run beside it.
    assert "isbn" in rule.check("{ books { isbn } }")[0].message


def test_validation_rule_script_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "validation_rule.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "QUERY_TOO_COMPLEX" in done.stdout
    assert "QUERY_TOO_DEEP: Query depth 6 exceeds the maximum of 5" in done.stdout
