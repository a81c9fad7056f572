"""Redis keys (one hash tag per tenant, escaped or hashed) and reloading the script after NOSCRIPT."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from quotaql import AsyncRedisStorage, Quota, RedisStorage
from quotaql.policy.quota import ALGORITHM_NAMES
from quotaql.storage import Debit
from quotaql.storage.memory import MemoryStorage
from quotaql.storage.redis import redis_key, script_source

if TYPE_CHECKING:
    import redis
    import redis.cluster

    from tests.support.servers import AsyncRunner, RedisCluster, RedisServer

T0 = 1_700_000_000_000
TIMEOUT = 5.0
BUCKET = Quota("tenant", capacity=10, refill_per_second=1)
LOG = Quota("ops", limit=10, window_seconds=10, algorithm="sliding_log")
SAFE_ALPHABET = "ABCXYZabcxyz0123456789_.:@/+=-"


def digest(tenant: str) -> str:
    raw = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).digest()[:16]
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def tag_of(key: str) -> str:
    return key[key.index("{") + 1 : key.index("}")]


# -- redis_key -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tenant", "key"),
    [
        ("acme", "quotaql:{t:acme}:~q"),
        ("ACME", "quotaql:{t:ACME}:~q"),
        ("user@example.com", "quotaql:{t:user@example.com}:~q"),
        ("a/b+c=d-e_f.g:h", "quotaql:{t:a/b+c=d-e_f.g:h}:~q"),
        ("x" * 64, f"quotaql:{{t:{'x' * 64}}}:~q"),
        (None, "quotaql:{global}:~q"),
    ],
)
def test_safe_tenants_are_kept_readable_in_their_hash_tag(tenant: str | None, key: str) -> None:
    assert redis_key("quotaql", tenant, BUCKET) == key


@pytest.mark.parametrize(
    "tenant",
    [
        "",
        " ",
        "a b",
        "{a}b",
        "a}",
        "{",
        "ü",
        "🔑",
        "\0",
        "a\nb",
        "*",
        "x" * 65,
        "x" * 10_000,
        "\ud800",
    ],
)
def test_other_tenants_are_hashed_into_their_hash_tag(tenant: str) -> None:
    assert redis_key("quotaql", tenant, BUCKET) == f"quotaql:{{h:{digest(tenant)}}}:~q"


@pytest.mark.parametrize(
    ("lookalike", "original"),
    [
        ("t:acme", "acme"),  # the tag "acme" gets
        ("global", None),  # the shared scope's tag
        (f"h:{digest('{a}')}", "{a}"),  # a hashed tenant's tag
    ],
)
def test_a_tenant_that_spells_another_ones_tag_gets_a_different_key(
    lookalike: str, original: str | None
) -> None:
    assert redis_key("quotaql", lookalike, BUCKET) != redis_key("quotaql", original, BUCKET)


def test_the_prefix_and_the_quota_name_frame_the_tag() -> None:
    # A quota that is not a token bucket carries its algorithm's mark ("~" is not allowed in
    # quota names): a quota renamed to another algorithm never reads the other's state.
    assert redis_key("rl", "acme", LOG) == "rl:{t:acme}:ops~log"
    assert redis_key("a:b", None, LOG) == "a:b:{global}:ops~log"
    # Buckets and windows are fields of their group's hash: the tenant's own, or a user's.
    assert redis_key("rl", "acme", BUCKET) == "rl:{t:acme}:~q"
    assert BUCKET.state_field == "tenant"
    window = Quota("daily", limit=5, window_seconds=60, algorithm="fixed_window")
    assert (redis_key("rl", "acme", window), window.state_field) == ("rl:{t:acme}:~q", "daily~fw")
    user = BUCKET.scoped("u1")
    assert (redis_key("rl", "acme", user), user.state_field) == ("rl:{t:acme}:~u:s:u1", "tenant")
    hashed = BUCKET.scoped("{u} 1")
    assert redis_key("rl", "acme", hashed).startswith("rl:{t:acme}:~u:h:")


@settings(max_examples=300, deadline=None)
@given(name=st.from_regex(r"[A-Za-z0-9_.:@/+=-]{1,128}", fullmatch=True), scope=st.text(min_size=1))
def test_no_quota_key_is_another_groups_hash(name: str, scope: str) -> None:
    """A sliding log's keys start with its name, never with ``~``: no quota name spells the
    tenant's hash or a user's; and a user's hash is never the tenant's."""
    log = Quota(name, limit=5, window_seconds=1, algorithm="sliding_log")
    groups = {redis_key("p", "acme", BUCKET), redis_key("p", "acme", BUCKET.scoped(scope))}
    assert len(groups) == 2
    for key in (redis_key("p", "acme", log), redis_key("p", "acme", log.scoped(scope))):
        assert key not in groups
        assert key + "#log" not in groups


TENANTS = st.one_of(
    st.text(),
    st.text(alphabet=SAFE_ALPHABET, max_size=70),
    st.text(alphabet="{}:th ", max_size=12),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(tenant=TENANTS)
def test_every_key_holds_exactly_one_hash_tag_shared_by_all_the_tenants_quotas(
    tenant: str | None,
) -> None:
    keys = [redis_key("quotaql", tenant, quota) for quota in (BUCKET, LOG)]
    for key in keys:
        assert key.count("{") == 1, key
        assert key.count("}") == 1, key
        assert key.startswith("quotaql:{")
        assert len(key) <= len("quotaql:{t:}:ops~log") + 64
    assert len({key_slot(key.encode("utf-8", "surrogatepass")) for key in keys}) == 1
    assert tag_of(keys[0]) == tag_of(keys[1])


@settings(max_examples=300, deadline=None)
@given(first=TENANTS, second=TENANTS)
def test_different_tenants_never_share_a_key(first: str | None, second: str | None) -> None:
    if first != second:
        assert redis_key("quotaql", first, BUCKET) != redis_key("quotaql", second, BUCKET)


@pytest.mark.parametrize("prefix", ["", "a{b", "a}b", "{x}"])
def test_a_prefix_that_could_break_the_hash_tag_is_refused(
    redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(ValueError, match="prefix must be a non-empty string without braces"):
        RedisStorage(redis_client, prefix=prefix)


@pytest.mark.parametrize("timeout", [0, -1, True, float("nan")])
def test_a_timeout_must_be_positive_seconds(redis_client: redis.Redis, timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        RedisStorage(redis_client, timeout=timeout)


def test_the_storage_writes_under_its_prefix_and_the_tenants_tag(
    redis_client: redis.Redis,
) -> None:
    storage = RedisStorage(redis_client, prefix="rl", timeout=TIMEOUT)
    try:
        storage.acquire(Debit("{a} b", 1, [BUCKET, LOG], now=T0))
    finally:
        storage.close()
    tag = f"h:{digest('{a} b')}"
    assert sorted(redis_client.keys("*")) == [
        f"rl:{{{tag}}}:ops~log".encode(),
        f"rl:{{{tag}}}:ops~log#log".encode(),
        f"rl:{{{tag}}}:~q".encode(),
    ]


# -- NOSCRIPT: the script is loaded again -----------------------------------------------------


def script_sha() -> str:
    # Redis names scripts by SHA-1; BUCKET and LOG take the script of these two algorithms.
    source = script_source(("token_bucket", "sliding_log"))
    return hashlib.sha1(source.encode()).hexdigest()


def test_acquire_loads_the_script_again_after_script_flush(redis_client: redis.Redis) -> None:
    storage = RedisStorage(redis_client, timeout=TIMEOUT)
    try:
        assert storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0)).remaining == 6
        redis_client.script_flush()
        assert redis_client.script_exists(script_sha()) == [False]
        assert storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0)).remaining == 2
        assert redis_client.script_exists(script_sha()) == [True]
        redis_client.script_flush()
        assert storage.peek("acme", [BUCKET, LOG], now=T0).remaining == 2
        redis_client.script_flush()
        storage.refund(Debit("acme", 2, [BUCKET, LOG], now=T0))
        assert storage.peek("acme", [BUCKET, LOG], now=T0).remaining == 4
    finally:
        storage.close()


def test_async_acquire_loads_the_script_again_after_script_flush(
    redis_client: redis.Redis, async_redis_client: AsyncRunner[Any]
) -> None:
    async def body(client: Any) -> list[float]:
        storage = AsyncRedisStorage(client, timeout=TIMEOUT)
        try:
            first = await storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0))
            redis_client.script_flush()
            second = await storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0))
            redis_client.script_flush()
            peeked = await storage.peek("acme", [BUCKET, LOG], now=T0)
            return [first.remaining, second.remaining, peeked.remaining]
        finally:
            await storage.close()

    assert async_redis_client(body) == [6, 2, 2]


def test_the_cluster_loads_the_script_again_after_script_flush_on_every_node(
    redis_cluster: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    storage = RedisStorage(cluster_client, timeout=TIMEOUT)
    tenants = [f"tenant-{n}" for n in range(12)]  # spread over the masters
    try:
        for tenant in tenants:
            assert storage.acquire(Debit(tenant, 4, [BUCKET, LOG], now=T0)).allowed
        for node in redis_cluster.nodes:
            with node.client() as client:
                client.script_flush()
        for tenant in tenants:
            assert storage.acquire(Debit(tenant, 4, [BUCKET, LOG], now=T0)).remaining == 2
    finally:
        storage.close()
    assert len({redis_cluster.node_for_key(redis_key("quotaql", t, BUCKET)) for t in tenants}) > 1


def test_the_same_storage_works_again_after_a_restart(fresh_redis_server: RedisServer) -> None:
    with fresh_redis_server.client() as client:
        storage = RedisStorage(client, timeout=TIMEOUT)
        try:
            assert storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0)).remaining == 6
            fresh_redis_server.restart()  # empty: no data, no scripts
            assert storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0)).remaining == 6
            assert storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0)).remaining == 2
        finally:
            storage.close()


def test_the_same_async_storage_works_again_after_a_restart(
    fresh_redis_server: RedisServer,
) -> None:
    from tests.support.servers import AsyncRunner

    async def body(client: Any) -> list[float]:
        storage = AsyncRedisStorage(client, timeout=TIMEOUT)
        try:
            first = await storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0))
            # In a thread, so the loop keeps running (and sees its connection close) meanwhile.
            await asyncio.to_thread(fresh_redis_server.restart)  # empty: no data, no scripts
            second = await storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0))
            third = await storage.acquire(Debit("acme", 4, [BUCKET, LOG], now=T0))
            return [first.remaining, second.remaining, third.remaining]
        finally:
            await storage.close()

    assert AsyncRunner(fresh_redis_server.async_client)(body) == [6, 6, 2]


def test_a_script_holds_only_the_algorithms_it_is_for() -> None:
    bucket_only = script_source(("token_bucket",))
    assert "token_bucket_check" in bucket_only
    for other in ("gcra_check", "sliding_log_check", "sliding_counter_check", "fixed_window_check"):
        assert other not in bucket_only
    # The order asked for does not matter: one source per set.
    assert script_source(("gcra", "fixed_window")) == script_source(("fixed_window", "gcra"))
    with pytest.raises(ValueError, match="unknown algorithms: leaky"):
        script_source(("token_bucket", "leaky"))


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_one_quota_name_under_each_algorithm_keeps_separate_states(
    backend: str, redis_client: redis.Redis
) -> None:
    # A tenant moving from a token-bucket tier to a window tier (both quotas are "tenant"),
    # or a config edited to another algorithm: neither algorithm reads the other's state.
    storage: Any = MemoryStorage() if backend == "memory" else RedisStorage(redis_client)
    try:
        for algorithm in ALGORITHM_NAMES:
            if algorithm in ("token_bucket", "gcra"):
                quota = Quota("tenant", capacity=10, refill_per_second=1, algorithm=algorithm)
            else:
                quota = Quota("tenant", limit=10, window_seconds=10, algorithm=algorithm)
            first = storage.acquire(Debit("mover", 4, [quota], now=T0))
            assert first.allowed, algorithm
            assert first.remaining == 6, algorithm  # a fresh state, not another algorithm's
            assert storage.acquire(Debit("mover", 4, [quota], now=T0)).remaining == 2, algorithm
    finally:
        if backend == "redis":
            storage.close()
