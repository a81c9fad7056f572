"""The operation of a document to run, as graphql-core's executor chooses it, and its values read.

Also where a plan reads the document's values: literals and variables as JSON
(:func:`literal_of`), the variables counted (:func:`count_values`) and checked as the price
needs them (:func:`check_variables`), and the source locations its errors carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from graphql import (
    BooleanValueNode,
    EnumValueNode,
    FloatValueNode,
    FragmentDefinitionNode,
    GraphQLBoolean,
    GraphQLID,
    GraphQLInt,
    GraphQLString,
    IntValueNode,
    ListValueNode,
    NamedTypeNode,
    NonNullTypeNode,
    ObjectValueNode,
    OperationDefinitionNode,
    StringValueNode,
    VariableNode,
    get_nullable_type,
    is_input_object_type,
    is_input_type,
    is_list_type,
    type_from_ast,
)

from quotaql._graphql_compat import get_variable_values
from quotaql.cost_analysis._compile import NO_VALUE
from quotaql.errors import InvalidVariables, OperationResolutionError

if TYPE_CHECKING:
    from graphql import DocumentNode, GraphQLScalarType, GraphQLSchema, VariableDefinitionNode
    from graphql.language import ValueNode

__all__ = [
    "check_variables",
    "count_values",
    "literal_of",
    "locations",
    "select_operation",
    "variable_values",
]

_MISSING: Any = NO_VALUE  # a variable not sent
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
# The standard scalars whose coercion takes some values as they are (a str for String or
# ID, an int in 32 bits for Int or ID, a bool for Boolean: graphql-core's coerce_string,
# coerce_id, coerce_int and coerce_boolean return them unchanged, in every version).
_STANDARD_SCALARS: dict[str, GraphQLScalarType] = {
    "String": GraphQLString,
    "ID": GraphQLID,
    "Int": GraphQLInt,
    "Boolean": GraphQLBoolean,
}
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


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


def check_variables(
    schema: GraphQLSchema, operation: OperationDefinitionNode, variables: Any
) -> dict[str, Any]:
    """Check ``variables`` as the pricing needs them (errors raise); return them as sent,
    with the operation's defaults for those not sent: what the plan reads.

    A variable of a list or input object type sent as a list or an object is not coerced
    here: graphql-core's execution coerces it, once, and refuses an invalid one before any
    resolver runs; the plan reads only what the price needs of it (a list's length, the
    input fields that cost). Every other variable (a scalar or an enum, a value where a
    list is expected, one not sent) is coerced as graphql-core coerces it, one check each,
    so that an invalid one is refused before it is priced; but for a value its type, a
    standard scalar, takes as it is (a string for a ``String``, ...: see ``_plainly_valid``),
    which needs no coercion to be known valid.
    """
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
    checked = [
        definition
        for definition in definitions
        if not _plainly_valid(schema, definition, variables)
        and not _left_to_execution(schema, definition, variables)
    ]
    if checked:
        inputs = variables if isinstance(variables, dict) else dict(variables)
        result = get_variable_values(schema, checked, inputs, max_errors=10)
        if isinstance(result, list):
            raise InvalidVariables(
                " ".join(error.message for error in result),
                locations=tuple(
                    (loc.line, loc.column) for error in result for loc in error.locations or ()
                ),
            )
    return variable_values(operation, variables)


def _plainly_valid(
    schema: GraphQLSchema, definition: VariableDefinitionNode, variables: Mapping[str, Any]
) -> bool:
    """Whether the value sent for ``definition`` is one its type takes unchanged: the type a
    standard scalar of the schema (``String``, ``ID``, ``Int``, ``Boolean``, nullable or
    not) and the value a str for a ``String`` or an ``ID``, an int in 32 bits for an ``Int``
    or an ``ID``, a bool for a ``Boolean``. Anything else (null, not sent, another type or
    value) is left to graphql-core's coercion."""
    type_node: Any = definition.type  # (the exact classes: no cast to call)
    if type_node.__class__ is NonNullTypeNode:
        type_node = type_node.type
    if type_node.__class__ is not NamedTypeNode:
        return False
    name = type_node.name.value
    scalar = _STANDARD_SCALARS.get(name)
    if scalar is None or schema.type_map.get(name) is not scalar:
        return False  # not a standard scalar, or the schema's own type of that name
    value: Any = variables.get(definition.variable.name.value)
    cls = value.__class__
    if cls is str:
        return name == "String" or name == "ID"  # noqa: PLR1714  (hot path)
    if cls is int:  # (a bool's class is bool)
        return (name == "Int" or name == "ID") and _INT_MIN <= value <= _INT_MAX  # noqa: PLR1714
    return cls is bool and name == "Boolean"


def _left_to_execution(
    schema: GraphQLSchema, definition: VariableDefinitionNode, variables: Mapping[str, Any]
) -> bool:
    """Whether the value sent for ``definition`` is one whose coercion walks it (a list or
    an object, for a list or an input object type): graphql-core's execution coerces it."""
    value = variables.get(definition.variable.name.value)
    if not isinstance(value, list | tuple | Mapping):
        return False
    found = type_from_ast(schema, definition.type)
    if not is_input_type(found):
        return False  # an unknown type or an output type: coerced here, to say so
    nullable = get_nullable_type(found)
    return is_list_type(nullable) or is_input_object_type(nullable)


def count_values(variables: Mapping[str, Any], limit: int) -> int:
    """The values ``variables`` (a request's JSON object) holds, each scalar, list and
    object in it counting one, counted until there are more than ``limit``.

    Each list or object adds its length at once, so the count stops after at most ``limit``
    values were looked at, however long the list that crosses it: past ``limit``, the count
    returned is a lower bound.
    """
    count = 0
    pending: list[Any] = [variables]
    while pending:
        container = pending.pop()
        items = container.values() if isinstance(container, Mapping) else container
        count += len(items)
        if count > limit:
            return count
        for item in items:
            cls = item.__class__
            if (
                cls is dict
                or cls is list
                or (cls not in _JSON_SCALARS and isinstance(item, Mapping | list | tuple))
            ):
                pending.append(item)
    return count


def variable_values(
    operation: OperationDefinitionNode, variables: Mapping[str, Any]
) -> dict[str, Any]:
    """The variables as sent, and the operation's defaults for those not sent."""
    values: dict[str, Any] = {}
    for definition in operation.variable_definitions or ():
        name = definition.variable.name.value
        if name in variables:
            values[name] = variables[name]
        elif definition.default_value is not None:
            values[name] = literal_of(definition.default_value, {}, None)
    return values


def locations(node: Any) -> tuple[tuple[int, int], ...]:
    """Where ``node`` starts in its document, as an error's ``(line, column)``; () when
    the node has no location."""
    loc = getattr(node, "loc", None)
    if loc is None:
        return ()
    token = loc.start_token
    return ((token.line, token.column),)


def literal_of(node: ValueNode, values: Mapping[str, Any], reads: set[str] | None) -> Any:
    """A value of the document as JSON, variables read from ``values`` (``NO_VALUE``: not
    sent); the name of each variable read is added to ``reads`` (when not None)."""
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
        items = (literal_of(item, values, reads) for item in cast("ListValueNode", node).values)
        return [None if item is _MISSING else item for item in items]
    if cls is ObjectValueNode:
        found: dict[str, Any] = {}
        for entry in cast("ObjectValueNode", node).fields:
            item = literal_of(entry.value, values, reads)
            if item is not _MISSING:
                found[entry.name.value] = item
        return found
    return None  # NullValueNode
