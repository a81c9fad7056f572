"""Structured, rate-limited log records."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import logging.config
import subprocess
import sys
import tracemalloc
import warnings
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.gate import Gate
from quotaql.instrumentation.logs import (
    JsonFormatter,
    LoggingWarning,
    LogRecorder,
    StructuredLog,
    clipped,
    unseen_warnings,
)
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from tests.adapters.strawberry.test_extension import EXPENSIVE, context
from tests.gate import test_delay as delay_tests
from tests.support import strawberry_shop as shop

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def records(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "quotaql_event", None) == event]


def test_a_flood_is_cut_to_the_burst_then_summarised(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    clock = Clock()
    log = StructuredLog(per_second=2, burst=5, clock=clock)
    passed = [log.log(logging.INFO, "blocked", "blocked %d", i, tenant="t") for i in range(1000)]
    assert passed.count(True) == 5
    assert len(records(caplog, "blocked")) == 5
    clock.now = 1.0  # two more tokens
    assert log.log(logging.INFO, "blocked", "blocked again", tenant="t")
    summary = records(caplog, "blocked")[-1]
    assert summary.suppressed == 995
    assert "(995 similar records suppressed)" in summary.getMessage()
    assert summary.tenant == "t"
    # Another kind of event has its own budget.
    assert log.log(logging.WARNING, "backend_error", "boom")


def test_disabled_levels_cost_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    log = StructuredLog(per_second=1, burst=1)
    assert not log.log(logging.INFO, "blocked", "not logged")
    assert log.log(logging.WARNING, "blocked", "logged: the INFO one took no token")


def test_log_recorder_reports_backend_errors_and_breaker_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    recorder = LogRecorder()
    recorder.backend_error("redis", ConnectionError("refused"))
    recorder.circuit("redis", True)
    recorder.circuit("redis", False)
    (error,) = records(caplog, "backend_error")
    assert error.levelno == logging.WARNING
    assert error.backend == "redis"
    assert error.error_type == "ConnectionError"
    assert "refused" in error.getMessage()
    assert records(caplog, "circuit_opened")[0].levelno == logging.WARNING
    assert records(caplog, "circuit_closed")[0].levelno == logging.INFO


def test_blocked_operations_are_logged_with_fields_but_not_flooding(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    path = write_config(base="[tiers.free]\ncapacity = 100\nrefill_per_second = 0.001\n")
    limiter = CostLimiter.from_config(path, log=StructuredLog(per_second=0.001, burst=3))
    schema = shop.make_schema(limiter)
    for _ in range(100):
        schema.execute_sync(EXPENSIVE, context_value=context("attacker"))
    blocked = records(caplog, "blocked")
    assert len(blocked) == 1  # refused by the budget once; after that, by the deny cache:
    assert len(records(caplog, "denied")) == 3  # 98 more refusals, 3 lines (the burst)
    assert blocked[0].tier == "free"
    assert blocked[0].cost == 70
    assert "attacker" not in blocked[0].getMessage()


def test_strawberrys_own_record_of_each_refusal_is_dropped(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    path = write_config(
        base="[cost]\nmax_depth = 2\n[tiers.free]\ncapacity = 100\nrefill_per_second = 0.001\n"
    )
    limiter = CostLimiter.from_config(path, log=StructuredLog(per_second=0.001, burst=2))
    schema = shop.make_schema(limiter)
    for _ in range(50):
        schema.execute_sync("{ products(first: 10) { name } }", context_value=context("a"))
        schema.execute_sync("{ products { reviews { stars } } }", context_value=context("a"))
    strawberry_records = [r for r in caplog.records if r.name == "strawberry.execution"]
    assert strawberry_records == []  # RATE_LIMITED and QUERY_TOO_DEEP, none logged twice
    assert len(records(caplog, "blocked")) == 1  # then the deny cache refuses
    assert len(records(caplog, "denied")) == 2
    assert len(records(caplog, "rejected")) == 2
    # Errors that are not quotaql's still reach Strawberry's log.
    # (A fresh limiter: every request here shares one anonymous budget, spent by now.)
    fresh = shop.make_schema(CostLimiter.from_config(path))
    broken = fresh.execute_sync("{ nope }", context_value=context("b"))
    assert broken.errors
    assert [r for r in caplog.records if r.name == "strawberry.execution"]


# -- one line a person can read per decision -------------------------------------------------

GET_ORDERS = "query GetOrders " + EXPENSIVE  # 70 points


def named_limiter(path: Path, log: StructuredLog | None = None) -> CostLimiter:
    metrics = PrometheusMetrics(CollectorRegistry(), tenant_allowlist=["t", "a", "b"])
    return CostLimiter.from_config(path, metrics=metrics, log=log or StructuredLog())


def test_a_refusal_is_one_line_with_operation_tenant_tier_cost_and_why(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    schema = shop.make_schema(named_limiter(write_config()))
    for _ in range(4):
        schema.execute_sync(GET_ORDERS, context_value=context("t"))
    (blocked,) = records(caplog, "blocked")
    remaining, retry = blocked.remaining, blocked.retry_after
    assert isinstance(remaining, int)  # whole weights: what is left is whole too
    assert 0 <= remaining < 70
    assert retry > 0
    assert round(retry, 3) == retry  # to the millisecond, never 7.4780136352716955
    assert blocked.getMessage() == (
        "quotaql: blocked query GetOrders of tenant t (tier free): costs 70 points,"
        f' {remaining} of 100 left on quota "tenant"; retry in {retry} s'
    )
    fields = {name: getattr(blocked, name) for name in ("tenant", "identity", "tier", "cost")}
    assert fields == {"tenant": "t", "identity": "key", "tier": "free", "cost": 70}
    assert isinstance(blocked.cost, int)  # 70, not 70.0
    assert (blocked.operation_type, blocked.operation_name) == ("query", "GetOrders")
    assert (blocked.code, blocked.limited_by, blocked.limit) == ("RATE_LIMITED", "tenant", 100)
    (denied,) = records(caplog, "denied")
    assert denied.getMessage().startswith(
        "quotaql: denied query GetOrders of tenant t (tier free): costs 70 points, "
    )
    assert denied.getMessage().endswith(" s (deny cache)")
    # An operation that never fits says so, and which quota it never fits.
    schema.execute_sync(
        "{ products(first: 30) { name reviews(first: 5) { stars } } }", context_value=context("a")
    )
    never = records(caplog, "blocked")[-1]
    assert never.getMessage() == (
        "quotaql: blocked query of tenant a (tier free): costs 210 points, more than quota"
        ' "tenant" ever holds (100): COST_EXCEEDS_CAPACITY'
    )
    assert never.retry_after is None
    # A subject that may not be named is hashed, in the line and the fields alike.
    schema.execute_sync("{ products { nope } }", context_value=context("acme"))
    (rejected,) = records(caplog, "rejected")
    assert rejected.tenant.startswith("h:")
    assert "acme" not in rejected.getMessage()
    assert rejected.code == "GRAPHQL_VALIDATION_FAILED"
    assert f"of tenant {rejected.tenant} (tier pro): GRAPHQL_VALIDATION_FAILED: " in (
        rejected.getMessage()
    )


def test_shadow_mode_says_what_enforce_would_have_refused_and_why(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    deep = shop.make_schema(
        named_limiter(write_config("[cost]\nmax_depth = 2\n", base=SHADOW_TOML))
    )
    assert not deep.execute_sync(GET_ORDERS, context_value=context("t")).errors
    (static,) = records(caplog, "shadow_blocked")  # one line, though two passes find it
    assert static.getMessage() == (
        "quotaql: shadow mode would have blocked operation of tenant t (tier free): QUERY_TOO_DEEP"
    )
    assert static.code == "QUERY_TOO_DEEP"
    caplog.clear()
    schema = shop.make_schema(named_limiter(write_config(base=SHADOW_TOML)))
    for _ in range(4):
        assert not schema.execute_sync(GET_ORDERS, context_value=context("t")).errors
    budget = records(caplog, "shadow_blocked")[0]
    assert budget.getMessage().startswith(
        "quotaql: shadow mode would have blocked query GetOrders of tenant t (tier free):"
        " costs 70 points, "
    )
    assert f'of 100 left on quota "tenant"; retry in {budget.retry_after} s' in budget.getMessage()
    assert budget.code == "RATE_LIMITED"
    assert records(caplog, "blocked") == []


SHADOW_TOML = """
[tiers.free]
capacity = 100
refill_per_second = 0.001
mode = "shadow"
[tenants.t]
tier = "free"
"""


def test_a_hostile_operation_name_cannot_forge_or_flood_a_line(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    schema = shop.make_schema(named_limiter(write_config()))
    huge = "x\nquotaql: blocked query Fake of tenant acme" + "y" * 10_000
    result = schema.execute_sync(
        "query Q($first: Int) { products(first: $first) { name } }",
        variable_values={"first": huge},
        context_value=context("t"),
    )
    assert result.errors
    (rejected,) = records(caplog, "rejected")
    line = rejected.getMessage()
    assert "\n" not in line  # the client's newline is escaped: no forged second line
    assert len(line) < 600
    name = "query " + "N" * 5000
    schema.execute_sync(name + " { products(first: 30) { name reviews(first: 5) { stars } } }",
                        context_value=context("t"))  # fmt: skip
    blocked = records(caplog, "blocked")[-1]
    assert blocked.operation_name == "N" * 100 + "..."
    assert len(blocked.getMessage()) < 400


def test_clipped_escapes_control_characters_and_cuts_long_text() -> None:
    assert clipped("plain") == "plain"
    assert clipped("a\nb\x1b[31m") == "a\\nb\\x1b[31m"
    assert clipped("z" * 500) == "z" * 200 + "..."


# -- rate-limited per subject --------------------------------------------------------------


def test_one_subjects_flood_leaves_room_for_the_lines_of_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    clock = Clock()  # frozen: no budget refills during the flood
    log = StructuredLog(clock=clock)
    flood = [
        log.log(logging.INFO, "denied", "flood", subject="key:attacker") for _ in range(100_000)
    ]
    assert flood.count(True) == 5  # its own burst, out of the event's 20
    assert log.log(logging.INFO, "denied", "victim", subject="key:victim")
    lines = records(caplog, "denied")
    assert [r.getMessage() for r in lines].count("victim (99995 similar records suppressed)") == 1
    # The attacker's budget refills at its own pace: one line per 5 s, however hard it tries.
    clock.now = 5.0
    passed = [log.log(logging.INFO, "denied", "flood", subject="key:attacker") for _ in range(1000)]
    assert passed.count(True) == 1


def test_a_flooding_tenant_through_the_gate_does_not_silence_another(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    log = StructuredLog(clock=Clock())
    schema = shop.make_schema(named_limiter(write_config(), log))
    for _ in range(2000):  # one blocked, then denied from the deny cache
        schema.execute_sync(GET_ORDERS, context_value=context("a"))
    denied = records(caplog, "denied")
    assert len(denied) == 5
    assert {r.tenant for r in denied} == {"a"}
    for _ in range(4):
        schema.execute_sync(GET_ORDERS, context_value=context("b"))
    assert [r.tenant for r in records(caplog, "blocked")] == ["a", "b"]
    assert records(caplog, "denied")[-1].tenant == "b"  # the event's budget was not all a's


def test_rotating_subjects_take_bounded_memory_and_the_event_limit_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    log = StructuredLog(clock=Clock(), subjects=1000)
    prefix = "key:" + "k" * 1000  # long keys: an entry does not keep them
    tracemalloc.start()
    try:
        for index in range(10_000):
            log.take(logging.INFO, "unknown_key", f"{prefix}{index}")
        settled = tracemalloc.get_traced_memory()[0]
        for index in range(10_000, 100_000):
            log.take(logging.INFO, "unknown_key", f"{prefix}{index}")
        grown = tracemalloc.get_traced_memory()[0] - settled
    finally:
        tracemalloc.stop()
    assert grown < 50_000  # 90,000 more subjects: the same 1000 entries
    assert len(log._theirs) == 1000
    # And however many subjects, the event logs its burst, then counts what it drops.
    assert log.log(logging.INFO, "other_event", "x", subject="key:new")
    assert log.take(logging.INFO, "unknown_key", "key:fresh") is None


# -- JSON lines ----------------------------------------------------------------------------


def json_logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    target = logging.getLogger(name)
    target.propagate = False
    target.handlers[:] = [handler]
    target.setLevel(logging.INFO)
    return target, stream


def test_the_json_formatter_keeps_every_field_on_one_line() -> None:
    target, stream = json_logger("tests.logs.json")
    log = StructuredLog(target=target)
    log.log(logging.INFO, "blocked", "line %s\nwith %d", "one", 2, tenant="acme", cost=70,
            limits=("a", "b"), odd={1}, thing=object())  # fmt: skip
    try:
        raise ValueError("boom")
    except ValueError:
        target.exception("failed", extra={"quotaql_event": "adaptive_failed"})
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "line one\nwith 2"  # escaped inside its one line
    assert (first["level"], first["logger"]) == ("INFO", "tests.logs.json")
    assert first["quotaql_event"] == "blocked"
    assert (first["tenant"], first["cost"], first["suppressed"]) == ("acme", 70, 0)
    assert first["limits"] == ["a", "b"]
    assert first["odd"] == [1]
    assert first["thing"].startswith("<object object")
    assert first["time"].endswith("Z")
    assert "args" not in first
    assert "msg" not in first
    assert second["quotaql_event"] == "adaptive_failed"
    assert "ValueError: boom" in second["exception"]


def test_dict_config_builds_the_json_formatter_by_class_or_factory() -> None:
    for key in ("()", "class"):
        stream = io.StringIO()
        logging.config.dictConfig({
            "version": 1, "disable_existing_loggers": False,
            "formatters": {"json": {key: "quotaql.instrumentation.logs.JsonFormatter"}},
            "handlers": {"s": {"class": "logging.StreamHandler", "formatter": "json",
                               "stream": stream}},
            "loggers": {"tests.logs.dict": {"handlers": ["s"], "level": "INFO",
                                            "propagate": False}},
        })  # fmt: skip
        logging.getLogger("tests.logs.dict").info("hi", extra={"tier": "free"})
        assert json.loads(stream.getvalue())["tier"] == "free"


# -- a logger nobody reads -----------------------------------------------------------------


def test_unseen_warnings_says_why_nothing_shows_quotaqls_lines() -> None:
    parent = logging.getLogger("tests.unseen")
    child = logging.getLogger("tests.unseen.quotaql")
    parent.propagate = False
    parent.handlers[:] = []
    child.handlers[:] = []
    child.setLevel(logging.NOTSET)
    try:
        # No handler on the way while other loggers have some (pytest's, as uvicorn's): its
        # WARNINGs reach only the last resort, its INFO lines nothing.
        assert "no handler receives the 'tests.unseen.quotaql'" in (unseen_warnings(child) or "")
        parent.addHandler(logging.NullHandler(logging.ERROR))  # ERROR only: no WARNING shows
        assert "above WARNING" in (unseen_warnings(child) or "")
        parent.handlers[0].setLevel(logging.WARNING)
        assert unseen_warnings(child) is None
        parent.setLevel(logging.ERROR)  # inherited: the operator did not choose it for quotaql
        assert unseen_warnings(child) == (
            "the 'tests.unseen.quotaql' logger's level is ERROR (inherited), above WARNING"
        )
        child.setLevel(logging.ERROR)  # set on the logger itself: meant
        assert unseen_warnings(child) is None
        child.setLevel(logging.INFO)
        child.disabled = True
        assert "disabled" in (unseen_warnings(child) or "")
    finally:
        child.disabled = False
        parent.handlers[:] = []
        parent.setLevel(logging.NOTSET)


def test_a_log_on_a_logger_nobody_reads_warns_once() -> None:
    target = logging.getLogger("tests.unread")
    target.propagate = False
    target.handlers[:] = []
    with pytest.warns(LoggingWarning, match="no handler receives.*docs/logging.md"):
        StructuredLog(target=target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StructuredLog(target=target)  # once per process and logger


def test_a_script_that_configured_no_logging_is_not_warned() -> None:
    # Nothing configured at all: Python's last resort shows quotaql's WARNINGs on stderr.
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c",
         "from quotaql.instrumentation.logs import StructuredLog, unseen_warnings\n"
         "StructuredLog()\nprint(unseen_warnings())"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "None", "")


def test_a_tier_resolver_echoing_a_client_value_cannot_flood_or_forge_the_log(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    limiter = CostLimiter.from_config(
        write_config(),
        tier_resolver=lambda subject, ctx: ctx["request"].headers.get("x-tier"),
        log=StructuredLog(clock=Clock()),
    )
    schema = shop.make_schema(limiter)
    for index in range(200):
        tier = f"gold\nquotaql: forged {index}" + "z" * 10_000
        schema.execute_sync("{ products(first: 1) { name } }",
                            context_value=context("t", **{"x-tier": tier}))  # fmt: skip
    unknown = records(caplog, "unknown_tier")
    assert len(unknown) == 5  # one subject's burst
    assert "\n" not in unknown[0].getMessage()
    assert len(unknown[0].tier) < 110


def test_an_unknown_key_and_a_wait_for_its_turn_are_one_line_each(
    tmp_path: Path, write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    rejecting = write_config('[identity]\nunknown_keys = "reject"\n')
    schema = shop.make_schema(CostLimiter.from_config(rejecting))
    schema.execute_sync(GET_ORDERS, context_value=context("guess"))
    (unknown,) = records(caplog, "unknown_key")
    assert unknown.getMessage().startswith(
        "quotaql: refused query GetOrders of tenant h:"  # the address, never the key
    )
    assert "(tier free): costs 1 point, UNKNOWN_API_KEY: " in unknown.getMessage()
    assert "guess" not in unknown.getMessage()
    assert unknown.code == "UNKNOWN_API_KEY"

    path = tmp_path / "delay.toml"
    path.write_text(delay_tests.TOML, encoding="utf-8")
    gate = Gate(load_config(path))

    async def main() -> None:
        for _ in range(delay_tests.CAPACITY + 1):
            op = await gate.admit_async(
                delay_tests.SCHEMA, delay_tests.THREE, request=delay_tests.scope("acme")
            )
            gate.finish(op)

    asyncio.run(main())
    delayed = records(caplog, "delayed")[0]
    assert delayed.delay > 0
    assert round(delayed.delay, 3) == delayed.delay
    assert delayed.getMessage() == (
        f"quotaql: delayed query of tenant {delayed.tenant} (tier free): costs 3 points, waits"
        f" {delayed.delay} s for its turn"
    )


def test_a_subscription_ended_by_an_events_refusal_says_which_event(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    schema = shop.make_schema(named_limiter(write_config()))

    async def run() -> list[Any]:
        started = await schema.subscribe(
            "subscription Ticks { ticks(count: 6) }", context_value=context("t")
        )
        return [event async for event in started]  # type: ignore[union-attr]

    events = asyncio.run(run())
    assert events[-1].errors[0].extensions["code"] == "RATE_LIMITED"
    (ended,) = records(caplog, "blocked")
    assert ended.getMessage() == (
        "quotaql: blocked subscription Ticks (event 4) of tenant t (tier free): costs 30"
        f' points, 10 of 100 left on quota "tenant"; retry in {ended.retry_after} s; the'
        " subscription ends"
    )
