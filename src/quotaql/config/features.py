"""Read the tables of what quotaql configures beside its quotas: ``[identity]`` (where
subjects come from), ``[adaptive]`` (which tiers adaptive limits scale, and how) and
``[alerts]`` (the thresholds of the generated alert rules)."""

from __future__ import annotations

import difflib
import ipaddress
import json
from typing import TYPE_CHECKING, Any, Final

from quotaql.config import checks
from quotaql.config.adaptive import (
    ADAPTIVE_MODES,
    ORDERED,
    PRESSURE_SOURCES,
    AdaptiveConfig,
    describe_range,
    range_of,
)
from quotaql.config.alerts import ALERT_EXPECTED, ALERT_KINDS, AlertKind, AlertsConfig, alert_value
from quotaql.config.document import describe_value
from quotaql.config.identity import (
    FORWARDED_HEADERS,
    MAX_HOPS,
    MAX_RESOLVER_BURST,
    UNKNOWN_KEY_MODES,
    IdentityConfig,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from quotaql.config.checks import Check
    from quotaql.config.document import Document, Table
    from quotaql.config.locator import KeyPath
    from quotaql.config.values import TierConfig

__all__ = [
    "ADAPTIVE_FIELDS",
    "ADAPTIVE_KEYS",
    "IDENTITY_KEYS",
    "check_adaptive_tiers",
    "read_adaptive",
    "read_alerts",
    "read_identity",
]

ADAPTIVE_NUMBERS: Final = (
    "floor",
    "latency_target",
    "latency_saturate",
    "latency_percentile",
    "error_target",
    "error_saturate",
    "window",
    "max_tenant_share",
    "min_cost_share",
    "engage_at",
    "release_at",
    "engage_for",
    "release_for",
    "step",
)
#: The ``[adaptive]`` keys whose AdaptiveConfig field has another name.
ADAPTIVE_FIELDS: Final = {"global": "scale_global"}


def read_identity(identity: Table) -> IdentityConfig:
    identity.check_keys(IDENTITY_KEYS)
    values = identity.read(_IDENTITY_CHECKS)
    with identity.blame():
        return IdentityConfig(**values)


def read_alerts(alerts: Table) -> AlertsConfig:
    alerts.check_keys(ALERT_KINDS)
    values = alerts.read(_ALERT_CHECKS)
    with alerts.blame():
        return AlertsConfig(**values)


def read_adaptive(adaptive: Table) -> AdaptiveConfig:
    adaptive.check_keys(ADAPTIVE_KEYS)
    values = {
        ADAPTIVE_FIELDS.get(key, key): value
        for key, value in adaptive.read(_ADAPTIVE_CHECKS).items()
    }
    defaults = AdaptiveConfig()
    for low, high in ORDERED:
        low_value = values.get(low, getattr(defaults, low))
        high_value = values.get(high, getattr(defaults, high))
        if high_value > low_value:
            continue
        given = [key for key in (low, high) if key in values]
        lines = {key: adaptive.doc.line((*adaptive.path, key)) or 0 for key in given}
        blamed = max(given, key=lambda key: lines[key])  # the one written last
        if blamed == high:
            reason = f"expected a number above {low} ({low_value:g}), got {high_value:g}"
        else:
            reason = f"expected a number below {high} ({high_value:g}), got {low_value:g}"
        raise adaptive.doc.error((*adaptive.path, blamed), reason)
    with adaptive.blame():
        return AdaptiveConfig(**values)


def check_adaptive_tiers(
    doc: Document, adaptive: AdaptiveConfig, tiers: Mapping[str, TierConfig]
) -> None:
    """Every tier ``[adaptive] tiers`` lists exists and is not essential."""
    for index, name in enumerate(adaptive.tiers or ()):
        path: KeyPath = ("adaptive", "tiers", index)
        tier = tiers.get(name)
        if tier is None:
            close = difflib.get_close_matches(name, list(tiers), n=1)
            hint = (
                f"did you mean {json.dumps(close[0], ensure_ascii=False)}?"
                if close
                else (f"expected one of: {checks.listing(tiers)}")
            )
            raise doc.error(path, f"no tier named {json.dumps(name, ensure_ascii=False)}; {hint}")
        if tier.essential:
            raise doc.error(
                path,
                f"tier {json.dumps(name, ensure_ascii=False)} is essential (tiers.{name}"
                ".essential = true): an essential tier is never scaled; list it here or mark"
                " it essential, not both",
            )


def _sources(doc: Document, path: KeyPath, value: object) -> tuple[Any, ...]:
    names = checks.names(doc, path, value)
    if not names:
        raise doc.error(path, f"expected at least one of {checks.listing(PRESSURE_SOURCES)}")
    for index, source in enumerate(names):
        if source not in PRESSURE_SOURCES:
            close = difflib.get_close_matches(source, PRESSURE_SOURCES, n=1)
            hint = (
                f"did you mean {json.dumps(close[0])}?"
                if close
                else (f"expected one of: {checks.listing(PRESSURE_SOURCES)}")
            )
            raise doc.error(
                (*path, index),
                f"unknown pressure source {json.dumps(source, ensure_ascii=False)}; {hint}",
            )
        if source in names[:index]:
            raise doc.error((*path, index), f"{json.dumps(source)} is listed twice")
    return names


def _tier_names(doc: Document, path: KeyPath, value: object) -> tuple[str, ...]:
    names = checks.names(doc, path, value)
    if not names:
        raise doc.error(
            path, "expected at least one tier (leave tiers out: every tier that is not essential)"
        )
    for index, name in enumerate(names):
        if name in names[:index]:
            raise doc.error(
                (*path, index), f"{json.dumps(name, ensure_ascii=False)} is listed twice"
            )
    return names


def _ranged(name: str) -> Check[float]:
    """A check that the value is a number within the range of the ``[adaptive]`` key ``name``."""
    bounds = range_of(name)
    if bounds is None:  # every name of ADAPTIVE_NUMBERS has a range
        raise KeyError(name)
    low, high, low_in, high_in = bounds
    return checks.within(
        low, high, expected=f"expected {describe_range(bounds)}", low_in=low_in, high_in=high_in
    )


def _size_in(low: int, high: int | None = None) -> Check[int]:
    """A check that the value is a size (as :func:`checks.size` says) from ``low`` (to
    ``high``, when given)."""
    in_range = checks.integer(low, high)

    def check(doc: Document, path: KeyPath, value: object) -> int:
        return in_range(doc, path, checks.size(doc, path, value))

    return check


def _alert_check(kind: AlertKind) -> Check[object]:
    def check(doc: Document, path: KeyPath, value: object) -> object:
        checked = alert_value(kind, value)
        if checked is None:
            raise doc.error(path, f"expected {ALERT_EXPECTED[kind]}, got {describe_value(value)}")
        return checked

    return check


def _header_name(doc: Document, path: KeyPath, value: object) -> str:
    if not isinstance(value, str) or not value or not all(c.isalnum() or c in "-_" for c in value):
        raise doc.error(
            path, f'expected an HTTP header name such as "x-api-key", got {describe_value(value)}'
        )
    return value


def _networks(doc: Document, path: KeyPath, value: object) -> tuple[str, ...]:
    names = checks.names(doc, path, value)
    for index, cidr in enumerate(names):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise doc.error(
                (*path, index),
                'expected an IP network such as "10.0.0.0/8", "127.0.0.1/32" or'
                f' "2001:db8::/32", got {describe_value(cidr)}',
            ) from None
    return names


# --- the keys of each table and their checks, in the order an error is looked for -------

_IDENTITY_CHECKS: Final[Mapping[str, Check[object]]] = {
    "api_key_header": _header_name,
    "unknown_keys": checks.one_of(UNKNOWN_KEY_MODES),
    "trusted_proxies": _networks,
    "trusted_hops": _size_in(0, MAX_HOPS),
    "forwarded_header": checks.one_of(FORWARDED_HEADERS),
    "ipv6_prefix": _size_in(1, 128),
    "resolver_rate": checks.positive_number,
    "resolver_burst": checks.integer(1, MAX_RESOLVER_BURST),
}
IDENTITY_KEYS: Final = tuple(_IDENTITY_CHECKS)
_ALERT_CHECKS: Final = {key: _alert_check(kind) for key, kind in ALERT_KINDS.items()}
_ADAPTIVE_CHECKS: Final[Mapping[str, Check[object]]] = {
    "mode": checks.one_of(ADAPTIVE_MODES),
    "sources": _sources,
    "tiers": _tier_names,
    **{name: _ranged(name) for name in ADAPTIVE_NUMBERS},
    "min_samples": _size_in(1),
    "min_subjects": _size_in(1),
    "global": checks.boolean,
}
ADAPTIVE_KEYS: Final = tuple(_ADAPTIVE_CHECKS)
