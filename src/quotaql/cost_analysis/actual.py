"""``actual_cost``: the cost of an operation that ran, from the ``data`` it returned.

:func:`~quotaql.cost_analysis.analyze` prices an operation before it runs, assuming every
list is as long as the query allows. After execution the real lengths are known: the actual
cost applies the same formula to the response, so that a limiter can refund the difference
(Shopify's model: charge the estimate up front, give back ``estimate - actual``).

It walks the operation's plan (the same one :func:`~quotaql.cost_analysis.analyze` priced,
cached) against ``data``, never the document. Per field, with ``k`` the number of items
it returned (1 for a field that is not a list) and ``args`` the cost of its arguments and
directives::

    apollo:  max(0, k × own + args) + Σ over the returned objects of cost(selections, item)
    ibm:     field cost max(0, weight + args) + Σ ..., type cost k × type weight + Σ ...

- A field absent from ``data`` (skipped by ``@skip`` / ``@include``, or never reached)
  costs 0. A field whose value is null costs ``own + args``: its resolver ran, its children
  did not. A null item of a list counts as an item; so does a value that is not an object
  where an object is expected. A value that is not a list where a list is expected is one item.
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
- Fields with one response key are one field, as the executor merges them (and as the
  analyzer prices them).
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

from typing import TYPE_CHECKING, Any

from graphql import DocumentNode

from quotaql.cost_analysis._cache import plan_for
from quotaql.cost_analysis._compile import compiled_schema, graphql_schema
from quotaql.cost_analysis._walk import error_paths
from quotaql.cost_analysis.analyzer import parse_document
from quotaql.cost_analysis.model import CostModel

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["actual_cost"]

_DEFAULT_MODEL = CostModel()


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
    if data is None and (not errors or error_paths(errors) is None):
        return 0.0
    compiled = compiled_schema(graphql_schema(schema), model)
    if isinstance(document, str):
        document = parse_document(document)
    elif not isinstance(document, DocumentNode):
        raise TypeError(f"document must be a str or a DocumentNode, got {type(document).__name__}")
    return plan_for(compiled, document, operation_name, variables).actual(data, errors)
