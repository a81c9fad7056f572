"""Every metric quotaql exports, one row each (:class:`Instrument`): the registry
:class:`~quotaql.instrumentation.metrics.PrometheusMetrics` builds its instruments from, by
one loop. The names and labels are :mod:`quotaql.instrumentation.names`'."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, NamedTuple

from quotaql.instrumentation import names
from quotaql.instrumentation.names import (
    ADAPTIVE_CULPRITS,
    ADAPTIVE_ENGAGED,
    ADAPTIVE_MULTIPLIER,
    ADAPTIVE_TRANSITIONS_TOTAL,
    BACKEND_ERRORS_TOTAL,
    BUILD_INFO,
    CANDIDATE_COST_RATIO,
    CANDIDATE_ERRORS_TOTAL,
    CANDIDATE_LOADED,
    CANDIDATE_RATIO_BUCKETS,
    CANDIDATE_WOULD_REFUSE_TOTAL,
    CAPACITY_RATIO_BUCKETS,
    CHECK_DURATION,
    CHECK_DURATION_BUCKETS,
    CIRCUIT_OPEN,
    CONFIG_GENERATION,
    CONFIG_INFO,
    COST_BUCKETS,
    COST_ESTIMATE_RATIO,
    COST_TOTAL,
    DELAY_BUCKETS,
    DELAY_CANCELLED_TOTAL,
    DELAY_REFUSED_TOTAL,
    DELAY_SECONDS,
    DELAYED_WAITING,
    DEPTH_BUCKETS,
    IDENTITY_TOTAL,
    IN_FLIGHT,
    INCREMENTAL_OPERATIONS_TOTAL,
    INCREMENTAL_PAYLOADS_TOTAL,
    KEY_LOOKUPS_TOTAL,
    LABEL_BACKEND,
    LABEL_CAUSE,
    LABEL_CODE,
    LABEL_COORDINATE,
    LABEL_DECISION,
    LABEL_DIGEST,
    LABEL_ENFORCED,
    LABEL_ERROR_TYPE,
    LABEL_KIND,
    LABEL_OPERATION_NAME,
    LABEL_OPERATION_TYPE,
    LABEL_OUTCOME,
    LABEL_POLICY,
    LABEL_QUOTA,
    LABEL_REASON,
    LABEL_SCOPE,
    LABEL_SOURCE,
    LABEL_STORE,
    LABEL_TENANT,
    LABEL_TIER,
    LABEL_TO,
    LABEL_VERDICT,
    LABEL_VERSION,
    LEASES_TOTAL,
    LIST_ASSUMED_ITEMS,
    LIST_MAX_RETURNED_ITEMS,
    LIST_OPERATION_MAX_ITEMS,
    LIST_RETURNED_ITEMS,
    LIST_SIZE_BUCKETS,
    LIST_SLICED_RATIO,
    LIST_SUBJECT_MAX_ITEMS,
    OPERATION_NAME_COST_TOTAL,
    OPERATION_NAME_REQUESTS_TOTAL,
    OPERATION_NAME_TIME,
    OPERATION_TIME,
    OVERAGE_TOTAL,
    OVERFLOW_TOTAL,
    PIPELINE_BATCHES_TOTAL,
    PIPELINE_COMMANDS_TOTAL,
    PIPELINE_REDIRECTS_TOTAL,
    PRESSURE,
    PRESSURE_IGNORED_TOTAL,
    QUERY_ACTUAL_COST,
    QUERY_COST,
    QUERY_DEPTH,
    QUOTA_REFUSALS_TOTAL,
    QUOTA_WARNINGS_TOTAL,
    RATIO_BUCKETS,
    REDIS_EVICTION,
    REFUND_QUEUE,
    REFUNDS_TOTAL,
    REFUSAL_CAPACITY_RATIO,
    REJECTIONS_TOTAL,
    REQUESTS_TOTAL,
    ROOT_FIELD_COST_TOTAL,
    ROOT_FIELD_REQUESTS_TOTAL,
    ROOT_FIELD_TIME,
    ROOT_FIELDS_SKIPPED_TOTAL,
    STAGED_EVENTS_TOTAL,
    STAGED_TOTAL,
    SUBSCRIPTION_EVENTS_TOTAL,
    SUBSCRIPTIONS_OPEN,
    TENANT_REQUESTS_TOTAL,
    TENANT_UTILISATION,
    TIME_BUCKETS,
    TIME_SECONDS_TOTAL,
    WOULD_REFUSE_COST_TOTAL,
    WOULD_REFUSE_TOTAL,
)

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

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
        "overage_total", "counter", OVERAGE_TOTAL,
        "Cost points charged after execution above the debit: the actual cost ran over"
        " the estimate (the budget may go below empty).",
        (LABEL_TIER,),
    ),
    Instrument(
        "time_seconds", "counter", TIME_SECONDS_TOTAL,
        "Worker time the operations took (parse, validation, pricing, execution; CPU time"
        " of the thread), charged to their subjects' time quotas, in seconds.",
        (LABEL_TIER,),
    ),
    Instrument(
        "operation_time", "histogram", OPERATION_TIME,
        "Worker time of each operation (CPU time of the thread), in seconds.",
        _PRICED, TIME_BUCKETS,
    ),
    Instrument(
        "quota_refusals", "counter", QUOTA_REFUSALS_TOTAL,
        "Operations refused by the budget (blocked or denied), by the quota that refused"
        " them (time: the subject's worker time in debt).",
        (LABEL_TIER, LABEL_QUOTA),
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
        "overflow", "counter", OVERFLOW_TOTAL,
        "Decisions (store=states) and lease takes (store=leases) of the memory storages made"
        " on an overflow state, their table full (max_keys): a network's or a quota's last"
        " resort (scope).",
        (LABEL_STORE, LABEL_SCOPE),
        collected="backend",
    ),
    Instrument(
        "key_lookups", "counter", KEY_LOOKUPS_TOTAL,
        "API keys that needed the key_resolver (no cached answer): known, unknown, failed,"
        " or limited (not looked up: the client's address was over [identity] resolver_rate).",
        (LABEL_OUTCOME,),
        collected="backend",
    ),
    Instrument(
        "rejections", "counter", REJECTIONS_TOTAL,
        "Operations refused before they were priced or by the analysis (the rejected"
        " decision), by the refusal's code.",
        (LABEL_CODE,),
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
        "pressure_ignored_total", "counter", PRESSURE_IGNORED_TOTAL,
        "Updates at which a measured source's pressure reached engage_at over the window but"
        " did not count for everyone: few_subjects (fewer than [adaptive] min_subjects cause"
        " it), cost_share (they hold less than min_cost_share of the cost).",
        (LABEL_SOURCE, LABEL_REASON),
    ),
    Instrument(
        "adaptive_culprits", "gauge", ADAPTIVE_CULPRITS,
        "Subjects that pay their own adaptive multiplier now: their own operations cause"
        " the pressure (in shadow mode: would).",
        multiprocess_mode="livemax",
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
        "pipeline_redirects", "counter", PIPELINE_REDIRECTS_TOTAL,
        "Redis Cluster redirections the async pipeline followed (moved, ask, tryagain,"
        " clusterdown) and reads of the slot map (refresh).",
        (LABEL_BACKEND, LABEL_KIND),
        collected="backend",
    ),
    Instrument(
        "redis_eviction", "gauge", REDIS_EVICTION,
        "1 for the verdict of the Redis storage's eviction check: safe (noeviction, or"
        " maxmemory 0), allowed ([redis] allow_eviction: budgets may be evicted), refused"
        " (the storage refuses every call) or unverified (CONFIG GET refused).",
        (LABEL_POLICY, LABEL_VERDICT),
        multiprocess_mode="livemax",
        collected="backend",
    ),
    Instrument(
        "build_info", "gauge", BUILD_INFO,
        "The running quotaql version (always 1).",
        (LABEL_VERSION,),
        multiprocess_mode="max",
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
    Instrument(
        "list_subject_max", "histogram", LIST_SUBJECT_MAX_ITEMS,
        "Per subject (addresses by /24 or /48 network) and minute, the items of its longest"
        " list of the coordinate whose size the pricing assumed: a subject counts once a"
        " minute, however many lists it sends.",
        (LABEL_COORDINATE,), LIST_SIZE_BUCKETS,
        collected="tuning",
    ),
)  # fmt: skip
"""Every metric quotaql exports, in the order a scrape lists them: one row each, built by one
loop of :class:`~quotaql.instrumentation.metrics.PrometheusMetrics`."""


ROUTE_INSTRUMENTS: Final = (
    Instrument(
        "root_field_requests", "counter", ROOT_FIELD_REQUESTS_TOTAL,
        "Operations selecting each root field (a schema coordinate), by decision.",
        (LABEL_COORDINATE, LABEL_DECISION),
        collected="backend",  # tallied, added before each collection
    ),
    Instrument(
        "root_field_cost", "counter", ROOT_FIELD_COST_TOTAL,
        "Cost points charged, shared among the root fields of each operation in proportion"
        " to their estimated cost.",
        (LABEL_COORDINATE,),
        collected="backend",  # tallied, added before each collection
    ),
    Instrument(
        "root_field_time", "histogram", ROOT_FIELD_TIME,
        "Worker time of each operation that ran, under each root field it selected, in seconds.",
        (LABEL_COORDINATE,), TIME_BUCKETS,
        collected="backend",  # tallied, added before each collection
    ),
    Instrument(
        "operation_name_requests", "counter", OPERATION_NAME_REQUESTS_TOTAL,
        "Priced operations by name (the busiest names; every other is 'other'), by decision.",
        (LABEL_OPERATION_NAME, LABEL_DECISION),
        collected="backend",  # tallied, added before each collection
    ),
    Instrument(
        "operation_name_cost", "counter", OPERATION_NAME_COST_TOTAL,
        "Cost points charged, by operation name (the busiest names; every other is 'other').",
        (LABEL_OPERATION_NAME,),
        collected="backend",  # tallied, added before each collection
    ),
    Instrument(
        "operation_name_time", "histogram", OPERATION_NAME_TIME,
        "Worker time of each operation that ran, by operation name, in seconds.",
        (LABEL_OPERATION_NAME,), TIME_BUCKETS,
        collected="backend",  # tallied, added before each collection
    ),
    Instrument(
        "tenant_utilisation", "gauge", TENANT_UTILISATION,
        "Points a labelled tenant was charged over the last five minutes / what its tier's"
        " quota grants in five minutes (above 1: spending its burst).",
        (LABEL_TENANT,),
        multiprocess_mode="livesum",  # each live worker's share, summed
    ),
    Instrument(
        "config_generation", "gauge", CONFIG_GENERATION,
        "The generation of the configuration this process runs (1: the first file).",
        multiprocess_mode="liveall",  # one series per live worker: do they all agree?
    ),
    Instrument(
        "config_info", "gauge", CONFIG_INFO,
        "1 for the digest of the configuration this process runs (12 hex digits of SHA-256).",
        (LABEL_DIGEST,),
        multiprocess_mode="liveall",
    ),
)  # fmt: skip
"""The instruments of this section, built after ``INSTRUMENTS`` (``EVERY_INSTRUMENT``)."""


_STAGED: Final = (LABEL_TIER, LABEL_ENFORCED, LABEL_DECISION)

ROLLOUT_INSTRUMENTS: Final = (
    Instrument(
        "staged_total", "counter", STAGED_TOTAL,
        "Operations of enforce tiers whose enforce_share is below 1, by whether the subject"
        " is in the enforced share, and by decision.",
        _STAGED,
    ),
    Instrument(
        "staged_events_total", "counter", STAGED_EVENTS_TOTAL,
        "Subscription events after the first of those operations, by whether the subject is"
        " in the enforced share, and by decision.",
        _STAGED,
    ),
    Instrument(
        "would_refuse_total", "counter", WOULD_REFUSE_TOTAL,
        "Operations the budget refused that shadow mode let run, by the quota that refused"
        " them and why they ran (the tier's mode, or enforce_share).",
        (LABEL_TIER, LABEL_TENANT, LABEL_QUOTA, LABEL_CAUSE),
    ),
    Instrument(
        "would_refuse_cost_total", "counter", WOULD_REFUSE_COST_TOTAL,
        "Cost points those operations asked of the quota that refused them.",
        (LABEL_TIER, LABEL_TENANT, LABEL_QUOTA),
    ),
    Instrument(
        "refusal_capacity_ratio", "histogram", REFUSAL_CAPACITY_RATIO,
        "Per operation the budget refused (or would have), the capacity its quota would have"
        " needed for it to fit, over the capacity it has.",
        (LABEL_TIER, LABEL_DECISION), CAPACITY_RATIO_BUCKETS,
    ),
)  # fmt: skip
"""Staged enforcement and the rollout review (``quotaql report``; issue 25)."""


# -- partial answers (issue 25) ----------------------------------------------------------------

SKIP_INSTRUMENTS: Final = (
    Instrument(
        "root_fields_skipped", "counter", ROOT_FIELDS_SKIPPED_TOTAL,
        "Root fields answered null with a RATE_LIMITED error, neither run nor charged, because"
        " only their own quotas refused (on_field_limit = skip), by coordinate and tier.",
        (LABEL_COORDINATE, LABEL_TIER),
    ),
)  # fmt: skip
"""The instruments of partial answers (``[limits] on_field_limit = "skip"``)."""


WARNING_INSTRUMENTS: Final = (
    Instrument(
        "quota_warnings", "counter", QUOTA_WARNINGS_TOTAL,
        "Operations whose answer warned that a quota fell below warn_at, by the quota.",
        (LABEL_TIER, LABEL_QUOTA),
    ),
)  # fmt: skip
"""A warning before the wall (issue 25): ``warn_at``."""

"""Every instrument, in the order a scrape lists them."""


CANDIDATE_INSTRUMENTS: Final = (
    Instrument(
        "candidate_cost_ratio", "histogram", CANDIDATE_COST_RATIO,
        "Candidate cost / live cost of each sampled operation ([cost] candidate): under its"
        " operation_name (coordinate empty), and under each root field it selected (that"
        " field's own cost, operation_name empty).",
        (LABEL_OPERATION_NAME, LABEL_COORDINATE), CANDIDATE_RATIO_BUCKETS,
    ),
    Instrument(
        "candidate_would_refuse", "counter", CANDIDATE_WOULD_REFUSE_TOTAL,
        "Sampled operations the live file allowed that the candidate weights would have"
        " refused (their debit past what the subject had, or past the candidate's limits).",
        (LABEL_TIER, LABEL_TENANT),
    ),
    Instrument(
        "candidate_errors", "counter", CANDIDATE_ERRORS_TOTAL,
        "Candidate files refused (once per change) and sampled operations the candidate"
        " could not price, by reason.",
        (LABEL_REASON,),
    ),
    Instrument(
        "candidate_loaded", "gauge", CANDIDATE_LOADED,
        "1 while a valid candidate weights file prices the sampled operations, else 0.",
        multiprocess_mode="livemin",  # 0 if any live worker runs without it
    ),
)  # fmt: skip
"""The candidate weights' instruments (issue 25), after ``ROUTE_INSTRUMENTS``."""

# -- resolver time (issue 25) ----------------------------------------------------------------
# Recorded by quotaql.instrumentation.resolvers.ResolverTimes, for the sampled operations.

RESOLVER_INSTRUMENTS: Final = (
    Instrument(
        "resolver_seconds", "histogram", names.RESOLVER_SECONDS,
        "Seconds of each call of the coordinate's resolver (to the end of what it returned),"
        " in the operations sampled for tuning.",
        (LABEL_COORDINATE,), names.RESOLVER_BUCKETS,
        collected="tuning",
    ),
    Instrument(
        "resolver_subject_seconds", "histogram", names.RESOLVER_SUBJECT_SECONDS,
        "Per subject (addresses by /24 or /48 network) and minute, its mean seconds per call"
        " of the coordinate's resolver: a subject counts once a minute.",
        (LABEL_COORDINATE,), names.RESOLVER_BUCKETS,
        collected="tuning",
    ),
)  # fmt: skip
"""The instruments of this section (``EVERY_INSTRUMENT``)."""
"""Every instrument, in the order a scrape lists them."""
# -- @defer and @stream (issue 25) ------------------------------------------------------------

INCREMENTAL_INSTRUMENTS: Final = (
    Instrument(
        "incremental_payloads", "counter", INCREMENTAL_PAYLOADS_TOTAL,
        "Payloads sent after the initial result of @defer/@stream operations.",
        (LABEL_TIER,),
    ),
    Instrument(
        "incremental_operations", "counter", INCREMENTAL_OPERATIONS_TOTAL,
        "@defer/@stream operations by how they ended: completed (settled after the last"
        " payload), abandoned (the client left before it), unfollowed (not settled).",
        (LABEL_TIER, LABEL_OUTCOME),
    ),
)  # fmt: skip
"""The ``@defer`` / ``@stream`` instruments (``quotaql.instrumentation.incremental``)."""

# -- sharded shared quotas (issue 26) ---------------------------------------------------------

SHARD_INSTRUMENTS: Final = (
    Instrument(
        "shard_calls_total", "counter", names.SHARD_CALLS_TOTAL,
        "Calls to the shards of sharded shared quotas, by shard: called (a subject's home"
        " shard), retried (its second shard), spared (a shard remembered empty, not asked).",
        (names.LABEL_OUTCOME, names.LABEL_SHARD),
    ),
)  # fmt: skip
"""The sharded shared quotas' instruments (``PrometheusMetrics.shard_calls``)."""

"""Every instrument, in the order a scrape lists them."""

"""Every instrument, in the order a scrape lists them."""

EVERY_INSTRUMENT: Final = (
    *INSTRUMENTS,
    *ROUTE_INSTRUMENTS,
    *ROLLOUT_INSTRUMENTS,
    *SKIP_INSTRUMENTS,
    *WARNING_INSTRUMENTS,
    *CANDIDATE_INSTRUMENTS,
    *RESOLVER_INSTRUMENTS,
    *INCREMENTAL_INSTRUMENTS,
    *SHARD_INSTRUMENTS,
)
"""Every instrument, in the order a scrape lists them."""


class Instruments:
    """The instruments of :class:`~quotaql.instrumentation.metrics.PrometheusMetrics`: one
    attribute per row of ``EVERY_INSTRUMENT`` (its ``attribute``), set by one loop."""

    requests: Counter
    query_cost: Histogram
    actual_cost: Histogram
    depth: Histogram
    cost_points: Counter
    overage_total: Counter
    time_seconds: Counter
    operation_time: Histogram
    quota_refusals: Counter
    check_duration: Histogram
    backend_errors: Counter
    circuit_open: Gauge
    tenant_requests: Counter
    identity: Counter
    overflow: Counter
    key_lookups: Counter
    rejections: Counter
    subscription_events: Counter
    subscriptions_open: Gauge
    pressure: Gauge
    adaptive_multiplier: Gauge
    adaptive_engaged: Gauge
    adaptive_transitions_total: Counter
    pressure_ignored_total: Counter
    adaptive_culprits: Gauge
    in_flight_gauge: Gauge
    delay_seconds: Histogram
    delayed_waiting: Gauge
    delay_refused_total: Counter
    delay_cancelled_total: Counter
    leases_total: Counter
    refunds_total: Counter
    refund_queue: Gauge
    pipeline_commands: Counter
    pipeline_batches: Counter
    pipeline_redirects: Counter
    redis_eviction: Gauge
    build_info: Gauge
    estimate_ratio: Histogram
    list_returned: Histogram
    list_operation_max: Histogram
    list_assumed: Gauge
    list_max_returned: Gauge
    list_sliced_ratio: Histogram
    list_subject_max: Histogram
    root_field_requests: Counter
    root_field_cost: Counter
    root_field_time: Histogram
    operation_name_requests: Counter
    operation_name_cost: Counter
    operation_name_time: Histogram
    tenant_utilisation: Gauge
    config_generation: Gauge
    config_info: Gauge
    staged_total: Counter
    staged_events_total: Counter
    would_refuse_total: Counter
    would_refuse_cost_total: Counter
    refusal_capacity_ratio: Histogram
    root_fields_skipped: Counter
    quota_warnings: Counter
    candidate_cost_ratio: Histogram
    candidate_would_refuse: Counter
    candidate_errors: Counter
    candidate_loaded: Gauge
    resolver_seconds: Histogram
    resolver_subject_seconds: Histogram
    incremental_payloads: Counter
    incremental_operations: Counter
    shard_calls_total: Counter
