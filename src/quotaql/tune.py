"""``quotaql tune``: list sizes for ``quotaql.toml`` from the tuning metrics of real traffic.

The servers record, for the operations they sample, how many items each list returned
(:meth:`quotaql.instrumentation.metrics.PrometheusMetrics.list_sizes`). This module reads
those metrics, from a Prometheus server (:func:`read_prometheus`) or from ``/metrics`` dumps
(:func:`read_dumps`), proposes an ``assumed_size`` per list field and a
``default_list_size`` where the evidence is strong enough (:func:`propose`), and writes the
proposal into the text of ``quotaql.toml`` without touching anything else of it
(:func:`edit`): comments, layout and every other key stay as they are.

What the numbers are (docs/tuning.md says it for users):

- The list metrics are histograms with whole-number bucket edges
  (``names.LIST_SIZE_BUCKETS``). "Lists longer than N" is exact when N is an edge, and a
  range ("between a and b") otherwise. Every proposed size is an edge: the smallest one
  that holds at least the ``quantile`` (0.99) of the lists seen.
- A percentile is given as the range of whole numbers of its bucket ("p50 16 to 20"); the
  maximum comes from a gauge (the longest list since each process started).
- "Operations with a list longer than N" comes from the histogram of each operation's
  longest list of the field: exact per field, and never summed over fields (one operation
  may have lists of several fields).
- Counts are of the sampled operations only. From a dump or from Prometheus without a
  window they are totals since each process started; with ``window`` they are Prometheus'
  ``increase()``, extrapolated (not whole numbers, shown rounded).
"""

from __future__ import annotations

import copy
import difflib
import http.client
import json
import math
import os
import re
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from quotaql.config import load_cost_config
from quotaql.cost_analysis.model import FieldCost
from quotaql.errors import ConfigError
from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from quotaql.cost_analysis.model import CostModel

__all__ = [
    "Buckets",
    "Change",
    "Evidence",
    "ListEvidence",
    "Options",
    "Proposal",
    "TuneError",
    "edit",
    "propose",
    "read_dumps",
    "read_prometheus",
    "render",
    "tune",
]

#: A field coordinate, the only kind a list size belongs to (and the only text of the
#: metrics that ever reaches quotaql.toml).
COORDINATE: Final = re.compile(r"[_A-Za-z][_0-9A-Za-z]*\.[_A-Za-z][_0-9A-Za-z]*")
DURATION: Final = re.compile(r"(\d+(ms|s|m|h|d|w|y))+")
"""A Prometheus duration (``7d``, ``1h30m``)."""
MAX_INPUT_BYTES: Final = 128 * 1024 * 1024
"""A dump or a Prometheus answer larger than this is refused (a /metrics page is far
smaller: every quotaql series of a large schema is well under a megabyte)."""
MAX_COUNT: Final = float(2**53)
"""Counts above this are not counts (a float holds whole numbers exactly up to 2**53)."""
_DEFAULT_LIST_SIZE: Final = "default_list_size"
_ASSUMED_SIZE: Final = "assumed_size"
_LIST_METRICS: Final = (
    names.LIST_RETURNED_ITEMS,
    names.LIST_OPERATION_MAX_ITEMS,
    names.LIST_SLICED_RATIO,
)


class TuneError(Exception):
    """Input that cannot be used: a file or URL that cannot be read, or does not hold what
    it should. The message names the file or URL."""


# --- the evidence ----------------------------------------------------------------------------


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


@dataclass(slots=True)
class Evidence:
    """The tuning metrics of one or several sources."""

    sources: list[str]
    lists: dict[str, ListEvidence] = field(default_factory=dict)
    estimates: dict[tuple[str, str], Buckets] = field(default_factory=dict)
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
                    f"{where}: {self.metric}_bucket{labels}: the count at le={_edge(edge)}"
                    f" ({_count(count)}) is below the one before it ({_count(previous)})"
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


def _edge(value: float) -> str:
    return "+Inf" if value == math.inf else f"{value:g}"


def _labels_text(labels: Mapping[str, str]) -> str:
    inner = ",".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items()))
    return "{" + inner + "}"


def _check_count(
    where: str, name: str, labels: Mapping[str, str], value: float, exact: bool
) -> float:
    value = float(value)  # the text parser gives an int for "1"
    if not (0 <= value <= MAX_COUNT):  # NaN, infinities, negatives, absurd magnitudes
        raise TuneError(f"{where}: {name}{_labels_text(labels)}: {value!r} is not a count")
    if exact and not value.is_integer():
        raise TuneError(f"{where}: {name}{_labels_text(labels)}: {value!r} is not a whole count")
    return value


def _check_size(where: str, name: str, labels: Mapping[str, str], value: float) -> float:
    value = float(value)
    if not (0 <= value <= MAX_COUNT):
        raise TuneError(f"{where}: {name}{_labels_text(labels)}: {value!r} is not a list size")
    return value


def _le(where: str, name: str, labels: Mapping[str, str]) -> float:
    text = labels.get("le")
    try:
        edge = float(text) if text is not None else math.nan
    except ValueError:
        edge = math.nan
    if math.isnan(edge):
        raise TuneError(f"{where}: {name}{_labels_text(labels)}: no numeric le label")
    return edge


class _Collector:
    """Turns samples (name, labels, value) of one or several sources into :class:`Evidence`."""

    def __init__(self, evidence: Evidence) -> None:
        self.evidence = evidence
        exact = evidence.exact
        self.histograms = {
            metric: _Histograms(metric, exact)
            for metric in (*_LIST_METRICS, names.COST_ESTIMATE_RATIO)
        }
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
        size = _check_size(where, metric, labels, value)
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
                lists = evidence.list_evidence(key[0])
                if metric == names.LIST_RETURNED_ITEMS:
                    lists.returned = buckets
                elif metric == names.LIST_OPERATION_MAX_ITEMS:
                    lists.per_operation = buckets
                else:
                    lists.sliced = buckets
        for coordinate, assumed in self.assumed.items():
            evidence.list_evidence(coordinate).assumed = assumed
        for coordinate, longest in self.maxima.items():
            evidence.list_evidence(coordinate).max_returned = longest
        if self.bad_coordinates:
            shown = ", ".join(sorted(_printable(c) for c in self.bad_coordinates)[:5])
            evidence.ignored.append(
                f"{len(self.bad_coordinates)} coordinate label(s) that are not field"
                f" coordinates (Type.field) were ignored: {shown}"
            )
        return evidence


# --- reading dumps ----------------------------------------------------------------------------


def read_dumps(paths: Sequence[str]) -> Evidence:
    """The tuning metrics of ``/metrics`` dumps (the Prometheus text format), summed.

    Each file may hold several dumps one after the other (several workers' pages
    concatenated); ``-`` is the standard input. Counts are summed over every series and
    file, gauges give their range (the assumed sizes) or their maximum.

    Raises:
        TuneError: a file cannot be read, is not the text format, holds a tuning series
            that is malformed (a NaN, negative or fractional count, buckets that decrease,
            no ``+Inf`` bucket), or holds no quotaql metric at all; the message names it.
    """
    try:
        from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415
    except ModuleNotFoundError:  # pragma: no cover  (the cli extra without prometheus)
        raise TuneError(
            "reading --metrics files needs prometheus-client: pip install 'quotaql[prometheus]'"
        ) from None
    evidence = Evidence(sources=list(paths))
    collector = _Collector(evidence)
    for path in paths:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            try:
                with open(path, "rb") as stream:
                    raw = stream.read(MAX_INPUT_BYTES + 1)
            except OSError as exc:
                raise TuneError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if len(raw) > MAX_INPUT_BYTES:
            raise TuneError(
                f"{path}: larger than {MAX_INPUT_BYTES // 2**20} MiB: not a /metrics dump"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TuneError(f"{path}: not UTF-8 text (byte offset {exc.start})") from exc
        samples: list[tuple[str, dict[str, str], float]] = []
        try:
            for family in text_string_to_metric_families(text):
                samples.extend((s.name, s.labels, s.value) for s in family.samples)
        except Exception as exc:  # the parser raises what it raises: say where
            raise TuneError(f"{path}: not the Prometheus text format: {exc}") from None
        if not any(name.startswith("quotaql_") for name, _, _ in samples):
            raise TuneError(f"{path}: no quotaql metric in it: is it a quotaql server's /metrics?")
        _collect_samples(collector, path, samples)
    return collector.finish()


def _collect_samples(
    collector: _Collector, where: str, samples: Iterable[tuple[str, dict[str, str], float]]
) -> None:
    histograms = (*_LIST_METRICS, names.COST_ESTIMATE_RATIO)
    # Several dumps concatenated repeat every series: a bucket seen again starts the
    # series' next copy (each copy is checked on its own, then they are summed).
    series: dict[str, dict[tuple[tuple[str, str], ...], list[dict[float, float]]]] = {
        metric: {} for metric in histograms
    }
    for name, labels, value in samples:
        for metric in histograms:
            if name == f"{metric}_bucket":
                edge = _le(where, name, labels)
                count = _check_count(where, name, labels, value, exact=True)
                rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
                copies = series[metric].setdefault(rest, [{}])
                if edge in copies[-1]:
                    copies.append({})
                copies[-1][edge] = count
                break
            if name == f"{metric}_sum":
                collector.histogram_sum(where, metric, labels, value)
                break
        else:
            if name in (names.LIST_ASSUMED_ITEMS, names.LIST_MAX_RETURNED_ITEMS):
                collector.gauge(where, name, labels, value)
    for metric, found in series.items():
        for series_labels, copies in found.items():
            for points in copies:
                collector.histogram_series(where, metric, {series_labels: points})


# --- reading Prometheus --------------------------------------------------------------------


def read_prometheus(
    url: str, *, selector: str = "", window: str | None = None, timeout: float = 10.0
) -> Evidence:
    """The tuning metrics from a Prometheus server's HTTP API (``/api/v1/query``), summed
    over every instance and worker.

    Args:
        url: the server's root, ``http://host:9090`` (a path prefix is kept).
        selector: label matchers every query gets, ``job="api"``.
        window: a Prometheus duration (``7d``): the counts are ``increase()`` over it, the
            gauges their extremes over it. None: the counters' totals now (since each
            process started), exact.
        timeout: seconds for the whole reading.

    Raises:
        TuneError: the server cannot be reached, does not answer in time, refuses a query
            or answers something else than the API's JSON; the message names the URL.
    """
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise TuneError(f"{url}: not an http:// or https:// URL")
    api = url.rstrip("/") + "/api/v1/query"
    deadline = time.monotonic() + timeout
    if window is not None and not DURATION.fullmatch(window):
        raise TuneError(f"{window!r} is not a Prometheus duration (7d, 12h, 1h30m)")
    evidence = Evidence(sources=[url], window=window)
    collector = _Collector(evidence)
    matchers = "{" + selector + "}" if selector else ""

    def counters(metric: str, suffix: str) -> str:
        series = f"{metric}_{suffix}{matchers}"
        return f"increase({series}[{window}])" if window else series

    def gauge(metric: str, how: Literal["min", "max"]) -> str:
        series = f"{metric}{matchers}"
        inner = f"{how}_over_time({series}[{window}])" if window else series
        return f"{how} by ({names.LABEL_COORDINATE}) ({inner})"

    for metric in (*_LIST_METRICS, names.COST_ESTIMATE_RATIO):
        by = (
            f"{names.LABEL_OPERATION_TYPE}, {names.LABEL_TIER}"
            if metric == names.COST_ESTIMATE_RATIO
            else names.LABEL_COORDINATE
        )
        series: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
        query = f"sum by ({by}, le) ({counters(metric, 'bucket')})"
        for labels, value in _instant(api, query, deadline, timeout):
            name = f"{metric}_bucket"
            edge = _le(f"{url} ({query})", name, labels)
            count = _check_count(url, name, labels, value, exact=window is None)
            rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            series.setdefault(rest, {})[edge] = count
        collector.histogram_series(url, metric, series)
        query = f"sum by ({by}) ({counters(metric, 'sum')})"
        for labels, value in _instant(api, query, deadline, timeout):
            collector.histogram_sum(url, metric, labels, value)
    gauges: tuple[tuple[str, Literal["min", "max"]], ...] = (
        (names.LIST_ASSUMED_ITEMS, "min"),
        (names.LIST_ASSUMED_ITEMS, "max"),
        (names.LIST_MAX_RETURNED_ITEMS, "max"),
    )
    for metric, how in gauges:
        query = gauge(metric, how)
        for labels, value in _instant(api, query, deadline, timeout):
            collector.gauge(url, metric, labels, value)
    return collector.finish()


def _instant(
    api: str, query: str, deadline: float, timeout: float
) -> list[tuple[dict[str, str], float]]:
    """An instant query's vector: ``[(labels, value)]``."""
    request = urllib.request.Request(  # noqa: S310  (the scheme is checked: http or https)
        api + "?" + urllib.parse.urlencode({"query": query}),
        headers={"Accept": "application/json", "User-Agent": "quotaql-tune"},
    )
    where = api.removesuffix("/api/v1/query")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TuneError(f"{where} did not answer within {timeout:g} s")
    status: int | None = None
    try:
        with urllib.request.urlopen(request, timeout=remaining) as response:  # noqa: S310
            body = _read_body(response, deadline, where, timeout)
    except urllib.error.HTTPError as exc:  # Prometheus answers errors with a JSON body
        status = exc.code
        try:
            body = _read_body(exc, deadline, where, timeout)
        except TuneError:
            body = b""
        finally:
            exc.close()
    except TimeoutError:
        raise TuneError(f"{where} did not answer within {timeout:g} s") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise TuneError(f"{where} did not answer within {timeout:g} s") from None
        text = getattr(reason, "strerror", None) or reason
        raise TuneError(f"cannot reach {where}: {text}") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # not HTTP, cut short
        raise TuneError(f"cannot read from {where}: {exc!r}") from None
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        if status is not None:
            raise TuneError(f"{where}: HTTP {status} for {query}") from None
        raise TuneError(f"{where}: not a Prometheus API answer (not JSON)") from None
    if not isinstance(answer, dict):
        raise TuneError(f"{where}: not a Prometheus API answer")
    if answer.get("status") != "success":
        error = answer.get("error") or (f"HTTP {status}" if status else "no error message")
        raise TuneError(f"{where} refused {query}: {_printable(str(error))}")
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise TuneError(f"{where}: {query} did not answer a vector")
    result = data.get("result")
    if not isinstance(result, list):
        raise TuneError(f"{where}: {query}: no result list")
    samples = []
    for entry in result:
        labels = entry.get("metric") if isinstance(entry, dict) else None
        point = entry.get("value") if isinstance(entry, dict) else None
        if (
            not isinstance(labels, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
            or not isinstance(point, list)
            or len(point) != 2
            or not isinstance(point[1], str)
        ):
            raise TuneError(f"{where}: {query}: a malformed sample: {_printable(str(entry))[:200]}")
        try:
            value = float(point[1])
        except ValueError:
            raise TuneError(f"{where}: {query}: {point[1]!r} is not a number") from None
        samples.append((labels, value))
    return samples


def _read_body(response: Any, deadline: float, where: str, timeout: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TuneError(f"{where} did not answer within {timeout:g} s")
        chunk = response.read(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_INPUT_BYTES:
            raise TuneError(f"{where}: an answer larger than {MAX_INPUT_BYTES // 2**20} MiB")
        chunks.append(chunk)


# --- the proposal ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    """How strong the evidence must be.

    Attributes:
        quantile: a proposed size holds at least this share of the lists seen.
        min_lists: the fewest lists of a field (or of all fields on the default) that
            support a change.
        over_factor: lower a size only when it is more than this many times what the
            lists need (raising needs no factor: any size that misses ``quantile`` of the
            lists is raised).
    """

    quantile: float = 0.99
    min_lists: int = 100
    over_factor: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.quantile <= 1:
            raise ValueError(f"quantile must be in (0, 1], got {self.quantile}")
        if self.min_lists < 1:
            raise ValueError(f"min_lists must be >= 1, got {self.min_lists}")
        if not self.over_factor >= 1:
            raise ValueError(f"over_factor must be >= 1, got {self.over_factor}")


@dataclass(frozen=True, slots=True)
class Change:
    """One edit of ``quotaql.toml``: ``coordinate``'s ``assumed_size`` (or, for ``None``,
    ``[cost] default_list_size``) becomes ``new``; ``evidence`` says why."""

    coordinate: str | None
    old: int
    """The size the servers assumed (for the default: the file's, or its default 10)."""
    new: int
    evidence: tuple[str, ...]

    @property
    def key(self) -> str:
        if self.coordinate is None:
            return f"[cost] {_DEFAULT_LIST_SIZE}"
        return f'[cost.weights."{self.coordinate}"] {_ASSUMED_SIZE}'


@dataclass(slots=True)
class Proposal:
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Findings that change nothing (too little evidence, sizes beyond the buckets, lists
    longer than their slicing argument, servers that disagree)."""
    estimates: list[str] = field(default_factory=list)
    """How the operations' estimates compare with their actual cost."""


_Direction = Literal["raise", "lower"]


@dataclass(frozen=True, slots=True)
class _Field:
    """One list field's sizes, as the proposal sees them."""

    coordinate: str
    lists: ListEvidence
    returned: Buckets
    source: Literal["file", "default", "schema"]
    current: int
    """The size the servers assumed for these lists."""
    in_file: int | None
    """Its ``assumed_size`` in the file."""


def propose(evidence: Evidence, model: CostModel, options: Options | None = None) -> Proposal:
    """The changes of list sizes that ``evidence`` supports for the file ``model`` was read
    from (see the module docstring for what each number means)."""
    options = options or Options()
    proposal = Proposal(notes=list(evidence.ignored))
    default = model.default_list_size
    fields: list[_Field] = []
    for coordinate in sorted(evidence.lists):
        lists = evidence.lists[coordinate]
        found = _field(coordinate, lists, model, proposal.notes)
        if found is not None:
            fields.append(found)
    on_default = [f for f in fields if f.source == "default"]
    new_default = _propose_default(on_default, default, evidence, options, proposal)
    few = []
    for found in fields:
        # Decided against what the file will make the servers assume: the new default, the
        # file's assumed_size (which the servers may not have reloaded yet), else theirs.
        if found.source == "default" and new_default is not None:
            decided_at = new_default
        elif found.in_file is not None:
            decided_at = found.in_file
        else:
            decided_at = found.current
        if found.returned.total < options.min_lists:
            few.append(f"{found.coordinate} ({_count(found.returned.total)})")
            continue
        target = _target(found.returned, options.quantile, _exact_max(evidence, [found]))
        if target is None:
            proposal.notes.append(_beyond_buckets(found, options.quantile))
            continue
        direction = _direction(found.returned, decided_at, target, options)
        if direction is None:
            continue
        proposal.changes.append(
            Change(
                found.coordinate,
                found.current,
                target,
                tuple(_field_evidence(found, target, direction, evidence, options, default)),
            )
        )
    if few:
        proposal.notes.append(
            f"fewer than {options.min_lists} lists seen, no change proposed: {', '.join(few)}"
        )
    proposal.notes.extend(_sliced_notes(evidence, options))
    proposal.estimates.extend(_estimate_lines(evidence))
    if not evidence.lists and not evidence.estimates:
        proposal.notes.append(
            "no tuning metric found: do the servers sample operations for tuning, and run a"
            " quotaql that records them?"
        )
    return proposal


def _field(
    coordinate: str, lists: ListEvidence, model: CostModel, notes: list[str]
) -> _Field | None:
    if lists.returned is None or lists.returned.total <= 0:
        return None
    settings = model.weights.get(coordinate)
    in_file = settings.assumed_size if isinstance(settings, FieldCost) else None
    if lists.assumed is not None:
        low, high = lists.assumed
        if low != high:
            notes.append(
                f"{coordinate}: the servers assumed different sizes ({_size(low)} to"
                f" {_size(high)}): a configuration still rolling out? No change proposed."
            )
            return None
        if not high.is_integer():
            notes.append(f"{coordinate}: the servers assumed {high!r} items: not a list size")
            return None
        current = int(high)
    elif in_file is not None:
        current = in_file
    else:
        notes.append(
            f"{coordinate}: no {names.LIST_ASSUMED_ITEMS} series, and no assumed_size in the"
            " file: what the lists were priced at is unknown. No change proposed."
        )
        return None
    if in_file is not None:
        source: Literal["file", "default", "schema"] = "file"
        if current != in_file:
            notes.append(
                f"{coordinate}: the servers assumed {current} items, the file says"
                f" assumed_size = {in_file} (not reloaded yet, or another file?); the evidence"
                f" is at {current}."
            )
    elif current == model.default_list_size:
        source = "default"
    else:
        source = "schema"
    return _Field(coordinate, lists, lists.returned, source, current, in_file)


def _target(buckets: Buckets, quantile: float, longest: float | None) -> int | None:
    """The smallest finite edge holding ``quantile`` of the lists, or ``longest`` (the
    longest list, when the counts are exact) where it is below that edge: every list had at
    most that many items. None: the quantile is above the largest finite edge."""
    index = buckets.quantile_index(quantile)
    if index is None:
        return None
    edge = buckets.edges[index]
    if edge == math.inf:
        return None
    below = buckets.edges[index - 1] if index > 0 else -1.0
    if longest is not None and below < longest < edge:
        return math.ceil(longest)
    return int(edge)


def _direction(buckets: Buckets, current: int, target: int, options: Options) -> _Direction | None:
    """``raise`` when ``current`` certainly holds less than ``quantile`` of the lists,
    ``lower`` when it is more than ``over_factor`` times ``target``."""
    _, at_most_high = buckets.at_most(current)
    if current < target and at_most_high < options.quantile * buckets.total:
        return "raise"
    if current > target and current > options.over_factor * target:
        return "lower"
    return None


def _propose_default(
    on_default: list[_Field], default: int, evidence: Evidence, options: Options, proposal: Proposal
) -> int | None:
    """A new ``default_list_size`` when most fields on the default (at least two with
    ``min_lists`` lists each) are off the same way, and all their lists together agree."""
    supported = [f for f in on_default if f.returned.total >= options.min_lists]
    if len(supported) < 2:
        return None
    directions = []
    for found in supported:
        target = _target(found.returned, options.quantile, _exact_max(evidence, [found]))
        directions.append(
            None if target is None else _direction(found.returned, default, target, options)
        )
    for wanted in ("raise", "lower"):
        agreeing = [f for f, d in zip(supported, directions, strict=True) if d == wanted]
        if 2 * len(agreeing) <= len(supported):
            continue
        pooled = _pool([f.returned for f in on_default])
        target = _target(pooled, options.quantile, _exact_max(evidence, on_default))
        if target is None or _direction(pooled, default, target, options) != wanted:
            return None
        lines = [
            f"default_list_size {default} -> {target}: {len(agreeing)} of the"
            f" {len(supported)} list fields on the default with {options.min_lists}+ lists"
            f" need a {'larger' if wanted == 'raise' else 'smaller'} size",
            f"  fields on the default: {', '.join(f.coordinate for f in on_default)}",
            *_size_lines(pooled, None, evidence, options.quantile, max_of=on_default),
            *_at_lines(pooled, None, default, target, evidence, on_default),
            "  it also sizes every list field the sampled operations did not return, and"
            " those whose schema gives no size: review them with quotaql cost",
        ]
        proposal.changes.append(Change(None, default, target, tuple(lines)))
        return target
    return None


def _pool(all_buckets: Sequence[Buckets]) -> Buckets:
    edges = all_buckets[0].edges
    cumulative = [0.0] * len(edges)
    total_sum = 0.0
    for buckets in all_buckets:
        if buckets.edges != edges:  # pragma: no cover  (_Histograms refuses mixed edges)
            raise TuneError("the list histograms have different buckets")
        for index, count in enumerate(buckets.cumulative):
            cumulative[index] += count
        total_sum += buckets.total_sum
    return Buckets(edges, tuple(cumulative), total_sum)


def _field_evidence(
    found: _Field,
    target: int,
    direction: _Direction,
    evidence: Evidence,
    options: Options,
    default: int,
) -> Iterator[str]:
    source = {
        "file": f"assumed_size in the file (assumed_size = {found.in_file})",
        "default": f"default_list_size (default_list_size = {default})",
        "schema": "the schema (@listSize(assumedSize:), or a slicing argument's default value)",
    }[found.source]
    why = "longer" if direction == "raise" else "much shorter"
    yield (
        f"{found.coordinate}: assumed_size {found.current} -> {target}"
        f" (its lists were {why} than assumed)"
    )
    yield f"  the servers assumed {found.current} items, from {source}"
    if found.source == "schema":
        yield (
            "  an assumed_size in quotaql.toml overrides @listSize(assumedSize:), not a"
            " slicing argument's default value: if that is what sizes this field, change it"
            " in the schema instead"
        )
    yield from _size_lines(found.returned, found.lists, evidence, options.quantile)
    yield from _at_lines(
        found.returned, found.lists.per_operation, found.current, target, evidence, [found]
    )


def _size_lines(
    buckets: Buckets,
    lists: ListEvidence | None,
    evidence: Evidence,
    quantile: float,
    *,
    max_of: Sequence[_Field] = (),
) -> Iterator[str]:
    longest = lists.max_returned if lists is not None else None
    if max_of:
        maxima = [f.lists.max_returned for f in max_of if f.lists.max_returned is not None]
        longest = max(maxima) if len(maxima) == len(max_of) else None
    operations = ""
    if lists is not None and lists.per_operation is not None:
        operations = f" in {_count(lists.per_operation.total)} sampled operations"
    yield f"  lists seen: {_count(buckets.total)}{operations}"
    percentiles = [
        f"p{_percent(q)} {_quantile_text(buckets, q, longest)}"
        for q in sorted({0.5, 0.95, quantile})
    ]
    maximum = f", max {_size(longest)}" if longest is not None else ""
    yield f"  items per list: {', '.join(percentiles)}{maximum}"
    if buckets.total > 0:
        yield f"  mean items per list: {buckets.total_sum / buckets.total:.3g}"


def _at_lines(
    buckets: Buckets,
    per_operation: Buckets | None,
    now: int,
    target: int,
    evidence: Evidence,
    fields: Sequence[_Field],
) -> Iterator[str]:
    longest = _exact_max(evidence, fields)
    yield (
        f"  lists longer than the size (under-estimated): {_longer(buckets, now, longest)} at"
        f" {now} now, {_longer(buckets, target, longest)} at {target}"
    )
    yield (
        f"  lists shorter than the size (over-estimated): {_shorter(buckets, now)} at {now} now,"
        f" {_shorter(buckets, target)} at {target}"
    )
    if per_operation is not None:
        yield (
            "  operations with a list of this field longer than the size:"
            f" {_longer(per_operation, now, longest)} at {now} now,"
            f" {_longer(per_operation, target, longest)} at {target}"
            f" (of {_count(per_operation.total)})"
        )


def _exact_max(evidence: Evidence, fields: Sequence[_Field]) -> float | None:
    """The longest list of ``fields``, where it bounds the counts: totals since each process
    started, as the maximum gauge is (a window's counts may come from processes that are
    gone, whose maximum no longer counts)."""
    return _known_max(fields) if evidence.exact else None


def _known_max(fields: Sequence[_Field]) -> float | None:
    maxima = [f.lists.max_returned for f in fields]
    if not maxima or any(m is None for m in maxima):
        return None
    return max(m for m in maxima if m is not None)


def _longer(buckets: Buckets, size: int, longest: float | None) -> str:
    """Observations above ``size``: exact at an edge (or when the maximum is within it)."""
    if longest is not None and longest <= size:
        return "0"
    low, high = buckets.at_most(size)
    return _count_range(buckets.total - high, buckets.total - low)


def _shorter(buckets: Buckets, size: int) -> str:
    """Observations below ``size`` (whole numbers: at most ``size - 1``)."""
    if size <= 0:
        return "0"
    low, high = buckets.at_most(size - 1)
    return _count_range(low, high)


def _quantile_text(buckets: Buckets, q: float, longest: float | None) -> str:
    index = buckets.quantile_index(q)
    if index is None:
        return "-"
    edges = buckets.edges
    upper = edges[index]
    lower = edges[index - 1] + 1 if index > 0 else 0.0
    if upper == math.inf:
        if longest is not None and longest >= lower:
            return f"{_size(lower)} to {_size(longest)}"
        return f"more than {_size(lower - 1)}"
    if longest is not None and lower <= longest < upper:
        upper = longest
    return _size(upper) if lower >= upper else f"{_size(lower)} to {_size(upper)}"


def _beyond_buckets(found: _Field, quantile: float) -> str:
    top = found.returned.edges[-2] if len(found.returned.edges) > 1 else 0
    longest = found.lists.max_returned
    seen = f" (the longest seen: {_size(longest)})" if longest is not None else ""
    return (
        f"{found.coordinate}: p{_percent(quantile)} of its lists is above {_size(top)} items,"
        f" the largest bucket{seen}: set its assumed_size by hand"
    )


def _sliced_notes(evidence: Evidence, options: Options) -> Iterator[str]:
    for coordinate in sorted(evidence.lists):
        sliced = evidence.lists[coordinate].sliced
        if sliced is None or sliced.total <= 0:
            continue
        _, at_most_one = sliced.at_most(1.0)
        more = sliced.total - at_most_one
        if more > 0:
            yield (
                f"{coordinate}: {_count(more)} of {_count(sliced.total)} lists sized by a slicing"
                " argument returned more items than it asked for: the resolver does not enforce"
                " the argument, or it is not a limit (slicing_arguments); quotaql"
                " under-estimates those operations"
            )
        elif sliced.total >= options.min_lists:
            index = sliced.quantile_index(0.5)
            if index is not None and sliced.edges[index] <= 0.25:
                yield (
                    f"{coordinate}: clients ask for much more than they get (half of"
                    f" {_count(sliced.total)} sliced lists returned at most"
                    f" {sliced.edges[index]:g} of what their argument asked for): their"
                    " estimates are pessimistic; quotaql.toml cannot change what clients ask"
                )


def _estimate_lines(evidence: Evidence) -> Iterator[str]:
    for (operation_type, tier), buckets in sorted(evidence.estimates.items()):
        if buckets.total <= 0:
            continue
        _, at_most_one = buckets.at_most(1.0)
        low, high = buckets.at_most(0.9)
        index = buckets.quantile_index(0.5)
        median = "-"
        if index is not None:
            upper = buckets.edges[index]
            lower = buckets.edges[index - 1] if index > 0 else None
            median = f"{_edge(upper)}" if lower is None else f"{lower:g} to {_edge(upper)}"
        yield (
            f"{_printable(operation_type)} / {_printable(tier)}: {_count(buckets.total)}"
            f" operations; actual cost above the estimate: {_count(buckets.total - at_most_one)};"
            f" at most 90% of it: {_count_range(low, high)}; median actual / estimate: {median}"
        )


def _percent(q: float) -> str:
    return f"{q * 100:g}"


def _size(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.6g}"


def _count(value: float) -> str:
    return f"{round(value):,}"


def _count_range(low: float, high: float) -> str:
    low_text, high_text = _count(low), _count(high)
    return low_text if low_text == high_text else f"between {low_text} and {high_text}"


_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """``text`` with control characters escaped: label values are whatever was scraped."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


# --- editing quotaql.toml ----------------------------------------------------------------------


class _Unsupported(Exception):
    """A layout the text editor does not handle (the change is then left to the user)."""


@dataclass(frozen=True, slots=True)
class _Statement:
    kind: Literal["table", "array", "pair"]
    path: tuple[str, ...]
    """A header's table, or a pair's full key (its table's path and its own key)."""
    start: int
    end: int
    """After the statement's line (its newline included)."""
    value: tuple[int, int] = (0, 0)
    """A pair's value, as offsets into the text."""


_WS: Final = " \t"
_BARE: Final = re.compile(r"[A-Za-z0-9_-]+")
_DATE_TIME_SPACE: Final = re.compile(r"\d{4}-\d{2}-\d{2} \d")


class _Scanner:
    """The statements of a TOML document, with where each is in the text (TOML 1.0)."""

    def __init__(self, text: str, pos: int = 0) -> None:
        self.text = text
        self.pos = pos

    def statements(self) -> list[_Statement]:
        """Every table header and key/value pair of the document."""
        text = self.text
        statements = []
        table: tuple[str, ...] = ()
        while True:
            self._skip(_WS)
            if self.pos >= len(text):
                break
            char = text[self.pos]
            if char in "\r\n":
                self._newline()
                continue
            if char == "#":
                self._comment()
                continue
            start = self._line_start(self.pos)
            if char == "[":
                array = text.startswith("[[", self.pos)
                self.pos += 2 if array else 1
                table = self._key()
                closing = "]]" if array else "]"
                if not text.startswith(closing, self.pos):
                    raise self._error("expected ] after a table name")
                self.pos += len(closing)
                self._end_of_line()
                statements.append(_Statement("array" if array else "table", table, start, self.pos))
                continue
            key = self._key()
            if not text.startswith("=", self.pos):
                raise self._error("expected = after a key")
            self.pos += 1
            self._skip(_WS)
            value_start = self.pos
            self._value()
            value_end = self.pos
            self._end_of_line()
            statements.append(
                _Statement("pair", (*table, *key), start, self.pos, (value_start, value_end))
            )
        return statements

    def _error(self, what: str) -> _Unsupported:
        line = self.text.count("\n", 0, self.pos) + 1
        return _Unsupported(f"line {line}: {what}")

    def _line_start(self, pos: int) -> int:
        return self.text.rfind("\n", 0, pos) + 1

    def _skip(self, chars: str) -> None:
        text = self.text
        while self.pos < len(text) and text[self.pos] in chars:
            self.pos += 1

    def _newline(self) -> None:
        if self.text.startswith("\r\n", self.pos):
            self.pos += 2
        elif self.text[self.pos] == "\n":
            self.pos += 1
        else:
            raise self._error("a carriage return without a line feed")

    def _comment(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    def _end_of_line(self) -> None:
        self._skip(_WS)
        if self.pos < len(self.text) and self.text[self.pos] == "#":
            self._comment()
        if self.pos < len(self.text):
            if self.text[self.pos] not in "\r\n":
                raise self._error("expected the end of the line")
            self._newline()

    def _key(self) -> tuple[str, ...]:
        parts = []
        while True:
            self._skip(_WS)
            parts.append(self._simple_key())
            self._skip(_WS)
            if self.text.startswith(".", self.pos):
                self.pos += 1
                continue
            return tuple(parts)

    def _simple_key(self) -> str:
        text = self.text
        start = self.pos
        if text.startswith('"', start):
            self._basic_string()
        elif text.startswith("'", start):
            self._literal_string()
        else:
            match = _BARE.match(text, start)
            if match is None:
                raise self._error("expected a key")
            self.pos = match.end()
            return match.group()
        raw = text[start : self.pos]
        try:
            key: str = tomllib.loads(f"k = {raw}")["k"]  # TOML's own unescaping
        except tomllib.TOMLDecodeError as exc:  # pragma: no cover  (the file loaded)
            raise self._error(f"a key that does not parse: {exc}") from exc
        return key

    def _basic_string(self) -> None:
        text = self.text
        if text.startswith('"""', self.pos):
            self.pos += 3
            while self.pos < len(text):
                char = text[self.pos]
                if char == "\\":
                    self.pos += 2
                    continue
                if text.startswith('"""', self.pos):
                    run = 3
                    while text.startswith('"', self.pos + run) and run < 5:
                        run += 1
                    self.pos += run
                    return
                self.pos += 1
            raise self._error("an unterminated string")
        self.pos += 1
        while self.pos < len(text):
            char = text[self.pos]
            if char == "\\":
                self.pos += 2
                continue
            if char in "\r\n":
                break
            self.pos += 1
            if char == '"':
                return
        raise self._error("an unterminated string")

    def _literal_string(self) -> None:
        text = self.text
        if text.startswith("'''", self.pos):
            end = text.find("'''", self.pos + 3)
            if end < 0:
                raise self._error("an unterminated string")
            run = 3
            while text.startswith("'", end + run) and run < 5:
                run += 1
            self.pos = end + run
            return
        end = text.find("'", self.pos + 1)
        newline = text.find("\n", self.pos + 1)
        if end < 0 or 0 <= newline < end:
            raise self._error("an unterminated string")
        self.pos = end + 1

    def _gap(self) -> None:
        """Whitespace, newlines and comments (inside an array)."""
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in _WS:
                self.pos += 1
            elif char in "\r\n":
                self._newline()
            elif char == "#":
                self._comment()
            else:
                return

    def _value(self) -> None:
        text = self.text
        if self.pos >= len(text):
            raise self._error("expected a value")
        char = text[self.pos]
        if char == '"':
            self._basic_string()
        elif char == "'":
            self._literal_string()
        elif char == "[":
            self.pos += 1
            while True:
                self._gap()
                if text.startswith("]", self.pos):
                    self.pos += 1
                    return
                self._value()
                self._gap()
                if text.startswith(",", self.pos):
                    self.pos += 1
                elif not text.startswith("]", self.pos):
                    raise self._error("expected , or ] in an array")
        elif char == "{":
            self.inline_pairs()
        else:
            start = self.pos
            while self.pos < len(text) and text[self.pos] not in " \t\r\n,]}#":
                self.pos += 1
            if _DATE_TIME_SPACE.match(text, start) and self.pos - start == 10:
                self.pos += 1  # "1979-05-27 07:32:00": the space between date and time
                while self.pos < len(text) and text[self.pos] not in " \t\r\n,]}#":
                    self.pos += 1
            if self.pos == start:
                raise self._error("expected a value")

    def inline_pairs(self) -> list[tuple[tuple[str, ...], int, int]]:
        """Read the inline table at ``pos``: its pairs ``(key, value start, value end)``."""
        text = self.text
        self.pos += 1  # {
        pairs: list[tuple[tuple[str, ...], int, int]] = []
        self._gap()
        if text.startswith("}", self.pos):
            self.pos += 1
            return pairs
        while True:
            self._gap()
            key = self._key()
            if not text.startswith("=", self.pos):
                raise self._error("expected = in an inline table")
            self.pos += 1
            self._skip(_WS)
            start = self.pos
            self._value()
            pairs.append((key, start, self.pos))
            self._gap()
            if text.startswith(",", self.pos):
                self.pos += 1
                self._gap()
                if text.startswith("}", self.pos):  # TOML 1.1's trailing comma
                    self.pos += 1
                    return pairs
            elif text.startswith("}", self.pos):
                self.pos += 1
                return pairs
            else:
                raise self._error("expected , or } in an inline table")


def _inline(text: str, start: int) -> tuple[list[tuple[tuple[str, ...], int, int]], int]:
    scanner = _Scanner(text, start)
    pairs = scanner.inline_pairs()
    return pairs, scanner.pos


def _newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _table_end(statements: Sequence[_Statement], header: int) -> int:
    """Where a line goes to be the last of the table whose header is ``statements[header]``:
    after its last pair (comments before the next header stay with that header)."""
    end = statements[header].end
    for statement in statements[header + 1 :]:
        if statement.kind != "pair":
            break
        end = statement.end
    return end


def _insert(text: str, at: int, lines: Sequence[str]) -> str:
    newline = _newline_of(text)
    before = text[:at]
    if before and not before.endswith("\n"):
        before += newline
    return before + "".join(line + newline for line in lines) + text[at:]


def _append_block(text: str, lines: Sequence[str]) -> str:
    newline = _newline_of(text)
    if text and not text.endswith("\n"):
        text += newline
    if text.strip():
        text += newline  # a blank line before the new table
    return text + "".join(line + newline for line in lines)


def _header(statements: Sequence[_Statement], path: tuple[str, ...]) -> int | None:
    for index, statement in enumerate(statements):
        if statement.kind == "table" and statement.path == path:
            return index
    return None


def _set_assumed_size(text: str, coordinate: str, size: int) -> str:
    statements = _Scanner(text).statements()
    table = ("cost", "weights", coordinate)
    quoted = json.dumps(coordinate)
    header = _header(statements, table)
    if header is not None:  # [cost.weights."Query.products"]
        for statement in statements[header + 1 :]:
            if statement.kind != "pair":
                break
            if statement.path == (*table, _ASSUMED_SIZE):
                start, end = statement.value
                return text[:start] + str(size) + text[end:]
        return _insert(text, _table_end(statements, header), [f"{_ASSUMED_SIZE} = {size}"])
    for statement in statements:
        if statement.kind != "pair":
            continue
        if statement.path == table:  # "Query.products" = { ... } or = 3
            start, end = statement.value
            if text.startswith("{", start):
                return _edit_inline(text, start, size)
            weight = text[start:end]
            return text[:start] + f"{{ weight = {weight}, {_ASSUMED_SIZE} = {size} }}" + text[end:]
        if statement.path[: len(table)] == table or (
            len(statement.path) < len(table) and table[: len(statement.path)] == statement.path
        ):
            # Dotted keys ("Query.products".weight = 2) or weights = { ... }: not by hand here.
            raise _Unsupported(f"{coordinate} is set with dotted keys or an inline table")
    weights = _header(statements, ("cost", "weights"))
    if weights is not None:  # [cost.weights]: one more line there
        return _insert(
            text, _table_end(statements, weights), [f"{quoted} = {{ {_ASSUMED_SIZE} = {size} }}"]
        )
    tables = [
        i
        for i, s in enumerate(statements)
        if s.kind == "table" and len(s.path) == 3 and s.path[:2] == ("cost", "weights")
    ]
    block = [f"[cost.weights.{quoted}]", f"{_ASSUMED_SIZE} = {size}"]
    if tables:  # [cost.weights."Type.field"] tables: one more after the last
        return _insert(text, _table_end(statements, tables[-1]), ["", *block])
    new_weights = ["[cost.weights]", f"{quoted} = {{ {_ASSUMED_SIZE} = {size} }}"]
    cost = _header(statements, ("cost",))
    if cost is not None:  # after the [cost] table's keys
        return _insert(text, _table_end(statements, cost), ["", *new_weights])
    return _append_block(text, new_weights)


def _edit_inline(text: str, start: int, size: int) -> str:
    pairs, end = _inline(text, start)
    for key, value_start, value_end in pairs:
        if key == (_ASSUMED_SIZE,):
            return text[:value_start] + str(size) + text[value_end:]
    if not pairs:
        return text[:start] + f"{{ {_ASSUMED_SIZE} = {size} }}" + text[end:]
    last_end = pairs[-1][2]
    return text[:last_end] + f", {_ASSUMED_SIZE} = {size}" + text[last_end:]


def _set_default_list_size(text: str, size: int) -> str:
    statements = _Scanner(text).statements()
    for statement in statements:
        if statement.kind == "pair" and statement.path == ("cost", _DEFAULT_LIST_SIZE):
            start, end = statement.value
            return text[:start] + str(size) + text[end:]
    cost = _header(statements, ("cost",))
    if cost is not None:
        return _insert(text, _table_end(statements, cost), [f"{_DEFAULT_LIST_SIZE} = {size}"])
    return _append_block(text, ["[cost]", f"{_DEFAULT_LIST_SIZE} = {size}"])


def _expected(data: dict[str, Any], change: Change) -> dict[str, Any]:
    """What the file's data must be after ``change``."""
    expected = copy.deepcopy(data)
    cost = expected.setdefault("cost", {})
    if change.coordinate is None:
        cost[_DEFAULT_LIST_SIZE] = change.new
        return expected
    weights = cost.setdefault("weights", {})
    current = weights.get(change.coordinate)
    if isinstance(current, dict):
        current[_ASSUMED_SIZE] = change.new
    elif current is None:
        weights[change.coordinate] = {_ASSUMED_SIZE: change.new}
    else:
        weights[change.coordinate] = {"weight": current, _ASSUMED_SIZE: change.new}
    return expected


def edit(text: str, changes: Sequence[Change]) -> tuple[str, list[Change]]:
    """``text`` (a ``quotaql.toml``) with ``changes`` made, and the changes it could not make.

    The text is edited, not re-serialised: a value is replaced in place, a missing key is
    added to its table (or its table added after ``[cost]``), and nothing else moves. Each
    change is checked by parsing the result: its data must be the file's with exactly that
    change; a change that would come out otherwise is not made, and is returned.
    """
    data = tomllib.loads(text)
    skipped = []
    for change in changes:
        try:
            if change.coordinate is None:
                edited = _set_default_list_size(text, change.new)
            else:
                edited = _set_assumed_size(text, change.coordinate, change.new)
            expected = _expected(data, change)
            if tomllib.loads(edited) != expected:
                raise _Unsupported("the edit would change something else")
        except (_Unsupported, tomllib.TOMLDecodeError):
            skipped.append(change)
            continue
        text, data = edited, expected
    return text, skipped


# --- the report ---------------------------------------------------------------------------


def _diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), path, path
    )
    return "".join(
        line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines
    )


def render(
    proposal: Proposal,
    evidence: Evidence,
    path: str,
    old: str,
    new: str,
    skipped: Sequence[Change] = (),
    options: Options | None = None,
) -> str:
    """The report: ``#`` comment lines (the evidence of each change, the notes, the
    estimates), then the unified diff of ``path`` (``patch`` and ``git apply`` skip the
    comment lines)."""
    options = options or Options()
    sources = ", ".join(evidence.sources)
    if evidence.window is None:
        counts = "totals since each server process started (exact)"
    else:
        counts = f"Prometheus increase() over {evidence.window} (extrapolated, rounded)"
    out = [
        f"quotaql tune: {path}, from {sources}",
        f"counts: of the sampled operations, {counts}; a proposed size holds at least"
        f" p{_percent(options.quantile)} of a field's lists and needs {options.min_lists}+ lists",
    ]
    for change in proposal.changes:
        out.append("")
        out.extend(change.evidence)
    for change in skipped:
        out.append("")
        out.append(
            f"not edited (its layout in {path} is not one tune edits): set {change.key} ="
            f" {change.new} by hand"
        )
    if proposal.notes:
        out.append("")
        out.append("notes:")
        out.extend(f"  {note}" for note in proposal.notes)
    if proposal.estimates:
        out.append("")
        out.append("estimates (actual / estimated cost per operation, by operation type / tier):")
        out.extend(f"  {line}" for line in proposal.estimates)
    if not proposal.changes:
        out.append("")
        out.append("no change proposed")
    report = "".join(f"# {line}".rstrip() + "\n" for line in out)
    return report + _diff(path, old, new)


def tune(
    config: str | os.PathLike[str],
    evidence: Evidence,
    options: Options | None = None,
    *,
    write: bool = False,
) -> tuple[str, Proposal]:
    """Propose list sizes for ``config`` from ``evidence``: the report (:func:`render`) and
    the proposal; with ``write``, the edited text replaces the file.

    Raises:
        TuneError: ``config`` cannot be read or is not a valid quotaql.toml.
    """
    path = os.fspath(config)
    try:
        model = load_cost_config(path).model
    except ConfigError as error:
        raise TuneError(str(error)) from None
    try:
        old = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # pragma: no cover  (it just loaded)
        raise TuneError(f"cannot read {path}: {exc}") from None
    proposal = propose(evidence, model, options)
    new, skipped = edit(old, proposal.changes)
    if write and new != old:
        _replace(path, new)
    return render(proposal, evidence, path, old, new, skipped, options), proposal


def _replace(path: str, text: str) -> None:
    """Write ``text`` to ``path`` at once (a server reloading it sees the old or the new)."""
    target = Path(path)
    mode = target.stat().st_mode & 0o7777
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(text.encode("utf-8"))
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
