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
from quotaql.cost_analysis._nodes import (
    EMPTY,
    FREE,
    MAX_NESTING,
    Field,
    Selection,
    abstract_selection,
    free_selection,
    new_field,
    new_selection,
)
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
__all__ = ["Builder", "build_plan", "input_cost"]

# GraphQL `Int` is 32-bit: a larger literal for an Int argument fails coercion.
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_MISSING: Any = NO_VALUE  # a variable not sent, a slicing argument with no value
_NO_NAMES: frozenset[str] = frozenset()
_FREE_COUNT = len(FREE)

# A field node collected for a response key: the node, the type it is read on (its
# enclosing selection set's type), and the fragment it was written in (for cycles).
_Entry = tuple[FieldNode, "CompiledType", "str | None"]
# The field nodes of one response key: the node alone in the common case (one node,
# written in the operation, read on the runtime type: no tuple nor list to make), else
# the list of its entries.
_Group = FieldNode | list[_Entry]
# sizedFields below a field: the names (a name mapped to None is sized, a name mapped to
# a tree passes the size further down), the size and whether a slicing argument gave it.
_Sized = tuple[Mapping[str, Any], float, bool] | None


class _Collected:
    """A selection set's fields, as ``CollectFields`` merges them: the field nodes by
    response key, the keys of fields that cost nothing (each mapped to whether it is
    ``__typename``) and how many of those are aliased."""

    __slots__ = ("groups", "leaf_aliases", "leaves")

    def __init__(self) -> None:
        self.groups: dict[str, _Group] = {}
        self.leaves: dict[str, bool] = {}
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
        kind = operation.operation
        for entry in self.compiled.operations:
            if entry[0] is kind:
                _, operation_type, root, weight = entry
                break
        else:  # not an operation type of graphql-core's
            raise InvalidQuery(f"Unknown operation type {kind!r}.", locations=locations(operation))
        if root is None:
            raise InvalidQuery(
                f"The schema does not support {operation_type} operations.",
                locations=locations(operation),
            )
        # Root fields are all planned, free or not: root-field quotas count each one.
        self.free_leaves = False
        groups: dict[str, _Group] = {}
        leaves: dict[str, bool] = {}
        leaf_aliases = self._gather(root, root, root, operation.selection_set, groups, leaves,
                                    None, (), None, 1)  # fmt: skip
        self.free_leaves = True
        selection = self._selection_of(groups, leaves, leaf_aliases, root, None, 1)
        root_fields = len(groups) + len(leaves)
        return Plan(self.compiled.model, operation, operation_type, weight, selection,
                    root_fields, root.weight)  # fmt: skip

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
        groups, leaves = collected.groups, collected.leaves
        visited: set[str] = set()
        for selection_set, scope, origin in selection_sets:
            collected.leaf_aliases += self._gather(
                runtime, lookup, scope, selection_set, groups, leaves, visited, (), origin, level
            )
        return collected

    def _gather(
        self,
        runtime: CompiledType | None,
        lookup: CompiledType | None,
        scope: CompiledType,
        selection_set: SelectionSetNode,
        groups: dict[str, _Group],
        leaves: dict[str, bool],
        visited: set[str] | None,
        spreading: tuple[str, ...],
        origin: str | None,
        level: int,
    ) -> int:
        """Collect ``selection_set`` into ``groups`` and ``leaves`` (see ``_collect``);
        the number of aliased fields it added to ``leaves``. ``visited``: the fragments
        spread so far (None: none yet, made at the first spread)."""
        if level > MAX_NESTING:
            raise QueryTooDeep(
                level,
                MAX_NESTING,
                message=f"Selections are nested more than {MAX_NESTING} levels deep"
                " (fields, fragments and inline fragments together)",
                locations=locations(selection_set),
            )
        on = lookup or scope
        # Free fields are planned as counts only below the root (root-field quotas count
        # each root field): a field named here costs nothing whatever it returns.
        free = on.free_names if self.free_leaves else _NO_NAMES
        directive_costs = self.directive_costs
        leaf_aliases = 0
        for selection in selection_set.selections:
            directives = selection.directives
            if directives and not self._included(directives):
                continue
            if selection.__class__ is FieldNode:  # (hot: the exact class, as graphql-core makes it)
                name = selection.name.value
                alias = selection.alias
                key = name if alias is None else alias.value
                if key in groups:
                    found = groups[key]
                    if isinstance(found, FieldNode):  # a second node: a list of them
                        found = groups[key] = [(found, on, None)]
                    found.append((selection, scope, origin))
                    continue
                if key in leaves:
                    continue  # the same free field again (validation: the same field)
                if name in free and not (directive_costs and directives):
                    leaves[key] = False
                elif name == "__typename" and name not in on.fields:
                    leaves[key] = True
                elif lookup is not None and origin is None:
                    groups[key] = selection  # read on the runtime type (see _Group)
                    continue
                else:
                    groups[key] = [(selection, scope, origin)]
                    continue
                if alias is not None:
                    leaf_aliases += 1
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
                if visited is None:
                    visited = set()  # shared with the fragments below, spread or inline
                leaf_aliases += self._gather(
                    runtime, lookup, condition, selection.selection_set, groups, leaves,
                    visited, spreading, origin, level + 1,
                )  # fmt: skip
            else:
                spread = cast("FragmentSpreadNode", selection)
                name = spread.name.value
                if name in spreading:
                    self._cycle(name, spreading, spread)
                    continue
                if visited is None:
                    visited = set()
                elif name in visited:
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
                leaf_aliases += self._gather(
                    runtime, lookup, found_type, definition.selection_set, groups, leaves,
                    visited, (*spreading, name), name, level + 1,
                )  # fmt: skip
        return leaf_aliases

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
        groups: dict[str, _Group],
        leaves: dict[str, bool],
        leaf_aliases: int,
        runtime: CompiledType | None,
        sized: _Sized,
        level: int,
    ) -> Selection:
        fields: list[Field] = []
        for key, entries in groups.items():
            planned = self._field(key, entries, runtime, sized, level)
            if planned is not None:
                fields.append(planned)
        if fields:
            return new_selection(fields, len(leaves), leaf_aliases)
        return free_selection(len(leaves), leaf_aliases)

    def _children(
        self,
        child: CompiledType,
        entries: list[_Entry],
        sized: _Sized,
        level: int,
    ) -> Selection:
        """The selections of a field of type ``child`` whose nodes are ``entries``, but
        for one node of an object type (``_field`` plans that one itself)."""
        sets = [
            (node.selection_set, child, origin)
            for node, _, origin in entries
            if node.selection_set is not None
        ]
        if not sets:
            return EMPTY
        if not child.abstract:
            found = self._collect(child, child, sets, level)
            return self._selection_of(
                found.groups, found.leaves, found.leaf_aliases, child, sized, level
            )
        if not self._narrows(child, [s[0] for s in sets], set()):
            found = self._collect(None, None, sets, level)
            return self._selection_of(
                found.groups, found.leaves, found.leaf_aliases, None, sized, level
            )
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
            for key, is_typename in collected.leaves.items():
                typename[key] = typename.get(key, True) and is_typename
            identity = (
                tuple(
                    (key, *(id(e[0]) for e in cast("list[_Entry]", found)))
                    for key, found in collected.groups.items()
                ),
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
                selection = self._selection_of(
                    collected.groups, collected.leaves, collected.leaf_aliases, None, sized, level
                )
                self.selections[identity] = selection
            by_type[type_name] = selection
        keys = tuple(key for key, only in typename.items() if only)
        result = self.selections[whole] = abstract_selection(by_type, keys)
        return result

    def _field(
        self,
        key: str,
        group: _Group,
        runtime: CompiledType | None,
        sized: _Sized,
        level: int,
    ) -> Field | None:
        """The field an object of ``runtime`` runs for ``key``, read on ``runtime``'s own
        definition as the executor reads it (``Mutation.export`` however a fragment on an
        interface spells it); below an interface or a union (``runtime`` None), on the
        type it was selected on."""
        # A node written in a fragment may be reached along several paths (a DAG: plan
        # it once) or around a cycle, and so may one below an interface or a union (each
        # possible type reaches it); one written in the operation on objects, only once.
        if isinstance(group, list):
            entries = group
            node, scope, origin = entries[0]
            if runtime is not None:
                scope = runtime
            shared = origin is not None or runtime is None or len(entries) > 1
        else:  # the common case: one node, written in the operation, read on ``runtime``
            assert runtime is not None  # (gathered with a lookup type: see _Group)
            node, scope, origin, shared = group, runtime, None, False
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
        size_below: _Sized = None
        if sized is None and compiled.sized_tree is None:  # the common case: its own size
            if not compiled.is_list:
                n, sliced = 1.0, False
            else:
                # The commonest list: one argument, its Int slicing argument, a literal in
                # range (read here, without a call); any other, by _own_size.
                n, sliced, arguments = -1.0, True, node.arguments
                if arguments and len(arguments) == 1 and compiled.int_slice is not None:
                    argument = arguments[0]
                    literal = argument.value
                    if (
                        literal.__class__ is IntValueNode
                        and argument.name.value == compiled.int_slice
                        and 0 <= (number := int(literal.value)) <= _INT_MAX
                    ):
                        n = float(number)
                if n < 0.0:
                    n, sliced = self._own_size(compiled, node)
        else:
            n, sliced, size_below = self._sizes(compiled, node, name, sized)
        args = 0.0
        if compiled.arg_costs:
            args = self._argument_cost(compiled.arg_costs, node.arguments)
        if self.directive_costs:
            if shared:
                args += max(self._directive_cost(entry[0]) for entry in entries)
            else:
                args += self._directive_cost(node)
        child: Selection | None = None
        child_type = compiled.child
        if child_type is not None:
            if shared:
                self.in_progress[walking] = origin
                try:
                    child = self._children(child_type, entries, size_below, level + 1)
                finally:
                    del self.in_progress[walking]
            elif child_type.abstract:
                child = self._children(child_type, [(node, scope, origin)], size_below, level + 1)
            elif node.selection_set is None:
                child = EMPTY
            else:  # the common case: one node, of an object type, its selections collected
                groups: dict[str, _Group] = {}
                leaves: dict[str, bool] = {}
                below = level + 1
                leaf_aliases = self._gather(child_type, child_type, child_type,
                                            node.selection_set, groups, leaves, None, (),
                                            None, below)  # fmt: skip
                fields: list[Field] = []
                for child_key, child_entries in groups.items():
                    planned = self._field(child_key, child_entries, child_type, size_below, below)
                    if planned is not None:
                        fields.append(planned)
                leaf_count = len(leaves)
                if fields:
                    child = new_selection(fields, leaf_count, leaf_aliases)
                elif not leaf_aliases and leaf_count < _FREE_COUNT:
                    child = FREE[leaf_count]  # (free_selection's common case, without a call)
                else:
                    child = free_selection(leaf_count, leaf_aliases)
        self.count += 1
        made = new_field(key, node, compiled, n, sliced, args, child, node.alias is not None)
        if shared:
            self.memo[memo_key] = made
        return made

    def _own_size(self, compiled: CompiledField, node: FieldNode) -> tuple[float, bool]:
        """A list field's size when nothing above sizes it: its slicing arguments'."""
        name = compiled.int_slice
        if name is None:
            return self._list_size(compiled, node)
        # The common case: one Int slicing argument, written once, as a literal in range
        # or a variable sent as a non-negative integer.
        first = last = None
        for argument in node.arguments or ():
            if argument.name.value == name:
                last = argument.value
                if first is None:
                    first = last
        if first is not None:
            if first.__class__ is IntValueNode:
                number = int(first.value)
                if 0 <= number <= _INT_MAX:
                    return float(number), True
            elif first.__class__ is VariableNode and last is first:
                variable = first.name.value
                self.reads.add(variable)
                value = self.values.get(variable, _MISSING)
                if value.__class__ is int and value >= 0:
                    return float(value), True
        return self._list_size(compiled, node)

    def _sizes(
        self, compiled: CompiledField, node: FieldNode, name: str, sized: _Sized
    ) -> tuple[float, bool, _Sized]:
        """The field's list size, whether a slicing argument gave it, and the size its
        sizedFields pass further down (its own or its parent's)."""
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
        return n, sliced, size_below

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
