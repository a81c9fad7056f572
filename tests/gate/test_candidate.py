"""Candidate weights, priced live (quotaql.gate.candidate): a sampled share of operations is
priced with the candidate file's ``[cost]`` table too, never charged; the disagreement and
the operations the candidate would have refused are counted; a candidate file that is
invalid, huge, absurd or foreign to the schema never touches the live pricing."""

from __future__ import annotations

import logging
import os
import threading
import time
import tracemalloc
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql.cost_analysis import CostModel, analyze
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.gate import Gate
from quotaql.gate import candidate as candidate_module
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + """
type Query {
  products(first: Int = 10): [Product] @listSize(slicingArguments: ["first"])
  orders(first: Int = 10): [Order] @listSize(slicingArguments: ["first"])
  hello: String
}
type Product { id: ID name: String }
type Order { id: ID }
"""
)

INTERVAL = 0.2  # the reload timer's period
BOUND_S = 2 * INTERVAL + 1.0  # two looks, and a busy machine's scheduling

TOML = """
[cost]
candidate = "quotaql.candidate.toml"
candidate_sample = {sample}
[limits]
reload_interval = {interval}
refund_unused = false
[tiers.free]
capacity = {capacity}
refill_per_second = 0.001
{fields}
[tenants.t]
tier = "free"
"""
DOUBLED = '[cost.weights]\n"Product" = 2\n'  # a product costs 2 instead of 1
SHOP = "query Shop { products(first: 10) { name } orders(first: 5) { id } }"  # live 15


def write(path: Path, text: str | bytes) -> None:
    """Write ``path`` by atomic rename, as the docs say to (a reader never sees half)."""
    part = path.with_name(path.name + ".part")
    if isinstance(text, bytes):
        part.write_bytes(text)
    else:
        part.write_text(text, encoding="utf-8")
    os.replace(part, path)


def scope(key: str = "t") -> dict[str, Any]:
    return {
        "type": "http",
        "client": ("203.0.113.9", 40000),
        "headers": [(b"x-api-key", key.encode())],
    }


class Setup:
    """A gate from ``quotaql.toml`` beside its candidate, with its own metrics registry."""

    def __init__(self, tmp_path: Path, candidate: str | None = DOUBLED, *, sample: float = 1.0,
                 interval: float = 0, fields: str = "", capacity: int = 100,
                 **options: Any) -> None:  # fmt: skip
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.config = tmp_path / "quotaql.toml"
        self.candidate = tmp_path / "quotaql.candidate.toml"
        if candidate is not None:
            write(self.candidate, candidate)
        write(
            self.config,
            TOML.format(sample=sample, interval=interval, fields=fields, capacity=capacity),
        )
        self.registry = CollectorRegistry()
        metrics = PrometheusMetrics(self.registry, tenant_allowlist=["t"])
        self.gate = Gate.from_config(self.config, metrics=metrics, **options)

    def run(self, query: str, key: str = "t", data: Any = None) -> Any:
        """Admit ``query``, run it (``data``), settle and finish it: its operation."""
        op = self.gate.admit(SCHEMA, parse(query), request=scope(key))
        if op.runs:
            self.gate.settle(op, data)
        self.gate.finish(op)
        return op

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def ratio(self, *, operation: str = "", coordinate: str = "") -> tuple[float, float] | None:
        """The ratio histogram's (count, sum) of one series, None when it has none."""
        labels = {"operation_name": operation, "coordinate": coordinate}
        count = self.value(f"{names.CANDIDATE_COST_RATIO}_count", **labels)
        total = self.value(f"{names.CANDIDATE_COST_RATIO}_sum", **labels)
        return None if count is None or total is None else (count, total)

    def errors(self, reason: str) -> float | None:
        return self.value(names.CANDIDATE_ERRORS_TOTAL, reason=reason)

    def would_refuse(self, tenant: str = "t") -> float | None:
        return self.value(names.CANDIDATE_WOULD_REFUSE_TOTAL, tier="free", tenant=tenant)


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if getattr(record, names.LOG_EVENT, None) == names.CANDIDATE_REFUSED_EVENT]  # fmt: skip


# -- the comparison ----------------------------------------------------------------------------


def test_a_doubled_weight_shows_as_a_ratio_of_two_for_its_root_field_only(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    for _ in range(3):
        op = setup.run(SHOP)
        assert (op.refused, op.cost) == (False, 15.0)  # priced by the live weights
    assert setup.ratio(coordinate="Query.products") == (3, 6.0)  # 20 / 10, three times
    assert setup.ratio(coordinate="Query.orders") == (3, 3.0)  # unchanged: 1.0
    count, total = setup.ratio(operation="Shop") or (0, 0)
    assert count == 3
    assert total == pytest.approx(3 * 25 / 15)  # the whole operation: 25 against 15
    assert setup.value(names.CANDIDATE_LOADED) == 1
    # Exactly 2 lands in the bucket whose upper edge is 2.0, none above.
    bucket = f"{names.CANDIDATE_COST_RATIO}_bucket"
    le = {"operation_name": "", "coordinate": "Query.products"}
    assert setup.value(bucket, **le, le="1.5") == 0
    assert setup.value(bucket, **le, le="2.0") == 3


def test_the_candidate_charges_nothing(tmp_path: Path) -> None:
    with_candidate = Setup(tmp_path / "a")
    without = Setup(tmp_path / "b", sample=0.0)
    for first in (10, 30, 40, 50):
        query = f"{{ products(first: {first}) {{ name }} }}"
        one, other = with_candidate.run(query), without.run(query)
        assert (one.refused, one.charge) == (other.refused, other.charge)
        assert one.decision.remaining == pytest.approx(other.decision.remaining, abs=0.01)
    assert with_candidate.ratio(coordinate="Query.products") == (4, 8.0)
    assert without.ratio(coordinate="Query.products") is None


def test_no_candidate_or_no_sample_draws_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Zero work on the request path: not even the random draw.
    class NoDraw:
        @staticmethod
        def random() -> float:
            raise AssertionError("a random draw without a candidate to sample for")

    unsampled = Setup(tmp_path / "a", sample=0.0)
    no_file = Setup(tmp_path / "b")
    write(
        no_file.config,
        no_file.config.read_text().replace('candidate = "quotaql.candidate.toml"\n', ""),
    )
    no_file.gate = Gate.from_config(no_file.config)
    monkeypatch.setattr(candidate_module, "random", NoDraw)
    for setup in (unsampled, no_file):
        for _ in range(20):
            setup.run(SHOP)
        assert not setup.gate._candidate._picked
    assert unsampled.ratio(operation="Shop") is None


def test_a_share_is_sampled(tmp_path: Path) -> None:
    setup = Setup(tmp_path, sample=0.25, capacity=100_000)
    for _ in range(400):
        setup.run("{ hello }")
    count, _ = setup.ratio(operation=names.ANONYMOUS_OPERATION) or (0, 0)
    assert 40 <= count <= 170  # 100 expected; far outside is a broken draw


def test_the_span_carries_the_candidate_price(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    setup = Setup(tmp_path, tracer_provider=provider)
    setup.run(SHOP)
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes[names.ATTR_CANDIDATE_COST] == 25.0
    assert span.attributes[names.ATTR_CANDIDATE_WOULD_REFUSE] is False


# -- would refuse ------------------------------------------------------------------------------


def test_allowed_operations_the_candidate_would_refuse_are_counted_by_tenant(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    assert setup.run("{ products(first: 40) { name } }").decision.remaining == pytest.approx(
        60, abs=0.1
    )
    assert setup.would_refuse() == 0 or setup.would_refuse() is None  # 80 fitted 100
    op = setup.run("{ products(first: 40) { name } }")  # had 60: live 40 fits, 80 does not
    assert not op.refused
    assert op.decision.remaining == pytest.approx(20, abs=0.1)
    assert setup.would_refuse() == 1
    refused = setup.run("{ products(first: 40) { name } }")  # live refuses it too: not counted
    assert refused.refused
    assert setup.would_refuse() == 1


def test_an_operation_that_waited_for_its_turn_is_not_counted(tmp_path: Path) -> None:
    # A delay tier reserves the cost ahead of the refill (what is left goes below 0): the
    # candidate would have made it wait too, not refused it.
    setup = Setup(tmp_path)
    op = setup.gate.admit(SCHEMA, parse("{ products(first: 10) { name } }"), request=scope())
    assert op.report is not None
    assert op.decision is not None
    live = op.report
    candidate = analyze(SCHEMA, op.document, model=CostModel(weights={"Product": 2}))
    assert candidate_module.would_refuse(op, op.decision, live, candidate) is False
    waited = op.decision._replace(remaining=-5.0, delay=0.5)
    status = waited.quotas[0]._replace(remaining=-5.0)
    waited = waited._replace(quotas=(status,))
    assert candidate_module.would_refuse(op, waited, live, live) is False
    assert candidate_module.would_refuse(op, waited._replace(delay=0.0), live, live) is True
    setup.gate.finish(op)


def test_a_root_field_quota_is_compared_at_that_field_s_own_cost(tmp_path: Path) -> None:
    fields = '[tiers.free.fields]\n"Query.products" = { capacity = 50, refill_per_second = 0.001 }'
    setup = Setup(tmp_path, fields=fields)
    # The tenant quota (100) holds 2 × 30 + 5; the field's (50) does not hold 60.
    op = setup.run("{ products(first: 30) { name } orders(first: 5) { id } }")
    assert not op.refused
    assert setup.would_refuse() == 1


def test_a_candidate_past_its_own_max_cost_would_refuse(tmp_path: Path) -> None:
    setup = Setup(tmp_path, '[cost]\nmax_cost = 12\n[cost.weights]\n"Product" = 2\n')
    setup.run("{ products(first: 5) { name } }")  # 10: within
    assert not setup.would_refuse()
    setup.run("{ products(first: 7) { name } }")  # 14: past it
    assert setup.would_refuse() == 1
    assert setup.ratio(coordinate="Query.products") == (2, 4.0)  # priced all the same


# -- attacks: absurd, invalid, huge, foreign ---------------------------------------------------


def test_absurd_weights_are_priced_without_an_error_reaching_the_client(tmp_path: Path) -> None:
    absurd = '[cost.weights]\n"Product" = 1e308\n"Order" = 0\n'
    setup = Setup(tmp_path, absurd)
    op = setup.run(SHOP)
    assert (op.refused, op.cost, op.errors) == (False, 15.0, [])
    assert setup.gate.results(op)["cost"]["requestedQueryCost"] == 15.0
    assert setup.ratio(coordinate="Query.products") == (1, names.RATIO_CAP)  # capped, finite
    assert setup.ratio(coordinate="Query.orders") == (1, 0.0)
    assert setup.ratio(operation="Shop") == (1, names.RATIO_CAP)
    assert setup.would_refuse() == 1
    assert setup.errors(names.CANDIDATE_PRICING) == 0
    zero = Setup(tmp_path / "zero", '[cost.weights]\n"Product" = 0\n"Order" = 0\n')
    zero.run(SHOP)
    zero.run("{ hello }")  # 0 against 0: the same price
    assert zero.ratio(operation="Shop") == (1, 0.0)
    assert zero.ratio(coordinate="Query.hello") == (1, 1.0)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('[cost.weights]\n"Product" = \n', ":2"),  # not TOML
        ("[cost]\nmax_depht = 3\n", "cost.max_depht"),  # an unknown key
        ('[cost.weights]\n"Product" = "two"\n', "cost.weights"),  # a wrong type
        ("[costs]\nmax_depth = 3\n", "costs"),  # an unknown table
    ],
)
def test_an_invalid_candidate_is_logged_counted_and_never_sampled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, where: str
) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    setup = Setup(tmp_path, text)
    (message,) = refusals(caplog)
    assert str(setup.candidate) in message
    assert where in message
    assert setup.errors(names.CANDIDATE_INVALID) == 1
    assert setup.value(names.CANDIDATE_LOADED) == 0
    op = setup.run(SHOP)
    assert (op.refused, op.cost) == (False, 15.0)
    assert setup.ratio(operation="Shop") is None
    assert not setup.gate._candidate._picked


def test_a_deeply_nested_candidate_is_refused_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Within the size bound, and enough to exhaust the TOML parser's recursion.
    caplog.set_level(logging.WARNING, logger="quotaql")
    nested = "[cost]\nmax_depth = " + "[" * 200_000 + "\n"
    setup = Setup(tmp_path, nested)  # read at start: the gate is built all the same
    assert setup.errors(names.CANDIDATE_INVALID) == 1
    assert len(refusals(caplog)) == 1
    op = setup.run(SHOP)
    assert (op.refused, op.cost) == (False, 15.0)


def test_a_candidate_is_only_its_cost_table(tmp_path: Path) -> None:
    # A copy of quotaql.toml with its weights edited is a valid candidate: its other tables
    # are checked as quotaql.toml's are, and price nothing.
    copy = TOML.format(sample=0.5, interval=0, fields="", capacity=100) + DOUBLED
    setup = Setup(tmp_path, copy.replace("capacity = 100", "capacity = 1"))
    setup.run(SHOP)
    assert setup.ratio(coordinate="Query.products") == (1, 2.0)
    assert setup.would_refuse() is None  # its [tiers] are not the live ones


def test_a_huge_candidate_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    setup = Setup(tmp_path, interval=60)  # no timer: the test looks itself
    setup.run(SHOP)
    with open(setup.candidate, "r+b") as file:  # 50 MB (sparse: no disk, no write time)
        file.truncate(50 * 1024 * 1024)
    tracemalloc.start()
    try:
        began = time.monotonic()
        setup.gate._candidate.poll(SCHEMA)  # seen once
        setup.gate._candidate.poll(SCHEMA)  # seen twice: read, or rather refused
        took = time.monotonic() - began
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"{peak} bytes held while refusing a 50 MB file"
    assert took < 1.0
    (message,) = refusals(caplog)
    assert f"{50 * 1024 * 1024} bytes" in message
    assert setup.errors(names.CANDIDATE_TOO_LARGE) == 1
    op = setup.run(SHOP)
    assert (op.refused, op.cost) == (False, 15.0)
    assert setup.ratio(operation="Shop") == (1, 25 / 15)  # the first one only
    # Just under the bound: read.
    write(setup.candidate, DOUBLED + "#" * (names.MAX_CANDIDATE_BYTES - len(DOUBLED) - 1) + "\n")
    setup.gate._candidate.poll(SCHEMA)
    setup.gate._candidate.poll(SCHEMA)
    setup.run(SHOP)
    assert setup.ratio(coordinate="Query.products") == (2, 4.0)


def test_a_pipe_or_a_device_is_never_read(tmp_path: Path) -> None:
    setup = Setup(tmp_path, None)
    os.mkfifo(setup.candidate)  # opening it would block until a writer comes
    done = threading.Event()

    def configure() -> None:
        setup.gate._candidate.configure(setup.gate.config)
        done.set()

    threading.Thread(target=configure, daemon=True).start()
    assert done.wait(5), "the candidate's reader blocked on a pipe"
    assert setup.errors(names.CANDIDATE_MISSING) == 1  # at start
    assert setup.errors(names.CANDIDATE_INVALID) == 1  # a pipe
    write(setup.config, setup.config.read_text().replace('"quotaql.candidate.toml"', '"/dev/zero"'))
    gate = Gate.from_config(setup.config, metrics=PrometheusMetrics(CollectorRegistry()))
    assert gate._candidate.cost is None
    assert not gate.admit(SCHEMA, parse(SHOP), request=scope()).refused


def test_a_candidate_naming_coordinates_the_schema_lacks_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    setup = Setup(tmp_path, '[cost.weights]\n"Product" = 2\n"Query.nothing" = 3\n')
    op = setup.run(SHOP)  # checked against the schema at its first sample
    assert (op.refused, op.cost) == (False, 15.0)
    (message,) = refusals(caplog)
    assert "Query.nothing" in message
    assert f"{setup.candidate}:3" in message  # its file and line
    assert setup.errors(names.CANDIDATE_SCHEMA) == 1
    assert setup.value(names.CANDIDATE_LOADED) == 0
    for _ in range(5):
        setup.run(SHOP)
    assert setup.ratio(operation="Shop") is None
    assert len(refusals(caplog)) == 1  # once per change, not per operation


def test_a_missing_candidate_is_logged_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    setup = Setup(tmp_path, None, interval=60)
    for _ in range(4):
        setup.gate._candidate.poll(SCHEMA)
        setup.run(SHOP)
    (message,) = refusals(caplog)
    assert "cannot read" in message
    assert setup.errors(names.CANDIDATE_MISSING) == 1
    write(setup.candidate, DOUBLED)  # written: read at the second look
    setup.gate._candidate.poll(SCHEMA)
    setup.gate._candidate.poll(SCHEMA)
    setup.run(SHOP)
    assert setup.ratio(coordinate="Query.products") == (1, 2.0)


def test_an_unexpected_pricing_failure_is_counted_never_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    setup = Setup(tmp_path)

    def broken(*_: Any) -> Any:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(candidate_module, "analyze", broken)
    op = setup.run(SHOP)
    assert (op.refused, op.cost) == (False, 15.0)
    assert setup.errors(names.CANDIDATE_PRICING) == 1
    assert "OverflowError" in refusals(caplog)[0]


# -- reloads -----------------------------------------------------------------------------------


def test_an_edited_candidate_is_picked_up_on_the_reload_timer(tmp_path: Path) -> None:
    setup = Setup(tmp_path, interval=INTERVAL)
    setup.gate.check(SCHEMA)  # the schema known: the timer runs
    candidate = setup.gate._candidate
    write(setup.candidate, '[cost.weights]\n"Product" = 3\n')
    took = eventually(lambda: candidate.cost is not None
                      and candidate.cost.model.weights.get("Product") == 3, 10)  # fmt: skip
    assert took is not None, "the edited candidate was never read"
    assert took <= BOUND_S
    setup.run("{ products(first: 10) { name } }")
    assert setup.ratio(coordinate="Query.products") == (1, 3.0)
    # Broken, then fixed: the sampling stops, then resumes.
    write(setup.candidate, '[cost.weights]\n"Product" = [\n')
    assert eventually(lambda: candidate.cost is None, 10) is not None
    setup.run("{ products(first: 10) { name } }")
    assert setup.ratio(coordinate="Query.products") == (1, 3.0)
    write(setup.candidate, '[cost.weights]\n"Product" = 0.5\n')
    assert eventually(lambda: candidate.cost is not None, 10) is not None
    setup.run("{ products(first: 10) { name } }")
    assert setup.ratio(coordinate="Query.products") == (2, 3.5)
    assert setup.errors(names.CANDIDATE_INVALID) == 1


def test_a_new_quotaql_toml_reads_the_candidate_again(tmp_path: Path) -> None:
    setup = Setup(tmp_path, interval=INTERVAL)
    setup.gate.check(SCHEMA)
    write(
        setup.config,
        setup.config.read_text().replace("candidate_sample = 1.0", "candidate_sample = 0.0"),
    )
    assert eventually(lambda: setup.gate.config.cost.candidate_sample == 0, 10) is not None
    assert setup.gate._candidate.sample == 0
    setup.run(SHOP)
    assert setup.ratio(operation="Shop") is None
    # Another candidate named: read with the new quotaql.toml.
    write(tmp_path / "next.toml", '[cost.weights]\n"Product" = 5\n')
    text = setup.config.read_text().replace("candidate_sample = 0.0", "candidate_sample = 1.0")
    write(setup.config, text.replace('"quotaql.candidate.toml"', '"next.toml"'))
    assert eventually(lambda: setup.gate._candidate.sample == 1.0, 10) is not None
    setup.run("{ products(first: 10) { name } }")
    assert setup.ratio(coordinate="Query.products") == (1, 5.0)
