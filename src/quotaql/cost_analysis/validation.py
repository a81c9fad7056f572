"""Documents checked once: the static pass and validation, kept per schema.

graphql-core's ``validate`` is most of what a repeated request costs a server (the shop
query of the benchmarks: 2.9 ms to validate, 2 µs to price from the plan cache), and its
result depends only on the schema, the document and the validation rules. So, as
Strawberry's ``ValidationCache`` does, quotaql keeps it, but within its limits:

- only documents that passed the static pass (``[cost]`` limits: depth, aliases, field
  pairs ...) without a violation and validated without an error are kept: an invalid or
  refused document is checked again on every request (and pays for it: ``min_charge``, its
  size and its worker time);
- per schema object (a ``GraphQLSchema``, held weakly): another schema, or a schema built
  again by a reload, never sees another's results;
- keyed on the parsed document object (the parse cache gives one per text, so the text is
  not hashed again) and the validation rules in force (a tuple of rule classes: a request
  with an extra rule is not served a result found without it), with the ``[cost]`` limits
  the static pass used (a reload with other limits checks again);
- bounded: 512 documents and 100,000 characters of them per schema, a flood of new
  documents unable to push out those found again (:class:`~quotaql.cost_analysis._kept.Kept`).

Validation rules must depend only on the schema and the document, as graphql-core's do (a
rule that reads the request gives a new class per request, which is then never served a
kept result).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from graphql import specified_rules

from quotaql.cost_analysis._kept import Kept

if TYPE_CHECKING:
    from collections.abc import Collection

    from graphql import ASTValidationRule, DocumentNode, GraphQLSchema

    from quotaql.cost_analysis.model import CostLimits

__all__ = ["CHECKED_DOCUMENTS", "CHECKED_SIZE", "checked", "known", "rules_key"]

#: Documents kept per schema, and their characters in all (as the parse cache).
CHECKED_DOCUMENTS = 512
CHECKED_SIZE = 100_000
_MAX_SIZE = 10_000  # characters of a document kept (the parse cache keeps no larger one)

Rules = tuple[type["ASTValidationRule"], ...]
_Checked = Kept[tuple[int, Rules], tuple["DocumentNode", "CostLimits"]]

_SPECIFIED: Rules = tuple(specified_rules)
_caches: weakref.WeakKeyDictionary[GraphQLSchema, _Checked] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()
_last: tuple[GraphQLSchema, _Checked] | None = None


def rules_key(rules: Collection[type[ASTValidationRule]] | None) -> Rules:
    """The rules graphql-core's ``validate`` would use (``None``: its specified rules)."""
    if rules is None:
        return _SPECIFIED
    return rules if isinstance(rules, tuple) else tuple(rules)


def checked(schema: GraphQLSchema) -> _Checked:
    """The documents checked against ``schema`` (made on first use; goes with it)."""
    global _last
    last = _last
    if last is not None and last[0] is schema:
        return last[1]
    with _caches_lock:
        cache = _caches.get(schema)
        if cache is None:
            cache = _caches[schema] = Kept(CHECKED_DOCUMENTS, CHECKED_SIZE)
    _last = (schema, cache)
    return cache


def known(schema: GraphQLSchema, document: DocumentNode, rules: Rules, limits: Any) -> bool:
    """Whether ``document`` passed the static pass under ``limits`` without a violation and
    validated against ``schema`` with ``rules`` without an error, and is kept."""
    found = checked(schema).get((id(document), rules))
    return found is not None and found[0] is document and found[1] is limits


def keep(schema: GraphQLSchema, document: DocumentNode, rules: Rules, limits: CostLimits) -> None:
    """``document`` passed the static pass under ``limits`` without a violation and
    validated against ``schema`` with ``rules`` without an error: keep that."""
    loc = document.loc
    size = len(loc.source.body) if loc is not None else _MAX_SIZE + 1
    if size <= _MAX_SIZE:
        checked(schema).put((id(document), rules), (document, limits), size)
