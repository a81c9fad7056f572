"""The gate charges what an operation ran above its debit (its overage): on the quotas a
refund would give back to, scaled as its debit was under adaptive limits, in shadow mode
too, counted (``quotaql_overage_total``), on the span, and switched off by
``[limits] charge_overage = false``.

Budgets in a real ``MemoryStorage`` on a frozen clock (exact amounts); operations really
execute (graphql-core), with resolvers that return more than the estimate assumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, execute, parse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.errors import ConfigError
from quotaql.gate import Gate, Operation
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + """
type Query {
  items(first: Int = 10): [Item] @listSize(slicingArguments: ["first"])
  export(first: Int = 5): [Item] @listSize(slicingArguments: ["first"])
}
type Item { id: ID }
"""
)
GREEDY = "{ items(first: 10) { id } }"  # 10
TOML = """
[limits]
deny_cache_size = 0
{limits}
[tiers.free]
capacity = 1000
refill_per_second = 1
{tier}
[tenants.acme]
tier = "free"
{extra}
"""


class Root:
    """Resolvers that return ``count`` items whatever ``first`` says."""

    def __init__(self, count: int) -> None:
        self.count = count

    def items(self, info: Any, first: int = 10) -> list[dict[str, str]]:
        return [{"id": str(i)} for i in range(self.count)]

    export = items


class World:
    def __init__(
        self, tmp_path: Path, *, limits: str = "", tier: str = "", extra: str = "", **gate: Any
    ) -> None:
        path = tmp_path / "quotaql.toml"
        path.write_text(TOML.format(limits=limits, tier=tier, extra=extra), encoding="utf-8")
        self.storage = MemoryStorage(clock=lambda: 1_000.0)
        self.gate = Gate(load_config(path), storage=self.storage, **gate)

    def run(self, query: str, count: int) -> Operation:
        document = parse(query)
        request = {"type": "http", "client": ("203.0.113.9", 1),
                   "headers": [(b"x-api-key", b"acme")]}  # fmt: skip
        op = self.gate.admit(SCHEMA, document, request=request)
        if op.runs:
            result = execute(SCHEMA, document, root_value=Root(count))
            self.gate.settle(op, result.data, result.errors)
        self.gate.finish(op)
        return op

    def left(self, *quotas: Any) -> dict[str, float]:
        chosen = quotas or (self.gate.config.tiers["free"].quota,)
        decision = self.gate.limiter.peek("key:acme", list(chosen))
        return {status.name: status.remaining for status in decision.quotas}


def test_the_overage_is_charged_and_shown(tmp_path: Path) -> None:
    world = World(tmp_path)
    op = world.run(GREEDY, 300)
    assert (op.charge, op.actual, op.overage, op.refunded) == (10, 300, 290, 0)
    assert world.left() == {"tenant": 700}
    cost = world.gate.results(op)["cost"]
    assert cost["actualQueryCost"] == 300
    assert cost["throttleStatus"]["currentlyAvailable"] == 700  # after the overage
    assert op.headers["X-RateLimit-Remaining"] == "700"


def test_below_zero_the_next_operation_waits_for_the_debt(tmp_path: Path) -> None:
    world = World(tmp_path)
    assert world.run(GREEDY, 1500).overage == 1490  # 500 below empty
    refused = world.run(GREEDY, 1)
    assert refused.code == "RATE_LIMITED"
    assert refused.decision is not None
    assert 510 <= refused.decision.retry_after <= 510 * 1.1 + 1  # (500 + 10) / 1 a second


def test_an_operation_within_its_estimate_pays_no_overage(tmp_path: Path) -> None:
    world = World(tmp_path)
    op = world.run(GREEDY, 10)
    assert (op.actual, op.overage, op.refunded) == (10, 0, 0)
    op = world.run(GREEDY, 4)
    assert (op.actual, op.overage, op.refunded) == (4, 0, 6)
    assert world.left() == {"tenant": 986}


def test_the_minimum_charge_is_not_charged_twice(tmp_path: Path) -> None:
    # Priced 0 (first: 0), min_charge 1 debited, 3 items returned: 2 more, 3 in all.
    world = World(tmp_path)
    op = world.run("{ items(first: 0) { id } }", 3)
    assert (op.charge, op.actual, op.overage) == (1, 3, 2)
    assert world.left() == {"tenant": 997}


def test_a_root_field_quota_pays_its_estimate_and_no_overage(tmp_path: Path) -> None:
    world = World(tmp_path, extra='[tiers.free.fields]\n"Query.export" = '
                  '{ capacity = 100, refill_per_second = 1 }\n')  # fmt: skip
    op = world.run("{ export(first: 5) { id } }", 50)
    assert op.overage == 45
    field = world.gate.config.tiers["free"].fields["Query.export"]
    assert world.left(world.gate.config.tiers["free"].quota, field) == {
        "tenant": 950,
        "field:Query.export": 95,  # its estimate, as before
    }


def test_the_overage_is_scaled_as_the_debit_was(tmp_path: Path) -> None:
    class Pressure:
        value = 1.0

        def __call__(self) -> float:
            return self.value

    world = World(
        tmp_path,
        extra='[adaptive]\nmode = "enforce"\nsources = ["callable"]\nengage_for = 0\n'
        "release_for = 0\nstep = 1.0\nfloor = 0.25\n",
        pressure=Pressure(),
    )
    adaptive = world.gate.adaptive
    assert adaptive is not None
    for _ in range(3):
        adaptive.update(adaptive.clock())
    op = world.run(GREEDY, 30)
    m = op.multiplier
    assert m < 1.0
    # 10 debited as 10 / m, and the 20 over it as 20 / m: 30 / m in all.
    assert op.overage == 20
    assert world.left()["tenant"] == pytest.approx(1000 - 30 / m, abs=1e-3)


def test_shadow_mode_charges_the_overage_too(tmp_path: Path) -> None:
    world = World(tmp_path, limits='mode = "shadow"')
    world.run(GREEDY, 1200)
    op = world.run(GREEDY, 10)  # would be refused: it runs, and says so
    assert not op.refused
    assert op.outcome == names.SHADOW_BLOCKED


def test_charge_overage_false_leaves_the_work_above_the_estimate_free(tmp_path: Path) -> None:
    world = World(tmp_path, limits="charge_overage = false")
    op = world.run(GREEDY, 300)
    assert (op.actual, op.overage) == (300, 0)
    assert world.left() == {"tenant": 990}
    assert world.run(GREEDY, 4).refunded == 6  # refunds as before


def test_the_overage_is_measured_with_refunds_and_the_cost_extension_off(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, limits="refund_unused = false\nexpose_cost = false")
    assert world.run(GREEDY, 300).overage == 290
    assert world.left() == {"tenant": 700}


def test_the_overage_is_counted_and_on_the_span(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    world = World(tmp_path, metrics=PrometheusMetrics(registry), tracer_provider=provider)
    world.run(GREEDY, 300)
    world.run(GREEDY, 5)
    sample = registry.get_sample_value
    assert sample(names.OVERAGE_TOTAL, {"tier": "free"}) == 290
    assert sample(names.COST_TOTAL, {"tier": "free", "outcome": "charged"}) == 20
    assert sample(names.COST_TOTAL, {"tier": "free", "outcome": "refunded"}) == 5
    over, within = exporter.get_finished_spans()
    assert (over.attributes or {})[names.ATTR_COST_OVERAGE] == 290
    assert [event.name for event in over.events] == [names.EVENT_OVERAGE]
    assert names.ATTR_COST_OVERAGE not in (within.attributes or {})


@pytest.mark.parametrize("value", ['"yes"', "1"])
def test_charge_overage_must_be_a_boolean(tmp_path: Path, value: str) -> None:
    path = tmp_path / "quotaql.toml"
    path.write_text(f"[limits]\ncharge_overage = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    error = raised.value
    assert (error.key, error.line, error.file) == ("limits.charge_overage", 2, str(path))
    assert "true or false" in error.reason
