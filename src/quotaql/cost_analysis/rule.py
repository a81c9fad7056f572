"""A graphql-core validation rule for servers that are not Strawberry (Ariadne, plain graphql-core).

Validation sees the document but not the request's variables, so the rule enforces the
limits that need no variables: depth, aliases and root fields exactly, and the cost with
variables at their declared defaults (a list sized by a variable without a default takes
its schema default, ``@listSize(assumedSize:)`` or the model's default size). To price a
request exactly, call :func:`quotaql.cost_analysis.analyze` with its variables before
executing it.

Example:
    >>> from graphql import build_schema, parse, specified_rules, validate
    >>> schema = build_schema(
    ...     "type Query { users(first: Int = 10): [User] } type User { id: ID }"
    ... )
    >>> rule = cost_limit_rule(CostLimits(max_cost=50, max_depth=5))
    >>> errors = validate(schema, parse("{ users(first: 80) { id } }"), [*specified_rules, rule])
    >>> errors[0].message, errors[0].extensions["code"]
    ('Query cost 80 exceeds the maximum of 50', 'QUERY_TOO_COMPLEX')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphql import (
    FragmentDefinitionNode,
    GraphQLError,
    OperationDefinitionNode,
    ValidationRule,
)

from quotaql.cost_analysis._compile import compiled_schema
from quotaql.cost_analysis.analyzer import CostReport, price_operation
from quotaql.cost_analysis.model import CostLimits, CostModel
from quotaql.errors import CostAnalysisError

if TYPE_CHECKING:
    from collections.abc import Callable

    from graphql.language import DocumentNode

__all__ = ["cost_limit_rule"]

_DEFAULT_MODEL = CostModel()


def cost_limit_rule(
    limits: CostLimits,
    model: CostModel = _DEFAULT_MODEL,
    on_report: Callable[[CostReport], None] | None = None,
) -> type[ValidationRule]:
    """Build a validation rule that reports every operation crossing ``limits``.

    Args:
        limits: the static limits (``max_cost``, ``max_depth``, ``max_aliases``,
            ``max_root_fields``); parser limits do not apply here, the document is
            already parsed.
        model: the cost model.
        on_report: called with the report of every operation within the limits
            (for logging or metrics).

    Returns:
        A ``ValidationRule`` subclass to pass to ``graphql.validate(..., rules=[...])``.
        Each error has ``extensions.code`` (``QUERY_TOO_COMPLEX``, ``QUERY_TOO_DEEP``,
        ``TOO_MANY_ALIASES``, ``TOO_MANY_ROOT_FIELDS``, ...), the measured value and
        the limit.
    """

    class CostLimitRule(ValidationRule):
        """Rejects operations whose static cost, depth, aliases or root fields are too high."""

        def enter_document(self, node: DocumentNode, *_args: Any) -> Any:
            compiled = compiled_schema(self.context.schema, model)
            fragments = {
                definition.name.value: definition
                for definition in node.definitions
                if isinstance(definition, FragmentDefinitionNode)
            }
            for definition in node.definitions:
                if not isinstance(definition, OperationDefinitionNode):
                    continue
                try:
                    report = price_operation(compiled, definition, fragments, limits)
                except CostAnalysisError as error:
                    self.report_error(
                        GraphQLError(error.message, definition, extensions=error.extensions)
                    )
                    continue
                if on_report is not None:
                    on_report(report)
            return self.SKIP

    return CostLimitRule
