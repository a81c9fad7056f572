"""Validation work: the pairs graphql-core's overlapping-fields rule compares, and what the
worst documents within the document limits cost it.

For each family of hostile shapes, the largest document the static pass accepts under
``SAFE_LIMITS`` (a binary search on its size), its count of pairs (``max_field_pairs``) and
the thread CPU time of ``graphql.validate`` with every specified rule (the minimum and the
median of ``RUNS`` runs: CPU time, not wall time, so that the neighbours of a shared machine
weigh less). Then the issue's attack (900 one-field fragments spread side by side), timed
through validation as before and through the static pass that now refuses it.

Run: ``PYTHONPATH=src .venv/bin/python bench/run.py validation`` (or this file directly;
``.venv-gql32`` for graphql-core 3.2). docs/cost-model.md ("Validation work") has the figures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from importlib.metadata import version
from typing import TYPE_CHECKING

from graphql import build_schema, parse, validate

from _harness import Target, print_table, print_targets
from quotaql.cost_analysis.model import SAFE_LIMITS, CostLimits
from quotaql.cost_analysis.screen import screen
from quotaql.errors import LimitExceeded

if TYPE_CHECKING:
    from collections.abc import Callable

    from graphql import DocumentNode

RUNS = 15
WORST_MS_MAX = 50.0  # the worst accepted document of a pair-shaped family
REFUSAL_MS_MAX = 5.0  # the static pass refusing the attack (parsed already)

WIDTH = 40  # fields of each type: the shapes need 30 response names and more
_FIELDS = " ".join(f"f{i}: Int" for i in range(WIDTH))
SCHEMA = build_schema(f"type Node {{ {_FIELDS} n: Node }} type Query {{ {_FIELDS} n: Node }}")
F40 = " ".join(f"f{i}" for i in range(WIDTH))


def _fragments(count: int, body: Callable[[int], str], on: str = "Query") -> str:
    return " ".join(f"fragment F{i} on {on} {{ {body(i)} }}" for i in range(count))


def _spreads(count: int) -> str:
    return " ".join(f"...F{i}" for i in range(count))


def _chains(count: int) -> str:
    """Fragment ``F<i>`` selects a field and spreads ``F<i+1>``, which selects another."""
    return " ".join(
        f"fragment F{i} on Query {{ f{i % 30} ...F{i + 1} }}"
        f" fragment F{i + 1} on Query {{ f{(i + 1) % 30} }}"
        for i in range(0, count, 2)
    )


#: Each family: a document of size n. The first is the issue's attack.
FAMILIES: dict[str, Callable[[int], str]] = {
    # n one-field fragments spread side by side, their fields cycling over 30 names
    "spreads side by side": lambda n: (
        "{ " + _spreads(n) + " } " + _fragments(n, lambda i: f"f{i % 30}")
    ),
    # the same, each fragment spreading the next one's field in a fragment of its own
    "spread chains": lambda n: (
        "{ " + " ".join(f"...F{i}" for i in range(0, n, 2)) + " } " + _chains(n)
    ),
    # n spreads of fragments of 20 fields each
    "fat fragments": lambda n: (
        "{ "
        + _spreads(n)
        + " } "
        + _fragments(n, lambda i: " ".join(f"f{(i + j) % WIDTH}" for j in range(20)))
    ),
    # n copies of one field, each with the same 30 children: merged, pairwise
    "repeated subtrees": lambda n: (
        "{ "
        + " ".join("n { " + " ".join(f"f{j}" for j in range(30)) + " }" for _ in range(n))
        + " }"
    ),
    # n copies of n { ...F0 .. ...F29 }: the spreads of one copy against another's
    "repeated spreads": lambda n: (
        "{ "
        + " ".join("n { " + _spreads(30) + " }" for _ in range(n))
        + " } "
        + _fragments(30, lambda i: f"f{i}", "Node")
    ),
    # spreads of fragments the document does not define (graphql-core 3.2 compares them)
    "unknown spreads": lambda n: "{ f0 " + " ".join(f"...X{i}" for i in range(n)) + " }",
    # n spreads side by side beside a 19-level tree of 40 fields a level (max_fields)
    "spreads beside a wide tree": lambda n: (
        "{ "
        + _spreads(n)
        + " "
        + (F40 + " n { ") * 19
        + F40[: 4 * max(0, 960 - 40 * 19 - n)]
        + " }" * 19
        + " } "
        + _fragments(n, lambda i: f"f{i % 30}")
    ),
}
#: Documents with no pair to compare: what validation costs within max_fields and
#: max_tokens alone (linear in the document).
LINEAR: dict[str, str] = {
    "800 fields, 19 levels": "{ " + (F40 + " n { ") * 19 + F40 + " }" * 19 + " }",
    "800 fields, each @include(if: true)": (
        "{ "
        + (F40.replace(" ", " @include(if: true) ") + " @include(if: true) n { ") * 19
        + F40
        + " }" * 19
        + " }"
    ),
}


@dataclasses.dataclass(frozen=True)
class Row:
    family: str
    size: int
    length: int
    pairs: int
    min_ms: float
    median_ms: float


def pairs_of(document: DocumentNode, limits: CostLimits) -> int | None:
    """The pairs the static pass counts in ``document``; None when it refuses it."""
    from quotaql.cost_analysis.screen import _Screen  # the count itself

    found = _Screen(document, limits)
    try:
        found.run()
    except LimitExceeded:
        return None
    return found.pairs


def accepted(text: str, limits: CostLimits) -> int | None:
    if limits.max_length is not None and len(text) > limits.max_length:
        return None
    try:
        document = parse(text, max_tokens=limits.max_tokens)
    except Exception:  # the parser's own limits refuse it
        return None
    return pairs_of(document, limits)


def largest(family: Callable[[int], str], limits: CostLimits, high: int = 1200) -> int | None:
    """The largest size of ``family`` the static pass accepts (the families grow with n)."""
    low, best = 1, None
    while low <= high:
        middle = (low + high) // 2
        if accepted(family(middle), limits) is not None:
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best


def cpu_ms(document: DocumentNode, runs: int = RUNS) -> tuple[float, float]:
    """The minimum and median thread CPU time of one full validation, in ms."""
    times = []
    for _ in range(runs):
        started = time.thread_time()
        validate(SCHEMA, document)
        times.append((time.thread_time() - started) * 1000)
    return min(times), statistics.median(times)


def worst_rows(limits: CostLimits) -> list[Row]:
    rows = []
    for name, family in FAMILIES.items():
        size = largest(family, limits)
        if size is None:
            continue
        text = family(size)
        pairs = accepted(text, limits) or 0
        low, middle = cpu_ms(parse(text))
        rows.append(Row(name, size, len(text), pairs, low, middle))
    for name, text in LINEAR.items():
        pairs = accepted(text, limits)
        if pairs is None:
            continue
        low, middle = cpu_ms(parse(text))
        rows.append(Row(name, 0, len(text), pairs, low, middle))
    return rows


def main() -> list[Target]:
    print(f"graphql-core {version('graphql-core')}; thread CPU time, min and median of {RUNS}")
    targets = []
    for label, limits in (
        ("max_field_pairs = 2000 (the default)", SAFE_LIMITS),
        ("max_field_pairs = false (as before)", dataclasses.replace(SAFE_LIMITS,
                                                                    max_field_pairs=None)),
    ):  # fmt: skip
        rows = worst_rows(limits)
        print_table(
            ["family", "n", "bytes", "pairs", "min ms", "median ms"],
            [[r.family, str(r.size), str(r.length), str(r.pairs), f"{r.min_ms:.1f}",
              f"{r.median_ms:.1f}"] for r in rows],
            title=f"The worst accepted documents, {label}",
        )  # fmt: skip
        if limits is SAFE_LIMITS:
            pair_rows = [r for r in rows if r.family in FAMILIES]
            worst = max(pair_rows, key=lambda r: r.min_ms)
            targets.append(Target(f"worst pair-shaped document ({worst.family}), ms",
                                  worst.min_ms, WORST_MS_MAX))  # fmt: skip
    attack = FAMILIES["spreads side by side"](900)
    document = parse(attack)
    low, middle = cpu_ms(document, runs=3)
    times = []
    for _ in range(RUNS):
        started = time.thread_time()
        with contextlib.suppress(LimitExceeded):
            screen(document, SAFE_LIMITS)
        times.append((time.thread_time() - started) * 1000)
    print_table(
        ["attack", "bytes", "validate ms (min / median)", "static pass ms (median)"],
        [["900 spreads side by side", str(len(attack)), f"{low:.0f} / {middle:.0f}",
          f"{statistics.median(times):.2f}"]],
        title="The issue's attack",
    )  # fmt: skip
    targets.append(Target("static pass refusing the attack, ms", statistics.median(times),
                          REFUSAL_MS_MAX))  # fmt: skip
    print_targets(targets, title="Targets (a report: a miss does not fail the run)")
    return targets


if __name__ == "__main__":
    main()
