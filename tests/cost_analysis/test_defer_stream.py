"""``@defer`` and ``@stream`` change no price: what is delivered later still runs.

The analyzer does not look at either directive: a deferred fragment is priced as if it were
inline, a streamed list at its whole size, never at its ``initialCount`` (docs/cost-model.md).
The directives are declared in the SDL here, so that this runs on graphql-core 3.2 (which
has neither) as on 3.3; how the payloads are settled: tests/adapters/strawberry/
test_incremental.py.
"""

from __future__ import annotations

import pytest

from quotaql.cost_analysis import CostModel, analyze

from .conftest import build

SDL = """
directive @defer(if: Boolean! = true, label: String) on FRAGMENT_SPREAD | INLINE_FRAGMENT
directive @stream(if: Boolean! = true, label: String, initialCount: Int! = 0) on FIELD
type Query { products(first: Int = 10): [Product] feed: [Product] }
type Product { name: String reviews(first: Int = 5): [Review] }
type Review { stars: Int }
"""


@pytest.mark.parametrize("model", ["apollo", "ibm"])
@pytest.mark.parametrize(
    ("incremental", "whole"),
    [
        (
            "{ products(first: 8) { name ... @defer { reviews(first: 3) { stars } } } }",
            "{ products(first: 8) { name reviews(first: 3) { stars } } }",
        ),
        (
            "{ products(first: 8) @stream(initialCount: 1) { name } }",
            "{ products(first: 8) { name } }",
        ),
        (
            "{ feed @stream(initialCount: 2) { ...More } } fragment More on Product"
            ' { ... @defer(label: "r") { reviews @stream { stars } } }',
            "{ feed { reviews { stars } } }",
        ),
        (
            "query ($later: Boolean!) { products(first: 4) @stream(if: $later) { name"
            " ... @defer(if: $later) { reviews(first: 2) { stars } } } }",
            "{ products(first: 4) { name reviews(first: 2) { stars } } }",
        ),
    ],
    ids=["defer", "stream-initial-count", "nested-default-sizes", "conditional"],
)
def test_deferred_and_streamed_parts_are_priced_whole(
    model: str, incremental: str, whole: str
) -> None:
    schema = build(SDL)
    costs = CostModel(model=model)  # type: ignore[arg-type]

    priced = analyze(schema, incremental, {"later": True}, model=costs)

    assert priced.cost == analyze(schema, whole, model=costs).cost > 0
    assert priced.by_coordinate == analyze(schema, whole, model=costs).by_coordinate
