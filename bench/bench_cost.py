"""Cost analyzer speed vs graphql-core, Strawberry's depth limiter, JS graphql-query-complexity."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphql import build_schema, parse, validate
from strawberry.extensions.query_depth_limiter import create_validator

from _harness import (
    Measurement,
    Target,
    fmt_int,
    fmt_ratio,
    fmt_us,
    measure,
    measure_interleaved,
    print_table,
    print_targets,
    ratio,
    remaining_budget,
)

try:
    from quotaql.cost_analysis import CostModel, CostReport, analyze
    from quotaql.cost_analysis._cache import plan_cache
    from quotaql.cost_analysis._compile import CompiledSchema, compiled_schema
except ImportError as exc:  # say what is missing, not just where the import failed
    raise RuntimeError(
        "quotaql.cost_analysis.analyze is not importable; the cost benchmark needs it"
    ) from exc

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from graphql import DocumentNode, GraphQLSchema

QUERIES = ("small", "medium", "large")
BOMB_LEVELS = (10, 20, 30)
# graphql-core's OverlappingFieldsCanBeMerged compares the expanded fields pairwise: fine at 10
# levels (2**10 leaves), hopeless at 20 or 30: validate is timed at these levels only (reference).
BOMB_VALIDATE_LEVELS = (10,)

VALIDATE_RATIO_MAX = 0.02  # analyze / validate, on medium and large
VALIDATE_RATIO_QUERIES = ("medium", "large")
JS_RATIO_MAX = 1.0  # analyze / getComplexity, strictly below, on every query
CACHED_US_MAX = 3.0  # analyze with the plan cached, µs, on every query (issue 12)
BOMB_RATIO_MAX = 4.0  # analyze time at 30 levels / at 10 levels
BOMB_STACK_OFFSETS = range(0, 128, 16)  # caller stack depths each bomb is timed from
BOMB_SAMPLES = 5

# Deep enough never to reject the corpus: we time the rule's walk, not an error path.
DEPTH_LIMIT = 1_000
JS_DIR = Path(__file__).resolve().parent / "js"
NPM_CI_TIMEOUT_S = 300
NODE_TIMEOUT_S = 120


@dataclass(frozen=True, slots=True)
class Case:
    """One corpus operation: its text, its document parsed once, its variables."""

    name: str
    source: str
    document: DocumentNode
    variables: dict[str, Any]


def corpus_dir() -> Path:
    """The corpus: $QUOTAQL_BENCH_CORPUS, else the repository's own ``bench/corpus``."""
    override = os.environ.get("QUOTAQL_BENCH_CORPUS")
    path = Path(override) if override else Path(__file__).resolve().parent / "corpus"
    missing = [
        name
        for name in (
            "schema.graphql",
            *(f"{q}.{ext}" for q in QUERIES for ext in ("graphql", "variables.json")),
        )
        if not (path / name).is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"benchmark corpus at {path} lacks {', '.join(missing)} "
            "(set QUOTAQL_BENCH_CORPUS to the bench-corpus directory)"
        )
    return path


def load_cases(corpus: Path) -> list[Case]:
    cases = []
    for name in QUERIES:
        source = (corpus / f"{name}.graphql").read_text(encoding="utf-8")
        variables = json.loads((corpus / f"{name}.variables.json").read_text(encoding="utf-8"))
        cases.append(Case(name, source, parse(source), variables))
    return cases


def fragment_bomb(levels: int) -> str:
    """A document whose expansion doubles per level: 2**levels leaves from ~levels fragments.

    F1 … F<levels> each select ``followers`` twice under different aliases (so the fields are
    distinct and cannot be merged), both spreading the next fragment; the last one selects ``id``.
    """
    lines = ['{ user(id: "1") { ...F1 } }']
    for i in range(1, levels + 1):
        spread = f"{{ ...F{i + 1} }}"
        lines.append(
            f"fragment F{i} on User {{ a: followers(first: 2) {spread} "
            f"b: followers(first: 2) {spread} }}"
        )
    lines.append(f"fragment F{levels + 1} on User {{ id }}")
    return "\n".join(lines)


def checked_validate(schema: GraphQLSchema, document: DocumentNode, rules: Any = None) -> None:
    """Fail loudly when a corpus document is invalid: timing an error path would mislead."""
    errors = validate(schema, document, rules)
    if errors:
        raise RuntimeError(f"benchmark document does not validate: {errors[0].message}")


def strawberry_depth(schema: GraphQLSchema, document: DocumentNode) -> int:
    """The depth Strawberry's rule reports (its callback receives the depth of each operation)."""
    depths: dict[str, int] = {}
    checked_validate(schema, document, [create_validator(DEPTH_LIMIT, None, depths.update)])
    return max(depths.values())


def run_js(corpus: Path) -> dict[str, Any] | None:
    """getComplexity figures from bench/js/complexity.mjs, or None when node is not installed."""
    node = shutil.which("node")
    if node is None:
        print("node not found: JS comparison skipped\n")
        return None
    if not (JS_DIR / "node_modules").is_dir():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(
                "node is on PATH but npm is not: cannot install bench/js dependencies"
            )
        print(f"installing the JS baseline's dependencies (npm ci in {JS_DIR}) ...")
        subprocess.run([npm, "ci", "--silent"], cwd=JS_DIR, check=True, timeout=NPM_CI_TIMEOUT_S)
    timeout = max(10.0, min(NODE_TIMEOUT_S, remaining_budget()))
    proc = subprocess.run(
        [node, "--expose-gc", "complexity.mjs", str(corpus)],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"node complexity.mjs exited {proc.returncode}:\n{proc.stderr}")
    figures: dict[str, Any] = json.loads(proc.stdout)
    return figures


def _cold(
    compiled: CompiledSchema, schema: GraphQLSchema, doc: DocumentNode, variables: Any
) -> CostReport:
    plan_cache(compiled).clear()
    return analyze(schema, doc, variables=variables, operation_name=None)


def bench_corpus(
    schema: GraphQLSchema, cases: list[Case], js: dict[str, Any] | None
) -> list[Target]:
    depth_rule = create_validator(DEPTH_LIMIT, None, None)
    compiled = compiled_schema(schema, CostModel())
    strawberry_depths: dict[str, int] = {}
    timings: dict[str, dict[str, Measurement]] = {}
    for case in cases:
        # Sanity first: every baseline must do its normal, successful work on this document.
        checked_validate(schema, case.document)
        strawberry_depths[case.name] = strawberry_depth(schema, case.document)
        doc = case.document
        timings[case.name] = measure_interleaved(
            {
                # Cold: the plan compiled from the document (the cache emptied first).
                "analyze": partial(_cold, compiled, schema, doc, case.variables),
                # Repeated: the same document and variables, the plan cached.
                "cached": partial(
                    analyze, schema, doc, variables=case.variables, operation_name=None
                ),
                "validate": partial(validate, schema, doc),
                "parse": partial(parse, case.source),
                "depth": partial(validate, schema, doc, [depth_rule]),
            }
        )

    def js_figure(name: str) -> float | None:
        return None if js is None else float(js[name])

    labels = {
        "analyze": "quotaql analyze, cold (plan compiled)",
        "cached": "quotaql analyze, repeated (plan cached)",
        "validate": "graphql-core validate (all rules)",
        "parse": "graphql-core parse",
        "depth": "strawberry QueryDepthLimiter rule",
    }
    rows = [
        [label, *(fmt_us(timings[q][key].median_us) for q in QUERIES)]
        for key, label in labels.items()
    ]
    rows.append(["JS graphql-query-complexity", *(fmt_us(js_figure(q)) for q in QUERIES)])
    print_table(["median µs per operation", *QUERIES], rows, title="Corpus operations")

    details = [
        ["analyze: cost", *(fmt_int(_report_attr(timings[q]["analyze"], "cost")) for q in QUERIES)],
        [
            "analyze: depth",
            *(fmt_int(_report_attr(timings[q]["analyze"], "depth")) for q in QUERIES),
        ],
        [
            "strawberry: depth (roots at 0)",
            *(fmt_int(strawberry_depths.get(q, "-")) for q in QUERIES),
        ],
        [
            "getComplexity (simple estimator)",
            *(fmt_int(js["cost"][q]) if js else "-" for q in QUERIES),
        ],
        ["analyze: min µs / loops x samples", *(_spread(timings[q]["analyze"]) for q in QUERIES)],
    ]
    print_table(["what each reports", *QUERIES], details)
    _print_notes({op: {q: timings[q][op] for q in QUERIES} for op in labels})

    targets: list[Target] = []
    ratio_rows: list[list[str]] = []
    for q in QUERIES:
        t = timings[q]
        analyze_us = t["analyze"].median_us
        validate_ratio = ratio(analyze_us, t["validate"].median_us)
        validate_target = (
            Target(f"analyze/validate {q}", validate_ratio, VALIDATE_RATIO_MAX)
            if q in VALIDATE_RATIO_QUERIES
            else None
        )
        js_target = Target(
            f"analyze/getComplexity {q}",
            ratio(analyze_us, js_figure(q)),
            JS_RATIO_MAX,
            op="<",
            skip_reason="" if js else "node not found",
        )
        cached_target = Target(f"analyze cached {q} (µs)", t["cached"].median_us, CACHED_US_MAX)
        targets += [target for target in (validate_target, js_target, cached_target) if target]
        ratio_rows += [
            _ratio_row("analyze / validate", q, validate_ratio, validate_target),
            _ratio_row("analyze / getComplexity", q, js_target.value, js_target),
            _ratio_row("analyze / QueryDepthLimiter", q, ratio(analyze_us, t["depth"].median_us)),
            _ratio_row("analyze / parse", q, ratio(analyze_us, t["parse"].median_us)),
        ]
    print_table(
        ["ratio", "query", "value", "target", "status"],
        ratio_rows,
        title="Ratios (same run)",
        left=2,
    )
    return targets


def _at_stack_depth(depth: int, fn: Callable[[], object]) -> object:
    """Call ``fn`` ``depth`` Python frames deeper than the caller."""
    return fn() if depth == 0 else _at_stack_depth(depth - 1, fn)


def _median_over_offsets(by_offset: list[Measurement]) -> Measurement:
    figures = [m.median_us for m in by_offset if m.median_us is not None]
    if not figures:
        return by_offset[0]
    return Measurement(
        median_us=statistics.median(figures),
        min_us=min(figures),
        loops=by_offset[0].loops,
        samples=sum(m.samples for m in by_offset),
        result=by_offset[0].result,
        note=f"over {len(figures)} stack offsets: {min(figures):.0f}–{max(figures):.0f} µs",
    )


def bench_bombs(schema: GraphQLSchema) -> list[Target]:
    compiled = compiled_schema(schema, CostModel())
    sources = {levels: fragment_bomb(levels) for levels in BOMB_LEVELS}
    documents = {levels: parse(source) for levels, source in sources.items()}
    # CPython 3.11 allocates its frame stack in 16 kB chunks and frees a chunk as soon as the
    # recursion returns across its edge, so the same deep walk costs up to twice as much when
    # the caller's stack depth puts a chunk edge inside it. Each bomb is timed from several
    # stack depths and the median taken, so t30/t10 measures the analyzer, not the alignment.
    # Interleaved, so that t30/t10 compares samples taken side by side.
    runs = measure_interleaved(
        {
            (levels, offset): partial(
                _at_stack_depth,
                offset,
                partial(_cold, compiled, schema, doc, None),  # each time planned anew
            )
            for levels, doc in documents.items()
            for offset in BOMB_STACK_OFFSETS
        },
        samples=BOMB_SAMPLES,
    )
    timings = {
        levels: _median_over_offsets([runs[levels, offset] for offset in BOMB_STACK_OFFSETS])
        for levels in BOMB_LEVELS
    }
    validate_timings = {
        levels: measure(partial(validate, schema, documents[levels]))
        for levels in BOMB_VALIDATE_LEVELS
    }
    rows = []
    for levels in BOMB_LEVELS:
        timing = timings[levels]
        validate_timing = validate_timings.get(levels)
        rows.append(
            [
                str(levels),
                fmt_int(len(sources[levels])),
                fmt_int(2**levels),
                fmt_us(timing.median_us),
                fmt_int(_report_attr(timing, "cost")),
                fmt_int(_report_attr(timing, "depth")),
                fmt_us(validate_timing.median_us) if validate_timing else "not run",
            ]
        )
    print_table(
        [
            "levels",
            "bytes",
            "expanded leaves",
            "analyze µs",
            "reported cost",
            "depth",
            "validate µs",
        ],
        rows,
        title="Fragment bombs (F_i spreads F_i+1 twice; validate would explode past 10 levels)",
    )
    _print_notes({"analyze": timings, "validate": validate_timings}, unit="levels")
    first, last = BOMB_LEVELS[0], BOMB_LEVELS[-1]
    target = Target(
        f"analyze bomb t{last}/t{first}",
        ratio(timings[last].median_us, timings[first].median_us),
        BOMB_RATIO_MAX,
    )
    print_table(
        ["ratio", "value", "target", "status"],
        [[f"analyze t{last} / t{first}", fmt_ratio(target.value), target.bound, target.verdict]],
    )
    return [target]


def _report_attr(timing: Measurement, name: str) -> object:
    return "-" if timing.result is None else getattr(timing.result, name)


def _spread(timing: Measurement) -> str:
    if not timing.ok:
        return "-"
    return f"{fmt_us(timing.min_us)} / {timing.loops}x{timing.samples}"


def _ratio_row(
    name: str, query: str, value: float | None, target: Target | None = None
) -> list[str]:
    if target is None:
        return [name, query, fmt_ratio(value), "", ""]
    return [name, query, fmt_ratio(value), target.bound, target.verdict]


def _print_notes(timings: Mapping[str, Mapping[Any, Measurement]], unit: str = "") -> None:
    """Say why a figure is missing (a timeout, the run's budget spent)."""
    notes = [
        f"  note: {op} on {case}{' ' + unit if unit else ''}: {timing.note}"
        for op, by_case in timings.items()
        for case, timing in by_case.items()
        if timing.note
    ]
    if notes:
        print("\n".join(notes), end="\n\n")


def main() -> list[Target]:
    corpus = corpus_dir()
    schema = build_schema((corpus / "schema.graphql").read_text(encoding="utf-8"))
    cases = load_cases(corpus)
    print(f"corpus: {corpus}")
    print(
        f"graphql-core {version('graphql-core')}, "
        f"strawberry-graphql {version('strawberry-graphql')}, quotaql {version('quotaql')}"
    )
    js = run_js(corpus)
    if js is not None:
        meta = js.get("meta", {})
        print(
            f"node {meta.get('node')}, graphql {meta.get('graphql')}, "
            f"graphql-query-complexity {meta.get('graphql-query-complexity')}"
        )
    print("median of samples of 20-50 ms each (calibrated loops), GC before each sample\n")

    targets = bench_corpus(schema, cases, js)
    targets += bench_bombs(schema)
    print_targets(targets, title="Targets (a report: a miss does not fail the run)")
    return targets
