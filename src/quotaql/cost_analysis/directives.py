"""IBM GraphQL Cost Directives ``@cost`` and ``@listSize``, and how the analyzer reads them.

SDL-first schemas declare the directives with :data:`COST_DIRECTIVES_SDL`; code-first
graphql-core schemas add :data:`COST_DIRECTIVE` and :data:`LIST_SIZE_DIRECTIVE` to
``GraphQLSchema(directives=...)``; Strawberry schemas use :class:`Cost` and :class:`ListSize`
(imported lazily, so this module needs Strawberry only when those two are used)::

    from quotaql.cost_analysis.directives import Cost, ListSize

    @strawberry.type
    class Query:
        @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
        def users(self, first: int = 10) -> list[User]: ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphql import (
    DirectiveLocation,
    GraphQLArgument,
    GraphQLBoolean,
    GraphQLDirective,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLString,
    value_from_ast_untyped,
)

from quotaql._graphql_compat import argument_with_default
from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from graphql.language import ConstDirectiveNode, Node

    from quotaql.cost_analysis._strawberry import Cost, ListSize

__all__ = [
    "COST_DIRECTIVE",
    "COST_DIRECTIVES_SDL",
    "LIST_SIZE_DIRECTIVE",
    "Cost",
    "ListSize",
    "ListSizeValues",
    "read_cost",
    "read_list_size",
]

COST_DIRECTIVES_SDL = """\
directive @cost(weight: String!) on \
ARGUMENT_DEFINITION | ENUM | FIELD_DEFINITION | INPUT_FIELD_DEFINITION | OBJECT | SCALAR

directive @listSize(\
assumedSize: Int, slicingArguments: [String!], sizedFields: [String!], \
requireOneSlicingArgument: Boolean = true) on FIELD_DEFINITION
"""

_COST_LOCATIONS = (
    DirectiveLocation.ARGUMENT_DEFINITION,
    DirectiveLocation.ENUM,
    DirectiveLocation.FIELD_DEFINITION,
    DirectiveLocation.INPUT_FIELD_DEFINITION,
    DirectiveLocation.OBJECT,
    DirectiveLocation.SCALAR,
)

COST_DIRECTIVE = GraphQLDirective(
    name="cost",
    locations=_COST_LOCATIONS,
    args={"weight": GraphQLArgument(GraphQLNonNull(GraphQLString))},
    description="The relative cost of resolving this element (IBM GraphQL Cost Directives).",
)

_NAMES = GraphQLList(GraphQLNonNull(GraphQLString))
LIST_SIZE_DIRECTIVE = GraphQLDirective(
    name="listSize",
    locations=(DirectiveLocation.FIELD_DEFINITION,),
    args={
        "assumedSize": GraphQLArgument(GraphQLInt),
        "slicingArguments": GraphQLArgument(_NAMES),
        "sizedFields": GraphQLArgument(_NAMES),
        "requireOneSlicingArgument": argument_with_default(GraphQLBoolean, True),
    },
    description="How many items a list field returns (IBM GraphQL Cost Directives).",
)

# Strawberry directive classes carry this attribute so that reading them needs no
# Strawberry import: cost_analysis stays graphql-core only.
MARKER = "__quotaql_directive__"


@dataclass(frozen=True, slots=True)
class ListSizeValues:
    """The arguments of one ``@listSize`` use."""

    assumed_size: int | None = None
    slicing_arguments: tuple[str, ...] | None = None
    sized_fields: tuple[str, ...] | None = None
    require_one_slicing_argument: bool = True


def _ast_directives(element: Any, name: str) -> list[ConstDirectiveNode]:
    nodes: list[Node | None] = [getattr(element, "ast_node", None)]
    nodes.extend(getattr(element, "extension_ast_nodes", None) or ())
    return [
        directive
        for node in nodes
        if node is not None
        for directive in getattr(node, "directives", None) or ()
        if directive.name.value == name
    ]


def _strawberry_directives(element: Any, kind: str) -> list[Any]:
    definition = (getattr(element, "extensions", None) or {}).get("strawberry-definition")
    return [
        directive
        for directive in getattr(definition, "directives", None) or ()
        if getattr(directive, MARKER, None) == kind
    ]


def _arguments(directive: ConstDirectiveNode) -> dict[str, Any]:
    return {arg.name.value: value_from_ast_untyped(arg.value) for arg in directive.arguments or ()}


def read_cost(element: Any, where: str) -> float | None:
    """The ``@cost(weight:)`` on a schema element (type, field or argument), if any.

    Raises:
        ConfigError: the weight is not a number (the spec types it as a String).
    """
    raw: Any = None
    for directive in _ast_directives(element, "cost"):
        raw = _arguments(directive).get("weight")
    for strawberry_directive in _strawberry_directives(element, "cost"):
        raw = strawberry_directive.weight
    if raw is None:
        return None
    try:
        weight = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"@cost(weight: {raw!r}) on {where} is not a number") from None
    if not math.isfinite(weight):
        raise ConfigError(f"@cost(weight: {raw!r}) on {where} is not a finite number")
    return weight


def read_list_size(field: Any, where: str) -> ListSizeValues | None:
    """The ``@listSize`` on a field definition, if any."""
    values: dict[str, Any] | None = None
    for directive in _ast_directives(field, "listSize"):
        values = _arguments(directive)
    for strawberry_directive in _strawberry_directives(field, "listSize"):
        values = strawberry_directive.arguments()
    if values is None:
        return None
    assumed = values.get("assumedSize")
    if assumed is not None and (isinstance(assumed, bool) or not isinstance(assumed, int)):
        raise ConfigError(f"@listSize(assumedSize: {assumed!r}) on {where} is not an integer")
    if assumed is not None and assumed < 0:
        raise ConfigError(f"@listSize(assumedSize: {assumed}) on {where} is negative")
    require = values.get("requireOneSlicingArgument")
    return ListSizeValues(
        assumed_size=assumed,
        slicing_arguments=_names(values.get("slicingArguments"), "slicingArguments", where),
        sized_fields=_names(values.get("sizedFields"), "sizedFields", where),
        require_one_slicing_argument=True if require is None else bool(require),
    )


def _names(value: Any, argument: str, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]  # GraphQL input coercion turns a single item into a list
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"@listSize({argument}: {value!r}) on {where} is not a list of names")
    return tuple(value)


def __getattr__(name: str) -> Any:
    # Cost / ListSize need Strawberry; import it only when they are asked for.
    if name in ("Cost", "ListSize"):
        from quotaql.cost_analysis import _strawberry  # noqa: PLC0415

        return getattr(_strawberry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
