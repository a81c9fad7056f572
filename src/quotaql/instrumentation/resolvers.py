"""Resolver time in the metrics: what the sampled operations' resolvers took, per schema
coordinate, and per subject (docs/tuning.md "Weights from measured resolver time").

:class:`ResolverTimes` is held by :class:`~quotaql.instrumentation.metrics.PrometheusMetrics`
(its ``resolvers``). It adds each sampled operation's tallies (a
:class:`~quotaql.gate.timing.Timing` per coordinate: calls, seconds, bucket counts) to
``quotaql_resolver_seconds``, and keeps, per coordinate and period (a minute), each
subject's calls and seconds: when the period ends, each subject's mean seconds per call is
one observation of ``quotaql_resolver_subject_seconds``. A subject that calls a field a
million times weighs no more there than one that called it once.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any, Final, Protocol

from quotaql.instrumentation import names
from quotaql.instrumentation.subjects import class_hash
from quotaql.instrumentation.tallies import Pending

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ResolverTimes", "SubjectMeans"]

_BOUNDS: Final = (*names.RESOLVER_BUCKETS, math.inf)
_NO_HASH: Final = 1 << 64  # above every 64-bit hash
_FLUSH_SECONDS: Final = 1.0


class Tallied(Protocol):
    """One coordinate's calls in one operation (a :class:`quotaql.gate.timing.Timing`)."""

    @property
    def calls(self) -> int: ...

    @property
    def seconds(self) -> float: ...

    @property
    def counts(self) -> list[int]: ...


class SubjectMeans:
    """The subjects of one period, each with its calls and their seconds: at most ``kept``
    of them, a bottom-k sample by keyed hash (as
    :class:`~quotaql.instrumentation.subjects.SubjectMaxima`: uniform over the distinct
    subjects, and not one a client can aim at). At most ``2 * kept`` entries."""

    __slots__ = ("kept", "sums", "threshold")

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self.sums: dict[int, list[float]] = {}
        self.threshold = _NO_HASH

    def add(self, who: int, calls: int, seconds: float) -> None:
        if who >= self.threshold:
            return
        sums = self.sums
        known = sums.get(who)
        if known is None:
            sums[who] = [float(calls), seconds]
            if len(sums) >= 2 * self.kept:
                self._keep()
        else:
            known[0] += calls
            known[1] += seconds

    def _keep(self) -> None:
        kept = sorted(self.sums)[: self.kept + 1]
        if len(kept) > self.kept:
            self.threshold = kept.pop()
        self.sums = {who: self.sums[who] for who in kept}

    def close(self) -> list[float]:
        """Each kept subject's mean seconds per call, once; a new period starts."""
        if len(self.sums) > self.kept:
            self._keep()
        means = [seconds / calls for calls, seconds in self.sums.values() if calls > 0]
        self.sums = {}
        self.threshold = _NO_HASH
        return means


class _Series:
    __slots__ = ("calls", "subject_means", "subjects")

    def __init__(self, metrics: Any, coordinate: str, bulk: bool) -> None:
        self.calls = Pending(metrics.resolver_seconds.labels(coordinate), _BOUNDS, bulk)
        self.subject_means = Pending(
            metrics.resolver_subject_seconds.labels(coordinate), _BOUNDS, bulk
        )
        self.subjects = SubjectMeans(names.RESOLVER_SUBJECTS_KEPT)


class ResolverTimes:
    """The resolver-time series of one ``PrometheusMetrics``, tallied and added at most once
    a second (and before each collection: the instruments are collected as ``tuning``)."""

    def __init__(self, metrics: Any, subject_period: float) -> None:
        self._metrics = metrics  # a PrometheusMetrics (not imported: it imports this module)
        self._period = subject_period
        self._period_end: float | None = None
        self._series: dict[str, _Series] = {}
        self._waiting: dict[Pending, None] = {}
        self._flush_at = 0.0
        self._lock = threading.Lock()

    def record(self, timings: Mapping[str, Tallied], subject: str | None = None) -> None:
        """Record one sampled operation's resolver times: ``timings`` by schema coordinate
        (``"Query.products"``, from the schema), ``subject`` who paid (the gate's subject
        key: its class counts once per period and coordinate)."""
        who = None if subject is None else class_hash(subject)
        now = time.monotonic()
        with self._lock:
            if self._period_end is not None and now >= self._period_end:
                self._close_period()
            waiting = self._waiting
            for coordinate, tally in timings.items():
                calls = tally.calls
                if calls <= 0 or not 0 <= tally.seconds < math.inf:
                    continue
                series = self._series.get(coordinate)
                if series is None:
                    series = self._series[coordinate] = _Series(
                        self._metrics, coordinate, self._metrics._bulk
                    )
                pending = series.calls
                if pending.values is None:
                    for index, count in enumerate(tally.counts):
                        pending.counts[index] += count
                    pending.total += tally.seconds
                else:  # one observation per call, at the mean (the buckets are lost)
                    pending.values.extend([tally.seconds / calls] * calls)
                waiting[pending] = None
                if who is not None:
                    series.subjects.add(who, calls, tally.seconds)
            if who is not None and timings and self._period_end is None:
                self._period_end = now + self._period
            if now >= self._flush_at:
                self._flush_at = now + _FLUSH_SECONDS
                self._add_waiting()

    def flush(self, *, final: bool = False) -> None:
        """Add what is tallied now, and the subjects of a period that is over (``final``:
        the current one too)."""
        with self._lock:
            end = self._period_end
            if end is not None and (final or time.monotonic() >= end):
                self._close_period()
            self._add_waiting()

    def _close_period(self) -> None:
        self._period_end = None
        for series in self._series.values():
            pending = series.subject_means
            for mean in series.subjects.close():
                pending.tally(mean)
                self._waiting[pending] = None

    def _add_waiting(self) -> None:
        for pending in self._waiting:
            pending.add()
        self._waiting.clear()
