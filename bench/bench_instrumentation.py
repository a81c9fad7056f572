"""The per-operation cost of quotaql's instrumentation: metrics on/off, tracing on/off.

On the shared corpus `medium` query, with the Strawberry schema, executor and config of
`bench_plugin` (`CostLimiter(config, storage=MemoryStorage(), identify=...)`):

1. *Direct*: the instrumentation's own work, timed alone in calibrated loops, in turns
   (`_harness.measure_interleaved`). A whole execute is ~3 ms with ~±30 µs of noise: it cannot
   resolve the targets (5 µs, 1 µs), so the targets come from here.
2. *Whole executes*, paired A/B in turns (`_harness.measure_calls_interleaved`): no metrics and
   no tracer, the same again (a second limiter: the A/B noise floor), metrics on, an SDK
   `TracerProvider` without a span processor, and one with
   `SimpleSpanProcessor(InMemorySpanExporter())`. Context only: no target uses them.

After timing, the run checks that the registry counted one allowed operation per execute of the
metrics variant and that the exporter saw one ``quotaql.check`` span per execute of the exporter
variant.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from _harness import (
    Measurement,
    Target,
    fmt_int,
    fmt_us,
    measure_interleaved,
    print_table,
    print_targets,
)
from bench_cost import corpus_dir, load_cases
from bench_plugin import (
    IN_SITU_CALLS,
    IN_SITU_SECONDS,
    TENANT,
    _check_results,
    _config,
    _delta,
    _Executor,
    _print_notes,
    _target_row,
    _tenant,
    _Timed,
    _timed,
    check_schema,
    make_schema,
)
from quotaql import MemoryStorage
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench_cost import Case
    from quotaql.config import Config
    from quotaql.gate import Operation

# -- targets ---------------------------------------------------------------------------------
METRICS_US_MAX = 5.0  # what one operation records: PrometheusMetrics.operation() + .decision()
TRACING_OFF_US_MAX = 1.0  # the tracing checks of one operation without a tracer provider

# -- workloads -------------------------------------------------------------------------------
QUERY = "medium"
TOP_TENANTS = 10
AB_SET_SECONDS = 20.0  # the whole-execute A/B: about this many seconds of rounds (5 variants)
DRAIN_EVERY = 256  # calls between two drains of an in-memory span exporter (bounded memory)
CAPTURED_EXECUTES = 3  # executes whose operations the direct timings replay

AB_LABELS = {
    "plain": "(a) CostLimiter, no metrics, no tracer",
    "plain2": "(a') the same, a second limiter (A/B noise floor)",
    "metrics": f"(b) + PrometheusMetrics(CollectorRegistry(), top_tenants={TOP_TENANTS})",
    "tracer": "(c) + tracer_provider=TracerProvider() (no span processor)",
    "exporter": "(d) + TracerProvider + SimpleSpanProcessor(InMemorySpanExporter())",
}


def _limiter(config: Config, **instrumentation: Any) -> CostLimiter:
    return CostLimiter(config, storage=MemoryStorage(), identify=_tenant, **instrumentation)


def _metrics() -> PrometheusMetrics:
    return PrometheusMetrics(CollectorRegistry(), top_tenants=TOP_TENANTS)


class _SpanCounter:
    """Drains an InMemorySpanExporter every DRAIN_EVERY calls, counting its spans by name first.

    Memory stays bounded however long the loop; ``count(name)`` drains what is left.
    """

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter
        self.by_name: dict[str, int] = {}
        self.decisions: dict[str, int] = {}
        self._calls = 0

    def tick(self) -> None:
        self._calls += 1
        if self._calls % DRAIN_EVERY == 0:
            self.drain()

    def drain(self) -> None:
        for span in self.exporter.get_finished_spans():
            self.by_name[span.name] = self.by_name.get(span.name, 0) + 1
            decision = str((span.attributes or {}).get(names.ATTR_DECISION))
            self.decisions[decision] = self.decisions.get(decision, 0) + 1
        self.exporter.clear()

    def count(self, name: str) -> int:
        self.drain()
        return self.by_name.get(name, 0)


def _exporter_provider() -> tuple[TracerProvider, _SpanCounter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, _SpanCounter(exporter)


# -- what the extension does per operation for tracing, with no tracer provider -------------


def _tracing_off(owner: CostLimiter, op: Operation) -> None:
    """Exactly the tracing work of one operation when ``owner.tracing is None``.

    Mirrors `quotaql.gate` line by line: `Operation.__init__` stores ``span = None``;
    `Gate._admit` tests ``self.tracing``; `Gate._decided` tests ``op.span`` (its ``and`` stops
    there); `Gate._settle` tests ``op.span`` (only when something is refunded: counted anyway,
    the worst case); `Gate.finish` loads ``op.span`` and tests it. Inline in those methods
    these are a handful of attribute loads and comparisons; here they also pay one Python call.
    """
    gate = owner.gate
    op.span = None  # Operation.__init__
    if gate.tracing is not None:  # Gate._admit
        op.span = gate.tracing.start()
    if op.span is not None:  # Gate._decided
        return
    if op.span is not None:  # Gate._settle (with a refund)
        return
    span = op.span  # Gate.finish
    if span is not None:
        return


def _call_only(owner: CostLimiter, op: Operation) -> None:
    """The same call with an empty body: what `_tracing_off` pays that the extension does not."""


# -- 1: the instrumentation's own work, timed directly ---------------------------------------


def _capture(owner: CostLimiter, execute: _Executor) -> list[Operation]:
    """The operations that `owner.gate.finish` receives in CAPTURED_EXECUTES executes."""
    seen: list[Operation] = []
    gate = owner.gate
    finish = gate.finish

    def capture(op: Operation | None) -> None:
        assert op is not None
        seen.append(op)
        finish(op)

    gate.finish = capture  # type: ignore[method-assign]
    try:
        for _ in range(CAPTURED_EXECUTES):
            execute()
    finally:
        del gate.finish  # the method again
    return seen


def _capture_metric_calls(
    metrics: PrometheusMetrics, execute: _Executor
) -> tuple[tuple[tuple[Any, ...], dict[str, Any]], tuple[Any, ...]]:
    """The arguments of the ``operation()`` and ``decision()`` calls of one execute."""
    calls: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
        "operation": [],
        "decision": [],
    }
    originals = {name: getattr(metrics, name) for name in calls}

    def spy(name: str) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            calls[name].append((args, kwargs))
            originals[name](*args, **kwargs)

        return record

    for name in calls:
        setattr(metrics, name, spy(name))
    try:
        execute()
    finally:
        for name in calls:
            delattr(metrics, name)
    if len(calls["operation"]) != 1 or len(calls["decision"]) != 1:
        raise RuntimeError(f"one execute made {calls}: expected one operation(), one decision()")
    return calls["operation"][0], calls["decision"][0][0]


DIRECT_LABELS = {
    "recorded": "PrometheusMetrics.operation(...) + .decision(...), one operation's calls",
    "operation": "  .operation(...) alone",
    "decision": "  .decision(...) alone",
    "finish_metrics": "Gate.finish(op), metrics on",
    "finish_plain": "Gate.finish(op), metrics off",
    "acquire_metrics": "limiter.acquire(...), metrics on (timed, MultiRecorder, decision())",
    "acquire_plain": "limiter.acquire(...), metrics off",
    "tracing_off": "the tracing checks of one operation, tracing off (+ one call)",
    "call_only": "  the same call, empty body (reference)",
    "span_none": "op.span = None; finish(op) (reference for the span rows)",
    "span_tracer": "op.span = tracing.start(); finish(op), no span processor",
    "span_exporter": "the same, SimpleSpanProcessor(InMemorySpanExporter())",
}


def bench_direct(
    case: Case, config: Config, execute_plain: _Executor, plain: CostLimiter
) -> tuple[dict[str, Measurement], dict[str, float | None], str]:
    """Time the instrumentation's own work per operation, alone, in turns.

    ``plain`` is variant (a) and ``execute_plain`` its executor: the operations replayed are
    those of its executes. Every other instance is fresh, so that the A/B variants' registry
    and exporter counts stay exact.
    """
    metered = _limiter(config, metrics=_metrics())
    metered_execute = _Executor(execute_plain.loop, make_schema(metered), case)
    assert metered.metrics is not None
    (op_args, op_kwargs), decision_args = _capture_metric_calls(metered.metrics, metered_execute)
    replay = _metrics()  # its own registry: the first (untimed) call creates the label children

    op, op_s, op_e = _capture(plain, execute_plain)
    if op.decision is None or not op.decision.allowed or op.report is None:
        raise RuntimeError(f"the captured operation was not an allowed one: {op.outcome}")
    tracer = _limiter(config, tracer_provider=TracerProvider()).tracing
    provider, spans = _exporter_provider()
    exporter = _limiter(config, tracer_provider=provider).tracing
    assert tracer is not None
    assert exporter is not None
    assert plain.tracing is None
    cost, quotas = op.report.cost, op.quotas

    def recorded() -> None:
        replay.operation(*op_args, **op_kwargs)
        replay.decision(*decision_args)

    def span_none() -> None:
        op_s.span = None
        plain.gate.finish(op_s)

    def span_tracer() -> None:
        op_s.span = tracer.start()
        plain.gate.finish(op_s)

    def span_exporter() -> None:
        op_e.span = exporter.start()
        plain.gate.finish(op_e)
        spans.tick()

    fns: dict[str, Callable[[], object]] = {
        "recorded": recorded,
        "operation": lambda: replay.operation(*op_args, **op_kwargs),
        "decision": lambda: replay.decision(*decision_args),
        "finish_metrics": lambda: metered.gate.finish(op),
        "finish_plain": lambda: plain.gate.finish(op),
        "acquire_metrics": lambda: metered.limiter.acquire(TENANT, cost, quotas),
        "acquire_plain": lambda: plain.limiter.acquire(TENANT, cost, quotas),
        "tracing_off": lambda: _tracing_off(plain, op),
        "call_only": lambda: _call_only(plain, op),
        "span_none": span_none,
        "span_tracer": span_tracer,
        "span_exporter": span_exporter,
    }
    direct = measure_interleaved(fns)
    spans.drain()
    op_s.span = op_e.span = None

    def minus(a: str, b: str) -> float | None:
        x, y = direct[a].median_us, direct[b].median_us
        return None if x is None or y is None else x - y

    finish, acquire = (
        minus("finish_metrics", "finish_plain"),
        minus("acquire_metrics", "acquire_plain"),
    )
    derived = {
        "metrics": direct["recorded"].median_us,
        "metrics_in_extension": None if finish is None or acquire is None else finish + acquire,
        "metrics_finish": finish,
        "metrics_acquire": acquire,
        "tracing_off": direct["tracing_off"].median_us,
        "tracing_off_net": minus("tracing_off", "call_only"),
        "span_tracer": minus("span_tracer", "span_none"),
        "span_exporter": minus("span_exporter", "span_none"),
    }
    kwargs = ", ".join(f"{k}={fmt_int(v)}" for k, v in op_kwargs.items())
    recorded_calls = (
        f"operation{tuple(str(a) for a in op_args)!r} with {kwargs}; "
        f"decision(<{decision_args[0].source} decision>, {decision_args[1] * 1e6:.1f} µs)"
    )
    return direct, derived, recorded_calls


def _in_situ(metrics: PrometheusMetrics, execute: _Executor) -> float | None:
    """Median µs per execute of its ``operation()`` + ``decision()`` calls, timed inside it.

    For up to IN_SITU_CALLS executes (IN_SITU_SECONDS), the two methods are wrapped in timers
    (instance attributes, removed before returning; the calls still record). No target uses it:
    inside an execute the calls run on caches that graphql-core's work has evicted.
    """
    spent: dict[str, list[float]] = {"operation": [], "decision": []}
    for name, seconds in spent.items():
        setattr(metrics, name, _Timed(getattr(metrics, name), seconds))
    deadline = time.monotonic() + IN_SITU_SECONDS
    try:
        for _ in range(IN_SITU_CALLS):
            execute()
            if time.monotonic() > deadline:
                break
    finally:
        for name in spent:
            delattr(metrics, name)
    pairs = [a + b for a, b in zip(spent["operation"], spent["decision"], strict=True)]
    return statistics.median(pairs) * 1e6 if pairs else None


# -- 2: whole executes, paired A/B -----------------------------------------------------------


def bench_ab(
    case: Case, config: Config, loop: asyncio.AbstractEventLoop
) -> tuple[
    dict[str, Measurement], dict[str, CostLimiter], dict[str, _Executor], list[str], float | None
]:
    """Whole executes of the five variants in turns; then the counts checked.

    Also returns the metrics calls' median µs per execute timed inside executes (`_in_situ`).
    """
    registry = CollectorRegistry()
    provider, spans = _exporter_provider()
    limiters = {
        "plain": _limiter(config),
        "plain2": _limiter(config),
        "metrics": _limiter(config, metrics=PrometheusMetrics(registry, top_tenants=TOP_TENANTS)),
        "tracer": _limiter(config, tracer_provider=TracerProvider()),
        "exporter": _limiter(config, tracer_provider=provider),
    }
    for name in ("plain", "plain2"):
        owner = limiters[name]
        assert owner.metrics is None, name
        assert owner.tracing is None, name
    executors = {
        name: _Executor(loop, make_schema(owner), case) for name, owner in limiters.items()
    }
    results = {name: execute() for name, execute in executors.items()}
    _check_results(
        case, {"none": _Executor(loop, make_schema(), case)(), **results}, set(executors)
    )

    def exporter_variant() -> object:
        result = executors["exporter"]()
        spans.tick()
        return result

    fns: dict[str, Callable[[], object]] = {**executors, "exporter": exporter_variant}
    timings = _timed(fns, AB_SET_SECONDS)
    metrics = limiters["metrics"].metrics
    assert metrics is not None
    in_situ = _in_situ(metrics, executors["metrics"])

    problems = [f"{n}: {fn.errors[0]}" for n, fn in executors.items() if fn.errors]
    calls = {name: execute.calls for name, execute in executors.items()}
    allowed = total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == names.REQUESTS_TOTAL:
                total += sample.value
                if sample.labels.get(names.LABEL_DECISION) == names.ALLOWED:
                    allowed += sample.value
    checks = spans.count(names.SPAN_CHECK)
    if allowed != calls["metrics"] or total != allowed:
        problems.append(
            f"{names.REQUESTS_TOTAL}: allowed {allowed:g}, all {total:g}, "
            f"for {calls['metrics']:,} executes of (b)"
        )
    if checks != calls["exporter"] or spans.decisions != {names.ALLOWED: checks}:
        problems.append(
            f"{checks:,} {names.SPAN_CHECK} spans (decisions {spans.decisions}) for "
            f"{calls['exporter']:,} executes of (d); all spans: {spans.by_name}"
        )
    if problems:
        raise RuntimeError(f"the A/B variants did not run as expected: {problems}")
    lines = [
        f'{names.REQUESTS_TOTAL}{{decision="{names.ALLOWED}"}} = {allowed:,.0f} = the '
        f"{calls['metrics']:,} executes of (b) (all of them: first call, warm-up, rounds, "
        "in-situ); no other decision",
        f"{names.SPAN_CHECK} spans exported in (d) = {checks:,} = its {calls['exporter']:,} "
        f"executes, all decision={names.ALLOWED} (exporter drained every {DRAIN_EVERY} executes)",
    ]
    return timings, limiters, executors, lines, in_situ


# -- the report ------------------------------------------------------------------------------


def main() -> list[Target]:
    corpus = corpus_dir()
    sdl = (corpus / "schema.graphql").read_text(encoding="utf-8")
    all_cases = load_cases(corpus)
    case = {c.name: c for c in all_cases}[QUERY]
    print(f"corpus: {corpus} ({QUERY})")
    print(
        f"strawberry-graphql {version('strawberry-graphql')}, quotaql {version('quotaql')}, "
        f"prometheus-client {version('prometheus-client')}, "
        f"opentelemetry-sdk {version('opentelemetry-sdk')}\n"
    )
    check_schema(make_schema(), sdl, all_cases)
    with tempfile.TemporaryDirectory(prefix="quotaql-bench-") as directory:
        config = _config(Path(directory))

    loop = asyncio.new_event_loop()
    try:
        timings, limiters, executors, checked, in_situ = bench_ab(case, config, loop)
        direct, derived, recorded_calls = bench_direct(
            case, config, executors["plain"], limiters["plain"]
        )
    finally:
        loop.close()

    # -- direct
    print_table(
        ["timed alone (µs per call)", "median", "min"],
        [
            [label, fmt_us(direct[name].median_us), fmt_us(direct[name].min_us)]
            for name, label in DIRECT_LABELS.items()
        ],
        title=(
            f"1. Direct: the instrumentation's own work, on the operations of real {QUERY} "
            "executes, in calibrated ~30 ms loops, samples in turns (median of "
            f"{direct['recorded'].samples})"
        ),
    )
    _print_notes(direct, QUERY)
    print(f"one operation's calls, replayed on their own registry: {recorded_calls}\n")

    # -- A/B
    plain = timings["plain"]
    rows = [
        [
            label,
            fmt_us(timings[name].median_us),
            fmt_us(timings[name].min_us),
            "" if name == "plain" else _delta(timings[name].median_us, plain.median_us),
            "" if name == "plain" else _delta(timings[name].min_us, plain.min_us),
        ]
        for name, label in AB_LABELS.items()
    ]
    print_table(
        ["await schema.execute(medium)", "median µs", "min µs", "Δ median", "Δ min"],
        rows,
        title=(
            f"2. Whole executes, paired A/B: {plain.samples:,} rounds of one call each in turns "
            "(loop.run_until_complete included); Δ = minus (a). Context only: (a') - (a) is the "
            "noise of this comparison"
        ),
    )
    _print_notes(timings, QUERY)
    print("checked after timing:\n" + "\n".join(f"  {line}" for line in checked) + "\n")

    # -- targets
    targets = [
        Target("metrics per operation µs", derived["metrics"], METRICS_US_MAX),
        Target("tracing off per operation µs", derived["tracing_off"], TRACING_OFF_US_MAX),
    ]

    def ab(name: str) -> str:
        return (
            f"{_delta(timings[name].median_us, plain.median_us)} median, "
            f"{_delta(timings[name].min_us, plain.min_us)} min"
        )

    noise = f"noise floor (a')-(a): {ab('plain2')}"

    def context(label: str, value: float | None) -> list[str]:
        return [label, fmt_us(value), "", ""]

    print_table(
        ["figure (same run)", "value", "target", "status"],
        [
            _target_row(targets[0].name, targets[0].value, targets[0]),
            context(
                "  metrics in the extension µs: finish on-off + acquire on-off",
                derived["metrics_in_extension"],
            ),
            context("    finish(op) on - off µs", derived["metrics_finish"]),
            context("    limiter.acquire on - off µs", derived["metrics_acquire"]),
            context(
                f"  .operation + .decision timed inside {IN_SITU_CALLS} executes µs",
                in_situ,
            ),
            _target_row(targets[1].name, targets[1].value, targets[1]),
            context("  tracing off, net of the call µs", derived["tracing_off_net"]),
            context("tracing on, no span processor, per operation µs", derived["span_tracer"]),
            context("tracing on, SimpleSpanProcessor(in-memory) µs", derived["span_exporter"]),
            [f"execute (b) metrics - (a) µs: {ab('metrics')}", "", "", ""],
            [f"execute (c) tracer - (a) µs: {ab('tracer')}", "", "", ""],
            [f"execute (d) exporter - (a) µs: {ab('exporter')}", "", "", ""],
            [f"execute {noise}", "", "", ""],
        ],
    )
    print_targets(targets, title="Targets (a report: a miss does not fail the run)")
    return targets
