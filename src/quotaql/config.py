"""Read ``quotaql.toml`` into frozen values, with errors that name the file, line and key.

The file has six top-level tables, all optional: ``[cost]`` (how an operation is priced),
``[limits]`` (how the limiter behaves), ``[tiers]`` (the quotas of each plan), ``[tenants]``
(who is on which plan), ``[global]`` (one platform-wide quota) and ``[alerts]`` (the
thresholds of the generated Prometheus alert rules).
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import json
import math
import os
import re
import tomllib
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import date, datetime, time
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast, get_args

from quotaql.cost_analysis.model import CostLimits, CostModel, FieldCost
from quotaql.errors import ConfigError
from quotaql.instrumentation.names import CHECK_LATENCY_ALERT_SECONDS
from quotaql.limiter import BackendErrorMode
from quotaql.policy.quota import Algorithm, Quota

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping

__all__ = [
    "AlertsConfig",
    "Config",
    "CostConfig",
    "LimitsConfig",
    "Mode",
    "TenantConfig",
    "TierConfig",
    "default_config",
    "load_config",
    "load_cost_config",
]

T = TypeVar("T")
S = TypeVar("S", bound=str)

#: What the limiter does with a request over its quota: refuse it (``enforce``), let it
#: through and only report it (``shadow``), or not check at all (``off``).
Mode = Literal["enforce", "shadow", "off"]

#: A key path into the document: table and key names, and indexes into arrays.
KeyPath = tuple[str | int, ...]

_NAME = r"[_A-Za-z][_0-9A-Za-z]*"
_COORDINATE: Final = re.compile(
    rf"(?P<type>{_NAME})(?:\.(?P<field>{_NAME})(?:\((?P<arg>{_NAME}):\))?)?"
)
_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR: Final = re.compile(r"[^,\]}#\n]*")  # a number, boolean or date-time, and trailing blanks
_DECODE_ERROR: Final = re.compile(
    r"(?P<reason>.*) \(at (?:line (?P<line>\d+), column \d+|end of document)\)", re.DOTALL
)

_INTROSPECTION_MODES: Final[tuple[Literal["free", "counted"], ...]] = ("free", "counted")
_OPERATION_TYPES: Final = ("query", "mutation", "subscription")
_MODEL_KEYS: Final = (
    "default_list_size",
    "slicing_arguments",
    "operation_weights",
    "introspection",
    "weights",
)
_LIMIT_KEYS: Final = (
    "max_cost",
    "max_depth",
    "max_aliases",
    "max_root_fields",
    "max_tokens",
    "max_length",
)
_FIELD_COST_KEYS: Final = (
    "weight",
    "assumed_size",
    "slicing_arguments",
    "sized_fields",
    "require_one_slicing_argument",
)

_MODES: Final = cast("tuple[Mode, ...]", get_args(Mode))
_ALGORITHMS: Final = cast("tuple[Algorithm, ...]", get_args(Algorithm))
_BACKEND_ERROR_MODES: Final = cast("tuple[BackendErrorMode, ...]", get_args(BackendErrorMode))
_GRAPHQL_NAME: Final = re.compile(_NAME)
_LIMITS_KEYS: Final = (
    "mode",
    "algorithm",
    "on_backend_error",
    "default_tier",
    "refund_unused",
    "expose_cost",
    "http_status",
    "reload_interval",
)
_BUCKET_KEYS: Final = ("capacity", "refill_per_second")
_WINDOW_KEYS: Final = ("limit", "window_seconds")
_QUOTA_KEYS: Final = ("algorithm", *_BUCKET_KEYS, *_WINDOW_KEYS)
_TIER_KEYS: Final = (*_QUOTA_KEYS, "mode", "operations")
_TENANT_KEYS: Final = ("tier", *_QUOTA_KEYS)
_DEFAULT_TIER: Final = "free"
_DEFAULT_CAPACITY: Final = 1000.0
_DEFAULT_REFILL_PER_SECOND: Final = 50.0
_MIN_HTTP_STATUS: Final = 400
_MAX_HTTP_STATUS: Final = 599


@dataclass(frozen=True, slots=True)
class CostConfig:
    """The ``[cost]`` table of ``quotaql.toml``.

    Attributes:
        model: weights, list sizes and operation weights that price an operation.
        limits: static limits checked before any resolver runs.
    """

    model: CostModel = field(default_factory=CostModel)
    limits: CostLimits = field(default_factory=CostLimits)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """The ``[limits]`` table of ``quotaql.toml``: how the limiter behaves.

    Attributes:
        mode: ``enforce`` refuses requests over quota, ``shadow`` lets them through and
            only reports them, ``off`` checks nothing; a tier may set its own.
        algorithm: the algorithm of every quota that does not name its own.
        on_backend_error: what to do when the storage fails: let requests through
            (``open``), refuse them (``closed``) or count in process memory (``local``).
        default_tier: the tier of a tenant that ``[tenants]`` does not name.
        refund_unused: give back the part of the cost that the operation did not use.
        expose_cost: report the cost and the quota state in the response's extensions.
        http_status: the status of a refused request (400 to 599).
        reload_interval: seconds between checks of the file for edits; 0 never reloads.
    """

    mode: Mode = "enforce"
    algorithm: Algorithm = "token_bucket"
    on_backend_error: BackendErrorMode = "local"
    default_tier: str = _DEFAULT_TIER
    refund_unused: bool = True
    expose_cost: bool = True
    http_status: int = 429
    reload_interval: float = 2.0

    def __post_init__(self) -> None:
        for name, choices in (
            ("mode", _MODES),
            ("algorithm", _ALGORITHMS),
            ("on_backend_error", _BACKEND_ERROR_MODES),
        ):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        status = self.http_status
        if (
            isinstance(status, bool)
            or not isinstance(status, int)
            or not _MIN_HTTP_STATUS <= status <= _MAX_HTTP_STATUS
        ):
            raise ConfigError(f"http_status must be an integer from 400 to 599, got {status!r}")
        interval = self.reload_interval
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not math.isfinite(interval)
            or interval < 0
        ):
            raise ConfigError(f"reload_interval must be a number >= 0, got {interval!r}")


#: A Prometheus duration: units from years to milliseconds, each at most once, in order.
_DURATION: Final = re.compile(r"(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?")
_DEFAULT_RUNBOOK: Final = "https://github.com/quotaql/quotaql/blob/main/docs/runbook.md"

#: What each kind of ``[alerts]`` value must be, as the end of "expected ...".
_ALERT_EXPECTED: Final = {
    "url": "a non-empty URL without a #fragment (each alert adds its section's)",
    "window": 'a Prometheus duration > 0 such as "30s", "5m" or "1h30m"',
    "duration": 'a Prometheus duration such as "0s", "5m" or "1h30m"',
    "ratio": "a number > 0 and <= 1",
    "positive": "a finite number > 0",
    "non_negative": "a finite number >= 0",
    "count": "an integer >= 1",
}
_AlertKind = Literal["url", "window", "duration", "ratio", "positive", "non_negative", "count"]


def _alert_value(kind: _AlertKind, value: object) -> object | None:
    """``value`` as an ``[alerts]`` value of ``kind`` (numbers as floats); None if it is not one."""
    if kind in ("url", "window", "duration"):
        if not isinstance(value, str) or not value:
            return None
        if kind == "url":
            return value if "#" not in value and not any(c.isspace() for c in value) else None
        if _DURATION.fullmatch(value) is None:
            return None
        if kind == "window" and not any(int(n) for n in re.findall(r"\d+", value)):
            return None
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind == "count":
        return value if isinstance(value, int) and value >= 1 else None
    if not math.isfinite(value):
        return None
    ok = {"ratio": 0 < value <= 1, "positive": value > 0, "non_negative": value >= 0}[kind]
    return float(value) if ok else None


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """The ``[alerts]`` table of ``quotaql.toml``: the thresholds of the Prometheus alert rules
    that ``quotaql alerts`` writes (:func:`quotaql.observability.alerts.write_alerts`).

    Every key is optional. Rates are per second, summed over the instances of a scrape
    ``job``; durations are Prometheus duration strings (``"30s"``, ``"5m"``, ``"1h30m"``,
    ``"1d"``). A ``*_for`` key is how long a condition must hold before its alert fires.

    Attributes:
        runbook_base_url: the URL of ``docs/runbook.md``; each alert's ``runbook_url`` is it
            plus ``#<its section>``.
        rate_window: the range of ``rate()`` in the alerts that do not have their own (5m).
        blocked_ratio: ``QuotaqlBlockedRatioHigh`` fires when more than this fraction of a
            job's operations are refused by their budget (0.2).
        blocked_ratio_min_rate: ... and the job serves more than this many operations a
            second, so that a few refusals on an idle job stay quiet (0.1).
        blocked_ratio_for: 10m.
        block_spike_factor: ``QuotaqlBlockSpike`` fires when a job blocks more than this
            many times as many operations a second as it did ``block_spike_offset`` earlier,
            or blocks some when it blocked none (or had no data) then (3.0).
        block_spike_min_rate: ... and more than this many a second (1.0).
        block_spike_window: the range of the spike's ``rate()``, now and then (10m).
        block_spike_offset: how far back the baseline is (1d, the same time yesterday).
        block_spike_for: 5m.
        check_latency_p99_seconds: ``QuotaqlCheckLatencyHigh`` fires when the 99th
            percentile of the limiter's decision time on a backend is above this (0.025, a
            bucket edge of ``quotaql_check_duration_seconds``, so the comparison is exact).
        check_latency_for: 10m.
        backend_errors_per_second: ``QuotaqlBackendErrors`` fires when a backend fails more
            than this many calls a second (0.1; 0 fires on any error).
        backend_errors_for: 5m.
        failing_window: the range of ``rate()`` in ``QuotaqlFailingOpen`` and
            ``QuotaqlFailingClosed``, which fire on any decision taken without the storage;
            at least two scrape intervals (2m).
        failing_for: 3m: longer than ``failing_window``, so that one failed call does not
            fire, a failing storage does.
        circuit_open_for: how long a circuit breaker must stay open before
            ``QuotaqlCircuitOpen`` fires (1m).
        many_tenants_limited: ``QuotaqlManyTenantsLimited`` fires when at least this many
            tenants (labelled in ``quotaql_tenant_requests_total``, not ``other``) of a job
            have operations blocked at once (10).
        many_tenants_limited_for: 10m.
        metrics_absent_for: how long ``quotaql_build_info`` may be missing before
            ``QuotaqlMetricsAbsent`` fires (10m).
    """

    runbook_base_url: str = _DEFAULT_RUNBOOK
    rate_window: str = "5m"
    blocked_ratio: float = 0.2
    blocked_ratio_min_rate: float = 0.1
    blocked_ratio_for: str = "10m"
    block_spike_factor: float = 3.0
    block_spike_min_rate: float = 1.0
    block_spike_window: str = "10m"
    block_spike_offset: str = "1d"
    block_spike_for: str = "5m"
    check_latency_p99_seconds: float = CHECK_LATENCY_ALERT_SECONDS
    check_latency_for: str = "10m"
    backend_errors_per_second: float = 0.1
    backend_errors_for: str = "5m"
    failing_window: str = "2m"
    failing_for: str = "3m"
    circuit_open_for: str = "1m"
    many_tenants_limited: int = 10
    many_tenants_limited_for: str = "10m"
    metrics_absent_for: str = "10m"

    def __post_init__(self) -> None:
        for name, kind in _ALERT_KINDS.items():
            value = getattr(self, name)
            checked = _alert_value(kind, value)
            if checked is None:
                raise ConfigError(f"{name} must be {_ALERT_EXPECTED[kind]}, got {_describe(value)}")
            object.__setattr__(self, name, checked)


#: The kind of each ``[alerts]`` key, in the order of :class:`AlertsConfig`'s fields.
_ALERT_KINDS: Final[Mapping[str, _AlertKind]] = {
    "runbook_base_url": "url",
    "rate_window": "window",
    "blocked_ratio": "ratio",
    "blocked_ratio_min_rate": "non_negative",
    "blocked_ratio_for": "duration",
    "block_spike_factor": "positive",
    "block_spike_min_rate": "non_negative",
    "block_spike_window": "window",
    "block_spike_offset": "window",
    "block_spike_for": "duration",
    "check_latency_p99_seconds": "positive",
    "check_latency_for": "duration",
    "backend_errors_per_second": "non_negative",
    "backend_errors_for": "duration",
    "failing_window": "window",
    "failing_for": "duration",
    "circuit_open_for": "duration",
    "many_tenants_limited": "count",
    "many_tenants_limited_for": "duration",
    "metrics_absent_for": "duration",
}


@dataclass(frozen=True, slots=True)
class TierConfig:
    """One ``[tiers.<name>]`` table: the quotas of a plan.

    Attributes:
        name: the tier's name.
        quota: each tenant's quota (named ``tenant``).
        operations: quotas for single operations, by operation name (each named
            ``op:<OperationName>``), checked on top of ``quota``.
        mode: the tier's own mode; ``None`` when ``limits.mode`` applies.
    """

    name: str
    quota: Quota
    operations: Mapping[str, Quota] = field(default_factory=dict)
    mode: Mode | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "operations", MappingProxyType(dict(self.operations)))
        if self.mode is not None and self.mode not in _MODES:
            raise ConfigError(f"mode must be one of {', '.join(_MODES)}, got {self.mode!r}")


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """One ``[tenants.<name>]`` table: a tenant's tier, and maybe a quota of its own.

    Attributes:
        name: the tenant's name.
        tier: the name of its tier.
        quota: its quota (named ``tenant``) when it overrides the tier's; ``None``: the
            tier's quota applies.
    """

    name: str
    tier: str
    quota: Quota | None = None


@dataclass(frozen=True, slots=True)
class Config:
    """Everything ``quotaql.toml`` says.

    Example:
        >>> config = default_config()
        >>> [quota.name for quota in config.quotas_for("acme", "ExportOrders")]
        ['tenant']
        >>> config.tier_of("acme").quota.capacity
        1000.0

    Attributes:
        cost: the ``[cost]`` table.
        limits: the ``[limits]`` table.
        tiers: every tier, by name; ``limits.default_tier`` is one of them.
        tenants: the tenants that ``[tenants]`` names; any other tenant is on the
            default tier.
        global_quota: the ``[global]`` quota (named ``global``, shared by every tenant),
            or ``None``.
        source: the file the configuration was read from; ``None`` for defaults.
        alerts: the ``[alerts]`` table.
    """

    cost: CostConfig
    limits: LimitsConfig
    tiers: Mapping[str, TierConfig]
    tenants: Mapping[str, TenantConfig]
    global_quota: Quota | None
    source: str | None = None
    alerts: AlertsConfig = field(default_factory=AlertsConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tiers", MappingProxyType(dict(self.tiers)))
        object.__setattr__(self, "tenants", MappingProxyType(dict(self.tenants)))
        if self.limits.default_tier not in self.tiers:
            raise ConfigError(
                f"default_tier {self.limits.default_tier!r} is not a tier"
                f" (tiers: {', '.join(self.tiers) or 'none'})"
            )
        for tenant in self.tenants.values():
            if tenant.tier not in self.tiers:
                raise ConfigError(f"tenant {tenant.name!r}: {tenant.tier!r} is not a tier")

    def tier_of(self, tenant: str | None) -> TierConfig:
        """The tier of ``tenant``: its own if ``[tenants]`` names it, else the default tier."""
        known = self.tenants.get(tenant) if tenant is not None else None
        return self.tiers[known.tier if known is not None else self.limits.default_tier]

    def quotas_for(
        self, tenant: str | None, operation_name: str | None, tier: TierConfig | None = None
    ) -> tuple[Quota, ...]:
        """The quotas that a request of ``tenant`` running ``operation_name`` spends from.

        In order: the tenant quota (the tenant's own, else its tier's), the tier's quota
        for ``operation_name`` if it has one, and the global quota if there is one.
        ``tier``, when given (a tier resolver chose it), replaces the ``[tenants]`` table.
        """
        if tier is not None:
            quotas = [tier.quota]
        else:
            known = self.tenants.get(tenant) if tenant is not None else None
            if known is None:
                tier = self.tiers[self.limits.default_tier]
                quotas = [tier.quota]
            else:
                tier = self.tiers[known.tier]
                quotas = [tier.quota if known.quota is None else known.quota]
        if operation_name is not None:
            operation = tier.operations.get(operation_name)
            if operation is not None:
                quotas.append(operation)
        if self.global_quota is not None:
            quotas.append(self.global_quota)
        return tuple(quotas)


def load_cost_config(path: str | os.PathLike[str]) -> CostConfig:
    """Read and check ``path``, and return its ``[cost]`` table.

    The whole file is checked, not only ``[cost]``: an unknown top-level table is an error.
    A missing ``[cost]`` table, or a missing key in it, gives the default value.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "quotaql.toml"
        >>> _ = path.write_text("cost = { max_depth = 12 }")
        >>> load_cost_config(path).limits.max_depth
        12

    Args:
        path: the ``quotaql.toml`` file.

    Returns:
        The cost model (its ``source`` is ``path``, its ``locations`` give the line of each
        weight) and the static limits.

    Raises:
        ConfigError: the file cannot be read, is not TOML, or holds an unknown key or a
            value of the wrong type or range; the error names the file, the dotted key and
            the line.
    """
    return _build(_read(os.fspath(path))).cost


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and check ``path``, and return all of it.

    Missing tables and keys give their defaults (:func:`default_config` is what an empty
    file gives). A file without ``[tiers]`` has one tier, ``free``: a token bucket of
    capacity 1000 refilled at 50 per second. A file with ``[tiers]`` has only the tiers it
    names.

    Every quota (a tier, a tenant's override, an operation, ``[global]``) takes
    ``capacity`` and ``refill_per_second`` for a bucket algorithm (``token_bucket``,
    ``gcra``), ``limit`` and ``window_seconds`` for a window algorithm, and an optional
    ``algorithm``. Without one, a tier's quota and ``[global]`` use ``limits.algorithm``;
    an operation uses its tier's; a tenant's override uses its tier's algorithm if it takes
    the keys given, else ``limits.algorithm``.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "quotaql.toml"
        >>> _ = path.write_text(
        ...     "[limits]\\ndefault_tier = 'pro'\\n"
        ...     "[tiers.pro]\\ncapacity = 100\\nrefill_per_second = 5\\n"
        ...     "[tenants.acme]\\ntier = 'pro'\\ncapacity = 9\\nrefill_per_second = 1\\n"
        ... )
        >>> config = load_config(path)
        >>> [quota.capacity for quota in config.quotas_for("acme", None)]
        [9.0]
        >>> config.quotas_for("someone else", None)[0].params
        (100.0, 0.005)

    Args:
        path: the ``quotaql.toml`` file.

    Returns:
        The configuration; its ``source`` is ``path``.

    Raises:
        ConfigError: the file cannot be read, is not TOML, holds an unknown key or a value
            of the wrong type or range, an incomplete quota, or a tier name that no tier
            has; the error names the file, the dotted key and the line.
    """
    return _build(_read(os.fspath(path)))


def default_config() -> Config:
    """The configuration of an empty file: default limits and one tier, ``free``."""
    limits = LimitsConfig()
    tier = _default_tier(_Document("", {}, {}), limits.algorithm)
    return Config(CostConfig(), limits, {tier.name: tier}, {}, None)


# --- the document ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Document:
    """A parsed file with the line of each key, so that any value can be blamed precisely."""

    file: str
    data: Mapping[str, object]
    lines: Mapping[KeyPath, int]

    def line(self, path: KeyPath) -> int | None:
        """The line that defines ``path``, else that of its closest located parent."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def error(self, path: KeyPath, reason: str) -> ConfigError:
        return ConfigError(
            reason, file=self.file, key=_render_key(path) if path else None, line=self.line(path)
        )


@dataclass(frozen=True, slots=True)
class _Table:
    """One table of the document and where it is."""

    doc: _Document
    path: KeyPath
    data: Mapping[str, object]

    def get(self, key: str, check: Callable[[_Document, KeyPath, object], T]) -> T | None:
        """``check`` the value of ``key``; ``None`` when the key is absent."""
        if key not in self.data:
            return None
        return check(self.doc, (*self.path, key), self.data[key])

    def table(self, key: str) -> _Table:
        """The subtable ``key``; an empty one when the key is absent."""
        return _table(self.doc, (*self.path, key), self.data.get(key, {}))

    def check_keys(self, known: Collection[str], what: str = "key") -> None:
        """Reject the first key not in ``known``, suggesting the closest known one."""
        for key in self.data:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else "expected one of: " + ", ".join(repr(k) for k in known)
                )
                raise self.doc.error((*self.path, key), f"unknown {what}; {hint}")

    @contextmanager
    def blame(self) -> Iterator[None]:
        """Give a location to a ``ConfigError`` that a value class raises on its own.

        Every value is checked here before it is constructed, so this only matters if the
        value classes grow a check that this module does not know about yet.
        """
        try:
            yield
        except ConfigError as exc:
            if exc.file is not None:
                raise
            raise self.doc.error(self.path, exc.reason) from exc


def _read(file: str) -> _Document:
    try:
        with open(file, "rb") as stream:
            raw = stream.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the file ({exc.strerror or exc})", file=file) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})",
            file=file,
            line=line,
        ) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _DECODE_ERROR.fullmatch(str(exc))
        reason = match["reason"] if match else str(exc)
        lineno = getattr(exc, "lineno", None)  # Python 3.14+
        if not isinstance(lineno, int):
            # "(at line N, column M)", or "(at end of document)": the last line
            lineno = int(match["line"]) if match and match["line"] else text.count("\n") + 1
        raise ConfigError(f"invalid TOML: {reason}", file=file, line=lineno) from exc
    return _Document(file, data, _locate(text))


# --- the tables --------------------------------------------------------------------------


def _parse_cost(cost: _Table) -> CostConfig:
    cost.check_keys(_MODEL_KEYS + _LIMIT_KEYS)
    weights, locations = _parse_weights(cost.table("weights"))
    defaults = CostModel()
    default_list_size = cost.get("default_list_size", _size)
    slicing_arguments = cost.get("slicing_arguments", _names)
    introspection = cost.get("introspection", _introspection)
    with cost.blame():
        model = CostModel(
            default_list_size=_default(default_list_size, defaults.default_list_size),
            slicing_arguments=_default(slicing_arguments, defaults.slicing_arguments),
            operation_weights=_parse_operation_weights(cost.table("operation_weights")),
            introspection=_default(introspection, defaults.introspection),
            weights=weights,
            source=cost.doc.file,
            locations=locations,
        )
        limits = CostLimits(
            max_cost=cost.get("max_cost", _non_negative_number),
            max_depth=cost.get("max_depth", _size),
            max_aliases=cost.get("max_aliases", _size),
            max_root_fields=cost.get("max_root_fields", _size),
            max_tokens=cost.get("max_tokens", _size),
            max_length=cost.get("max_length", _size),
        )
    return CostConfig(model=model, limits=limits)


def _parse_operation_weights(table: _Table) -> dict[str, float]:
    table.check_keys(_OPERATION_TYPES, what="operation type")
    return {
        name: _number(table.doc, (*table.path, name), value) for name, value in table.data.items()
    }


def _parse_weights(table: _Table) -> tuple[dict[str, float | FieldCost], dict[str, int]]:
    weights: dict[str, float | FieldCost] = {}
    locations: dict[str, int] = {}
    for coordinate, value in table.data.items():
        path = (*table.path, coordinate)
        match = _COORDINATE.fullmatch(coordinate)
        if match is None:
            raise table.doc.error(
                path,
                "expected a schema coordinate ('Type', 'Type.field' or 'Type.field(arg:)'),"
                f" got {json.dumps(coordinate, ensure_ascii=False)}",
            )
        if isinstance(value, dict):
            if match["field"] is None or match["arg"] is not None:
                raise table.doc.error(
                    path,
                    "expected a number (a table of settings is only for a 'Type.field'"
                    " coordinate), got a table",
                )
            weights[coordinate] = _parse_field_cost(table.table(coordinate))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            weights[coordinate] = _number(table.doc, path, value)
        else:
            raise table.doc.error(path, f"expected a number or a table, got {_describe(value)}")
        line = table.doc.line(path)
        if line is not None:
            locations[coordinate] = line
    return weights, locations


def _parse_field_cost(table: _Table) -> FieldCost:
    table.check_keys(_FIELD_COST_KEYS)
    weight = table.get("weight", _number)
    assumed_size = table.get("assumed_size", _size)
    slicing_arguments = table.get("slicing_arguments", _names)
    sized_fields = table.get("sized_fields", _names)
    require_one = table.get("require_one_slicing_argument", _boolean)
    with table.blame():
        return FieldCost(
            weight=weight,
            assumed_size=assumed_size,
            slicing_arguments=slicing_arguments,
            sized_fields=sized_fields,
            require_one_slicing_argument=require_one,
        )


def _parse_limits(limits: _Table) -> LimitsConfig:
    limits.check_keys(_LIMITS_KEYS)
    defaults = LimitsConfig()
    mode = limits.get("mode", _one_of(_MODES))
    algorithm = limits.get("algorithm", _one_of(_ALGORITHMS))
    on_backend_error = limits.get("on_backend_error", _one_of(_BACKEND_ERROR_MODES))
    default_tier = limits.get("default_tier", _string)
    refund_unused = limits.get("refund_unused", _boolean)
    expose_cost = limits.get("expose_cost", _boolean)
    http_status = limits.get("http_status", _http_status)
    reload_interval = limits.get("reload_interval", _non_negative_number)
    with limits.blame():
        return LimitsConfig(
            mode=_default(mode, defaults.mode),
            algorithm=_default(algorithm, defaults.algorithm),
            on_backend_error=_default(on_backend_error, defaults.on_backend_error),
            default_tier=_default(default_tier, defaults.default_tier),
            refund_unused=_default(refund_unused, defaults.refund_unused),
            expose_cost=_default(expose_cost, defaults.expose_cost),
            http_status=_default(http_status, defaults.http_status),
            reload_interval=_default(reload_interval, defaults.reload_interval),
        )


@dataclass(frozen=True, slots=True)
class _QuotaKeys:
    """The quota keys of one table, checked one by one; a ``Quota`` once its algorithm is
    known (that may come from another table)."""

    table: _Table
    algorithm: Algorithm | None
    values: Mapping[str, float]  # only the keys the table gives

    @property
    def given(self) -> bool:
        return self.algorithm is not None or bool(self.values)


@dataclass(frozen=True, slots=True)
class _TierKeys:
    table: _Table
    quota: _QuotaKeys
    mode: Mode | None
    operations: Mapping[str, _QuotaKeys]


@dataclass(frozen=True, slots=True)
class _TenantKeys:
    table: _Table
    tier: str
    quota: _QuotaKeys


@dataclass(frozen=True, slots=True)
class _Tiers:
    table: _Table
    present: bool  # an empty [tiers] is an error; no [tiers] gives the default tier
    tiers: Mapping[str, _TierKeys]


@dataclass(frozen=True, slots=True)
class _Tenants:
    tenants: Mapping[str, _TenantKeys]


@dataclass(frozen=True, slots=True)
class _Global:
    quota: _QuotaKeys | None


def _parse_quota_keys(table: _Table) -> _QuotaKeys:
    values: dict[str, float] = {}
    for key in (*_BUCKET_KEYS, *_WINDOW_KEYS):
        value = table.get(key, _positive_number)
        if value is not None:
            values[key] = value
    return _QuotaKeys(table, table.get("algorithm", _one_of(_ALGORITHMS)), values)


def _parse_tiers(tiers: _Table) -> _Tiers:
    entries: dict[str, _TierKeys] = {}
    for name in tiers.data:
        tier = tiers.table(name)
        tier.check_keys(_TIER_KEYS)
        operations: dict[str, _QuotaKeys] = {}
        table = tier.table("operations")
        for operation in table.data:
            if _GRAPHQL_NAME.fullmatch(operation) is None:
                raise tier.doc.error(
                    (*table.path, operation),
                    "expected an operation name (letters, digits and _, not starting with a"
                    f" digit), got {json.dumps(operation, ensure_ascii=False)}",
                )
            entry = table.table(operation)
            entry.check_keys(_QUOTA_KEYS)
            operations[operation] = _parse_quota_keys(entry)
        mode = tier.get("mode", _one_of(_MODES))
        entries[name] = _TierKeys(tier, _parse_quota_keys(tier), mode, operations)
    return _Tiers(tiers, tiers.path[0] in tiers.doc.data, entries)


def _parse_tenants(tenants: _Table) -> _Tenants:
    entries: dict[str, _TenantKeys] = {}
    for name in tenants.data:
        tenant = tenants.table(name)
        tenant.check_keys(_TENANT_KEYS)
        tier = tenant.get("tier", _string)
        if tier is None:
            raise tenant.doc.error(tenant.path, 'a tenant needs a tier: add tier = "<name>"')
        entries[name] = _TenantKeys(tenant, tier, _parse_quota_keys(tenant))
    return _Tenants(entries)


def _parse_global(table: _Table) -> _Global:
    table.check_keys(_QUOTA_KEYS)
    return _Global(_parse_quota_keys(table) if table.path[0] in table.doc.data else None)


def _parse_alerts(alerts: _Table) -> AlertsConfig:
    alerts.check_keys(_ALERT_KINDS)
    values: dict[str, Any] = {}
    for key, kind in _ALERT_KINDS.items():
        value = alerts.get(key, _alert_check(kind))
        if value is not None:
            values[key] = value
    with alerts.blame():
        return AlertsConfig(**values)


def _alert_check(kind: _AlertKind) -> Callable[[_Document, KeyPath, object], object]:
    def check(doc: _Document, path: KeyPath, value: object) -> object:
        checked = _alert_value(kind, value)
        if checked is None:
            raise doc.error(path, f"expected {_ALERT_EXPECTED[kind]}, got {_describe(value)}")
        return checked

    return check


#: Every known top-level table and its parser, called with an empty table when the file
#: has none (so that defaults come from one place). Adding a table is adding a line here.
#: The parsers check each table on its own; :func:`_build` then checks what tables say
#: about each other (tier names, inherited algorithms).
_TABLES: Final[Mapping[str, Callable[[_Table], object]]] = {
    "cost": _parse_cost,
    "limits": _parse_limits,
    "tiers": _parse_tiers,
    "tenants": _parse_tenants,
    "global": _parse_global,
    "alerts": _parse_alerts,
}


def _load_tables(doc: _Document) -> dict[str, object]:
    root = _Table(doc, (), doc.data)
    root.check_keys(_TABLES, what="table")
    return {name: parse(root.table(name)) for name, parse in _TABLES.items()}


def _parsed(tables: Mapping[str, object], name: str, kind: type[T]) -> T:
    value = tables[name]
    if not isinstance(value, kind):  # the registry guarantees it; this tells mypy
        raise TypeError(f"the {name!r} table parser returned {type(value).__name__}")
    return value


def _build(doc: _Document) -> Config:
    """The whole configuration: each table parsed, then checked against the others."""
    tables = _load_tables(doc)
    cost = _parsed(tables, "cost", CostConfig)
    limits = _parsed(tables, "limits", LimitsConfig)
    tier_keys = _parsed(tables, "tiers", _Tiers)
    tenant_keys = _parsed(tables, "tenants", _Tenants)
    global_keys = _parsed(tables, "global", _Global)
    alerts = _parsed(tables, "alerts", AlertsConfig)
    limits_keys = doc.data.get("limits", {})
    if not isinstance(limits_keys, dict):  # _parse_limits rejected it already
        raise TypeError("[limits] is not a table")
    base: tuple[Algorithm, str] = (
        limits.algorithm,
        "from limits.algorithm" if "algorithm" in limits_keys else "the default algorithm",
    )

    tiers: dict[str, TierConfig] = {}
    if not tier_keys.present:
        tiers[_DEFAULT_TIER] = _default_tier(doc, limits.algorithm)
    elif not tier_keys.tiers:
        raise doc.error(tier_keys.table.path, "expected at least one tier ([tiers.<name>])")
    for name, tier_entry in tier_keys.tiers.items():
        tiers[name] = _build_tier(name, tier_entry, base)

    if limits.default_tier not in tiers:
        path: KeyPath = ("limits", "default_tier")
        located = path if doc.line(path) is not None else tier_keys.table.path
        raise ConfigError(
            f"no tier named {json.dumps(limits.default_tier, ensure_ascii=False)}"
            f"{'' if 'default_tier' in limits_keys else ' (the default)'};"
            f" expected one of: {_listing(tiers)}",
            file=doc.file,
            key=_render_key(path),
            line=doc.line(located),
        )

    tenants: dict[str, TenantConfig] = {}
    for name, entry in tenant_keys.tenants.items():
        tier = tiers.get(entry.tier)
        if tier is None:
            raise doc.error(
                (*entry.table.path, "tier"),
                f"no tier named {json.dumps(entry.tier, ensure_ascii=False)};"
                f" expected one of: {_listing(tiers)}",
            )
        quota = None
        if entry.quota.given:
            tier_algorithm = (tier.quota.algorithm, f"the algorithm of tier {tier.name!r}")
            quota = _build_quota(entry.quota, "tenant", (tier_algorithm, base))
        tenants[name] = TenantConfig(name, entry.tier, quota)

    global_quota = None
    if global_keys.quota is not None:
        global_quota = _build_quota(global_keys.quota, "global", (base,), shared=True)

    with _Table(doc, (), doc.data).blame():
        return Config(cost, limits, tiers, tenants, global_quota, source=doc.file, alerts=alerts)


def _default_tier(doc: _Document, algorithm: Algorithm) -> TierConfig:
    """The tier of a file without ``[tiers]``: a bucket of 1000, refilled at 50 a second."""
    if _quota_pair(algorithm) != _BUCKET_KEYS:
        raise doc.error(
            ("limits", "algorithm"),
            f"{algorithm} takes limit and window_seconds, but without [tiers] the only tier"
            " is 'free', a bucket of capacity 1000 refilled at 50 per second: add [tiers]",
        )
    quota = Quota(
        "tenant",
        capacity=_DEFAULT_CAPACITY,
        refill_per_second=_DEFAULT_REFILL_PER_SECOND,
        algorithm=algorithm,
    )
    return TierConfig(_DEFAULT_TIER, quota, {})


def _build_tier(name: str, tier: _TierKeys, base: tuple[Algorithm, str]) -> TierConfig:
    own = f"from {_render_key((*tier.table.path, 'algorithm'))}"
    inherited = (tier.quota.algorithm, own) if tier.quota.algorithm is not None else base
    if not tier.quota.values:
        first, second = _quota_pair(inherited[0])
        raise tier.table.doc.error(
            tier.table.path,
            f"a tier needs a quota: {first} and {second} for {inherited[0]} ({inherited[1]})",
        )
    quota = _build_quota(tier.quota, "tenant", (base,))
    operations = {
        operation: _build_quota(keys, f"op:{operation}", (inherited,))
        for operation, keys in tier.operations.items()
    }
    with tier.table.blame():
        return TierConfig(name, quota, operations, tier.mode)


def _build_quota(
    keys: _QuotaKeys,
    name: str,
    inherited: tuple[tuple[Algorithm, str], ...],
    *,
    shared: bool = False,
) -> Quota:
    """A ``Quota`` from the keys of one table.

    Without an ``algorithm`` key, the algorithm is the first of ``inherited`` (algorithm,
    where it comes from) that takes the keys given, else the first.
    """
    table = keys.table
    if keys.algorithm is not None:
        algorithm, origin = keys.algorithm, None
    else:
        algorithm, origin = next(
            (
                (candidate, where)
                for candidate, where in inherited
                if all(key in _quota_pair(candidate) for key in keys.values)
            ),
            inherited[0],
        )
    pair = _quota_pair(algorithm)
    whose = algorithm if origin is None else f"{algorithm} ({origin})"
    for key in keys.values:
        if key not in pair:
            hint = "" if origin is None else "; or set algorithm to one that does"
            raise table.doc.error(
                (*table.path, key), f"{whose} takes {pair[0]} and {pair[1]}, not {key}{hint}"
            )
    missing = [key for key in pair if key not in keys.values]
    if missing:
        raise table.doc.error(
            table.path,
            f"a quota needs {pair[0]} and {pair[1]} for {whose}; missing: {', '.join(missing)}",
        )
    with table.blame():
        return Quota(
            name,
            capacity=keys.values.get("capacity"),
            refill_per_second=keys.values.get("refill_per_second"),
            limit=keys.values.get("limit"),
            window_seconds=keys.values.get("window_seconds"),
            algorithm=algorithm,
            shared=shared,
        )


def _quota_pair(algorithm: Algorithm) -> tuple[str, str]:
    return _BUCKET_KEYS if algorithm in ("token_bucket", "gcra") else _WINDOW_KEYS


def _listing(names: Collection[str]) -> str:
    return ", ".join(json.dumps(name, ensure_ascii=False) for name in names)


# --- value checks: each takes the document, the key path and the raw value ---------------


def _table(doc: _Document, path: KeyPath, value: object) -> _Table:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a table, got {_describe(value)}")
    return _Table(doc, path, value)


def _size(doc: _Document, path: KeyPath, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(path, f"expected an integer >= 0, got {_describe(value)}")
    if value < 0:
        raise doc.error(path, f"expected an integer >= 0, got {value}")
    return value


def _number(doc: _Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number, got {_describe(value)}")
    return float(value)


def _non_negative_number(doc: _Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number >= 0, got {_describe(value)}")
    if value < 0:
        raise doc.error(path, f"expected a finite number >= 0, got {value}")
    return float(value)


def _names(doc: _Document, path: KeyPath, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise doc.error(path, f"expected an array of strings, got {_describe(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise doc.error((*path, index), f"expected a string, got {_describe(item)}")
    return tuple(value)


def _boolean(doc: _Document, path: KeyPath, value: object) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"expected true or false, got {_describe(value)}")
    return value


def _positive_number(doc: _Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number > 0, got {_describe(value)}")
    if value <= 0:
        raise doc.error(path, f"expected a finite number > 0, got {value}")
    return float(value)


def _string(doc: _Document, path: KeyPath, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise doc.error(path, f"expected a non-empty string, got {_describe(value)}")
    return value


def _http_status(doc: _Document, path: KeyPath, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(path, f"expected an integer from 400 to 599, got {_describe(value)}")
    if not _MIN_HTTP_STATUS <= value <= _MAX_HTTP_STATUS:
        raise doc.error(path, f"expected an integer from 400 to 599, got {value}")
    return value


def _one_of(choices: tuple[S, ...]) -> Callable[[_Document, KeyPath, object], S]:
    """A check that the value is one of ``choices`` (strings), listing them if not."""

    def check(doc: _Document, path: KeyPath, value: object) -> S:
        for choice in choices:
            if value == choice:
                return choice
        raise doc.error(path, f"expected one of {_listing(choices)}, got {_describe(value)}")

    return check


def _introspection(doc: _Document, path: KeyPath, value: object) -> Literal["free", "counted"]:
    for mode in _INTROSPECTION_MODES:
        if value == mode:
            return mode
    raise doc.error(path, f'expected "free" or "counted", got {_describe(value)}')


def _default(value: T | None, default: T) -> T:
    return default if value is None else value


def _describe(value: object) -> str:
    """Name a TOML value's type and show it as TOML would (``a string ("10")``)."""
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value!r})"
    if isinstance(value, str):
        return f"a string ({json.dumps(value, ensure_ascii=False)})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime):
        return f"a date-time ({value.isoformat()})"
    if isinstance(value, date):
        return f"a date ({value.isoformat()})"
    if isinstance(value, time):
        return f"a time ({value.isoformat()})"
    return type(value).__name__


def _render_key(path: KeyPath) -> str:
    """``("cost", "weights", "User.followers")`` -> ``cost.weights."User.followers"``."""
    rendered = ""
    for part in path:
        if isinstance(part, int):
            rendered += f"[{part}]"
            continue
        name = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
        rendered += f".{name}" if rendered else name
    return rendered


# --- the line locator --------------------------------------------------------------------


class _UnlocatableError(Exception):
    """The text is not what the locator expects; keep what was located so far."""


def _locate(text: str) -> dict[KeyPath, int]:
    """Map each key path that ``text`` defines to its 1-based line.

    ``text`` is valid TOML (``tomllib`` has read it), so this is a scanner, not a parser: it
    follows headers, keys, strings, arrays and inline tables well enough to know where each
    key starts, and skips every other value. A path defined only implicitly (``a`` in
    ``[a.b]`` or ``a.b = 1``) gets the line of its first mention, until it is defined
    explicitly.
    """
    locator = _Locator(text)
    # tomllib accepted the text, so this can only be a locator bug: keep the lines found so far.
    with suppress(_UnlocatableError):
        locator.run()
    return locator.lines


class _Locator:
    __slots__ = ("_array_tables", "_implicit", "_newlines", "lines", "pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.lines: dict[KeyPath, int] = {}
        self._implicit: set[KeyPath] = set()
        self._array_tables: dict[KeyPath, int] = {}  # [[name]] -> elements so far
        self._newlines = [index for index, char in enumerate(text) if char == "\n"]

    def run(self) -> None:
        table: KeyPath = ()
        while True:
            self._skip(newlines=True)
            if self.pos >= len(self.text):
                return
            start = self.pos
            if self.text.startswith("[[", start):
                self.pos += 2
                key = self._key()
                array = (*self._resolve(key[:-1]), key[-1])
                index = self._array_tables.get(array, 0)
                self._array_tables[array] = index + 1
                table = (*array, index)
                self._expect("]]")
            elif self.text.startswith("[", start):
                self.pos += 1
                table = self._resolve(self._key())
                self._expect("]")
            else:
                key = self._key()
                self._expect("=")
                table_key = (*table, *key)
                self._define(table_key, start)
                self._value(table_key)
                continue
            self._define(table, start)

    def _define(self, path: KeyPath, pos: int) -> None:
        line = bisect.bisect_left(self._newlines, pos) + 1
        for end in range(1, len(path)):
            parent = path[:end]
            if parent not in self.lines:
                self.lines[parent] = line
                self._implicit.add(parent)
        if path not in self.lines or path in self._implicit:
            self.lines[path] = line
            self._implicit.discard(path)

    def _resolve(self, key: tuple[str, ...]) -> KeyPath:
        """A header's path, through the last element of each array of tables on the way."""
        path: KeyPath = ()
        for part in key:
            path = (*path, part)
            if path in self._array_tables:
                path = (*path, self._array_tables[path] - 1)
        return path

    def _skip(self, *, newlines: bool) -> None:
        """Skip spaces, tabs, comments, and line breaks when ``newlines``."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t\r" or (newlines and char == "\n"):
                self.pos += 1
            elif char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

    def _expect(self, token: str) -> None:
        self._skip(newlines=False)
        if not self.text.startswith(token, self.pos):
            raise _UnlocatableError(f"expected {token!r} at offset {self.pos}")
        self.pos += len(token)

    def _key(self) -> tuple[str, ...]:
        """A dotted key (``a."b.c".'d'``), its quoted parts decoded."""
        parts: list[str] = []
        while True:
            self._skip(newlines=False)
            start = self.pos
            if self.text.startswith(('"', "'"), start):
                self._string()
                # tomllib decodes the escapes exactly as it did when it read the key.
                parts.append(tomllib.loads("k = " + self.text[start : self.pos])["k"])
            else:
                match = _BARE_KEY.match(self.text, start)
                if match is None:
                    raise _UnlocatableError(f"expected a key at offset {start}")
                parts.append(match.group())
                self.pos = match.end()
            self._skip(newlines=False)
            if not self.text.startswith(".", self.pos):
                return tuple(parts)
            self.pos += 1

    def _string(self) -> None:
        """Skip any of the four kinds of string; the cursor is on its first quote."""
        text = self.text
        quote = text[self.pos]
        delimiter = quote * 3 if text.startswith(quote * 3, self.pos) else quote
        index = self.pos + len(delimiter)
        while index < len(text):
            if quote == '"' and text[index] == "\\":
                index += 2
            elif text.startswith(delimiter, index):
                index += len(delimiter)
                # A multi-line string may end with up to two quotes of its own: """a"""""
                extra = 0
                while len(delimiter) == 3 and extra < 2 and text.startswith(quote, index):
                    index += 1
                    extra += 1
                self.pos = index
                return
            else:
                index += 1
        raise _UnlocatableError("unterminated string")

    def _value(self, path: KeyPath) -> None:
        """Skip a value, defining the keys of inline tables and the elements of arrays."""
        self._skip(newlines=False)
        text = self.text
        char = text[self.pos : self.pos + 1]
        if char in ('"', "'"):
            self._string()
        elif char == "[":
            self.pos += 1
            for index in itertools.count():
                self._skip(newlines=True)
                if text.startswith("]", self.pos):
                    self.pos += 1
                    return
                self._define((*path, index), self.pos)
                self._value((*path, index))
                self._skip(newlines=True)
                if text.startswith(",", self.pos):
                    self.pos += 1
        elif char == "{":
            self.pos += 1
            while True:
                self._skip(newlines=True)  # TOML 1.1 lets an inline table span lines
                if text.startswith("}", self.pos):
                    self.pos += 1
                    return
                start = self.pos
                key = (*path, *self._key())
                self._expect("=")
                self._define(key, start)
                self._value(key)
                self._skip(newlines=True)
                if text.startswith(",", self.pos):
                    self.pos += 1
        else:  # number, boolean or date-time: up to the next delimiter
            match = _SCALAR.match(text, self.pos)
            if match is None or not match.group().strip():
                raise _UnlocatableError(f"expected a value at offset {self.pos}")
            self.pos = match.end()
