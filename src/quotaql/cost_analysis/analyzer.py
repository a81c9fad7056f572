"""``analyze``: price one GraphQL operation before it runs, in time linear in its text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from graphql import (
    DocumentNode,
    FragmentDefinitionNode,
    GraphQLSyntaxError,
    OperationDefinitionNode,
    parse,
)

from quotaql._graphql_compat import GRAPHQL_CORE_VERSION, HAS_PARSER_LIMITS, PARSER_NESTING
from quotaql.cost_analysis._builder import build_plan
from quotaql.cost_analysis._cache import plan_for
from quotaql.cost_analysis._compile import CompiledSchema, compiled_schema, graphql_schema
from quotaql.cost_analysis._kept import Kept
from quotaql.cost_analysis._nodes import MAX_NESTING
from quotaql.cost_analysis.model import CostLimits, CostModel
from quotaql.cost_analysis.operation import count_values, locations, select_operation
from quotaql.cost_analysis.plan import CostReport, Plan, RootFieldCost, deepest
from quotaql.errors import (
    CostAnalysisError,
    QuerySyntaxError,
    QueryTooComplex,
    QueryTooDeep,
    QueryTooLarge,
    TooManyAliases,
    TooManyRootFields,
    TooManyVariableValues,
)

__all__ = [
    "MAX_NESTING",
    "CostReport",
    "RootFieldCost",
    "analyze",
    "check_model",
    "free_subscription_fields",
    "parse_document",
    "select_operation",
]

_DEFAULT_MODEL = CostModel()
_NO_LIMITS = CostLimits()
_TOO_MANY_TOKENS = re.compile(r"more than (\d+) (tokens|code points)")
_BRACES_STRINGS_COMMENTS = re.compile(r'"(?:[^"\\\n]|\\.)*"?|#[^\n]*|[{}]')
# How deep graphql-core's parser follows selection sets (it refuses deeper documents).
_PARSER_NESTING = PARSER_NESTING if PARSER_NESTING is not None else MAX_NESTING
# Parsed documents kept by their text (and parser limits), so that a repeated query is
# one document, whose validation and plan are cached: at most this many, of at most this
# many characters each and in all (a character makes at most one lexical token, which with
# its nodes is a few hundred bytes); a flood of new documents cannot push out those in use
# (``Kept``).
_PARSED = 512
_MAX_PARSED_SIZE = 10_000
_PARSED_SIZE = 100_000
_parsed: Kept[tuple[str, int | None, int | None], DocumentNode] = Kept(_PARSED, _PARSED_SIZE)


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
        variables: the request's raw JSON variables: counted against
            ``max_variable_values`` first; a scalar or an enum is coerced as graphql-core
            coerces it, a list or an object left to the execution to coerce (the price
            reads a list's length and the input fields that cost).
        operation_name: which operation to price when the document has several.
        model: weights and defaults.
        limits: static limits; the first one crossed raises and stops the analysis.

    Raises:
        CostAnalysisError: a subclass with a stable ``code``: a limit crossed
            (``QueryTooComplex``, ``QueryTooDeep``, ``TooManyAliases``,
            ``TooManyRootFields``, ``QueryTooLarge``, ``TooManyVariableValues``) or input
            that cannot be priced.
        ConfigError: ``model`` names a coordinate that is not in ``schema``.
    """
    compiled = compiled_schema(graphql_schema(schema), model)
    limits = limits or _NO_LIMITS
    max_values = limits.max_variable_values
    if max_values is not None and variables and isinstance(variables, Mapping):
        _count_values(variables, max_values)
    if isinstance(document, str):
        document = parse_document(document, limits)
    elif not isinstance(document, DocumentNode):
        raise TypeError(f"document must be a str or a DocumentNode, got {type(document).__name__}")
    plan = plan_for(compiled, document, operation_name, variables)
    return _within(plan, limits)


def check_model(schema: Any, model: CostModel) -> None:
    """Check ``model`` against ``schema`` now rather than on the first request.

    Compiles (and caches) the weights of every field, so a server can refuse to start
    with a config that does not fit its schema.

    Raises:
        ConfigError: a weight names a type, field or argument the schema does not have
            (with the closest real coordinates), or a directive has an invalid value.
    """
    compiled_schema(graphql_schema(schema), model)


def free_subscription_fields(schema: Any, model: CostModel) -> list[str]:
    """The coordinates of the subscription fields whose events ``model`` prices at 0
    (a scalar or enum without a weight, and no ``subscription`` operation weight): each of
    their events would pay only ``[limits] min_charge``. Empty without a subscription type.
    """
    compiled = compiled_schema(graphql_schema(schema), model)
    for _kind, name, root, weight in compiled.operations:
        if name == "subscription" and root is not None and weight <= 0:
            return [f"{root.name}.{field}" for field in sorted(root.free_names)]
    return []


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
    return _within(build_plan(compiled, operation, fragments, static=True), limits)


def _count_values(variables: Mapping[str, Any], limit: int) -> None:
    """Refuse ``variables`` holding more than ``limit`` values, before anything reads them."""
    count = count_values(variables, limit)
    if count > limit:
        raise TooManyVariableValues(
            count,
            limit,
            partial=True,
            message=f"The variables hold more than {limit} values (each scalar, list and"
            " object counts one)",
        )


def _within(plan: Plan, limits: CostLimits) -> CostReport:
    """The report of ``plan``, or the error of the first of ``limits`` it crosses."""
    report = plan.report
    max_depth = limits.max_depth
    if max_depth is not None and report.depth > max_depth:
        node = deepest(plan.root, max_depth)
        where = locations(node) or locations(plan.operation)
        raise QueryTooDeep(report.depth, max_depth, locations=where)
    max_aliases = limits.max_aliases
    if max_aliases is not None and report.aliases > max_aliases:
        where = locations(plan.operation)
        raise TooManyAliases(report.aliases, max_aliases, locations=where)
    max_root_fields = limits.max_root_fields
    if max_root_fields is not None and report.root_fields > max_root_fields:
        where = locations(plan.operation)
        raise TooManyRootFields(report.root_fields, max_root_fields, locations=where)
    max_cost = limits.max_cost
    if max_cost is not None and not report.cost <= max_cost:
        raise QueryTooComplex(report.cost, max_cost, locations=locations(plan.operation))
    return report


def parse_document(source: str, limits: CostLimits = _NO_LIMITS) -> DocumentNode:
    """Parse ``source`` within the parser limits of ``limits``.

    A document of at most 10,000 characters is kept once parsed (512 documents by their
    text and limits, 100,000 characters in all, those found again kept first: see
    ``Kept``): the same text gives the same ``DocumentNode``, whose validation and plan are
    then cached (graphql-core never changes a parsed document). What does not parse is not
    kept.

    Raises:
        QuerySyntaxError: not GraphQL (``locations`` has the line and column).
        QueryTooLarge: more tokens than ``max_tokens`` or characters than ``max_length``.
        QueryTooDeep: nested deeper than the parser can follow.
    """
    key = (source, limits.max_tokens, limits.max_length)
    found = _parsed.get(key)
    if found is not None:
        return found
    document = _parse(source, limits)
    if len(source) <= _MAX_PARSED_SIZE:  # a character makes at most one lexical token
        _parsed.put(key, document, len(source))
    return document


def _parse(source: str, limits: CostLimits) -> DocumentNode:
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
