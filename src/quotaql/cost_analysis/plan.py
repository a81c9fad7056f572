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
the operation and the values of the variables the plan read. A report reads its plan through
the plan's :class:`Pricing` (never the plan itself): the two form no reference cycle, so a
plan the cache drops is freed at once, without waiting for the garbage collector.

Per field, with ``n`` its list size (1 for a field that is not a list) and ``args`` the cost
of its arguments and directives (input objects and their fields included)::

    apollo:  cost(f) = max(0, n × own + args) + n × cost(selections)
    ibm:     field cost(f) = max(0, weight + args) + n × field cost(selections)
             type cost(f)  = n × (type weight + type cost(selections))

On an interface or a union the selections cost what the most expensive possible type makes
of them. docs/cost-model.md gives the rules with their sources.

Beside this module: ``_nodes`` (a plan's ``Field`` and ``Selection`` nodes), ``operation``
(the operation chosen, its variables and literals read), ``_builder`` (a plan built from a
document), ``_cache`` (plans kept per compiled schema; ``plan_for``, the way in) and
``_walk`` (a plan walked against the data).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from quotaql.cost_analysis._walk import Walker, error_paths

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from graphql import OperationDefinitionNode

    from quotaql.cost_analysis._nodes import Selection
    from quotaql.cost_analysis._walk import ListSize
    from quotaql.cost_analysis.model import CostModel, ModelName, OperationType

__all__ = ["CostReport", "Plan", "Pricing", "RootFieldCost", "deepest", "finite"]

_MAX_COST = sys.float_info.max


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
    _plan: Pricing | None = field(default=None, repr=False, compare=False)
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
        self, data: Any, errors: Sequence[Any] | None = None, sizes: list[ListSize] | None = None
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


def _setter(name: str) -> Callable[[CostReport, Any], None]:
    """The setter of ``CostReport``'s slot ``name`` (its member descriptor's ``__set__``)."""
    setter: Callable[[CostReport, Any], None] = vars(CostReport)[name].__set__
    return setter


_new: Any = object.__new__
_set_cost = _setter("cost")
_set_depth = _setter("depth")
_set_aliases = _setter("aliases")
_set_root_fields = _setter("root_fields")
_set_operation_type = _setter("operation_type")
_set_operation_name = _setter("operation_name")
_set_model = _setter("model")
_set_field_cost = _setter("field_cost")
_set_type_cost = _setter("type_cost")
_set_plan = _setter("_plan")
_set_by_coordinate = _setter("_by_coordinate")
_set_root_costs = _setter("_root_costs")


class Plan:
    """One operation planned for one set of variable values: its price, ready to reuse.

    The plan holds its report, and the report its :class:`Pricing` (what its
    ``actual``, ``by_coordinate`` and ``root_field_costs`` read), never the plan: they
    form no reference cycle, so a plan the cache drops (or never kept) is freed at once,
    not left to the garbage collector.
    """

    __slots__ = ("operation", "pricing", "report", "root")

    def __init__(
        self,
        model: CostModel,
        operation: OperationDefinitionNode,
        operation_type: OperationType,
        weight: float,
        root: Selection,
        root_fields: int,
        root_weight: float,
    ) -> None:
        """``weight``: the model's weight of an operation of ``operation_type``; ``root``
        its selections; ``root_weight``: the root type's weight (IBM type cost)."""
        self.operation = operation
        self.root = root
        ibm = model.model == "ibm"
        field_cost = weight + root.fc
        if not 0.0 < field_cost <= _MAX_COST:
            field_cost = finite(field_cost)
        type_cost = finite(weight + root_weight + root.tc) if ibm else None
        cost = max(field_cost, type_cost) if type_cost is not None else field_cost
        self.pricing = pricing = Pricing(root, weight, ibm, root_weight, cost)
        # A frozen dataclass sets each field through object.__setattr__ in its __init__;
        # one report is made per plan, so its slots are set through their descriptors
        # (a third of the time). Every field is set, as the dataclass's __init__ would.
        report: CostReport = _new(CostReport)
        self.report = report
        _set_cost(report, cost)
        _set_depth(report, root.depth or 1)  # the root selection set is at depth 1
        _set_aliases(report, root.aliases)
        _set_root_fields(report, root_fields)
        _set_operation_type(report, operation_type)
        _set_operation_name(report, operation.name.value if operation.name else None)
        _set_model(report, model.model)
        _set_field_cost(report, field_cost)
        _set_type_cost(report, type_cost)
        _set_plan(report, pricing)
        _set_by_coordinate(report, None)
        _set_root_costs(report, None)

    def actual(
        self, data: Any, errors: Sequence[Any] | None = None, sizes: list[ListSize] | None = None
    ) -> float:
        """The cost of what ran, from the ``data`` it returned (see :meth:`Pricing.actual`)."""
        return self.pricing.actual(data, errors, sizes)


class Pricing:
    """What a plan's report reads: the plan's selections, the operation's weight, the
    model, and the cost the plan priced."""

    __slots__ = ("cost", "ibm", "root", "root_weight", "weight")

    def __init__(
        self, root: Selection, weight: float, ibm: bool, root_weight: float, cost: float
    ) -> None:
        self.root = root
        self.weight = weight
        self.ibm = ibm
        self.root_weight = root_weight
        self.cost = cost

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
        self, data: Any, errors: Sequence[Any] | None = None, sizes: list[ListSize] | None = None
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
            return max(self.cost, finite(self.weight + self.root.erased))
        if data.__class__ is not dict and not isinstance(data, Mapping):
            return finite(self.weight)
        walker = Walker(sizes)
        try:
            cost = walker.objects(self.root, (data,), 1, 0.0, errs)
        except RecursionError:
            # Data nested deeper than the stack allows a walk of it: what ran cannot be
            # told, it is charged as estimated (nothing refunded).
            return self.cost
        if self.ibm:  # the larger of the field cost and the type cost
            type_cost = self.root_weight + walker.tc
            if type_cost > cost:  # noqa: PLR1730  (hot: no call)
                cost = type_cost
        cost += self.weight
        return cost if 0.0 < cost <= _MAX_COST else finite(cost)


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
