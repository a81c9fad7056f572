"""``analyze``: price one GraphQL operation before it runs, in time linear in its text."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLSchema,
    GraphQLSyntaxError,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionNode,
    SelectionSetNode,
    Undefined,
    VariableNode,
    parse,
    value_from_ast_untyped,
)

from quotaql._graphql_compat import (
    GRAPHQL_CORE_VERSION,
    HAS_PARSER_LIMITS,
    PARSER_NESTING,
    coerce_input_literal,
    get_variable_values,
)
from quotaql.cost_analysis._compile import (
    CompiledField,
    CompiledSchema,
    CompiledType,
    compiled_schema,
    graphql_schema,
    list_size_value,
)
from quotaql.cost_analysis.model import CostLimits, CostModel, OperationType
from quotaql.errors import (
    CostAnalysisError,
    FragmentCycle,
    InvalidArgument,
    InvalidQuery,
    InvalidVariables,
    OperationResolutionError,
    QuerySyntaxError,
    QueryTooComplex,
    QueryTooDeep,
    QueryTooLarge,
    SlicingArgumentRequired,
    TooManyAliases,
    TooManyRootFields,
)

if TYPE_CHECKING:
    from graphql.language import DirectiveNode, ValueNode

    from quotaql._graphql_compat import VariableValues

__all__ = [
    "MAX_NESTING",
    "CostReport",
    "RootFieldCost",
    "analyze",
    "check_model",
    "parse_document",
    "select_operation",
]

# Selection sets nested deeper than this (fields, inline fragments and fragment spreads
# together) are refused whatever the limits say: the walk recurses once per level.
MAX_NESTING = 256

_DEFAULT_MODEL = CostModel()
_NO_LIMITS = CostLimits()
# GraphQL `Int` is 32-bit: a larger literal for an Int argument fails coercion.
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_MAX_COST = sys.float_info.max
_TOO_MANY_TOKENS = re.compile(r"more than (\d+) (tokens|code points)")
_BRACES_STRINGS_COMMENTS = re.compile(r'"(?:[^"\\\n]|\\.)*"?|#[^\n]*|[{}]')
# How deep graphql-core's parser follows selection sets (it refuses deeper documents).
_PARSER_NESTING = PARSER_NESTING if PARSER_NESTING is not None else MAX_NESTING


class RootFieldCost(NamedTuple):
    """What the selections of one root field cost, summed over its aliases."""

    cost: float
    selections: int
    """How many times the operation selects it (each alias, each fragment that does)."""


@dataclass(frozen=True, slots=True)
class CostReport:
    """The price of one operation.

    Attributes:
        cost: the static upper-bound cost (operation weight + selections).
        depth: the deepest field nesting; root fields are at depth 1.
        aliases: aliased fields, counted with fragments expanded.
        root_fields: fields in the root selection set, fragments expanded.
        operation_type: ``"query"``, ``"mutation"`` or ``"subscription"``.
        operation_name: the operation's name, if it has one.
    """

    cost: float
    depth: int
    aliases: int
    root_fields: int
    operation_type: OperationType
    operation_name: str | None
    _explain: Callable[[], dict[str, float]] | None = field(default=None, repr=False, compare=False)
    _by_coordinate: dict[str, float] | None = field(default=None, repr=False, compare=False)
    _roots: Callable[[], dict[str, RootFieldCost]] | None = field(
        default=None, repr=False, compare=False
    )
    _root_costs: dict[str, RootFieldCost] | None = field(default=None, repr=False, compare=False)

    @property
    def by_coordinate(self) -> dict[str, float]:
        """Cost attributed to each schema coordinate (``"Query.users"``), largest first.

        A coordinate's share is its own weight (and argument weights) times the list
        sizes above it; on interfaces and unions only the most expensive possible type
        counts, as in :attr:`cost`. Computed on first access.
        """
        if self._by_coordinate is None:
            result = self._explain() if self._explain is not None else {}
            ordered = dict(sorted(result.items(), key=lambda item: (-item[1], item[0])))
            object.__setattr__(self, "_by_coordinate", ordered)
            object.__setattr__(self, "_explain", None)
        return cast("dict[str, float]", self._by_coordinate)

    @property
    def root_field_costs(self) -> dict[str, RootFieldCost]:
        """The cost of each root field's selections, by coordinate (``"Mutation.export"``).

        Every selection counts, however the operation reaches it: aliases, fragments and
        inline fragments on the root type (``@skip`` / ``@include`` evaluated); each
        field's cost is the one it adds to :attr:`cost`. Computed on first access, for
        the quotas of root fields.
        """
        if self._root_costs is None:
            found = self._roots() if self._roots is not None else {}
            object.__setattr__(self, "_root_costs", found)
            object.__setattr__(self, "_roots", None)
        return cast("dict[str, RootFieldCost]", self._root_costs)


def analyze(
    schema: Any,
    document: str | DocumentNode,
    variables: Mapping[str, Any] | None = None,
    operation_name: str | None = None,
    model: CostModel = _DEFAULT_MODEL,
    limits: CostLimits | None = None,
) -> CostReport:
    """Price the selected operation of ``document`` against ``schema``.

    Example:
        >>> from graphql import build_schema
        >>> schema = build_schema(
        ...     "type Query { users(first: Int = 10): [User] } type User { id: ID }"
        ... )
        >>> analyze(schema, "{ users(first: 3) { id } }").cost
        3.0

    Args:
        schema: a ``graphql.GraphQLSchema``, a ``strawberry.Schema`` or a ``graphene.Schema``.
        document: the query text, or an already parsed ``DocumentNode`` (not parsed again).
        variables: the request's raw JSON variables, coerced as graphql-core does.
        operation_name: which operation to price when the document has several.
        model: weights and defaults.
        limits: static limits; the first one crossed raises and stops the analysis.

    Raises:
        CostAnalysisError: a subclass with a stable ``code``: a limit crossed
            (``QueryTooComplex``, ``QueryTooDeep``, ``TooManyAliases``,
            ``TooManyRootFields``, ``QueryTooLarge``) or input that cannot be priced.
        ConfigError: ``model`` names a coordinate that is not in ``schema``.
    """
    graphql = graphql_schema(schema)
    compiled = compiled_schema(graphql, model)
    limits = limits or _NO_LIMITS
    if isinstance(document, str):
        document = parse_document(document, limits)
    elif not isinstance(document, DocumentNode):
        raise TypeError(f"document must be a str or a DocumentNode, got {type(document).__name__}")
    operation, fragments = select_operation(document, operation_name)
    variable_values = _coerce_variables(graphql, operation, variables)
    pricer = _Pricer(compiled, fragments, variable_values, limits)
    return pricer.price(operation)


def check_model(schema: Any, model: CostModel) -> None:
    """Check ``model`` against ``schema`` now rather than on the first request.

    Compiles (and caches) the weights of every field, so a server can refuse to start
    with a config that does not fit its schema.

    Raises:
        ConfigError: a weight names a type, field or argument the schema does not have
            (with the closest real coordinates), or a directive has an invalid value.
    """
    compiled_schema(graphql_schema(schema), model)


def price_operation(
    compiled: CompiledSchema,
    operation: OperationDefinitionNode,
    fragments: dict[str, FragmentDefinitionNode],
    limits: CostLimits,
) -> CostReport:
    """Price ``operation`` without variable values (validation-time, static analysis).

    Variables count with their default values, or are ignored where a value is needed
    (``@skip``/``@include`` include, a list takes its assumed size); unknown fields and
    fragment cycles are left to graphql-core's own validation rules.
    """
    return _Pricer(compiled, fragments, None, limits, static=True).price(operation)


def parse_document(source: str, limits: CostLimits = _NO_LIMITS) -> DocumentNode:
    """Parse ``source`` within the parser limits of ``limits``.

    Raises:
        QuerySyntaxError: not GraphQL (``locations`` has the line and column).
        QueryTooLarge: more tokens than ``max_tokens`` or characters than ``max_length``.
        QueryTooDeep: nested deeper than the parser can follow.
    """
    try:
        if not HAS_PARSER_LIMITS:  # < 3.2.14: CostLimits refused max_tokens / max_length
            return parse(source)
        return parse(
            source,
            max_lexical_tokens=limits.max_tokens,
            max_source_length=limits.max_length,
        )
    except RecursionError:
        pass
    except GraphQLSyntaxError as error:
        locations = tuple((loc.line, loc.column) for loc in error.locations or ())
        message = error.message.removeprefix("Syntax Error: ")
        too_many = _TOO_MANY_TOKENS.search(message)
        if too_many is not None:
            tokens = too_many.group(2) == "tokens"
            limit = limits.max_tokens if tokens else limits.max_length
            unit = "lexical tokens" if tokens else "characters"
            return _raise(
                QueryTooLarge(
                    int(too_many.group(1)) + 1,
                    limit if limit is not None else int(too_many.group(1)),
                    message=f"The document has more than {too_many.group(1)} {unit}",
                    locations=locations,
                )
            )
        if "nested too deeply" in message:
            depth = _brace_depth(source)
            if limits.max_depth is not None and depth > limits.max_depth:
                return _raise(QueryTooDeep(depth, limits.max_depth, locations=locations))
            return _raise(
                QueryTooDeep(
                    depth,
                    _PARSER_NESTING,
                    message=f"The document nests selections {depth} levels deep; the parser"
                    f" follows at most {_PARSER_NESTING}",
                    locations=locations,
                )
            )
        return _raise(QuerySyntaxError(message, locations=locations))
    # A parser without a nesting guard (graphql-core < 3.2.14) ran out of stack. Out of
    # the except clause, so that the frames of the exhausted stack are not kept alive.
    depth = _brace_depth(source)
    if limits.max_depth is not None and depth > limits.max_depth:
        return _raise(QueryTooDeep(depth, limits.max_depth))
    return _raise(
        QueryTooDeep(
            depth,
            max(0, min(_PARSER_NESTING, depth - 1)),  # a limit the document exceeds
            message=f"The document is nested too deeply for graphql-core {GRAPHQL_CORE_VERSION}"
            f"'s parser ({depth} levels of selections)",
        )
    )


def _raise(error: CostAnalysisError) -> DocumentNode:
    raise error


def _brace_depth(source: str) -> int:
    """The deepest ``{`` nesting of ``source``, ignoring strings and comments (error path only).

    One pass of a regular expression whose alternatives never overlap, so it is linear
    even on hostile text (an unterminated string ends at its line's end).
    """
    depth = deepest = 0
    for token in _BRACES_STRINGS_COMMENTS.finditer(source):
        char = token.group()
        if char == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif char == "}":
            depth -= 1
    return deepest


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


def _coerce_variables(
    schema: GraphQLSchema, operation: OperationDefinitionNode, variables: Any
) -> VariableValues | None:
    definitions = operation.variable_definitions
    if not definitions:
        return None
    if variables is None:
        variables = {}
    elif not isinstance(variables, Mapping):
        raise InvalidVariables(
            f"Variables must be a JSON object, got {type(variables).__name__}.",
            locations=_locations(operation),
        )
    result = get_variable_values(schema, definitions, dict(variables), max_errors=10)
    if isinstance(result, list):
        raise InvalidVariables(
            " ".join(error.message for error in result),
            locations=tuple(
                (loc.line, loc.column) for error in result for loc in error.locations or ()
            ),
        )
    return result


def _locations(node: Any) -> tuple[tuple[int, int], ...]:
    loc = getattr(node, "loc", None)
    if loc is None:
        return ()
    token = loc.start_token
    return ((token.line, token.column),)


# A selection set's price, for the possible runtime types of its parent:
# ``base`` applies to every possible type, ``cond[t]`` only when the object is a ``t``.
# Concrete parents never have ``cond``. ``fields`` counts its fields (for root_fields).
_Price = tuple[float, dict[str, float] | None, int]
# A fragment spread's memo: the price, plus how deep below the spread it reaches and
# how many aliases it holds, both expanded.
_Fragment = tuple[float, dict[str, float] | None, int, int, int]
# The explaining walk: the price and attribution for all types, and per conditional type.
_Explained = tuple[
    float, dict[str, float] | None, dict[str, float], dict[str, dict[str, float]] | None
]
_Sized = tuple[frozenset[str], float] | None


class _Pricer:
    """One operation's walk: a direct recursion over the document, fragments priced once."""

    __slots__ = (
        "aliases",
        "compiled",
        "cost_limit",
        "deepest",
        "fragment_memo",
        "fragments",
        "in_progress",
        "limits",
        "model",
        "static",
        "types",
        "variable_values",
        "variables",
    )

    def __init__(
        self,
        compiled: CompiledSchema,
        fragments: dict[str, FragmentDefinitionNode],
        variable_values: VariableValues | None,
        limits: CostLimits,
        *,
        static: bool = False,
    ) -> None:
        self.compiled = compiled
        self.model = compiled.model
        self.types = compiled.types
        self.fragments = fragments
        self.variable_values = variable_values
        self.variables: dict[str, Any] = variable_values.coerced if variable_values else {}
        self.limits = limits
        # With negative weights a partial sum is no lower bound: check the total only.
        self.cost_limit = None if compiled.has_negative else limits.max_cost
        self.static = static
        self.aliases = 0
        self.deepest = 0
        self.fragment_memo: dict[Any, _Fragment] = {}
        self.in_progress: set[str] = set()

    # -- entry ---------------------------------------------------------------------------

    def price(self, operation: OperationDefinitionNode) -> CostReport:
        operation_type: OperationType = operation.operation.value
        root = self._root_type(operation, operation_type)
        if self.static:
            self.variables = _static_variables(operation)
        weight = self.model.operation_weights[operation_type]
        base, cond, root_fields = self._walk(
            operation.selection_set, root, 1, 1, 1.0, None, self.limits.max_root_fields
        )
        cost = _finite(weight + base + (max(cond.values()) if cond else 0.0))
        max_cost = self.limits.max_cost
        if max_cost is not None and not cost <= max_cost:
            raise QueryTooComplex(cost, max_cost, locations=_locations(operation))
        name = operation.name.value if operation.name else None
        return CostReport(
            cost=cost,
            depth=self.deepest,
            aliases=self.aliases,
            root_fields=root_fields,
            operation_type=operation_type,
            operation_name=name,
            _explain=lambda: self._explain_operation(operation, root),
            _roots=lambda: self._root_costs(operation, root),
        )

    def _root_type(
        self, operation: OperationDefinitionNode, operation_type: OperationType
    ) -> CompiledType:
        schema = self.compiled.schema
        root = schema.get_root_type(operation.operation)
        if root is None:
            raise InvalidQuery(
                f"The schema does not support {operation_type} operations.",
                locations=_locations(operation),
            )
        return self.types[root.name]

    # -- the fast walk -------------------------------------------------------------------

    def _walk(
        self,
        selection_set: SelectionSetNode | None,
        parent: CompiledType,
        depth: int,
        level: int,
        scale: float,
        sized: _Sized,
        max_fields: int | None,
    ) -> _Price:
        if selection_set is None:
            return 0.0, None, 0
        if level > MAX_NESTING:
            raise QueryTooDeep(
                level,
                MAX_NESTING,
                message=f"Selections are nested more than {MAX_NESTING} levels deep"
                " (fields, fragments and inline fragments together)",
                locations=_locations(selection_set),
            )
        if depth > self.deepest:
            self.deepest = depth
            max_depth = self.limits.max_depth
            if max_depth is not None and depth > max_depth:
                raise QueryTooDeep(depth, max_depth, locations=_locations(selection_set))
        base = 0.0
        cond: dict[str, float] | None = None
        count = 0
        fields = parent.fields
        cost_limit = self.cost_limit
        for selection in selection_set.selections:
            if selection.directives and not self._included(selection.directives):
                continue
            if isinstance(selection, FieldNode):
                count += 1
                if max_fields is not None and count > max_fields:
                    raise TooManyRootFields(count, max_fields, locations=_locations(selection))
                if selection.alias is not None:
                    self._count_aliases(1, selection)
                name = selection.name.value
                compiled_field = fields.get(name)
                if compiled_field is None:
                    if name == "__typename":
                        continue
                    self._unknown_field(parent, selection)
                    continue
                leaf = compiled_field.leaf_cost
                if leaf is not None and sized is None:
                    cost = leaf
                else:
                    # Inlined rather than a method: one Python frame less per level of
                    # nesting keeps deep documents cheap.
                    if sized is not None and name in sized[0]:
                        multiplier = sized[1]
                    elif compiled_field.is_list:
                        multiplier = self._list_size(compiled_field, selection)
                    else:
                        multiplier = 1.0
                    selections = 0.0
                    child = compiled_field.child
                    if child is not None:
                        child_sized: _Sized = None
                        if compiled_field.sized_fields is not None:
                            child_sized = (
                                compiled_field.sized_fields,
                                self._list_size(compiled_field, selection),
                            )
                        child_base, child_cond, _ = self._walk(
                            selection.selection_set,
                            child,
                            depth + 1,
                            level + 1,
                            scale * multiplier,
                            child_sized,
                            None,
                        )
                        selections = child_base + (max(child_cond.values()) if child_cond else 0)
                    cost = multiplier * (compiled_field.own + selections)
                    if compiled_field.arg_weights:
                        cost += self._argument_cost(compiled_field, selection)
                if cost > 0.0:
                    base += cost
                    if cost_limit is not None and base * scale > cost_limit:
                        self._stop_early(base * scale, cost_limit, selection, selection_set, level)
                continue
            if isinstance(selection, InlineFragmentNode):
                condition = self._condition(selection, parent)
                if condition is None:
                    continue
                price = self._walk(
                    selection.selection_set, condition, depth, level + 1, scale, sized, None
                )
            else:
                spread = cast("FragmentSpreadNode", selection)
                found = self._spread(spread, depth, level, scale, sized)
                if found is None:
                    continue
                price, condition = found
            count += price[2]
            if max_fields is not None and count > max_fields:
                raise TooManyRootFields(count, max_fields, locations=_locations(selection))
            base, cond = _merge(base, cond, parent, condition, price[0], price[1])
            if cost_limit is not None and base * scale > cost_limit:
                self._stop_early(base * scale, cost_limit, selection, selection_set, level)
        return base, cond, count

    def _stop_early(
        self,
        counted: float,
        cost_limit: float,
        selection: SelectionNode,
        selection_set: SelectionSetNode,
        level: int,
    ) -> None:
        """Stop: the cost counted so far is over the limit, so the whole operation is too.

        After the last root selection nothing is left to count: the final check in
        :meth:`price` then reports the exact cost instead of a lower bound.
        """
        if level == 1 and selection is selection_set.selections[-1]:
            return
        raise QueryTooComplex(
            _finite(counted), cost_limit, partial=True, locations=_locations(selection)
        )

    def _spread(
        self, spread: FragmentSpreadNode, depth: int, level: int, scale: float, sized: _Sized
    ) -> tuple[_Price, CompiledType] | None:
        name = spread.name.value
        definition = self.fragments.get(name)
        if definition is None:
            if self.static:
                return None
            raise InvalidQuery(f"Unknown fragment '{name}'.", locations=_locations(spread))
        condition = self.types.get(definition.type_condition.name.value)
        if condition is None:
            self._unknown_type(definition.type_condition.name.value, definition)
            return None
        key = name if sized is None else (name, sized)
        memo = self.fragment_memo.get(key)
        if memo is None:
            if name in self.in_progress:
                if self.static:
                    return None
                raise FragmentCycle(
                    f"Fragment '{name}' spreads itself"
                    f" (through {', '.join(sorted(self.in_progress))}).",
                    locations=_locations(spread),
                )
            self.in_progress.add(name)
            outer_deepest, outer_aliases = self.deepest, self.aliases
            self.deepest = depth - 1
            base, cond, count = self._walk(
                definition.selection_set, condition, depth, level + 1, scale, sized, None
            )
            memo = (base, cond, count, self.deepest - depth, self.aliases - outer_aliases)
            self.deepest = max(outer_deepest, self.deepest)
            self.in_progress.discard(name)
            self.fragment_memo[key] = memo
        else:
            reach = depth + memo[3]
            if reach > self.deepest:
                self.deepest = reach
                max_depth = self.limits.max_depth
                if max_depth is not None and reach > max_depth:
                    raise QueryTooDeep(reach, max_depth, locations=_locations(spread))
            if memo[4]:
                self._count_aliases(memo[4], spread)
        return (memo[0], memo[1], memo[2]), condition

    # -- pieces --------------------------------------------------------------------------

    def _count_aliases(self, added: int, node: Any) -> None:
        self.aliases += added
        max_aliases = self.limits.max_aliases
        if max_aliases is not None and self.aliases > max_aliases:
            raise TooManyAliases(self.aliases, max_aliases, locations=_locations(node))

    def _condition(self, fragment: InlineFragmentNode, parent: CompiledType) -> CompiledType | None:
        if fragment.type_condition is None:
            return parent
        name = fragment.type_condition.name.value
        condition = self.types.get(name)
        if condition is None:
            self._unknown_type(name, fragment)
        return condition

    def _unknown_type(self, name: str, node: Any) -> None:
        if not self.static:
            raise InvalidQuery(f"Unknown type '{name}'.", locations=_locations(node))

    def _unknown_field(self, parent: CompiledType, node: FieldNode) -> None:
        if not self.static:
            raise InvalidQuery(
                f"Cannot query field '{node.name.value}' on type '{parent.name}'.",
                locations=_locations(node),
            )

    def _included(self, directives: tuple[DirectiveNode, ...]) -> bool:
        """``@skip`` / ``@include`` with the request's variables (unknown values include)."""
        for directive in directives:
            name = directive.name.value
            if name != "skip" and name != "include":  # noqa: PLR1714  (hot path)
                continue
            for argument in directive.arguments or ():
                if argument.name.value != "if":
                    continue
                value_node = argument.value
                if isinstance(value_node, VariableNode):
                    value = self.variables.get(value_node.name.value)
                else:
                    value = getattr(value_node, "value", None)
                if isinstance(value, bool) and value == (name == "skip"):
                    return False
        return True

    def _list_size(self, compiled_field: CompiledField, node: FieldNode) -> float:
        slicing = compiled_field.slicing
        if not slicing:
            return compiled_field.fixed_size
        size: float | None = None
        given = 0
        for argument in node.arguments or ():
            name = argument.name.value
            if name in slicing:
                value = self._size_argument(compiled_field, name, argument.value)
                if value is not None:
                    given += 1
                    if size is None or value > size:
                        size = value
        if compiled_field.require_one and (
            given > 1 or (given == 0 and compiled_field.slicing_defaults is None)
        ):
            if self.static and given == 0:
                return compiled_field.fixed_size
            names = ", ".join(f"'{name}'" for name in slicing)
            raise SlicingArgumentRequired(
                f"Field '{compiled_field.coordinate}' requires exactly one of the arguments"
                f" {names} (got {given}).",
                locations=_locations(node),
            )
        if size is not None:
            return size
        if compiled_field.slicing_defaults is not None:
            return compiled_field.slicing_defaults
        return compiled_field.fixed_size

    def _size_argument(
        self, compiled_field: CompiledField, name: str, value_node: ValueNode
    ) -> float | None:
        """A slicing argument's value as a size; None when it is null or unknown."""
        value: Any
        node_class = value_node.__class__
        if node_class is IntValueNode and name in compiled_field.int_arguments:
            value = int(cast("IntValueNode", value_node).value)
            if 0 <= value <= _INT_MAX:
                return float(value)  # the common case, checked once
            if not _INT_MIN <= value <= _INT_MAX:
                raise InvalidArgument(
                    f"Argument '{name}' of '{compiled_field.coordinate}' has an invalid value"
                    f" {value}: Int cannot represent non 32-bit signed integer value.",
                    locations=_locations(value_node),
                )
        elif node_class is VariableNode:
            value = self.variables.get(cast("VariableNode", value_node).name.value)
        else:
            arg_type = compiled_field.arg_types[name]
            value = coerce_input_literal(value_node, arg_type, self.variable_values)
            if value is Undefined:
                if self.static:
                    return None
                raise InvalidArgument(
                    f"Argument '{name}' of '{compiled_field.coordinate}' has an invalid value.",
                    locations=_locations(value_node),
                )
        if value is None:
            return None
        size = list_size_value(value)
        if size is None or not math.isfinite(size):
            raise InvalidArgument(
                f"Argument '{name}' of '{compiled_field.coordinate}' sizes a list,"
                f" but {value!r} is not a number.",
                locations=_locations(value_node),
            )
        if size < 0:
            raise InvalidArgument(
                f"Argument '{name}' of '{compiled_field.coordinate}' must not be negative"
                f" (got {value!r}).",
                locations=_locations(value_node),
            )
        return size

    def _argument_cost(self, compiled_field: CompiledField, node: FieldNode) -> float:
        given = {argument.name.value for argument in node.arguments or ()}
        return sum(weight for name, weight in compiled_field.arg_weights if name in given)

    # -- explanation (by_coordinate), on demand ------------------------------------------

    def _root_costs(
        self, operation: OperationDefinitionNode, root: CompiledType
    ) -> dict[str, RootFieldCost]:
        # A pricer of its own: no limits to trip and no counters to disturb (depth and
        # aliases were counted by the walk that priced the operation).
        pricer = _Pricer(self.compiled, self.fragments, self.variable_values, _NO_LIMITS)
        pricer.static, pricer.variables = self.static, self.variables
        found: dict[str, RootFieldCost] = {}
        pricer._collect_roots(operation.selection_set, root, found, frozenset())
        return found

    def _collect_roots(
        self,
        selection_set: SelectionSetNode,
        root: CompiledType,
        found: dict[str, RootFieldCost],
        spreading: frozenset[str],
    ) -> None:
        for selection in selection_set.selections:
            if selection.directives and not self._included(selection.directives):
                continue
            if isinstance(selection, FieldNode):
                compiled_field = root.fields.get(selection.name.value)
                if compiled_field is None:
                    continue  # __typename, or a field validation refuses
                alone = SelectionSetNode(selections=(selection,))
                cost = self._walk(alone, root, 1, 1, 1.0, None, None)[0]
                before = found.get(compiled_field.coordinate, RootFieldCost(0.0, 0))
                found[compiled_field.coordinate] = RootFieldCost(
                    _finite(before.cost + cost), before.selections + 1
                )
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition
                if condition is None or self._reaches(condition.name.value, root):
                    self._collect_roots(selection.selection_set, root, found, spreading)
            else:
                name = cast("FragmentSpreadNode", selection).name.value
                definition = self.fragments.get(name)
                if (
                    definition is not None
                    and name not in spreading
                    and self._reaches(definition.type_condition.name.value, root)
                ):
                    self._collect_roots(definition.selection_set, root, found, spreading | {name})

    def _reaches(self, condition: str, root: CompiledType) -> bool:
        """A fragment on ``condition`` applies to ``root``: the root type itself, or an
        interface it implements or a union it belongs to."""
        if condition == root.name:
            return True
        compiled = self.types.get(condition)
        return compiled is not None and root.name in compiled.possible

    def _explain_operation(
        self, operation: OperationDefinitionNode, root: CompiledType
    ) -> dict[str, float]:
        self.fragment_memo.clear()
        explained_memo: dict[Any, _Explained] = {}
        _, cond, coords, cond_coords = self._explain(
            operation.selection_set, root, None, explained_memo
        )
        if cond and cond_coords:
            _add_scaled(coords, cond_coords[_argmax(cond)], 1.0)
        return {coordinate: _finite(cost) for coordinate, cost in coords.items() if cost}

    def _explain(
        self,
        selection_set: SelectionSetNode | None,
        parent: CompiledType,
        sized: _Sized,
        memo: dict[Any, _Explained],
    ) -> _Explained:
        base = 0.0
        cond: dict[str, float] | None = None
        coords: dict[str, float] = {}
        cond_coords: dict[str, dict[str, float]] | None = None
        if selection_set is None:
            return base, cond, coords, cond_coords
        for selection in selection_set.selections:
            if selection.directives and not self._included(selection.directives):
                continue
            if isinstance(selection, FieldNode):
                compiled_field = parent.fields.get(selection.name.value)
                if compiled_field is not None:
                    base += self._explain_field(compiled_field, selection, sized, memo, coords)
                continue
            if isinstance(selection, InlineFragmentNode):
                condition = self._condition(selection, parent)
                if condition is None:
                    continue
                part = self._explain(selection.selection_set, condition, sized, memo)
            else:
                spread = cast("FragmentSpreadNode", selection)
                definition = self.fragments.get(spread.name.value)
                if definition is None:
                    continue
                found = self.types.get(definition.type_condition.name.value)
                if found is None:
                    continue
                condition = found
                key = spread.name.value if sized is None else (spread.name.value, sized)
                cached = memo.get(key)
                if cached is None:
                    if spread.name.value in self.in_progress:
                        continue  # a cycle; only static analysis gets this far
                    self.in_progress.add(spread.name.value)
                    cached = self._explain(definition.selection_set, condition, sized, memo)
                    self.in_progress.discard(spread.name.value)
                    memo[key] = cached
                part = cached
            applies = _applies(parent, condition)
            if applies is None:  # the fragment covers every possible type of the parent
                base += part[0]
                _add_scaled(coords, part[2], 1.0)
                if part[1] and part[3]:
                    for type_name, extra in part[1].items():
                        if type_name in parent.possible:
                            cond = cond if cond is not None else {}
                            cond_coords = cond_coords if cond_coords is not None else {}
                            cond[type_name] = cond.get(type_name, 0.0) + extra
                            target = cond_coords.setdefault(type_name, {})
                            _add_scaled(target, part[3][type_name], 1.0)
            else:
                cond = cond if cond is not None else {}
                cond_coords = cond_coords if cond_coords is not None else {}
                for type_name in applies:
                    extra = part[1].get(type_name, 0.0) if part[1] else 0.0
                    cond[type_name] = cond.get(type_name, 0.0) + part[0] + extra
                    target = cond_coords.setdefault(type_name, {})
                    _add_scaled(target, part[2], 1.0)
                    if part[3] and type_name in part[3]:
                        _add_scaled(target, part[3][type_name], 1.0)
        if not parent.abstract and cond:
            # A concrete parent: the conditional parts that apply are certain.
            base += cond.get(parent.name, 0.0)
            if cond_coords and parent.name in cond_coords:
                _add_scaled(coords, cond_coords[parent.name], 1.0)
            cond, cond_coords = None, None
        return base, cond, coords, cond_coords

    def _explain_field(
        self,
        compiled_field: CompiledField,
        node: FieldNode,
        sized: _Sized,
        memo: dict[Any, _Explained],
        coords: dict[str, float],
    ) -> float:
        if sized is not None and node.name.value in sized[0]:
            multiplier = sized[1]
        elif compiled_field.is_list:
            multiplier = self._list_size(compiled_field, node)
        else:
            multiplier = 1.0
        child_sized: _Sized = None
        if compiled_field.sized_fields is not None:
            child_sized = (compiled_field.sized_fields, self._list_size(compiled_field, node))
        args = self._argument_cost(compiled_field, node) if compiled_field.arg_weights else 0.0
        selections = 0.0
        child_coords: dict[str, float] = {}
        if compiled_field.child is not None:
            base, cond, child_coords, cond_coords = self._explain(
                node.selection_set, compiled_field.child, child_sized, memo
            )
            selections = base
            if cond:
                winner = _argmax(cond)
                selections += cond[winner]
                if cond_coords and winner in cond_coords:
                    child_coords = dict(child_coords)
                    _add_scaled(child_coords, cond_coords[winner], 1.0)
        cost = args + multiplier * (compiled_field.own + selections)
        if not cost > 0.0:  # also NaN (0 × inf): the fast walk counts it as 0 too
            return 0.0
        own_share = args + multiplier * compiled_field.own
        if own_share:
            coordinate = compiled_field.coordinate
            coords[coordinate] = coords.get(coordinate, 0.0) + own_share
        _add_scaled(coords, child_coords, multiplier)
        return cost


def _applies(parent: CompiledType, condition: CompiledType) -> frozenset[str] | None:
    """Which possible types of ``parent`` a fragment on ``condition`` applies to.

    None means all of them (the fragment is unconditional there).
    """
    if condition is parent or parent.possible <= condition.possible:
        return None
    return parent.possible & condition.possible


def _merge(
    base: float,
    cond: dict[str, float] | None,
    parent: CompiledType,
    condition: CompiledType,
    part_base: float,
    part_cond: dict[str, float] | None,
) -> tuple[float, dict[str, float] | None]:
    """Add a fragment's price, on type ``condition``, to a selection set on ``parent``."""
    applies = _applies(parent, condition)
    if not parent.abstract:
        if applies is None or parent.name in applies:
            base += part_base + (part_cond.get(parent.name, 0.0) if part_cond else 0.0)
        return base, cond
    if applies is None:
        base += part_base
        if part_cond:
            cond = dict(cond) if cond else {}
            possible = parent.possible
            for type_name, extra in part_cond.items():
                if type_name in possible:
                    cond[type_name] = cond.get(type_name, 0.0) + extra
        return base, cond
    cond = dict(cond) if cond else {}
    for type_name in applies:
        extra = part_cond.get(type_name, 0.0) if part_cond else 0.0
        cond[type_name] = cond.get(type_name, 0.0) + part_base + extra
    return base, cond


def _finite(cost: float) -> float:
    """A cost as a finite, non-negative float (JSON has no infinity).

    Costs overflow to ``inf`` only for absurd list sizes; ``NaN`` only from ``0 × inf``
    with negative weights around. Either way the operation is priced as the most
    expensive one there can be.
    """
    if math.isnan(cost) or cost > _MAX_COST:
        return _MAX_COST
    return cost if cost > 0.0 else 0.0


def _argmax(values: dict[str, float]) -> str:
    return max(values, key=lambda name: (values[name], name))


def _add_scaled(target: dict[str, float], source: dict[str, float], factor: float) -> None:
    for coordinate, cost in source.items():
        target[coordinate] = target.get(coordinate, 0.0) + cost * factor


def _static_variables(operation: OperationDefinitionNode) -> dict[str, Any]:
    """Variable defaults of the operation, the only values known at validation time."""
    values: dict[str, Any] = {}
    for definition in operation.variable_definitions or ():
        default = definition.default_value
        if default is not None:
            values[definition.variable.name.value] = value_from_ast_untyped(default)
    return values
