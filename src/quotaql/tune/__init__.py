"""``quotaql tune``: list sizes for ``quotaql.toml`` from the tuning metrics of real traffic.

The servers record, for the operations they sample, how many items each list returned
(:meth:`quotaql.instrumentation.metrics.PrometheusMetrics.list_sizes`). This package reads
those metrics, from a Prometheus server (:func:`read_prometheus`) or from ``/metrics`` dumps
(:func:`read_dumps`, both in ``sources``), sums them into :class:`Evidence` (``evidence``),
proposes an ``assumed_size`` per list field and a ``default_list_size`` where the evidence
is strong enough (:func:`propose`, ``proposal``), writes the proposal into the text of
``quotaql.toml`` without touching anything else of it (:func:`edit`, ``editing``):
comments, layout and every other key stay as they are, and reports it (:func:`render` and
:func:`tune`, ``report``). With ``--weights``, it proposes field weights from the resolver
time the servers measured too (:func:`propose_weights`, ``weights``); with ``--candidate``
it writes the proposal to the ``[cost] candidate`` file instead of the live one.

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

from quotaql.tune.editing import edit
from quotaql.tune.evidence import (
    COORDINATE,
    MAX_COUNT,
    Buckets,
    Evidence,
    ListEvidence,
    ResolverEvidence,
    TuneError,
)
from quotaql.tune.proposal import Change, Options, Proposal, propose
from quotaql.tune.report import render, tune
from quotaql.tune.sources import DURATION, MAX_INPUT_BYTES, read_dumps, read_prometheus
from quotaql.tune.weights import WeightOptions, propose_weights

__all__ = [
    "COORDINATE",
    "DURATION",
    "MAX_COUNT",
    "MAX_INPUT_BYTES",
    "Buckets",
    "Change",
    "Evidence",
    "ListEvidence",
    "Options",
    "Proposal",
    "ResolverEvidence",
    "TuneError",
    "WeightOptions",
    "edit",
    "propose",
    "propose_weights",
    "read_dumps",
    "read_prometheus",
    "render",
    "tune",
]
