"""Plans kept per compiled schema, so that a repeated operation is planned once.

Keyed by the document object, the operation and the values of the variables the plan
read; bounded in documents and in what they hold. :func:`plan_for` is the way in.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from quotaql.cost_analysis._builder import Builder
from quotaql.cost_analysis._compile import NO_VALUE
from quotaql.cost_analysis.operation import check_variables, select_operation

if TYPE_CHECKING:
    from graphql import DocumentNode, FragmentDefinitionNode, OperationDefinitionNode

    from quotaql.cost_analysis._compile import CompiledSchema
    from quotaql.cost_analysis.plan import Plan

__all__ = ["PlanCache", "document_size", "plan_cache", "plan_for"]

_MISSING: Any = NO_VALUE  # a variable not sent
# Documents (per compiled schema) whose plans are kept, plans per document (distinct
# values of the variables that change them), variable sets known to coerce per document;
# what the kept documents and plans may hold in all (characters of the documents, at least
# their lexical tokens, and fields of the plans: a token or a field is at most a few
# hundred bytes), and per document.
_DOCUMENTS = 512
_PLANS_PER_DOCUMENT = 32
_VALIDATED_PER_DOCUMENT = 64
_CACHE_WEIGHT = 100_000
_MAX_CACHED_SIZE = 10_000
# The most scalars, containers and keys a variable value kept in a key may hold.
_FREEZE_BUDGET = 256
# A value too large to keep: equal to nothing.
_UNKEPT: Any = object()


class _Document:
    """The plans of one (document, operation) under one compiled schema."""

    __slots__ = (
        "cached",
        "document",
        "fragments",
        "lock",
        "names",
        "operation",
        "state",
        "validated",
        "weight",
    )

    def __init__(
        self,
        document: DocumentNode,
        operation: OperationDefinitionNode,
        fragments: dict[str, FragmentDefinitionNode],
        tokens: int,
    ) -> None:
        self.document = document  # held: the key is its id
        self.operation = operation
        self.fragments = fragments
        # The operation's variables; the positions among them of those some plan of this
        # operation read, and the plans by their values, swapped together (under the
        # lock) when a plan reads a variable none read before.
        self.names = tuple(
            definition.variable.name.value for definition in operation.variable_definitions or ()
        )
        self.state: tuple[tuple[int, ...], dict[Any, Plan]] = ((), {})
        # Every variable value sent (frozen) that coerced without an error.
        self.validated: dict[Any, None] = {}
        self.lock = threading.Lock()
        # What the entry holds, in characters of the document and fields of its plans, and
        # whether the cache holds it.
        self.weight = tokens
        self.cached = False


class PlanCache:
    """The plans of one compiled schema: bounded in documents, and in what they hold
    (characters of the documents plus fields of their plans), the oldest dropped first."""

    __slots__ = ("_documents", "_lock", "_weight")

    def __init__(self) -> None:
        self._documents: dict[tuple[int, str | None], _Document] = {}
        self._lock = threading.Lock()
        self._weight = 0

    def get(self, document: DocumentNode, operation_name: str | None) -> _Document | None:
        entry = self._documents.get((id(document), operation_name))
        if entry is not None and entry.document is document:
            return entry
        return None

    def put(self, operation_name: str | None, entry: _Document) -> None:
        if entry.weight > _MAX_CACHED_SIZE:
            return
        with self._lock:
            documents = self._documents
            key = (id(entry.document), operation_name)
            before = documents.pop(key, None)
            if before is not None:
                before.cached = False
                self._weight -= before.weight
            documents[key] = entry
            entry.cached = True
            self._weight += entry.weight
            self._shrink()

    def grew(self, entry: _Document, by: int) -> None:
        """``entry`` holds ``by`` more (a plan added to it)."""
        with self._lock:
            entry.weight += by
            if entry.cached:
                self._weight += by
                self._shrink()

    def _shrink(self) -> None:
        documents = self._documents
        while documents and (len(documents) > _DOCUMENTS or self._weight > _CACHE_WEIGHT):
            dropped = documents.pop(next(iter(documents)))
            dropped.cached = False
            self._weight -= dropped.weight

    def __len__(self) -> int:
        return len(self._documents)

    @property
    def weight(self) -> int:
        """Characters of the documents and fields of the plans held."""
        return self._weight

    def clear(self) -> None:
        """Forget every plan (the next pricing of each document compiles it again)."""
        with self._lock:
            for entry in self._documents.values():
                entry.cached = False
            self._documents = {}
            self._weight = 0


# The plan cache of each compiled schema, which goes with it (no plan refers to the
# compiled schema); and the last one asked for, compared by identity: a server asks for
# the same one each time.
_caches: weakref.WeakKeyDictionary[CompiledSchema, PlanCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()
_last: tuple[CompiledSchema, PlanCache] | None = None


def plan_cache(compiled: CompiledSchema) -> PlanCache:
    """The plans made with ``compiled``: one cache per compiled schema, made on first use."""
    global _last
    last = _last
    if last is not None and last[0] is compiled:
        return last[1]
    with _caches_lock:
        cache = _caches.get(compiled)
        if cache is None:
            cache = _caches[compiled] = PlanCache()
    _last = (compiled, cache)
    return cache


def document_size(document: DocumentNode) -> int:
    """The length of ``document``'s text: at least its number of lexical tokens, so a
    bound of what it holds (without locations: too large to keep)."""
    loc = document.loc
    return len(loc.source.body) if loc is not None else _MAX_CACHED_SIZE + 1


def plan_for(
    compiled: CompiledSchema,
    document: DocumentNode,
    operation_name: str | None,
    variables: Mapping[str, Any] | None,
) -> Plan:
    """The plan of ``operation_name`` in ``document`` for ``variables``, cached.

    A plan is reused for the same document object (the gate hands the same parsed
    document to repeated query texts), the same operation and the same values of the
    variables it read (``@skip`` / ``@include`` conditions, slicing arguments, arguments
    with a cost); the variables are checked (``check_variables``: a scalar coerced, a
    list or an object left to the execution) once per distinct set of values sent, so
    that invalid ones are refused as before. Values too large to keep (over 256 scalars,
    containers and keys, found without looking further) are checked and planned each
    time.

    Raises:
        CostAnalysisError: the operation cannot be chosen or planned (see ``analyze``).
    """
    cache = plan_cache(compiled)
    entry = cache.get(document, operation_name)
    if entry is None:
        operation, fragments = select_operation(document, operation_name)
        entry = _Document(document, operation, fragments, document_size(document))
        cache.put(operation_name, entry)
    operation = entry.operation
    if not operation.variable_definitions:
        plan = entry.state[1].get(())
        if plan is None:
            builder = Builder(compiled, entry.fragments, {}, static=False)
            plan = builder.plan(operation)
            entry.state[1][()] = plan
            cache.grew(entry, builder.count)
        return plan
    sent: Mapping[str, Any] = variables if isinstance(variables, Mapping) else {}
    # Each declared variable's value as sent (_MISSING: not sent), frozen once: the
    # validated set is keyed by all of them, a plan by those it read.
    sent_values = tuple(_freeze(sent[name]) if name in sent else _MISSING for name in entry.names)
    positions, plans = entry.state
    key = tuple([sent_values[i] for i in positions]) if positions else ()
    plan = plans.get(key) if _UNKEPT not in key else None
    kept = _UNKEPT not in sent_values
    if plan is not None and kept and sent_values in entry.validated:
        return plan
    values = check_variables(compiled.schema, operation, variables)
    if kept:
        _bounded(entry.validated, _VALIDATED_PER_DOCUMENT)[sent_values] = None
    if plan is not None:
        return plan
    builder = Builder(compiled, entry.fragments, values, static=False)
    plan = builder.plan(operation)
    with entry.lock:
        positions, plans = entry.state
        read = {entry.names.index(name) for name in builder.reads if name in entry.names}
        if not read <= set(positions):
            positions = tuple(sorted(read | set(positions)))
            plans = {}
            entry.state = (positions, plans)
        key = tuple([sent_values[i] for i in positions]) if positions else ()
        stored = _UNKEPT not in key
        if stored:
            _bounded(plans, _PLANS_PER_DOCUMENT)[key] = plan
    if stored:
        cache.grew(entry, builder.count)
    return plan


def _bounded(found: dict[Any, Any], size: int) -> dict[Any, Any]:
    """``found``, its oldest entries dropped to make room for one more."""
    while len(found) >= size:
        try:
            del found[next(iter(found))]
        except (KeyError, RuntimeError, StopIteration):  # another thread got there first
            break
    return found


def _freeze(value: Any, budget: list[int] | None = None) -> Any:
    """A hashable image of a JSON value that tells ``1``, ``1.0`` and ``true`` apart, or
    ``_UNKEPT`` when it holds more than 256 scalars, containers and keys (or one that is
    not hashable): such values are not worth keeping (and could fill memory)."""
    cls = value.__class__
    if budget is None and (cls is str or cls is int or value is None):
        return value if cls is not int else (int, value)  # the common case, at once
    if budget is None:
        budget = [_FREEZE_BUDGET]
        found = _freeze(value, budget)
        return _UNKEPT if budget[0] < 0 else found
    budget[0] -= 1
    if budget[0] < 0:
        return _UNKEPT
    cls = value.__class__
    if cls is str or value is None:
        return value
    container = cls is dict or cls is list or cls is tuple or isinstance(value, Mapping)
    if container and len(value) > budget[0]:
        budget[0] = -1  # more entries than the budget left: not one of them is looked at
        return _UNKEPT
    if cls is dict or isinstance(value, Mapping):
        return (dict, tuple((k, _freeze(v, budget)) for k, v in value.items()))
    if cls is list or cls is tuple:
        return (list, tuple(_freeze(v, budget) for v in value))
    try:
        hash(value)
    except TypeError:
        budget[0] = -1
        return _UNKEPT
    return (cls, value)
