"""What the tuning metrics say: the histograms and gauges of every list field, summed over
series and sources, checked as they are summed."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from quotaql.instrumentation import names
from quotaql.tune._show import count_text, edge_text, printable

if TYPE_CHECKING:
    from collections.abc import Mapping

#: A field coordinate, the only kind a list size belongs to (and the only text of the
#: metrics that ever reaches quotaql.toml).
COORDINATE: Final = re.compile(r"[_A-Za-z][_0-9A-Za-z]*\.[_A-Za-z][_0-9A-Za-z]*")
MAX_COUNT: Final = float(2**53)
"""Counts above this are not counts (a float holds whole numbers exactly up to 2**53)."""
LIST_METRICS: Final = (
    names.LIST_RETURNED_ITEMS,
    names.LIST_OPERATION_MAX_ITEMS,
    names.LIST_SLICED_RATIO,
    names.LIST_SUBJECT_MAX_ITEMS,
)
RESOLVER_METRICS: Final = (names.RESOLVER_SECONDS, names.RESOLVER_SUBJECT_SECONDS)
HISTOGRAM_METRICS: Final = (*LIST_METRICS, names.COST_ESTIMATE_RATIO, *RESOLVER_METRICS)
"""Every histogram ``quotaql tune`` reads."""


class TuneError(Exception):
    """Input that cannot be used: a file or URL that cannot be read, or does not hold what
    it should. The message names the file or URL."""


@dataclass(frozen=True, slots=True)
class Buckets:
    """One histogram, aggregated: ``cumulative[i]`` observations were ``<= edges[i]``.

    ``edges`` are ascending and end with ``inf``; ``cumulative`` never decreases.
    """

    edges: tuple[float, ...]
    cumulative: tuple[float, ...]
    total_sum: float = 0.0

    @property
    def total(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0

    def at_most(self, value: float) -> tuple[float, float]:
        """How many observations were ``<= value``: ``(low, high)``, equal when ``value`` is
        an edge (or below the first one, or above the largest finite one with nothing in
        the ``+Inf`` bucket)."""
        low = high = None
        for edge, count in zip(self.edges, self.cumulative, strict=True):
            if edge <= value:
                low = count
            if edge >= value and high is None:
                high = count
        return (0.0 if low is None else low), (self.total if high is None else high)

    def quantile_index(self, q: float) -> int | None:
        """The index of the smallest edge holding at least ``q`` of the observations (None
        without observations)."""
        total = self.total
        if total <= 0:
            return None
        wanted = q * total
        for index, count in enumerate(self.cumulative):
            if count >= wanted:
                return index
        return len(self.edges) - 1  # pragma: no cover  (the last count is the total)


@dataclass(slots=True)
class ListEvidence:
    """What the metrics say about one list field."""

    coordinate: str
    returned: Buckets | None = None
    """Items per unsliced list (``quotaql_list_returned_items``)."""
    per_operation: Buckets | None = None
    """Items of each operation's longest unsliced list (``quotaql_list_operation_max_items``)."""
    assumed: tuple[float, float] | None = None
    """The lowest and the highest assumed size the servers report."""
    max_returned: float | None = None
    """The longest unsliced list any process saw since it started."""
    sliced: Buckets | None = None
    """Returned / asked for, per sliced list (``quotaql_list_sliced_ratio``)."""
    subjects: Buckets | None = None
    """Per subject and minute, its longest unsliced list (``quotaql_list_subject_max_items``)."""


@dataclass(slots=True)
class ResolverEvidence:
    """What the metrics say about one field's resolver (``quotaql tune --weights``)."""

    coordinate: str
    calls: Buckets | None = None
    """Seconds per call (``quotaql_resolver_seconds``): its count the calls, its sum their
    seconds."""
    subjects: Buckets | None = None
    """Per subject and minute, its mean seconds per call
    (``quotaql_resolver_subject_seconds``)."""


@dataclass(slots=True)
class Evidence:
    """The tuning metrics of one or several sources."""

    sources: list[str]
    lists: dict[str, ListEvidence] = field(default_factory=dict)
    estimates: dict[tuple[str, str], Buckets] = field(default_factory=dict)
    resolvers: dict[str, ResolverEvidence] = field(default_factory=dict)
    window: str | None = None
    """The Prometheus range the counts were taken over (None: totals since each process
    started, exact)."""
    ignored: list[str] = field(default_factory=list)
    """What was left out, and why (series whose coordinate is not a field coordinate)."""

    @property
    def exact(self) -> bool:
        return self.window is None

    def list_evidence(self, coordinate: str) -> ListEvidence:
        found = self.lists.get(coordinate)
        if found is None:
            found = self.lists[coordinate] = ListEvidence(coordinate)
        return found


class _Histograms:
    """Bucket counts being summed over series: ``{key: {le: count}}``, and each key's sum."""

    def __init__(self, metric: str, exact: bool) -> None:
        self.metric = metric
        self.exact = exact
        self.counts: dict[tuple[str, ...], dict[float, float]] = {}
        self.sums: dict[tuple[str, ...], float] = {}
        self.edges: tuple[float, ...] | None = None

    def add_series(
        self, where: str, key: tuple[str, ...], points: Mapping[float, float], labels: str
    ) -> None:
        """One series' cumulative buckets (``{le: count}``)."""
        edges = tuple(sorted(points))
        if not edges or edges[-1] != math.inf:
            raise TuneError(f"{where}: {self.metric}_bucket{labels} has no +Inf bucket")
        if self.edges is None:
            self.edges = edges
        elif edges != self.edges:
            raise TuneError(
                f"{where}: {self.metric}_bucket{labels}: its buckets differ from those of the"
                " other series (servers of different quotaql versions?)"
            )
        previous = 0.0
        for edge in edges:
            count = points[edge]
            if count < previous and self.exact:
                raise TuneError(
                    f"{where}: {self.metric}_bucket{labels}: the count at le={edge_text(edge)}"
                    f" ({count_text(count)}) is below the one before it ({count_text(previous)})"
                )
            previous = max(previous, count)
        summed = self.counts.setdefault(key, {})
        for edge, count in points.items():
            summed[edge] = summed.get(edge, 0.0) + count

    def buckets(self, key: tuple[str, ...]) -> Buckets:
        points = self.counts[key]
        edges = tuple(sorted(points))
        cumulative = []
        running = 0.0
        for edge in edges:  # what increase() extrapolates may dip: keep it monotonic
            running = max(running, points[edge])
            cumulative.append(running)
        return Buckets(edges, tuple(cumulative), self.sums.get(key, 0.0))


def _labels_text(labels: Mapping[str, str]) -> str:
    inner = ",".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items()))
    return "{" + inner + "}"


def check_count(
    where: str, name: str, labels: Mapping[str, str], value: float, exact: bool
) -> float:
    value = float(value)  # the text parser gives an int for "1"
    if not (0 <= value <= MAX_COUNT):  # NaN, infinities, negatives, absurd magnitudes
        raise TuneError(f"{where}: {name}{_labels_text(labels)}: {value!r} is not a count")
    if exact and not value.is_integer():
        raise TuneError(f"{where}: {name}{_labels_text(labels)}: {value!r} is not a whole count")
    return value


def check_size(where: str, name: str, labels: Mapping[str, str], value: float) -> float:
    value = float(value)
    if not (0 <= value <= MAX_COUNT):
        raise TuneError(f"{where}: {name}{_labels_text(labels)}: {value!r} is not a list size")
    return value


def bucket_edge(where: str, name: str, labels: Mapping[str, str]) -> float:
    text = labels.get("le")
    try:
        edge = float(text) if text is not None else math.nan
    except ValueError:
        edge = math.nan
    if math.isnan(edge):
        raise TuneError(f"{where}: {name}{_labels_text(labels)}: no numeric le label")
    return edge


class Collector:
    """Turns samples (name, labels, value) of one or several sources into :class:`Evidence`."""

    def __init__(self, evidence: Evidence) -> None:
        self.evidence = evidence
        exact = evidence.exact
        self.histograms = {metric: _Histograms(metric, exact) for metric in HISTOGRAM_METRICS}
        self.assumed: dict[str, tuple[float, float]] = {}
        self.maxima: dict[str, float] = {}
        self.bad_coordinates: set[str] = set()

    def _key(self, where: str, metric: str, labels: Mapping[str, str]) -> tuple[str, ...] | None:
        if metric == names.COST_ESTIMATE_RATIO:
            wanted: tuple[str, ...] = (names.LABEL_OPERATION_TYPE, names.LABEL_TIER)
        else:
            wanted = (names.LABEL_COORDINATE,)
        missing = [label for label in wanted if label not in labels]
        if missing:
            raise TuneError(f"{where}: {metric}{_labels_text(labels)} has no {missing[0]} label")
        key = tuple(labels[label] for label in wanted)
        if metric != names.COST_ESTIMATE_RATIO and not COORDINATE.fullmatch(key[0]):
            self.bad_coordinates.add(key[0])
            return None
        return key

    def histogram_series(
        self,
        where: str,
        metric: str,
        series: Mapping[tuple[tuple[str, str], ...], dict[float, float]],
    ) -> None:
        """Each series of ``metric``'s buckets: ``{labels without le: {le: count}}``."""
        histograms = self.histograms[metric]
        for labels_items, points in series.items():
            labels = dict(labels_items)
            key = self._key(where, metric, labels)
            if key is not None:
                histograms.add_series(where, key, points, _labels_text(labels))

    def histogram_sum(
        self, where: str, metric: str, labels: Mapping[str, str], value: float
    ) -> None:
        key = self._key(where, metric, labels)
        if key is None:
            return
        value = float(value)
        if not 0 <= value < math.inf:
            raise TuneError(f"{where}: {metric}_sum{_labels_text(labels)}: {value!r} is not a sum")
        sums = self.histograms[metric].sums
        sums[key] = sums.get(key, 0.0) + value

    def gauge(self, where: str, metric: str, labels: Mapping[str, str], value: float) -> None:
        key = self._key(where, metric, labels)
        if key is None:
            return
        (coordinate,) = key
        size = check_size(where, metric, labels, value)
        if metric == names.LIST_ASSUMED_ITEMS:
            low, high = self.assumed.get(coordinate, (size, size))
            self.assumed[coordinate] = (min(low, size), max(high, size))
        else:
            self.maxima[coordinate] = max(self.maxima.get(coordinate, 0.0), size)

    def finish(self) -> Evidence:
        evidence = self.evidence
        for metric, histograms in self.histograms.items():
            for key in histograms.counts:
                buckets = histograms.buckets(key)
                if metric == names.COST_ESTIMATE_RATIO:
                    operation_type, tier = key
                    evidence.estimates[(operation_type, tier)] = buckets
                    continue
                if metric in RESOLVER_METRICS:
                    found = evidence.resolvers.get(key[0])
                    if found is None:
                        found = evidence.resolvers[key[0]] = ResolverEvidence(key[0])
                    if metric == names.RESOLVER_SECONDS:
                        found.calls = buckets
                    else:
                        found.subjects = buckets
                    continue
                lists = evidence.list_evidence(key[0])
                if metric == names.LIST_RETURNED_ITEMS:
                    lists.returned = buckets
                elif metric == names.LIST_OPERATION_MAX_ITEMS:
                    lists.per_operation = buckets
                elif metric == names.LIST_SUBJECT_MAX_ITEMS:
                    lists.subjects = buckets
                else:
                    lists.sliced = buckets
        for coordinate, assumed in self.assumed.items():
            evidence.list_evidence(coordinate).assumed = assumed
        for coordinate, longest in self.maxima.items():
            evidence.list_evidence(coordinate).max_returned = longest
        if self.bad_coordinates:
            shown = ", ".join(sorted(printable(c) for c in self.bad_coordinates)[:5])
            evidence.ignored.append(
                f"{len(self.bad_coordinates)} coordinate label(s) that are not field"
                f" coordinates (Type.field) were ignored: {shown}"
            )
        return evidence
