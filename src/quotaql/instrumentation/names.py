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
OVERAGE_TOTAL: Final = "quotaql_overage_total"
"""Counter: cost points charged after execution above the debit (the actual cost ran over
the estimate: ``[limits] charge_overage``), by ``tier``. What operations paid in all is
``charged - refunded + overage`` of ``quotaql_cost_total`` and this."""
TIME_SECONDS_TOTAL: Final = "quotaql_time_seconds_total"
"""Counter: worker time the operations took (parse, validation, pricing, execution; the
thread's CPU time), charged to their subjects' time quotas, by ``tier``, in seconds."""
OPERATION_TIME: Final = "quotaql_operation_time_seconds"
"""Histogram: the worker time of each operation, by ``operation_type``, ``tier``."""
QUOTA_REFUSALS_TOTAL: Final = "quotaql_quota_refusals_total"
"""Counter: operations refused by the budget (``blocked``, ``denied``), by ``tier`` and the
``quota`` that refused them (``tenant``, ``user``, ``global``, ``time``, ``op:<name>``,
``field:<coordinate>``: bounded by the configuration)."""
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
OVERFLOW_TOTAL: Final = "quotaql_overflow_total"
"""Counter: decisions (``store="states"``) and lease takes (``store="leases"``) of the
memory storages made on an overflow state, their table being full (``max_keys``), by
``scope``: a network's (``OVERFLOW_NETWORK``) or a quota's last resort (``OVERFLOW_QUOTA``)."""
KEY_LOOKUPS_TOTAL: Final = "quotaql_key_lookups_total"
"""Counter: API keys that needed the ``key_resolver`` (no cached answer), by ``outcome``
(``KEY_LOOKUP_OUTCOMES``): looked up and known, unknown or failed, or not looked up
(``limited``: the client's address was over ``[identity] resolver_rate``)."""
SUBSCRIPTION_EVENTS_TOTAL: Final = "quotaql_subscription_events_total"
"""Counter: subscription events after the first, charged or refused, by ``decision``, ``tier``."""
SUBSCRIPTIONS_OPEN: Final = "quotaql_subscriptions_open"
"""Gauge: subscriptions open now (summed over a server's processes)."""
REJECTIONS_TOTAL: Final = "quotaql_rejections_total"
"""Counter: operations refused before they were priced or by the analysis (the ``rejected``
decision), by the refusal's ``code`` (``REJECTION_CODES``; any other is ``other``)."""

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
PRESSURE_IGNORED_TOTAL: Final = "quotaql_pressure_ignored_total"
"""Counter: updates (once a second) at which a measured ``source``'s pressure over the whole
window reached ``engage_at`` but did not count for everyone, by ``reason``
(``PRESSURE_IGNORED_REASONS``)."""
ADAPTIVE_CULPRITS: Final = "quotaql_adaptive_culprits"
"""Gauge: the subjects (addresses by /24 or /48 network) that pay their own adaptive
multiplier now, because their own operations cause the pressure (in shadow mode: would)."""

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
LIST_SUBJECT_MAX_ITEMS: Final = "quotaql_list_subject_max_items"
"""Histogram: per subject class and minute (in each process), the items of the subject's
longest assumed list of ``coordinate``: a subject counts once a minute, however many lists it
sends (``quotaql tune`` lowers a size only as far as most subjects allow)."""
LIST_SUBJECT_PERIOD: Final = 60.0
"""Seconds of one period of ``quotaql_list_subject_max_items``: each subject that returned a
list of a coordinate in it is one observation, its longest list."""
LIST_SUBJECTS_KEPT: Final = 256
"""The most subjects a process keeps per coordinate and period (a uniform sample of the
subjects beyond it, chosen by a keyed hash no client can aim at)."""
COST_ESTIMATE_RATIO: Final = "quotaql_cost_estimate_ratio"
"""Histogram: actual / estimated cost of each priced operation that ran, by
``operation_type``, ``tier``."""

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
LABEL_QUOTA: Final = "quota"
"""The quota that refused an operation (its name in the configuration)."""
QUOTA_TIME: Final = "time"
"""The ``quota`` of a refusal by the time quota (the subject's worker time in debt)."""
LABEL_TO: Final = "to"
"""The state a transition goes to (``TRANSITIONS``)."""
LABEL_STORE: Final = "store"
"""Which table of a memory storage overflowed (``OVERFLOW_STORES``)."""
LABEL_SCOPE: Final = "scope"
"""Which overflow state a new subject shared (``OVERFLOW_SCOPES``)."""

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

LABEL_CODE: Final = "code"
"""The ``extensions.code`` of a rejected operation's error (``REJECTION_CODES``)."""
TOO_MANY_VARIABLE_VALUES: Final = "TOO_MANY_VARIABLE_VALUES"
"""Rejected: the variables held more than ``[cost] max_variable_values`` values."""
GRAPHQL_VALIDATION_FAILED: Final = "GRAPHQL_VALIDATION_FAILED"
"""Rejected by graphql-core's validation (its errors carry no code), or an unknown field."""
OTHER_CODE: Final = "other"
"""A rejection whose code is none of ``REJECTION_CODES``."""
REJECTION_CODES: Final = (
    "GRAPHQL_PARSE_FAILED", GRAPHQL_VALIDATION_FAILED, "OPERATION_RESOLUTION_FAILURE",
    "BAD_USER_INPUT", "QUERY_TOO_LARGE", "QUERY_TOO_DEEP", "QUERY_TOO_COMPLEX",
    "TOO_MANY_ALIASES", "TOO_MANY_ROOT_FIELDS", "TOO_MANY_FIELDS", "TOO_MANY_DIRECTIVES",
    "SLICING_ARGUMENT_REQUIRED", "FRAGMENT_CYCLE", "INVALID_REQUEST_BODY",
    TOO_MANY_VARIABLE_VALUES, OTHER_CODE, "TOO_MANY_FIELD_PAIRS", "INTROSPECTION_DISABLED",
    "BAD_COST_HEADER",
)  # fmt: skip
"""The values of ``code`` in ``quotaql_rejections_total``: the analysis's codes (quotaql's
errors), ``BodyLimit``'s refusal of a body, a ``GraphQL-Cost`` header quotaql does not know,
and ``other``; a bounded set whatever clients send."""

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

LABEL_POLICY: Final = "policy"
"""A Redis ``maxmemory-policy`` (``noeviction``, ``allkeys-lru``, ...; ``unknown``)."""
LABEL_VERDICT: Final = "verdict"
"""What the eviction check of a Redis storage found (``EVICTION_VERDICTS``)."""
EVICTION_SAFE: Final = "safe"
"""``noeviction`` on every master, or ``maxmemory 0`` (no limit: nothing is evicted)."""
EVICTION_ALLOWED: Final = "allowed"
"""A master may evict quotaql's keys, and ``[redis] allow_eviction`` accepts it."""
EVICTION_REFUSED: Final = "refused"
"""A master may evict quotaql's keys: the storage refuses every call (the fail mode decides)."""
EVICTION_UNVERIFIED: Final = "unverified"
"""``CONFIG GET`` was refused (ACL, renamed command): the policy could not be read."""
EVICTION_VERDICTS: Final = (EVICTION_SAFE, EVICTION_ALLOWED, EVICTION_REFUSED, EVICTION_UNVERIFIED)

#: Where a subject came from (``quotaql.identity.IdentitySource``): the values of ``source``.
SOURCE_ANONYMOUS: Final = "anonymous"
"""No key, no principal, no address (the server reports no peer): one shared budget."""
SOURCE_UNKNOWN_KEY: Final = "unknown_key"
"""An unknown key, counted as the client's address (``unknown_keys = "address"``)."""
SOURCE_REJECTED_KEY: Final = "rejected_key"
"""An unknown key, refused (``unknown_keys = "reject"``)."""
SOURCE_UNVERIFIED_KEY: Final = "unverified_key"
"""An unknown key taken as a tenant of its own (``unknown_keys = "tenant"``: unsafe)."""
SOURCE_LIMITED_KEY: Final = "limited_key"
"""A key not looked up, counted as the client's address: the address had caused
``[identity] resolver_rate`` lookups already (invented keys, most likely)."""
IDENTITY_SOURCES: Final = (
    "key",  # a known API key
    "user",  # an authenticated principal
    "custom",  # what identify() returned
    "address",  # no key: the client's address
    SOURCE_UNKNOWN_KEY,
    SOURCE_REJECTED_KEY,
    SOURCE_UNVERIFIED_KEY,
    SOURCE_ANONYMOUS,
    SOURCE_LIMITED_KEY,
)
#: The sources that say something is wrong: shared, unknown or unverified identities.
SUSPECT_SOURCES: Final = (
    SOURCE_ANONYMOUS, SOURCE_UNKNOWN_KEY, SOURCE_REJECTED_KEY, SOURCE_UNVERIFIED_KEY,
    SOURCE_LIMITED_KEY,
)  # fmt: skip
#: The values of ``outcome`` in ``quotaql_key_lookups_total``.
LOOKUP_KNOWN: Final = "known"
LOOKUP_UNKNOWN: Final = "unknown"
LOOKUP_FAILED: Final = "failed"
"""The ``key_resolver`` raised (logged): the key counted as its address, nothing cached."""
LOOKUP_LIMITED: Final = "limited"
"""Not looked up: the address was over ``[identity] resolver_rate``."""
KEY_LOOKUP_OUTCOMES: Final = (LOOKUP_KNOWN, LOOKUP_UNKNOWN, LOOKUP_FAILED, LOOKUP_LIMITED)

#: The values of ``store`` and ``scope`` in ``quotaql_overflow_total``.
STORE_STATES: Final = "states"
"""The rate states of a ``MemoryStorage`` (the limiter's local fallback's too)."""
STORE_LEASES: Final = "leases"
"""The concurrency lease sets of a ``MemoryLeases``."""
OVERFLOW_STORES: Final = (STORE_STATES, STORE_LEASES)
OVERFLOW_NETWORK: Final = "network"
"""A new address subject shared its network's state (IPv4 /24, IPv6 /48)."""
OVERFLOW_QUOTA: Final = "quota"
"""A new subject shared its quota's last-resort state (no address, or no room left for its
network's)."""
OVERFLOW_SCOPES: Final = (OVERFLOW_NETWORK, OVERFLOW_QUOTA)

#: The sources of the pressure signal (the ``source`` label of ``quotaql_pressure``).
PRESSURE_LATENCY: Final = "latency"
"""A percentile of the execution time against ``[adaptive] latency_target``."""
PRESSURE_ERRORS: Final = "errors"
"""The share of operations that ended with an unexpected error (not a ``GraphQLError``)."""
PRESSURE_CALLABLE: Final = "callable"
"""What ``Gate(pressure=fn)`` returns."""
PRESSURE_SOURCES: Final = (PRESSURE_LATENCY, PRESSURE_ERRORS, PRESSURE_CALLABLE)
#: Why a measured source's pressure did not count for everyone (``reason`` of
#: ``quotaql_pressure_ignored_total``).
IGNORED_FEW_SUBJECTS: Final = "few_subjects"
"""Without its ``[adaptive] min_subjects - 1`` largest contributors, the window shows no
pressure: fewer subjects than that cause it."""
IGNORED_COST_SHARE: Final = "cost_share"
"""The subjects whose operations show the pressure hold less than ``[adaptive]
min_cost_share`` of the window's cost."""
PRESSURE_IGNORED_REASONS: Final = (IGNORED_FEW_SUBJECTS, IGNORED_COST_SHARE)
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

TIME_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""The buckets of ``quotaql_operation_time_seconds``: from half a millisecond (an honest
query's parse, validation and execution) to the seconds a hostile document takes."""
DELAY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""The buckets of ``quotaql_delay_seconds``: from a few milliseconds (a turn a refill away)
to a minute (``max_delay`` is rarely longer). 1.0, the default threshold of the
``QuotaqlDelaysLong`` alert (``[alerts] delay_p99_seconds``), is an edge, so it is exact."""

# Redis eviction (docs/operations.md, "Redis: the eviction policy").
REDIS_EVICTION: Final = "quotaql_redis_eviction"
"""Gauge, 1 for the current verdict of each Redis storage's eviction check, by ``policy``
(its ``maxmemory-policy``, ``unknown`` when ``CONFIG GET`` is refused) and ``verdict``
(``EVICTION_VERDICTS``); no series before the first check."""

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
ATTR_CODE: Final = "quotaql.code"
"""The ``extensions.code`` of the error a refused operation was answered with
(``TOO_MANY_VARIABLE_VALUES``, ``RATE_LIMITED``...): set only when it was refused."""
ATTR_ADAPTIVE_OWN: Final = "quotaql.adaptive.own_pressure"
"""True when that multiplier was the subject's own: its operations cause the pressure."""
ATTR_IN_FLIGHT: Final = "quotaql.in_flight"
"""The live leases of the operation's first lease set (its tier's, or its subscriptions')
once it took its own: set only for tiers with a concurrency limit."""
EVENT_FAIL_OPEN: Final = "quotaql.fail_open"
EVENT_FAIL_CLOSED: Final = "quotaql.fail_closed"
EVENT_REFUND: Final = "quotaql.refund"
"""A refund was given back (queued, with deferred refunds)."""
ATTR_TIME_MS: Final = "quotaql.time_ms"
"""The worker time the operation took, in milliseconds (what its time quota is charged)."""
ATTR_LIMITED_BY: Final = "quotaql.limited_by"
"""The quota that refused the operation (set only when the budget refused it)."""
ATTR_COST_OVERAGE: Final = "quotaql.cost.overage"
"""Points charged after execution above the debit (set only when the actual cost ran over
it)."""
EVENT_OVERAGE: Final = "quotaql.overage"
"""An overage was charged (attribute ``quotaql.cost.overage``)."""
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
REDIS_EVICTION_EVENT: Final = "redis_eviction"
"""Log event: what a Redis storage's eviction check found (a refusal, an allowed or
unverified policy, a policy that would evict under a ``maxmemory``)."""

# -- consumption by route, utilisation, the configuration in force ----------------------------
# (docs/observability.md "Consumption by route"): every label bounded, by the schema (root-field
# coordinates), by a top-N (operation names, tenants) or by the configuration.

ROOT_FIELD_REQUESTS_TOTAL: Final = "quotaql_root_field_requests_total"
"""Counter: operations selecting a root field, by its ``coordinate`` (``"Query.products"``,
only coordinates the priced plan found in the schema) and ``decision``: an operation selecting
two root fields counts once under each."""
ROOT_FIELD_COST_TOTAL: Final = "quotaql_root_field_cost_total"
"""Counter: the points operations were charged, shared among the root fields they selected
in proportion to each field's estimated cost, by ``coordinate``."""
ROOT_FIELD_TIME: Final = "quotaql_root_field_time_seconds"
"""Histogram: the worker time of each operation that ran, under each root field it selected,
by ``coordinate`` (``TIME_BUCKETS``)."""
OPERATION_NAME_REQUESTS_TOTAL: Final = "quotaql_operation_name_requests_total"
"""Counter: priced operations by ``operation_name`` (the busiest ``top_operations`` names as the
client wrote them; every other ``other``; unnamed ones ``ANONYMOUS_OPERATION``) and
``decision``."""
OPERATION_NAME_COST_TOTAL: Final = "quotaql_operation_name_cost_total"
"""Counter: the points operations were charged, by ``operation_name``."""
OPERATION_NAME_TIME: Final = "quotaql_operation_name_time_seconds"
"""Histogram: the worker time of each operation that ran, by ``operation_name``."""
TENANT_UTILISATION: Final = "quotaql_tenant_utilisation"
"""Gauge: per labelled tenant (allowlisted, named, top-N: never ``other``), the points it was
charged over the last ``UTILISATION_WINDOW`` seconds ÷ what its tier's quota grants in that
time (its refill rate, or its limit per window, × the window); above 1 while it spends its
burst. Per process, summed over a server's live processes."""
UTILISATION_WINDOW: Final = 300.0
"""Seconds over which ``quotaql_tenant_utilisation`` sums the charged points (five minutes, a
a sliding counter over the current and the last window)."""
CONFIG_GENERATION: Final = "quotaql_config_generation"
"""Gauge: the generation of the configuration each process runs (1 for the first file, one
more at each reload); under multiprocess mode one series per live worker (``pid``)."""
CONFIG_INFO: Final = "quotaql_config_info"
"""Gauge, 1 for the ``digest`` (12 hex digits of its SHA-256) of the configuration a process
runs; under multiprocess mode one series per live worker (``pid``), a replaced digest's at 0."""

LABEL_OPERATION_NAME: Final = "operation_name"
"""An operation's name: the busiest names (top-N) as written, ``other`` beyond."""
LABEL_DIGEST: Final = "digest"
ANONYMOUS_OPERATION: Final = "(anonymous)"
"""The ``operation_name`` of operations without a name (no GraphQL name has parentheses)."""
OTHER_OPERATION: Final = "other"
TOP_OPERATIONS: Final = 20
"""How many operation names get a label of their own by default (``top_operations``)."""
MAX_OPERATION_NAME: Final = 64
"""The longest operation name shown as written: a longer one is labelled ``h:<hash>``."""

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
EVERY_INSTRUMENT: Final = (*INSTRUMENTS, *ROUTE_INSTRUMENTS)
"""Every metric quotaql exports, in the order a scrape lists them."""
