"""Concurrency limits over real HTTP servers (issue 13 §2.4, the hostile cases): Strawberry
through uvicorn, the leases in a private redis-server.

- a batch request of many operations: each takes a lease, at most ``max_in_flight`` run;
- 100 requests whose clients disconnect at once leave no lease behind;
- subscriptions held open over websockets are capped by their own limit, queries still pass;
- a uvicorn worker SIGKILLed while it holds leases: they free within ``lease_ttl``;
- three uvicorn workers on one redis-server, 50 concurrent slow requests of one tenant: the
  tenant's lease set (sampled with ``ZCARD``) never holds more than ``max_in_flight``.

The subprocess workers serve :func:`create_app` (``uvicorn --factory``), configured through
the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncGenerator  # noqa: TC003  (Strawberry reads annotations)
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import strawberry
import websockets.sync.client
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL
from strawberry.schema.config import StrawberryConfig

from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.support.app_servers import UvicornServer
from tests.support.servers import bind_loopback, spawn, terminate

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import redis
    from websockets.sync.client import ClientConnection

    from tests.support.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG_ENV = "QUOTAQL_LEASES_TEST_CONFIG"
REDIS_ENV = "QUOTAQL_LEASES_TEST_REDIS"
TIER_SET = b"quotaql:{t:key:acme}:~c:tier"
SUBSCRIPTION_SET = b"quotaql:{t:key:acme}:~c:subscriptions"
TOML = """
[limits]
deny_cache_size = 0
lease_ttl = {ttl}
[tiers.free]
capacity = 1000000
refill_per_second = 1000
max_in_flight = {max_in_flight}
max_subscriptions_in_flight = 2
[tenants.acme]
tier = "free"
"""
START_TIMEOUT = 60.0  # subprocess workers start on a busy 2-core machine


@strawberry.type
class Query:
    @strawberry.field
    async def slow(self, seconds: float = 0.0) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @strawberry.field
    def hello(self) -> str:
        return "world"


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def ticks(self, count: int = 3, interval: float = 0.0) -> AsyncGenerator[int, None]:
        for i in range(count):
            if interval:
                await asyncio.sleep(interval)
            yield i


def make_app(config: Path, redis_url: str, *, batching: bool = False) -> GraphQL[Any, Any]:
    """The API: Strawberry over uvicorn, its budgets and leases in Redis (the async gate)."""
    storage = AsyncRedisStorage.from_url(redis_url, timeout=2.0)
    limiter = CostLimiter.from_config(config, storage=storage)
    settings = StrawberryConfig(batching_config={"max_operations": 20}) if batching else None
    schema = strawberry.Schema(
        query=Query, subscription=Subscription, extensions=[limiter], config=settings
    )
    app = GraphQL(schema)
    app.limiter = limiter  # type: ignore[attr-defined]
    return app


def create_app() -> Starlette:
    """The subprocess workers' factory
    (``uvicorn --factory tests.http.test_concurrency:create_app``): the API, and its metrics at
    ``/metrics``."""
    registry = CollectorRegistry()
    storage = AsyncRedisStorage.from_url(os.environ[REDIS_ENV], timeout=2.0)
    limiter = CostLimiter.from_config(
        Path(os.environ[CONFIG_ENV]), storage=storage, metrics=PrometheusMetrics(registry)
    )
    schema = strawberry.Schema(query=Query, subscription=Subscription, extensions=[limiter])
    return Starlette(routes=[Mount("/metrics", metrics_app(registry)), Mount("/", GraphQL(schema))])


def write_config(tmp_path: Path, *, max_in_flight: int, ttl: float = 30) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(
        TOML.replace("{ttl}", str(ttl)).replace("{max_in_flight}", str(max_in_flight)),
        encoding="utf-8",
    )
    return path


def slow(seconds: float) -> dict[str, str]:
    return {"query": f"{{ slow(seconds: {seconds}) }}"}


def post(url: str, body: Any, *, timeout: float = 30) -> httpx.Response:
    return httpx.post(f"{url}/graphql", json=body, headers={"X-API-Key": "acme"}, timeout=timeout)


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def code(payload: dict[str, Any]) -> str | None:
    errors = payload.get("errors") or []
    return errors[0]["extensions"]["code"] if errors else None


# -- one uvicorn in a thread --------------------------------------------------------------


def test_a_batch_of_operations_runs_at_most_max_in_flight_of_them(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    app = make_app(write_config(tmp_path, max_in_flight=5), redis_server.url, batching=True)
    with UvicornServer(app) as server:
        batch = [slow(0.5) for _ in range(12)]  # one request, twelve operations at once
        response = post(server.url, batch)
        results = response.json()
        assert response.status_code == 200  # some ran: the response is a success
        assert "Retry-After" not in response.headers
        assert len(results) == 12
        ran = [result for result in results if result.get("data") == {"slow": "done"}]
        refused = [result for result in results if code(result) == "TOO_MANY_CONCURRENT"]
        assert (len(ran), len(refused)) == (5, 7)
        extensions = refused[0]["errors"][0]["extensions"]
        assert (extensions["limit"], extensions["quota"]) == (5, "in_flight")
        assert extensions["retryAfter"] > 0
        # every lease came back: a new batch gets its five again
        assert wait_for(lambda: redis_client.zcard(TIER_SET) == 0, 5)
        again = post(server.url, [slow(0.2) for _ in range(6)]).json()
        assert sum(code(result) is None for result in again) == 5


def test_all_operations_refused_answer_429_with_retry_after(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    app = make_app(write_config(tmp_path, max_in_flight=1), redis_server.url, batching=True)
    with UvicornServer(app) as server:
        holder = threading.Thread(target=post, args=(server.url, slow(1.5)))
        holder.start()
        try:
            assert wait_for(lambda: redis_client.zcard(TIER_SET) == 1, 5)
            single = post(server.url, slow(0))
            assert single.status_code == 429
            assert int(single.headers["Retry-After"]) >= 1
            assert code(single.json()) == "TOO_MANY_CONCURRENT"
            batch = post(server.url, [slow(0), slow(0)])
            assert batch.status_code == 429  # none ran: the refusal answers for all
            assert int(batch.headers["Retry-After"]) >= 1
        finally:
            holder.join(10)


class Counted:
    """An ASGI app that counts the HTTP requests it has run to their end."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.done = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if scope["type"] == "http":
                self.done += 1


def test_clients_that_disconnect_at_once_leave_no_lease(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    app = make_app(write_config(tmp_path, max_in_flight=5), redis_server.url)
    gate = app.limiter.gate  # type: ignore[attr-defined]
    counted = Counted(app)
    body = json.dumps(slow(0.3)).encode()
    request = (
        b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: acme\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    with UvicornServer(counted) as server:
        peak = 0
        for _ in range(100):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as client:
                client.sendall(request)
            peak = max(peak, redis_client.zcard(TIER_SET))  # gone before any answer
        assert peak <= 5
        # A loaded server is still running some of them: every one to its end first.
        assert wait_for(lambda: counted.done == 100, 30), counted.done
        assert wait_for(lambda: redis_client.zcard(TIER_SET) == 0 and not gate.in_flight(), 10)
        time.sleep(0.5)  # nothing comes back later either
        assert redis_client.zcard(TIER_SET) == 0
        assert redis_client.exists(TIER_SET) == 0
        assert sum(len(keeper) for keeper in gate.lease_keepers) == 0  # none renewed
        assert code(post(server.url, slow(0)).json()) is None


@contextlib.contextmanager
def connect(url: str) -> Iterator[ClientConnection]:
    with websockets.sync.client.connect(
        url,
        subprotocols=[websockets.Subprotocol("graphql-transport-ws")],
        additional_headers={"X-API-Key": "acme"},
        open_timeout=10,
    ) as ws:
        ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
        yield ws


def first_message(ws: ClientConnection, id_: str, query: str) -> dict[str, Any]:
    ws.send(json.dumps({"type": "subscribe", "id": id_, "payload": {"query": query}}))
    for _ in range(20):
        message: dict[str, Any] = json.loads(ws.recv(timeout=10))
        if message.get("id") == id_:
            return message
    raise AssertionError(f"no message for subscription {id_}")


def refused_code(message: dict[str, Any]) -> str | None:
    payload = message.get("payload")
    errors = payload if message["type"] == "error" else (payload or {}).get("errors")
    return errors[0]["extensions"]["code"] if errors else None


def test_open_subscriptions_are_capped_and_queries_still_pass(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    app = make_app(write_config(tmp_path, max_in_flight=2), redis_server.url)
    long = "subscription { ticks(count: 1000, interval: 0.1) }"
    with UvicornServer(app) as server:
        url = server.ws_url
        with connect(url) as first, connect(url) as second, connect(url) as third:
            assert first_message(first, "a", long)["type"] == "next"
            assert first_message(second, "b", long)["type"] == "next"
            refused = first_message(third, "c", long)
            assert refused_code(refused) == "TOO_MANY_CONCURRENT"
            assert redis_client.zcard(SUBSCRIPTION_SET) == 2
            # Two streams are open: the tenant's two query slots are still all there.
            with httpx.Client(timeout=10) as client:

                def query(_: int) -> httpx.Response:
                    return client.post(
                        f"{server.url}/graphql", json=slow(0.3), headers={"X-API-Key": "acme"}
                    )

                with ThreadPoolExecutor(2) as pool:
                    answers = list(pool.map(query, range(2)))
            assert [answer.json().get("data") for answer in answers] == [{"slow": "done"}] * 2
            # A client that drops its connection ends its stream: its slot comes back.
            first.close()
            assert wait_for(lambda: redis_client.zcard(SUBSCRIPTION_SET) == 1, 10)
            assert first_message(third, "d", long)["type"] == "next"
            assert refused_code(first_message(third, "e", long)) == "TOO_MANY_CONCURRENT"
        assert wait_for(lambda: redis_client.zcard(SUBSCRIPTION_SET) == 0, 10)


# -- uvicorn subprocess workers -------------------------------------------------------------


class Worker:
    """``uvicorn --factory <factory>`` (by default :func:`create_app`) in a process of its
    own, on a socket bound here and handed over (``--fd``): no port race."""

    def __init__(
        self, config: Path, redis_url: str, factory: str = "tests.http.test_concurrency:create_app"
    ) -> None:
        self._socket = bind_loopback()
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        fd = self._socket.fileno()
        env = {**os.environ, CONFIG_ENV: str(config), REDIS_ENV: redis_url}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.process = spawn(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                factory,
                "--fd",
                str(fd),
                "--loop",
                "asyncio",
                "--no-access-log",
                "--log-level",
                "warning",
                "--lifespan",
                "off",
            ],
            cwd=ROOT,
            env=env,
            pass_fds=(fd,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def wait_ready(self, deadline: float) -> None:
        while True:
            if self.process.poll() is not None:
                error = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"the worker exited ({self.process.returncode}): {error}")
            try:
                if httpx.post(f"{self.url}/graphql", json={"query": "{ hello }"},
                              timeout=2).status_code == 200:  # fmt: skip
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker on port {self.port} did not start")
            time.sleep(0.1)

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the worker's ``/metrics`` (0 when absent)."""
        text = httpx.get(f"{self.url}/metrics/", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return 0.0

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        terminate(self.process)  # continued first if paused: it handles SIGTERM then
        if self.process.stderr is not None:
            self.process.stderr.close()
        self._socket.close()


@contextlib.contextmanager
def workers(
    count: int,
    config: Path,
    redis_url: str,
    factory: str = "tests.http.test_concurrency:create_app",
) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    try:
        for _ in range(count):
            started.append(Worker(config, redis_url, factory))  # noqa: PERF401  (one by one: a failure stops those started)
        deadline = time.monotonic() + START_TIMEOUT
        for worker in started:
            worker.wait_ready(deadline)
        yield started
    finally:
        for worker in started:
            worker.stop()


def _post_quietly(url: str, body: Any) -> None:
    with contextlib.suppress(httpx.HTTPError):
        post(url, body, timeout=60)


def test_a_killed_worker_s_leases_free_within_lease_ttl(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    ttl = 2.0
    config = write_config(tmp_path, max_in_flight=4, ttl=ttl)
    with workers(2, config, redis_server.url) as (doomed, survivor):
        holders = [
            threading.Thread(target=_post_quietly, args=(doomed.url, slow(60)), daemon=True)
            for _ in range(4)
        ]
        for holder in holders:
            holder.start()
        assert wait_for(lambda: redis_client.zcard(TIER_SET) == 4, 10)
        time.sleep(ttl * 1.5)  # past a ttl: the doomed worker's keeper renews them
        assert redis_client.zcard(TIER_SET) == 4
        assert code(post(survivor.url, slow(0)).json()) == "TOO_MANY_CONCURRENT"

        doomed.kill()  # no finish, no release: only the expiry frees the slots
        killed = time.monotonic()
        assert wait_for(lambda: code(post(survivor.url, slow(0)).json()) is None, ttl + 3)
        freed = time.monotonic() - killed
        assert freed <= ttl + 0.5  # its leases expired within their ttl (and some scheduling)
        assert freed >= ttl / 3 - 0.2  # they had been renewed, not let go at the kill
        assert wait_for(lambda: redis_client.zcard(TIER_SET) == 0, 2)
        for holder in holders:
            holder.join(10)


def test_three_workers_never_run_more_than_max_in_flight_of_one_tenant(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    config = write_config(tmp_path, max_in_flight=5)
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        with redis_server.client() as client:
            while not done.is_set():
                samples.append(client.zcard(TIER_SET))
                time.sleep(0.002)

    async def burst(urls: list[str]) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"{urls[i % len(urls)]}/graphql",
                        json=slow(3.0),
                        headers={"X-API-Key": "acme"},
                    )
                    for i in range(50)
                )
            )

    with workers(3, config, redis_server.url) as running:
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            responses = asyncio.run(burst([worker.url for worker in running]))
        finally:
            done.set()
            sampler.join(10)
        answers = [(response.status_code, code(response.json())) for response in responses]
        assert sorted(answers, key=str).count((200, None)) == 5
        assert answers.count((429, "TOO_MANY_CONCURRENT")) == 45
        assert max(samples) == 5  # reached, and never more, across the three processes
        assert len(samples) > 100
        assert wait_for(lambda: redis_client.zcard(TIER_SET) == 0, 5)


def test_a_worker_stalled_past_lease_ttl_loses_its_leases_and_counts_them_expired(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """A SIGSTOPped worker stops renewing: its leases expire within lease_ttl and the tenant's
    slots go to another worker (at most max_in_flight more run at once: the bound a stall
    costs). Resumed, the stalled worker's renewals never bring its leases back, and its
    releases count them expired."""
    ttl = 1.0
    config = write_config(tmp_path, max_in_flight=2, ttl=ttl)
    with workers(2, config, redis_server.url) as (stalled, other):
        # (each worker's readiness probe took and released a lease of its own address)
        released = [worker.metric("quotaql_leases_total", outcome="released") for worker in
                    (stalled, other)]  # fmt: skip
        holders = [
            threading.Thread(target=_post_quietly, args=(stalled.url, slow(3)), daemon=True)
            for _ in range(2)
        ]
        for holder in holders:
            holder.start()
        assert wait_for(lambda: redis_client.zcard(TIER_SET) == 2, 10)
        stalled.pause()
        try:
            assert wait_for(lambda: redis_client.zcard(TIER_SET) == 0, ttl + 2)
            takers = [
                threading.Thread(target=_post_quietly, args=(other.url, slow(4)), daemon=True)
                for _ in range(2)
            ]
            for taker in takers:
                taker.start()
            assert wait_for(lambda: redis_client.zcard(TIER_SET) == 2, 10)
            assert code(post(other.url, slow(0)).json()) == "TOO_MANY_CONCURRENT"
        finally:
            stalled.resume()
        time.sleep(ttl)  # the stalled worker's keeper runs again: it renews nothing of its own
        assert redis_client.zcard(TIER_SET) == 2  # only the other worker's two
        for holder in holders:
            holder.join(15)
        assert wait_for(lambda: stalled.metric("quotaql_leases_total", outcome="expired") == 2, 10)
        assert stalled.metric("quotaql_leases_total", outcome="released") == released[0]
        for taker in takers:
            taker.join(15)
        assert wait_for(lambda: redis_client.zcard(TIER_SET) == 0, 5)
        assert other.metric("quotaql_leases_total", outcome="released") == released[1] + 2
        assert other.metric("quotaql_leases_total", outcome="expired") == 0
