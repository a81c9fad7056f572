"""Where the evidence comes from: ``/metrics`` dumps (:func:`read_dumps`) and a Prometheus
server's HTTP API (:func:`read_prometheus`)."""

from __future__ import annotations

import http.client
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, Final, Literal

from quotaql.instrumentation import names
from quotaql.tune._show import printable
from quotaql.tune.evidence import (
    HISTOGRAM_METRICS,
    Collector,
    Evidence,
    TuneError,
    bucket_edge,
    check_count,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

DURATION: Final = re.compile(r"(\d+(ms|s|m|h|d|w|y))+")
"""A Prometheus duration (``7d``, ``1h30m``)."""
MAX_INPUT_BYTES: Final = 128 * 1024 * 1024
"""A dump or a Prometheus answer larger than this is refused (a /metrics page is far
smaller: every quotaql series of a large schema is well under a megabyte)."""


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
    collector = Collector(evidence)
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
    collector: Collector, where: str, samples: Iterable[tuple[str, dict[str, str], float]]
) -> None:
    histograms = HISTOGRAM_METRICS
    # Several dumps concatenated repeat every series: a bucket seen again starts the
    # series' next copy (each copy is checked on its own, then they are summed).
    series: dict[str, dict[tuple[tuple[str, str], ...], list[dict[float, float]]]] = {
        metric: {} for metric in histograms
    }
    for name, labels, value in samples:
        for metric in histograms:
            if name == f"{metric}_bucket":
                edge = bucket_edge(where, name, labels)
                count = check_count(where, name, labels, value, exact=True)
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
    collector = Collector(evidence)
    matchers = "{" + selector + "}" if selector else ""

    def counters(metric: str, suffix: str) -> str:
        series = f"{metric}_{suffix}{matchers}"
        return f"increase({series}[{window}])" if window else series

    def gauge(metric: str, how: Literal["min", "max"]) -> str:
        series = f"{metric}{matchers}"
        inner = f"{how}_over_time({series}[{window}])" if window else series
        return f"{how} by ({names.LABEL_COORDINATE}) ({inner})"

    for metric in HISTOGRAM_METRICS:
        by = (
            f"{names.LABEL_OPERATION_TYPE}, {names.LABEL_TIER}"
            if metric == names.COST_ESTIMATE_RATIO
            else names.LABEL_COORDINATE
        )
        series: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
        query = f"sum by ({by}, le) ({counters(metric, 'bucket')})"
        for labels, value in _instant(api, query, deadline, timeout):
            name = f"{metric}_bucket"
            edge = bucket_edge(f"{url} ({query})", name, labels)
            count = check_count(url, name, labels, value, exact=window is None)
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
        raise TuneError(f"{where} refused {query}: {printable(str(error))}")
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
            raise TuneError(f"{where}: {query}: a malformed sample: {printable(str(entry))[:200]}")
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
