"""Every metric, label, span and attribute name quotaql emits: the one source for the code,
the generated Grafana dashboards and the Prometheus alert rules.

Metric names are the names Prometheus stores (counters with their ``_total``; histograms
without their ``_bucket`` / ``_sum`` / ``_count`` series suffixes).
"""

from __future__ import annotations

from typing import Final

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
PIPELINE_REDIRECTS_TOTAL: Final = "quotaql_pipeline_redirects_total"
"""Counter: what a Redis Cluster's masters answered the async pipeline instead of a script's
reply, by ``backend`` and ``kind`` (``PIPELINE_REDIRECT_KINDS``): the calls followed a slot
that moved (``moved``), was being migrated (``ask``), a tenant caught half migrated
(``tryagain``), a cluster without a quorum (``clusterdown``); ``refresh`` counts the slot map
read again (after a redirection or a master's failure)."""
PIPELINE_REDIRECT_KINDS: Final = ("moved", "ask", "tryagain", "clusterdown", "refresh")
LABEL_KIND: Final = "kind"

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

"""Every metric quotaql exports, in the order a scrape lists them."""

# -- staged enforcement and the rollout review (issue 25) --------------------------------------
# (docs/tuning.md "Staged enforcement: a small segment first", ``quotaql report``): every label
# bounded by the configuration (tiers, quotas) or by a fixed set (decisions, causes).

STAGED_TOTAL: Final = "quotaql_staged_total"
"""Counter: operations of ``enforce`` tiers whose ``enforce_share`` is below 1, by ``tier``,
``enforced`` (``"true"``: the subject is in the enforced share; ``"false"``: it runs in shadow
because of the share) and ``decision``."""
STAGED_EVENTS_TOTAL: Final = "quotaql_staged_events_total"
"""Counter: subscription events after the first of those operations, by ``tier``,
``enforced`` and ``decision``."""
WOULD_REFUSE_TOTAL: Final = "quotaql_would_refuse_total"
"""Counter: operations the budget refused that shadow mode let run, by ``tier``, ``tenant``
(as ``quotaql_tenant_requests_total`` labels it: allowlisted, named or top-N, else ``other``),
the ``quota`` that refused them and ``cause`` (``ROLLOUT_CAUSES``: shadow because of the
tier's ``mode``, or because of ``enforce_share``)."""
WOULD_REFUSE_COST_TOTAL: Final = "quotaql_would_refuse_cost_total"
"""Counter: the points those operations asked of the quota that refused them (the cost they
would have needed), by ``tier``, ``tenant`` and ``quota``."""
REFUSAL_CAPACITY_RATIO: Final = "quotaql_refusal_capacity_ratio"
"""Histogram: for each operation the budget refused (``blocked``) or would have
(``shadow_blocked``), by ``tier`` and ``decision``, the capacity the refusing quota would have
needed for it to fit at its decision time over the capacity it has: (capacity + cost -
remaining) / capacity (``CAPACITY_RATIO_BUCKETS``; ``quotaql report`` reads what capacity
would have let 99 % of a tier's operations through)."""
LABEL_ENFORCED: Final = "enforced"
"""``"true"`` or ``"false"``: whether a staged subject is in its tier's enforced share."""
LABEL_CAUSE: Final = "cause"
"""Why an operation the budget refused ran (``ROLLOUT_CAUSES``)."""
CAUSE_MODE: Final = "mode"
"""Its tier's ``mode`` (or ``[limits] mode``) is ``shadow``."""
CAUSE_SHARE: Final = "share"
"""Its tier is enforced, but its subject is outside the tier's ``enforce_share``."""
ROLLOUT_CAUSES: Final = (CAUSE_MODE, CAUSE_SHARE)
CAPACITY_RATIO_BUCKETS: Final = (
    1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 100.0,
)  # fmt: skip
"""The buckets of ``quotaql_refusal_capacity_ratio``: from "a little more" to a hundred times
the capacity (beyond: ``+Inf``, no capacity to speak of)."""
ATTR_STAGED: Final = "quotaql.staged"
"""``enforced`` or ``shadow``: where the subject of an ``enforce`` tier whose ``enforce_share``
is below 1 stands (set only then)."""
STAGED_LOG_FIELD: Final = "staged"
"""The log field (``enforced``, ``shadow``) on the lines of those operations."""
# -- partial answers (issue 25) ------------------------------------------------------------------
# ([limits] on_field_limit = "skip", docs/strawberry.md "Partial answers"): root fields answered
# null with a RATE_LIMITED error at their path because only their own quotas refused.

ROOT_FIELDS_SKIPPED_TOTAL: Final = "quotaql_root_fields_skipped_total"
"""Counter: root fields skipped (answered ``null`` with a ``RATE_LIMITED`` error at their path,
neither run nor charged) because their ``[tiers.<t>.fields]`` quota refused while the rest of
the operation ran, by ``coordinate`` (a root field of the schema) and ``tier``; once per
operation and field, however many aliases select it."""
FIELDS_SKIPPED: Final = "fields_skipped"
"""Log event: an operation ran without the root fields whose quotas refused
(``on_field_limit = "skip"``): which fields, the quota, the retry time."""
EVENT_FIELDS_SKIPPED: Final = "quotaql.fields_skipped"
"""The operation ran without root fields whose quotas refused; attribute
``quotaql.skipped`` (their coordinates)."""
ATTR_SKIPPED: Final = "quotaql.skipped"
"""The coordinates of the root fields an operation skipped (``on_field_limit = "skip"``)."""
# -- a warning before the wall (issue 25) -------------------------------------------------

QUOTA_WARNINGS_TOTAL: Final = "quotaql_quota_warnings_total"
"""Counter: operations whose answer warned that a quota fell below the tier's ``warn_at``
threshold (``extensions.cost.warning``), by ``tier`` and the ``quota`` it named (a
subscription counts once, with the warning of its last answer)."""
EVENT_QUOTA_WARNING: Final = "quotaql.quota_warning"
"""The operation's answer warned (attributes ``quotaql.warning.*``: the quota, what is left
of it, its capacity, the sustainable rate, and whether it is enforced)."""
ATTR_WARNING_QUOTA: Final = "quotaql.warning.quota"
ATTR_WARNING_REMAINING: Final = "quotaql.warning.remaining"
ATTR_WARNING_CAPACITY: Final = "quotaql.warning.capacity"
ATTR_WARNING_RATE: Final = "quotaql.warning.sustainable_rate"
ATTR_WARNING_ENFORCED: Final = "quotaql.warning.enforced"
# -- candidate weights (issue 25) ------------------------------------------------------------
# (docs/tuning.md "Candidate weights, priced live"): a sampled share of operations priced with
# the candidate file's [cost] table too, never charged.

CANDIDATE_COST_RATIO: Final = "quotaql_candidate_cost_ratio"
"""Histogram: candidate cost ÷ live cost of each sampled operation, observed once under its
``operation_name`` (``coordinate`` empty: the whole operation) and once under each root field
it selected (``coordinate`` that field's, ``operation_name`` empty: that field's own cost).
A live cost of 0 counts as 1.0 when the candidate's is 0 too, else as ``RATIO_CAP``."""
CANDIDATE_WOULD_REFUSE_TOTAL: Final = "quotaql_candidate_would_refuse_total"
"""Counter: sampled operations the live file allowed that the candidate would have refused
(its debit larger than what one of the subject's quotas held, or past its static limits),
by ``tier`` and ``tenant`` (labelled as ``quotaql_tenant_requests_total`` labels them)."""
CANDIDATE_ERRORS_TOTAL: Final = "quotaql_candidate_errors_total"
"""Counter: candidate files refused (once per change of the file) and sampled operations it
could not price, by ``reason`` (``CANDIDATE_REASONS``)."""
CANDIDATE_LOADED: Final = "quotaql_candidate_loaded"
"""Gauge: 1 while a valid candidate prices the sampled operations, 0 while none is
configured or the file is refused (the sampling stops until it is fixed)."""
CANDIDATE_RATIO_BUCKETS: Final = (
    0.0625, 0.125, 0.25, 0.5, 0.67, 0.8, 0.9, 0.99, 1.0, 1.01, 1.1, 1.25, 1.5, 2.0, 4.0, 8.0,
    16.0,
)  # fmt: skip
"""candidate ÷ live, from 1/16 to 16, finer around 1.0 (an edge: "dearer" is exact)."""
CANDIDATE_MISSING: Final = "missing"
"""The candidate file does not exist (or cannot be read)."""
CANDIDATE_TOO_LARGE: Final = "too_large"
"""The candidate file is larger than ``MAX_CANDIDATE_BYTES``: refused before it is read."""
CANDIDATE_INVALID: Final = "invalid"
"""The candidate file is not a regular file, not TOML, or not a valid ``quotaql.toml``."""
CANDIDATE_SCHEMA: Final = "schema"
"""The candidate's weights name a coordinate the schema does not have."""
CANDIDATE_PRICING: Final = "pricing"
"""A sampled operation the candidate could not price (an unexpected error: counted, logged)."""
CANDIDATE_REASONS: Final = (
    CANDIDATE_MISSING, CANDIDATE_TOO_LARGE, CANDIDATE_INVALID, CANDIDATE_SCHEMA, CANDIDATE_PRICING,
)  # fmt: skip
MAX_CANDIDATE_BYTES: Final = 1 << 20
"""The largest candidate file read (1 MiB: a [cost] table of some 20,000 weights); a larger
one is refused by its size, before a byte of it is read."""
ATTR_CANDIDATE_COST: Final = "quotaql.candidate.cost"
"""Span attribute: the candidate's price of a sampled operation."""
ATTR_CANDIDATE_WOULD_REFUSE: Final = "quotaql.candidate.would_refuse"
"""Span attribute: whether the candidate would have refused the sampled operation."""
CANDIDATE_LOADED_EVENT: Final = "candidate_loaded"
"""Log event (INFO): a candidate file read and in force."""
CANDIDATE_REFUSED_EVENT: Final = "candidate_refused"
"""Log event (WARNING): a candidate file refused (file, line and key of the error): the sampling
stops until it is fixed; or a sampled operation it could not price."""

# -- resolver time (issue 25) ----------------------------------------------------------------
# (docs/tuning.md "Weights from measured resolver time"): measured on the operations sampled
# for tuning only (``[cost] tuning_sample``), per schema coordinate (bounded by the schema).

RESOLVER_SECONDS: Final = "quotaql_resolver_seconds"
"""Histogram: the time of each call of a field's resolver, from the call to the end of what
it returned (an awaitable awaited), by ``coordinate`` (``"Query.products"``: only fields of
the schema); its count is the calls, its sum their seconds (``RESOLVER_BUCKETS``)."""
RESOLVER_SUBJECT_SECONDS: Final = "quotaql_resolver_subject_seconds"
"""Histogram: per subject (addresses by /24 or /48 network) and minute, its mean seconds per
call of the coordinate's resolver: a subject counts once a minute, however many calls it
made, so that a few subjects cannot move what ``quotaql tune --weights`` proposes."""
RESOLVER_BUCKETS: Final = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""Seconds: 10 µs to 10 s, in steps of 2 to 2.5."""
RESOLVER_SUBJECTS_KEPT: Final = 256
"""The most subjects a process keeps per coordinate and period (a uniform sample by a keyed
hash beyond it), as ``LIST_SUBJECTS_KEPT``."""

# -- @defer and @stream (issue 25) ------------------------------------------------------------
# (docs/strawberry.md "@defer and @stream"): an operation delivered in payloads, priced whole,
# settled once.

INCREMENTAL_PAYLOADS_TOTAL: Final = "quotaql_incremental_payloads_total"
"""Counter: the payloads sent after the initial result of ``@defer`` / ``@stream``
operations, counted as each is handed to the server, by ``tier``."""
INCREMENTAL_OPERATIONS_TOTAL: Final = "quotaql_incremental_operations_total"
"""Counter: ``@defer`` / ``@stream`` operations by how they ended (``outcome``):
``completed`` (settled after the last payload), ``abandoned`` (the client left before it:
settled then, keeping the whole debit), ``unfollowed`` (a graphql-core whose payloads quotaql
cannot follow: the whole debit kept), by ``tier``."""
INCREMENTAL_COMPLETED: Final = "completed"
INCREMENTAL_ABANDONED: Final = "abandoned"
INCREMENTAL_UNFOLLOWED: Final = "unfollowed"
INCREMENTAL_OUTCOMES: Final = (INCREMENTAL_COMPLETED, INCREMENTAL_ABANDONED, INCREMENTAL_UNFOLLOWED)
INCREMENTAL_UNFOLLOWED_EVENT: Final = "incremental_unfollowed"
"""Log event: an incremental delivery whose payloads cannot be followed (its whole debit kept)."""
EVENT_INCREMENTAL_PAYLOAD: Final = "quotaql.incremental_payload"
"""Span event: a payload after the initial result was sent (``quotaql.payload``: its number,
``quotaql.payload.parts``: the deferred fragments and streamed items batches it carries)."""
EVENT_INCREMENTAL_ABANDONED: Final = "quotaql.incremental_abandoned"
"""Span event: the client left before the last payload (``quotaql.payload``: how many were sent)."""
ATTR_PAYLOAD: Final = "quotaql.payload"
ATTR_PAYLOAD_PARTS: Final = "quotaql.payload.parts"

# -- sharded shared quotas (issue 26) ---------------------------------------------------------
# (docs/scale-out.md "Sharded shared quotas"): a shared quota kept as [global] shards buckets.

SHARD_CALLS_TOTAL: Final = "quotaql_shard_calls_total"
"""Counter: the limiter's calls to the shards of sharded shared quotas, by ``outcome``:
``called`` (a subject's home shard asked), ``retried`` (its second shard asked, the home one
refused or was remembered empty), ``spared`` (a shard remembered empty was not asked: the
decision went to the other one, or was refused without a call), and ``shard`` (its index,
``0`` to ``shards - 1``: at most 64)."""
LABEL_SHARD: Final = "shard"
SHARD_CALLED: Final = "called"
SHARD_RETRIED: Final = "retried"
SHARD_SPARED: Final = "spared"
SHARD_OUTCOMES: Final = (SHARD_CALLED, SHARD_RETRIED, SHARD_SPARED)
ATTR_SHARD: Final = "quotaql.shard"
"""Span attribute: on an operation whose sharded shared quota was not decided on its subject's
home shard, where it was: ``second`` (the home one was empty) or ``spared`` (both remembered
empty: refused without a call)."""
