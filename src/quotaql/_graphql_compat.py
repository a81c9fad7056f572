"""The graphql-core APIs quotaql needs that differ between 3.2 and 3.3, behind one face.

graphql-core 3.3 moved coerced variables into a ``VariableValues`` named tuple, renamed
``value_from_ast`` to ``coerce_input_literal`` and gave arguments a ``default``
(``GraphQLDefaultInput``) beside the old ``default_value``. On 3.3 this module hands out
graphql-core's own objects unchanged; on 3.2 it gives the same shapes. The parser limits
``max_lexical_tokens`` / ``max_source_length`` and the parser's nesting guard exist in
graphql-core 3.2.14+ and 3.3.2+ only (:data:`HAS_PARSER_LIMITS`, :data:`PARSER_NESTING`).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, NamedTuple

import graphql
from graphql import GraphQLArgument, GraphQLError, Undefined
from graphql.execution import values as _values
from graphql.language import parser as _parser

if TYPE_CHECKING:
    from collections.abc import Collection

    from graphql import GraphQLInputType, GraphQLSchema
    from graphql.language import ValueNode, VariableDefinitionNode

__all__ = [
    "GRAPHQL_CORE_VERSION",
    "HAS_PARSER_LIMITS",
    "PARSER_NESTING",
    "VariableValues",
    "argument_default",
    "argument_with_default",
    "coerce_input_literal",
    "get_variable_values",
]

GRAPHQL_CORE_VERSION: str = graphql.__version__
#: ``parse(max_lexical_tokens=, max_source_length=)`` exists (graphql-core 3.2.14+, 3.3.2+).
HAS_PARSER_LIMITS: bool = {"max_lexical_tokens", "max_source_length"} <= set(
    inspect.signature(graphql.parse).parameters
)
#: How deep the parser follows nested selection sets; None when it has no guard (older
#: parsers recurse until Python's recursion limit raises ``RecursionError``).
PARSER_NESTING: int | None = getattr(_parser, "MAX_NESTING_DEPTH", None)
# graphql-core 3.3: VariableValues, coerce_input_literal, GraphQLDefaultInput.
_GRAPHQL_3_3 = hasattr(_values, "VariableValues")

if TYPE_CHECKING or _GRAPHQL_3_3:
    from graphql import GraphQLDefaultInput, coerce_input_literal, coerce_input_value
    from graphql.execution.values import VariableValues, get_variable_values

    def argument_default(arg: GraphQLArgument) -> Any:
        """The coerced default value of ``arg``, or ``Undefined`` when it has none.

        3.3's ``build_schema`` sets ``arg.default`` (a literal, coerced here) and leaves
        the deprecated ``default_value`` undefined; code-first schemas may set either.
        """
        default = arg.default
        if default is None:
            return arg.default_value
        if default.literal is not None:
            return coerce_input_literal(default.literal, arg.type)
        return coerce_input_value(default.value, arg.type)

    def argument_with_default(type_: GraphQLInputType, value: Any) -> GraphQLArgument:
        """``GraphQLArgument(type_)`` whose default is ``value``."""
        return GraphQLArgument(type_, default=GraphQLDefaultInput(value))

else:  # graphql-core 3.2
    from graphql import value_from_ast

    class VariableValues(NamedTuple):
        """3.3's shape: ``coerced`` holds what 3.2's ``get_variable_values`` returns."""

        sources: dict[str, Any]
        coerced: dict[str, Any]

    def coerce_input_literal(
        value_node: ValueNode,
        type_: GraphQLInputType,
        variable_values: VariableValues | None = None,
    ) -> Any:
        """A literal's value (``value_from_ast``), ``Undefined`` when it does not fit."""
        variables = variable_values.coerced if variable_values is not None else None
        return value_from_ast(value_node, type_, variables)

    def get_variable_values(
        schema: GraphQLSchema,
        var_def_nodes: Collection[VariableDefinitionNode],
        inputs: dict[str, Any],
        max_errors: int | None = None,
    ) -> VariableValues | list[GraphQLError]:
        """The coerced variables as a ``VariableValues``, or the coercion errors."""
        result = _values.get_variable_values(schema, var_def_nodes, inputs, max_errors)
        if isinstance(result, list):
            return result
        # 3.2 stores an invalid default as Undefined where 3.3 reports an error.
        errors = [
            GraphQLError(f"Variable '${node.variable.name.value}' has invalid default value.", node)
            for node in var_def_nodes
            if result.get(node.variable.name.value, None) is Undefined
        ]
        return errors or VariableValues({}, result)

    def argument_default(arg: GraphQLArgument) -> Any:
        """The coerced default value of ``arg``, or ``Undefined`` when it has none."""
        return arg.default_value

    def argument_with_default(type_: GraphQLInputType, value: Any) -> GraphQLArgument:
        """``GraphQLArgument(type_)`` whose default is ``value``."""
        return GraphQLArgument(type_, default_value=value)
