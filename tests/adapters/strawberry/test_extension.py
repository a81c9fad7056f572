"""The extension through ``schema.execute_sync`` / ``schema.execute``: every answer it gives."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
import redis

from quotaql.instrumentation.tenants import hashed
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import RedisStorage
from tests.adapters.strawberry.conftest import BASE_TOML
from tests.support import strawberry_shop as shop
from tests.support.servers import free_port

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

# 10 × (2 + 5 × 1) = 70 estimated; the catalog returns 4 products × 2 reviews:
# actual 4 × (2 + 2 × 1) = 16, so 54 is refunded.
EXPENSIVE = "{ products(first: 10) { name reviews(first: 5) { stars } } }"


class Context(dict[str, Any]):
    """What Strawberry's HTTP integrations pass: a request with headers, a response."""


class Headers(dict[str, str]):
    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)


class Request:
    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.headers = Headers({k.lower(): v for k, v in (headers or {}).items()})
        self.client = None


class Response:
    def __init__(self) -> None:
        self.status_code: int | None = None
        self.headers: dict[str, str] = {}


def context(api_key: str | None = None, **headers: str) -> dict[str, Any]:
    if api_key is not None:
        headers["x-api-key"] = api_key
    return {"request": Request(headers), "response": Response()}


@pytest.fixture
def limiter(write_config: Callable[..., Path]) -> CostLimiter:
    return CostLimiter.from_config(write_config())


def test_an_allowed_query_runs_and_reports_its_cost_and_refund(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    ctx = context("tenant-a")
    result = schema.execute_sync(EXPENSIVE, context_value=ctx)
    assert result.errors is None
    assert len(result.data["products"]) == shop.CATALOG_SIZE
    cost = result.extensions["cost"]
    assert cost["requestedQueryCost"] == 70
    assert cost["actualQueryCost"] == 16
    # 100 - 70 debited, then 54 refunded: 84 left.
    assert cost["throttleStatus"] == {
        "maximumAvailable": 100,
        "currentlyAvailable": pytest.approx(84, abs=0.01),
        "restoreRate": 0.001,
    }
    headers = ctx["response"].headers
    assert headers["X-RateLimit-Limit"] == "100"
    assert headers["X-RateLimit-Remaining"] == "84"
    assert headers["RateLimit-Policy"] == '"tenant";q=100;w=100000'
    assert headers["RateLimit"].startswith('"tenant";r=84;t=')
    assert ctx["response"].status_code is None  # left to the integration: 200


def test_an_over_budget_query_is_refused_before_any_resolver_runs(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    assert schema.execute_sync(EXPENSIVE, context_value=context("t")).errors is None  # 84 left
    shop.resolver_calls.clear()
    cheap = "{ products(first: 10) { name } }"  # 20
    for _ in range(4):  # 84 -> 4 (the catalog returns 4 products: 8 actual, 12 refunded)
        assert schema.execute_sync(cheap, context_value=context("t")).errors is None
    shop.resolver_calls.clear()
    ctx = context("t")
    result = schema.execute_sync(EXPENSIVE, context_value=ctx)
    assert result.data is None
    assert shop.resolver_calls == []
    (error,) = result.errors
    assert error.extensions["code"] == "RATE_LIMITED"
    assert error.extensions["cost"] == 70
    assert error.extensions["limit"] == 100
    remaining = error.extensions["remaining"]
    assert 0 < remaining < 70
    assert error.extensions["retryAfter"] > 0
    assert error.message.startswith(f"This query costs 70 points but only {round(remaining)} of")
    assert "your 100 remain; retry in" in error.message
    assert ctx["response"].status_code == 429
    assert int(ctx["response"].headers["Retry-After"]) >= 1


def test_tenants_have_separate_budgets_and_tiers(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    one = schema.execute_sync(EXPENSIVE, context_value=context("one"))
    acme = schema.execute_sync(EXPENSIVE, context_value=context("acme"))  # pro: 1000
    assert one.extensions["cost"]["throttleStatus"]["maximumAvailable"] == 100
    assert acme.extensions["cost"]["throttleStatus"]["maximumAvailable"] == 1000


def test_a_cost_above_capacity_is_refused_with_its_own_code(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    ctx = context("t")
    result = schema.execute_sync(
        "{ products(first: 100) { reviews(first: 10) { stars } } }", context_value=ctx
    )  # 100 × (2 + 10) = 1200 > 100
    (error,) = result.errors
    assert error.extensions["code"] == "COST_EXCEEDS_CAPACITY"
    assert "more than the 100" in error.message
    assert "retryAfter" not in error.extensions
    assert ctx["response"].status_code == 400
    assert shop.resolver_calls == []


def test_per_operation_quota_of_a_tier(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    mutation = "mutation ExportOrders { exportOrders }"  # mutation weight 10
    assert schema.execute_sync(mutation, context_value=context("acme")).errors is None
    assert schema.execute_sync(mutation, context_value=context("acme")).errors is None
    result = schema.execute_sync(mutation, context_value=context("acme"))
    (error,) = result.errors  # the operation quota holds 20: the third is refused
    assert error.extensions["code"] == "RATE_LIMITED"
    assert error.extensions["quota"] == "op:ExportOrders"
    assert error.extensions["limit"] == 20
    # The same mutation under another name is not limited by that quota.
    other = schema.execute_sync("mutation Other { exportOrders }", context_value=context("acme"))
    assert other.errors is None


@pytest.mark.parametrize(
    ("extra", "query", "code"),
    [
        ("max_depth = 2\n", "{ products { reviews { stars } } }", "QUERY_TOO_DEEP"),
        ("max_cost = 50\n", EXPENSIVE, "QUERY_TOO_COMPLEX"),
        ("max_aliases = 1\n", "{ a: hello b: hello }", "TOO_MANY_ALIASES"),
        ("max_root_fields = 1\n", "{ hello products { name } }", "TOO_MANY_ROOT_FIELDS"),
    ],
)
def test_static_limits_refuse_with_their_code(
    write_config: Callable[..., Path], extra: str, query: str, code: str
) -> None:
    schema = shop.make_schema(CostLimiter.from_config(write_config("[cost]\n" + extra)))
    result = schema.execute_sync(query, context_value=context("t"))
    assert result.data is None
    (error,) = result.errors
    assert error.extensions["code"] == code
    assert shop.resolver_calls == []


def test_wrong_variables_get_bad_user_input(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    result = schema.execute_sync(
        "query Q($n: Int!) { products(first: $n) { name } }",
        variable_values={"n": "ten"},
        context_value=context("t"),
    )
    (error,) = result.errors
    assert error.extensions["code"] == "BAD_USER_INPUT"
    assert shop.resolver_calls == []


def test_graphql_cost_validate_prices_without_running_and_pays_the_minimum(
    limiter: CostLimiter,
) -> None:
    schema = shop.make_schema(limiter)
    for number in range(1, 4):
        result = schema.execute_sync(
            EXPENSIVE, context_value=context("t", **{"GraphQL-Cost": "validate"})
        )
        assert result.errors is None
        assert result.data is None
        cost = result.extensions["cost"]
        assert cost["requestedQueryCost"] == 70
        assert cost["breakdown"] == {"Query.products": 20, "Product.reviews": 50}
        # It reports what remains after the minimum charge it paid, not the 70.
        available = cost["throttleStatus"]["currentlyAvailable"]
        assert available == pytest.approx(100 - number, abs=0.01)
    assert shop.resolver_calls == []
    # Each paid [limits] min_charge (1), and `{ hello }` (priced 0) pays it too.
    after = schema.execute_sync("{ hello }", context_value=context("t"))
    assert after.extensions["cost"]["throttleStatus"]["currentlyAvailable"] == pytest.approx(
        96, abs=0.01
    )


def test_graphql_cost_report_runs_and_adds_the_breakdown(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    result = schema.execute_sync(
        EXPENSIVE, context_value=context("t", **{"graphql-cost": "report"})
    )
    assert result.errors is None
    assert result.data["products"]
    assert result.extensions["cost"]["breakdown"]["Product.reviews"] == 50
    assert result.extensions["cost"]["actualQueryCost"] == 16


def test_shadow_mode_never_blocks_but_logs(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    path = write_config(base=BASE_SHADOW)
    schema = shop.make_schema(CostLimiter.from_config(path))
    caplog.set_level("INFO", logger="quotaql")
    for _ in range(5):  # 5 × 70 > 100: would be blocked from the second
        result = schema.execute_sync(
            "{ products(first: 10) { name reviews(first: 5) { stars } } }",
            context_value=context("t"),
        )
        assert result.errors is None
        assert result.data["products"]
    shadow = [r for r in caplog.records if getattr(r, "quotaql_event", None) == "shadow_blocked"]
    assert shadow
    assert shadow[0].tenant == hashed("key:t")  # never the raw key in logs


BASE_SHADOW = """
[limits]
mode = "shadow"
refund_unused = false
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tenants.t]
tier = "free"
"""


def test_mode_off_does_nothing(write_config: Callable[..., Path]) -> None:
    path = write_config(
        base='[limits]\nmode = "off"\n[tiers.free]\ncapacity = 1\nrefill_per_second = 1\n'
    )
    schema = shop.make_schema(CostLimiter.from_config(path))
    result = schema.execute_sync(EXPENSIVE, context_value=context("t"))
    assert result.errors is None
    assert "cost" not in (result.extensions or {})


def test_expose_cost_false_hides_the_extension(write_config: Callable[..., Path]) -> None:
    schema = shop.make_schema(CostLimiter.from_config(write_config(base=BASE_HIDDEN)))
    result = schema.execute_sync("{ hello }", context_value=context("t"))
    assert result.errors is None
    assert "cost" not in (result.extensions or {})


BASE_HIDDEN = """
[limits]
expose_cost = false
[tiers.free]
capacity = 100
refill_per_second = 1
"""


def test_the_rate_limit_field_reports_the_callers_budget(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    result = schema.execute_sync(
        "{ rateLimit { cost limit remaining used tier resetAt } }", context_value=context("acme")
    )
    assert result.errors is None
    rate = result.data["rateLimit"]
    assert rate["cost"] == 1  # the RateLimit object itself
    assert rate["limit"] == 1000
    assert rate["remaining"] == 999
    assert rate["used"] == 1
    assert rate["tier"] == "pro"
    assert rate["resetAt"].endswith("+00:00")


def test_no_context_is_the_anonymous_tenant(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)
    assert schema.execute_sync("{ hello }").errors is None


def test_async_execute_works_the_same(limiter: CostLimiter) -> None:
    schema = shop.make_schema(limiter)

    async def run() -> Any:
        return await schema.execute(EXPENSIVE, context_value=context("t"))

    result = asyncio.run(run())
    assert result.errors is None
    assert result.extensions["cost"]["actualQueryCost"] == 16


def test_every_request_gets_a_fresh_extension(limiter: CostLimiter) -> None:
    assert limiter() is not limiter()
    schema = shop.make_schema(limiter)  # no DeprecationWarning (warnings are errors here)
    assert schema.execute_sync("{ hello }", context_value=context("t")).errors is None


def test_identify_and_tier_resolver(write_config: Callable[..., Path]) -> None:
    limiter = CostLimiter.from_config(
        write_config(),
        identify=lambda ctx: ctx["request"].headers.get("x-user"),
        tier_resolver=lambda subject, ctx: "pro" if subject.key.startswith("id:vip") else None,
    )
    schema = shop.make_schema(limiter)
    vip = schema.execute_sync("{ hello }", context_value=context(**{"x-user": "vip-1"}))
    plain = schema.execute_sync("{ hello }", context_value=context(**{"x-user": "joe"}))
    assert vip.extensions["cost"]["throttleStatus"]["maximumAvailable"] == 1000
    assert plain.extensions["cost"]["throttleStatus"]["maximumAvailable"] == 100


def test_a_subscription_is_priced_when_it_starts_and_each_later_event_is_charged(
    limiter: CostLimiter,
) -> None:
    schema = shop.make_schema(limiter)

    async def run() -> tuple[list[Any], list[Any]]:
        started = await schema.subscribe(
            "subscription { ticks(count: 3) }", context_value=context("t")
        )
        events = [event async for event in started]  # type: ignore[union-attr]
        more = await schema.subscribe(
            "subscription { ticks(count: 1) }", context_value=context("t")
        )
        refused = [event async for event in more]  # type: ignore[union-attr]
        return events, refused

    events, refused = asyncio.run(run())
    assert [event.data for event in events] == [{"ticks": 0}, {"ticks": 1}, {"ticks": 2}]
    # 30 to start (the first event's), then 30 for each later event: 100 - 90, no refund.
    available = [e.extensions["cost"]["throttleStatus"]["currentlyAvailable"] for e in events]
    assert available == pytest.approx([70, 40, 10], abs=0.01)
    assert refused[0].data is None  # 30 > 10 left: refused before it starts
    assert refused[0].errors[0].extensions["code"] == "RATE_LIMITED"


def test_shadow_mode_lets_static_limits_pass_and_sends_no_refusal_headers(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    path = write_config(base=BASE_SHADOW + "[cost]\nmax_depth = 1\n")
    schema = shop.make_schema(CostLimiter.from_config(path))
    caplog.set_level("INFO", logger="quotaql")
    ctx = context("t")
    result = schema.execute_sync("{ products(first: 1) { name } }", context_value=ctx)
    assert result.errors is None  # depth 2 > 1, but shadow mode never blocks
    assert result.extensions["cost"]["requestedQueryCost"] == 2
    shadow = [r for r in caplog.records if getattr(r, "quotaql_event", None) == "shadow_blocked"]
    assert "QUERY_TOO_DEEP" in shadow[0].getMessage()
    for _ in range(60):  # 100 / 2: then the budget would refuse
        ctx = context("t")
        assert (
            schema.execute_sync("{ products(first: 1) { name } }", context_value=ctx).errors is None
        )
    assert "Retry-After" not in ctx["response"].headers
    assert ctx["response"].status_code is None


def test_parser_limits_apply_to_strawberrys_parse(write_config: Callable[..., Path]) -> None:
    path = write_config("[cost]\nmax_length = 40\nmax_tokens = 12\n")
    schema = shop.make_schema(CostLimiter.from_config(path))
    long = schema.execute_sync("{ hello " + " " * 40 + "}", context_value=context("t"))
    (error,) = long.errors
    assert error.extensions["code"] == "QUERY_TOO_LARGE"
    assert error.extensions["limit"] == 40
    many = schema.execute_sync(
        "{ a: hello b: hello c: hello d: hello }", context_value=context("t")
    )
    assert many.errors[0].extensions["code"] == "QUERY_TOO_LARGE"
    assert many.errors[0].extensions["limit"] == 12
    broken = schema.execute_sync("{ hello", context_value=context("t"))
    assert broken.errors[0].extensions["code"] == "GRAPHQL_PARSE_FAILED"
    assert shop.resolver_calls == []
    assert schema.execute_sync("{ hello }", context_value=context("t")).errors is None


def test_a_failing_or_empty_identify_falls_back_to_the_default_identity(
    write_config: Callable[..., Path],
) -> None:
    def broken(context: Any) -> str:
        raise RuntimeError("boom")

    seen: list[str] = []

    def tier(subject: Any, context: Any) -> None:
        seen.append(subject.key)

    for identify in (broken, lambda ctx: "", lambda ctx: None, lambda ctx: 12345):
        limiter = CostLimiter.from_config(write_config(), identify=identify, tier_resolver=tier)
        schema = shop.make_schema(limiter)
        result = schema.execute_sync("{ hello }", context_value=context("t"))
        assert result.errors is None
        assert result.data == {"hello": "world"}
    # A failure, an empty or no answer: the known key pays; anything else is its own subject.
    assert seen == ["key:t", "key:t", "key:t", "id:12345"]


def test_a_global_quota_is_shared_by_every_tenant(write_config: Callable[..., Path]) -> None:
    path = write_config("[global]\ncapacity = 25\nrefill_per_second = 0.001\n")
    schema = shop.make_schema(CostLimiter.from_config(path))
    mutation = "mutation { exportOrders }"  # 10 each
    assert schema.execute_sync(mutation, context_value=context("a")).errors is None
    assert schema.execute_sync(mutation, context_value=context("b")).errors is None
    result = schema.execute_sync(mutation, context_value=context("c"))
    (error,) = result.errors
    assert error.extensions["quota"] == "global"
    assert error.extensions["code"] == "RATE_LIMITED"


def test_a_tier_resolver_naming_an_unknown_tier_falls_back_to_the_default(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    limiter = CostLimiter.from_config(write_config(), tier_resolver=lambda tenant, ctx: "gold")
    schema = shop.make_schema(limiter)
    result = schema.execute_sync("{ hello }", context_value=context("t"))
    assert result.extensions["cost"]["throttleStatus"]["maximumAvailable"] == 100
    assert any(getattr(r, "quotaql_event", None) == "unknown_tier" for r in caplog.records)


def _dead_redis_storage() -> RedisStorage:
    port = free_port()  # nothing listens on it
    return RedisStorage(redis.Redis(host="127.0.0.1", port=port), timeout=0.2)


def test_redis_down_and_fail_closed_answers_rate_limiter_unavailable(
    write_config: Callable[..., Path],
) -> None:
    path = write_config(
        base=BASE_TOML.replace("[limits]\n", '[limits]\non_backend_error = "closed"\n')
    )
    limiter = CostLimiter.from_config(path, storage=_dead_redis_storage())
    schema = shop.make_schema(limiter)
    ctx = context("t")
    result = schema.execute_sync("{ hello }", context_value=ctx)
    assert result.data is None
    (error,) = result.errors
    assert error.extensions["code"] == "RATE_LIMITER_UNAVAILABLE"
    assert error.message.startswith("The rate limiter is unavailable")
    assert ctx["response"].status_code == 503
    assert int(ctx["response"].headers["Retry-After"]) >= 1
    assert shop.resolver_calls == []


def test_redis_down_and_fail_open_runs(write_config: Callable[..., Path]) -> None:
    path = write_config(
        base=BASE_TOML.replace("[limits]\n", '[limits]\non_backend_error = "open"\n')
    )
    schema = shop.make_schema(CostLimiter.from_config(path, storage=_dead_redis_storage()))
    result = schema.execute_sync("{ hello }", context_value=context("t"))
    assert result.errors is None
    assert result.data == {"hello": "world"}


def test_a_failing_tier_resolver_falls_back_to_the_default_tier(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    def broken(tenant: str, context: Any) -> str:
        raise LookupError("no database")

    schema = shop.make_schema(CostLimiter.from_config(write_config(), tier_resolver=broken))
    result = schema.execute_sync("{ hello }", context_value=context("acme"))
    assert result.errors is None
    assert result.extensions["cost"]["throttleStatus"]["maximumAvailable"] == 100
    assert any(getattr(r, "quotaql_event", None) == "tier_resolver_failed" for r in caplog.records)


def test_a_zero_parser_limit_is_a_limit_and_the_breaker_is_configurable(
    write_config: Callable[..., Path],
) -> None:
    from quotaql.limiter import CircuitBreaker

    schema = shop.make_schema(CostLimiter.from_config(write_config("[cost]\nmax_length = 0\n")))
    result = schema.execute_sync("{ hello }", context_value=context("t"))
    assert result.errors[0].extensions["code"] == "QUERY_TOO_LARGE"
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=60)
    limiter = CostLimiter.from_config(write_config(), breaker=breaker)
    assert limiter.limiter.breaker is breaker


def test_deferred_work_is_not_refunded_as_if_it_never_ran(limiter: CostLimiter) -> None:
    # With @defer the result the hook sees has no data yet, and the deferred resolvers run
    # after it: a refund of "what did not run" then would be all of it. It is settled once its
    # last payload was sent, from all its data (quotaql.gate.incremental).
    import strawberry
    from strawberry.schema.config import StrawberryConfig

    schema = strawberry.Schema(
        query=shop.Query,
        extensions=[limiter],
        config=StrawberryConfig(enable_experimental_incremental_execution=True),
    )
    query = "{ products(first: 10) { name ... @defer { reviews(first: 5) { stars } } } }"

    async def run() -> list[Any]:
        result: Any = await schema.execute(query, context_value=context("tenant-a"))
        assert result.initial_result.data["products"][0] == {"name": "product 0"}
        return [part async for part in result.subsequent_results]

    deferred = [item.data for part in asyncio.run(run()) for item in part.incremental]
    assert len(deferred) == shop.CATALOG_SIZE  # the deferred reviews were resolved
    assert all(item["reviews"] for item in deferred)
    quota = limiter.config.tier_of("tenant-a").quota
    remaining = limiter.limiter.peek("key:tenant-a", (quota,)).quotas[0].remaining
    # Its actual cost, 4 × (2 + 2) = 16 of the 70 debited, as if it had run in one piece.
    assert remaining == pytest.approx(100 - 16, abs=0.01)
