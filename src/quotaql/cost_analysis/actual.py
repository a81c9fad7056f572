"""``actual_cost``: the cost of an operation that ran, from the ``data`` it returned.

:func:`~quotaql.cost_analysis.analyze` prices an operation before it runs, assuming every
list is as long as the query allows. After execution the real lengths are known: the actual
cost applies the same formula to the response, so that a limiter can refund the difference
(Shopify's model: charge the estimate up front, give back ``estimate - actual``).

Per field, with ``args`` and ``own`` read from the same compiled tables as the analyzer::

    list field:     max(0, args + Σ over the returned items of (own + cost(selections, item)))
    non-list field: max(0, args + own + cost(selections, value))

- A field absent from ``data`` (skipped by ``@skip`` / ``@include``, or never reached)
  costs 0. A field whose value is null costs ``args + own``: its resolver ran, its children
  did not. A null item of a list costs ``own``; so does a value that is not an object where
  an object is expected. A value that is not a list where a list is expected is one item.
  Nested lists (``[[T]]``) count every item of the inner lists.
- Unless an error erased it (``errors``): a null, or a missing field, whose response path
  is a prefix of (or is) some error's path is what the error left of work that may have
  run, and costs its estimate, the analyzer's price of that field and its whole subtree
  (never less than a null costs); a null list item so erased costs the item's estimate
  (``own`` and its selections at the assumed sizes), and a field with an inner list so
  erased (``[[T]]``) at least its estimate. ``data`` null after a field error (one with a
  path) is the whole operation erased: the estimate. What no error's path goes through
  costs what the data shows.
- ``sizedFields`` and slicing arguments play no part (but in the estimates of what errors
  erased): the real lengths are in the data.
- Each field of the document counts on its own, as in the analyzer: two fields with the same
  response key (merged into one key of ``data`` by the executor) read the same value and
  both count.
- On an interface or a union, an item's ``__typename`` field (under its name or an alias)
  names its type, when the selection set selects it and no other field under the same
  response key (``__typename: label`` names nothing, nor does ``t`` where ``t: label`` is
  selected too, in any fragment). Without it the item costs the most any possible type
  makes of it. Fragments whose type condition does not hold for the item's type count
  nothing.
- Introspection and ``__typename`` cost what the analyzer says (``model.introspection``).

When every returned list (counting the items of nested lists together, and a null in place
of a list as one item) is no longer than the size the analyzer assumed for it, the actual
cost, errors or not, is at most the analyzer's; at exactly those sizes, with no nulls (and,
on interfaces and unions, items of the type the analyzer found the most expensive), it is
equal. Whatever resolver raises, it is at least the cost of what ran (the resolvers
invoked, each its ``args`` and ``own`` per item it returned) when lists are no longer than
assumed: what an error erased is charged as the analyzer priced it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentSpreadNode,
    GraphQLList,
    GraphQLWrappingType,
    InlineFragmentNode,
    SelectionSetNode,
)

from quotaql.cost_analysis._compile import compiled_schema, graphql_schema
from quotaql.cost_analysis.analyzer import (
    MAX_NESTING,
    _coerce_variables,
    _finite,
    _locations,
    _Pricer,
    parse_document,
    select_operation,
)
from quotaql.cost_analysis.model import CostLimits, CostModel
from quotaql.errors import FragmentCycle, QueryTooDeep

if TYPE_CHECKING:
    from collections.abc import Sequence

    from graphql import FragmentDefinitionNode, GraphQLSchema, OperationDefinitionNode

    from quotaql._graphql_compat import VariableValues
    from quotaql.cost_analysis._compile import CompiledField, CompiledSchema, CompiledType
    from quotaql.cost_analysis.analyzer import _Sized
    from quotaql.cost_analysis.model import OperationType

__all__ = ["actual_cost"]

_DEFAULT_MODEL = CostModel()
_NO_LIMITS = CostLimits()
_MISSING: Any = object()


def actual_cost(
    schema: Any,
    document: str | DocumentNode,
    data: Any,
    variables: Mapping[str, Any] | None = None,
    operation_name: str | None = None,
    model: CostModel = _DEFAULT_MODEL,
    *,
    errors: Sequence[Any] | None = None,
) -> float:
    """The cost of the selected operation of ``document``, computed from what it returned.

    Example:
        >>> from graphql import build_schema
        >>> schema = build_schema(
        ...     "type Query { users(first: Int = 10): [User] } type User { id: ID }"
        ... )
        >>> query = "{ users(first: 3) { id } }"
        >>> actual_cost(schema, query, {"users": [{"id": "1"}, {"id": "2"}]})
        2.0

        The analyzer charged 3 up front (three users); two came back.

        An error erases what it nulls: were ``id`` non-null in a list of non-null users,
        an error in the first user's ``id`` would null the list, charged 3 (its estimate),
        not 1. An error that nulls ``data`` leaves the whole estimate charged.

        >>> from graphql import GraphQLError
        >>> erased = [GraphQLError("no", path=["users", 0, "id"])]
        >>> actual_cost(schema, query, {"users": None}, errors=erased)
        3.0
        >>> actual_cost(schema, query, None, errors=[GraphQLError("no", path=["users"])])
        3.0

    Args:
        schema: a ``graphql.GraphQLSchema``, a ``strawberry.Schema`` or a ``graphene.Schema``.
        document: the query text, or an already parsed ``DocumentNode``.
        data: the response's ``data`` (``ExecutionResult.data``), keyed by response keys
            (aliases). ``None`` costs 0 when nothing ran (no error with a path), the
            estimate after a field error; a value that is not an object costs the
            operation weight only.
        variables: the request's raw JSON variables (for ``@skip`` / ``@include``).
        operation_name: which operation ran when the document has several.
        model: weights and defaults, the same as given to ``analyze``.
        errors: the execution's errors (``ExecutionResult.errors``): ``GraphQLError``
            objects, or the dicts of a JSON response; only their ``path`` is read (a list of
            response keys and list indexes). What is null or missing at a path that is a
            prefix of, or is, an error's path was erased by the error and costs its
            estimate (see the module's documentation); errors without a path (request
            errors: nothing ran) change nothing. Read only when not empty.

    Returns:
        The operation weight plus the cost of the root selections, as a finite number
        ``>= 0`` (like :attr:`CostReport.cost <quotaql.cost_analysis.CostReport.cost>`).

    Raises:
        CostAnalysisError: the operation cannot be chosen (``OperationResolutionError``),
            the variables do not fit (``InvalidVariables``), the text is not GraphQL
            (``QuerySyntaxError``), a fragment spreads itself (``FragmentCycle``), or a
            pre-parsed document nests deeper than the analyzer follows (``QueryTooDeep``).
            A subtree erased by an error raises what ``analyze`` raises for it (a slicing
            argument it refuses). Fields, fragments and types the schema does not know
            cost nothing.
        ConfigError: ``model`` names a coordinate that is not in ``schema``.
    """
    errs = _error_paths(errors) if errors else None
    if data is None and errs is None:
        return 0.0
    graphql = graphql_schema(schema)
    compiled = compiled_schema(graphql, model)
    if isinstance(document, str):
        document = parse_document(document)
    elif not isinstance(document, DocumentNode):
        raise TypeError(f"document must be a str or a DocumentNode, got {type(document).__name__}")
    operation, fragments = select_operation(document, operation_name)
    variable_values = _coerce_variables(graphql, operation, variables)
    return _Counter(compiled, fragments, variable_values).count(operation, data, errs)


def _error_paths(errors: Sequence[Any]) -> _Trie | None:
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


class _Field:
    """One field node of the document, on its parent type, ready to price any value."""

    __slots__ = (
        "all_plans",
        "args",
        "by_type",
        "child",
        "compiled",
        "constant",
        "depth",
        "key",
        "node",
        "own",
        "parent",
        "plans",
        "selection_set",
        "typename_keys",
    )

    def __init__(
        self,
        key: str,
        compiled_field: CompiledField,
        args: float,
        depth: int,
        node: FieldNode,
        parent: CompiledType,
    ) -> None:
        self.key = key
        self.args = args
        # For the estimates of what errors erased: the node and the type it is read on.
        self.compiled = compiled_field
        self.node = node
        self.parent = parent
        self.own = compiled_field.own
        # How many lists wrap the named type: 0 for a non-list field, 2 for [[T]].
        self.depth = depth
        self.child: CompiledType | None = compiled_field.child
        self.selection_set = node.selection_set
        # The cost whatever the value, for leaves whose cost does not depend on it.
        self.constant: float | None = None
        if self.child is None and (depth == 0 or self.own == 0.0):
            cost = args + (self.own if depth == 0 else 0.0)
            self.constant = cost if cost > 0.0 else 0.0
        # The child's plans, compiled on first use: for a concrete child its only plan,
        # for an abstract one per possible type (by_type) and all of them (all_plans).
        self.plans: tuple[_Plan, ...] | None = None
        self.by_type: dict[str, tuple[_Plan, ...]] = {}
        self.all_plans: tuple[_Plan, ...] | None = None
        # The response keys that only a real __typename answers, on first use.
        self.typename_keys: tuple[str, ...] | None = None


class _Spread:
    """A fragment spread that applies to the plan's runtime type."""

    __slots__ = ("condition", "key", "node", "plan", "runtime", "selection_set")

    def __init__(
        self,
        node: FragmentSpreadNode,
        definition: FragmentDefinitionNode,
        condition: CompiledType,
        runtime: str,
    ) -> None:
        self.node = node
        # Memo key: a fragment's cost on an object depends on its name and the object's type.
        self.key = (node.name.value, runtime)
        self.selection_set = definition.selection_set
        self.condition = condition
        self.runtime = runtime
        self.plan: _Plan | None = None


# A selection set on one runtime type: its fields (inline fragments that apply flattened
# in, @skip / @include applied, free fields left out) and the fragment spreads that apply.
_Plan = tuple[_Field | _Spread, ...]
# The errors' paths as a tree: the keys and indexes that some error's path goes through.
_Trie = dict[str | int, "_Trie"]


class _Counter:
    """One operation's count over its data: one frame per level of the document."""

    __slots__ = (
        "entries",
        "estimates",
        "estimator",
        "fragments",
        "free",
        "in_progress",
        "plans",
        "pricer",
        "schema",
        "types",
        "variable_values",
        "weights",
    )

    def __init__(
        self,
        compiled: CompiledSchema,
        fragments: dict[str, FragmentDefinitionNode],
        variable_values: VariableValues | None,
    ) -> None:
        # The analyzer's own helpers: @skip / @include, argument weights, the root type.
        self.pricer = _Pricer(compiled, fragments, variable_values, _NO_LIMITS)
        self.schema: GraphQLSchema = compiled.schema
        self.types = compiled.types
        self.weights = compiled.model.operation_weights
        self.free = compiled.model.introspection == "free"
        self.fragments = fragments
        self.entries: dict[tuple[int, str], _Field | None] = {}
        self.plans: dict[tuple[int, str, str], _Plan] = {}
        self.in_progress: set[str] = set()
        self.variable_values = variable_values
        # For the estimates of what errors erased (error paths only): the analyzer's
        # pricer, lenient about what analyze would refuse, and its prices by node.
        self.estimator: _Pricer | None = None
        self.estimates: dict[Any, float] = {}

    def count(self, operation: OperationDefinitionNode, data: Any, errs: _Trie | None) -> float:
        operation_type: OperationType = operation.operation.value
        root = self.pricer._root_type(operation, operation_type)
        weight = self.weights[operation_type]
        selections = 0.0
        if data is None:  # a field error propagated to the root: every root field erased
            selections = self._selections_estimate(operation.selection_set, root, 1, None)
        elif isinstance(data, Mapping):
            plan = self._plan(operation.selection_set, root, root.name, 1)
            selections = self._eval((plan,), data, 1, None, errs, None)
        return _finite(weight + selections)

    # -- the walk over the data ----------------------------------------------------------

    def _eval(
        self,
        plans: tuple[_Plan, ...],
        obj: Mapping[str, Any],
        level: int,
        memo: dict[Any, float] | None,
        errs: _Trie | None,
        sized: _Sized,
    ) -> float:
        """The largest cost of ``obj`` under ``plans`` (one per type it may have).

        ``memo`` caches, for this one object, the cost of each field node and of each
        (fragment, type): with several candidate types the fields they share are priced
        once, and a fragment spread many times over ("fragment bomb") once per type.
        ``errs`` is the part of the error paths below ``obj`` (None when no error's path
        goes through it: the common case) and ``sized`` the analyzer's ``sizedFields``
        context of ``obj``'s fields, kept on error paths only.
        """
        if level > MAX_NESTING:
            raise QueryTooDeep(
                level,
                MAX_NESTING,
                message=f"Selections are nested more than {MAX_NESTING} levels deep"
                " (fields, fragments and inline fragments together)",
            )
        if memo is None and len(plans) > 1:
            memo = {}
        best = 0.0
        for plan in plans:
            total = 0.0
            for entry in plan:
                if isinstance(entry, _Spread):
                    spread = entry
                    if memo is None:
                        memo = {}
                    found = memo.get(spread.key)
                    if found is None:
                        found = self._spread(spread, obj, level, memo, errs, sized)
                        memo[spread.key] = found
                    total += found
                    continue
                field = entry
                value = obj.get(field.key, _MISSING)
                if errs is not None:
                    below = errs.get(field.key)
                    if below is not None:  # an error's path goes through this field
                        cost = memo.get(field) if memo is not None else None
                        if cost is None:
                            cost = self._on_error_path(field, value, below, level, sized)
                            if memo is not None:
                                memo[field] = cost
                        total += cost
                        continue
                if value is _MISSING:
                    continue
                cost = field.constant
                if cost is None:
                    if memo is not None:
                        cost = memo.get(field)
                        if cost is not None:
                            total += cost
                            continue
                    # Inlined rather than a method: one Python frame per level of nesting.
                    depth = field.depth
                    items: Sequence[Any]
                    if depth == 0:
                        items = (value,)
                    elif depth == 1 and value.__class__ is list:
                        items = value
                    else:
                        items = _items(value, depth)
                    own = field.own
                    cost = field.args
                    child = field.child
                    if child is None:
                        cost += own * len(items)
                    elif not child.abstract:
                        child_plans = field.plans
                        if child_plans is None:
                            child_plans = self._child_plans(field, child, level + 1)
                        for item in items:
                            if item.__class__ is dict or (
                                item is not None and isinstance(item, Mapping)
                            ):
                                cost += own + self._eval(
                                    child_plans, item, level + 1, None, None, None
                                )
                            else:
                                cost += own
                    else:
                        for item in items:
                            if item.__class__ is dict or (
                                item is not None and isinstance(item, Mapping)
                            ):
                                item_plans = self._abstract_plans(field, child, item, level + 1)
                                cost += own + self._eval(
                                    item_plans, item, level + 1, None, None, None
                                )
                            else:
                                cost += own
                    if not cost > 0.0:  # also NaN, as in the analyzer
                        cost = 0.0
                    if memo is not None:
                        memo[field] = cost
                total += cost
            best = max(best, total)
        return best

    def _spread(
        self,
        spread: _Spread,
        obj: Mapping[str, Any],
        level: int,
        memo: dict[Any, float],
        errs: _Trie | None,
        sized: _Sized,
    ) -> float:
        name = spread.key[0]
        if name in self.in_progress:
            through = ", ".join(sorted(self.in_progress))
            raise FragmentCycle(
                f"Fragment '{name}' spreads itself (through {through}).",
                locations=_locations(spread.node),
            )
        plan = spread.plan
        if plan is None:
            plan = self._plan(spread.selection_set, spread.condition, spread.runtime, level + 1)
            spread.plan = plan
        self.in_progress.add(name)
        try:
            return self._eval((plan,), obj, level + 1, memo, errs, sized)
        finally:
            self.in_progress.discard(name)

    def _child_plans(self, field: _Field, child: CompiledType, level: int) -> tuple[_Plan, ...]:
        plans = (self._plan(field.selection_set, child, child.name, level),)
        field.plans = plans
        return plans

    def _abstract_plans(
        self, field: _Field, child: CompiledType, item: Mapping[str, Any], level: int
    ) -> tuple[_Plan, ...]:
        """The plans for an item of an interface or union: its ``__typename``'s, or all."""
        by_type = field.by_type
        keys = field.typename_keys
        if keys is None:
            keys = field.typename_keys = self._typename_keys(field.selection_set)
        for key in keys:
            type_name = item.get(key)
            if type_name.__class__ is str:
                plans = by_type.get(type_name)
                if plans is not None:
                    return plans
                if type_name in child.possible:
                    plans = (self._plan(field.selection_set, child, type_name, level),)
                    by_type[type_name] = plans
                    return plans
        plans = field.all_plans
        if plans is None:
            every = (
                by_type.get(name) or (self._plan(field.selection_set, child, name, level),)
                for name in sorted(child.possible)
            )
            # Types that select the same fields share one plan: price it once.
            plans = tuple(dict.fromkeys(plan for found in every for plan in found))
            field.all_plans = plans
        return plans

    def _typename_keys(self, selection_set: SelectionSetNode | None) -> tuple[str, ...]:
        """The response keys of ``selection_set`` that only a real ``__typename`` answers.

        Its own fields, and those of every fragment in it, whatever their type conditions
        and directives: a key that some other field answers anywhere (``__typename: label``,
        or ``t: __typename`` for one type and ``t: label`` for another) names no type.
        """
        typename: list[str] = []
        other: set[str] = set()
        stack = [selection_set] if selection_set is not None else []
        seen: set[str] = set()
        while stack:
            for selection in stack.pop().selections:
                if isinstance(selection, FieldNode):
                    name = selection.name.value
                    key = selection.alias.value if selection.alias is not None else name
                    if name == "__typename":
                        typename.append(key)
                    else:
                        other.add(key)
                elif isinstance(selection, InlineFragmentNode):
                    stack.append(selection.selection_set)
                elif isinstance(selection, FragmentSpreadNode):
                    name = selection.name.value
                    definition = self.fragments.get(name)
                    if definition is not None and name not in seen:
                        seen.add(name)
                        stack.append(definition.selection_set)
        return tuple(key for key in dict.fromkeys(typename) if key not in other)

    # -- what errors erased ------------------------------------------------------------

    def _on_error_path(
        self, field: _Field, value: Any, errs: _Trie, level: int, sized: _Sized
    ) -> float:
        """The cost of a field some error's path goes through (``errs``: the paths below).

        Null or missing, the error erased it: its estimate (never less than a null costs).
        Otherwise as in :meth:`_eval`, but a null item an error erased costs the item's
        estimate, and a field with an erased inner list (``[[T]]``) at least its estimate.
        """
        own = field.own
        if value is _MISSING or value is None:
            estimate = self._field_estimate(field, level, sized)
            if value is None and field.args + own > estimate:
                return field.args + own
            return estimate
        depth = field.depth
        items: list[tuple[Any, _Trie | None]]
        erased_inner = False
        if depth == 0 or not isinstance(value, list | tuple):
            items = [(value, errs)]
        else:
            items = [(item, errs.get(index)) for index, item in enumerate(value)]
            for _ in range(depth - 1):
                flat: list[tuple[Any, _Trie | None]] = []
                for item, below in items:
                    if isinstance(item, list | tuple):
                        if below is None:
                            flat.extend((inner, None) for inner in item)
                        else:
                            flat.extend((inner, below.get(i)) for i, inner in enumerate(item))
                    else:
                        # Not a list: one item, as in _items. Null by an error, it
                        # held items nobody can count: the field costs its estimate.
                        erased_inner |= item is None and below is not None
                        flat.append((item, None if item is None else below))
                items = flat
        child = field.child
        child_sized = self._child_sized(field) if child is not None else None
        cost = field.args
        for item, below in items:
            if child is not None and (
                item.__class__ is dict or (item is not None and isinstance(item, Mapping))
            ):
                if child.abstract:
                    plans = self._abstract_plans(field, child, item, level + 1)
                else:
                    plans = field.plans or self._child_plans(field, child, level + 1)
                if below is None:
                    cost += own + self._eval(plans, item, level + 1, None, None, None)
                else:
                    cost += own + self._eval(plans, item, level + 1, None, below, child_sized)
            elif item is None and below is not None:
                cost += self._item_estimate(field, level)
            else:
                cost += own
        if not cost > 0.0:
            cost = 0.0
        if erased_inner:
            cost = max(cost, self._field_estimate(field, level, sized))
        return cost

    def _estimator(self) -> _Pricer:
        estimator = self.estimator
        if estimator is None:
            # static: unknown fields, types and fragments cost nothing, as in the count.
            estimator = self.estimator = _Pricer(
                self.pricer.compiled, self.fragments, self.variable_values, _NO_LIMITS, static=True
            )
        return estimator

    def _field_estimate(self, field: _Field, level: int, sized: _Sized) -> float:
        """What ``analyze`` charges for ``field`` and its whole subtree, in this place."""
        key = (field, sized)
        found = self.estimates.get(key)
        if found is None:
            alone = SelectionSetNode(selections=(field.node,))
            found = self._estimator()._walk(alone, field.parent, 1, level, 1.0, sized, None)[0]
            self.estimates[key] = found
        return found

    def _item_estimate(self, field: _Field, level: int) -> float:
        """What ``analyze`` charges for one item of ``field``: its own weight and selections."""
        found = self.estimates.get(field)
        if found is None:
            found = field.own
            if field.child is not None:
                found += self._selections_estimate(
                    field.selection_set, field.child, level + 1, self._child_sized(field)
                )
            self.estimates[field] = found
        return found

    def _selections_estimate(
        self,
        selection_set: SelectionSetNode | None,
        parent: CompiledType,
        level: int,
        sized: _Sized,
    ) -> float:
        base, cond, _ = self._estimator()._walk(selection_set, parent, 1, level, 1.0, sized, None)
        return base + (max(cond.values()) if cond else 0.0)

    def _child_sized(self, field: _Field) -> _Sized:
        """The analyzer's ``sizedFields`` context for the selections of ``field``."""
        compiled = field.compiled
        if compiled.sized_fields is None:
            return None
        return (compiled.sized_fields, self._estimator()._list_size(compiled, field.node))

    # -- plans ---------------------------------------------------------------------------

    def _plan(
        self, selection_set: SelectionSetNode | None, static: CompiledType, runtime: str, level: int
    ) -> _Plan:
        if selection_set is None:
            return ()
        key = (id(selection_set), static.name, runtime)
        plan = self.plans.get(key)
        if plan is None:
            collected: list[_Field | _Spread] = []
            self._collect(selection_set, static, runtime, collected, level)
            plan = self.plans[key] = tuple(collected)
        return plan

    def _collect(
        self,
        selection_set: SelectionSetNode,
        static: CompiledType,
        runtime: str,
        out: list[_Field | _Spread],
        level: int,
    ) -> None:
        """Add the entries of ``selection_set`` (on ``static``) for an object of ``runtime``."""
        for selection in selection_set.selections:
            if selection.directives and not self.pricer._included(selection.directives):
                continue
            if isinstance(selection, FieldNode):
                entry = self._field(selection, static)
                if entry is not None:
                    out.append(entry)
            elif isinstance(selection, InlineFragmentNode):
                condition = static
                if selection.type_condition is not None:
                    found = self.types.get(selection.type_condition.name.value)
                    if found is None:
                        continue
                    condition = found
                if runtime not in condition.possible:
                    continue
                if level + 1 > MAX_NESTING:
                    raise QueryTooDeep(
                        level + 1,
                        MAX_NESTING,
                        message=f"Selections are nested more than {MAX_NESTING} levels deep"
                        " (fields, fragments and inline fragments together)",
                        locations=_locations(selection),
                    )
                self._collect(selection.selection_set, condition, runtime, out, level + 1)
            elif isinstance(selection, FragmentSpreadNode):
                definition = self.fragments.get(selection.name.value)
                if definition is None:
                    continue
                on = self.types.get(definition.type_condition.name.value)
                if on is None or runtime not in on.possible:
                    continue
                out.append(_Spread(selection, definition, on, runtime))

    def _field(self, node: FieldNode, static: CompiledType) -> _Field | None:
        """The priced field node; None when it costs nothing whatever its value."""
        key = (id(node), static.name)
        if key in self.entries:
            return self.entries[key]
        entry: _Field | None = None
        name = node.name.value
        compiled_field = static.fields.get(name)
        free = self.free and (name.startswith("__") or static.name.startswith("__"))
        if compiled_field is not None and not free:  # else __typename, introspection, unknown
            args = (
                self.pricer._argument_cost(compiled_field, node)
                if compiled_field.arg_weights
                else 0.0
            )
            depth = _list_depth(self.schema, static.name, name) if compiled_field.is_list else 0
            response_key = node.alias.value if node.alias is not None else name
            entry = _Field(response_key, compiled_field, args, depth, node, static)
            if entry.constant == 0.0:
                entry = None
        self.entries[key] = entry
        return entry


def _list_depth(schema: GraphQLSchema, type_name: str, field_name: str) -> int:
    """How many lists wrap the type of ``type_name.field_name`` (at least 1 for a list)."""
    fields = getattr(schema.type_map.get(type_name), "fields", None) or {}
    definition = fields.get(field_name)
    if definition is None:
        return 1
    depth = 0
    type_ = definition.type
    while isinstance(type_, GraphQLWrappingType):
        if isinstance(type_, GraphQLList):
            depth += 1
        type_ = type_.of_type
    return max(depth, 1)


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
