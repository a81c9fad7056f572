"""Every metric, label, span and attribute name quotaql emits: the one source for the code,
the generated Grafana dashboards and the Prometheus alert rules.

Metric names are the names Prometheus stores (counters with their ``_total``; histograms
without their ``_bucket`` / ``_sum`` / ``_count`` series suffixes).
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

# -- metrics ---------------------------------------------------------------------------------

REQUESTS_TOTAL: Final = "quotaql_requests_total"
"""Counter: operations by ``decision``, ``operation_type``, ``tier``."""
QUERY_COST: Final = "quotaql_query_cost"
"""Histogram: estimated (requested) cost by ``operation_type``, ``tier``."""
QUERY_ACTUAL_COST: Final = "quotaql_query_actual_cost"
"""Histogram: actual cost after execution by ``operation_type``, ``tier``."""
QUERY_DEPTH: Final = "quotaql_query_depth"
"""Histogram: operation depth by ``operation_type``."""
COST_TOTAL: Final = "quotaql_cost_total"
"""Counter: cost points by ``tier`` and ``outcome`` (``charged``, ``refunded``)."""
CHECK_DURATION: Final = "quotaql_check_duration_seconds"
"""Histogram: time of one limiter decision (storage round trips included) by ``backend``."""
BACKEND_ERRORS_TOTAL: Final = "quotaql_backend_errors_total"
"""Counter: failed storage calls by ``backend``, ``error_type``."""
CIRCUIT_OPEN: Final = "quotaql_circuit_open"
"""Gauge: 1 while the circuit breaker in front of ``backend`` is open."""
TENANT_REQUESTS_TOTAL: Final = "quotaql_tenant_requests_total"
"""Counter: operations by ``tenant`` (allowlisted or top-N, others ``other``), ``decision``."""
BUILD_INFO: Final = "quotaql_build_info"
"""Gauge, always 1: the running quotaql ``version``."""
IDENTITY_TOTAL: Final = "quotaql_identity_total"
"""Counter: operations by how their subject was identified (``source``)."""
SUBSCRIPTION_EVENTS_TOTAL: Final = "quotaql_subscription_events_total"
"""Counter: subscription events after the first, charged or refused, by ``decision``, ``tier``."""
SUBSCRIPTIONS_OPEN: Final = "quotaql_subscriptions_open"
"""Gauge: subscriptions open now (summed over a server's processes)."""

# Adaptive limits (``[adaptive]``, docs/adaptive.md): per process, set once a second.
PRESSURE: Final = "quotaql_pressure"
"""Gauge: the pressure signal of each configured ``source`` (``PRESSURE_SOURCES``), 0 to 1."""
ADAPTIVE_MULTIPLIER: Final = "quotaql_adaptive_multiplier"
"""Gauge: the multiplier ``m`` of each ``tier`` (its charges are divided by it; 1 for a tier
that is not adaptive); in shadow mode, the one that would apply."""
ADAPTIVE_ENGAGED: Final = "quotaql_adaptive_engaged"
"""Gauge: 1 while adaptive limits are engaged (in shadow mode: would be), else 0."""
ADAPTIVE_TRANSITIONS_TOTAL: Final = "quotaql_adaptive_transitions_total"
"""Counter: transitions of adaptive limits, by ``to`` (``engaged``, ``released``)."""

# Concurrency limits (``max_in_flight``, docs/concurrency.md): leases per tenant.
IN_FLIGHT: Final = "quotaql_in_flight"
"""Gauge: the leases this process holds (operations and subscriptions of tiers with a
concurrency limit running now), by ``tier`` (summed over a server's processes)."""
LEASES_TOTAL: Final = "quotaql_leases_total"
"""Counter: what became of leases, by ``outcome`` (``LEASE_OUTCOMES``)."""

# Delays (``on_limit = "delay"``, docs/limiter.md "Delay instead of refuse").
DELAY_SECONDS: Final = "quotaql_delay_seconds"
"""Histogram: how long operations of delay tiers waited for their turn, by ``tier`` (only
those that waited; its ``_count`` is the operations delayed)."""
DELAYED_WAITING: Final = "quotaql_delayed_waiting"
"""Gauge: the operations this process has waiting for their turn now (summed over a
server's processes); at most ``[limits] max_delayed``."""
DELAY_REFUSED_TOTAL: Final = "quotaql_delay_refused_total"
"""Counter: operations of delay tiers refused (``RATE_LIMITED``) by ``tier`` and ``reason``
(``DELAY_REFUSED_REASONS``)."""
DELAY_CANCELLED_TOTAL: Final = "quotaql_delay_cancelled_total"
"""Counter: operations that left while waiting for their turn (the client went away), by
``tier``: each was refunded its whole charge, since it never ran."""

# The Redis path off the response (docs/limiter.md): deferred refunds and the pipeline.
REFUNDS_TOTAL: Final = "quotaql_refunds_total"
"""Counter: deferred refunds by ``outcome`` (``REFUND_OUTCOMES``): queued, coalesced into
one already waiting, applied, lost (never applied) or unknown (sent, then the call failed:
perhaps applied, never sent again)."""
REFUND_QUEUE: Final = "quotaql_refund_queue"
"""Gauge: refunds waiting to be applied (coalesced ones count once), per process (summed)."""
PIPELINE_COMMANDS_TOTAL: Final = "quotaql_pipeline_commands_total"
"""Counter: commands the async Redis pipeline sent, by ``backend`` (a NOSCRIPT retry counts
again)."""
PIPELINE_BATCHES_TOTAL: Final = "quotaql_pipeline_batches_total"
"""Counter: writes the async Redis pipeline made, by ``backend``: commands / batches is the
mean batch size."""

# The tuning metrics (``quotaql tune``, docs/tuning.md), recorded for the operations the
# server samples. An *assumed* list is one whose size the pricing took from ``assumed_size``
# (``@listSize(assumedSize:)``), a slicing argument's schema default or ``default_list_size``;
# a *sliced* list one sized by a slicing argument the client wrote (``first: 5``).
LIST_RETURNED_ITEMS: Final = "quotaql_list_returned_items"
"""Histogram: items each assumed list returned, by ``coordinate`` (``"Query.products"``)."""
LIST_OPERATION_MAX_ITEMS: Final = "quotaql_list_operation_max_items"
"""Histogram: per operation, the items of its longest assumed list of ``coordinate``."""
LIST_ASSUMED_ITEMS: Final = "quotaql_list_assumed_items"
"""Gauge: the size the pricing assumed for the latest assumed list of ``coordinate``."""
LIST_MAX_RETURNED_ITEMS: Final = "quotaql_list_max_returned_items"
"""Gauge: the most items one assumed list of ``coordinate`` returned since the process
started."""
LIST_SLICED_RATIO: Final = "quotaql_list_sliced_ratio"
"""Histogram: items returned / items asked for, per sliced list, by ``coordinate``."""
COST_ESTIMATE_RATIO: Final = "quotaql_cost_estimate_ratio"
"""Histogram: actual / estimated cost of each priced operation that ran, by
``operation_type``, ``tier``."""

# Refusals before an operation ran (decision ``rejected``), by what refused it.
REJECTIONS_TOTAL: Final = "quotaql_rejections_total"
"""Counter: operations refused before they ran (``decision="rejected"``: a document that
does not parse or validate, a static limit, the analysis), by ``code`` (``REJECTION_CODES``,
any other ``other``)."""

# -- labels and their values -----------------------------------------------------------------

LABEL_DECISION: Final = "decision"
LABEL_OPERATION_TYPE: Final = "operation_type"
LABEL_TIER: Final = "tier"
LABEL_OUTCOME: Final = "outcome"
LABEL_BACKEND: Final = "backend"
LABEL_ERROR_TYPE: Final = "error_type"
LABEL_TENANT: Final = "tenant"
LABEL_VERSION: Final = "version"
LABEL_SOURCE: Final = "source"
LABEL_COORDINATE: Final = "coordinate"
"""A schema coordinate (``"Type.field"``): bounded by the schema, never by the traffic."""
LABEL_TO: Final = "to"
"""The state a transition goes to (``TRANSITIONS``)."""

ALLOWED: Final = "allowed"
BLOCKED: Final = "blocked"
"""Refused by the budget (``RATE_LIMITED``, ``COST_EXCEEDS_CAPACITY``)."""
SHADOW_BLOCKED: Final = "shadow_blocked"
"""Would have been refused; shadow mode let it run."""
REJECTED: Final = "rejected"
"""Refused before it was priced or by the analysis: a document that does not parse or
validate, a static limit, bad variables (each paid ``[limits] min_charge``)."""
FAIL_OPEN: Final = "fail_open"
FAIL_CLOSED: Final = "fail_closed"
UNKNOWN_KEY: Final = "unknown_key"
"""Refused: an API key no tenant has (``[identity] unknown_keys = "reject"``)."""
TOO_MANY_SUBSCRIPTIONS: Final = "too_many_subscriptions"
"""Refused: the subject has ``[limits] max_subscriptions`` open already."""
DENIED: Final = "denied"
"""Refused from the local deny cache (``RATE_LIMITED``): the storage refused the subject a
moment ago and its retry time has not come; nothing was parsed and the storage not asked."""
VALIDATED: Final = "validated"
"""Priced, not run (``GraphQL-Cost: validate``): it paid ``[limits] min_charge``."""
TOO_MANY_CONCURRENT: Final = "too_many_concurrent"
"""Refused (``TOO_MANY_CONCURRENT``): the tenant runs ``max_in_flight`` operations already
(of its tier, of a root field, or ``max_subscriptions_in_flight`` subscriptions); nothing was
debited."""
DECISIONS: Final = (
    ALLOWED, BLOCKED, SHADOW_BLOCKED, REJECTED, FAIL_OPEN, FAIL_CLOSED, UNKNOWN_KEY,
    TOO_MANY_SUBSCRIPTIONS, DENIED, VALIDATED, TOO_MANY_CONCURRENT,
)  # fmt: skip
#: Refused by the budget, by the storage or from the deny cache: a PromQL regex of both.
BUDGET_REFUSED: Final = f"{BLOCKED}|{DENIED}"

LABEL_REASON: Final = "reason"
"""Why a delay tier's operation was refused (``DELAY_REFUSED_REASONS``)."""
DELAY_QUEUE: Final = "queue"
"""Its turn was further than ``max_delay``, or ``max_queued`` operations of its tenant were
waiting already (the storage's refusal)."""
DELAY_PROCESS_FULL: Final = "process_full"
"""This process had ``[limits] max_delayed`` operations waiting: it was decided as if its
tier refused, and did not fit."""
DELAY_SYNC: Final = "sync"
"""A sync server (``[limits] delay_sync = "refuse"``): it was decided as if its tier
refused, and did not fit."""
DELAY_SUBJECT_FULL: Final = "subject_full"
"""Its subject held its share of this process's waiting places already (``[limits]
delayed_share`` of ``max_delayed``): it was decided as if its tier refused, and did not fit."""
DELAY_REFUSED_REASONS: Final = (DELAY_QUEUE, DELAY_PROCESS_FULL, DELAY_SYNC, DELAY_SUBJECT_FULL)

LABEL_CODE: Final = "code"
"""The ``extensions.code`` of a refusal (``REJECTION_CODES``, or ``OTHER_CODE``)."""
#: The codes ``quotaql_rejections_total`` counts by name (quotaql's errors, graphql-core's
#: parse and validation failures); a code not listed counts as ``OTHER_CODE``.
REJECTION_CODES: Final = (
    "GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED", "OPERATION_RESOLUTION_FAILURE",
    "BAD_USER_INPUT", "QUERY_TOO_LARGE", "QUERY_TOO_DEEP", "QUERY_TOO_COMPLEX",
    "TOO_MANY_ALIASES", "TOO_MANY_ROOT_FIELDS", "TOO_MANY_FIELDS", "TOO_MANY_FIELD_PAIRS",
    "TOO_MANY_DIRECTIVES", "SLICING_ARGUMENT_REQUIRED", "FRAGMENT_CYCLE", "LIMIT_EXCEEDED",
    "COST_ANALYSIS_FAILED", "INTROSPECTION_DISABLED",
)  # fmt: skip
OTHER_CODE: Final = "other"

#: Where a subject came from (``quotaql.identity.IdentitySource``): the values of ``source``.
SOURCE_ANONYMOUS: Final = "anonymous"
"""No key, no principal, no address (the server reports no peer): one shared budget."""
SOURCE_UNKNOWN_KEY: Final = "unknown_key"
"""An unknown key, counted as the client's address (``unknown_keys = "address"``)."""
SOURCE_REJECTED_KEY: Final = "rejected_key"
"""An unknown key, refused (``unknown_keys = "reject"``)."""
SOURCE_UNVERIFIED_KEY: Final = "unverified_key"
"""An unknown key taken as a tenant of its own (``unknown_keys = "tenant"``: unsafe)."""
IDENTITY_SOURCES: Final = (
    "key",  # a known API key
    "user",  # an authenticated principal
    "custom",  # what identify() returned
    "address",  # no key: the client's address
    SOURCE_UNKNOWN_KEY,
    SOURCE_REJECTED_KEY,
    SOURCE_UNVERIFIED_KEY,
    SOURCE_ANONYMOUS,
)
#: The sources that say something is wrong: shared, unknown or unverified identities.
SUSPECT_SOURCES: Final = (
    SOURCE_ANONYMOUS, SOURCE_UNKNOWN_KEY, SOURCE_REJECTED_KEY, SOURCE_UNVERIFIED_KEY,
)  # fmt: skip

#: The sources of the pressure signal (the ``source`` label of ``quotaql_pressure``).
PRESSURE_LATENCY: Final = "latency"
"""A percentile of the execution time against ``[adaptive] latency_target``."""
PRESSURE_ERRORS: Final = "errors"
"""The share of operations that ended with an unexpected error (not a ``GraphQLError``)."""
PRESSURE_CALLABLE: Final = "callable"
"""What ``Gate(pressure=fn)`` returns."""
PRESSURE_SOURCES: Final = (PRESSURE_LATENCY, PRESSURE_ERRORS, PRESSURE_CALLABLE)
ENGAGED: Final = "engaged"
RELEASED: Final = "released"
#: The values of ``to`` in ``quotaql_adaptive_transitions_total``.
TRANSITIONS: Final = (ENGAGED, RELEASED)

CHARGED: Final = "charged"
REFUNDED: Final = "refunded"
REFUND_LOST: Final = "refund_lost"
"""``quotaql_cost_total`` outcome: points of deferred refunds lost or of unknown fate (the
tenants paid that much more than they used, at most); without a ``tier`` label."""
OTHER_TENANT: Final = "other"

#: The values of ``outcome`` in ``quotaql_leases_total``.
LEASE_TAKEN: Final = "taken"
"""A lease was taken: the operation runs."""
LEASE_REFUSED: Final = "refused"
"""A set was full: the operation was refused ``TOO_MANY_CONCURRENT`` (or, in shadow mode,
ran without a lease)."""
LEASE_RELEASED: Final = "released"
"""Released while still live in every set."""
LEASE_EXPIRED: Final = "expired"
"""Released after it had expired in a set (its holder stalled or Redis was out longer than
``lease_ttl``: another operation may have taken its slot meanwhile)."""
LEASE_RELEASE_FAILED: Final = "release_failed"
"""The release could not be made (the storage failed, or no event loop to make it on): the
lease expires within ``lease_ttl``."""
LEASE_RENEWED: Final = "renewed"
"""(lease, set) pairs the keeper renewed (long operations, open subscriptions)."""
LEASE_RENEW_FAILED: Final = "renew_failed"
"""Renew calls of the keeper that failed (retried the next round)."""
LEASE_TAKE_FAILED: Final = "take_failed"
"""The storage failed at the take: the fail mode decided (``local``: a lease in this
process, ``open``: none, ``closed``: refused)."""
LEASE_OUTCOMES: Final = (
    LEASE_TAKEN, LEASE_REFUSED, LEASE_RELEASED, LEASE_EXPIRED, LEASE_RELEASE_FAILED,
    LEASE_RENEWED, LEASE_RENEW_FAILED, LEASE_TAKE_FAILED,
)  # fmt: skip

#: The values of ``outcome`` in ``quotaql_refunds_total``.
REFUND_QUEUED: Final = "queued"
REFUND_COALESCED: Final = "coalesced"
REFUND_APPLIED: Final = "applied"
REFUND_LOST_OUTCOME: Final = "lost"
REFUND_UNKNOWN: Final = "unknown"
REFUND_OUTCOMES: Final = (
    REFUND_QUEUED, REFUND_COALESCED, REFUND_APPLIED, REFUND_LOST_OUTCOME, REFUND_UNKNOWN,
)  # fmt: skip

# -- histogram buckets -----------------------------------------------------------------------

CHECK_LATENCY_ALERT_SECONDS: Final = 0.025
"""The default p99 threshold of the check-latency alert: a bucket edge, so it is exact."""
CHECK_DURATION_BUCKETS: Final = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    CHECK_LATENCY_ALERT_SECONDS, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
COST_BUCKETS: Final = (
    1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1_000.0, 3_000.0, 10_000.0, 30_000.0, 100_000.0,
    300_000.0, 1_000_000.0,
)  # fmt: skip
DEPTH_BUCKETS: Final = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 15.0, 20.0, 30.0, 50.0)
LIST_SIZE_BUCKETS: Final = (
    0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 10.0, 15.0, 20.0, 25.0, 30.0, 50.0, 75.0, 100.0, 150.0,
    200.0, 300.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0,
)  # fmt: skip
"""Items per list: every edge a whole number, so that "lists longer than N" is exact at an
edge (``quotaql tune`` proposes edges)."""
RATIO_BUCKETS: Final = (
    0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0, 10.0,
)  # fmt: skip
"""actual / estimated and returned / asked for: an edge at 1.0, so that "more than was
assumed" is exact."""
RATIO_CAP: Final = 1_000.0
"""A ratio above this (an estimate of 0 with an actual cost above 0) is recorded as this, so
that the histograms' ``_sum`` stays finite; it is in the ``+Inf`` bucket either way."""

DELAY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""The buckets of ``quotaql_delay_seconds``: from a few milliseconds (a turn a refill away)
to a minute (``max_delay`` is rarely longer). 1.0, the default threshold of the
``QuotaqlDelaysLong`` alert (``[alerts] delay_p99_seconds``), is an edge, so it is exact."""

# -- the instruments -------------------------------------------------------------------------

MultiprocessMode = Literal[
    "all", "liveall", "min", "livemin", "max", "livemax", "sum", "livesum", "mostrecent",
    "livemostrecent",
]  # fmt: skip
"""How prometheus-client's multiprocess mode merges a gauge's value over the workers."""


class Instrument(NamedTuple):
    """One metric as :class:`~quotaql.instrumentation.metrics.PrometheusMetrics` builds it."""

    attribute: str
    """The ``PrometheusMetrics`` attribute that holds it."""
    kind: Literal["counter", "gauge", "histogram"]
    name: str
    """The name Prometheus stores (a counter's with its ``_total``)."""
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    """A histogram's upper bounds (``+Inf`` added)."""
    multiprocess_mode: MultiprocessMode = "all"
    """A gauge's, under prometheus-client's multiprocess mode (see the metrics module)."""
    collected: Literal["registry", "backend", "tuning"] = "registry"
    """Who collects it: the registry directly; ``backend``: after the watched refund queues,
    pipelines and lease keepers were read (``PrometheusMetrics.sync``); ``tuning``: after the
    list tallies waiting in the process were added (``PrometheusMetrics.flush``)."""


_OPERATION: Final = (LABEL_DECISION, LABEL_OPERATION_TYPE, LABEL_TIER)
_PRICED: Final = (LABEL_OPERATION_TYPE, LABEL_TIER)

INSTRUMENTS: Final = (
    Instrument(
        "requests", "counter", REQUESTS_TOTAL,
        "GraphQL operations seen by quotaql, by decision.",
        _OPERATION,
    ),
    Instrument(
        "query_cost", "histogram", QUERY_COST,
        "Estimated (requested) cost of each operation, before it runs.",
        _PRICED, COST_BUCKETS,
    ),
    Instrument(
        "actual_cost", "histogram", QUERY_ACTUAL_COST,
        "Actual cost of each executed operation, from the data it returned.",
        _PRICED, COST_BUCKETS,
    ),
    Instrument(
        "depth", "histogram", QUERY_DEPTH,
        "Field nesting depth of each operation.",
        (LABEL_OPERATION_TYPE,), DEPTH_BUCKETS,
    ),
    Instrument(
        "cost_points", "counter", COST_TOTAL,
        "Cost points charged to budgets, and refunded after execution.",
        (LABEL_TIER, LABEL_OUTCOME),
    ),
    Instrument(
        "check_duration", "histogram", CHECK_DURATION,
        "Time of one limiter decision, storage round trips included.",
        (LABEL_BACKEND,), CHECK_DURATION_BUCKETS,
    ),
    Instrument(
        "backend_errors", "counter", BACKEND_ERRORS_TOTAL,
        "Failed calls to the limiter's storage.",
        (LABEL_BACKEND, LABEL_ERROR_TYPE),
    ),
    Instrument(
        "circuit_open", "gauge", CIRCUIT_OPEN,
        "1 while the circuit breaker in front of the storage is open.",
        (LABEL_BACKEND,),
        multiprocess_mode="livemax",  # a dead worker's open breaker is forgotten
    ),
    Instrument(
        "tenant_requests", "counter", TENANT_REQUESTS_TOTAL,
        "Operations per tenant (allowlisted or top-N; every other tenant is 'other').",
        (LABEL_TENANT, LABEL_DECISION),
    ),
    Instrument(
        "identity", "counter", IDENTITY_TOTAL,
        "Operations by how their subject (who pays) was identified.",
        (LABEL_SOURCE,),
    ),
    Instrument(
        "subscription_events", "counter", SUBSCRIPTION_EVENTS_TOTAL,
        "Subscription events after the first: charged (allowed) or refused (blocked).",
        (LABEL_DECISION, LABEL_TIER),
    ),
    Instrument(
        "subscriptions_open", "gauge", SUBSCRIPTIONS_OPEN,
        "Subscriptions open now.",
        multiprocess_mode="livesum",  # every live worker's, summed
    ),
    # Adaptive limits: per worker, the most pressured and the tightest one.
    Instrument(
        "pressure", "gauge", PRESSURE,
        "The adaptive limits' pressure signal of each source, 0 (none) to 1 (saturated).",
        (LABEL_SOURCE,),
        multiprocess_mode="livemax",
    ),
    Instrument(
        "adaptive_multiplier", "gauge", ADAPTIVE_MULTIPLIER,
        "What each tier's charges are divided by (1: not scaled); in shadow mode, what would be.",
        (LABEL_TIER,),
        multiprocess_mode="livemin",
    ),
    Instrument(
        "adaptive_engaged", "gauge", ADAPTIVE_ENGAGED,
        "1 while adaptive limits are engaged (in shadow mode: would be).",
        multiprocess_mode="livemax",
    ),
    Instrument(
        "adaptive_transitions_total", "counter", ADAPTIVE_TRANSITIONS_TOTAL,
        "Adaptive limits engaging and releasing.",
        (LABEL_TO,),
    ),
    Instrument(
        "in_flight_gauge", "gauge", IN_FLIGHT,
        "Leases this process holds: operations (and subscriptions) of tiers with a"
        " concurrency limit running now.",
        (LABEL_TIER,),
        multiprocess_mode="livesum",  # every live worker's, summed
    ),
    # Delays (on_limit = "delay"): what waited, how long, and what was refused or left.
    Instrument(
        "delay_seconds", "histogram", DELAY_SECONDS,
        "How long operations of delay tiers waited for their turn (only those that"
        " waited: its count is the operations delayed).",
        (LABEL_TIER,), DELAY_BUCKETS,
    ),
    Instrument(
        "delayed_waiting", "gauge", DELAYED_WAITING,
        "Operations this process has waiting for their turn now (at most [limits]"
        " max_delayed).",
        multiprocess_mode="livesum",  # every live worker's, summed
    ),
    Instrument(
        "delay_refused_total", "counter", DELAY_REFUSED_TOTAL,
        "Operations of delay tiers refused RATE_LIMITED, by reason: queue (past max_delay"
        " or max_queued), process_full (max_delayed waiting already), sync (a sync server"
        " never waits).",
        (LABEL_TIER, LABEL_REASON),
    ),
    Instrument(
        "delay_cancelled_total", "counter", DELAY_CANCELLED_TOTAL,
        "Operations that left while waiting for their turn (the client went away); each"
        " was refunded its whole charge.",
        (LABEL_TIER,),
    ),
    # Leases, deferred refunds and the Redis pipeline: counted by the objects watched.
    Instrument(
        "leases_total", "counter", LEASES_TOTAL,
        "What became of concurrency leases: taken, refused, released, expired (before"
        " their release), release_failed, renewed, renew_failed, take_failed.",
        (LABEL_OUTCOME,),
        collected="backend",
    ),
    Instrument(
        "refunds_total", "counter", REFUNDS_TOTAL,
        "Deferred refunds: queued, coalesced (into one already waiting), applied, lost"
        " (never applied) or unknown (sent, then the call failed: perhaps applied).",
        (LABEL_OUTCOME,),
        collected="backend",
    ),
    Instrument(
        "refund_queue", "gauge", REFUND_QUEUE,
        "Refunds waiting to be applied (coalesced ones count once).",
        multiprocess_mode="livesum",
        collected="backend",
    ),
    Instrument(
        "pipeline_commands", "counter", PIPELINE_COMMANDS_TOTAL,
        "Commands the async Redis pipeline sent (a NOSCRIPT retry counts again).",
        (LABEL_BACKEND,),
        collected="backend",
    ),
    Instrument(
        "pipeline_batches", "counter", PIPELINE_BATCHES_TOTAL,
        "Writes the async Redis pipeline made (commands / batches: the mean batch size).",
        (LABEL_BACKEND,),
        collected="backend",
    ),
    Instrument(
        "build_info", "gauge", BUILD_INFO,
        "The running quotaql version (always 1).",
        (LABEL_VERSION,),
        multiprocess_mode="max",
    ),
    Instrument(
        "rejections", "counter", REJECTIONS_TOTAL,
        "Operations refused before they ran (a document that does not parse or validate,"
        " a static limit, the analysis), by error code.",
        (LABEL_CODE,),
    ),
    Instrument(
        "estimate_ratio", "histogram", COST_ESTIMATE_RATIO,
        "Actual cost / estimated cost of each priced operation that ran.",
        _PRICED, RATIO_BUCKETS,
    ),
    # The tuning metrics: tallied per process, added to the histograms before collection.
    Instrument(
        "list_returned", "histogram", LIST_RETURNED_ITEMS,
        "Items returned by each list whose size the pricing assumed (assumed_size,"
        " @listSize(assumedSize:), default_list_size), per schema coordinate.",
        (LABEL_COORDINATE,), LIST_SIZE_BUCKETS,
        collected="tuning",
    ),
    Instrument(
        "list_operation_max", "histogram", LIST_OPERATION_MAX_ITEMS,
        "Per operation, the items of its longest list of the coordinate whose size the"
        " pricing assumed.",
        (LABEL_COORDINATE,), LIST_SIZE_BUCKETS,
        collected="tuning",
    ),
    Instrument(
        "list_assumed", "gauge", LIST_ASSUMED_ITEMS,
        "The size the pricing assumed for the latest such list of the coordinate.",
        (LABEL_COORDINATE,),
        multiprocess_mode="mostrecent",
        collected="tuning",
    ),
    Instrument(
        "list_max_returned", "gauge", LIST_MAX_RETURNED_ITEMS,
        "The most items one such list of the coordinate returned since the process started.",
        (LABEL_COORDINATE,),
        multiprocess_mode="max",
        collected="tuning",
    ),
    Instrument(
        "list_sliced_ratio", "histogram", LIST_SLICED_RATIO,
        "Items returned / items asked for, per list sized by a slicing argument the"
        " client wrote (first: 5), per schema coordinate.",
        (LABEL_COORDINATE,), RATIO_BUCKETS,
        collected="tuning",
    ),
)  # fmt: skip
"""Every metric quotaql exports, in the order a scrape lists them: one row each, built by one
loop of :class:`~quotaql.instrumentation.metrics.PrometheusMetrics`."""

# -- traces ----------------------------------------------------------------------------------

TRACER_NAME: Final = "quotaql"
SPAN_CHECK: Final = "quotaql.check"
ATTR_OPERATION_TYPE: Final = "graphql.operation.type"
ATTR_OPERATION_NAME: Final = "graphql.operation.name"
ATTR_COST_ESTIMATED: Final = "quotaql.cost.estimated"
ATTR_COST_MODEL: Final = "quotaql.cost.model"
ATTR_COST_ACTUAL: Final = "quotaql.cost.actual"
ATTR_DEPTH: Final = "quotaql.depth"
ATTR_TENANT: Final = "quotaql.tenant"
"""The tenant, hashed (never the raw API key)."""
ATTR_TIER: Final = "quotaql.tier"
ATTR_DECISION: Final = "quotaql.decision"
ATTR_REMAINING: Final = "quotaql.remaining"
ATTR_RETRY_AFTER: Final = "quotaql.retry_after_s"
ATTR_BACKEND: Final = "quotaql.backend"
ATTR_IDENTITY: Final = "quotaql.identity"
"""How the subject was identified (one of ``IDENTITY_SOURCES``)."""
ATTR_EVENTS: Final = "quotaql.subscription.events"
"""Events a subscription delivered (on its span, which ends when the subscription does)."""
ATTR_ADAPTIVE_MULTIPLIER: Final = "quotaql.adaptive.multiplier"
"""The multiplier the operation's debit was divided by (set only when below 1)."""
ATTR_ERROR_CODE: Final = "quotaql.error.code"
"""The ``extensions.code`` of a refused operation's first error (``TOO_MANY_FIELD_PAIRS``,
``RATE_LIMITED``, ...): set only when it was refused."""
ATTR_IN_FLIGHT: Final = "quotaql.in_flight"
"""The live leases of the operation's first lease set (its tier's, or its subscriptions')
once it took its own: set only for tiers with a concurrency limit."""
EVENT_FAIL_OPEN: Final = "quotaql.fail_open"
EVENT_FAIL_CLOSED: Final = "quotaql.fail_closed"
EVENT_REFUND: Final = "quotaql.refund"
"""A refund was given back (queued, with deferred refunds)."""
EVENT_LEASE_EXPIRED: Final = "quotaql.lease_expired"
"""The operation's lease had expired before its release (a stall, an outage)."""
ATTR_DELAY: Final = "quotaql.delay_s"
"""Seconds the operation waited for its turn (set only when it waited)."""
EVENT_DELAYED: Final = "quotaql.delayed"
"""The operation waits for its turn (its cost is reserved); attribute ``quotaql.delay_s``."""
EVENT_DELAY_CANCELLED: Final = "quotaql.delay_cancelled"
"""The operation left while waiting (the client went away): refunded, never run."""

# -- logs ------------------------------------------------------------------------------------

LOGGER: Final = "quotaql"
LOG_EVENT: Final = "quotaql_event"
"""The ``extra`` field every quotaql log record carries: what happened."""
DELAYED: Final = "delayed"
"""Log event: an operation of a delay tier waits for its turn (``quotaql_delay_seconds``)."""
DELAY_CANCELLED: Final = "delay_cancelled"
"""Log event: an operation left while waiting for its turn, and was refunded."""
