"""A plan built from a document: fields collected as the executor collects them, sized and priced.

:class:`Builder` walks the operation's selection sets once per runtime type that runs
them (``CollectFields``), resolves each field's list size from its slicing arguments,
prices its arguments and directives, and builds the plan's nodes bottom-up; a field
group reached along several paths is planned once (the plan is a DAG).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from graphql import (
    FieldNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    IntValueNode,
    VariableNode,
)

from quotaql.cost_analysis._compile import NO_VALUE, list_size_value
from quotaql.cost_analysis._nodes import EMPTY, MAX_NESTING, Field, Selection, free_selection
from quotaql.cost_analysis.operation import literal_of, locations, variable_values
from quotaql.cost_analysis.plan import Plan
from quotaql.errors import (
    FragmentCycle,
    IntrospectionDisabled,
    InvalidArgument,
    InvalidQuery,
    QueryTooDeep,
    SlicingArgumentRequired,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from graphql import FragmentDefinitionNode, OperationDefinitionNode, SelectionSetNode
    from graphql.language import ArgumentNode, DirectiveNode, ValueNode

    from quotaql.cost_analysis._compile import (
        CompiledField,
        CompiledSchema,
        CompiledType,
        InputCost,
    )
    from quotaql.cost_analysis.model import OperationType

__all__ = ["Builder", "build_plan", "input_cost"]

# GraphQL `Int` is 32-bit: a larger literal for an Int argument fails coercion.
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_MISSING: Any = NO_VALUE  # a variable not sent, a slicing argument with no value

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


class Builder:
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
        return Plan(self.compiled.model, operation, selection, root_fields, root.weight)

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
        return free_selection(len(leaves), collected.leaf_aliases)

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
                return EMPTY
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
            return EMPTY
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
        if compiled.disabled:
            raise IntrospectionDisabled(
                f"Introspection is disabled on this server: '{name}' cannot be queried.",
                locations=locations(node),
            )
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
        given = found = nulls = from_query_nulls = 0
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
            if value is None:
                if from_query and path in compiled.required_paths and not self.static:
                    raise InvalidArgument(
                        f"Argument '{top}' of '{compiled.coordinate}' has an invalid value:"
                        " null for a non-null argument.",
                        locations=locations(value_node),
                    )
                # A null slices nothing: a resolver's `items[:first]` returns them all.
                nulls += 1
                from_query_nulls += from_query
                continue
            if value is _MISSING:
                continue  # not given: the assumed size applies
            measured = self._size(compiled, path, value, value_node)
            found += 1
            given += from_query
            if size is None or measured > size:
                size = measured
        if compiled.require_one and (given > 1 or found == 0):
            if self.static and given == 0 and from_query_nulls == 0:
                return compiled.fixed_size, False
            names = ", ".join(f"'{'.'.join(path)}'" for path, _ in slicing)
            null = f"; {from_query_nulls} null, which sizes nothing" if from_query_nulls else ""
            raise SlicingArgumentRequired(
                f"Field '{compiled.coordinate}' requires exactly one of the arguments"
                f" {names} (got {given}{null}).",
                locations=locations(node),
            )
        if size is None:
            if nulls:
                # Only nulls: the list's upper bound. (Beside a size, as Relay clients send
                # `first: 10, last: null`, a null bounds nothing and the size applies.)
                return compiled.null_size, True
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
        return literal_of(node, self.values, self.reads)

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
    values = variable_values(operation, {}) if static else {}
    return Builder(compiled, fragments, values, static=static).plan(operation)
