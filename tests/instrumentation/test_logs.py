"""Structured, rate-limited log records."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quotaql.instrumentation.logs import LogRecorder, StructuredLog
from quotaql.plugin import CostLimiter
from tests.adapters.strawberry.test_extension import EXPENSIVE, context
from tests.support import strawberry_shop as shop

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest


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
