"""Resolver time, on the operations sampled for tuning only: what each field's resolvers took,
per schema coordinate (``quotaql tune --weights`` proposes weights from it).

Nothing here runs for an operation that is not sampled. An adapter draws the sample when a
request starts (:func:`sample`, one ``random()`` call) and, for a sampled operation only,
hands graphql-core a :class:`ResolverTimer` as its middleware: graphql-core wraps the
resolvers of one execution with the middleware of that execution, so an operation run
without it calls its resolvers as they are (no wrapper, no timer, no per-field call).
Strawberry builds its middleware from the extensions that implement ``resolve``, per
request: the sampled request gets an extension that does (``plugin/extension.py``);
Ariadne asks its handler for each request's middleware (``ariadne.py``); a graphql-core
application passes ``middleware=[timer]`` to ``execute`` itself (docs/tuning.md).

A call is timed from the call of the resolver to the end of what it returned: an awaitable
is awaited first (an async resolver's time includes what it waited for). The time of a
field is its resolver's own: graphql-core resolves the field's children after it returned.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from inspect import isawaitable
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["BOUNDS", "ResolverTimer", "Timing", "attach", "sample"]

BOUNDS: Final = (*names.RESOLVER_BUCKETS, float("inf"))
"""The buckets of ``quotaql_resolver_seconds``, ``+Inf`` last."""


class Timing:
    """The calls of one coordinate's resolver in one operation: how many, their seconds in
    all, and how many fell in each bucket of :data:`BOUNDS` (as ``observe()`` decides)."""

    __slots__ = ("calls", "counts", "seconds")

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.counts = [0] * len(BOUNDS)

    def add(self, seconds: float) -> None:
        self.calls += 1
        self.seconds += seconds
        self.counts[bisect_left(BOUNDS, seconds)] += 1


class ResolverTimer:
    """A graphql-core middleware that times each resolver call of one operation.

    ``times`` holds a :class:`Timing` per schema coordinate (``"Product.reviews"``, from the
    field's parent type and name: never a string of the client's; introspection's
    ``__Type.fields`` and ``__typename`` are left out: no weight of the file prices them).
    Memory is bounded by the schema: one tally per field resolved, whatever the calls.

    Example:
        >>> from graphql import build_schema, graphql_sync
        >>> schema = build_schema("type Query { hello: String }")
        >>> timer = ResolverTimer()
        >>> graphql_sync(schema, "{ hello }", {"hello": "world"}, middleware=[timer]).data
        {'hello': 'world'}
        >>> timer.times["Query.hello"].calls
        1
    """

    __slots__ = ("_coordinates", "times")

    def __init__(self) -> None:
        self.times: dict[str, Timing] = {}
        self._coordinates: dict[tuple[str, str], Timing] = {}

    def resolve(self, next_: Callable[..., Any], root: Any, info: Any,
                *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        """Call the resolver (``next_``) and time it: at once, or when what it returned is
        awaited."""
        start = perf_counter()
        try:
            result = next_(root, info, *args, **kwargs)
        except BaseException:
            self._tally(info).add(perf_counter() - start)
            raise
        if isawaitable(result):
            return self._awaited(result, start, info)
        self._tally(info).add(perf_counter() - start)
        return result

    async def _awaited(self, result: Awaitable[Any], start: float, info: Any) -> Any:
        try:
            return await result
        finally:
            self._tally(info).add(perf_counter() - start)

    def _tally(self, info: Any) -> Timing:
        key = (info.parent_type.name, info.field_name)
        tally = self._coordinates.get(key)
        if tally is None:
            tally = self._coordinates[key] = Timing()
            if not (key[0].startswith("__") or key[1].startswith("__")):  # not introspection
                self.times[f"{key[0]}.{key[1]}"] = tally
        return tally


def sample(gate: Any) -> ResolverTimer | None:
    """A timer for the operation a request is about to run, if it is sampled for tuning
    (``[cost] tuning_sample`` of the configuration of ``gate``, a
    :class:`~quotaql.gate.Gate`, with metrics to record it in); None otherwise (nearly
    always: the operation then runs untimed). (Typed ``Any``: the gate's modules import
    this one.)"""
    if gate.metrics is None:
        return None
    share = gate.config.cost.tuning_sample
    if share and random.random() < share:  # noqa: S311  (a sample, not a secret)
        return ResolverTimer()
    return None


def attach(op: Any, timer: ResolverTimer | None) -> None:
    """``op`` (an :class:`~quotaql.gate.Operation`) was sampled for tuning (``timer`` timed
    it) or not (None): its list sizes are then kept (or not) on the same decision, and the
    times recorded with its metrics."""
    op.sampled = timer is not None
    op.timings = None if timer is None else timer.times
