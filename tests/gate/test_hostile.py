"""No free work, at the gate: every request pays, a refused subject is refused from memory,
a hostile document is refused before validation, and a half-written config is never applied.

Each test is an attack issue 11 found (the HTTP versions, on real servers, are in
tests/http/test_hostile.py).
"""

# ruff: noqa: F811 (test_gate's fixtures, imported by name)
from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import get_introspection_query, parse

from quotaql.config import load_config
from quotaql.cost_analysis.model import SAFE_LIMITS, CostLimits
from quotaql.cost_analysis.screen import screen
from quotaql.errors import (
    ConfigError,
    LimitExceeded,
    TooManyDirectives,
    TooManyFieldPairs,
    TooManyFields,
)
from quotaql.gate import Gate
from quotaql.limiter.deny import DenyCache
from quotaql.policy.quota import Decision, Quota
from quotaql.storage.memory import MemoryStorage
from tests.gate.test_gate import (  # noqa: F401 (its fixtures, by name)
    SCHEMA,
    TOML,
    admit,
    config_path,
    gate,
    scope,
)
from tests.support.introspection import INTROSPECTION_QUERIES

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def remaining(gate: Gate, key: str = "t") -> float:
    op = gate.admit(SCHEMA, parse("{ hello }"), request=scope(key=key))
    assert op.decision is not None
    return op.decision.remaining + op.charge  # before this probe's own minimum charge


# -- every request pays ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("{ hello", "GRAPHQL_PARSE_FAILED"),  # does not parse
        ("{ nope }", None),  # does not validate (graphql-core's error, no code)
        ("{ " + " ".join(f"a{i}: hello" for i in range(101)) + " }", "TOO_MANY_ALIASES"),
        ("query Q($n: Int!) { products(first: $n) { id } }", "BAD_USER_INPUT"),  # the analysis
    ],
)
def test_every_refused_document_pays_the_minimum_charge(gate: Gate, query: str, code: str) -> None:
    before = remaining(gate)
    for _ in range(3):
        document = gate.parse(SCHEMA, query)
        op = gate.admit(SCHEMA, document, request=scope(key="t"))
        assert op.refused
        assert (op.errors[0].extensions or {}).get("code") == code
        assert (op.charge, op.outcome) == (1.0, "rejected")
        gate.finish(op)
    assert remaining(gate) == pytest.approx(before - 1 - 3, abs=0.01)  # the first probe, 3 tries


def test_a_validate_only_request_pays_the_minimum_and_reports_what_remains(gate: Gate) -> None:
    request = scope(key="t", graphql_cost="validate")
    op = admit(gate, "{ products(first: 50) { id } }", request)
    assert (op.refused, op.runs, op.cost, op.charge, op.outcome) == (
        False,
        False,
        50,
        1,
        "validated",
    )
    assert op.decision is not None
    assert op.decision.remaining == pytest.approx(99, abs=0.01)
    assert gate.results(op)["cost"]["throttleStatus"]["currentlyAvailable"] == pytest.approx(99)


def test_validate_only_requests_run_a_budget_dry_and_are_then_refused(
    config_path: Callable[[str], Path],
) -> None:
    gate = Gate(load_config(config_path(TOML.replace("capacity = 100", "capacity = 3"))))
    request = scope(key="t", graphql_cost="validate")
    ops = [admit(gate, "{ hello }", request) for _ in range(5)]
    assert [op.code for op in ops] == [None, None, None, "RATE_LIMITED", "RATE_LIMITED"]
    assert ops[3].status == 429
    assert [op.outcome for op in ops] == ["validated"] * 3 + ["blocked", "denied"]


def test_an_operation_priced_below_the_minimum_pays_the_minimum_and_keeps_it(gate: Gate) -> None:
    op = admit(gate, "{ products(first: 5) { id } }")
    assert (op.cost, op.charge) == (5, 5)
    gate.settle(op, {"products": []})  # ran nothing: everything but the minimum comes back
    assert op.refunded == 4
    free = admit(gate, "{ hello }")
    assert (free.cost, free.charge) == (0, 1)
    assert free.decision.remaining == pytest.approx(100 - 1 - 1, abs=0.01)


def test_min_charge_zero_restores_free_refusals(config_path: Callable[[str], Path]) -> None:
    gate = Gate(load_config(config_path(TOML.replace("[limits]\n", "[limits]\nmin_charge = 0\n"))))
    op = gate.admit(SCHEMA, gate.parse(SCHEMA, "{ hello"), request=scope(key="t"))
    assert (op.refused, op.decision, op.charge) == (True, None, 0.0)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("min_charge = -1", "limits.min_charge: expected a finite number >= 0, got -1"),
        ("retry_jitter = 2", "limits.retry_jitter: expected a number from 0 to 1, got 2"),
        ("local_share = 1.5", "limits.local_share: expected a number from 0 to 1, got 1.5"),
        ("deny_cache_size = -3", "limits.deny_cache_size: expected an integer >= 0, got -3"),
        ("open_cap = 0", "open_cap must be a number above 0 and at most 1, got 0.0"),
    ],
)
def test_the_new_limits_keys_are_checked_with_file_and_line(
    config_path: Callable[[str], Path], line: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(config_path(TOML.replace("[limits]\n", f"[limits]\n{line}\n")))
    assert message in str(raised.value)
    assert "quotaql.toml" in str(raised.value)


# -- the deny cache -------------------------------------------------------------------------


class CountingStorage(MemoryStorage):
    """The memory storage, counting the decisions asked of it (the deny cache saves them)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def acquire(self, *args: Any, **kwargs: Any) -> Decision:
        self.calls += 1
        return super().acquire(*args, **kwargs)


def test_a_flood_from_an_exhausted_subject_is_refused_before_parsing_from_memory(
    config_path: Callable[[str], Path],
) -> None:
    storage = CountingStorage()
    gate = Gate(load_config(config_path(TOML)), storage=storage)
    gate.limiter._core.infallible = False  # go through acquire(), to count the calls
    assert not admit(gate, "{ products(first: 100) { id } }").refused  # 0 left
    refused = admit(gate, "{ products(first: 5) { id } }")
    assert (refused.code, refused.outcome) == ("RATE_LIMITED", "blocked")
    calls = storage.calls
    for query in ("{ hello }", "{ hello", "{ nope }", "{ products(first: 1) { id } }"):
        op = gate.begin(request=scope(key="t"))
        assert op.refused  # before anything is parsed
        assert (op.code, op.outcome, op.status, op.denied) == ("RATE_LIMITED", "denied", 429, True)
        assert op.errors[0].extensions["cost"] == 1  # the least any request pays
        assert 0 < op.errors[0].extensions["retryAfter"] <= 1000 * 1.1 + 0.01
        assert gate.parse(SCHEMA, query, op=op) == op.errors  # parse answers it unparsed
        assert gate.admit(SCHEMA, parse("{ hello }"), op=op) is op
        gate.finish(op)
    assert storage.calls == calls  # not one decision asked of the storage
    # Another subject is not affected.
    assert not admit(gate, "{ hello }", scope(key="acme")).refused


def test_the_deny_cache_refuses_before_parsing_only_what_the_storage_would_refuse() -> None:
    clock = [1000.0]
    cache = DenyCache(clock=lambda: clock[0])
    quota = Quota("tenant", capacity=100, refill_per_second=10)
    # 30 left, 50 asked: a request of 1 point would pass, so nothing is refused unparsed...
    short = Decision(False, 50.0, 30.0, 100.0, 2.0, 7.0, "tenant", "redis", "rate_limited")
    assert cache.remember("k", short, (quota,), min_charge=1.0)
    assert cache.before_parsing("k") is None
    # ...but the same 50 (or more) is refused until its retry time, from memory.
    same = cache.priced("k", 50.0)
    assert same is not None
    assert same.decision.retry_after == pytest.approx(2.0)
    more = cache.priced("k", 70.0)  # 20 more points at 10 a second
    assert more is not None
    assert more.decision.retry_after == pytest.approx(4.0)
    assert cache.priced("k", 40.0) is None  # cheaper: the storage decides
    assert cache.priced("k", 101.0) is None  # never fits: the storage says so
    clock[0] += 2.0
    assert cache.priced("k", 50.0) is None
    assert len(cache) == 0


@pytest.mark.parametrize(
    ("limited_by", "reason", "retry"),
    [
        ("field:Mutation.exportOrders", "rate_limited", 3.0),  # one root field's quota
        ("op:ExportOrders", "rate_limited", 3.0),  # one operation name's quota
        ("tenant", "exceeds_capacity", None),  # waiting never helps
        ("tenant", "backend_unavailable", 1.0),  # fail closed: nobody refused the subject
    ],
)
def test_the_deny_cache_keeps_only_refusals_of_the_subject_that_waiting_ends(
    limited_by: str, reason: Any, retry: float | None
) -> None:
    cache = DenyCache()
    refused = Decision(False, 5.0, 0.0, 3.0, retry, 9.0, limited_by, "redis", reason)
    assert not cache.remember("k", refused, (), min_charge=1.0)
    assert cache.before_parsing("k") is None


def test_a_users_refusal_is_not_its_tenants(config_path: Callable[[str], Path]) -> None:
    principals = iter(["alice"] * 3 + ["bob"])
    gate = Gate(load_config(config_path(TOML)), principal=lambda context: next(principals))
    assert not admit(gate, "{ products(first: 25) { id } }", scope(key="acme")).refused
    refused = admit(gate, "{ products(first: 1) { id } }", scope(key="acme"))
    assert (refused.code, refused.decision.limited_by) == ("RATE_LIMITED", "user")
    assert gate.begin(request=scope(key="acme")).denied  # alice again: denied unparsed
    assert not gate.begin(request=scope(key="acme")).refused  # bob: his own budget


def test_the_deny_cache_is_bounded(config_path: Callable[[str], Path]) -> None:
    text = TOML.replace("[limits]\n", "[limits]\ndeny_cache_size = 3\n")
    gate = Gate(load_config(config_path(text)))
    for number in range(10):
        request = scope(peer=f"198.51.100.{number}")
        assert not admit(gate, "{ products(first: 100) { id } }", request).refused
        assert admit(gate, "{ hello }", request).code == "RATE_LIMITED"
    assert len(gate._refusals.denials) == 3


def test_retry_after_carries_jitter_never_below_the_exact_time(
    config_path: Callable[[str], Path],
) -> None:
    gate = Gate(
        load_config(config_path(TOML.replace("[limits]\n", "[limits]\nretry_jitter = 0.5\n")))
    )
    assert not admit(gate, "{ products(first: 100) { id } }").refused
    exact = 50 / 0.001  # 50 points short, at 0.001 a second
    waits = []
    for number in range(20):
        request = scope(peer=f"198.51.100.{number}", key="t")
        op = gate.admit(SCHEMA, parse("{ products(first: 50) { id } }"), request=request)
        wait = op.errors[0].extensions["retryAfter"]
        assert exact <= wait <= exact * 1.5 + 1e-6
        assert int(op.headers["Retry-After"]) >= exact
        waits.append(wait)
        gate._refusals.denials.clear()  # ask the storage each time
    assert len(set(waits)) > 10  # spread, not one herd


# -- the static pass ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(INTROSPECTION_QUERIES))
def test_the_standard_introspection_queries_pass_the_default_limits(gate: Gate, name: str) -> None:
    document = gate.parse(SCHEMA, INTROSPECTION_QUERIES[name])
    assert not isinstance(document, list), document
    op = gate.admit(SCHEMA, document, request=scope(key="t"))
    assert not op.refused


def test_graphql_cores_own_introspection_query_passes_too() -> None:
    query = get_introspection_query(
        descriptions=True, specified_by_url=True, directive_is_repeatable=True,
        schema_description=True, input_value_deprecation=True,
    )  # fmt: skip
    screen(parse(query), SAFE_LIMITS)


@pytest.mark.parametrize(
    ("limits", "error"),
    [
        (SAFE_LIMITS, TooManyFieldPairs),  # 2,000 pairs of spreads come first
        (dataclasses.replace(SAFE_LIMITS, max_field_pairs=None), TooManyFields),
    ],
)
def test_a_fragment_bomb_is_refused_after_at_most_max_fields_visits(
    limits: CostLimits, error: type[Exception]
) -> None:
    # Each fragment spreads the next twice: 2**40 fields, expanded. The walk stops at 1000.
    fragments = "".join(f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}" for i in range(40))
    document = parse("{ ...F0 }" + fragments + "fragment F40 on Query { hello }")
    started = time.perf_counter()
    with pytest.raises(error):
        screen(document, limits)
    assert time.perf_counter() - started < 1.0  # bounded work (it was 2**40 visits)


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("{ " + " ".join(f"c{i}: hello" for i in range(101)) + " }", "TOO_MANY_ALIASES"),
        ("{ " + " hello" * 31 + " }", "TOO_MANY_FIELDS"),  # one response name 31 times
        (
            "{ " + " ".join(f"x: products(first: {i}) {{ id }}" for i in range(31)) + " }",
            "TOO_MANY_FIELDS",
        ),
        ("{ hello" + " @include(if: true)" * 21 + " }", "TOO_MANY_DIRECTIVES"),
        ("{ " + "products { " * 21 + "id" + " }" * 22, "QUERY_TOO_DEEP"),
        # An unused fragment is validated all the same: screened too.
        ("{ hello } fragment U on Query { " + " hello" * 31 + " }", "TOO_MANY_FIELDS"),
        # The repeats hide behind fragments: merged as validation merges them.
        (
            "{ ...A ...B } fragment A on Query { "
            + " hello" * 16
            + " } fragment B on Query { "
            + " hello" * 16
            + " }",
            "TOO_MANY_FIELDS",
        ),
    ],
)
def test_hostile_shapes_are_refused_by_the_static_pass(query: str, error: str) -> None:
    with pytest.raises(LimitExceeded) as raised:
        screen(parse(query), SAFE_LIMITS)
    assert raised.value.code == error


def test_a_fragment_cycle_does_not_loop_the_static_pass() -> None:
    document = parse("{ ...A } fragment A on Query { hello ...B } fragment B on Query { ...A }")
    screen(document, SAFE_LIMITS)  # validation reports the cycle; the walk ends


def test_the_limits_can_be_lifted_one_by_one(config_path: Callable[[str], Path]) -> None:
    config = load_config(config_path(TOML + "[cost]\nmax_depth = false\nmax_fields = 5000\n"))
    limits = config.cost.limits
    assert (limits.max_depth, limits.max_fields, limits.max_aliases) == (None, 5000, 100)
    assert CostLimits().screens is False  # the analyzer's API limits nothing by default
    with pytest.raises(TooManyDirectives):
        screen(parse("{ hello @a @b }"), CostLimits(max_directives=1))


def test_shadow_mode_lets_a_hostile_shape_through_and_counts_it(
    config_path: Callable[[str], Path],
) -> None:
    gate = Gate(load_config(config_path(TOML.replace("[limits]\n", '[limits]\nmode = "shadow"\n'))))
    op = gate.begin(request=scope(key="t"))
    document = gate.parse(SCHEMA, "{ " + " hello" * 31 + " }", op=op)
    assert not isinstance(document, list)
    assert (op.refused, op.violation) == (False, "TOO_MANY_FIELDS")


# -- hot reload -----------------------------------------------------------------------------


# The two looks that tell a whole file from one being written, and the timer that makes
# them: tests/gate/test_reload.py.


def poll(gate: Gate) -> float:
    time.sleep(0.01)
    return admit(gate, "{ hello }").decision.limit


def test_a_file_cut_before_its_tiers_is_never_applied(
    config_path: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    text = TOML.replace("[limits]\n", "[limits]\nreload_interval = 0.001\n")
    path = config_path(text)
    gate = Gate.from_config(path)
    caplog.set_level(logging.INFO, logger="quotaql")
    path.write_text(text[: text.index("[tiers.free]")])  # valid TOML: no tiers, no tenants

    def failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.quotaql_event == "config_reload_failed"]

    deadline = time.monotonic() + 10  # stable, and still refused (the reload thread's looks)
    while not failures() and time.monotonic() < deadline:
        assert poll(gate) == 100
        assert admit(gate, "{ hello }", scope(key="acme")).tier.name == "pro"
    assert failures()
    assert "declares no [tiers]" in failures()[0].getMessage()
    assert admit(gate, "{ hello }", scope(key="acme")).tier.name == "pro"


def test_an_honest_tenant_behind_a_refused_address_is_not_refused_for_it(
    config_path: Callable[[str], Path],
) -> None:
    # A keyless client behind a NAT runs the address dry: a tenant with a key of its own,
    # behind the same address, was never refused by the storage and must not be.
    looked_up: list[str] = []

    def key_resolver(key: str, context: Any) -> str | None:
        looked_up.append(key)
        return "acme" if key == "good" else None

    gate = Gate(load_config(config_path(TOML)), key_resolver=key_resolver)
    assert not admit(gate, "{ products(first: 100) { id } }", scope()).refused  # the address
    assert admit(gate, "{ hello }", scope()).code == "RATE_LIMITED"
    assert gate.begin(request=scope()).denied  # the address, refused from memory
    op = gate.admit(SCHEMA, parse("{ hello }"), request=scope(key="good"))  # never seen
    assert (op.refused, op.subject.key, looked_up) == (False, "key:acme", ["good"])


def test_a_query_that_can_never_fit_pays_the_minimum_each_time(gate: Gate) -> None:
    # `first: 100000` costs more than the bucket holds: refused COST_EXCEEDS_CAPACITY, which
    # waiting never cures; it was free, and a client could send it (validated) forever.
    for _ in range(3):
        op = admit(gate, "{ products(first: 100000) { id } }")
        assert (op.code, op.status, op.charge) == ("COST_EXCEEDS_CAPACITY", 400, 1.0)
        gate.finish(op)
    assert remaining(gate) == pytest.approx(100 - 3, abs=0.01)


def test_nested_repeats_are_merged_as_validation_merges_them() -> None:
    # 25 copies of a field, each repeating a child 19 times: each selection set is within
    # the limits, but graphql-core compares the 475 merged children pairwise (~1 s).
    children = " ".join("products { id }" for _ in range(19))
    document = parse("{ " + " ".join(f"products {{ {children} }}" for _ in range(25)) + " }")
    with pytest.raises(TooManyFields, match="selects 'products' more than 30 times"):
        screen(document, SAFE_LIMITS)


def test_strawberrys_caches_beside_the_limiter_are_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import strawberry
    from strawberry.extensions import ParserCache, ValidationCache

    from quotaql.plugin import CostLimiter

    @strawberry.type
    class Query:
        @strawberry.field
        def hello(self) -> str:
            return "world"

    limiter = CostLimiter()  # the default configuration: no field quota on this schema
    schema = strawberry.Schema(query=Query, extensions=[ParserCache, ValidationCache, limiter])
    caplog.set_level(logging.ERROR, logger="quotaql")
    for _ in range(3):
        assert schema.execute_sync("{ hello }").data == {"hello": "world"}
    (record,) = [r for r in caplog.records if r.quotaql_event == "unlimited_extension"]
    assert "ParserCache and ValidationCache" in record.getMessage()


def test_an_error_without_a_path_after_execution_refunds_nothing(gate: Gate) -> None:
    # The resolvers ran, and the error does not say what it erased (execution itself failed,
    # or a formatter dropped the paths): `data: null` must not refund the whole cost.
    from graphql import GraphQLError

    op = admit(gate, "{ products(first: 50) { id } }")
    gate.settle(op, None, [GraphQLError("execution failed")])
    assert (op.actual, op.refunded) == (50, 0)
    ran = admit(gate, "{ products(first: 50) { id } }")
    gate.settle(ran, {"products": [{"id": "1"}]}, [{"message": "formatted", "path": None}])
    assert ran.refunded == 0
    fine = admit(gate, "{ products(first: 10) { id } }", scope(key="acme"))
    gate.settle(fine, {"products": [{"id": "1"}]}, [])  # no errors: refunded as before
    assert fine.refunded == 9
