"""Histogram observations tallied per bucket, then added to prometheus-client's values at once
(the tuning metrics observe dozens of lists per operation)."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

__all__ = ["Pending", "adds_in_bulk"]


def adds_in_bulk(child: Any, bounds: tuple[float, ...]) -> bool:
    """Whether prometheus-client's histogram ``child`` has the values :class:`Pending`
    increments directly: its upper bounds ``bounds`` in ``_upper_bounds``, a value with an
    ``inc`` per bucket in ``_buckets``, and ``_sum`` (it has had them for years)."""
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    return (
        tuple(getattr(child, "_upper_bounds", ())) == bounds
        and isinstance(buckets, list)
        and len(buckets) == len(bounds)
        and all(callable(getattr(bucket, "inc", None)) for bucket in buckets)
        and callable(getattr(total, "inc", None))
    )


class Pending:
    """Observations of one histogram child, tallied until :meth:`add` adds them.

    ``counts[i]`` is how many fell in bucket ``i`` (the first upper bound ``>=`` the value,
    as ``observe()`` decides) and ``total`` their sum: :meth:`add` increments each bucket hit
    once and the sum once, which leaves the child as that many ``observe()`` calls would.
    Where the child lacks those values (``values`` is then a list), the observations are
    kept as they are and observed one by one.
    """

    __slots__ = ("_bounds", "_buckets", "_child", "_sum", "counts", "total", "values")

    def __init__(self, child: Any, bounds: tuple[float, ...], bulk: bool) -> None:
        self._child = child
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0
        self.values: list[float] | None = None
        if bulk and adds_in_bulk(child, bounds):
            self._buckets: list[Any] = child._buckets
            self._sum: Any = child._sum
        else:
            self.values = []

    def tally(self, value: float, bucket: int | None = None) -> None:
        """Tally one observation of ``value`` (``bucket``: its bucket's index, if known)."""
        values = self.values
        if values is not None:  # a child without the values add() adds to: kept as it is
            values.append(value)
            return
        self.counts[bisect_left(self._bounds, value) if bucket is None else bucket] += 1
        self.total += value

    def add(self) -> None:
        if self.values is not None:
            for value in self.values:
                self._child.observe(value)
            self.values.clear()
            return
        counts = self.counts
        buckets = self._buckets
        for index, count in enumerate(counts):
            if count:
                buckets[index].inc(count)
                counts[index] = 0
        if self.total:
            self._sum.inc(self.total)
            self.total = 0.0
