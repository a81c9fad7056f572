"""Attacks on the plan-based pricing (the plan's modules, _compile.py, analyzer.py, the gate).

Each test is one attack a hostile client can run. A failing test is a finding: the
attack works (work for free, or a server hurt). A passing test is a regression guard:
the attack was tried and failed, and the assertion says what would show it working.

Time is never asserted: planning and walking work is counted (calls of the planner's
and the walker's per-selection step), memory is measured with ``tracemalloc``.
"""

from __future__ import annotations

import builtins
import gc
import json
import threading
import tracemalloc
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse, validate

from quotaql.config import load_config
from quotaql.cost_analysis import CostModel, _builder, _cache, _walk, analyze
from quotaql.cost_analysis import analyzer as analyzer_module
from quotaql.cost_analysis.analyzer import parse_document
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.errors import InvalidVariables
from quotaql.gate import Gate

if TYPE_CHECKING:
    from pathlib import Path

IBM = CostModel(model="ibm")


def _scope(peer: str = "203.0.113.77") -> dict[str, Any]:
    return {"type": "http", "client": (peer, 40000), "headers": []}


class _Counter:
    """Counts the calls of one method of a planner or walker class (patched for one test)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> None:
        self.calls = 0
        original = getattr(cls, name)

        def counting(this: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(this, *args, **kwargs)

        monkeypatch.setattr(cls, name, counting)


# -- resource use: planning -----------------------------------------------------------------


def _nested_interfaces(types: int) -> Any:
    implementations = "\n".join(
        f"type T{i} implements Node {{ id: ID child: Node }}" for i in range(types)
    )
    return build_schema(
        f"interface Node {{ id: ID child: Node }}\n{implementations}\ntype Query {{ node: Node }}"
    )


def _narrowing_chain(types: int, depth: int) -> str:
    """``child`` nested ``depth`` times on an interface, each level narrowed by one inline
    fragment per possible type, each fragment under its own response key (so that no two
    possible types collect the same keys)."""
    narrowing = " ".join(f"... on T{i} {{ a{i}: id }}" for i in range(types))
    return "{ node " + "{ child " * depth + "{ id }" + f" {narrowing} }}" * depth + " }"


def test_nested_abstract_selections_plan_in_time_linear_in_the_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # FINDING. Below an interface whose fragments narrow by type, every possible type
    # collects its own selection; a field written in the operation (not in a fragment)
    # skips the DAG memo, so each possible type plans the subtree below it again: the
    # planner does types ** depth work for a document of types x depth fields.
    # Measured: 3 types, depth 10 (~800 characters): 88,573 field plans, 1.8 s; 2 types,
    # depth 20 (1 KB): 63 s. The price is tiny (depth + 1), so no max_cost stops it.
    schema = _nested_interfaces(3)
    depth = 8
    query = _narrowing_chain(3, depth)
    document = parse(query)
    assert validate(schema, document) == []
    planned = _Counter(monkeypatch, _builder.Builder, "_field")
    report = analyze(schema, document)
    assert report.cost == depth + 1  # cheap: nothing refuses it
    written = depth * (1 + 3) + 2  # child + a0..a2 per level, node, the innermost id
    assert planned.calls <= 10 * written, (
        f"{planned.calls} field plans for a document of {written} fields"
    )


def test_the_gate_with_its_default_limits_admits_the_exponential_plan(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # FINDING (the same, end to end). The default limits (SAFE_LIMITS: depth 20, 100
    # aliases, 1,000 fields, 15,000 tokens) and the static pass let it through: 6 types
    # and depth 7 (967 characters, price 8) hold one worker 6 s in Gate.admit; depth 8,
    # 38 s. An attacker varies one alias per request, so no plan is ever reused.
    path = tmp_path / "quotaql.toml"
    path.write_text("", encoding="utf-8")
    gate = Gate(load_config(path))
    schema = _nested_interfaces(6)
    depth = 5
    parsed = gate.parse(schema, _narrowing_chain(6, depth))
    assert not isinstance(parsed, list), parsed  # parses, passes the screen, validates
    planned = _Counter(monkeypatch, _builder.Builder, "_field")
    op = gate.admit(schema, parsed, request=_scope())
    assert not op.refused
    assert op.cost == depth + 1
    written = depth * (1 + 6) + 2
    assert planned.calls <= 10 * written, (
        f"{planned.calls} field plans for a document of {written} fields"
    )


# -- resource use: the actual cost ------------------------------------------------------------


def test_the_actual_cost_walks_linear_data_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # FINDING. Each level is a fragment whose possible types each select `f` (the same
    # fragment below): the plan is a DAG, linear in the text, but an object without
    # __typename is walked once per possible type, and each of those walks walks the
    # object below once per possible type again: 2 ** depth walks of depth objects.
    # Measured: depth 24 (1.8 KB of query, 24 nested objects of data): 28 s in
    # CostReport.actual, i.e. in Gate.settle after the response is built. (Under the gate's
    # default limits the static pass's max_fields = 1,000, which counts fragments where
    # they are spread, caps this at ~1,000 walks; without max_fields, and for actual_cost
    # or CostReport.actual called directly, nothing does.)
    schema = build_schema(
        "interface Node { id: ID }\n"
        "type A implements Node { id: ID f: Node }\n"
        "type B implements Node { id: ID f: Node }\n"
        "type Query { node: Node }"
    )
    depth = 12
    fragments = [
        f"fragment X{i} on Node {{ ... on A {{ f {{ ...X{i + 1} }} }}"
        f" ... on B {{ f {{ ...X{i + 1} }} }} }}"
        for i in range(depth - 1)
    ]
    fragments.append(
        f"fragment X{depth - 1} on Node {{ ... on A {{ f {{ id }} }} ... on B {{ f {{ id }} }} }}"
    )
    document = parse("{ node { ...X0 } }\n" + "\n".join(fragments))
    assert validate(schema, document) == []
    report = analyze(schema, document)
    data: dict[str, Any] = {"id": "x"}
    for _ in range(depth):
        data = {"f": data}
    walked = _Counter(monkeypatch, _walk.Walker, "objects")
    assert report.actual({"node": data}) == depth + 1
    assert walked.calls <= 10 * depth, f"{walked.calls} walks for {depth} objects of data"


def test_the_actual_cost_of_a_plan_the_analyzer_accepted_does_not_overflow_the_stack() -> None:
    # FINDING (low: only with max_depth off or above ~200). The analyzer accepts 256
    # levels (MAX_NESTING); the walker recurses 4 frames per level below a narrowed
    # interface (selection -> _abstract -> selection -> _field), so a plan of 240 levels
    # that priced without trouble raises RecursionError in CostReport.actual, i.e. out of
    # Gate.settle (which catches nothing) after the operation ran. One fragment per level
    # keeps the document flat (the parser's nesting guard never sees it) and linear.
    schema = build_schema(
        "interface Node { id: ID child: Node }\n"
        "type T0 implements Node { id: ID child: Node }\n"
        "type T1 implements Node { id: ID child: Node }\n"
        "type Query { node: Node }"
    )
    depth = 240
    fragments = [
        f"fragment L{i} on Node {{ child {{ ...L{i + 1} }} ... on T0 {{ id }} }}"
        for i in range(depth)
    ]
    fragments.append(f"fragment L{depth} on Node {{ id }}")
    report = analyze(schema, parse("{ node { ...L0 } }\n" + "\n".join(fragments)))
    assert report.cost == depth + 1
    data: dict[str, Any] = {"id": "1"}
    for _ in range(depth):
        data = {"child": data}
    assert report.actual({"node": data}) == depth + 1


# -- resource use: memory ---------------------------------------------------------------------


def _retained(action: Any) -> int:
    """Bytes still allocated after ``action()`` returns (its garbage collected)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        action()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_cached_variable_values_do_not_hold_many_times_the_request_body() -> None:
    # FINDING. Every variable set that coerces is kept frozen in the document's validated
    # set (64 per document, 512 documents per compiled schema), and the values of the
    # variables a plan reads in its key (32 per document): each item of a list variable
    # becomes a (type, value) tuple, ~64 bytes for the 2 bytes "1," of JSON. Measured:
    # 64 requests of a 340 KB body hold 294 MB; the entries' number is bounded, not their
    # size, so 1 MB bodies (BodyLimit's default) to a few hundred distinct documents,
    # each paying the minimum charge, exhaust the server's memory.
    schema = build_schema("type Query { x(ids: [ID]): Int }")
    document = parse("query($ids: [ID]) { x(ids: $ids) }")
    items = 10_000
    body = json.dumps({"ids": [1] * items})
    requests = 64

    def flood() -> None:
        for i in range(requests):
            variables = json.loads(body)
            variables["ids"][0] = -i - 1  # a distinct set each time
            analyze(schema, document, variables)

    retained = _retained(flood)
    total = requests * len(body)  # 1.9 MB of JSON sent in all (41 MB kept, measured)
    assert retained <= total, f"{retained / 1e6:.1f} MB kept for {total / 1e6:.1f} MB of bodies"


def test_the_parse_cache_is_bounded_in_bytes_not_only_in_characters() -> None:
    # FINDING. parse_document keeps the last 512 documents of at most 20,000 characters,
    # whether or not they validate. A 20,000-character `{ a a a ... }` parses into ~5.6 MB
    # of nodes, locations and tokens: the bound is ~2.9 GB, and again as much in each
    # compiled schema's PlanCache (which holds documents the parse cache evicted, or that
    # a framework parsed itself). 512 requests of 20 KB, each refused by validation and
    # charged the minimum, reach it.
    sources = [f"{{ x{i}: a" + " a" * 9_990 + " }" for i in range(4)]
    assert all(len(source) <= 20_000 for source in sources)

    def fill() -> None:
        for source in sources:
            parse_document(source)

    try:
        retained = _retained(fill)
    finally:
        analyzer_module._parsed.clear()
    worst = retained / len(sources) * 512
    assert worst <= 512e6, f"the 512 cached documents may hold {worst / 1e9:.1f} GB"


# -- cache poisoning --------------------------------------------------------------------------


def test_two_threads_cannot_leave_a_plan_under_a_key_that_ignores_what_it_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # FINDING. plan_for grows `entry.reads` (the variables the plans read) by reading it,
    # taking the union with what one plan read, and storing it back, without a lock; a
    # plan is then stored under the key `_key(entry.reads, sent)` read again later. Two
    # threads interleaved as below (a switch after a builtin call, which is where CPython
    # switches threads) leave `entry.reads` without `$n`, and a plan that read `$n = 2`
    # stored under it: every later request with `$n = 100000` is priced 2.
    #   B: union computed from reads = ()          ... (switched out in `sorted`)
    #   C: reads := (n, s, t), its plan stored
    #   A: its plan read (n, s, t) <= reads: no update ... (switched out in `set`)
    #   B: reads := (m, s, t), plans := {}  (C's `n` lost), its plan stored
    #   A: stores its plan (which read n) under the key of (m, s, t)
    # The hooks below only pause a thread inside `sorted` / `set`: they change no value.
    schema = build_schema("type Query { users(first: Int): [User] }\ntype User { id: ID }")
    document = parse(
        "query($s: Boolean!, $t: Boolean!, $n: Int, $m: Int) {"
        " a: users(first: $n) @skip(if: $s) { id }"
        " b: users(first: $m) @skip(if: $t) { id } }"
    )
    threads: dict[str, threading.Thread] = {}
    b_paused, b_resume, a_paused, a_resume = (threading.Event() for _ in range(4))

    def paused_sorted(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is threads.get("B") and not b_paused.is_set():
            b_paused.set()
            assert b_resume.wait(10)
        return builtins.sorted(*args, **kwargs)

    def paused_set(*args: Any) -> Any:
        if (
            threading.current_thread() is threads.get("A")
            and args
            and isinstance(args[0], tuple)
            and args[0]
            and not a_paused.is_set()
        ):
            a_paused.set()
            assert a_resume.wait(10)
        return builtins.set(*args)

    monkeypatch.setattr(_cache, "sorted", paused_sorted, raising=False)
    monkeypatch.setattr(_cache, "set", paused_set, raising=False)
    costs: dict[str, float] = {}

    def price(name: str, variables: dict[str, Any]) -> None:
        costs[name] = analyze(schema, document, variables).cost

    threads["B"] = threading.Thread(target=price, args=("B", {"s": True, "t": False, "m": 1}))
    threads["B"].start()
    assert b_paused.wait(10)
    # C, then A, while B is paused in the middle of its update (a locked update makes them
    # wait for B: A may then never reach its own pause).
    threads["C"] = threading.Thread(target=price, args=("C", {"s": False, "t": True, "n": 1}))
    threads["C"].start()
    threads["C"].join(0.5)
    threads["A"] = threading.Thread(
        target=price, args=("A", {"s": False, "t": True, "n": 2, "m": 7})
    )
    threads["A"].start()
    a_paused.wait(0.5)
    b_resume.set()
    a_resume.set()
    for thread in threads.values():
        thread.join(10)
        assert not thread.is_alive()
    monkeypatch.undo()
    assert (costs["A"], costs["B"], costs["C"]) == (2.0, 1.0, 1.0)
    attack = analyze(schema, document, {"s": False, "t": True, "n": 100_000, "m": 7})
    assert attack.cost == 100_000


def test_many_threads_pricing_one_new_document_get_the_single_threaded_prices() -> None:
    # Guard: the caches under concurrent use (no exception, no wrong price), for variable
    # sets that read different variables. The interleaving above is rare; this one is
    # the ordinary case.
    schema = build_schema("type Query { users(first: Int): [User] }\ntype User { id: ID }")
    text = (
        "query($s: Boolean!, $n: Int, $m: Int) {"
        " a: users(first: $n) @skip(if: $s) { id } b: users(first: $m) { id } }"
    )
    document = parse(text)
    sets = [{"s": i % 2 == 0, "n": i, "m": 50 - i} for i in range(40)]
    expected = [analyze(schema, text + " ", v).cost for v in sets]  # another document
    failures: list[Any] = []
    barrier = threading.Barrier(8)

    def work(offset: int) -> None:
        barrier.wait()
        for round_ in range(5):
            for i in range(offset, len(sets), 8):
                got = analyze(schema, document, sets[i]).cost
                if got != expected[i]:
                    failures.append((i, round_, got, expected[i]))

    workers = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []


def test_a_variable_read_only_inside_a_skipped_subtree_is_read_once_the_subtree_runs() -> None:
    # Guard: the first plan read only $s (its subtree skipped); the same $n unskipped must
    # not reuse it.
    schema = build_schema("type Query { users(first: Int): [User] }\ntype User { id: ID }")
    document = parse("query($s: Boolean!, $n: Int) { users(first: $n) @skip(if: $s) { id } }")
    assert analyze(schema, document, {"s": True, "n": 5}).cost == 0
    assert analyze(schema, document, {"s": False, "n": 5}).cost == 5
    assert analyze(schema, document, {"s": True, "n": 1000}).cost == 0
    assert analyze(schema, document, {"s": False, "n": 1000}).cost == 1000
    # @include and a slicing argument on one field, both read from variables
    both = parse("query($a: Boolean!, $n: Int) { users(first: $n) @include(if: $a) { id } }")
    assert analyze(schema, both, {"a": False, "n": 9999}).cost == 0
    assert analyze(schema, both, {"a": True, "n": 1}).cost == 1
    assert analyze(schema, both, {"a": True, "n": 9999}).cost == 9999


def test_values_that_coerce_differently_are_not_one_key() -> None:
    # Guard: 1, 1.0, true and "1" are told apart; an invalid value is refused even when a
    # valid value of the same shape has a plan; absent and null are two values.
    schema = build_schema(
        COST_DIRECTIVES_SDL + "type Query { users(first: Int = 100): [User]"
        ' nodes(ids: [ID!]): [User] @listSize(slicingArguments: ["ids"]) }\n'
        "type User { id: ID }"
    )
    flag = parse("query($a: Boolean!) { users(first: 3) @include(if: $a) { id } }")
    assert analyze(schema, flag, {"a": True}).cost == 3
    for wrong in (1, "true", 1.0, None):
        with pytest.raises(InvalidVariables):
            analyze(schema, flag, {"a": wrong})
    size = parse("query($n: Int) { users(first: $n) { id } }")
    assert analyze(schema, size, {"n": None}).cost == 1000  # an explicit null: max_list_size
    assert analyze(schema, size, {}).cost == 100  # absent: the argument's default
    assert analyze(schema, size, {"n": 7}).cost == 7
    with pytest.raises(InvalidVariables):
        analyze(schema, size, {"n": "7"})
    with pytest.raises(InvalidVariables):
        analyze(schema, size, {"n": True})
    listed = parse("query($ids: [ID!]) { nodes(ids: $ids) { id } }")
    assert analyze(schema, listed, {"ids": "a"}).cost == 1  # one value: a list of one
    assert analyze(schema, listed, {"ids": ["a"] * 500}).cost == 500
    assert analyze(schema, listed, {"ids": "a"}).cost == 1


def test_a_variable_default_prices_as_the_executor_runs_it() -> None:
    # Guard: the operation's default stands for a variable not sent, under any cached plan.
    schema = build_schema("type Query { users(first: Int): [User] }\ntype User { id: ID }")
    document = parse(
        "query($n: Int = 800, $s: Boolean = false) { users(first: $n) @skip(if: $s) { id } }"
    )
    assert analyze(schema, document, {"s": True}).cost == 0
    assert analyze(schema, document, {}).cost == 800
    assert analyze(schema, document, {"n": 2}).cost == 2
    assert analyze(schema, document, {"s": False}).cost == 800


def test_one_document_under_several_operation_names_models_and_schemas() -> None:
    # Guard: the plan cache is per compiled schema and per operation name.
    sdl = "type Query { users(first: Int): [User] }\ntype User { id: ID friends: [User] }"
    schema, other = (
        build_schema(sdl),
        build_schema(
            sdl.replace("friends: [User]", "friends: [User] @cost(weight: 50)")
            + COST_DIRECTIVES_SDL
        ),
    )
    document = parse(
        "query Cheap { users(first: 1) { id } }\n"
        "query Dear { users(first: 100) { friends { id } } }"
    )
    for _ in range(2):
        assert analyze(schema, document, operation_name="Cheap").cost == 1
        assert analyze(schema, document, operation_name="Dear").cost == 100 + 100 * 10
        assert analyze(schema, document, operation_name="Dear", model=IBM).cost > 1000
        assert analyze(other, document, operation_name="Dear").cost == 100 + 100 * 500
    single = parse("query Only { users(first: 40) { id } }")
    assert analyze(schema, single).cost == analyze(schema, single, operation_name="Only").cost == 40


# -- under-counting -------------------------------------------------------------------------


def test_input_field_defaults_size_a_nested_slicing_argument() -> None:
    # FINDING. A slicing path into an input object (`input.pagination.first`) reads only
    # what the request wrote: an input field's default is never read, though graphql-core
    # coerces it in and the resolver slices by it. `search(input: {})` runs 1,000 items
    # (the resolver sees {'pagination': {'first': 1000}}) and is priced at the default
    # list size, 10; the same through a variable `{"i": {}}`.
    schema = build_schema(
        COST_DIRECTIVES_SDL
        + """
input Page { first: Int = 1000 }
input SearchInput { pagination: Page = {} q: String }
type A { id: ID }
type Query {
  search(input: SearchInput!): [A]
    @listSize(slicingArguments: ["input.pagination.first"], requireOneSlicingArgument: false)
}
"""
    )
    written = "{ search(input: {pagination: {first: 1000}}) { id } }"
    assert analyze(schema, written).cost >= 1000  # the price of 1,000 items
    for query, variables in (
        ("{ search(input: {}) { id } }", None),
        ("{ search(input: {pagination: {}}) { id } }", None),
        ("query($i: SearchInput!) { search(input: $i) { id } }", {"i": {}}),
    ):
        assert analyze(schema, query, variables).cost >= 1000, (query, variables)


_INTERFACE_SDL = (
    COST_DIRECTIVES_SDL
    + """
interface I { f: Int items: [X] }
type X { id: ID }
type A implements I { f: Int @cost(weight: "100") items: [X] @listSize(assumedSize: 1000) }
type B implements I { f: Int items: [X] }
type Query { i: I a: A }
"""
)


def test_a_field_read_through_an_interface_costs_what_its_implementations_run() -> None:
    # FINDING. docs/cost-model.md: "On an interface or a union, the selections cost what
    # the most expensive possible type makes of them". A field selected on the interface
    # (outside `... on A`) is priced by the interface's own field, never by A's: `{ i { f } }`
    # runs A.f (@cost 100) when `i` is an A and is priced 1 (i itself); `{ i { items { id
    # } } }` runs A.items (assumedSize 1000) and is priced 11. A client that knows the
    # heavy implementation reaches it through the interface for a hundredth of its price.
    schema = build_schema(_INTERFACE_SDL)
    assert analyze(schema, "{ a { f } }").cost == 101
    assert analyze(schema, "{ i { ... on A { f } } }").cost == 101
    assert analyze(schema, "{ i { f } }").cost >= 101
    assert analyze(schema, "{ a { items { id } } }").cost == 1001
    assert analyze(schema, "{ i { items { id } } }").cost >= 1001


def test_the_order_of_merged_selections_does_not_change_the_price() -> None:
    # FINDING (the same root cause, without any appeal to the interface rule). A merged
    # group is priced on its first entry's type: `{ i { ... on A { f } f } }` is 101,
    # `{ i { f ... on A { f } } }`, which the executor runs identically, 1.
    schema = build_schema(_INTERFACE_SDL)
    for first, second in (
        ("{ i { ... on A { f } f } }", "{ i { f ... on A { f } } }"),
        ("{ i { ... on A { items { id } } items { id } } }",
         "{ i { items { id } ... on A { items { id } } } }"),
    ):  # fmt: skip
        assert analyze(schema, first).cost == analyze(schema, second).cost, (first, second)


def test_a_negative_type_weight_does_not_cancel_the_type_cost_of_other_fields() -> None:
    # FINDING (model = "ibm"). The type cost is summed without the own-part clamp the field
    # cost has: 1,000 objects of a type weighing -1, which a client asks for with
    # `first: 1000`, cancel the type cost of 1,000 other objects. `{ items(first: 1000) { id
    # } }` is priced 1001; with `cheap(first: 1000) { id }` beside it, 2. (apollo clamps each
    # field's own part at 0 and prices both at 1000.)
    schema = build_schema(
        COST_DIRECTIVES_SDL
        + """
type Cheap @cost(weight: "-1") { id: ID }
type Item { id: ID }
type Query {
  cheap(first: Int): [Cheap] @listSize(slicingArguments: ["first"])
  items(first: Int): [Item] @listSize(slicingArguments: ["first"])
}
"""
    )
    alone = analyze(schema, "{ items(first: 1000) { id } }", model=IBM).cost
    assert alone == 1001
    both = analyze(schema, "{ items(first: 1000) { id } cheap(first: 1000) { id } }", model=IBM)
    assert both.cost >= alone
    apollo = analyze(schema, "{ items(first: 1000) { id } cheap(first: 1000) { id } }")
    assert apollo.cost == 1000  # the guard that holds


def test_a_free_leaf_with_a_costed_directive_or_a_free_name_is_still_priced() -> None:
    # Guard: fields left out of the plan as "free" never hide a cost: a costed directive
    # on them, an alias named __typename on a costly field, a namesake after a free leaf.
    schema = build_schema(
        COST_DIRECTIVES_SDL
        + """
directive @audit(level: Int @cost(weight: "40")) on FIELD
type Query { hello: String products(first: Int): [P] @listSize(slicingArguments: ["first"]) }
type P { name: String }
"""
    )
    assert analyze(schema, "{ hello @audit(level: 1) }").cost == 40
    assert analyze(schema, "{ __typename: products(first: 300) { name } }").cost == 300
    assert (
        analyze(schema, "{ products(first: 300) { name @audit(level: 1) } }").cost == 300 + 300 * 40
    )
    query = "query($n: Int) { products(first: $n) { name } }"
    assert analyze(schema, query, {"n": 300}).cost == 300


# -- the refund ---------------------------------------------------------------------------


def test_an_error_that_erases_a_list_refunds_nothing_of_what_ran(tmp_path: Path) -> None:
    # Guard: a client triggers an error on purpose in a non-null field of the last item,
    # which nulls the whole (non-null) list up to its nullable parent: the list ran, and is
    # charged at its estimate, not refunded as if it returned nothing.
    schema = build_schema(
        "type Query { shop: Shop }\n"
        "type Shop { products(first: Int): [P!]! }\n"
        "type P { name: String! }"
    )
    path = tmp_path / "quotaql.toml"
    path.write_text("[limits]\nexpose_cost = true\n", encoding="utf-8")
    gate = Gate(load_config(path))
    op = gate.admit(schema, parse("{ shop { products(first: 50) { name } } }"), request=_scope())
    assert not op.refused
    charged = op.cost
    errors = [{"message": "boom", "path": ["shop", "products", 49, "name"]}]
    gate.settle(op, {"shop": None}, errors)  # type: ignore[arg-type]
    assert op.actual == charged
    assert op.refunded == 0
