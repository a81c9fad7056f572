"""The gate on its own (plain graphql-core, no web framework): every decision it makes.

Requests are bare ASGI scopes; responses are Starlette's. The same story over real HTTP
servers is in tests/adapters.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse, validate
from starlette.responses import Response

from quotaql import web
from quotaql.config import load_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.errors import ConfigError
from quotaql.gate import Gate
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import redis

    from tests.support.servers import RedisServer

SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + """
type Query {
  products(first: Int = 10): [Product] @listSize(slicingArguments: ["first"])
  hello: String
}
type Product { id: ID name: String }
interface Exporter { exportOrders: Int }
union Root = Mutation
type Mutation implements Exporter { exportOrders: Int  importOrders(first: Int = 1): [Product] }
type Subscription { ticks: Int @cost(weight: "30") }
"""
)

TOML = """
[limits]
max_subscriptions = 2
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tiers.free.fields]
"Mutation.exportOrders" = { capacity = 3, refill_per_second = 0.001 }
[tiers.free.operations]
ExportOrders = { capacity = 1000, refill_per_second = 0.001 }
[tiers.pro]
capacity = 1000
refill_per_second = 0.001
[tiers.pro.per_user]
capacity = 25
refill_per_second = 0.001
[tenants.acme]
tier = "pro"
[tenants.t]
tier = "free"
"""


def scope(peer: str = "203.0.113.9", key: str | None = None, **headers: str) -> dict[str, Any]:
    raw = [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    if key is not None:
        raw.append((b"x-api-key", key.encode()))
    return {"type": "http", "client": (peer, 40000), "headers": raw}


@pytest.fixture
def config_path(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str = TOML) -> Path:
        path = tmp_path / "quotaql.toml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def gate(config_path: Callable[[str], Path]) -> Gate:
    return Gate(load_config(config_path(TOML)))


def admit(gate: Gate, query: str, request: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    return gate.admit(SCHEMA, parse(query), request=request or scope(key="t"), **kwargs)


# -- the story ------------------------------------------------------------------------------


def test_admit_settle_answer_observe(gate: Gate) -> None:
    op = admit(gate, "{ products(first: 10) { name } }")
    assert (op.refused, op.cost, op.status, op.subject.key) == (False, 10.0, None, "key:t")
    assert op.headers["X-RateLimit-Remaining"] == "90"
    gate.settle(op, {"products": [{"name": "a"}, {"name": "b"}]})  # actual 2: 8 back
    assert op.refunded == 8
    cost = gate.results(op)["cost"]
    assert (cost["requestedQueryCost"], cost["actualQueryCost"]) == (10.0, 2.0)
    assert cost["throttleStatus"]["currentlyAvailable"] == 98
    gate.finish(op)


def test_the_sync_entry_refuses_an_async_storage_clearly() -> None:
    gate = Gate(storage=AsyncRedisStorage.from_url("redis://127.0.0.1:1/0"))
    with pytest.raises(TypeError, match="use the async entry points"):
        admit(gate, "{ hello }")


def test_the_async_entry_works_on_memory_and_awaits_an_async_resolver() -> None:
    async def resolver(key: str, context: Any) -> str | None:
        await asyncio.sleep(0)
        return "acme" if key == "sk_live" else None

    gate = Gate(key_resolver=resolver)

    async def run() -> Any:
        return await gate.admit_async(SCHEMA, parse("{ hello }"), request=scope(key="sk_live"))

    op = asyncio.run(run())
    assert op.subject.key == "key:acme"


# -- unknown keys ---------------------------------------------------------------------------


def test_rotating_unknown_keys_get_one_addresses_budget(gate: Gate) -> None:
    passed = 0
    for i in range(40):  # 10 points each; the address has 100
        op = admit(gate, "{ products(first: 10) { name } }", scope(key=f"fresh-{i}"))
        passed += not op.refused
    assert passed == 10
    assert op.subject.key == "ip:203.0.113.9"
    assert op.code == "RATE_LIMITED"


def test_reject_mode_answers_401_and_the_address_pays_for_each_try(
    config_path: Callable[[str], Path],
) -> None:
    gate = Gate(load_config(config_path(TOML + '[identity]\nunknown_keys = "reject"\n')))
    op = admit(gate, "{ products(first: 50) { name } }", scope(key="guess-1"))
    assert (op.code, op.status, op.headers, op.report) == ("UNKNOWN_API_KEY", 401, {}, None)
    assert op.outcome == "unknown_key"
    codes = [admit(gate, "{ hello }", scope(key=f"guess-{i}")).code for i in range(2, 120)]
    assert codes[:99] == ["UNKNOWN_API_KEY"] * 99  # one point a try: 100 in all
    assert set(codes[99:]) == {"RATE_LIMITED"}  # key guessing ran its address dry
    blocked = admit(gate, "{ hello }", scope(key="guess-x"))
    assert blocked.status == 429
    assert int(blocked.headers["Retry-After"]) >= 1
    # A known key from the same address is not affected, nor is another address.
    assert not admit(gate, "{ hello }", scope(key="t")).refused
    assert not admit(gate, "{ hello }", scope(peer="198.51.100.2")).refused


def test_unknown_keys_as_tenants_is_logged_once_as_unsafe(
    config_path: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    gate = Gate(load_config(config_path(TOML + '[identity]\nunknown_keys = "tenant"\n')))
    for i in range(3):
        assert admit(gate, "{ hello }", scope(key=f"k{i}")).subject.key == f"ukey:k{i}"
    unsafe = [r for r in caplog.records if r.quotaql_event == "unknown_keys_tenant"]
    assert len(unsafe) == 1
    assert "public API" in unsafe[0].getMessage()


# -- root-field quotas: no renaming around them ---------------------------------------------


@pytest.mark.parametrize(
    "disguise",
    [
        "mutation { exportOrders }",
        "mutation Harmless { exportOrders }",
        "mutation ExportOrders { exportOrders }",
        "mutation { x: exportOrders }",
        "mutation { ...F } fragment F on Mutation { exportOrders }",
        "mutation { ... on Mutation { ... { y: exportOrders } } }",
        "mutation($t: Boolean = true) { exportOrders @include(if: $t) }",
        "mutation { ... on Exporter { exportOrders } }",  # an interface the root implements
        "mutation { ...E } fragment E on Exporter { exportOrders }",
        "mutation { ... on Root { ... on Mutation { exportOrders } } }",  # a union it is in
    ],
)
def test_a_root_field_quota_holds_under_any_alias_fragment_or_name(
    gate: Gate, disguise: str
) -> None:
    assert validate(SCHEMA, parse(disguise)) == []  # a query a server runs
    results = [admit(gate, disguise) for _ in range(5)]
    assert [op.refused for op in results] == [False, False, False, True, True]
    refused = results[3]
    assert refused.error.extensions["quota"] == "field:Mutation.exportOrders"
    assert refused.error.extensions["cost"] == 1  # each selection pays at least 1
    assert '"field:Mutation.exportOrders";q=3' in refused.headers["RateLimit-Policy"]
    # All or nothing: the refused calls took nothing from the tenant's quota (3 × 10), and
    # `{ hello }`, priced 0, pays the minimum charge (1).
    assert admit(gate, "{ hello }").decision.remaining == pytest.approx(69, abs=0.01)


def test_each_alias_of_a_root_field_counts(gate: Gate) -> None:
    two = admit(gate, "mutation { a: exportOrders b: exportOrders }")
    assert not two.refused
    assert dict(zip((q.name for q in two.quotas), two.costs, strict=True)) == {
        "tenant": 10.0,
        "field:Mutation.exportOrders": 2.0,
    }
    assert admit(gate, "mutation { a: exportOrders b: exportOrders }").refused  # 2 + 2 > 3


def test_a_skipped_root_field_is_not_charged_and_other_fields_are_free_of_it(gate: Gate) -> None:
    for _ in range(5):
        op = admit(gate, "mutation { exportOrders @skip(if: true) importOrders { id } }")
        assert not op.refused
        assert [quota.name for quota in op.quotas] == ["tenant"]


def test_a_root_field_quota_is_never_refunded(gate: Gate) -> None:
    op = admit(gate, "mutation { exportOrders importOrders(first: 5) { id } }")
    gate.settle(op, {"exportOrders": 1, "importOrders": []})  # 10 + 5 estimated, 10 actual
    assert op.refunded == 5
    state = gate.limiter.peek(op.subject.key, op.quotas)
    remaining = [status.remaining for status in state.quotas]
    assert remaining == pytest.approx([90.0, 2.0], abs=0.01)  # the field's 1 stays spent
    # What the response says after the refund: each quota's own state, the tightest named.
    assert [q.remaining for q in op.decision.quotas] == pytest.approx([90.0, 2.0], abs=0.01)
    assert op.headers["RateLimit"].startswith('"field:Mutation.exportOrders";r=2;')
    assert (op.headers["X-RateLimit-Limit"], op.headers["X-RateLimit-Remaining"]) == ("3", "2")


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_a_root_field_quota_the_whole_cost_falls_on_is_not_refunded_either(
    backend: str, request: pytest.FixtureRequest, config_path: Callable[[str], Path]
) -> None:
    # Queries weigh 0: the only root field costs what the operation costs, so every quota
    # pays one amount. The tenant gets back what went unused; the field keeps its charge.
    field = '"Query.products" = { capacity = 30, refill_per_second = 0.001 }'
    text = TOML.replace("[tiers.free.operations]\n", f"{field}\n[tiers.free.operations]\n")
    storage = None
    if backend == "redis":
        storage = RedisStorage(request.getfixturevalue("redis_client"), timeout=2.0)
    try:
        gate = Gate(load_config(config_path(text)), storage=storage)
        for _ in range(3):
            op = admit(gate, "{ products(first: 10) { id } }")
            assert (op.refused, op.costs) == (False, None)
            gate.settle(op, {"products": []})  # estimated 10, actual 0: 9 back to the tenant
            assert op.refunded == 9  # it keeps the minimum charge (1)
        state = gate.limiter.peek(op.subject.key, op.quotas)
        assert [quota.remaining for quota in state.quotas] == pytest.approx([97.0, 0.0], abs=0.01)
        assert admit(gate, "{ products(first: 1) { id } }").code == "RATE_LIMITED"
    finally:
        if storage is not None:
            storage.close()


def test_a_misspelt_root_field_quota_is_a_config_error_naming_its_line(
    config_path: Callable[[str], Path],
) -> None:
    path = config_path(TOML.replace('"Mutation.exportOrders"', '"Mutation.exportOrder"'))
    gate = Gate(load_config(path))
    with pytest.raises(ConfigError) as caught:
        gate.check(SCHEMA)
    error = caught.value
    assert (error.file, error.key, error.line) == (
        str(path),
        'tiers.free.fields."Mutation.exportOrder"',
        8,
    )
    assert "did you mean 'Mutation.exportOrders'" in error.reason
    for bad in ('"Query"', '"Product.name"', '"Query.hello(x:)"'):
        text = TOML.replace('"Mutation.exportOrders"', bad)
        with pytest.raises(ConfigError):
            Gate(load_config(config_path(text))).check(SCHEMA)


# -- per-user quotas inside a tenant --------------------------------------------------------


def test_each_user_of_a_tenant_has_a_budget_inside_the_tenants(gate: Gate) -> None:
    users: dict[str, str] = {}
    gate = Gate(gate.config, principal=lambda context: users.get("who"))
    query = "{ products(first: 10) { name } }"
    users["who"] = "alice"
    alice = [admit(gate, query, scope(key="acme")).refused for _ in range(3)]
    assert alice == [False, False, True]  # her 25 points: two of 10
    users["who"] = "bob"
    assert not admit(gate, query, scope(key="acme")).refused  # his own 25
    op = admit(gate, query, scope(key="acme"))
    assert [q.name for q in op.quotas] == ["tenant", "user"]
    # Both paid into the one tenant quota: 1000 - 4 × 10.
    assert op.decision.quotas[0].remaining == pytest.approx(1000 - 40, abs=0.01)
    del users["who"]  # no principal: the tenant's quota only
    assert [q.name for q in admit(gate, query, scope(key="acme")).quotas] == ["tenant"]


def test_per_user_and_field_quotas_in_one_redis_call(
    redis_client: redis.Redis, config_path: Callable[[str], Path]
) -> None:
    field = '"Mutation.exportOrders" = { capacity = 2, refill_per_second = 0.001 }'
    text = TOML.replace("capacity = 25", "capacity = 500") + f"[tiers.pro.fields]\n{field}\n"
    storage = RedisStorage(redis_client, timeout=2.0)
    try:
        gate = Gate(load_config(config_path(text)), storage=storage, principal=lambda c: "u1")
        first = admit(gate, "mutation { exportOrders }", scope(key="acme"))
        assert [q.name for q in first.quotas] == ["tenant", "user", "field:Mutation.exportOrders"]
        assert first.costs == (10.0, 10.0, 1.0)
        assert not admit(gate, "mutation { exportOrders }", scope(key="acme")).refused
        third = admit(gate, "mutation { exportOrders }", scope(key="acme"))
        assert third.error.extensions["quota"] == "field:Mutation.exportOrders"
        keys = sorted(key.decode() for key in redis_client.keys("*"))
        # One hash tag: one slot, one atomic script call; the tenant's quotas in one hash,
        # the user's in another.
        assert keys == ["quotaql:{t:key:acme}:~q", "quotaql:{t:key:acme}:~u:s:u1"]
        fields = {field.decode() for field in redis_client.hkeys("quotaql:{t:key:acme}:~q")}
        assert fields == {"~x", "tenant", "field:Mutation.exportOrders"}
        user = {field.decode() for field in redis_client.hkeys("quotaql:{t:key:acme}:~u:s:u1")}
        assert user == {"~x", "user"}
    finally:
        storage.close()


# -- subscriptions --------------------------------------------------------------------------


def test_a_subscriber_who_leaves_while_redis_answers_gives_the_slot_back(
    fresh_redis_server: RedisServer, config_path: Callable[[str], Path]
) -> None:
    # The task is cancelled inside the storage call: the adapter never gets an operation to
    # finish, so the gate itself must give the slot back (else a few leaving clients hold
    # their subject's slots forever: TOO_MANY_SUBSCRIPTIONS for good).
    async def leave() -> int:
        storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=10.0)
        gate = Gate(load_config(config_path(TOML)), storage=storage)
        try:
            fresh_redis_server.pause()
            for _ in range(3):  # more than max_subscriptions = 2
                task = asyncio.ensure_future(
                    gate.admit_async(
                        SCHEMA, parse("subscription { ticks }"), request=scope(key="t")
                    )
                )
                await asyncio.sleep(0.2)
                assert gate.open_subscriptions() == 1  # taken, waiting on Redis
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            return gate.open_subscriptions()
        finally:
            fresh_redis_server.resume()
            await storage.close()

    assert asyncio.run(leave()) == 0


def test_subscriptions_are_capped_per_subject_and_a_closed_one_frees_its_slot(gate: Gate) -> None:
    first = admit(gate, "subscription { ticks }")
    second = admit(gate, "subscription { ticks }")
    third = admit(gate, "subscription { ticks }")
    assert (first.refused, second.refused) == (False, False)
    assert third.code == "TOO_MANY_SUBSCRIPTIONS"
    assert third.outcome == "too_many_subscriptions"
    assert third.status is None  # a websocket has no status
    assert gate.open_subscriptions() == 2
    gate.finish(first)
    gate.finish(first)  # finishing twice frees one slot only
    assert gate.open_subscriptions() == 1
    assert not admit(gate, "subscription { ticks }").refused
    # Another subject has slots of its own.
    assert not admit(gate, "subscription { ticks }", scope(key="acme")).refused


def test_a_refused_subscription_takes_no_slot(gate: Gate) -> None:
    big = admit(gate, "subscription { a: ticks b: ticks c: ticks d: ticks }")  # 120 > 100
    assert big.code == "COST_EXCEEDS_CAPACITY"
    assert not admit(gate, "{ products(first: 90) { id } }").refused  # 10 left
    assert admit(gate, "subscription { ticks }").code == "RATE_LIMITED"
    assert gate.open_subscriptions() == 0


def test_each_event_after_the_first_is_charged_and_exhaustion_ends_the_subscription(
    gate: Gate,
) -> None:
    op = admit(gate, "subscription { ticks }")  # 30: 70 left
    events = [gate.event(op) for _ in range(4)]  # the first is paid; then 30, 30, then 10 left
    assert events[:3] == [None, None, None]
    error = events[3]
    assert error is not None
    assert error.extensions["code"] == "RATE_LIMITED"
    assert error.extensions["retryAfter"] > 0
    assert op.events == 4
    assert op.refused
    gate.finish(op)
    assert gate.open_subscriptions() == 0


def test_shadow_mode_charges_events_but_never_ends_a_subscription(
    config_path: Callable[[str], Path],
) -> None:
    gate = Gate(load_config(config_path(TOML.replace("[limits]\n", '[limits]\nmode = "shadow"\n'))))
    op = admit(gate, "subscription { ticks }")
    assert all(gate.event(op) is None for _ in range(10))
    # And shadow mode does not cap subscriptions either.
    assert not any(admit(gate, "subscription { ticks }").refused for _ in range(5))


# -- answers over one response: batches -----------------------------------------------------


def test_a_batch_where_something_ran_answers_200_without_retry_after(gate: Gate) -> None:
    response = Response()
    ran = admit(gate, "{ products(first: 60) { name } }")
    refused = admit(gate, "{ products(first: 60) { name } }")
    assert (ran.refused, refused.code) == (False, "RATE_LIMITED")
    gate.respond(refused, response)  # the refusal answers first...
    assert response.status_code == 429
    assert "retry-after" in response.headers
    gate.respond(ran, response)  # ...then the one that ran: a success, retrying re-runs it
    assert response.status_code == 200
    assert "retry-after" not in response.headers
    assert response.headers["x-ratelimit-remaining"] == "40"  # what is left after both


def test_a_batch_of_refusals_answers_the_longest_wait(gate: Gate) -> None:
    response = Response()
    assert not admit(gate, "{ products(first: 95) { name } }").refused  # 5 left
    small = admit(gate, "{ products(first: 10) { name } }")
    large = admit(gate, "{ products(first: 50) { name } }")
    gate.respond(small, response)
    gate.respond(large, response)
    assert response.status_code == 429
    assert int(response.headers["retry-after"]) == pytest.approx(large.decision.retry_after, abs=1)
    assert large.decision.retry_after > small.decision.retry_after


def test_a_batch_refused_by_the_analysis_and_by_the_limiter_is_still_a_429(
    config_path: Callable[[str], Path],
) -> None:
    # Nothing ran: the one the analysis refused must not make the batch look like a success.
    gate = Gate(load_config(config_path(TOML + "[cost]\nmax_root_fields = 1\n")))
    assert not admit(gate, "{ products(first: 95) { name } }").refused  # 5 left
    response = Response()
    too_wide = admit(gate, "{ a: hello b: hello }")
    too_costly = admit(gate, "{ products(first: 10) { name } }")
    assert (too_wide.refused, too_wide.status) == (True, None)
    gate.respond(too_wide, response)
    gate.respond(too_costly, response)
    assert (too_costly.code, response.status_code) == ("RATE_LIMITED", 429)
    assert "retry-after" in response.headers


def test_a_response_is_forgotten_when_it_goes_and_its_id_is_never_another_batch(
    gate: Gate,
) -> None:
    """The replies a response collected go with it; a new response at the address of a
    collected one starts a batch of its own (no Retry-After removed, no status mixed)."""
    answers = gate._responses
    before = len(answers._weak)
    for _ in range(50):
        response = Response()
        gate.respond(admit(gate, "{ hello }"), response)
        assert response.status_code == 200
        del response
    gc.collect()
    assert len(answers._weak) == before
    refused = admit(gate, "{ products(first: 500) { name } }")  # past the whole budget
    response = Response()
    gate.respond(refused, response)
    assert (response.status_code, refused.code) == (400, "COST_EXCEEDS_CAPACITY")


def test_a_response_without_weak_references_is_answered_as_a_batch_too(gate: Gate) -> None:
    class Slotted:  # no __weakref__ (as Litestar's responses): kept among the last 256
        __slots__ = ("headers", "status_code")

        def __init__(self) -> None:
            self.headers: dict[str, str] = {}
            self.status_code = 200

    response = Slotted()
    ran = admit(gate, "{ products(first: 60) { name } }")
    refused = admit(gate, "{ products(first: 60) { name } }")
    gate.respond(refused, response)
    assert response.status_code == 429
    gate.respond(ran, response)
    assert response.status_code == 200
    assert "Retry-After" not in response.headers


def test_nothing_is_written_for_a_subscription_or_to_a_websocket(gate: Gate) -> None:
    class WebSocket:  # any websocket class: Starlette's, aiohttp's, ... (by its name)
        def __init__(self) -> None:
            self.headers: dict[str, str] = {}

    socket = WebSocket()
    assert web.is_websocket(socket)
    op = admit(gate, "{ products(first: 500) { name } }")
    gate.respond(op, socket)
    assert socket.headers == {}
    response = Response()
    subscription = admit(gate, "subscription { a: ticks b: ticks c: ticks d: ticks }")
    gate.respond(subscription, response)
    assert response.status_code == 200
    assert "retry-after" not in response.headers


# -- hot reload -----------------------------------------------------------------------------


def test_a_reloaded_config_with_a_bad_field_quota_keeps_the_previous_one(
    config_path: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    path = config_path(TOML.replace("[limits]\n", "[limits]\nreload_interval = 0.001\n"))
    gate = Gate.from_config(path)
    assert admit(gate, "{ hello }").decision.limit == 100
    path.write_text(
        TOML.replace("capacity = 100", "capacity = 300").replace(
            '"Mutation.exportOrders"', '"Mutation.nope"'
        ),
        encoding="utf-8",
    )
    caplog.set_level(logging.ERROR, logger="quotaql")

    def failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.quotaql_event == "config_reload_failed"]

    deadline = time.monotonic() + 10  # the reload thread's two looks, on a busy machine
    while not failures() and time.monotonic() < deadline:
        assert admit(gate, "{ hello }").decision.limit == 100
        time.sleep(0.01)
    assert failures()
    assert "Mutation.nope" in failures()[0].getMessage()
    assert admit(gate, "{ hello }").decision.limit == 100


def test_a_subscription_asking_to_be_validated_is_priced_debited_and_run(gate: Gate) -> None:
    # Its stream is not a result a header can replace: "validate" would be a free stream.
    op = admit(gate, "subscription { ticks }", scope(key="t", graphql_cost="validate"))
    assert (op.refused, op.validate_only, op.header) == (False, False, "report")
    assert op.decision.remaining == pytest.approx(70, abs=0.01)
    assert op.breakdown == {"Subscription.ticks": 30.0}


def test_what_parse_refuses_is_answered_without_pricing_and_pays_the_minimum(gate: Gate) -> None:
    for query, code in (
        ("{ hello", "GRAPHQL_PARSE_FAILED"),
        ("{ nope }", None),  # graphql-core's validation error: no code
        (42, "GRAPHQL_PARSE_FAILED"),
    ):
        document = gate.parse(SCHEMA, query)
        assert isinstance(document, list)
        op = gate.admit(SCHEMA, document, request=scope(key="t"))
        assert op.refused
        assert (op.errors[0].extensions or {}).get("code") == code
        assert (op.report, op.status, op.charge, op.outcome) == (None, None, 1.0, "rejected")
        assert op.decision is not None
        assert op.decision.allowed  # [limits] min_charge, paid
        gate.finish(op)
    document = gate.parse(SCHEMA, "{ a: hello b: nope c: nada }")
    assert len(gate.admit(SCHEMA, document, request=scope(key="t")).errors) == 2  # all of them
    # Four refused documents paid 1 each; `{ hello }` pays 1 too.
    assert admit(gate, "{ hello }").decision.remaining == pytest.approx(95, abs=0.01)


def test_the_open_subscriptions_gauge_follows_every_slot(
    config_path: Callable[[str], Path],
) -> None:
    from prometheus_client import CollectorRegistry

    from quotaql.instrumentation import names
    from quotaql.instrumentation.metrics import PrometheusMetrics

    registry = CollectorRegistry()
    gate = Gate(load_config(config_path(TOML)), metrics=PrometheusMetrics(registry))

    def gauge() -> float | None:
        return registry.get_sample_value(names.SUBSCRIPTIONS_OPEN)

    first = admit(gate, "subscription { ticks }")
    assert gauge() == 1  # as soon as it opens, not when it ends
    second = admit(gate, "subscription { ticks }")
    assert gauge() == 2
    gate.event(first)
    gate.event(first)  # charged: the decision follows what is left
    assert first.decision.remaining == pytest.approx(10, abs=0.01)
    gate.finish(first)
    gate.finish(second)
    assert gauge() == 0


# -- tuning from traffic --------------------------------------------------------------------


def test_sampled_operations_feed_the_tuning_metrics(config_path: Callable[[str], Path]) -> None:
    from prometheus_client import CollectorRegistry

    from quotaql.instrumentation import names
    from quotaql.instrumentation.metrics import PrometheusMetrics

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    sampled = Gate(
        load_config(config_path("[cost]\ntuning_sample = 1.0\n" + TOML)), metrics=metrics
    )
    never = Gate(
        load_config(config_path("[cost]\ntuning_sample = 0\n" + TOML)),
        metrics=PrometheusMetrics(CollectorRegistry()),
    )
    for gate in (sampled, never):
        for _ in range(3):  # `first: 10` asked, 2 returned; the default 10 assumed, 4 returned
            op = admit(gate, "{ products(first: 10) { name } }")
            gate.settle(op, {"products": [{"name": "a"}, {"name": "b"}]})
            gate.finish(op)
            op = admit(gate, "{ products { name } }")
            gate.settle(op, {"products": [{"name": "a"}] * 4})
            gate.finish(op)
    metrics.flush()

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    coordinate = {"coordinate": "Query.products"}
    # The unsliced lists (priced at the schema default 10): their sizes, and what was assumed.
    assert sample(names.LIST_RETURNED_ITEMS + "_count", **coordinate) == 3
    assert sample(names.LIST_RETURNED_ITEMS + "_sum", **coordinate) == 12
    assert sample(names.LIST_ASSUMED_ITEMS, **coordinate) == 10
    # The sliced ones: returned / asked.
    assert sample(names.LIST_SLICED_RATIO + "_count", **coordinate) == 3
    assert sample(names.LIST_SLICED_RATIO + "_sum", **coordinate) == pytest.approx(0.6)
    # Every operation: actual / estimated (2/10 three times, 4/10 three times).
    ratio = {"operation_type": "query", "tier": "free"}
    assert sample(names.COST_ESTIMATE_RATIO + "_count", **ratio) == 6
    assert sample(names.COST_ESTIMATE_RATIO + "_sum", **ratio) == pytest.approx(1.8)
    # tuning_sample = 0 records no list at all.
    assert never.metrics is not None
    assert (
        never.metrics.registry.get_sample_value(names.LIST_RETURNED_ITEMS + "_count", coordinate)
        is None
    )


# -- shutdown: the limiter's waiting refunds --------------------------------------------------


def test_flush_applies_the_refunds_waiting_behind_an_open_breaker(
    config_path: Callable[[str], Path], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    storage = RedisStorage.from_url(redis_server.url, timeout=1.0)
    gate = Gate(load_config(config_path(TOML)), storage=storage)
    quota = gate.config.tiers["free"].quota
    try:
        op = admit(gate, "{ products(first: 20) { id } }")  # 20, of which 18 unused
        gate.limiter.breaker.failure(timeout=True)  # an outage starts: refunds must wait
        gate.settle(op, {"products": [{"id": "1"}, {"id": "2"}]})
        gate.finish(op)
        queue = gate.limiter.refund_queue
        assert queue is not None
        assert queue.pending
        gate.limiter.breaker.success()  # it is over
        assert gate.flush(timeout=5) == 0
        assert not queue.pending
        with redis_server.client() as client:
            direct = RedisStorage(client, timeout=1.0)
            assert direct.peek("key:t", [quota]).remaining == pytest.approx(100 - 2, abs=0.1)
            direct.close()
        assert asyncio.run(gate.aflush()) == 0  # a sync gate on an event loop too
    finally:
        storage.close()


def test_flush_of_an_async_gate_must_be_awaited(
    config_path: Callable[[str], Path], redis_server: RedisServer
) -> None:
    storage = AsyncRedisStorage.from_url(redis_server.url, timeout=1.0)
    gate = Gate(load_config(config_path(TOML)), storage=storage)
    with pytest.raises(TypeError, match=r"await gate\.aflush"):
        gate.flush()

    async def main() -> int:
        try:
            return await gate.aflush()
        finally:
            await storage.close()

    assert asyncio.run(main()) == 0


def test_a_memory_gate_has_nothing_to_flush(gate: Gate) -> None:
    assert gate.limiter.refund_queue is None  # refunds are applied at once in memory
    assert gate.flush() == 0
