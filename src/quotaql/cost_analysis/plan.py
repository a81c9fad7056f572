"""The plan of one operation: compiled once, then priced, explained and walked against its data.

A plan is the operation as graphql-core's executor will run it: fragments expanded, fields
with one response name merged as ``CollectFields`` merges them, ``@skip`` / ``@include``
applied, each field's list size and argument cost resolved from the request's variables.
It is a directed acyclic graph, not a tree: a field group that several places select (a
fragment spread under two aliases) is one node, so a fragment bomb plans in time linear in
its text while it prices at its true, exponential cost.

Every price the library gives comes from the plan: :class:`CostReport` (the cost, depth,
aliases and root fields), :attr:`CostReport.by_coordinate`, :attr:`CostReport.root_field_costs`
and the actual cost after execution (:meth:`Plan.actual`), which walks the plan against
``data``, never the document. Plans are cached per compiled schema, keyed by the document,
the operation and the values of the variables the plan read (see :func:`plan_for`).

Per field, with ``n`` its list size (1 for a field that is not a list) and ``args`` the cost
of its arguments and directives (input objects and their fields included)::

    apollo:  cost(f) = max(0, n × own + args) + n × cost(selections)
    ibm:     field cost(f) = max(0, weight + args) + n × field cost(selections)
             type cost(f)  = n × (type weight + type cost(selections))

On an interface or a union the selections cost what the most expensive possible type makes
of them. docs/cost-model.md gives the rules with their sources.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from graphql import (
    BooleanValueNode,
    DocumentNode,
    EnumValueNode,
    FieldNode,
    FloatValueNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    StringValueNode,
    VariableNode,
)

from quotaql._graphql_compat import get_variable_values
from quotaql.cost_analysis._compile import NO_VALUE, list_size_value
from quotaql.errors import (
    FragmentCycle,
    InvalidArgument,
    InvalidQuery,
    InvalidVariables,
    OperationResolutionError,
    QueryTooDeep,
    SlicingArgumentRequired,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from graphql.language import ArgumentNode, DirectiveNode, ValueNode

    from quotaql.cost_analysis._compile import (
        CompiledField,
        CompiledSchema,
        CompiledType,
        InputCost,
    )
    from quotaql.cost_analysis.model import ModelName, OperationType

__all__ = [
    "MAX_NESTING",
    "CostReport",
    "Field",
    "Plan",
    "PlanCache",
    "RootFieldCost",
    "Selection",
    "build_plan",
    "deepest",
    "error_paths",
    "finite",
    "input_cost",
    "locations",
    "plan_for",
    "select_operation",
]

# Selection sets nested deeper than this (fields, inline fragments and fragment spreads
# together) are refused whatever the limits say: planning recurses once per level.
MAX_NESTING = 256
# GraphQL `Int` is 32-bit: a larger literal for an Int argument fails coercion.
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_MAX_COST = sys.float_info.max
_MISSING: Any = NO_VALUE  # a variable not sent, a slicing argument with no value
# Documents (per compiled schema) whose plans are kept, plans per document (distinct
# values of the variables that change them), variable sets known to coerce per document;
# what the kept documents and plans may hold in all (characters of the documents, at least
# their lexical tokens, and fields of the plans: a token or a field is at most a few
# hundred bytes), and per document.
_DOCUMENTS = 512
_PLANS_PER_DOCUMENT = 32
_VALIDATED_PER_DOCUMENT = 64
_CACHE_WEIGHT = 100_000
_MAX_CACHED_SIZE = 10_000
# The most scalars, containers and keys a variable value kept in a key may hold.
_FREEZE_BUDGET = 256
# A value too large to keep: equal to nothing.
_UNKEPT: Any = object()


class RootFieldCost(NamedTuple):
    """What the selections of one root field cost, summed over its aliases."""

    cost: float
    selections: int
    """How many times the operation selects it (each alias; namesakes merged)."""


@dataclass(frozen=True, slots=True)
class CostReport:
    """The price of one operation.

    Attributes:
        cost: the static upper-bound cost the budget is debited by (operation weight +
            selections): the combined cost under ``model = "apollo"``, the larger of
            :attr:`field_cost` and :attr:`type_cost` under ``"ibm"``.
        depth: the deepest field nesting of what runs; root fields are at depth 1.
        aliases: aliased fields, counted with fragments expanded.
        root_fields: fields in the root selection set, fragments expanded, namesakes merged.
        operation_type: ``"query"``, ``"mutation"`` or ``"subscription"``.
        operation_name: the operation's name, if it has one.
        model: the model that priced it, ``"apollo"`` or ``"ibm"``.
        field_cost: the IBM specification's field cost (operation weight included); under
            ``"apollo"`` the combined cost, equal to :attr:`cost`.
        type_cost: the IBM specification's type cost (the root type counted once,
            operation weight included); None under ``"apollo"``.
    """

    cost: float
    depth: int
    aliases: int
    root_fields: int
    operation_type: OperationType
    operation_name: str | None
    model: ModelName = "apollo"
    field_cost: float = 0.0
    type_cost: float | None = None
    _plan: Plan | None = field(default=None, repr=False, compare=False)
    _by_coordinate: dict[str, float] | None = field(default=None, repr=False, compare=False)
    _root_costs: dict[str, RootFieldCost] | None = field(default=None, repr=False, compare=False)

    @property
    def by_coordinate(self) -> dict[str, float]:
        """Cost attributed to each schema coordinate (``"Query.users"``), largest first.

        A coordinate's share is its own weight and argument costs times the list sizes
        above it (under ``"ibm"``, its share of the field cost); on interfaces and unions
        only the most expensive possible type counts, as in :attr:`cost`. Computed on
        first access.
        """
        if self._by_coordinate is None:
            found = self._plan.explain() if self._plan is not None else {}
            ordered = dict(sorted(found.items(), key=lambda item: (-item[1], item[0])))
            object.__setattr__(self, "_by_coordinate", ordered)
        return cast("dict[str, float]", self._by_coordinate)

    def actual(
        self,
        data: Any,
        errors: Sequence[Any] | None = None,
        sizes: list[tuple[str, float, int, bool]] | None = None,
    ) -> float:
        """The actual cost of this operation once run, from the ``data`` it returned:
        ``actual_cost`` without planning again (the plan that priced it walks the data).

        ``sizes``, when given, receives ``(coordinate, assumed, returned, sliced)`` for
        each list of the response (for tuning: ``sliced`` when a slicing argument of the
        operation gave the assumed size).
        """
        if self._plan is None:
            raise ValueError("this report has no plan to measure an execution against")
        return self._plan.actual(data, errors, sizes)

    @property
    def root_field_costs(self) -> dict[str, RootFieldCost]:
        """The cost of each root field's selections, by coordinate (``"Mutation.export"``).

        Every root field counts, however the operation reaches it: aliases, fragments and
        inline fragments on the root type (``@skip`` / ``@include`` evaluated, namesakes
        merged as the executor merges them). Computed on first access, for the quotas of
        root fields.
        """
        if self._root_costs is None:
            found = self._plan.root_costs() if self._plan is not None else {}
            object.__setattr__(self, "_root_costs", found)
        return cast("dict[str, RootFieldCost]", self._root_costs)


# -- the plan's nodes ------------------------------------------------------------------


class Field:
    """One response key of a selection set: the field nodes ``CollectFields`` merges."""

    __slots__ = (
        "a",
        "aliases",
        "b",
        "child",
        "coordinate",
        "depth",
        "erased",
        "fc",
        "key",
        "list_depth",
        "n",
        "node",
        "own",
        "sliced",
        "t",
        "tc",
        "weightless",
    )

    def __init__(
        self,
        key: str,
        node: FieldNode,
        compiled: CompiledField,
        n: float,
        sliced: bool,
        args: float,
        child: Selection | None,
        aliased: bool,
    ) -> None:
        self.key = key
        self.node = node  # for error locations only
        self.coordinate = compiled.coordinate
        # own(k items) = max(0, k × a + b); type cost k × t (t is 0 under apollo).
        self.a = compiled.a
        self.b = compiled.b + args
        self.t = compiled.t
        self.n = n
        self.sliced = sliced
        self.list_depth = compiled.list_depth
        self.child = child
        own = n * self.a + self.b
        if not own > 0.0:  # also NaN (0 × inf)
            own = 0.0
        self.own = own  # its own part, clamped: what by_coordinate attributes to it
        child_fc = child.fc if child is not None else 0.0
        child_tc = child.tc if child is not None else 0.0
        # 0 × an overflowing (infinite) subtree is NaN: nothing runs, it costs 0.
        below = n * child_fc if child_fc else 0.0
        self.fc = own + below if below >= 0.0 else own
        # What may have run below an error that erased this field: as fc, but a list
        # sized 0 may still have returned null (one item, its own weight).
        erased = self.fc
        if child is not None and child.erased != child_fc:
            below = n * child.erased
            erased = own + below if below >= 0.0 else own
        if self.list_depth and n < 1.0:
            erased += max(0.0, self.a + self.b - own)
        self.erased = erased
        if self.t or child_tc:
            types = n * (self.t + child_tc)
            self.tc = 0.0 if math.isnan(types) else types
        else:
            self.tc = 0.0
        self.depth = 1 + (child.depth if child is not None else 0)
        self.aliases = (1 if aliased else 0) + (child.aliases if child is not None else 0)
        self.weightless = (
            not self.a and not self.b and not self.t and (child is None or child.weightless)
        )


class Selection:
    """What a selection set runs on one parent type.

    ``fields`` when every possible type runs the same fields; on an interface or a union
    whose fragments narrow by type, ``by_type`` gives each possible type its own
    selection and ``variants`` the distinct ones.
    """

    __slots__ = (
        "aliases",
        "by_type",
        "depth",
        "erased",
        "fc",
        "fields",
        "tc",
        "typename_keys",
        "variants",
        "weightless",
    )
    fc: float
    erased: float
    tc: float
    depth: int
    aliases: int
    weightless: bool

    def __init__(
        self,
        fields: tuple[Field, ...],
        by_type: dict[str, Selection] | None = None,
        typename_keys: tuple[str, ...] = (),
        leaves: int = 0,
        leaf_aliases: int = 0,
    ) -> None:
        """``leaves`` and ``leaf_aliases``: fields that cost nothing whatever they return
        (``__typename``, scalars of weight 0 without costed arguments), left out of
        ``fields`` but counted for depth and aliases."""
        self.fields = fields
        self.by_type = by_type
        self.typename_keys = typename_keys
        if by_type is None:
            self.variants: tuple[Selection, ...] = ()
            fc = tc = erased = 0.0
            depth = 1 if leaves else 0
            aliases = leaf_aliases
            weightless = True
            for planned in fields:
                fc += planned.fc
                erased += planned.erased
                tc += planned.tc
                depth = max(depth, planned.depth)
                aliases += planned.aliases
                weightless = weightless and planned.weightless
            self.fc, self.tc, self.depth, self.erased = fc, tc, depth, erased
            self.aliases, self.weightless = aliases, weightless
        else:
            variants = self.variants = tuple({id(v): v for v in by_type.values()}.values())
            self.fc = max((v.fc for v in variants), default=0.0)
            self.erased = max((v.erased for v in variants), default=0.0)
            self.tc = max((v.tc for v in variants), default=0.0)
            self.depth = max((v.depth for v in variants), default=0)
            self.aliases = max((v.aliases for v in variants), default=0)
            self.weightless = all(v.weightless for v in variants)


_EMPTY = Selection(())
# Selections of free fields only, by their counts (they differ in nothing else): shared.
_FREE: dict[tuple[int, int], Selection] = {}


def _free_selection(leaves: int, aliases: int) -> Selection:
    if not leaves:
        return _EMPTY
    found = _FREE.get((leaves, aliases))
    if found is None:
        found = Selection((), leaves=leaves, leaf_aliases=aliases)
        if len(_FREE) < 1_024:
            _FREE[leaves, aliases] = found
    return found


# -- the plan ----------------------------------------------------------------------------


class Plan:
    """One operation planned for one set of variable values: its price, ready to reuse."""

    __slots__ = ("compiled", "ibm", "operation", "report", "root", "root_weight", "weight")

    def __init__(
        self,
        compiled: CompiledSchema,
        operation: OperationDefinitionNode,
        root: Selection,
        root_fields: int,
        root_weight: float,
    ) -> None:
        self.compiled = compiled
        self.operation = operation
        self.root = root
        model = compiled.model
        operation_type: OperationType = operation.operation.value
        self.weight = weight = model.operation_weights[operation_type]
        self.ibm = model.model == "ibm"
        self.root_weight = root_weight
        field_cost = finite(weight + root.fc)
        type_cost = finite(weight + root_weight + root.tc) if self.ibm else None
        cost = max(field_cost, type_cost) if type_cost is not None else field_cost
        self.report = CostReport(
            cost=cost,
            depth=max(root.depth, 1),  # the root selection set is at depth 1
            aliases=root.aliases,
            root_fields=root_fields,
            operation_type=operation_type,
            operation_name=operation.name.value if operation.name else None,
            model=model.model,
            field_cost=field_cost,
            type_cost=type_cost,
            _plan=self,
        )

    # -- explanation -----------------------------------------------------------------

    def explain(self) -> dict[str, float]:
        """Cost by coordinate: the shares that add up to the selections' field cost."""
        memo: dict[int, dict[str, float]] = {}
        return {c: finite(v) for c, v in _explain(self.root, memo).items() if v}

    def root_costs(self) -> dict[str, RootFieldCost]:
        found: dict[str, RootFieldCost] = {}
        for planned in self.root.fields:
            cost = max(planned.fc, planned.tc)
            before = found.get(planned.coordinate, RootFieldCost(0.0, 0))
            found[planned.coordinate] = RootFieldCost(
                finite(before.cost + cost), before.selections + 1
            )
        return found

    # -- the actual cost -------------------------------------------------------------

    def actual(
        self,
        data: Any,
        errors: Sequence[Any] | None = None,
        sizes: list[tuple[str, float, int, bool]] | None = None,
    ) -> float:
        """The cost of what ran, from the ``data`` it returned (see ``actual_cost``).

        ``sizes``, when given, receives ``(coordinate, assumed, returned, sliced)`` for
        every list the data holds (a list of lists counted once, its items together).
        """
        errs = error_paths(errors) if errors else None
        if data is None:
            if errs is None:
                return 0.0
            # A field error nulled the root: everything erased, charged as estimated.
            return max(self.report.cost, finite(self.weight + self.root.erased))
        if not isinstance(data, Mapping):
            return finite(self.weight)
        walker = _Walker(sizes)
        try:
            field_cost = walker.selection(self.root, data, errs, 1)
        except RecursionError:
            # Data nested deeper than the stack allows a walk of it: what ran cannot be
            # told, it is charged as estimated (nothing refunded).
            return self.report.cost
        if not self.ibm:
            return finite(self.weight + field_cost)
        return finite(self.weight + max(field_cost, self.root_weight + walker.tc))


def deepest(selection: Selection, depth: int) -> Any:
    """The node of the selection set at ``depth + 1`` on the deepest path (for the
    location of a depth error)."""
    node: Any = None
    for _ in range(depth):
        if selection.by_type is not None:
            if not selection.variants:
                break
            selection = max(selection.variants, key=lambda v: v.depth)
        if not selection.fields:
            break
        planned = max(selection.fields, key=lambda f: f.depth)
        node = planned.node.selection_set or planned.node
        if planned.child is None:
            break
        selection = planned.child
    return node


def _explain(selection: Selection, memo: dict[int, dict[str, float]]) -> dict[str, float]:
    found = memo.get(id(selection))
    if found is not None:
        return found
    if selection.by_type is not None:
        variants = selection.variants
        found = _explain(max(variants, key=lambda v: v.fc), memo) if variants else {}
        memo[id(selection)] = found
        return found
    found = {}
    for planned in selection.fields:
        own = planned.own
        if own:
            found[planned.coordinate] = found.get(planned.coordinate, 0.0) + own
        if planned.child is not None and planned.child.fc and planned.n:
            n = planned.n
            for coordinate, share in _explain(planned.child, memo).items():
                found[coordinate] = found.get(coordinate, 0.0) + n * share
    memo[id(selection)] = found
    return found


def finite(cost: float) -> float:
    """A cost as a finite, non-negative float (JSON has no infinity).

    Costs overflow to ``inf`` only for absurd list sizes; ``NaN`` only from ``0 × inf``.
    Either way the operation is priced as the most expensive one there can be.
    """
    if math.isnan(cost) or cost > _MAX_COST:
        return _MAX_COST
    return cost if cost > 0.0 else 0.0


# -- walking the data ------------------------------------------------------------------

# The errors' paths as a tree: the keys and indexes that some error's path goes through.
_Trie = dict[str | int, "_Trie"]


def error_paths(errors: Sequence[Any]) -> _Trie | None:
    """The paths of ``errors`` as a tree of keys and indexes; None when none has a path.

    Built once, in time linear in the paths: each object of the data then looks up its
    keys in the subtree it was handed, and an object no error's path goes through has
    none (the walk below it is the walk without errors).
    """
    root: _Trie = {}
    found = False
    for error in errors:
        path = error.get("path") if isinstance(error, Mapping) else getattr(error, "path", None)
        if not isinstance(path, list | tuple):
            continue  # a request error (nothing ran), or no path to read
        found = True
        node = root
        for key in path:
            if key.__class__ is not str and key.__class__ is not int:
                break  # no key of the data: the path stops being followed here
            node = node.setdefault(key, {})
    return root if found else None


class _Walker:
    """One walk of the data against the plan; ``tc`` accumulates the IBM type cost."""

    __slots__ = ("seen", "sizes", "tc")

    def __init__(self, sizes: list[tuple[str, float, int, bool]] | None) -> None:
        self.tc = 0.0
        self.sizes = sizes
        # What an object costs under an interface's or a union's selection, when read
        # without __typename: the same object may be read under it from several possible
        # types of its parent (fragments on each), once is enough.
        self.seen: dict[tuple[int, int], tuple[float, float]] = {}

    def selection(
        self,
        selection: Selection,
        obj: Mapping[str, Any],
        errs: _Trie | None,
        level: int,
        memo: dict[int, tuple[float, float]] | None = None,
    ) -> float:
        """What ``obj`` costs under ``selection``. ``memo`` (one object read as several
        possible types) keeps each field's cost, so that the fields the types share are
        read once: nested interfaces without ``__typename`` stay linear."""
        if selection.by_type is not None:
            return self._abstract(selection, obj, errs, level)
        if level > MAX_NESTING:  # data nested deeper than any plan: not this plan's data
            return 0.0
        total = 0.0
        for planned in selection.fields:
            if planned.weightless:
                continue
            if memo is not None:
                known = memo.get(id(planned))
                if known is not None:
                    total += known[0]
                    self.tc += known[1]
                    continue
                before = self.tc
                cost = self._field(planned, obj, errs, level)
                memo[id(planned)] = (cost, self.tc - before)
                total += cost
            else:
                total += self._field(planned, obj, errs, level)
        return total

    def _field(
        self, planned: Field, obj: Mapping[str, Any], errs: _Trie | None, level: int
    ) -> float:
        value = obj.get(planned.key, _MISSING)
        if errs is not None:
            below = errs.get(planned.key)
            if below is not None:  # an error's path goes through this field
                return self._erased(planned, value, below, level)
        if value is _MISSING:
            return 0.0
        list_depth = planned.list_depth
        items: Sequence[Any]
        if list_depth == 0:
            count = 1
            items = (value,)
        elif list_depth == 1 and value.__class__ is list:
            items = value
            count = len(value)
        else:
            items = _items(value, list_depth)
            count = len(items)
        if self.sizes is not None and list_depth:
            self.sizes.append((planned.coordinate, planned.n, count, planned.sliced))
        own = count * planned.a + planned.b
        total = own if own > 0.0 else 0.0
        if planned.t:
            self.tc += count * planned.t
        child = planned.child
        if child is None or child.weightless:
            return total
        for item in items:
            if item.__class__ is dict or (item is not None and isinstance(item, Mapping)):
                total += self.selection(child, item, None, level + 1)
        return total

    def _abstract(
        self, selection: Selection, obj: Mapping[str, Any], errs: _Trie | None, level: int
    ) -> float:
        by_type = cast("dict[str, Selection]", selection.by_type)
        for key in selection.typename_keys:
            name = obj.get(key)
            if name.__class__ is str:
                found = by_type.get(name)
                if found is not None:
                    return self.selection(found, obj, errs, level)
        # No __typename to read: the most any possible type makes of the object.
        seen = (id(selection), id(obj))
        if errs is None:
            known = self.seen.get(seen)
            if known is not None:
                self.tc += known[1]
                return known[0]
        best = best_tc = 0.0
        start = self.tc
        memo: dict[int, tuple[float, float]] = {}
        for variant in selection.variants:
            self.tc = start
            best = max(best, self.selection(variant, obj, errs, level, memo))
            best_tc = max(best_tc, self.tc - start)
        self.tc = start + best_tc
        if errs is None:
            self.seen[seen] = (best, best_tc)
        return best

    def _erased(self, planned: Field, value: Any, errs: _Trie, level: int) -> float:
        """A field some error's path goes through (``errs``: the paths below it).

        Null or missing, the error erased it: its estimate (never less than a null
        costs). Otherwise walked as usual, but a null item an error erased costs the
        item's estimate, and a field with an erased inner list (``[[T]]``) its estimate.
        """
        if value is _MISSING or value is None:
            self.tc += planned.tc
            ran = planned.a + planned.b if value is None else 0.0
            return max(planned.erased, ran)
        list_depth = planned.list_depth
        entries: list[tuple[Any, _Trie | None]]
        erased_inner = False
        if list_depth == 0 or not isinstance(value, list | tuple):
            entries = [(value, errs)]
        else:
            entries = [(item, errs.get(index)) for index, item in enumerate(value)]
            for _ in range(list_depth - 1):
                flat: list[tuple[Any, _Trie | None]] = []
                for item, below in entries:
                    if isinstance(item, list | tuple):
                        if below is None:
                            flat.extend((inner, None) for inner in item)
                        else:
                            flat.extend((inner, below.get(i)) for i, inner in enumerate(item))
                    else:
                        # Not a list: one item. Null by an error, it held items nobody
                        # can count: the field costs its estimate.
                        erased_inner |= item is None and below is not None
                        flat.append((item, None if item is None else below))
                entries = flat
        count = len(entries)
        own = count * planned.a + planned.b
        cost = own if own > 0.0 else 0.0
        self.tc += count * planned.t
        child = planned.child
        for item, below in entries:
            if child is not None and (
                item.__class__ is dict or (item is not None and isinstance(item, Mapping))
            ):
                cost += self.selection(child, item, below, level + 1)
            elif item is None and below is not None and child is not None:
                cost += child.erased  # the item's own weight is in `own` already
                self.tc += child.tc
        if erased_inner and planned.erased > cost:
            cost = planned.erased
        return cost


def _items(value: Any, depth: int) -> Sequence[Any]:
    """The items of a list field's value, inner lists flattened down to ``depth`` lists.

    A value that is not a list where one is expected (null included) is one item; lists
    nested deeper than the type are items too (not objects: they cost ``own``).
    """
    if not isinstance(value, list | tuple):
        return (value,)
    items: Sequence[Any] = value
    for _ in range(depth - 1):
        flat: list[Any] = []
        for item in items:
            if isinstance(item, list | tuple):
                flat.extend(item)
            else:
                flat.append(item)
        items = flat
    return items


# -- choosing the operation, reading variables ------------------------------------------


def select_operation(
    document: DocumentNode, operation_name: str | None
) -> tuple[OperationDefinitionNode, dict[str, FragmentDefinitionNode]]:
    """The operation to run (as graphql-core's executor chooses it) and the fragments by name."""
    operations: list[OperationDefinitionNode] = []
    fragments: dict[str, FragmentDefinitionNode] = {}
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode):
            operations.append(definition)
        elif isinstance(definition, FragmentDefinitionNode):
            fragments[definition.name.value] = definition
    if operation_name is None:
        if len(operations) == 1:
            return operations[0], fragments
        if not operations:
            raise OperationResolutionError("The document contains no operation to run.")
        raise OperationResolutionError(
            "The document contains several operations; an operation name is required."
        )
    for operation in operations:
        if operation.name is not None and operation.name.value == operation_name:
            return operation, fragments
    raise OperationResolutionError(f"Unknown operation named '{operation_name}'.")


def _check_variables(
    schema: GraphQLSchema, operation: OperationDefinitionNode, variables: Any
) -> dict[str, Any]:
    """Coerce ``variables`` as graphql-core does (errors raise); return them as sent,
    with the operation's defaults for those not sent: what the plan reads."""
    definitions = operation.variable_definitions
    if not definitions:
        return {}
    if variables is None:
        variables = {}
    elif not isinstance(variables, Mapping):
        raise InvalidVariables(
            f"Variables must be a JSON object, got {type(variables).__name__}.",
            locations=locations(operation),
        )
    result = get_variable_values(schema, definitions, dict(variables), max_errors=10)
    if isinstance(result, list):
        raise InvalidVariables(
            " ".join(error.message for error in result),
            locations=tuple(
                (loc.line, loc.column) for error in result for loc in error.locations or ()
            ),
        )
    return _values(operation, variables)


def _values(operation: OperationDefinitionNode, variables: Mapping[str, Any]) -> dict[str, Any]:
    """The variables as sent, and the operation's defaults for those not sent."""
    values: dict[str, Any] = {}
    for definition in operation.variable_definitions or ():
        name = definition.variable.name.value
        if name in variables:
            values[name] = variables[name]
        elif definition.default_value is not None:
            values[name] = _Builder.literal_of(definition.default_value, {}, None)
    return values


def locations(node: Any) -> tuple[tuple[int, int], ...]:
    loc = getattr(node, "loc", None)
    if loc is None:
        return ()
    token = loc.start_token
    return ((token.line, token.column),)


# -- the cache -----------------------------------------------------------------------


class _Document:
    """The plans of one (document, operation) under one compiled schema."""

    __slots__ = (
        "cached",
        "document",
        "fragments",
        "lock",
        "names",
        "operation",
        "state",
        "validated",
        "weight",
    )

    def __init__(
        self,
        document: DocumentNode,
        operation: OperationDefinitionNode,
        fragments: dict[str, FragmentDefinitionNode],
        tokens: int,
    ) -> None:
        self.document = document  # held: the key is its id
        self.operation = operation
        self.fragments = fragments
        # The operation's variables; the positions among them of those some plan of this
        # operation read, and the plans by their values, swapped together (under the
        # lock) when a plan reads a variable none read before.
        self.names = tuple(
            definition.variable.name.value for definition in operation.variable_definitions or ()
        )
        self.state: tuple[tuple[int, ...], dict[Any, Plan]] = ((), {})
        # Every variable value sent (frozen) that coerced without an error.
        self.validated: dict[Any, None] = {}
        self.lock = threading.Lock()
        # What the entry holds, in characters of the document and fields of its plans, and
        # whether the cache holds it.
        self.weight = tokens
        self.cached = False


class PlanCache:
    """The plans of one compiled schema: bounded in documents, and in what they hold
    (characters of the documents plus fields of their plans), the oldest dropped first."""

    __slots__ = ("_documents", "_lock", "_weight")

    def __init__(self) -> None:
        self._documents: dict[tuple[int, str | None], _Document] = {}
        self._lock = threading.Lock()
        self._weight = 0

    def get(self, document: DocumentNode, operation_name: str | None) -> _Document | None:
        entry = self._documents.get((id(document), operation_name))
        if entry is not None and entry.document is document:
            return entry
        return None

    def put(self, operation_name: str | None, entry: _Document) -> None:
        if entry.weight > _MAX_CACHED_SIZE:
            return
        with self._lock:
            documents = self._documents
            key = (id(entry.document), operation_name)
            before = documents.pop(key, None)
            if before is not None:
                before.cached = False
                self._weight -= before.weight
            documents[key] = entry
            entry.cached = True
            self._weight += entry.weight
            self._shrink()

    def grew(self, entry: _Document, by: int) -> None:
        """``entry`` holds ``by`` more (a plan added to it)."""
        with self._lock:
            entry.weight += by
            if entry.cached:
                self._weight += by
                self._shrink()

    def _shrink(self) -> None:
        documents = self._documents
        while documents and (len(documents) > _DOCUMENTS or self._weight > _CACHE_WEIGHT):
            dropped = documents.pop(next(iter(documents)))
            dropped.cached = False
            self._weight -= dropped.weight

    def __len__(self) -> int:
        return len(self._documents)

    @property
    def weight(self) -> int:
        """Characters of the documents and fields of the plans held."""
        return self._weight

    def clear(self) -> None:
        """Forget every plan (the next pricing of each document compiles it again)."""
        with self._lock:
            for entry in self._documents.values():
                entry.cached = False
            self._documents = {}
            self._weight = 0


def document_size(document: DocumentNode) -> int:
    """The length of ``document``'s text: at least its number of lexical tokens, so a
    bound of what it holds (without locations: too large to keep)."""
    loc = document.loc
    return len(loc.source.body) if loc is not None else _MAX_CACHED_SIZE + 1


def plan_for(
    compiled: CompiledSchema,
    document: DocumentNode,
    operation_name: str | None,
    variables: Mapping[str, Any] | None,
) -> Plan:
    """The plan of ``operation_name`` in ``document`` for ``variables``, cached.

    A plan is reused for the same document object (the gate hands the same parsed
    document to repeated query texts), the same operation and the same values of the
    variables it read (``@skip`` / ``@include`` conditions, slicing arguments, arguments
    with a cost); the other variables are coerced once per distinct value sent, as
    graphql-core coerces them, so that invalid ones are refused as before. Values too
    large to keep (over 256 scalars) are coerced and planned each time.

    Raises:
        CostAnalysisError: the operation cannot be chosen or planned (see ``analyze``).
    """
    cache = compiled.plans
    entry = cache.get(document, operation_name)
    if entry is None:
        operation, fragments = select_operation(document, operation_name)
        entry = _Document(document, operation, fragments, document_size(document))
        cache.put(operation_name, entry)
    operation = entry.operation
    if not operation.variable_definitions:
        plan = entry.state[1].get(())
        if plan is None:
            builder = _Builder(compiled, entry.fragments, {}, static=False)
            plan = builder.plan(operation)
            entry.state[1][()] = plan
            cache.grew(entry, builder.count)
        return plan
    sent: Mapping[str, Any] = variables if isinstance(variables, Mapping) else {}
    # Each declared variable's value as sent (_MISSING: not sent), frozen once: the
    # validated set is keyed by all of them, a plan by those it read.
    sent_values = tuple(_freeze(sent[name]) if name in sent else _MISSING for name in entry.names)
    positions, plans = entry.state
    key = tuple([sent_values[i] for i in positions]) if positions else ()
    plan = plans.get(key) if _UNKEPT not in key else None
    kept = _UNKEPT not in sent_values
    if plan is not None and kept and sent_values in entry.validated:
        return plan
    values = _check_variables(compiled.schema, operation, variables)
    if kept:
        _bounded(entry.validated, _VALIDATED_PER_DOCUMENT)[sent_values] = None
    if plan is not None:
        return plan
    builder = _Builder(compiled, entry.fragments, values, static=False)
    plan = builder.plan(operation)
    with entry.lock:
        positions, plans = entry.state
        read = {entry.names.index(name) for name in builder.reads if name in entry.names}
        if not read <= set(positions):
            positions = tuple(sorted(read | set(positions)))
            plans = {}
            entry.state = (positions, plans)
        key = tuple([sent_values[i] for i in positions]) if positions else ()
        stored = _UNKEPT not in key
        if stored:
            _bounded(plans, _PLANS_PER_DOCUMENT)[key] = plan
    if stored:
        cache.grew(entry, builder.count)
    return plan


def _bounded(found: dict[Any, Any], size: int) -> dict[Any, Any]:
    """``found``, its oldest entries dropped to make room for one more."""
    while len(found) >= size:
        try:
            del found[next(iter(found))]
        except (KeyError, RuntimeError, StopIteration):  # another thread got there first
            break
    return found


def build_plan(
    compiled: CompiledSchema,
    operation: OperationDefinitionNode,
    fragments: dict[str, FragmentDefinitionNode],
    *,
    static: bool = False,
) -> Plan:
    """Plan ``operation`` without variable values (validation time): variables take
    their declared defaults; unknown fields, types and fragments and fragment cycles are
    left to graphql-core's validation rules. Not cached."""
    values = _values(operation, {}) if static else {}
    return _Builder(compiled, fragments, values, static=static).plan(operation)


def _freeze(value: Any, budget: list[int] | None = None) -> Any:
    """A hashable image of a JSON value that tells ``1``, ``1.0`` and ``true`` apart, or
    ``_UNKEPT`` when it holds more than 256 scalars, containers and keys (or one that is
    not hashable): such values are not worth keeping (and could fill memory)."""
    cls = value.__class__
    if budget is None and (cls is str or cls is int or value is None):
        return value if cls is not int else (int, value)  # the common case, at once
    if budget is None:
        budget = [_FREEZE_BUDGET]
        found = _freeze(value, budget)
        return _UNKEPT if budget[0] < 0 else found
    budget[0] -= 1
    if budget[0] < 0:
        return _UNKEPT
    cls = value.__class__
    if cls is str or value is None:
        return value
    if cls is dict or isinstance(value, Mapping):
        return (dict, tuple((k, _freeze(v, budget)) for k, v in value.items()))
    if cls is list or cls is tuple:
        return (list, tuple(_freeze(v, budget) for v in value))
    try:
        hash(value)
    except TypeError:
        budget[0] = -1
        return _UNKEPT
    return (cls, value)


# -- building a plan -------------------------------------------------------------------

# A field node collected for a response key: the node, the type it is read on (its
# enclosing selection set's type), and the fragment it was written in (for cycles).
_Entry = tuple[FieldNode, "CompiledType", "str | None"]
# sizedFields below a field: the names (a name mapped to None is sized, a name mapped to
# a tree passes the size further down), the size and whether a slicing argument gave it.
_Sized = tuple[Mapping[str, Any], float, bool] | None


class _Collected:
    """A selection set's fields, as ``CollectFields`` merges them: the field nodes by
    response key, and the keys of fields that cost nothing (whether aliased, whether
    ``__typename``)."""

    __slots__ = ("groups", "leaf_aliases", "leaves")

    def __init__(self) -> None:
        self.groups: dict[str, list[_Entry]] = {}
        self.leaves: dict[str, tuple[bool, bool]] = {}
        self.leaf_aliases = 0


class _Builder:
    """Plans one operation: collects fields as the executor does, sizes and prices them."""

    __slots__ = (
        "compiled",
        "count",
        "directive_costs",
        "fragments",
        "free_leaves",
        "in_progress",
        "memo",
        "reads",
        "selections",
        "static",
        "types",
        "values",
    )

    def __init__(
        self,
        compiled: CompiledSchema,
        fragments: dict[str, FragmentDefinitionNode],
        values: dict[str, Any],
        *,
        static: bool,
    ) -> None:
        self.compiled = compiled
        self.types = compiled.types
        self.directive_costs = compiled.directive_costs
        self.fragments = fragments
        self.values = values
        self.static = static
        self.reads: set[str] = set()
        self.memo: dict[Any, Field] = {}
        self.selections: dict[Any, Selection] = {}
        self.count = 0  # fields planned
        self.in_progress: dict[Any, str | None] = {}
        self.free_leaves = True  # count fields that cost nothing rather than plan them

    def plan(self, operation: OperationDefinitionNode) -> Plan:
        operation_type: OperationType = operation.operation.value
        root_type = self.compiled.schema.get_root_type(operation.operation)
        if root_type is None:
            raise InvalidQuery(
                f"The schema does not support {operation_type} operations.",
                locations=locations(operation),
            )
        root = self.types[root_type.name]
        # Root fields are all planned, free or not: root-field quotas count each one.
        self.free_leaves = False
        collected = self._collect(root, root, [(operation.selection_set, root, None)], 1)
        self.free_leaves = True
        selection = self._selection_of(collected, root, None, 1)
        root_fields = len(collected.groups) + len(collected.leaves)
        return Plan(self.compiled, operation, selection, root_fields, root.weight)

    # -- collecting (graphql-core's CollectFields) ------------------------------------

    def _collect(
        self,
        runtime: CompiledType | None,
        lookup: CompiledType | None,
        selection_sets: Sequence[tuple[SelectionSetNode, CompiledType, str | None]],
        level: int,
    ) -> _Collected:
        """The fields an object of ``runtime`` (None: any possible type) runs, by response
        key: each selection set read on its type, written in a fragment (or None).

        Fields read on ``lookup`` (None: on the type they were selected on) that cost
        nothing whatever they return are only counted, as ``leaves``.
        """
        collected = _Collected()
        visited: set[str] = set()
        for selection_set, scope, origin in selection_sets:
            self._gather(runtime, lookup, scope, selection_set, collected, visited, (), origin,
                         level)  # fmt: skip
        return collected

    def _gather(
        self,
        runtime: CompiledType | None,
        lookup: CompiledType | None,
        scope: CompiledType,
        selection_set: SelectionSetNode,
        collected: _Collected,
        visited: set[str],
        spreading: tuple[str, ...],
        origin: str | None,
        level: int,
    ) -> None:
        groups, leaves = collected.groups, collected.leaves
        fields = (lookup or scope).fields
        directive_costs = self.directive_costs
        if level > MAX_NESTING:
            raise QueryTooDeep(
                level,
                MAX_NESTING,
                message=f"Selections are nested more than {MAX_NESTING} levels deep"
                " (fields, fragments and inline fragments together)",
                locations=locations(selection_set),
            )
        for selection in selection_set.selections:
            if selection.directives and not self._included(selection.directives):
                continue
            if selection.__class__ is FieldNode:  # (hot: the exact class, as graphql-core makes it)
                name = selection.name.value
                key = selection.alias.value if selection.alias is not None else name
                found = groups.get(key)
                if found is not None:
                    found.append((selection, scope, origin))
                    continue
                if key in leaves:
                    continue  # the same free field again (validation: the same field)
                compiled = fields.get(name)
                if (
                    (
                        compiled.free_leaf
                        and self.free_leaves
                        and not (directive_costs and selection.directives)
                    )
                    if compiled is not None
                    else name == "__typename"
                ):
                    aliased = selection.alias is not None
                    leaves[key] = (aliased, name == "__typename")
                    if aliased:
                        collected.leaf_aliases += 1
                else:
                    groups[key] = [(selection, scope, origin)]
            elif selection.__class__ is InlineFragmentNode:
                condition = scope
                if selection.type_condition is not None:
                    name = selection.type_condition.name.value
                    found_type = self.types.get(name)
                    if found_type is None:
                        self._unknown_type(name, selection)
                        continue
                    condition = found_type
                if runtime is not None and runtime.name not in condition.possible:
                    continue
                self._gather(
                    runtime, lookup, condition, selection.selection_set, collected, visited,
                    spreading, origin, level + 1,
                )  # fmt: skip
            else:
                spread = cast("FragmentSpreadNode", selection)
                name = spread.name.value
                if name in spreading:
                    self._cycle(name, spreading, spread)
                    continue
                if name in visited:
                    continue
                definition = self.fragments.get(name)
                if definition is None:
                    if not self.static:
                        raise InvalidQuery(
                            f"Unknown fragment '{name}'.", locations=locations(spread)
                        )
                    continue
                condition_name = definition.type_condition.name.value
                found_type = self.types.get(condition_name)
                if found_type is None:
                    self._unknown_type(condition_name, definition)
                    continue
                if runtime is not None and runtime.name not in found_type.possible:
                    continue
                visited.add(name)
                self._gather(
                    runtime, lookup, found_type, definition.selection_set, collected, visited,
                    (*spreading, name), name, level + 1,
                )  # fmt: skip

    def _narrows(
        self, parent: CompiledType, selection_sets: Sequence[SelectionSetNode], seen: set[str]
    ) -> bool:
        """Whether a fragment below ``parent`` (an interface or union) applies to some of
        its possible types only: then each possible type runs its own fields."""
        possible = parent.possible
        for selection_set in selection_sets:
            for selection in selection_set.selections:
                if isinstance(selection, FieldNode):
                    continue
                if isinstance(selection, InlineFragmentNode):
                    if selection.type_condition is not None:
                        condition = self.types.get(selection.type_condition.name.value)
                        if condition is None or not possible <= condition.possible:
                            return True
                    if self._narrows(parent, (selection.selection_set,), seen):
                        return True
                    continue
                name = cast("FragmentSpreadNode", selection).name.value
                if name in seen:
                    continue
                seen.add(name)
                definition = self.fragments.get(name)
                if definition is None:
                    continue
                condition = self.types.get(definition.type_condition.name.value)
                if condition is None or not possible <= condition.possible:
                    return True
                if self._narrows(parent, (definition.selection_set,), seen):
                    return True
        return False

    # -- planning ---------------------------------------------------------------------

    def _selection_of(
        self,
        collected: _Collected,
        runtime: CompiledType | None,
        sized: _Sized,
        level: int,
    ) -> Selection:
        fields: list[Field] = []
        for key, entries in collected.groups.items():
            planned = self._field(key, entries, runtime, sized, level)
            if planned is not None:
                fields.append(planned)
        leaves = collected.leaves
        if fields:
            return Selection(tuple(fields), leaves=len(leaves), leaf_aliases=collected.leaf_aliases)
        return _free_selection(len(leaves), collected.leaf_aliases)

    def _children(
        self,
        child: CompiledType,
        entries: list[_Entry],
        sized: _Sized,
        level: int,
    ) -> Selection:
        if len(entries) == 1 and not child.abstract:  # the common case, inlined
            node, _, origin = entries[0]
            if node.selection_set is None:
                return _EMPTY
            collected = _Collected()
            self._gather(child, child, child, node.selection_set, collected, set(), (), origin,
                         level)  # fmt: skip
            return self._selection_of(collected, child, sized, level)
        sets = [
            (node.selection_set, child, origin)
            for node, _, origin in entries
            if node.selection_set is not None
        ]
        if not sets:
            return _EMPTY
        if not child.abstract:
            return self._selection_of(self._collect(child, child, sets, level), child, sized,
                                      level)  # fmt: skip
        if not self._narrows(child, [s[0] for s in sets], set()):
            return self._selection_of(self._collect(None, None, sets, level), None, sized, level)
        # Fragments narrow by type: each possible type runs its own fields. They are read
        # on the type they were selected on (the interface's own definition for fields
        # outside `... on T`), so that the possible types share them: nested interfaces
        # plan in linear time.
        # Every field below is planned once (the memo), whatever path reaches it: the
        # possible types select mostly the same nodes. Selections equal in their nodes are
        # one object, so the walk can remember what an object costs under each.
        sized_key = None if sized is None else (id(sized[0]), sized[1])
        by_type: dict[str, Selection] = {}
        typename: dict[str, bool] = {}
        identities = []
        per_type = []
        for type_name in sorted(child.possible):
            collected = self._collect(self.types[type_name], None, sets, level)
            for key in collected.groups:
                typename[key] = False  # some field other than __typename answers it
            for key, (_, is_typename) in collected.leaves.items():
                typename[key] = typename.get(key, True) and is_typename
            identity = (
                tuple((key, *(id(e[0]) for e in found)) for key, found in collected.groups.items()),
                tuple(collected.leaves),
                sized_key,
            )
            identities.append(identity)
            per_type.append((type_name, identity, collected))
        whole = (child.name, tuple(identities))
        found_whole = self.selections.get(whole)
        if found_whole is not None:
            return found_whole
        for type_name, identity, collected in per_type:
            selection = self.selections.get(identity)
            if selection is None:
                selection = self._selection_of(collected, None, sized, level)
                self.selections[identity] = selection
            by_type[type_name] = selection
        keys = tuple(key for key, only in typename.items() if only)
        result = self.selections[whole] = Selection((), by_type, keys)
        return result

    def _field(
        self,
        key: str,
        entries: list[_Entry],
        runtime: CompiledType | None,
        sized: _Sized,
        level: int,
    ) -> Field | None:
        """The field an object of ``runtime`` runs for ``key``, read on ``runtime``'s own
        definition as the executor reads it (``Mutation.export`` however a fragment on an
        interface spells it); below an interface or a union (``runtime`` None), on the
        type it was selected on."""
        node, scope, origin = entries[0]
        if runtime is not None:
            scope = runtime
        name = node.name.value
        compiled = scope.fields.get(name)
        if compiled is None:
            if name != "__typename" and not self.static:
                raise InvalidQuery(
                    f"Cannot query field '{name}' on type '{scope.name}'.",
                    locations=locations(node),
                )
            return None
        # A node written in a fragment may be reached along several paths (a DAG: plan
        # it once) or around a cycle, and so may one below an interface or a union (each
        # possible type reaches it); one written in the operation on objects, only once.
        shared = origin is not None or runtime is None or len(entries) > 1
        if shared:
            sized_key = None if sized is None else (id(sized[0]), sized[1])
            memo_key = (scope.name, *(id(entry[0]) for entry in entries), sized_key)
            found = self.memo.get(memo_key)
            if found is not None:
                return found
            walking = memo_key[:-1]
            if walking in self.in_progress:
                through = tuple(n for n in self.in_progress.values() if n)
                self._cycle(origin or name, through, node)
                return None
        # The field's own list size: sized by its parent's sizedFields, or its own.
        if sized is not None and sized[0].get(name, _MISSING) is None:
            n, sliced = sized[1], sized[2]  # the field the parent's slice sizes
        elif not compiled.is_list:
            n, sliced = 1.0, False
        elif compiled.sized_tree is None:
            n, sliced = self._list_size(compiled, node)
        else:
            n, sliced = compiled.fixed_size, False  # the slice sizes its children (IBM §8.3)
        size_below: _Sized = None
        if sized is not None and (below := sized[0].get(name)) is not None:
            size_below = (below, sized[1], sized[2])  # the slice applies further down
        if compiled.sized_tree is not None:
            slice_size, slice_given = self._list_size(compiled, node)
            size_below = (compiled.sized_tree, slice_size, slice_given)
        args = 0.0
        if compiled.arg_costs:
            args = self._argument_cost(compiled.arg_costs, node.arguments)
        if self.directive_costs:
            args += max(self._directive_cost(entry[0]) for entry in entries)
        child: Selection | None = None
        child_type = compiled.child
        if child_type is not None:
            if shared:
                self.in_progress[walking] = origin
                try:
                    child = self._children(child_type, entries, size_below, level + 1)
                finally:
                    del self.in_progress[walking]
            else:
                child = self._children(child_type, entries, size_below, level + 1)
        planned = Field(key, node, compiled, n, sliced, args, child, node.alias is not None)
        self.count += 1
        if shared:
            self.memo[memo_key] = planned
        return planned

    def _list_size(self, compiled: CompiledField, node: FieldNode) -> tuple[float, bool]:
        """The size a field's slicing arguments give, and whether the query gave it."""
        slicing = compiled.slicing
        if not slicing:
            return compiled.fixed_size, False
        if len(slicing) == 1 and not compiled.require_one and compiled.int_paths:
            # The common case: one Int slicing argument, given as a literal in range.
            path = slicing[0][0]
            for argument in node.arguments or ():
                if len(path) == 1 and argument.name.value == path[0]:
                    literal = argument.value
                    if isinstance(literal, IntValueNode):
                        number = int(literal.value)
                        if 0 <= number <= _INT_MAX:
                            return float(number), True
                    break
        written: dict[str, ValueNode] = {}
        for argument in node.arguments or ():
            written[argument.name.value] = argument.value
        size: float | None = None
        given = found = nulls = 0
        for path, default in slicing:
            top = path[0]
            value_node = written.get(top)
            value: Any = _MISSING
            if value_node is not None:
                value = self.literal(value_node)
            if value is _MISSING:
                value = default  # not written, or a variable not sent: the schema default
                from_query = False
            else:
                from_query = True
            if len(path) > 1:
                # Into input objects, an input field not given taking its schema default.
                for part, part_default in zip(
                    path[1:], compiled.nested_defaults[path], strict=True
                ):
                    if not isinstance(value, Mapping):
                        value = _MISSING
                        break
                    value = value.get(part, part_default)
            if value is None and from_query:
                if path in compiled.required_paths and not self.static:
                    raise InvalidArgument(
                        f"Argument '{top}' of '{compiled.coordinate}' has an invalid value:"
                        " null for a non-null argument.",
                        locations=locations(value_node),
                    )
                nulls += 1
            if value is _MISSING or value is None:
                continue  # an explicit null slices nothing: the assumed size applies
            measured = self._size(compiled, path, value, value_node)
            found += 1
            given += from_query
            if size is None or measured > size:
                size = measured
        if compiled.require_one and (given > 1 or found == 0):
            if self.static and given == 0:
                return compiled.fixed_size, False
            names = ", ".join(f"'{'.'.join(path)}'" for path, _ in slicing)
            null = f"; {nulls} null, which sizes nothing" if nulls else ""
            raise SlicingArgumentRequired(
                f"Field '{compiled.coordinate}' requires exactly one of the arguments"
                f" {names} (got {given}{null}).",
                locations=locations(node),
            )
        if size is None:
            fallback = compiled.slicing_fallback
            return (compiled.fixed_size if fallback is None else fallback), False
        return size, given > 0

    def _size(
        self,
        compiled: CompiledField,
        path: tuple[str, ...],
        value: Any,
        value_node: ValueNode | None,
    ) -> float:
        name = ".".join(path)
        if path in compiled.list_paths:
            # A list's length; one value where a list is expected is a list of one.
            return float(len(value)) if isinstance(value, list) else 1.0
        if path in compiled.int_paths and value_node.__class__ is not VariableNode:
            # A literal graphql-core would refuse (a variable's value was coerced to its
            # own type already: it sizes as any value does).
            if value.__class__ is not int or not _INT_MIN <= value <= _INT_MAX:
                shown = "a list" if isinstance(value, list) else str(value)
                raise InvalidArgument(
                    f"Argument '{name}' of '{compiled.coordinate}' has an invalid value"
                    f" {shown}: Int cannot represent non-integer or non 32-bit signed"
                    " integer value.",
                    locations=locations(value_node),
                )
            if value >= 0:
                return float(value)
        size = list_size_value(value)
        if size is None or not math.isfinite(size):
            raise InvalidArgument(
                f"Argument '{name}' of '{compiled.coordinate}' sizes a list,"
                f" but {value!r} is not a number.",
                locations=locations(value_node),
            )
        if size < 0:
            raise InvalidArgument(
                f"Argument '{name}' of '{compiled.coordinate}' must not be negative"
                f" (got {value!r}).",
                locations=locations(value_node),
            )
        return size

    def _argument_cost(
        self, costs: dict[str, InputCost], arguments: tuple[ArgumentNode, ...] | None
    ) -> float:
        """What the ``arguments`` written cost (of a field, or of a directive's use)."""
        total = 0.0
        for argument in arguments or ():
            cost = costs.get(argument.name.value)
            if cost is not None:
                value = self.literal(argument.value)
                if value is not _MISSING:
                    total += input_cost(cost, value, 0)
        return total

    def _directive_cost(self, node: FieldNode) -> float:
        total = 0.0
        for directive in node.directives or ():
            costs = self.directive_costs.get(directive.name.value)
            if costs is not None:
                total += self._argument_cost(costs, directive.arguments)
        return total

    # -- values -----------------------------------------------------------------------

    def literal(self, node: ValueNode) -> Any:
        """A value of the document as JSON, variables read (``_MISSING``: not sent)."""
        return self.literal_of(node, self.values, self.reads)

    @staticmethod
    def literal_of(node: ValueNode, values: Mapping[str, Any], reads: set[str] | None) -> Any:
        cls = node.__class__
        if cls is IntValueNode:
            return int(cast("IntValueNode", node).value)
        if cls is VariableNode:
            name = cast("VariableNode", node).name.value
            if reads is not None:
                reads.add(name)
            return values.get(name, _MISSING)
        if cls is StringValueNode or cls is EnumValueNode:
            return cast("StringValueNode", node).value
        if cls is BooleanValueNode:
            return cast("BooleanValueNode", node).value
        if cls is FloatValueNode:
            return float(cast("FloatValueNode", node).value)
        if cls is ListValueNode:
            items = (
                _Builder.literal_of(item, values, reads)
                for item in cast("ListValueNode", node).values
            )
            return [None if item is _MISSING else item for item in items]
        if cls is ObjectValueNode:
            found: dict[str, Any] = {}
            for entry in cast("ObjectValueNode", node).fields:
                item = _Builder.literal_of(entry.value, values, reads)
                if item is not _MISSING:
                    found[entry.name.value] = item
            return found
        return None  # NullValueNode

    def _included(self, directives: tuple[DirectiveNode, ...]) -> bool:
        """``@skip`` / ``@include`` with the request's variables (unknown values include)."""
        for directive in directives:
            name = directive.name.value
            if name != "skip" and name != "include":  # noqa: PLR1714  (hot path)
                continue
            for argument in directive.arguments or ():
                if argument.name.value != "if":
                    continue
                value = self.literal(argument.value)
                if isinstance(value, bool) and value == (name == "skip"):
                    return False
        return True

    # -- errors -----------------------------------------------------------------------

    def _unknown_type(self, name: str, node: Any) -> None:
        if not self.static:
            raise InvalidQuery(f"Unknown type '{name}'.", locations=locations(node))

    def _cycle(self, name: str, through: Sequence[str], node: Any) -> None:
        if self.static:
            return
        names = ", ".join(sorted(set(through) | {name}))
        raise FragmentCycle(
            f"Fragment '{name}' spreads itself (through {names}).", locations=locations(node)
        )


def input_cost(cost: InputCost, value: Any, depth: int) -> float:
    """What an argument's (or input field's) value costs: its weight, and the weights of
    the input fields it uses (an input object weighs 1 unless ``@cost`` says otherwise,
    a list weighs its items, a null nothing)."""
    if value is None:
        return 0.0
    if depth > MAX_NESTING:
        raise InvalidArgument(f"An input value is nested more than {MAX_NESTING} levels deep.")
    kind = cost.kind
    total = cost.weight
    if kind == 1:  # a list
        item = cast("InputCost", cost.item)
        if isinstance(value, list | tuple):
            for entry in value:
                total += input_cost(item, entry, depth + 1)
        else:  # one value where a list is expected: a list of one
            total += input_cost(item, value, depth + 1)
    elif kind == 2 and isinstance(value, Mapping):  # an input object
        fields = cost.fields
        for name, entry in value.items():
            found = fields.get(name)
            if found is not None:
                total += input_cost(found, entry, depth + 1)
    return total
