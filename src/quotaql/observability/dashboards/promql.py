"""The PromQL of the dashboards: small helpers, the template variables, shared selectors."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Sequence

#: A query of a panel: its PromQL expr and the legend of its series.
Query = tuple[str, str]

TEMPLATE_VARIABLES: Final = ("job", "tier", "tenant", "__rate_interval", "__range")
"""Every variable an expr of either dashboard may contain (see the package docstring)."""

# Prometheus' own labels (not quotaql's, so not in names).
JOB: Final = "job"
INSTANCE: Final = "instance"
LE: Final = "le"

# The quotaql labels the queries group by most.
DECISION: Final = names.LABEL_DECISION
TIER: Final = names.LABEL_TIER

TOP_N: Final = 10

JOB_MATCH: Final = f'{JOB}=~"$job"'
TIER_MATCH: Final = f'{TIER}=~"$tier"'
TENANT_MATCH: Final = f'{names.LABEL_TENANT}="$tenant"'


def eq(label: str, value: str) -> str:
    return f'{label}="{value}"'


def sel(metric: str, *matchers: str) -> str:
    return f"{metric}{{{', '.join(matchers)}}}"


def rate(selector: str) -> str:
    return f"rate({selector}[$__rate_interval])"


def increase_over_range(selector: str) -> str:
    return f"increase({selector}[$__range])"


def topk(expr: str) -> str:
    return f"topk({TOP_N}, {expr})"


def labels(*label_names: str) -> str:
    """A legend showing the series' labels: ``{{tier}} {{outcome}}``."""
    return " ".join("{{" + label + "}}" for label in label_names)


def sum_by(expr: str, *by: str) -> str:
    return f"sum by ({', '.join(by)}) ({expr})" if by else f"sum({expr})"


def quantile(q: float, histogram: str, matchers: Sequence[str], *by: str) -> str:
    buckets = rate(sel(f"{histogram}_bucket", *matchers))
    return f"histogram_quantile({q}, {sum_by(buckets, LE, *by)})"


def quantiles(
    histogram: str, matchers: Sequence[str], by: str, qs: Sequence[float]
) -> tuple[Query, ...]:
    """One query per quantile in ``qs`` of ``histogram`` per ``by``, its legend ``p99 {{by}}``."""
    return tuple(
        (quantile(q, histogram, matchers, by), f"p{round(q * 100)} " + labels(by)) for q in qs
    )


def rates_by(selector: str, *by: str) -> Query:
    """The per-second rate of ``selector`` summed by ``by``, each series named by its labels."""
    return sum_by(rate(selector), *by), labels(*by)


def sums_by(selector: str, *by: str) -> Query:
    """``selector`` (a gauge) summed by ``by``, each series named by its labels."""
    return sum_by(selector, *by), labels(*by)


def bucket_rates(histogram: str, *matchers: str) -> str:
    return sum_by(rate(sel(f"{histogram}_bucket", *matchers)), LE)


def ratio(part: str, whole: str, *by: str) -> str:
    """``part / whole``, 0 (not absent) where ``whole`` has traffic and ``part`` has none."""
    zero = "vector(0)" if not by else f"0 * {whole}"
    return f"({part} or {zero}) / {whole}"


def share(part: str, whole: str, *by: str) -> str:
    """The rate of the ``part`` selector over the rate of the ``whole`` one (per ``by``)."""
    return ratio(sum_by(rate(part), *by), sum_by(rate(whole), *by), *by)


def over_range(metric: str, *by: str, matchers: Sequence[str] = (JOB_MATCH,)) -> str:
    return sum_by(increase_over_range(sel(metric, *matchers)), *by)


# -- variables ---------------------------------------------------------------------------------

_VARIABLE: Final = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def substitute(expr: str, **values: str) -> str:
    """Replace ``$var`` and ``${var}`` in ``expr`` by ``values[var]``.

    Grafana's built-ins (``$__rate_interval``, ``$__range``) are looked up under their name
    with or without the leading underscores. Values are inserted as given: pass PromQL-ready
    text (``".*"`` for "All", a duration for ``__rate_interval``). A variable without a value
    raises :class:`KeyError`, so nothing unsubstituted reaches Prometheus.

    >>> substitute('rate(m{job=~"$job"}[$__rate_interval])', job="api", rate_interval="1m")
    'rate(m{job=~"api"}[1m])'
    >>> substitute('m{tier=~"${tier}"}', tier="free|pro")
    'm{tier=~"free|pro"}'
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        for key in (name, name.lstrip("_")):
            if key in values:
                return values[key]
        msg = f"no value for template variable ${name} in {expr!r}"
        raise KeyError(msg)

    return _VARIABLE.sub(value, expr)


# -- selectors and queries both dashboards use -------------------------------------------------

REQUESTS_BY_TIER: Final = sel(names.REQUESTS_TOTAL, JOB_MATCH, TIER_MATCH)
BUDGET_REFUSED: Final = f'{names.LABEL_DECISION}=~"{names.BUDGET_REFUSED}"'
BLOCKED_BY_TIER: Final = sel(names.REQUESTS_TOTAL, JOB_MATCH, TIER_MATCH, BUDGET_REFUSED)
COST_MATCHERS: Final = (JOB_MATCH, TIER_MATCH)


def blocked_ratio_by_tier() -> str:
    return share(BLOCKED_BY_TIER, REQUESTS_BY_TIER, names.LABEL_TIER)
