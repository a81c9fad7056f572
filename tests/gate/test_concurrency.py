"""Concurrency limits through the gate (``max_in_flight``, issue 13 §2), in memory: leases
taken before the rate debit, refused with ``TOO_MANY_CONCURRENT`` (nothing debited, not
remembered by the deny cache), given back whenever an operation ends, the per-field and the
subscription limits, shadow mode, and what metrics, spans and logs show.

Real Redis (sync and async, its failures and the fail modes) is in
tests/gate/test_concurrency_redis.py; real HTTP servers in tests/http/test_concurrency.py.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.contract import TOO_MANY_CONCURRENT
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.gate import Gate, Operation
from quotaql.gate.charges import in_flight
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.storage.leases import LeaseSpec, MemoryLeases

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + """
type Query {
  hello: String
  search(term: String): [Hit] @listSize(assumedSize: 5)
  big: [Hit] @listSize(assumedSize: 500)
}
type Hit { id: ID }
type Mutation { exportOrders: Int }
type Subscription { ticks: Int @cost(weight: "30") }
"""
)
HELLO = parse("{ hello }")  # costs 0: pays min_charge, 1
SEARCH = parse('{ search(term: "x") { id } }')  # 5
BIG = parse("{ big { id } }")  # 500: more than the tier can ever hold
TICKS = parse("subscription { ticks }")

TOML = """
[limits]
retry_jitter = 0
concurrency_retry_after = 2
max_subscriptions = 100
[tiers.free]
capacity = 100
refill_per_second = 0.001
max_in_flight = 3
max_subscriptions_in_flight = 2
[tiers.free.fields]
"Query.search" = { max_in_flight = 1 }
[tiers.unlimited]
capacity = 100
refill_per_second = 0.001
[tiers.nosubs]
capacity = 100
refill_per_second = 0.001
max_in_flight = 5
max_subscriptions_in_flight = 0
[tiers.shadowed]
capacity = 100
refill_per_second = 0.001
max_in_flight = 1
mode = "shadow"
[tenants.acme]
tier = "free"
[tenants.other]
tier = "free"
[tenants.plain]
tier = "unlimited"
[tenants.quiet]
tier = "nosubs"
[tenants.shady]
tier = "shadowed"
"""


def scope(key: str) -> dict[str, Any]:
    return {"type": "http", "client": ("203.0.113.9", 40000), "headers": [(b"x-api-key",
            key.encode())]}  # fmt: skip


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    def write(text: str = TOML, extra: str = "") -> Path:
        path = tmp_path / "quotaql.toml"
        path.write_text(text + extra, encoding="utf-8")
        return path

    return write


@pytest.fixture
def gate(write: Callable[..., Path]) -> Gate:
    return Gate(load_config(write()))


def admit(gate: Gate, key: str = "acme", document: Any = HELLO) -> Operation:
    return gate.admit(SCHEMA, document, request=scope(key))


def remaining(gate: Gate, key: str = "acme") -> float:
    config = gate.config
    quota = config.tier_of(key).quota
    decision = gate.limiter.peek(f"key:{key}", [quota])
    assert not isinstance(decision, type(None))
    return float(decision.remaining)  # type: ignore[union-attr]


def live(gate: Gate, key: str = "acme", name: str = "tier") -> int:
    leases = gate.leases
    assert isinstance(leases, MemoryLeases)
    return leases.count(f"key:{key}", name)


def test_operations_beyond_max_in_flight_are_refused_and_pay_nothing(gate: Gate) -> None:
    running = [admit(gate) for _ in range(3)]
    assert [op.refused for op in running] == [False] * 3
    assert [op.lease.in_flight for op in running if op.lease] == [1, 2, 3]
    assert live(gate) == 3
    before = remaining(gate)

    refused = admit(gate)

    assert refused.refused
    assert refused.code == TOO_MANY_CONCURRENT
    assert refused.status == 429
    assert refused.errors[0].extensions == {
        "code": TOO_MANY_CONCURRENT,
        "limit": 3,
        "quota": "in_flight",
        "retryAfter": 2.0,  # concurrency_retry_after (no jitter here)
    }
    assert "3 operations running at once" in refused.errors[0].message
    assert refused.headers == {"Retry-After": "2"}
    assert refused.outcome == names.TOO_MANY_CONCURRENT
    assert refused.decision is None
    assert refused.lease is None
    assert remaining(gate) == pytest.approx(before, abs=1e-3)  # the refusal debited nothing
    assert live(gate) == 3  # and took no slot
    # another tenant of the tier has slots of its own
    assert not admit(gate, "other").refused


def test_an_operation_that_ends_frees_its_slot_at_once(gate: Gate) -> None:
    running = [admit(gate) for _ in range(3)]
    assert admit(gate).refused
    gate.finish(running[0])
    assert live(gate) == 3 - 1
    again = admit(gate)  # the deny cache did not keep the refusal: no wait
    assert not again.refused
    assert len(gate._refusals.denials) == 0
    gate.finish(running[0])  # finishing twice gives back nothing twice
    assert live(gate) == 3
    for op in (*running[1:], again):
        gate.finish(op)
    assert live(gate) == 0
    assert gate.in_flight() == {}


def test_a_tier_without_limits_takes_no_lease(write: Callable[..., Path]) -> None:
    no_limits = TOML.split("[tiers.free]", maxsplit=1)[0] + (
        "[tiers.free]\ncapacity = 100\nrefill_per_second = 1\n"
    )
    gate = Gate(load_config(write(no_limits)))
    ops = [admit(gate, "anyone") for _ in range(20)]
    assert not any(op.refused for op in ops)
    assert all(op.lease is None for op in ops)
    assert gate.leases is None
    assert gate.lease_keepers == ()
    plain = Gate(load_config(write()))
    assert admit(plain, "plain").lease is None  # a tier without, beside tiers with


def test_a_rate_refusal_after_the_lease_gives_the_lease_back(gate: Gate) -> None:
    spent = [admit(gate, document=SEARCH) for _ in range(1)]
    gate.finish(spent[0])
    # Spend the budget down to less than one search.
    while remaining(gate) >= 5:
        op = admit(gate)
        gate.finish(op)
    refused = admit(gate, document=SEARCH)
    assert refused.code == "RATE_LIMITED"
    assert refused.lease is None
    assert live(gate) == 0
    assert live(gate, name="field:Query.search") == 0
    assert gate.in_flight() == {}
    gate.finish(refused)


def test_an_operation_that_can_never_fit_gives_its_lease_back(gate: Gate) -> None:
    op = admit(gate, document=BIG)
    assert op.code == "COST_EXCEEDS_CAPACITY"
    assert op.lease is None
    assert live(gate) == 0


def test_a_root_field_limit_counts_only_operations_selecting_it(gate: Gate) -> None:
    search = admit(gate, document=SEARCH)
    assert not search.refused
    assert search.lease is not None
    assert search.lease.names == ("tier", "field:Query.search")

    second = admit(gate, document=SEARCH)

    assert second.code == TOO_MANY_CONCURRENT
    assert second.errors[0].extensions["quota"] == "in_flight:field:Query.search"
    assert second.errors[0].extensions["limit"] == 1
    assert "selecting Query.search" in second.errors[0].message
    # all or nothing: the refused search holds no tier slot either
    assert live(gate) == 1
    others = [admit(gate) for _ in range(2)]  # the tier's other two slots
    assert not any(op.refused for op in others)
    assert admit(gate).code == TOO_MANY_CONCURRENT  # now the tier is full
    assert admit(gate).errors[0].extensions["quota"] == "in_flight"
    gate.finish(search)
    assert live(gate, name="field:Query.search") == 0


def test_subscriptions_have_their_own_limit_and_never_starve_queries(gate: Gate) -> None:
    streams = [admit(gate, document=TICKS) for _ in range(2)]
    assert not any(op.refused for op in streams)
    assert live(gate, name="subscriptions") == 2
    assert live(gate) == 0

    third = admit(gate, document=TICKS)

    assert third.code == TOO_MANY_CONCURRENT
    assert third.errors[0].extensions["quota"] == "in_flight:subscriptions"
    assert "2 subscriptions open" in third.errors[0].message
    assert gate.open_subscriptions() == 2  # the refused one gave its slot back
    queries = [admit(gate) for _ in range(3)]  # the streams take none of the query slots
    assert not any(op.refused for op in queries)
    gate.finish(streams[0])  # a subscription that ends frees its slot
    assert not admit(gate, document=TICKS).refused


def test_a_tier_may_allow_no_subscription_at_all(gate: Gate) -> None:
    refused = admit(gate, "quiet", document=TICKS)
    assert refused.code == TOO_MANY_CONCURRENT
    assert refused.errors[0].extensions["limit"] == 0
    assert refused.errors[0].message == "This API allows no subscriptions on your plan."
    assert gate.open_subscriptions() == 0
    assert not admit(gate, "quiet").refused


def test_shadow_mode_runs_what_it_would_refuse_and_says_so(
    gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    first = admit(gate, "shady")
    with caplog.at_level(logging.INFO, logger="quotaql"):
        second = admit(gate, "shady")
    assert first.lease is not None
    assert not second.refused
    assert second.lease is None  # ran without a lease
    assert second.outcome == names.SHADOW_BLOCKED
    assert any(
        record.quotaql_event == names.SHADOW_BLOCKED and TOO_MANY_CONCURRENT in record.getMessage()
        for record in caplog.records
    )


def test_a_refusal_is_logged_with_its_code(gate: Gate, caplog: pytest.LogCaptureFixture) -> None:
    held = [admit(gate) for _ in range(3)]  # kept: a dropped operation gives its lease back
    assert all(op.lease is not None for op in held)
    with caplog.at_level(logging.INFO, logger="quotaql"):
        admit(gate)
    (record,) = [r for r in caplog.records if r.quotaql_event == names.TOO_MANY_CONCURRENT]
    assert TOO_MANY_CONCURRENT in record.getMessage()
    assert record.tier == "free"
    assert "acme" not in record.getMessage()  # the tenant hashed


def test_retry_after_is_never_later_than_the_earliest_lease_expiry(
    write: Callable[..., Path],
) -> None:
    clock = [1000.0]
    leases = MemoryLeases(clock=lambda: clock[0])
    config = load_config(write(TOML.replace("concurrency_retry_after = 2", "lease_ttl = 30\n"
                                            "concurrency_retry_after = 60")))  # fmt: skip
    gate = Gate(config, leases=leases)
    held = [admit(gate) for _ in range(3)]  # kept: a dropped operation gives its lease back
    assert all(op.lease is not None for op in held)
    clock[0] += 29.6  # the first lease expires in 0.4 s: a slot is free by then at the latest

    refused = admit(gate)

    assert refused.errors[0].extensions["retryAfter"] == pytest.approx(0.4, abs=0.002)
    assert refused.headers == {"Retry-After": "1"}  # whole seconds, at least 1


def test_jitter_spreads_retries_but_never_shortens_them(write: Callable[..., Path]) -> None:
    gate = Gate(load_config(write(TOML.replace("retry_jitter = 0", "retry_jitter = 0.5"))))
    held = [admit(gate) for _ in range(3)]  # kept: a dropped operation gives its lease back
    assert all(op.lease is not None for op in held)
    waits = {admit(gate).errors[0].extensions["retryAfter"] for _ in range(30)}
    assert all(2.0 <= wait <= 3.0 for wait in waits)
    assert len(waits) > 1


def test_an_operation_dropped_without_finish_is_not_renewed_for_good(gate: Gate) -> None:
    admit(gate)  # held nowhere: the adapter never calls finish
    gc.collect()
    assert live(gate) == 1  # still held: the next take gives it back
    gate.finish(admit(gate, "other"))
    assert live(gate) == 0
    assert gate.in_flight() == {}
    (keeper,) = gate.lease_keepers
    assert len(keeper) == 0  # not renewed any more


def test_a_flow_closed_mid_way_gives_its_lease_back(gate: Gate) -> None:
    # The rate debit raises (an interrupted storage call): the operation never reaches
    # the adapter, whose finish would have given the lease back.
    class Interrupted(BaseException):
        pass

    acquire = gate.limiter.acquire

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise Interrupted

    gate.limiter.acquire = interrupted  # type: ignore[method-assign]
    with pytest.raises(Interrupted):
        admit(gate, document=TICKS)
    gate.limiter.acquire = acquire  # type: ignore[method-assign]
    assert live(gate, name="subscriptions") == 0
    assert gate.open_subscriptions() == 0
    assert gate.in_flight() == {}


def test_a_reload_that_adds_a_limit_applies_it(write: Callable[..., Path]) -> None:
    reloading = TOML.replace("[limits]\n", "[limits]\nreload_interval = 0.05\n")
    path = write(reloading.replace("max_in_flight = 3\n", ""))
    gate = Gate.from_config(path)
    assert gate.config.tiers["free"].max_in_flight is None
    held = [admit(gate) for _ in range(5)]  # no tier limit: all run
    assert not any(op.refused for op in held)
    write(reloading.replace("max_in_flight = 3\n", "max_in_flight = 2\n"))
    deadline = time.monotonic() + 5
    while gate.config.tiers["free"].max_in_flight != 2 and time.monotonic() < deadline:
        time.sleep(0.06)
        gate.finish(admit(gate, "other"))  # each admit polls the file
    assert gate.config.tiers["free"].max_in_flight == 2
    new = [admit(gate) for _ in range(3)]
    assert [op.refused for op in new] == [False, False, True]


def test_lease_specs_are_built_once_per_tier(gate: Gate) -> None:
    tier = gate.config.tiers["free"]
    assert in_flight(tier) is not None
    assert in_flight(tier).operations == (LeaseSpec("tier", 3),)  # type: ignore[union-attr]
    assert in_flight(tier).subscriptions == (LeaseSpec("subscriptions", 2),)  # type: ignore[union-attr]
    assert in_flight(gate.config.tiers["unlimited"]) is None
    assert in_flight(gate.config.tiers["nosubs"]).subscriptions is None  # type: ignore[union-attr]


# -- observability ---------------------------------------------------------------------------


def test_metrics_show_leases_held_and_their_outcomes(write: Callable[..., Path]) -> None:
    registry = CollectorRegistry()
    gate = Gate(load_config(write()), metrics=PrometheusMetrics(registry))

    def value(name: str, **labels: str) -> float:
        found = registry.get_sample_value(name, labels)
        return 0.0 if found is None else found

    running = [admit(gate) for _ in range(3)]
    assert value(names.IN_FLIGHT, tier="free") == 3
    refused = admit(gate)
    gate.finish(refused)
    assert value(f"{names.REQUESTS_TOTAL}", decision=names.TOO_MANY_CONCURRENT,
                 operation_type="query", tier="free") == 1  # fmt: skip
    for op in running:
        gate.finish(op)
    assert value(names.IN_FLIGHT, tier="free") == 0
    assert value(names.LEASES_TOTAL, outcome=names.LEASE_TAKEN) == 3
    assert value(names.LEASES_TOTAL, outcome=names.LEASE_REFUSED) == 1
    assert value(names.LEASES_TOTAL, outcome=names.LEASE_RELEASED) == 3
    assert value(names.LEASES_TOTAL, outcome=names.LEASE_EXPIRED) == 0  # every series exists


def test_the_keeper_renews_long_operations_and_the_metrics_count_it(
    write: Callable[..., Path],
) -> None:
    registry = CollectorRegistry()
    config = load_config(write(TOML.replace("retry_jitter = 0", "retry_jitter = 0\nlease_ttl = 1")))
    gate = Gate(config, metrics=PrometheusMetrics(registry))
    op = admit(gate)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # every 1/3 s
        renewed = registry.get_sample_value(names.LEASES_TOTAL, {"outcome": "renewed"})
        if renewed and renewed >= 3:
            break
        time.sleep(0.1)
    assert renewed is not None
    assert renewed >= 3
    assert live(gate) == 1  # 1.5 s past its first ttl: alive because it is renewed
    gate.finish(op)
    assert live(gate) == 0
    assert registry.get_sample_value(names.LEASES_TOTAL, {"outcome": "released"}) == 1


def test_a_lease_that_expired_before_its_release_is_counted_logged_and_traced(
    write: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    clock = [5000.0]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    gate = Gate(
        load_config(write()),
        leases=MemoryLeases(clock=lambda: clock[0]),
        metrics=PrometheusMetrics(registry),
        tracer_provider=provider,
    )
    op = admit(gate)
    clock[0] += 31  # a stall longer than lease_ttl (30 s): nobody renewed it
    with caplog.at_level(logging.WARNING, logger="quotaql"):
        gate.finish(op)

    assert registry.get_sample_value(names.LEASES_TOTAL, {"outcome": "expired"}) == 1
    (record,) = [r for r in caplog.records if r.quotaql_event == "lease_expired"]
    assert record.tier == "free"
    assert record.limits == ["tier"]
    (span,) = exporter.get_finished_spans()
    assert span.attributes[names.ATTR_IN_FLIGHT] == 1
    assert [event.name for event in span.events] == [names.EVENT_LEASE_EXPIRED]


def test_the_span_carries_the_in_flight_count(write: Callable[..., Path]) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gate = Gate(load_config(write()), tracer_provider=provider)
    ops = [admit(gate) for _ in range(4)]
    for op in ops:
        gate.finish(op)
    plain = admit(gate, "plain")
    gate.finish(plain)
    spans = exporter.get_finished_spans()
    assert [span.attributes.get(names.ATTR_IN_FLIGHT) for span in spans] == [1, 2, 3, None, None]
    assert spans[3].attributes[names.ATTR_DECISION] == names.TOO_MANY_CONCURRENT
