"""``quotaql report``: the review before enforcing, read from a Prometheus server.

Per tier, tenant, root field and operation name: the operations seen, those refused and those
shadow mode let through that enforcing would have refused (the staged share's included), the
cost they would have needed, the quota that would have refused them, and, per tier, how much
capacity would have let 99 % of its operations through. Then the tenants the candidate weights
would have refused where the live file did not (``quotaql_candidate_would_refuse_total``).

It reads the series of :mod:`quotaql.instrumentation.rollout` and the consumption series
(``quotaql_requests_total``, ``quotaql_tenant_requests_total``,
``quotaql_root_field_requests_total``, ``quotaql_operation_name_requests_total``) through the
same Prometheus client as ``quotaql tune --prometheus`` (:mod:`quotaql.tune.sources`,
imported when the command runs: ``import quotaql.cli`` loads no offline tool).
:func:`build` makes the review of the query results, :func:`render` its text.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Final

import click

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CANDIDATE_WOULD_REFUSE_TOTAL", "QUERIES", "build", "capacity_for", "render", "report"]

CANDIDATE_WOULD_REFUSE_TOTAL: Final = "quotaql_candidate_would_refuse_total"
"""Counter (recorded where ``[cost] candidate`` is set): operations the candidate weights would
have refused and the live file did not, by ``tier`` and ``tenant``."""
QUANTILE: Final = 0.99
"""The share of a tier's operations the capacity it proposes lets through."""
ALL: Final = "all"
"""``--since all``: the counters' totals since each server process started."""

#: One query's result: ``[(labels, value)]``.
Vector = list[tuple[dict[str, str], float]]

# What each query sums, and by which labels: (metric, labels).
QUERIES: Final[dict[str, tuple[str, str]]] = {
    "tiers": (names.REQUESTS_TOTAL, "tier, decision"),
    "staged": (names.STAGED_TOTAL, "tier, enforced, decision"),
    "would": (names.WOULD_REFUSE_TOTAL, "tier, tenant, quota, cause"),
    "cost": (names.WOULD_REFUSE_COST_TOTAL, "tier, tenant, quota"),
    "capacity": (f"{names.REFUSAL_CAPACITY_RATIO}_bucket", "tier, le"),
    "tenants": (names.TENANT_REQUESTS_TOTAL, "tenant, decision"),
    "root_fields": (names.ROOT_FIELD_REQUESTS_TOTAL, "coordinate, decision"),
    "operations": (names.OPERATION_NAME_REQUESTS_TOTAL, "operation_name, decision"),
    "candidate": (CANDIDATE_WOULD_REFUSE_TOTAL, "tier, tenant"),
}


class ReportFailed(click.ClickException):
    """A source that cannot be used: one ``error:`` line, exit 2."""

    exit_code = 2


def query_text(key: str, selector: str, since: str | None) -> str:
    """The PromQL of ``QUERIES[key]``: its sum over ``since`` (``increase()``; None: the
    totals now), for the series ``selector`` matches."""
    metric, by = QUERIES[key]
    series = metric + ("{" + selector + "}" if selector else "")
    counted = f"increase({series}[{since}])" if since else series
    return f"sum by ({by}) ({counted})"


def read(url: str, selector: str, since: str | None, timeout: float) -> dict[str, Vector]:
    """Every query's result from the Prometheus at ``url``.

    Raises:
        TuneError: the server cannot be reached, answers an error or something else than the
            API's JSON (the message names the URL).
    """
    from quotaql.tune.evidence import TuneError  # noqa: PLC0415
    from quotaql.tune.sources import _instant  # noqa: PLC0415

    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise TuneError(f"{url}: not an http:// or https:// URL")
    api = url.rstrip("/") + "/api/v1/query"
    deadline = time.monotonic() + timeout
    return {key: _instant(api, query_text(key, selector, since), deadline, timeout)
            for key in QUERIES}  # fmt: skip


# -- the review ---------------------------------------------------------------------------------


def capacity_for(
    buckets: Mapping[float, float], requests: float, quantile: float = QUANTILE
) -> float:
    """The capacity, as a multiple of the refusing quota's, that would have let ``quantile`` of
    ``requests`` through, from the cumulative ``buckets`` of ``quotaql_refusal_capacity_ratio``
    (each refusal's need): 1 when enough got through already, ``inf`` when the need lies
    beyond the last finite edge; interpolated within a bucket, as ``histogram_quantile`` is."""
    edges = sorted(buckets)
    refused = buckets[edges[-1]] if edges else 0.0
    spare = (1.0 - quantile) * requests  # the refusals the quantile leaves room for
    if refused <= spare or refused <= 0:
        return 1.0
    rank = refused - spare  # this many refusals must fit
    lower, below = 1.0, 0.0
    for edge in edges:
        count = buckets[edge]
        if count >= rank:
            if edge == math.inf:
                return math.inf
            inside = count - below
            share = (rank - below) / inside if inside > 0 else 1.0
            return lower + (edge - lower) * share
        lower, below = edge, count
    return math.inf


def _counts(vector: Vector) -> Vector:
    return [(labels, value) for labels, value in vector if math.isfinite(value) and value >= 0]


def _by_decision(vector: Vector, key: str) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for labels, value in vector:
        found[labels.get(key, "")][labels.get(names.LABEL_DECISION, "")] += value
    return found


def _quotas(would: Vector, cost: Vector, key: str, value: str) -> list[dict[str, Any]]:
    """The quotas that would have refused the operations whose label ``key`` is ``value``,
    most refusals first: ``{quota, would_refuse, cost_needed}``."""
    counts: dict[str, float] = defaultdict(float)
    points: dict[str, float] = defaultdict(float)
    for labels, count in would:
        if labels.get(key) == value:
            counts[labels.get(names.LABEL_QUOTA, "")] += count
    for labels, amount in cost:
        if labels.get(key) == value:
            points[labels.get(names.LABEL_QUOTA, "")] += amount
    return [
        {"quota": quota, "would_refuse": counts[quota], "cost_needed": points.get(quota, 0.0)}
        for quota in sorted(counts, key=lambda q: (-counts[q], q))
        if counts[quota] > 0
    ]


def _row(name: str, decisions: Mapping[str, float]) -> dict[str, Any]:
    requests = sum(decisions.values())
    would = decisions.get(names.SHADOW_BLOCKED, 0.0)
    return {
        "name": name,
        "requests": requests,
        "blocked": decisions.get(names.BLOCKED, 0.0) + decisions.get(names.DENIED, 0.0),
        "would_refuse": would,
        "would_refuse_share": would / requests if requests else 0.0,
    }


def _ranked(rows: list[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    rows.sort(key=lambda r: (-r["would_refuse"], -r["blocked"], -r["requests"], r["name"]))
    return rows[:top]


def build(
    results: Mapping[str, Vector], *, source: str, since: str | None, top: int = 15
) -> dict[str, Any]:
    """The review of the query ``results`` (by the keys of :data:`QUERIES`): a JSON-ready
    dict of sections (``tiers``, ``tenants``, ``root_fields``, ``operations``,
    ``candidate``), each section's rows the ``top`` with the most would-be refusals.
    A sample that is not a finite count (NaN, infinite, negative) or a bucket whose ``le`` is
    not a number is left out: what was scraped may be anything."""
    results = {key: _counts(vector) for key, vector in results.items()}
    would, cost = results.get("would", []), results.get("cost", [])
    staged_split: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for labels, value in results.get("staged", []):
        enforced = labels.get(names.LABEL_ENFORCED) == "true"
        split = staged_split[labels.get(names.LABEL_TIER, "")]
        split["enforced" if enforced else "shadow"] += value
        if not enforced and labels.get(names.LABEL_DECISION) == names.SHADOW_BLOCKED:
            split["would_refuse"] += value
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for labels, value in results.get("capacity", []):
        try:
            edge = float(labels.get("le", "+Inf"))
        except ValueError:
            continue
        buckets[labels.get(names.LABEL_TIER, "")][edge] += value
    tiers = []
    for tier, decisions in sorted(_by_decision(results.get("tiers", []), names.LABEL_TIER).items()):
        row = _row(tier, decisions)
        quotas = _quotas(would, cost, names.LABEL_TIER, tier)
        row["cost_needed"] = sum(q["cost_needed"] for q in quotas)
        row["quotas"] = quotas
        parts = staged_split.get(tier)
        row["staged"] = (
            None
            if parts is None
            else {part: parts.get(part, 0.0) for part in ("enforced", "shadow", "would_refuse")}
        )
        row["capacity_for_p99"] = capacity_for(buckets.get(tier, {}), row["requests"])
        tiers.append(row)
    tenants = []
    for tenant, decisions in _by_decision(results.get("tenants", []), names.LABEL_TENANT).items():
        row = _row(tenant, decisions)
        row["quotas"] = _quotas(would, cost, names.LABEL_TENANT, tenant)
        row["cost_needed"] = sum(q["cost_needed"] for q in row["quotas"])
        tenants.append(row)
    sections: dict[str, list[dict[str, Any]]] = {}
    for key, label, prefix in (("root_fields", names.LABEL_COORDINATE, "field:"),
                               ("operations", names.LABEL_OPERATION_NAME, "op:")):  # fmt: skip
        rows = []
        for name, decisions in _by_decision(results.get(key, []), label).items():
            row = _row(name, decisions)
            own = _quotas(would, cost, names.LABEL_QUOTA, prefix + name)  # its own quota's
            row["quotas"] = own
            row["cost_needed"] = sum(q["cost_needed"] for q in own)
            rows.append(row)
        sections[key] = _ranked(rows, top)
    candidate_rows = results.get("candidate", [])
    candidate: dict[str, Any] = {"available": bool(candidate_rows), "tenants": []}
    if candidate_rows:
        found: list[dict[str, Any]] = [
            {"tier": labels.get(names.LABEL_TIER, ""), "tenant": labels.get(names.LABEL_TENANT, ""),
             "would_refuse": value}
            for labels, value in candidate_rows
            if value > 0
        ]  # fmt: skip
        found.sort(key=lambda r: (-r["would_refuse"], r["tier"], r["tenant"]))
        candidate["tenants"] = found[:top]
    return {
        "source": source,
        "since": since or ALL,
        "quantile": QUANTILE,
        "tiers": tiers,
        "tenants": _ranked(tenants, top),
        "root_fields": sections["root_fields"],
        "operations": sections["operations"],
        "candidate": candidate,
    }


# -- the text -------------------------------------------------------------------------------------


def _share(value: float) -> str:
    return f"{value * 100:.1f}%"


def _capacity(value: float) -> str:
    if value == math.inf:
        return f"> x{names.CAPACITY_RATIO_BUCKETS[-1]:g}"
    if value <= 1.0:
        return "enough now"
    return f"x{value:.2f}"


def _top_quota(quotas: list[dict[str, Any]]) -> str:
    from quotaql.tune._show import count_text, printable  # noqa: PLC0415

    if not quotas:
        return "-"
    first = quotas[0]
    more = f" (+{len(quotas) - 1})" if len(quotas) > 1 else ""
    return f"{printable(first['quota'])} {count_text(first['would_refuse'])}{more}"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]  # fmt: skip
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.extend(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
    return lines


def render(review: Mapping[str, Any]) -> str:
    """The review as text: one table per section."""
    from quotaql.tune._show import count_text, printable  # noqa: PLC0415

    since = review["since"]
    counted = (
        "totals since each server process started" if since == ALL
        else f"increase() over {since} (extrapolated, rounded)"
    )  # fmt: skip
    out = [
        f"quotaql report: from {review['source']}; counts: {counted}",
        "would refuse: operations shadow mode let through that enforcing would have refused"
        " (staged: of them, those shadow because of enforce_share)",
        "",
        "tiers",
    ]
    rows = []
    for tier in review["tiers"]:
        split = tier["staged"]
        if split:
            total = split.get("enforced", 0.0) + split.get("shadow", 0.0)
            share = split.get("enforced", 0.0) / total if total else 0.0
            staged = f"{_share(share)} enforced, {count_text(split.get('would_refuse', 0.0))}"
        else:
            staged = "-"
        rows.append([
            printable(tier["name"]), count_text(tier["requests"]), count_text(tier["blocked"]),
            count_text(tier["would_refuse"]), staged, count_text(tier["cost_needed"]),
            _top_quota(tier["quotas"]), _capacity(tier["capacity_for_p99"]),
        ])  # fmt: skip
    headers = ["tier", "requests", "blocked", "would refuse", "staged", "cost needed",
               "refused by", f"capacity for p{review['quantile'] * 100:g}"]  # fmt: skip
    out.extend(_table(headers, rows))
    for key, title, label in (("tenants", "tenants", "tenant"),
                              ("root_fields", "root fields", "root field"),
                              ("operations", "operations", "operation")):  # fmt: skip
        out += ["", title]
        rows = [
            [printable(row["name"]), count_text(row["requests"]), count_text(row["blocked"]),
             count_text(row["would_refuse"]), _share(row["would_refuse_share"]),
             count_text(row["cost_needed"]), _top_quota(row["quotas"])]
            for row in review[key]
        ]  # fmt: skip
        headers = [label, "requests", "blocked", "would refuse", "share", "cost needed",
                   "refused by"]  # fmt: skip
        out.extend(_table(headers, rows) if rows else ["  (no series)"])
    out += ["", "candidate"]
    candidate = review["candidate"]
    if not candidate["available"]:
        out.append(
            f"  no {CANDIDATE_WOULD_REFUSE_TOTAL} series: no candidate weights are priced"
            " ([cost] candidate), or the servers do not record them"
        )
    elif not candidate["tenants"]:
        out.append("  the candidate weights refused no tenant the live file did not")
    else:
        out.append("tenants the candidate weights would have refused where the live file did not")
        rows = [[printable(r["tier"]), printable(r["tenant"]), count_text(r["would_refuse"])]
                for r in candidate["tenants"]]  # fmt: skip
        out.extend(_table(["tier", "tenant", "would refuse"], rows))
    return "\n".join(out) + "\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else "+Inf"
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


# -- the command ----------------------------------------------------------------------------------


@click.command("report")
@click.option(
    "--prometheus",
    "prometheus_url",
    required=True,
    metavar="URL",
    help="The Prometheus server (http://host:9090) that scrapes the quotaql servers.",
)
@click.option(
    "--since",
    default="24h",
    show_default=True,
    metavar="DURATION",
    help="Count over this range (increase(), e.g. 7d); 'all': the totals since each server"
    " process started.",
)
@click.option(
    "--selector",
    default="",
    metavar="MATCHERS",
    help='Label matchers for every query, e.g. job="api".',
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--top",
    type=click.IntRange(min=1, max=10_000),
    default=15,
    show_default=True,
    help="Rows per section (the most would-be refusals first).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, max=600, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds to wait for all the answers.",
)
def report(
    prometheus_url: str, since: str, selector: str, as_json: bool, top: int, timeout: float
) -> None:
    """Review a rollout before enforcing: per tier, tenant, root field and operation, what
    enforcing would have refused, why, and the capacity that would have let 99 % through.

    Exits 2 with one error: line when Prometheus cannot be reached or answers an error.
    """
    from quotaql.tune.evidence import TuneError  # noqa: PLC0415
    from quotaql.tune.sources import DURATION  # noqa: PLC0415

    window = None if since == ALL else since
    if window is not None and not DURATION.fullmatch(window):
        raise click.BadParameter(
            f"{since!r} is not a Prometheus duration (24h, 7d, 1h30m) nor 'all'",
            param_hint="--since",
        )
    if "{" in selector or "}" in selector:
        raise click.BadParameter(
            'give the matchers without braces: job="api",env="prod"', param_hint="--selector"
        )
    try:
        results = read(prometheus_url, selector, window, timeout)
    except TuneError as error:
        raise ReportFailed(str(error)) from None
    review = build(results, source=prometheus_url, since=window, top=top)
    if as_json:
        click.echo(json.dumps(_jsonable(review), indent=2, sort_keys=True))
    else:
        click.echo(render(review), nl=False)
