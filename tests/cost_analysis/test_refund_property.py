"""Property, two-sided: whatever resolver raises and however long the lists it returns, the
gate charges at least the cost of what ran, and never more than the estimate when what ran
stayed within it.

Random queries over a small schema (lists sized by ``first``, nested objects, non-null
fields, an interface whose implementations weigh 1 and 3), executed for real by
graphql-core with one resolver chosen to raise. Every resolver records what it did, with
the model's weights and the convention ``actual_cost`` prices returned data by:

    cost of what ran = Σ over the resolvers invoked of (own × n)

where ``own`` is the field's weight (that of its named type, or its ``@cost``) and ``n``
the number of items the resolver returned for a list field, else 1 (also when it raised:
a field whose resolver ran costs its own weight). No argument has a weight here.

``actual_cost`` alone (lists never longer than assumed): at least that, and at most the
estimate (but when ``first: 0`` meets a null list, which counts as one item).

Through the gate (lists shorter *and longer* than assumed, the estimate debited, then the
refund or the overage at settle): the total charged, read from the storage, is at least
the cost of what ran, and at most the estimate (or ``min_charge``) when no list ran longer
than assumed. One limit, documented (docs/cost-model.md): a list longer than assumed that
an error then erased (its non-null item raised, nulling the list) leaves no trace in the
data, and is charged its estimate; the lower bound then leaves out what ran under it.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

import pytest
from graphql import (
    GraphQLList,
    GraphQLNonNull,
    execute_sync,
    get_named_type,
    is_leaf_type,
    parse,
    validate,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quotaql.config import Config, load_config
from quotaql.cost_analysis import actual_cost, analyze
from quotaql.gate import Gate
from quotaql.storage.memory import MemoryStorage

from .conftest import build

SDL = """
type Query {
  items(first: Int = 2): [Item]
  strict(first: Int = 2): [Item!]!
  thing: Thing
  must: Thing!
  leaf: String
  hard: String!
}
interface Item { id: ID! label: String child: Thing }
type Light implements Item { id: ID! label: String child: Thing }
type Heavy implements Item @cost(weight: "3") {
  id: ID!
  label: String
  child: Thing
  rows(first: Int = 2): [Thing!]
}
type Thing {
  v: Int
  w: Int! @cost(weight: "1")
  next: Thing
  must: Thing!
  list(first: Int = 2): [Thing]
  items(first: Int = 2): [Item]
}
"""
SCHEMA = build(SDL)
# The weight of each field, written out: Thing and Light weigh 1, Heavy 3, so Item 3;
# scalars 0 but Thing.w (@cost 1).
TYPE_WEIGHTS = {"Thing": 1.0, "Light": 1.0, "Heavy": 3.0, "Item": 3.0}
OWN = {"Thing.w": 1.0}
DEFAULT_SIZE = 2
COORDINATES = sorted(
    f"{name}.{field}"
    for name in ("Query", "Light", "Heavy", "Thing")
    for field in SCHEMA.type_map[name].fields
)
MAX_ESTIMATE = 1_500


def own(coordinate: str, field_type: Any) -> float:
    return OWN.get(coordinate, TYPE_WEIGHTS.get(get_named_type(field_type).name, 0.0))


# -- queries ------------------------------------------------------------------------------


class Names:
    """Unique aliases, so that no two fields merge (and none conflict)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return f"a{self.count}"


def field_text(draw: Any, names: Names, parent: str, name: str, depth: int) -> str:
    field_type = SCHEMA.type_map[parent].fields[name].type
    text = f"{names()}: {name}"
    if "first" in SCHEMA.type_map[parent].fields[name].args:
        first = draw(st.one_of(st.none(), st.integers(0, 3)), label="first")
        if first is not None:
            text += f"(first: {first})"
    named = get_named_type(field_type)
    if not is_leaf_type(named):
        text += " " + draw(selection_set(named.name, depth + 1, names))
    return text


@st.composite
def selection_set(draw: Any, type_name: str, depth: int, names: Names) -> str:
    fields = list(SCHEMA.type_map[type_name].fields)
    if depth >= 3:  # leaves only below this
        fields = [
            name
            for name in fields
            if is_leaf_type(get_named_type(SCHEMA.type_map[type_name].fields[name].type))
        ]
    chosen = draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3), label="fields")
    parts = [field_text(draw, names, type_name, name, depth) for name in chosen]
    if type_name == "Item":
        # How the items tell their type: not at all, a real __typename (under an alias
        # or not), or the attack: another field aliased as __typename.
        mode = draw(st.sampled_from(["none", "real", "aliased", "attack"]), label="typename")
        parts.append(
            {
                "none": "",
                "real": "__typename",
                "aliased": f"{names()}: __typename",
                "attack": "__typename: label",
            }[mode]
        )
        concretes = draw(
            st.lists(st.sampled_from(["Light", "Heavy"]), max_size=2), label="fragments"
        )
        parts.extend(
            f"... on {name} " + draw(selection_set(name, depth, names)) for name in concretes
        )
    return "{ " + " ".join(part for part in parts if part) + " }"


@st.composite
def queries(draw: Any) -> str:
    return draw(selection_set("Query", 0, Names()))


# -- execution ----------------------------------------------------------------------------


class Boom(Exception):
    pass


class Execution:
    """Resolvers that make data up (lists no longer than assumed, or up to ``longer`` items
    longer), record what they did, and raise at the chosen coordinate: at its ``nth``
    call, or at every call."""

    def __init__(self, seed: int, coordinate: str, nth: int | None, longer: int = 0) -> None:
        self.rng = random.Random(seed)
        self.coordinate = coordinate
        self.nth = nth
        self.longer = longer
        self.calls: Counter[str] = Counter()
        self.ran = 0.0
        self.raised = 0
        # Each resolver call: its response path and the cost of what it ran.
        self.work: list[tuple[tuple[str | int, ...], float]] = []
        # The paths of the lists returned longer than assumed.
        self.long_lists: list[tuple[str | int, ...]] = []

    def _ran(self, info: Any, cost: float) -> None:
        self.ran += cost
        self.work.append((tuple(info.path.as_list()), cost))

    def resolve(self, _source: Any, info: Any, **args: Any) -> Any:
        coordinate = f"{info.parent_type.name}.{info.field_name}"
        field_type = info.parent_type.fields[info.field_name].type
        weight = own(coordinate, field_type)
        call = self.calls[coordinate]
        self.calls[coordinate] += 1
        if coordinate == self.coordinate and (self.nth is None or self.nth == call):
            self._ran(info, weight)  # the resolver ran, and failed
            self.raised += 1
            raise Boom(coordinate)
        nullable = not isinstance(field_type, GraphQLNonNull)
        unwrapped = field_type.of_type if not nullable else field_type
        if nullable and self.rng.random() < 0.1:
            self._ran(info, weight)
            return None
        if isinstance(unwrapped, GraphQLList):
            first = args.get("first")
            size = DEFAULT_SIZE if first is None else first
            count = self.rng.randint(0, size + self.longer)
            items = [self.value(get_named_type(field_type)) for _ in range(count)]
            if count > size:
                self.long_lists.append(tuple(info.path.as_list()))
            self._ran(info, weight * len(items))
            return items
        self._ran(info, weight)
        return self.value(get_named_type(field_type))

    def erased_long_lists(self, data: Any) -> list[tuple[str | int, ...]]:
        """The lists returned longer than assumed that are not in ``data`` (an error
        nulled them, or a parent of theirs)."""
        return [path for path in self.long_lists if not isinstance(_at(data, path), list)]

    def ran_outside(self, paths: list[tuple[str | int, ...]]) -> float:
        """The cost of what ran, but under ``paths``."""
        return sum(
            cost
            for where, cost in self.work
            if not any(where[: len(path)] == path for path in paths)
        )

    def value(self, named: Any) -> Any:
        if named.name == "Item":
            return {"kind": self.rng.choice(["Light", "Heavy"])}
        if is_leaf_type(named):
            # Labels that name types, for the __typename attack.
            return {"ID": "x", "String": self.rng.choice(["Light", "Heavy", "x"]), "Int": 1}[
                named.name
            ]
        return {}

    def run(self, text: str) -> Any:
        return execute_sync(
            SCHEMA,
            parse(text),
            field_resolver=self.resolve,
            type_resolver=lambda value, *_: value["kind"],
        )


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    text=queries(),
    seed=st.integers(0, 2**32 - 1),
    coordinate=st.sampled_from(COORDINATES),
    nth=st.one_of(st.none(), st.integers(0, 3)),
)
def test_the_charge_is_at_least_the_cost_of_what_ran(text, seed, coordinate, nth):
    assert validate(SCHEMA, parse(text)) == [], text
    estimate = analyze(SCHEMA, text).cost
    assume(estimate <= MAX_ESTIMATE)
    execution = Execution(seed, coordinate, nth)
    result = execution.run(text)
    charged = actual_cost(SCHEMA, text, result.data, errors=result.errors)
    assert charged >= execution.ran, (text, result.data, result.errors)
    if not re.search(r"first: 0\b", text):
        assert charged <= estimate, (text, result.data, result.errors)


def _at(data: Any, path: tuple[str | int, ...]) -> Any:
    """The value at ``path`` in ``data`` (None when it is not there)."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(data, list) or part >= len(data):
                return None
        elif not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


# -- through the gate: the estimate debited, then the refund or the overage ----------------

CAPACITY = 10_000_000.0  # never empty, so that what is left is exact: charged = CAPACITY - left
GATE_TOML = """
[limits]
deny_cache_size = 0
[tiers.free]
capacity = 10000000
refill_per_second = 1
"""
REQUEST = {"type": "http", "client": ("203.0.113.9", 5123), "headers": []}


@pytest.fixture(scope="module")
def gate_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    path = tmp_path_factory.mktemp("overage") / "quotaql.toml"
    path.write_text(GATE_TOML, encoding="utf-8")
    return load_config(path)


def charged_through_the_gate(
    config: Config, text: str, execution: Execution
) -> tuple[float, Any, float]:
    """Admit ``text`` in a gate on a frozen clock, run it with ``execution``, settle it:
    what the subject was charged in all, the result, and what the gate measured."""
    gate = Gate(config, storage=MemoryStorage(clock=lambda: 1_000.0))
    op = gate.admit(SCHEMA, parse(text), request=REQUEST)
    assert op.runs, op.errors  # the static limits let every generated document through
    result = execution.run(text)
    gate.settle(op, result.data, result.errors)
    gate.finish(op)
    quota = op.quotas[0]
    left = gate.limiter.peek(op.subject.key, [quota]).remaining
    assert op.actual is not None
    return CAPACITY - left, result, op.actual


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    text=queries(),
    seed=st.integers(0, 2**32 - 1),
    coordinate=st.sampled_from([*COORDINATES, "none"]),
    nth=st.one_of(st.none(), st.integers(0, 3)),
    longer=st.sampled_from([0, 0, 1, 3, 8]),
)
def test_the_gate_charges_what_ran_at_least_and_within_the_estimate_at_most(
    gate_config, text, seed, coordinate, nth, longer
):
    estimate = analyze(SCHEMA, text).cost
    assume(estimate <= MAX_ESTIMATE)
    execution = Execution(seed, coordinate, nth, longer)
    charged, result, actual = charged_through_the_gate(gate_config, text, execution)
    minimum = gate_config.limits.min_charge
    # Exact to the storage's resolution (a bucket keeps microseconds of refill).
    assert charged == pytest.approx(max(actual, minimum), abs=1e-3)
    erased = execution.erased_long_lists(result.data)
    assert charged >= execution.ran_outside(erased) - 1e-3, (text, result.data, result.errors)
    if not erased:
        assert charged >= execution.ran - 1e-3, (text, result.data, result.errors)
    if not execution.long_lists and not re.search(r"first: 0\b", text):
        assert charged <= max(estimate, minimum) + 1e-3, (text, result.data, result.errors)


def test_a_list_longer_than_assumed_pays_every_item_through_the_gate(gate_config):
    # The attack in small: 3 items asked for, 40 returned, nothing raised.
    text = "{ a1: items(first: 3) { a2: id } }"
    execution = Execution(0, "none", None, longer=37)
    execution.rng = random.Random(0)
    execution.rng.randint = lambda low, high: high  # type: ignore[method-assign]
    charged, result, actual = charged_through_the_gate(gate_config, text, execution)
    assert len(result.data["a1"]) == 40
    assert analyze(SCHEMA, text).cost == 9  # 3 items, Item weighs 3
    assert actual == execution.ran == 120
    assert charged == pytest.approx(120, abs=1e-3)  # 9 debited, 111 charged after


def test_a_long_list_an_error_erased_is_charged_its_estimate(gate_config):
    # The documented limit: `strict` is [Item!]!, so an item's failed non-null `id` nulls
    # the list and `data` with it; the 40 items left no trace, the estimate is charged.
    text = "{ a1: strict(first: 3) { a2: id } }"
    execution = Execution(0, "Light.id", 0, longer=37)
    execution.rng.randint = lambda low, high: high  # type: ignore[method-assign]
    execution.value = lambda named: {"kind": "Light"} if named.name == "Item" else "x"  # type: ignore[method-assign]
    charged, result, _ = charged_through_the_gate(gate_config, text, execution)
    assert result.data is None
    assert execution.raised == 1
    assert execution.erased_long_lists(result.data) == [("a1",)]
    assert charged == pytest.approx(analyze(SCHEMA, text).cost, abs=1e-3)
    assert charged < execution.ran


def test_the_property_sees_errors_and_their_propagation():
    # The generator reaches what the property is about: a raise that nulls the data.
    text = "{ a1: items(first: 3) { a2: id a3: child { a4: must { a5: v } } } a6: hard }"
    execution = Execution(0, "Query.hard", None)
    result = execution.run(text)
    assert result.data is None
    assert execution.raised == 1
    assert execution.ran > 0
    charged = actual_cost(SCHEMA, text, result.data, errors=result.errors)
    assert charged == analyze(SCHEMA, text).cost >= execution.ran
    # Under the __typename attack, an error in a Heavy item's child nulls the child.
    text = (
        "{ a1: items(first: 3) { __typename: label"
        " ... on Heavy { a2: rows(first: 3) { a3: w } a4: child { a5: must { a6: v } } } } }"
    )
    erased = 0
    for seed in range(50):
        execution = Execution(seed, "Thing.must", None)
        result = execution.run(text)
        charged = actual_cost(SCHEMA, text, result.data, errors=result.errors)
        assert execution.ran <= charged <= analyze(SCHEMA, text).cost
        erased += bool(result.errors)
        if result.errors:
            assert actual_cost(SCHEMA, text, result.data) < charged  # the errors count
    assert erased > 10
