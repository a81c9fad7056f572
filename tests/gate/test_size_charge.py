"""A document's size is paid for: graphql-core parses ~1.5 µs a character in pure Python,
so a 40 KB document is 50-75 ms of a worker before anything prices it. A request pays at
least its text's length over ``[cost] chars_per_point`` (1,000 by default), refused or
run, and a refund never goes below that (the HTTP attack is in tests/http/test_size_charge.py).
"""

# ruff: noqa: F811 (test_gate's fixtures, imported by name)
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from graphql import parse

from quotaql.config import load_config
from quotaql.errors import ConfigError
from quotaql.gate import Gate
from tests.gate.test_gate import (  # noqa: F401 (its fixtures, by name)
    SCHEMA,
    config_path,
    scope,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

TOML = """
[tiers.free]
capacity = 1000
refill_per_second = 0.001
[tenants.t]
tier = "free"
"""

# 900 one-field fragments spread side by side: refused TOO_MANY_FIELD_PAIRS by the static
# pass, after graphql-core parsed all of its 42 KB.
FRAGMENTS = (
    "{ " + " ".join(f"...Fr{i:03d}" for i in range(900)) + " } "
    + " ".join(f"fragment Fr{i:03d} on Query {{ field{i % 30:02d} }}" for i in range(900))
)  # fmt: skip
# A cheap operation in a 40 KB document (a comment is lexed character by character too).
PADDING = "# " + "x" * 40_000 + "\n"
CHEAP = PADDING + "{ hello }"
PRICED = PADDING + "{ products(first: 50) { id } }"


def _gate(config_path: Callable[[str], Path], cost: str = "") -> Gate:
    return Gate(load_config(config_path(f"[cost]\n{cost}\n{TOML}")))


def _remaining(gate: Gate) -> float:
    op = gate.admit(SCHEMA, parse("{ hello }"), request=scope(key="t"))
    assert op.decision is not None
    return op.decision.remaining + op.charge  # before this probe's own charge


def test_a_large_document_refused_by_the_static_pass_pays_its_size(
    config_path: Callable[[str], Path],
) -> None:
    gate = _gate(config_path)
    assert 40_000 < len(FRAGMENTS) < 45_000
    op = gate.begin(request=scope(key="t"))
    document = gate.parse(SCHEMA, FRAGMENTS, op=op)
    op = gate.admit(SCHEMA, document, op=op)
    assert op.code == "TOO_MANY_FIELD_PAIRS"
    assert op.chars == len(FRAGMENTS)
    assert op.charge == pytest.approx(len(FRAGMENTS) / 1000)  # 42.8 points; was 1
    assert op.charge >= 20
    gate.finish(op)
    assert _remaining(gate) == pytest.approx(1000 - len(FRAGMENTS) / 1000, abs=0.01)


def test_a_large_document_that_does_not_parse_pays_its_size(
    config_path: Callable[[str], Path],
) -> None:
    gate = _gate(config_path)
    op = gate.begin(request=scope(key="t"))
    query = PADDING + "{ hello"
    document = gate.parse(SCHEMA, query, op=op)
    op = gate.admit(SCHEMA, document, op=op)
    assert op.code == "GRAPHQL_PARSE_FAILED"
    assert op.charge == pytest.approx(len(query) / 1000)


def test_an_accepted_cheap_large_document_pays_its_size_and_keeps_it(
    config_path: Callable[[str], Path],
) -> None:
    gate = _gate(config_path)
    op = gate.admit(SCHEMA, parse(CHEAP), request=scope(key="t"))
    assert (op.refused, op.cost) == (False, 0)
    assert op.charge == pytest.approx(len(CHEAP) / 1000)  # 40 points for a 0-point query
    gate.settle(op, {"hello": "hi"})
    assert op.refunded == 0
    gate.finish(op)
    # Priced above its size: charged the price, and a refund stops at its size.
    priced = gate.admit(SCHEMA, parse(PRICED), request=scope(key="t"))
    assert (priced.cost, priced.charge) == (50, 50)
    gate.settle(priced, {"products": []})
    assert priced.refunded == pytest.approx(50 - len(PRICED) / 1000)
    gate.finish(priced)
    paid = len(CHEAP) / 1000 + len(PRICED) / 1000
    assert _remaining(gate) == pytest.approx(1000 - paid, abs=0.01)


def test_a_small_document_pays_what_it_paid(config_path: Callable[[str], Path]) -> None:
    gate = _gate(config_path)
    query = "{ products(first: 5) { id name } hello }"
    op = gate.admit(SCHEMA, parse(query), request=scope(key="t"))
    assert (op.cost, op.charge) == (5, 5)
    gate.settle(op, {"products": [], "hello": None})
    assert op.refunded == 4  # down to min_charge, as before
    free = gate.admit(SCHEMA, parse("{ hello }"), request=scope(key="t"))
    assert free.charge == 1
    refused = gate.admit(SCHEMA, gate.parse(SCHEMA, "{ nope }"), request=scope(key="t"))
    assert (refused.refused, refused.charge) == (True, 1)


@pytest.mark.parametrize("value", ["false", "0"])
def test_off_restores_the_minimum_charge(config_path: Callable[[str], Path], value: str) -> None:
    gate = _gate(config_path, f"chars_per_point = {value}")
    assert gate.config.cost.chars_per_point is None
    op = gate.begin(request=scope(key="t"))
    op = gate.admit(SCHEMA, gate.parse(SCHEMA, FRAGMENTS, op=op), op=op)
    assert (op.code, op.charge) == ("TOO_MANY_FIELD_PAIRS", 1)
    cheap = gate.admit(SCHEMA, parse(CHEAP), request=scope(key="t"))
    assert cheap.charge == 1


def test_a_smaller_chars_per_point_charges_more(config_path: Callable[[str], Path]) -> None:
    gate = _gate(config_path, "chars_per_point = 500")
    op = gate.admit(SCHEMA, parse(CHEAP), request=scope(key="t"))
    assert op.charge == pytest.approx(len(CHEAP) / 500)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "got -1"),
        ("1.5", "got a float (1.5)"),
        ('"big"', 'got a string ("big")'),
        ("true", "got a boolean (true)"),
    ],
)
def test_chars_per_point_is_checked_with_file_line_and_key(
    config_path: Callable[[str], Path], value: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        _gate(config_path, f"chars_per_point = {value}")
    expected = "quotaql.toml:2: cost.chars_per_point: expected an integer >= 0, or false for"
    assert f"{expected} no limit, {message}" in str(raised.value)


def test_a_large_subscription_pays_its_size_once_then_its_price_per_event(
    config_path: Callable[[str], Path],
) -> None:
    gate = _gate(config_path)
    query = "# " + "x" * 80_000 + "\nsubscription { ticks }"  # 40 points of size, priced 30
    op = gate.admit(SCHEMA, parse(query), request=scope(key="t"))
    assert (op.cost, op.charge) == (30, pytest.approx(len(query) / 1000))
    assert [gate.event(op) for _ in range(3)] == [None, None, None]  # the first was paid
    assert op.charge == 30
    assert op.decision is not None
    assert op.decision.remaining == pytest.approx(1000 - len(query) / 1000 - 2 * 30, abs=0.01)
    gate.finish(op)


def test_a_document_past_max_length_is_never_parsed_and_pays_the_minimum(
    config_path: Callable[[str], Path],
) -> None:
    gate = _gate(config_path)
    op = gate.begin(request=scope(key="t"))
    query = "{ " + "hello " * 20_000 + "}"  # 120 KB: the parser refuses it unread
    op = gate.admit(SCHEMA, gate.parse(SCHEMA, query, op=op), op=op)
    assert (op.code, op.charge) == ("QUERY_TOO_LARGE", 1)


def test_a_size_past_the_buckets_capacity_empties_it_rather_than_paying_nothing(
    config_path: Callable[[str], Path],
) -> None:
    gate = Gate(load_config(config_path(TOML.replace("capacity = 1000", "capacity = 10"))))
    op = gate.begin(request=scope(key="t"))
    op = gate.admit(SCHEMA, gate.parse(SCHEMA, FRAGMENTS, op=op), op=op)
    assert (op.code, op.charge) == ("TOO_MANY_FIELD_PAIRS", 10)  # 20 points of size: all it holds
    cheap = gate.admit(SCHEMA, parse(CHEAP), request=scope(key="t2"))
    assert (cheap.refused, cheap.charge) == (False, 10)  # runs: never refused for its size alone
