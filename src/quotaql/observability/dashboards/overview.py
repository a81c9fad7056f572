"""The overview dashboard, row by row: each row a table of its panels."""

from __future__ import annotations

from typing import Any, Final

from quotaql.instrumentation import names
from quotaql.observability.dashboards import candidate, rollout, routes, shared, warn
from quotaql.observability.dashboards.board import (
    OVERVIEW_UID,
    TENANT_UID,
    assemble,
    datasource_variable,
    job_variable,
    tier_variable,
)
from quotaql.observability.dashboards.panels import Bars, Graph, Heatmap, Row, Stat, State
from quotaql.observability.dashboards.promql import (
    BLOCKED_BY_TIER,
    BUDGET_REFUSED,
    COST_MATCHERS,
    DECISION,
    INSTANCE,
    JOB_MATCH,
    LE,
    REQUESTS_BY_TIER,
    TIER,
    TIER_MATCH,
    blocked_ratio_by_tier,
    bucket_rates,
    eq,
    increase_over_range,
    labels,
    over_range,
    quantiles,
    rate,
    rates_by,
    ratio,
    sel,
    share,
    sum_by,
    sums_by,
    topk,
)

BACKEND: Final = names.LABEL_BACKEND
OUTCOME: Final = names.LABEL_OUTCOME
SOURCE: Final = names.LABEL_SOURCE

# -- overview ----------------------------------------------------------------------------------

_FAIL_MODES: Final = f'{DECISION}=~"{names.FAIL_OPEN}|{names.FAIL_CLOSED}"'

OVERVIEW: Final = Row("Overview", (
    Graph("Decisions per second", "reqps", 8,
          (rates_by(REQUESTS_BY_TIER, DECISION),),
          "Operations per second by limiter decision: allowed, blocked (over budget), "
          "shadow_blocked (would have been blocked; shadow mode let it run), rejected "
          "(static limits), fail_open / fail_closed (storage unavailable), unknown_key "
          "(an API key no tenant has, refused), too_many_subscriptions (the subject's "
          "subscription cap), too_many_concurrent (max_in_flight)."),
    Graph("Blocked ratio", "percentunit", 8,
          ((share(BLOCKED_BY_TIER, REQUESTS_BY_TIER), "selected tiers"),
           (blocked_ratio_by_tier(), labels(TIER))),
          "Share of operations refused by the budget among all decisions, over the "
          "selected tiers and per tier: decision blocked (the storage refused) and denied "
          "(refused again from the local deny cache, before its retry time).", max_value=1),
    Graph("Fail-open / fail-closed decisions", "reqps", 8,
          (rates_by(sel(names.REQUESTS_TOTAL, JOB_MATCH, TIER_MATCH, _FAIL_MODES), DECISION),),
          "Operations decided without the storage backend: let through (fail_open) or "
          "refused (fail_closed). Anything above zero means the limiter is not limiting "
          "as configured."),
), runbook='QuotaqlBlockedRatioHigh')  # fmt: skip

# -- adaptive limits ----------------------------------------------------------------------------

_ADAPTIVE_HELP: Final = (
    "Adaptive limits ([adaptive], docs/adaptive.md) are per process: each instance measures "
    "what it runs and throttles what it admits. "
)

_TIGHTEST_MULTIPLIER: Final = (
    f"min by ({TIER}) ({sel(names.ADAPTIVE_MULTIPLIER, JOB_MATCH, TIER_MATCH)})"
)

ADAPTIVE: Final = Row("Adaptive", (
    Graph("Pressure by source", "percentunit", 8,
          ((f"max by ({SOURCE}) ({sel(names.PRESSURE, JOB_MATCH)})", labels(SOURCE)),),
          _ADAPTIVE_HELP + "The pressure signal of each configured source, on its most "
          "pressured instance: latency (the execution-time percentile against "
          "latency_target, 1 at latency_saturate), errors (the share of unexpected errors "
          "against error_target), callable (what the application's pressure function "
          "returns). Adaptation engages when the largest stays at or above engage_at for "
          "engage_for.", max_value=1),
    Graph("Adaptive multiplier by tier", "short", 8,
          ((_TIGHTEST_MULTIPLIER, labels(TIER)),),
          _ADAPTIVE_HELP + "What each tier's charges are divided by, on its tightest "
          "instance: 1 is no scaling (an essential tier, or no pressure), 0.5 admits half "
          "the tier's refill rate. In shadow mode, the multiplier that would apply.", max_value=1),
    State("Adaptive limits", 4, f"max({sel(names.ADAPTIVE_ENGAGED, JOB_MATCH)})",
          "state",
          (("released", "green"), ("engaged", "orange")),
          _ADAPTIVE_HELP + "engaged while any instance of the selected jobs has adaptation "
          "engaged (in shadow mode: would have); the QuotaqlAdaptiveEngaged alert fires when "
          "it lasts."),
    Stat("Adaptive transitions in range", "short", 4,
         over_range(names.ADAPTIVE_TRANSITIONS_TOTAL, names.LABEL_TO),
         labels(names.LABEL_TO),
         _ADAPTIVE_HELP + "How many times adaptation engaged and released over the "
         "dashboard's time range, over the selected jobs' instances. Many in a row: the "
         "hysteresis (engage_at / release_at, engage_for / release_for) is too narrow.",
         instant=True, with_names=True),
    Graph("Pressure left out for everyone", "short", 12,
          (rates_by(sel(names.PRESSURE_IGNORED_TOTAL, JOB_MATCH), SOURCE, names.LABEL_REASON),),
          _ADAPTIVE_HELP + "Per second, the updates (one a second per instance) at which a "
          "measured source's pressure over the whole window reached engage_at and did not "
          "count for everyone: few_subjects (without its min_subjects - 1 largest "
          "contributors the window shows none: fewer subjects cause it, such as a few "
          "addresses sending failing or slow queries), cost_share (the operations that show "
          "it were charged less than min_cost_share of the window's cost). Those subjects "
          "pay their own multiplier instead (next panel)."),
    Graph("Subjects paying their own multiplier", "short", 12,
          ((f"max({sel(names.ADAPTIVE_CULPRITS, JOB_MATCH)})", "subjects"),),
          _ADAPTIVE_HELP + "Subjects (an address counted by its /24 or /48 network) debited "
          "cost / their own multiplier on the instance that has most, because their own "
          "operations fail or are slow past engage_at while the window's pressure is (at "
          "most 64 an instance). In shadow mode: would be."),
), runbook='QuotaqlAdaptiveEngaged')  # fmt: skip

# -- identity ----------------------------------------------------------------------------------

_IDENTITY: Final = sel(names.IDENTITY_TOTAL, JOB_MATCH)
_SUSPECT_MATCH: Final = f'{SOURCE}=~"{"|".join(names.SUSPECT_SOURCES)}"'
_SUSPECT_IDENTITY: Final = sel(names.IDENTITY_TOTAL, JOB_MATCH, _SUSPECT_MATCH)
#: The identity sources that say something is wrong, in colours that say how much.
_SUSPECT_COLOURS: Final = {
    names.SOURCE_ANONYMOUS: "red",
    names.SOURCE_REJECTED_KEY: "orange",
    names.SOURCE_UNKNOWN_KEY: "yellow",
    names.SOURCE_UNVERIFIED_KEY: "purple",
    names.SOURCE_LIMITED_KEY: "blue",
}
#: Refused because of who asks, not what the operation costs.
_IDENTITY_REFUSALS: Final = sel(
    names.REQUESTS_TOTAL,
    JOB_MATCH,
    TIER_MATCH,
    f'{DECISION}=~"{names.UNKNOWN_KEY}|{names.TOO_MANY_SUBSCRIPTIONS}"',
)
_ALL_IDENTIFIED: Final = sum_by(rate(_IDENTITY))
_SUSPECT_SHARE_BY_SOURCE: Final = (
    f"{sum_by(rate(_SUSPECT_IDENTITY), SOURCE)}"
    f" / ignoring ({SOURCE}) group_left () {_ALL_IDENTIFIED}"
)

IDENTITY: Final = Row("Identity", (
    Graph("Operations by identity source", "reqps", 12,
          (rates_by(_IDENTITY, SOURCE),),
          "How the subject (who pays) of each operation was identified: key (a known API "
          "key), user (an authenticated principal), custom (identify()), address (no key: "
          "the client's address); and, in fixed colours, the ones to watch: anonymous (red: "
          "no key, no principal and no client address, so all these clients share one "
          "budget; a proxy or a server setup that loses the client's address), rejected_key "
          "(orange: an unknown key refused with UNKNOWN_API_KEY), unknown_key (yellow: an "
          "unknown key, charged to its client's address), unverified_key (purple: an unknown "
          'key taken as a tenant of its own, [identity] unknown_keys = "tenant"), '
          "limited_key (blue: a key not looked up, charged to its client's address, whose "
          "address had caused [identity] resolver_rate key_resolver lookups already). The "
          "identity metric has no tier label: all tiers.", colours=_SUSPECT_COLOURS),
    Graph("Anonymous and unknown-key share", "percentunit", 6,
          ((share(_SUSPECT_IDENTITY, _IDENTITY), "anonymous + unknown keys"),
           (_SUSPECT_SHARE_BY_SOURCE, labels(SOURCE))),
          "Share of all operations whose subject is anonymous (one budget shared by every "
          "client without a key or an address), an unknown or refused API key, or an "
          "unverified key taken as a tenant, or a key not looked up (over [identity] "
          "resolver_rate): in all (0 when there are none) and per source. "
          "Anything lasting above zero is worth a look: QuotaqlAnonymousRequests, "
          "QuotaqlUnknownApiKeys and QuotaqlUnverifiedApiKeys alert on it.",
          max_value=1, colours=_SUSPECT_COLOURS),
    shared.decisions("Unknown-key and subscription-cap refusals", "reqps", 6, _IDENTITY_REFUSALS,
                     "Operations refused for who sends them rather than for their cost: "
                     "unknown_key (an API key no tenant has, refused with UNKNOWN_API_KEY, HTTP "
                     '401, under [identity] unknown_keys = "reject"; its address pays one point a '
                     "try, and an address that runs dry gets RATE_LIMITED, counted as blocked) and "
                     "too_many_subscriptions (the subject already holds [limits] max_subscriptions "
                     "open subscriptions)."),
    Graph("API key lookups per second", "ops", 24,
          (rates_by(sel(names.KEY_LOOKUPS_TOTAL, JOB_MATCH), OUTCOME),),
          "API keys that needed the key_resolver (no cached answer), by outcome: known and "
          "unknown (looked up: a query to your key store each), failed (the resolver raised: "
          "the key counted as its address), limited (not looked up: the client's address had "
          "caused [identity] resolver_rate lookups already, after its resolver_burst, so the "
          "key counted as that address). Lasting limited lookups: a client sends invented "
          "keys; the resolver's load stays bounded by the rate per address. All tiers.",
          colours={names.LOOKUP_LIMITED: "blue", names.LOOKUP_FAILED: "red"}),
), runbook='QuotaqlUnknownApiKeys')  # fmt: skip

# -- cost --------------------------------------------------------------------------------------

COST: Final = Row("Cost", (
    shared.cost_points("Cost charged / refunded per second",
                       "Cost points debited from budgets (charged) and given back after execution "
                       "when the actual cost was lower (refunded), per tier."),
    shared.cost_heatmap("Estimated cost heatmap"),
    shared.actual_vs_estimated("Actual vs estimated cost"),
    Graph("Overage charged per second", "short", 24,
          ((sum_by(rate(sel(names.OVERAGE_TOTAL, *COST_MATCHERS)), TIER), labels(TIER)),),
          "Cost points charged after execution because an operation's actual cost ran "
          "above what was debited for it (a list longer than the estimate assumed, a "
          "resolver that ignores its page size), per tier ([limits] charge_overage). The "
          "budget may go below empty: the subject waits until it has refilled. Lasting "
          "overage from many subjects means the cost model's list sizes are too low "
          "(the Tuning row, quotaql tune); from one subject, a client that found a field "
          "whose estimate is wrong (runbook: Overage charged)."),
), runbook='Overage charged')  # fmt: skip

# -- rejections: refused before pricing or by the analysis, by code ---------------------------

CODE: Final = names.LABEL_CODE
_REJECTIONS: Final = sel(names.REJECTIONS_TOTAL, JOB_MATCH)
#: The codes of the static limits an honest client may outgrow, in colours that stand out.
_REJECTION_COLOURS: Final = {
    names.TOO_MANY_VARIABLE_VALUES: "orange",
    names.OTHER_CODE: "purple",
}

REJECTIONS: Final = Row("Rejections", (
    Graph("Rejections per second by code", "reqps", 16,
          (rates_by(_REJECTIONS, CODE),),
          "Operations refused before they were priced or by the analysis (the rejected "
          "decision), by the code of the error they were answered with: a document that does "
          "not parse (GRAPHQL_PARSE_FAILED) or validate (GRAPHQL_VALIDATION_FAILED), bad "
          "variables (BAD_USER_INPUT), a static limit of [cost] (QUERY_TOO_LARGE, "
          "QUERY_TOO_DEEP, QUERY_TOO_COMPLEX, TOO_MANY_ALIASES, TOO_MANY_FIELDS, ..., "
          "TOO_MANY_VARIABLE_VALUES: more values in the variables than max_variable_values, "
          "TOO_MANY_FIELD_PAIRS: validation would compare more pairs of fields and fragment "
          "spreads than max_field_pairs), a list whose slicing argument is required "
          "(SLICING_ARGUMENT_REQUIRED), introspection turned off (INTROSPECTION_DISABLED), "
          "a body BodyLimit refused (INVALID_REQUEST_BODY), a GraphQL-Cost header it does not know "
          "(BAD_COST_HEADER). Each paid [limits] min_charge. "
          "The metric has no tier label: all tiers.", colours=_REJECTION_COLOURS),
    Bars("Rejections in range by code", "short", 8,
         ((topk(f"{sum_by(increase_over_range(_REJECTIONS), CODE)} > 0"), labels(CODE)),),
         "Rejections over the dashboard's time range, per code. A limit that refuses "
         "honest clients (a bulk mutation past max_variable_values) needs raising; one "
         "that refuses a few addresses at a high rate is doing its job (docs/runbook.md, "
         "QuotaqlVariableValuesRefused)."),
), runbook='Documents refused before they run')  # fmt: skip

# -- worker time: what operations took of the processes (the time quota) ---------------------

_QUOTA: Final = names.LABEL_QUOTA
_WORKER_TIME_HELP: Final = (
    "Worker time: what operations took of the process that served them (parsing, "
    "validation, pricing, execution: the thread's CPU time; shared fairly between the "
    "operations of one event loop), charged to their subjects' time quotas "
    "([limits] time, docs/limiter.md). "
)

WORKER_TIME: Final = Row("Worker time", (
    Graph("Worker time per second by tier", "s", 8,
          (rates_by(sel(names.TIME_SECONDS_TOTAL, *COST_MATCHERS), TIER),),
          _WORKER_TIME_HELP + "Seconds of worker time a second, per tier, summed over the "
          "selected jobs' instances: 1 is one core busy with that tier's operations."),
    Graph("Worker time per operation p50 / p99", "s", 8,
          quantiles(names.OPERATION_TIME, COST_MATCHERS, TIER, (0.5, 0.99)),
          _WORKER_TIME_HELP + "Quantiles of the worker time of one operation, per tier: "
          "what an honest operation takes is the p50; a time quota is generous when its "
          "refill is far above what a subject's operations take a second."),
    Graph("Budget refusals by quota", "reqps", 8,
          (rates_by(sel(names.QUOTA_REFUSALS_TOTAL, *COST_MATCHERS), _QUOTA),),
          _WORKER_TIME_HELP + "Operations refused by the budget (blocked, or denied from "
          "the deny cache) per second, by the quota that refused them: tenant, user, "
          "global, op:<name>, field:<coordinate>, and time (in red: the subject's worker "
          "time in debt; QuotaqlTimeQuotaRefusing alerts when it lasts).",
          colours={names.QUOTA_TIME: "red"}),
), runbook='QuotaqlTimeQuotaRefusing')  # fmt: skip

# -- tuning: how far the estimates are from what came back -------------------------------------

_COORDINATE: Final = names.LABEL_COORDINATE
#: The ratio histograms' edge at 1.0 as prometheus-client writes it: "more than assumed" is
#: the count above it.
_LE_ONE: Final = eq(LE, "1.0")
#: Items per assumed list over the range, per coordinate.
_MEAN_RETURNED: Final = (
    f"{over_range(f'{names.LIST_RETURNED_ITEMS}_sum', _COORDINATE)}"
    f" / {over_range(f'{names.LIST_RETURNED_ITEMS}_count', _COORDINATE)}"
)
_ASSUMED: Final = f"max by ({_COORDINATE}) ({sel(names.LIST_ASSUMED_ITEMS, JOB_MATCH)})"
_ASSUMED_TOO_HIGH: Final = topk(f"({_ASSUMED} / ({_MEAN_RETURNED})) > 1")
_ASSUMED_TOO_LOW: Final = topk(f"(({_MEAN_RETURNED}) / {_ASSUMED}) > 1")
_SLICED: Final = over_range(f"{names.LIST_SLICED_RATIO}_count", _COORDINATE)
_SLICED_WITHIN: Final = over_range(
    f"{names.LIST_SLICED_RATIO}_bucket", _COORDINATE, matchers=(JOB_MATCH, _LE_ONE)
)
_ESTIMATED: Final = sum_by(rate(sel(f"{names.COST_ESTIMATE_RATIO}_count", *COST_MATCHERS)), TIER)
_ESTIMATED_WITHIN: Final = sum_by(
    rate(sel(f"{names.COST_ESTIMATE_RATIO}_bucket", *COST_MATCHERS, _LE_ONE)), TIER
)

# Resolver time (issue 25): what the sampled operations' resolvers took, per field.
_RESOLVER_SUM: Final = f"{names.RESOLVER_SECONDS}_sum"
_RESOLVER_COUNT: Final = f"{names.RESOLVER_SECONDS}_count"
_RESOLVER_TOTAL: Final = topk(f"{over_range(_RESOLVER_SUM, _COORDINATE)} > 0")
_RESOLVER_PER_CALL: Final = topk(
    f"{sum_by(rate(sel(_RESOLVER_SUM, JOB_MATCH)), _COORDINATE)}"
    f" / {sum_by(rate(sel(_RESOLVER_COUNT, JOB_MATCH)), _COORDINATE)}"
)

TUNING: Final = Row("Tuning", (
    Bars("Fields whose estimates are furthest off", "short", 6,
         ((_ASSUMED_TOO_HIGH, f"{labels(_COORDINATE)} (assumed too high)"),
          (_ASSUMED_TOO_LOW, f"{labels(_COORDINATE)} (assumed too low)")),
         "List fields whose size the pricing assumed (assumed_size, @listSize(assumedSize:), "
         "default_list_size), over the dashboard's time range: how many times larger the "
         "assumed size is than the mean number of items their lists returned (assumed too "
         "high: estimates pessimistic, operations refused that would have fitted), or how "
         "many times smaller (assumed too low: estimates below the actual cost). +Inf: the "
         "lists came back empty. From the operations the servers sample for tuning; "
         "`quotaql tune` turns the same metrics into a diff of quotaql.toml.",
         thresholds=((None, "green"), (2, "orange"), (10, "red")), gradient=False),
    Bars("Lists longer than their slicing argument", "percentunit", 6,
         ((topk(f"(({_SLICED} - {_SLICED_WITHIN}) / {_SLICED}) > 0"), labels(_COORDINATE)),),
         "Share of the lists sized by a slicing argument the client wrote (first: 5) that "
         "returned more items than it asked for, over the dashboard's time range, per "
         "field. Anything here is a resolver that does not enforce the argument (or an "
         "argument in slicing_arguments that is not a limit): quotaql under-estimates "
         "those operations."),
    Graph("Actual ÷ estimated cost p50 / p95", "short", 6,
          quantiles(names.COST_ESTIMATE_RATIO, COST_MATCHERS, TIER, (0.5, 0.95)),
          "Per operation that was priced and ran, its actual cost divided by its estimate, "
          "per tier: 1 is an exact estimate, 0.2 an estimate five times too high (the "
          "refund gives the difference back, but the whole estimate had to fit in the "
          "budget), above 1 an estimate below the actual cost (lists longer than assumed). "
          "From the sampled operations."),
    Graph("Operations costing more than estimated", "percentunit", 6,
          ((ratio(f"({_ESTIMATED} - {_ESTIMATED_WITHIN})", _ESTIMATED, TIER), labels(TIER)),),
          "Share of the sampled operations whose actual cost was above their estimate, per "
          "tier: their lists were longer than the pricing assumed, so the difference was "
          "charged after they ran (the Overage panel; free under [limits] charge_overage = "
          "false) (0 when none).", max_value=1),
    Bars("Resolver time by field in range", "s", 12,
         ((_RESOLVER_TOTAL, labels(_COORDINATE)),),
         "The fields whose resolvers took the most time in all over the dashboard's time "
         "range (the busiest, by their calls' seconds summed), in the operations sampled "
         "for tuning ([cost] tuning_sample): where the servers' time goes. `quotaql tune "
         "--weights` proposes weights in proportion to each field's time per call."),
    Graph("Resolver time per call, top fields", "s", 12,
          ((_RESOLVER_PER_CALL, labels(_COORDINATE)),),
          "Mean seconds per call of each field's resolver (an async one to the end of what "
          "it awaited), in the sampled operations: a field whose time per call grows "
          "without its weight growing is under-priced (`quotaql tune --weights`)."),
    *candidate.PANELS,  # candidate weights against the live ones (issue 25)
), runbook='Estimates far from the actual cost')  # fmt: skip

# -- subscriptions -----------------------------------------------------------------------------

SUBSCRIPTIONS: Final = Row("Subscriptions", (
    Graph("Subscriptions open", "short", 6,
          ((sum_by(sel(names.SUBSCRIPTIONS_OPEN, JOB_MATCH)), "open"),),
          "Subscriptions open now, summed over the selected jobs' instances (and, in "
          "multiprocess mode, over each server's live workers). The [limits] "
          "max_subscriptions cap is per subject and per process."),
    shared.subscription_events(),
    shared.subscription_decisions(),
    # -- @defer and @stream (issue 25)
    Graph("Incremental payloads and endings", "ops", 12,
          (rates_by(sel(names.INCREMENTAL_PAYLOADS_TOTAL, JOB_MATCH, TIER_MATCH), TIER),
           rates_by(sel(names.INCREMENTAL_OPERATIONS_TOTAL, JOB_MATCH, TIER_MATCH), OUTCOME)),
          "@defer / @stream operations: the payloads sent after the initial result per "
          "second, by tier, and the operations by how they ended: completed (settled after "
          "the last payload: refunded what did not run), abandoned (the client left "
          "mid-stream: settled then, keeping its whole debit), unfollowed (not settled: "
          "the whole debit kept)."),
), runbook='Subscriptions')  # fmt: skip

# -- concurrency limits ------------------------------------------------------------------------

_CONCURRENCY_HELP: Final = (
    "Concurrency limits (max_in_flight, docs/concurrency.md): each running operation of a "
    "limited tier holds a lease in its tenant's lease set. "
)
#: Lease outcomes that mean something went wrong, in colours that say how much.
_LEASE_COLOURS: Final = {
    names.LEASE_EXPIRED: "red",
    names.LEASE_RELEASE_FAILED: "orange",
    names.LEASE_TAKE_FAILED: "orange",
    names.LEASE_RENEW_FAILED: "yellow",
    names.LEASE_REFUSED: "purple",
}
_TOO_MANY_CONCURRENT: Final = sel(
    names.REQUESTS_TOTAL, JOB_MATCH, TIER_MATCH, eq(DECISION, names.TOO_MANY_CONCURRENT)
)

CONCURRENCY: Final = Row("Concurrency", (
    Graph("Operations in flight by tier", "short", 8,
          (sums_by(sel(names.IN_FLIGHT, JOB_MATCH, TIER_MATCH), TIER),),
          _CONCURRENCY_HELP + "The leases the selected jobs' processes hold now, per tier: "
          "operations and open subscriptions running. Each tenant of a tier may hold at "
          "most its max_in_flight (and max_subscriptions_in_flight) of them, over every "
          "process."),
    Graph("Concurrency refusals per second", "reqps", 8,
          (rates_by(_TOO_MANY_CONCURRENT, TIER),),
          _CONCURRENCY_HELP + "Operations refused TOO_MANY_CONCURRENT per second, per tier: "
          "their tenant ran its max_in_flight already. Nothing was debited; clients retry "
          "after concurrency_retry_after."),
    Graph("Lease outcomes per second", "ops", 8,
          (rates_by(sel(names.LEASES_TOTAL, JOB_MATCH), OUTCOME),),
          _CONCURRENCY_HELP + "taken, refused, released; expired (released after its "
          "expiry: a stall or an outage longer than lease_ttl, QuotaqlLeasesExpired), "
          "release_failed and take_failed (the storage failed: the fail mode answered), "
          "renewed and renew_failed (the keeper, for long operations and open "
          "subscriptions).", colours=_LEASE_COLOURS),
), runbook='QuotaqlLeasesExpired')  # fmt: skip

# -- delays (on_limit = "delay") ---------------------------------------------------------------

_DELAY_HELP: Final = (
    'Delay tiers (on_limit = "delay", docs/limiter.md): an operation that does not fit now '
    "has its cost reserved, waits for its turn (at most max_delay, behind at most max_queued "
    "others of its tenant), then runs. "
)
#: Why delayed operations were refused, in colours that say how much it matters.
_DELAY_REFUSAL_COLOURS: Final = {
    names.DELAY_PROCESS_FULL: "red",
    names.DELAY_SYNC: "orange",
    names.DELAY_QUEUE: "purple",
    names.DELAY_SUBJECT_FULL: "yellow",
}

DELAY: Final = Row("Delay", (
    Graph("Delay p50 / p99 by tier", "s", 8,
          quantiles(names.DELAY_SECONDS, (JOB_MATCH, TIER_MATCH), TIER, (0.5, 0.99)),
          _DELAY_HELP + "How long the operations that waited waited for their turn, per "
          "tier (those that fitted at once are not counted). QuotaqlDelaysLong fires when "
          "the p99 over every tier stays above [alerts] delay_p99_seconds."),
    Graph("Delayed operations per second by tier", "ops", 8,
          (rates_by(sel(f"{names.DELAY_SECONDS}_count", JOB_MATCH, TIER_MATCH), TIER),),
          _DELAY_HELP + "Operations per second that waited for their turn before they ran, "
          "per tier: their tenants asked more than the refill rate, and the bucket queued "
          "them."),
    Graph("Delay refusals per second by reason", "reqps", 8,
          (rates_by(sel(names.DELAY_REFUSED_TOTAL, JOB_MATCH, TIER_MATCH), names.LABEL_REASON),),
          _DELAY_HELP + "Operations of delay tiers refused RATE_LIMITED per second, by "
          "reason: queue (their turn was further than max_delay, or max_queued of their "
          "tenant were waiting), process_full (their process had [limits] max_delayed "
          "waiting: QuotaqlDelayProcessFull), sync (a sync server never waits: "
          'delay_sync = "refuse").', colours=_DELAY_REFUSAL_COLOURS),
    Graph("Operations waiting now", "short", 12,
          ((sum_by(sel(names.DELAYED_WAITING, JOB_MATCH)), "waiting"),),
          _DELAY_HELP + "Operations waiting for their turn now, summed over the selected "
          "jobs' instances (and their live workers). Each process holds at most [limits] "
          "max_delayed; each waiting operation keeps its request and connection open."),
    Graph("Delays cancelled per second", "ops", 12,
          (rates_by(sel(names.DELAY_CANCELLED_TOTAL, JOB_MATCH, TIER_MATCH), TIER),),
          _DELAY_HELP + "Operations that left while waiting (their client went away, often "
          "its timeout shorter than max_delay), per tier: each was refunded its whole "
          "charge, since it never ran."),
), runbook='QuotaqlDelaysLong')  # fmt: skip

# -- latency -----------------------------------------------------------------------------------

LATENCY: Final = Row("Latency", (
    Graph("Check latency p50 / p95 / p99", "s", 12,
          quantiles(names.CHECK_DURATION, (JOB_MATCH,), BACKEND, (0.5, 0.95, 0.99)),
          "Time of one limiter decision, storage round trips included, per backend."),
    Heatmap("Check latency heatmap", "s", 12,
            bucket_rates(names.CHECK_DURATION, JOB_MATCH),
            "Distribution of the time of one limiter decision, all backends."),
), runbook='QuotaqlCheckLatencyHigh')  # fmt: skip

# -- the backend: errors, the breaker, deferred refunds and the pipeline -----------------------

_REFUND_COLOURS: Final = {
    names.REFUND_LOST_OUTCOME: "red",
    names.REFUND_UNKNOWN: "orange",
    names.REFUND_APPLIED: "green",
}
_COMMANDS: Final = sum_by(rate(sel(names.PIPELINE_COMMANDS_TOTAL, JOB_MATCH)), BACKEND)
_BATCHES: Final = sum_by(rate(sel(names.PIPELINE_BATCHES_TOTAL, JOB_MATCH)), BACKEND)

# What the Redis storages' eviction check found (docs/operations.md, the eviction policy).
_VERDICT: Final = names.LABEL_VERDICT
_POLICY: Final = names.LABEL_POLICY
_EVICTION: Final = sel(names.REDIS_EVICTION, JOB_MATCH)
_EVICTION_COLOURS: Final = {
    names.EVICTION_REFUSED: "red",
    names.EVICTION_ALLOWED: "orange",
    names.EVICTION_UNVERIFIED: "yellow",
    names.EVICTION_SAFE: "green",
}
_EVICTION_HELP: Final = (
    "The Redis storages read maxmemory-policy and maxmemory before their first call: an "
    "evicted budget is a full one. safe: noeviction (or maxmemory 0); refused: an evicting "
    "policy, so the storage sends nothing and the fail mode decides "
    "(QuotaqlRedisEvictionRefused); allowed: an evicting policy that [redis] allow_eviction "
    "accepts (budgets may be evicted); unverified: CONFIG GET refused, check by hand. "
)

BACKEND_ROW: Final = Row("Backend", (
    Graph("Backend errors per second", "ops", 16,
          (rates_by(sel(names.BACKEND_ERRORS_TOTAL, JOB_MATCH), BACKEND, names.LABEL_ERROR_TYPE),),
          "Failed storage calls per second by backend and error type."),
    State("Circuit breaker state", 8, f"max by ({BACKEND}) ({sel(names.CIRCUIT_OPEN, JOB_MATCH)})",
          labels(BACKEND),
          (("closed", "green"), ("open", "red")),
          "open while the circuit breaker in front of the backend is open on any "
          "instance: decisions then follow the fail mode without calling the storage.",
          with_names=True),
    Graph("Deferred refunds per second", "ops", 8,
          (rates_by(sel(names.REFUNDS_TOTAL, JOB_MATCH), OUTCOME),),
          "Refunds applied off the response path, per outcome: queued, coalesced (into one "
          "already waiting), applied, lost (never applied: Redis out longer than "
          "refund_max_age, or the queue full) and unknown (sent, then the call failed: "
          "perhaps applied, never sent twice). Lost and unknown refunds over-charged their "
          "tenants (QuotaqlRefundsLost).", colours=_REFUND_COLOURS),
    Graph("Refund queue", "short", 8,
          (sums_by(sel(names.REFUND_QUEUE, JOB_MATCH), INSTANCE),),
          "Refunds waiting to be applied, per instance (coalesced ones count once). It "
          "grows while Redis is out; past refund_queue_size, or refund_max_age, refunds "
          "are lost."),
    Graph("Redis pipeline: commands per write", "short", 8,
          ((f"{_COMMANDS}\n  / {_BATCHES}", "commands per write " + labels(BACKEND)),
           (_BATCHES, "writes/s " + labels(BACKEND))),
          "The async Redis storage pipelines the calls an event loop makes at once: the "
          "mean number of commands each write carried (1: no batching, the load is light; "
          "it grows with the load, not the latency), and the writes per second."),
    Graph("Redis Cluster redirections per second", "ops", 8,
          (rates_by(sel(names.PIPELINE_REDIRECTS_TOTAL, JOB_MATCH), BACKEND, names.LABEL_KIND),),
          "What a Redis Cluster's masters answered the async pipeline instead of a reply, "
          "each call followed to the right master: moved (a slot moved), ask (a slot being "
          "migrated), tryagain (a tenant caught half migrated), clusterdown (no quorum); "
          "refresh: the slot map read again. Bursts during a resharding or a failover are "
          "expected; a steady rate is a client whose slot map keeps going stale."),
    Graph("Memory storage overflow per second", "ops", 16,
          (rates_by(sel(names.OVERFLOW_TOTAL, JOB_MATCH), names.LABEL_STORE, names.LABEL_SCOPE),),
          "Decisions (states) and lease takes (leases) of the memory storages (the default "
          "MemoryStorage, the local fallback during a Redis outage, MemoryLeases) made on an "
          "overflow state because the table held max_keys states that all still matter: a "
          "new address shares its network's (scope network: its IPv4 /24 or IPv6 /48), "
          "any other new subject, and an address once the network states are full, its "
          "quota's last resort (scope quota, in red: every such new subject shares it). "
          "Lasting: raise max_keys or move to Redis (QuotaqlMemoryOverflow).",
          colours={f"states {names.OVERFLOW_QUOTA}": "red",
                   f"leases {names.OVERFLOW_QUOTA}": "red"}),
    Graph("Redis eviction check by verdict", "short", 16,
          ((f"max by ({_VERDICT}) ({_EVICTION})", labels(_VERDICT)),),
          _EVICTION_HELP + "Processes report 1 for their verdict (a cluster: its worst "
          "master's).", colours=_EVICTION_COLOURS),
    Stat("Redis eviction policies", "none", 8,
         f"max by ({_POLICY}, {_VERDICT}) ({_EVICTION}) > 0",
         f"{labels(_POLICY)}: {labels(_VERDICT)}",
         _EVICTION_HELP + "Each maxmemory-policy found now, with its verdict.",
         instant=True, with_names=True),
    Graph("Sharded shared quota: shard calls per second", "ops", 12,
          (rates_by(sel(names.SHARD_CALLS_TOTAL, JOB_MATCH), OUTCOME),),
          "Calls of the limiters to the shards of a sharded shared quota ([global] shards): "
          "called (a subject's home shard asked), retried (its second shard asked: the home "
          "one was empty), spared (a shard remembered empty for its retry time, not asked). "
          "Retried and spared growing together: the shared quota is spent, every shard "
          "empty; retried alone, some shards are (a few subjects take their shards).",
          colours={names.SHARD_CALLED: "green", names.SHARD_RETRIED: "orange",
                   names.SHARD_SPARED: "blue"}),
    Graph("Sharded shared quota by shard", "ops", 12,
          (rates_by(sel(names.SHARD_CALLS_TOTAL, JOB_MATCH), names.LABEL_SHARD, OUTCOME),),
          "The same calls by shard: one shard's calls far above the others' is a few "
          "subjects on it asking the most (each subject's home shard is a hash of its "
          "key); one shard retried and spared while the others are called: it is empty, "
          "its subjects sent to their second shards."),
), runbook='QuotaqlBackendErrors')  # fmt: skip

# -- top tenants (opt-in per-tenant metric) ----------------------------------------------------

_TENANT: Final = names.LABEL_TENANT
_TENANT_REQUESTS: Final = sel(names.TENANT_REQUESTS_TOTAL, JOB_MATCH)
_TENANT_BLOCKED: Final = sel(names.TENANT_REQUESTS_TOTAL, JOB_MATCH, BUDGET_REFUSED)
_COST_CHARGED: Final = sel(names.COST_TOTAL, *COST_MATCHERS, eq(OUTCOME, names.CHARGED))

TENANTS: Final = Row("Tenants", (
    Bars("Top blocked tenants", "short", 6,
         ((topk(f"{sum_by(increase_over_range(_TENANT_BLOCKED), _TENANT)} > 0"), labels(_TENANT)),),
         "Operations refused by the budget over the dashboard's time range, per "
         "tenant. Needs the opt-in per-tenant metric (allowlisted or top-N tenants; "
         f"the rest are counted as {names.OTHER_TENANT!r}). Click a bar to drill down.",
         drill_down=TENANT_UID),
    Bars("Top tenants by requests", "short", 6,
         ((topk(sum_by(increase_over_range(_TENANT_REQUESTS), _TENANT)), labels(_TENANT)),),
         "Operations over the dashboard's time range, per tenant (opt-in per-tenant "
         "metric). Click a bar to drill down.", drill_down=TENANT_UID),
    Bars("Tenants closest to their contract", "percentunit", 6,
         ((topk(sum_by(sel(names.TENANT_UTILISATION, JOB_MATCH), _TENANT)), labels(_TENANT)),),
         "Per labelled tenant (allowlisted, named or top-N), the points it paid over the last "
         "five minutes / what its tier's quota grants in five minutes (its refill rate or its "
         "limit per window). Above 100%: it is spending its burst. Click a bar to drill down.",
         drill_down=TENANT_UID),
    Bars("Top cost by tier", "short", 6,
         ((topk(sum_by(increase_over_range(_COST_CHARGED), TIER)), labels(TIER)),),
         "Cost points charged over the dashboard's time range, per tier (cost is "
         "recorded per tier, not per tenant)."),
), collapsed=True, runbook='Tenant utilisation')  # fmt: skip

ROWS: Final = (
    OVERVIEW,
    routes.ALERTS,
    warn.WARNINGS,
    ADAPTIVE,
    IDENTITY,
    rollout.ROLLOUT,
    COST,
    REJECTIONS,
    routes.ROOT_FIELDS,
    routes.OPERATIONS,
    WORKER_TIME,
    TUNING,
    SUBSCRIPTIONS,
    CONCURRENCY,
    DELAY,
    LATENCY,
    BACKEND_ROW,
    routes.CONFIGURATION,
    TENANTS,
)


def overview_dashboard() -> dict[str, Any]:
    """The quotaql overview: decisions, adaptive limits, identity, rollout, cost, rejections,
    tuning, subscriptions, concurrency limits, delays, check latency, storage backend and top
    tenants."""
    return assemble(
        OVERVIEW_UID,
        "quotaql / Overview",
        "Cost-based rate limiting: decisions, the quotaql alerts, the warnings before the "
        "wall (warn_at), adaptive limits, identity, the rollout (staged enforcement, would-be "
        "refusals), cost, rejections (by code), cost by root field and by operation name, tuning "
        "(estimates against actual list sizes), subscriptions, concurrency limits, delays, "
        "check latency, storage backend (errors, breaker, deferred refunds, pipeline), "
        "the configuration each worker runs, tenants.",
        [datasource_variable(), job_variable(), tier_variable()],
        ROWS,
    )
