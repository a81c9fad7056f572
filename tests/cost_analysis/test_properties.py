"""Property tests: random operations over the shared schemas, priced several equivalent ways.

Operations are generated as small trees (fields with aliases and slicing arguments,
inline fragments, nesting up to four levels), rendered to GraphQL text, and rewritten
(a selection set moved into a named fragment, wrapped in an inline fragment, a list size
raised) to check what the rewrite must or must not change.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pytest
from graphql import (
    FieldNode,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInt,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    InlineFragmentNode,
    get_named_type,
    is_abstract_type,
    is_leaf_type,
    is_required_argument,
    parse,
    parse_value,
    print_ast,
    value_from_ast_untyped,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaql.cost_analysis import CostLimits, CostModel, CostReport, analyze
from quotaql.cost_analysis.directives import read_cost, read_list_size
from quotaql.errors import QueryTooComplex, QueryTooDeep, TooManyAliases, TooManyRootFields

from .conftest import SHOP_SDL, WORKED_SDL, build

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

SCHEMAS: dict[str, GraphQLSchema] = {"worked": build(WORKED_SDL), "shop": build(SHOP_SDL)}
CONVENTION = ("first", "last", "limit")
DEFAULT_LIST_SIZE = 10
MAX_LIST_SIZE = 1000  # CostModel().max_list_size: a null slice
MAX_DEPTH = 4
OPERATION_WEIGHTS = {"query": 0.0, "mutation": 10.0}

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- the operation tree ------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    """A slicing argument's value: an Int, or a list of ``value`` IDs (sized by length);
    ``null`` renders an explicit ``null`` (which sizes nothing)."""

    value: int
    as_list: bool = False
    null: bool = False


@dataclass(frozen=True)
class Field:
    name: str
    alias: str | None = None
    args: tuple[tuple[str, str | Size], ...] = ()
    sub: SelSet | None = None


@dataclass(frozen=True)
class Inline:
    on: str | None
    sub: SelSet


@dataclass(frozen=True)
class Spread:
    name: str
    body: SelSet


Item = Field | Inline | Spread


@dataclass(frozen=True)
class SelSet:
    type_name: str
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Operation:
    schema_key: str
    abstract: bool
    kind: str
    body: SelSet

    @property
    def schema(self) -> GraphQLSchema:
        return SCHEMAS[self.schema_key]

    @property
    def text(self) -> str:
        return render(self)


def _render_value(value: str | Size) -> str:
    if isinstance(value, str):
        return value
    if value.null:
        return "null"
    if value.as_list:
        return "[" + ", ".join(f'"{i}"' for i in range(value.value)) + "]"
    return str(value.value)


def _render_set(selset: SelSet, fragments: dict[str, SelSet]) -> str:
    parts = []
    for item in selset.items:
        if isinstance(item, Field):
            text = (f"{item.alias}: " if item.alias else "") + item.name
            if item.args:
                text += "(" + ", ".join(f"{n}: {_render_value(v)}" for n, v in item.args) + ")"
            if item.sub is not None:
                text += " " + _render_set(item.sub, fragments)
        elif isinstance(item, Inline):
            on = f" on {item.on}" if item.on else ""
            text = f"...{on} {_render_set(item.sub, fragments)}"
        else:
            fragments.setdefault(item.name, item.body)
            text = f"...{item.name}"
        parts.append(text)
    return "{ " + " ".join(parts) + " }"


def render(operation: Operation) -> str:
    fragments: dict[str, SelSet] = {}
    lines = [f"{operation.kind} {_render_set(operation.body, fragments)}"]
    done: set[str] = set()
    while len(done) < len(fragments):
        name = next(name for name in fragments if name not in done)
        done.add(name)
        body = fragments[name]
        lines.append(f"fragment {name} on {body.type_name} {_render_set(body, fragments)}")
    return "\n".join(lines)


def map_selsets(selset: SelSet, fn: Callable[[int, SelSet], SelSet]) -> SelSet:
    """Rebuild ``selset`` bottom-up; ``fn`` gets each selection set's pre-order index."""
    counter = [0]

    def visit(node: SelSet) -> SelSet:
        index = counter[0]
        counter[0] += 1
        items: list[Item] = []
        for item in node.items:
            if isinstance(item, Inline) or (isinstance(item, Field) and item.sub is not None):
                items.append(replace(item, sub=visit(item.sub)))
            else:
                items.append(item)
        return fn(index, SelSet(node.type_name, tuple(items)))

    return visit(selset)


def selsets(selset: SelSet) -> list[SelSet]:
    """Every selection set of the tree, in the pre-order of :func:`map_selsets`."""
    found: list[SelSet] = []

    def visit(node: SelSet) -> None:
        found.append(node)
        for item in node.items:
            if isinstance(item, Inline) or (isinstance(item, Field) and item.sub is not None):
                visit(item.sub)

    visit(selset)
    return found


def map_sizes(selset: SelSet, fn: Callable[[int, Size], Size]) -> SelSet:
    """Rebuild ``selset`` with each :class:`Size` replaced by ``fn(index, size)``."""
    counter = [0]

    def visit(node: SelSet) -> SelSet:
        items: list[Item] = []
        for item in node.items:
            if isinstance(item, Field):
                args = []
                for name, value in item.args:
                    if isinstance(value, Size):
                        value = fn(counter[0], value)  # noqa: PLW2901
                        counter[0] += 1
                    args.append((name, value))
                sub = visit(item.sub) if item.sub is not None else None
                items.append(replace(item, args=tuple(args), sub=sub))
            elif isinstance(item, Inline):
                items.append(replace(item, sub=visit(item.sub)))
            else:
                items.append(item)
        return SelSet(node.type_name, tuple(items))

    return visit(selset)


def sizes(selset: SelSet) -> list[Size]:
    found: list[Size] = []
    map_sizes(selset, lambda _, size: found.append(size) or size)
    return found


# -- generating operations from a schema -------------------------------------------------


@dataclass(frozen=True)
class Slicing:
    """How a list field is sized (the generator's and the oracle's own reading)."""

    arguments: tuple[str, ...]
    require_one: bool
    defaults: tuple[tuple[str, float], ...]  # (slicing argument, its schema default)
    assumed: float
    sized_fields: frozenset[str]

    def size(self, given: Mapping[str, object]) -> float:
        """The slice for the arguments written (``given``, None for an explicit null).

        Each slicing argument counts with its value, or, not written, its schema default
        (IBM §8.2); the largest size wins. An explicit null bounds nothing (a resolver's
        ``items[:None]`` returns them all): with no size beside it, the list is as long
        as it may be (``max_list_size``, never below the assumed size). Else the assumed
        size (``@listSize(assumedSize:)`` or the default list size).
        """
        defaults = dict(self.defaults)
        values = []
        null = False
        for name in self.arguments:
            value = given[name] if name in given else defaults.get(name)
            if isinstance(value, list):
                values.append(float(len(value)))
            elif value is not None:
                values.append(float(value))  # type: ignore[arg-type]
            elif name in given:
                null = True
        if values:
            return max(values)
        return max(float(MAX_LIST_SIZE), self.assumed) if null else self.assumed


def _connection(definition: GraphQLField) -> tuple[tuple[str, ...], frozenset[str]] | None:
    """A Relay connection without directives: sized by ``first`` / ``last``, the size
    applied to ``edges`` (items with a ``node``) and ``nodes`` (CostModel.connections)."""
    returned = _unwrap(definition.type)
    if not isinstance(returned, GraphQLObjectType | GraphQLInterfaceType):
        return None
    if "pageInfo" not in returned.fields:
        return None
    sized = set()
    for name in ("edges", "nodes"):
        child = returned.fields.get(name)
        if child is None or not isinstance(_unwrap(child.type), GraphQLList):
            continue
        item = get_named_type(child.type)
        if name == "edges" and "node" not in getattr(item, "fields", {}):
            continue
        sized.add(name)
    arguments = tuple(
        name
        for name in ("first", "last")
        if name in definition.args and get_named_type(definition.args[name].type) is GraphQLInt
    )
    if not sized or not arguments:
        return None
    return arguments, frozenset(sized)


def slicing_of(
    parent: str, name: str, definition: GraphQLField, schema: GraphQLSchema | None = None
) -> Slicing:
    """How ``parent.name`` is sized: its ``@listSize``, else (``schema`` given) its
    interface field's, else the Relay connection convention, else the argument names."""
    coordinate = f"{parent}.{name}"
    directive = read_list_size(definition, coordinate)
    parent_type = schema.type_map[parent] if schema is not None else None
    if directive is None and isinstance(parent_type, GraphQLObjectType):
        # An implementing field without @listSize sizes as its interface's field does.
        for interface in parent_type.interfaces:
            inherited = interface.fields.get(name)
            if inherited is not None:
                directive = read_list_size(inherited, f"{interface.name}.{name}")
                if directive is not None:
                    break
    is_list = isinstance(_unwrap(definition.type), GraphQLList)
    sized_fields = frozenset(directive.sized_fields or ()) if directive else frozenset()
    connection = None
    if directive is None or (
        directive.slicing_arguments is None and directive.sized_fields is None
    ):
        connection = _connection(definition)
    if directive is not None and directive.slicing_arguments is not None:
        arguments = directive.slicing_arguments
        require_one = directive.require_one_slicing_argument
    elif connection is not None:
        arguments, sized_fields = connection
        require_one = False
    elif is_list:
        arguments = tuple(
            arg
            for arg in CONVENTION
            if arg in definition.args and get_named_type(definition.args[arg].type) is GraphQLInt
        )
        require_one = False
    else:
        arguments, require_one = (), False
    defaults = []
    for arg in arguments:
        # Read from the SDL itself (every schema here is built from SDL): graphql-core 3.2
        # and 3.3 keep coerced defaults in different attributes, the AST is the same.
        node = definition.args[arg].ast_node
        if node is not None and node.default_value is not None:
            defaults.append((arg, float(node.default_value.value)))
    assumed = directive.assumed_size if directive and directive.assumed_size is not None else None
    return Slicing(
        arguments=arguments,
        require_one=require_one and bool(arguments),
        defaults=tuple(defaults),
        assumed=float(assumed if assumed is not None else DEFAULT_LIST_SIZE),
        sized_fields=sized_fields,
    )


def _unwrap(type_: object) -> object:
    return type_.of_type if isinstance(type_, GraphQLNonNull) else type_


_LITERALS = {"ID": '"1"', "String": '"x"', "Int": "1", "Float": "1.5", "Boolean": "true"}


class Generator:
    def __init__(self, schema_key: str, *, abstract: bool) -> None:
        self.schema_key = schema_key
        self.schema = SCHEMAS[schema_key]
        self.abstract = abstract

    def named(self, type_name: str) -> GraphQLNamedType:
        return self.schema.type_map[type_name]

    def field_names(
        self, parent: GraphQLObjectType | GraphQLInterfaceType, depth: int
    ) -> list[str]:
        names = []
        for name, definition in parent.fields.items():
            named = get_named_type(definition.type)
            # Query.discounted (-2 per product) is generated too: its own part clamps
            # at 0, its selections never do.
            if not self.abstract and is_abstract_type(named):
                continue
            if depth >= MAX_DEPTH and not is_leaf_type(named):
                continue
            names.append(name)
        names.append("__typename")
        return names

    def inline_targets(self, type_name: str) -> list[str | None]:
        named = self.named(type_name)
        targets: list[str | None] = [None, type_name]
        if self.abstract:
            if isinstance(named, GraphQLObjectType):
                targets.extend(interface.name for interface in named.interfaces)
            elif isinstance(named, GraphQLInterfaceType):
                targets.extend(t.name for t in self.schema.get_possible_types(named))
        return targets


@functools.cache
def _subsets(options: tuple[str, ...], most: int) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(options), min_size=1, max_size=most, unique=True)


@functools.cache  # one strategy object per signature: hypothesis validates each once
@st.composite
def selection_sets(
    draw: st.DrawFn, gen: Generator, type_name: str, depth: int, inline_budget: int = 1
) -> SelSet:
    named = gen.named(type_name)
    items: list[Item] = []
    if isinstance(named, GraphQLUnionType):
        members = [member.name for member in named.types]
        chosen = draw(_subsets(tuple(members), 2))
        items.extend(
            Inline(on, draw(selection_sets(gen, on, depth, inline_budget))) for on in chosen
        )
        if draw(st.booleans()):
            items.append(Field("__typename"))
        return SelSet(type_name, tuple(items))
    assert isinstance(named, GraphQLObjectType | GraphQLInterfaceType)
    names = gen.field_names(named, depth)
    chosen = draw(_subsets(tuple(names), 3))
    items.extend(draw(fields(gen, named, name, depth)) for name in chosen)
    if inline_budget > 0 and draw(st.integers(0, 3)) == 0:
        on = draw(st.sampled_from(gen.inline_targets(type_name)))
        inner = draw(selection_sets(gen, on or type_name, depth, inline_budget - 1))
        items.insert(draw(st.integers(0, len(items))), Inline(on, inner))
    return SelSet(type_name, tuple(items))


@functools.cache
@st.composite
def fields(
    draw: st.DrawFn,
    gen: Generator,
    parent: GraphQLObjectType | GraphQLInterfaceType,
    name: str,
    depth: int,
) -> Field:
    alias = draw(st.sampled_from([None, None, f"{name.strip('_')}_alias"]))
    if name == "__typename":
        return Field(name, alias)
    definition = parent.fields[name]
    slicing = slicing_of(parent.name, name, definition, gen.schema)
    chosen: set[str] = set()
    if slicing.require_one:
        options: list[str | None] = list(slicing.arguments)
        if slicing.defaults:
            options.append(None)  # none given: the schema default sizes it
        pick = draw(st.sampled_from(options))
        chosen = {pick} if pick is not None else set()
    args: list[tuple[str, str | Size]] = []
    for arg_name, arg in definition.args.items():
        arg_named = get_named_type(arg.type)
        is_list_arg = isinstance(_unwrap(arg.type), GraphQLList)
        if arg_name in slicing.arguments and is_list_arg:
            args.append((arg_name, Size(draw(st.integers(0, 5)), as_list=True)))
        elif arg_name in slicing.arguments:
            give = arg_name in chosen if slicing.require_one else draw(st.booleans())
            if give:
                # An explicit null bounds nothing; never where one slicing argument is
                # required (refused) or the argument is non-null (invalid).
                null = (
                    not slicing.require_one
                    and not isinstance(arg.type, GraphQLNonNull)
                    and draw(st.integers(0, 4)) == 0
                )
                args.append((arg_name, Size(draw(st.integers(0, 50)), null=null)))
        elif is_required_argument(arg):
            literal = _LITERALS[arg_named.name]
            args.append((arg_name, f"[{literal}]" if is_list_arg else literal))
    named = get_named_type(definition.type)
    sub = None if is_leaf_type(named) else draw(selection_sets(gen, named.name, depth + 1))
    return Field(name, alias, tuple(args), sub)


def operations(schema_key: str, *, abstract: bool) -> st.SearchStrategy[Operation]:
    gen = Generator(schema_key, abstract=abstract)
    kinds = ["query", "mutation"] if schema_key == "shop" else ["query"]

    def build_operation(kind: str) -> st.SearchStrategy[Operation]:
        root = gen.schema.query_type if kind == "query" else gen.schema.mutation_type
        assert root is not None
        return selection_sets(gen, root.name, 1).map(
            lambda body: Operation(schema_key, abstract, kind, body)
        )

    return st.sampled_from(kinds).flatmap(build_operation)


GENERATORS = {
    ("worked", False): Generator("worked", abstract=False),
    ("shop", False): Generator("shop", abstract=False),
    ("shop", True): Generator("shop", abstract=True),
}
CONCRETE = st.one_of(operations("worked", abstract=False), operations("shop", abstract=False))
ANY = st.one_of(CONCRETE, operations("shop", abstract=True))


def generator_of(operation: Operation) -> Generator:
    return GENERATORS[operation.schema_key, operation.abstract]


# -- a naive oracle: collect fields as the executor does, try every runtime type ---------


# The field nodes of one response key, each with the type its selection set is read on.
Group = list[tuple[Field, str]]


class Oracle:
    """Prices a fragment-free tree straight from the rules, one runtime type at a time.

    The rules (docs/cost-model.md, issue 12), model "apollo", default weights:

    - Fields are collected per runtime type as graphql-core's CollectFields collects
      them: inline fragments whose type condition holds for the runtime type are
      expanded, and the fields under one response key are one field, whose arguments are
      its first node's (as the executor reads them) and whose selections are the union of
      every node's.
    - ``cost(f) = max(0, n × own + args) + n × cost(selections)``: the clamp takes the
      field's own part only, never its selections.
    - ``n``: 1 for a field that is not a list; for a field its parent's ``sizedFields``
      names, the parent's slice; for a list field with ``sizedFields``, its own assumed
      size (the slice sizes the children, never the field: IBM §8.3); otherwise the
      largest non-null slicing argument (one not written counts with its schema default),
      else, when a slicing argument is written null, ``max_list_size`` (never below the
      assumed size), else the assumed size.
    - ``own``: the field's ``@cost``, else its type's weight (objects 1 unless the type
      has ``@cost``, scalars 0, interfaces and unions the largest of their types).
    - ``args``: per argument written (and not null), its ``@cost``, else 1 for an input
      object and 0 otherwise, plus what its input fields and list items cost.
    - On an interface or a union, the most expensive possible type; depth and aliases
      likewise (each possible type collects its own fields). Depth: root fields at 1;
      aliases: the aliased response keys; root fields: the root response keys.
    - A field is read on the type of the selection set its first node is written in (an
      interface's own definition outside ``... on T``). The executor reads the runtime
      type's; in the schemas here an interface field and its implementations weigh and
      size the same, so the two readings agree.
    """

    def __init__(self, schema: GraphQLSchema) -> None:
        self.schema = schema

    def possible(self, type_name: str) -> set[str]:
        named = self.schema.type_map[type_name]
        if isinstance(named, GraphQLInterfaceType | GraphQLUnionType):
            return {t.name for t in self.schema.get_possible_types(named)}
        return {type_name}

    def type_weight(self, type_name: str) -> float:
        named = self.schema.type_map[type_name]
        weight = read_cost(named, type_name)
        if weight is not None:
            return weight
        if isinstance(named, GraphQLInterfaceType | GraphQLUnionType):
            return max(self.type_weight(name) for name in self.possible(type_name))
        return 0.0 if is_leaf_type(named) else 1.0

    def collect(self, selsets: list[SelSet], runtime: str) -> dict[str, Group]:
        """The field nodes an object of ``runtime`` runs, by response key (CollectFields)."""
        groups: dict[str, Group] = {}

        def visit(selset: SelSet) -> None:
            for item in selset.items:
                if isinstance(item, Field):
                    groups.setdefault(item.alias or item.name, []).append((item, selset.type_name))
                elif isinstance(item, Inline):
                    if runtime in self.possible(item.on or selset.type_name):
                        visit(item.sub)
                else:
                    raise AssertionError("the oracle prices fragment-free trees")

        for selset in selsets:
            visit(selset)
        return groups

    def measure_set(
        self, selsets: list[SelSet], type_name: str, sized: tuple[frozenset[str], float] | None
    ) -> tuple[float, int, int]:
        """(cost, depth, aliases) of the merged selection sets of one field."""
        costs, depths, aliases = [], [], []
        for runtime in sorted(self.possible(type_name)):
            found = [self.measure_field(g, sized) for g in self.collect(selsets, runtime).values()]
            costs.append(sum(m[0] for m in found))
            depths.append(max((m[1] for m in found), default=0))
            aliases.append(sum(m[2] for m in found))
        return max(costs), max(depths), max(aliases)

    def measure_field(
        self, group: Group, sized: tuple[frozenset[str], float] | None
    ) -> tuple[float, int, int]:
        """(cost, depth, aliases) of one response key."""
        field, scope = group[0]
        aliased = int(field.alias is not None)
        if field.name == "__typename":
            return 0.0, 1, aliased
        definition = self.schema.type_map[scope].fields[field.name]
        coordinate = f"{scope}.{field.name}"
        named = get_named_type(definition.type)
        own = read_cost(definition, coordinate)
        if own is None:
            own = self.type_weight(named.name)
        given = {name: python_value(value) for name, value in field.args}
        args = 0.0
        for name, value in given.items():
            arg = definition.args[name]
            args += self.input_cost(arg.type, read_cost(arg, f"{coordinate}({name}:)"), value)
        slicing = slicing_of(scope, field.name, definition, self.schema)
        if sized is not None and field.name in sized[0]:
            n = sized[1]
        elif not isinstance(_unwrap(definition.type), GraphQLList):
            n = 1.0
        elif slicing.sized_fields:
            n = slicing.assumed
        else:
            n = slicing.size(given)
        child_sized = (slicing.sized_fields, slicing.size(given)) if slicing.sized_fields else None
        subs = [node.sub for node, _ in group if node.sub is not None]
        cost, depth, aliases = 0.0, 0, 0
        if subs:
            cost, depth, aliases = self.measure_set(subs, named.name, child_sized)
        return max(0.0, n * own + args) + n * cost, 1 + depth, aliased + aliases

    def input_cost(self, type_: object, weight: float | None, value: object) -> float:
        """What a value in one input position costs (IBM §7.1: input objects weigh 1)."""
        if value is None:
            return 0.0
        type_ = _unwrap(type_)
        if isinstance(type_, GraphQLList):
            items = value if isinstance(value, list) else [value]
            return (weight or 0.0) + sum(self.input_cost(type_.of_type, None, v) for v in items)
        if isinstance(type_, GraphQLInputObjectType):
            assert isinstance(value, dict)
            total = 1.0 if weight is None else weight
            for name, entry in value.items():
                input_field = type_.fields[name]
                where = f"{type_.name}.{name}"
                total += self.input_cost(input_field.type, read_cost(input_field, where), entry)
            return total
        return weight or 0.0

    def measure(self, operation: Operation) -> tuple[float, int, int, int]:
        """(cost, depth, aliases, root_fields) of a fragment-free operation."""
        body = operation.body
        cost, depth, aliases = self.measure_set([body], body.type_name, None)
        root_fields = len(self.collect([body], body.type_name))
        return OPERATION_WEIGHTS[operation.kind] + cost, max(depth, 1), aliases, root_fields


def python_value(value: str | Size) -> object:
    """An argument's value as JSON (None for null)."""
    if isinstance(value, Size):
        if value.null:
            return None
        return [str(i) for i in range(value.value)] if value.as_list else value.value
    return value_from_ast_untyped(parse_value(value))


def measured(report: CostReport) -> tuple[float, int, int, int]:
    return report.cost, report.depth, report.aliases, report.root_fields


def price(operation: Operation, **kwargs: object) -> CostReport:
    return analyze(operation.schema, operation.text, **kwargs)


def same_price(left: Operation, right: Operation) -> None:
    a, b = price(left), price(right)
    assert a == b, f"{left.text}\n--- vs ---\n{right.text}"
    assert a.by_coordinate == b.by_coordinate


# -- properties --------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(operation=ANY)
def test_cost_matches_a_naive_evaluator(operation):
    report = price(operation)
    expected = Oracle(operation.schema).measure(operation)
    assert measured(report) == expected, operation.text


@PROPERTY_SETTINGS
@given(operation=ANY, data=st.data())
def test_cost_is_monotone_in_list_sizes(operation, data):
    found = sizes(operation.body)
    if not found:
        return
    index = data.draw(st.integers(0, len(found) - 1), label="size index")
    delta = data.draw(st.integers(1, 50), label="delta")
    bumped = replace(
        operation,
        body=map_sizes(
            operation.body,
            lambda i, size: replace(size, value=size.value + delta) if i == index else size,
        ),
    )
    assert price(bumped).cost >= price(operation).cost, bumped.text


@PROPERTY_SETTINGS
@given(operation=ANY, data=st.data())
def test_moving_a_selection_set_into_a_named_fragment_changes_nothing(operation, data):
    targets = selsets(operation.body)
    index = data.draw(st.integers(0, len(targets) - 1), label="selection set")
    extracted = replace(
        operation,
        body=map_selsets(
            operation.body,
            lambda i, s: SelSet(s.type_name, (Spread("Fx", s),)) if i == index else s,
        ),
    )
    same_price(operation, extracted)


@PROPERTY_SETTINGS
@given(operation=ANY, data=st.data())
def test_wrapping_a_selection_set_in_an_inline_fragment_changes_nothing(operation, data):
    targets = selsets(operation.body)
    index = data.draw(st.integers(0, len(targets) - 1), label="selection set")
    named = data.draw(st.booleans(), label="with type condition")
    wrapped = replace(
        operation,
        body=map_selsets(
            operation.body,
            lambda i, s: (
                SelSet(s.type_name, (Inline(s.type_name if named else None, s),))
                if i == index
                else s
            ),
        ),
    )
    same_price(operation, wrapped)


@st.composite
def shared_fragments(draw: st.DrawFn, operations_: st.SearchStrategy[Operation]):
    """An operation, and the same operation with one fragment spread in several places."""
    operation = draw(operations_)
    targets = selsets(operation.body)
    types = sorted({s.type_name for s in targets})
    type_name = draw(st.sampled_from(types), label="fragment type")
    body = draw(selection_sets(generator_of(operation), type_name, MAX_DEPTH - 1), label="body")
    places = [i for i, s in enumerate(targets) if s.type_name == type_name]
    chosen = set(draw(st.lists(st.sampled_from(places), min_size=1, unique=True), label="uses"))

    def with_body(item: Item) -> Callable[[int, SelSet], SelSet]:
        return lambda i, s: SelSet(s.type_name, (*s.items, item)) if i in chosen else s

    inline = replace(operation, body=map_selsets(operation.body, with_body(Inline(None, body))))
    spread = replace(operation, body=map_selsets(operation.body, with_body(Spread("Shared", body))))
    return inline, spread


@PROPERTY_SETTINGS
@given(pair=shared_fragments(ANY))
def test_a_fragment_spread_costs_what_the_same_fields_inline_cost(pair):
    inline, spread = pair
    same_price(inline, spread)
    assert measured(price(spread)) == Oracle(inline.schema).measure(inline)


@PROPERTY_SETTINGS
@given(operation=CONCRETE)
def test_by_coordinate_adds_up_to_the_cost(operation):
    report = price(operation)
    total = sum(report.by_coordinate.values()) + OPERATION_WEIGHTS[operation.kind]
    assert total == pytest.approx(report.cost), operation.text
    assert all(value > 0 for value in report.by_coordinate.values())


@PROPERTY_SETTINGS
@given(pair=shared_fragments(ANY))
def test_a_string_and_its_parsed_document_get_the_same_report(pair):
    for operation in pair:
        text = operation.text
        from_string = analyze(operation.schema, text)
        from_document = analyze(operation.schema, parse(text))
        assert from_string == from_document
        assert from_string.by_coordinate == from_document.by_coordinate


@PROPERTY_SETTINGS
@given(pair=shared_fragments(ANY), which=st.integers(0, 1))
def test_limits_at_the_measured_values_pass_and_one_below_fails(pair, which):
    operation = pair[which]
    report = price(operation)
    at = CostLimits(
        max_cost=report.cost,
        max_depth=report.depth,
        max_aliases=report.aliases,
        max_root_fields=report.root_fields,
    )
    assert price(operation, limits=at) == report

    # Every limit reports the exact measured value (the plan is priced whole).
    if report.cost >= 1:
        with pytest.raises(QueryTooComplex) as complex_:
            price(operation, limits=CostLimits(max_cost=report.cost - 1))
        assert (complex_.value.value, complex_.value.limit) == (report.cost, report.cost - 1)
        assert not complex_.value.partial
    with pytest.raises(QueryTooDeep) as deep:
        price(operation, limits=CostLimits(max_depth=report.depth - 1))
    assert (deep.value.value, deep.value.limit) == (report.depth, report.depth - 1)
    if report.aliases >= 1:
        with pytest.raises(TooManyAliases) as aliases:
            price(operation, limits=CostLimits(max_aliases=report.aliases - 1))
        assert (aliases.value.value, aliases.value.limit) == (report.aliases, report.aliases - 1)
    if report.root_fields >= 1:
        with pytest.raises(TooManyRootFields) as roots:
            price(operation, limits=CostLimits(max_root_fields=report.root_fields - 1))
        expected = (report.root_fields, report.root_fields - 1)
        assert (roots.value.value, roots.value.limit) == expected


# -- examples the properties rest on ------------------------------------------------------


def test_the_generator_reaches_every_kind_of_selection():
    # A fixed operation through every helper: rendering, sizes, selection sets, the oracle.
    body = SelSet(
        "Query",
        (
            Field(
                "users",
                "u",
                (("first", Size(3)),),
                SelSet(
                    "User",
                    (
                        Field("friends", None, (), SelSet("User", (Field("id"),))),
                        Inline("User", SelSet("User", (Field("name"),))),
                    ),
                ),
            ),
        ),
    )
    operation = Operation("worked", False, "query", body)
    assert operation.text == (
        "query { u: users(first: 3) { friends { id } ... on User { name } } }"
    )
    assert sizes(body) == [Size(3)]
    assert len(selsets(body)) == 4
    assert Oracle(operation.schema).measure(operation) == (18.0, 3, 1, 1)
    assert measured(price(operation)) == (18.0, 3, 1, 1)


def _field_tree(text: str, schema_key: str) -> Operation:
    """A fragment-free operation of the generator's tree from GraphQL text."""
    schema = SCHEMAS[schema_key]
    operation = parse(text).definitions[0]

    def convert(selection_set: object, type_name: str) -> SelSet:
        named = schema.type_map[type_name]
        items: list[Item] = []
        for node in selection_set.selections:  # type: ignore[attr-defined]
            if isinstance(node, InlineFragmentNode):
                on = node.type_condition.name.value if node.type_condition else None
                items.append(Inline(on, convert(node.selection_set, on or type_name)))
                continue
            assert isinstance(node, FieldNode)
            args: list[tuple[str, str | Size]] = []
            for argument in node.arguments or ():
                value = argument.value
                if value.kind == "null_value":
                    args.append((argument.name.value, Size(0, null=True)))
                elif value.kind == "int_value":
                    args.append((argument.name.value, Size(int(value.value))))
                else:
                    args.append((argument.name.value, print_ast(value)))
            sub = None
            if node.selection_set is not None:
                child = get_named_type(named.fields[node.name.value].type)
                sub = convert(node.selection_set, child.name)
            alias = node.alias.value if node.alias else None
            items.append(Field(node.name.value, alias, tuple(args), sub))
        return SelSet(type_name, tuple(items))

    root = SCHEMAS[schema_key].get_root_type(operation.operation)
    kind = operation.operation.value
    return Operation(schema_key, True, kind, convert(operation.selection_set, root.name))


@pytest.mark.parametrize(
    ("schema_key", "text", "expected"),
    [
        # Namesakes are one field, their selections merged: 2 × (1 + 3 friends).
        (
            "worked",
            "{ users(first: 2) { id } users(first: 2) { friends(first: 3) { id } } }",
            (8, 3, 0, 1),
        ),
        # ... also across an inline fragment, and the merged children merge again.
        (
            "shop",
            '{ product(id: "1") { reviews(first: 2) { id }'
            " ... on Product { reviews(first: 2) { author { name } } } } }",
            (2 + 2 * (1 + 1), 4, 0, 1),
        ),
        # The clamp takes the own part only: max(0, 2 × -2) + 2 × (3 related × 2).
        ("shop", "{ discounted(limit: 2) { related(limit: 3) { id } } }", (12, 3, 0, 1)),
        # sizedFields: the slice sizes `nodes`, the connection counts once, totalCount 2.
        ("shop", "{ orders(first: 4) { nodes { id } totalCount } }", (1 + 4 + 2, 3, 0, 1)),
        # An explicit null bounds nothing: max_list_size 1000, not the default 5.
        ("worked", "{ users(first: 1) { friends(first: null) { id } } }", (1 + 1000, 3, 0, 1)),
        # A union: the dearest member's selections, aliases counted per member (max).
        (
            "shop",
            '{ search(term: "x", limit: 2) { ... on Product { a: id }'
            " ... on Vendor { b: id c: name } } }",
            (3 + 2 * 4, 2, 2, 1),
        ),
        # A mutation: its weight 10, and __typename is a root field.
        ("shop", 'mutation { cancelOrder(id: "1") __typename }', (10 + 5, 1, 0, 2)),
    ],
)
def test_the_oracle_prices_the_rules_it_states(schema_key, text, expected):
    operation = _field_tree(text, schema_key)
    assert Oracle(operation.schema).measure(operation) == expected
    assert measured(analyze(operation.schema, text)) == expected
    assert measured(price(operation)) == expected


def test_one_fragment_under_two_connection_sizes(shop_schema):
    # The memo key includes the sizedFields context: the same fragment on a connection
    # priced under first: 2 and first: 7 must not share a price.
    query = """
    { a: orders(first: 2) { ...C } b: orders(first: 7) { ...C } }
    fragment C on OrderConnection { nodes { id } totalCount }
    """
    inline = (
        "{ a: orders(first: 2) { nodes { id } totalCount }"
        " b: orders(first: 7) { nodes { id } totalCount } }"
    )
    assert analyze(shop_schema, query) == analyze(shop_schema, inline)
    assert analyze(shop_schema, query).cost == (1 + 2 + 2) + (
        1 + 7 + 2
    )  # connection 1, totalCount 2


def test_limit_at_the_measured_cost_passes_with_a_negative_operation_weight(worked_schema):
    # A negative operation weight lowers the total below the sum of the fields. The early
    # stop must not treat the fields' partial sum as a lower bound of the total then.
    model = CostModel(operation_weights={"query": -100})
    query = "{ a: users(first: 60) { id } b: users(first: 1) { id } }"
    report = analyze(worked_schema, query, model=model)
    assert report.cost == 0  # max(0, -100 + 61)
    assert analyze(worked_schema, query, model=model, limits=CostLimits(max_cost=50)) == report


def test_the_oracle_reads_the_schemas_like_the_issue():
    shop = Oracle(SCHEMAS["shop"])
    assert shop.type_weight("Node") == 4  # Vendor's @cost(weight: "4")
    assert shop.type_weight("SearchResult") == 4
    assert math.isclose(shop.type_weight("Product"), 2)
    orders = slicing_of("Query", "orders", SCHEMAS["shop"].query_type.fields["orders"])
    assert orders.require_one
    assert orders.sized_fields == frozenset({"edges", "nodes"})
