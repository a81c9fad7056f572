"""The static pass's count of the pairs graphql-core's overlapping-fields rule compares
(``max_field_pairs``): exact on small shapes, and an upper bound of the comparisons the
installed graphql-core really makes, on random documents."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse, validate
from graphql.validation.rules import overlapping_fields_can_be_merged as rule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaql.cost_analysis.model import SAFE_LIMITS, CostLimits
from quotaql.cost_analysis.screen import _Screen, screen
from quotaql.errors import TooManyFieldPairs

if TYPE_CHECKING:
    from collections.abc import Iterator

SCHEMA = build_schema(
    "type T { a: T b: T c: T x: Int y: Int } type Query { a: T b: T c: T x: Int y: Int }"
)
UNLIMITED = CostLimits()


def pairs(text: str) -> int:
    found = _Screen(parse(text), UNLIMITED)
    found.run()
    return found.pairs


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{ a { x } b { y } }", 0),  # nothing shares a response name
        ("{ x x }", 1),
        ("{ x x x }", 3),  # every two of them
        ("{ x: a { x } x: b { y } }", 2),  # the namesakes, and their selections (merged)
        ("{ a { x } a { x } }", 3),  # a with a, their selection sets, x with x
        # A spread: one pair with the selection set it is in; each next spread, one more
        # for each spread before it.
        ("{ ...A } fragment A on Query { x }", 1),
        ("{ ...A ...B } fragment A on Query { x } fragment B on Query { y }", 1 + 2),
        ("{ ...A ...A } fragment A on Query { x }", 1 + 2 + 1),  # and x twice
        ("{ y ...A } fragment A on Query { ...B } fragment B on Query { x }", 1 + 2),
        ("{ ...X ...Y }", 1 + 2),  # unknown fragments are compared too (graphql-core 3.2)
        ("{ ... on Query { x } x }", 1),  # an inline fragment is its selection set's
        # An unused fragment is validated as a root of its own.
        ("{ x } fragment U on Query { y y }", 1),
    ],
)
def test_the_pairs_of_small_documents(text: str, expected: int) -> None:
    assert pairs(text) == expected


def test_the_issues_attack_counts_four_hundred_thousand_pairs() -> None:
    spreads = " ".join(f"...F{i}" for i in range(900))
    fragments = " ".join(f"fragment F{i} on Query {{ f{i % 30} }}" for i in range(900))
    # 900 spreads side by side: 1 + 2 + ... + 900; 30 names 30 times: 30 x 435.
    assert pairs(f"{{ {spreads} }} {fragments}") == 900 * 901 // 2 + 30 * 435


def test_the_count_stops_at_the_limit_with_the_location_it_crossed() -> None:
    text = "{ " + " ".join(f"...F{i}" for i in range(100)) + " }"
    with pytest.raises(TooManyFieldPairs) as raised:
        screen(parse(text), SAFE_LIMITS)
    error = raised.value
    assert error.code == "TOO_MANY_FIELD_PAIRS"
    assert (error.value, error.limit, error.partial) == (2016, 2000, True)  # spread 63: 63 more
    assert error.locations == ((1, text.index("...F62 ") + 1),)
    assert error.extensions == {"code": "TOO_MANY_FIELD_PAIRS", "value": 2016, "limit": 2000}
    assert error.message == (
        "Validating the document would compare more than 2000 pairs of fields and fragments"
    )
    screen(parse(text), dataclasses.replace(SAFE_LIMITS, max_field_pairs=None))  # off: passes


# -- an upper bound of graphql-core's comparisons ----------------------------------------------

_NAMES = ("a", "b", "c", "x", "y")
_FRAGMENTS = 4


@contextlib.contextmanager
def comparisons() -> Iterator[list[int]]:
    """Count the comparisons graphql-core's rule makes: field pairs, fragment pairs, and
    fields against a fragment (each call, memoized or not), by wrapping the rule's own
    functions for the time of the ``with`` (module-level functions it calls by name)."""
    count = [0]
    originals: dict[str, Any] = {}
    for name in (
        "find_conflict",
        "collect_conflicts_between_fragments",
        "collect_conflicts_between_fields_and_fragment",
    ):
        original = originals[name] = getattr(rule, name)

        def counted(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            count[0] += 1
            return _original(*args, **kwargs)

        setattr(rule, name, counted)
    try:
        yield count
    finally:
        for name, original in originals.items():
            setattr(rule, name, original)


@st.composite
def selection_sets(draw: st.DrawFn, depth: int, fragment: int) -> str:
    """A selection set on ``T`` or ``Query`` (the same fields): namesakes, aliases, inline
    fragments, spreads of the fragments after ``fragment`` (no cycles) and unknown ones."""
    items = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["field", "field", "leaf", "inline", "spread", "unknown"]))
        if kind == "field" and depth < 3:
            alias = draw(st.sampled_from(["", "", "k: "]))
            name = draw(st.sampled_from(_NAMES[:3]))
            items.append(f"{alias}{name} {draw(selection_sets(depth + 1, fragment))}")
        elif kind in ("field", "leaf"):
            alias = draw(st.sampled_from(["", "", "k: "]))
            items.append(f"{alias}{draw(st.sampled_from(_NAMES[3:]))}")
        elif kind == "inline" and depth < 3:
            items.append(f"... {draw(selection_sets(depth + 1, fragment))}")
        elif kind == "spread" and fragment + 1 < _FRAGMENTS:
            items.append(f"...F{draw(st.integers(fragment + 1, _FRAGMENTS - 1))}")
        elif kind == "unknown":
            items.append(f"...X{draw(st.integers(0, 2))}")
        else:
            items.append("x")
    return "{ " + " ".join(items) + " }"


@st.composite
def documents(draw: st.DrawFn) -> str:
    operation = draw(selection_sets(0, -1))
    fragments = []
    for i in range(_FRAGMENTS):
        on = draw(st.sampled_from(["T", "Query"]))
        fragments.append(f"fragment F{i} on {on} {draw(selection_sets(1, i))}")
    return " ".join([operation, *fragments])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=documents())
def test_the_count_is_an_upper_bound_of_graphql_cores_comparisons(text: str) -> None:
    document = parse(text)
    with comparisons() as made:
        validate(SCHEMA, document)
    assert made[0] <= pairs(text), text
