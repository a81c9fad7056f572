"""Read ``quotaql.toml`` into the values of :mod:`quotaql.config.values`, blaming each error."""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import os
import re
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from quotaql.config.adaptive import (
    ADAPTIVE_MODES,
    ORDERED,
    PRESSURE_SOURCES,
    AdaptiveConfig,
    describe_range,
    range_of,
)
from quotaql.config.alerts import (
    ALERT_EXPECTED,
    ALERT_KINDS,
    AlertKind,
    AlertsConfig,
    alert_value,
    describe_value,
)
from quotaql.config.identity import (
    FORWARDED_HEADERS,
    MAX_HOPS,
    UNKNOWN_KEY_MODES,
    IdentityConfig,
)
from quotaql.config.locator import KeyPath, locate, render_key
from quotaql.config.values import (
    ALGORITHMS,
    BACKEND_ERROR_MODES,
    DEFAULT_TIER,
    DELAY_SYNC,
    MAX_CONCURRENCY_RETRY_AFTER,
    MAX_HTTP_STATUS,
    MAX_LEASE_TTL,
    MIN_HTTP_STATUS,
    MIN_LEASE_TTL,
    MODES,
    ON_LIMIT,
    Config,
    CostConfig,
    LimitsConfig,
    Mode,
    OnLimit,
    TenantConfig,
    TierConfig,
)
from quotaql.cost_analysis.model import MODELS, SAFE_LIMITS, CostLimits, CostModel, FieldCost
from quotaql.errors import ConfigError
from quotaql.policy.quota import MAX_DELAY_SECONDS, Algorithm, Quota

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping

__all__ = ["default_config", "load_config", "load_cost_config"]

T = TypeVar("T")
S = TypeVar("S", bound=str)

_NAME = r"[_A-Za-z][_0-9A-Za-z]*"
_COORDINATE: Final = re.compile(
    rf"(?P<type>{_NAME})(?:\.(?P<field>{_NAME})(?:\((?P<arg>{_NAME}):\))?)?"
)
_DECODE_ERROR: Final = re.compile(
    r"(?P<reason>.*) \(at (?:line (?P<line>\d+), column \d+|end of document)\)", re.DOTALL
)

_INTROSPECTION_MODES: Final[tuple[Literal["free", "counted"], ...]] = ("free", "counted")
_OPERATION_TYPES: Final = ("query", "mutation", "subscription")
_MODEL_KEYS: Final = (
    "model",
    "connections",
    "connections_exclude",
    "default_list_size",
    "slicing_arguments",
    "operation_weights",
    "introspection",
    "weights",
)
# [cost] keys that are neither the model's nor limits.
_COST_KEYS: Final = ("tuning_sample",)
_LIMIT_KEYS: Final = (
    "max_cost",
    "max_depth",
    "max_aliases",
    "max_root_fields",
    "max_tokens",
    "max_length",
    "max_fields",
    "max_repeated_fields",
    "max_directives",
)
_FIELD_COST_KEYS: Final = (
    "weight",
    "assumed_size",
    "slicing_arguments",
    "sized_fields",
    "require_one_slicing_argument",
)

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
    "max_subscriptions",
    "min_charge",
    "retry_jitter",
    "deny_cache_size",
    "local_share",
    "open_cap",
    "lease_ttl",
    "concurrency_retry_after",
    "max_delayed",
    "delay_sync",
)
_BUCKET_KEYS: Final = ("capacity", "refill_per_second")
_WINDOW_KEYS: Final = ("limit", "window_seconds")
_QUOTA_KEYS: Final = ("algorithm", *_BUCKET_KEYS, *_WINDOW_KEYS)
_IN_FLIGHT_KEYS: Final = ("max_in_flight", "max_subscriptions_in_flight")
_TIER_KEYS: Final = (
    *_QUOTA_KEYS,
    "mode",
    "operations",
    "per_user",
    "fields",
    "essential",
    *_IN_FLIGHT_KEYS,
    "on_limit",
    "max_delay",
    "max_queued",
)
#: A root field's entry: a rate quota, a concurrency limit, or both.
_FIELD_KEYS: Final = (*_QUOTA_KEYS, "max_in_flight")
_IDENTITY_KEYS: Final = (
    "api_key_header",
    "unknown_keys",
    "trusted_proxies",
    "trusted_hops",
    "forwarded_header",
    "ipv6_prefix",
)
_TENANT_KEYS: Final = ("tier", *_QUOTA_KEYS)
_ADAPTIVE_NUMBERS: Final = (
    "floor",
    "latency_target",
    "latency_saturate",
    "latency_percentile",
    "error_target",
    "error_saturate",
    "window",
    "max_tenant_share",
    "engage_at",
    "release_at",
    "engage_for",
    "release_for",
    "step",
)
_ADAPTIVE_KEYS: Final = ("mode", "sources", "tiers", *_ADAPTIVE_NUMBERS, "min_samples", "global")
#: The ``[adaptive]`` keys whose AdaptiveConfig field has another name.
ADAPTIVE_FIELDS: Final = {"global": "scale_global"}
_DEFAULT_CAPACITY: Final = 1000.0
_DEFAULT_REFILL_PER_SECOND: Final = 50.0


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
        >>> config.tenants["acme"].quota.capacity
        9.0
        >>> config.tier_of("someone else").quota.params
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
            reason, file=self.file, key=render_key(path) if path else None, line=self.line(path)
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
    return _Document(file, data, locate(text))


# --- the tables --------------------------------------------------------------------------


def _parse_cost(cost: _Table) -> CostConfig:
    cost.check_keys(_MODEL_KEYS + _LIMIT_KEYS + _COST_KEYS)
    weights, locations = _parse_weights(cost.table("weights"))
    defaults = CostModel()
    default_list_size = cost.get("default_list_size", _size)
    slicing_arguments = cost.get("slicing_arguments", _names)
    introspection = cost.get("introspection", _introspection)
    name = cost.get("model", _one_of(MODELS))
    connections = cost.get("connections", _boolean)
    connections_exclude = cost.get("connections_exclude", _names)
    tuning_sample = cost.get("tuning_sample", _fraction)
    with cost.blame():
        model = CostModel(
            model=_default(name, defaults.model),
            connections=_default(connections, defaults.connections),
            connections_exclude=frozenset(connections_exclude or ()),
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
            **{name: _limit_or_safe(cost, name) for name in _LIMIT_KEYS if name != "max_cost"},
        )
    return CostConfig(
        model=model,
        limits=limits,
        tuning_sample=_default(tuning_sample, CostConfig().tuning_sample),
    )


def _limit_or_safe(cost: _Table, name: str) -> int | None:
    """A document limit of ``[cost]``: the key's integer, None for ``false`` (no limit), or
    the safe default (``SAFE_LIMITS``) when the key is absent."""
    value = cost.get(name, _size_or_off)
    if value is None:
        safe: int | None = getattr(SAFE_LIMITS, name)
        return safe
    return None if value is False else value


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
            raise table.doc.error(
                path, f"expected a number or a table, got {describe_value(value)}"
            )
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
    mode = limits.get("mode", _one_of(MODES))
    algorithm = limits.get("algorithm", _one_of(ALGORITHMS))
    on_backend_error = limits.get("on_backend_error", _one_of(BACKEND_ERROR_MODES))
    default_tier = limits.get("default_tier", _string)
    refund_unused = limits.get("refund_unused", _boolean)
    expose_cost = limits.get("expose_cost", _boolean)
    http_status = limits.get("http_status", _http_status)
    reload_interval = limits.get("reload_interval", _non_negative_number)
    max_subscriptions = limits.get("max_subscriptions", _size)
    min_charge = limits.get("min_charge", _non_negative_number)
    retry_jitter = limits.get("retry_jitter", _fraction)
    deny_cache_size = limits.get("deny_cache_size", _size)
    local_share = limits.get("local_share", _fraction)
    open_cap = limits.get("open_cap", _fraction)
    lease_ttl = limits.get("lease_ttl", _seconds(MIN_LEASE_TTL, MAX_LEASE_TTL, low_in=True))
    concurrency_retry_after = limits.get(
        "concurrency_retry_after", _seconds(0.0, MAX_CONCURRENCY_RETRY_AFTER, low_in=False)
    )
    max_delayed = limits.get("max_delayed", _size)
    delay_sync = limits.get("delay_sync", _one_of(DELAY_SYNC))
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
            max_subscriptions=_default(max_subscriptions, defaults.max_subscriptions),
            min_charge=_default(min_charge, defaults.min_charge),
            retry_jitter=_default(retry_jitter, defaults.retry_jitter),
            deny_cache_size=_default(deny_cache_size, defaults.deny_cache_size),
            local_share=_default(local_share, defaults.local_share),
            open_cap=open_cap,
            lease_ttl=_default(lease_ttl, defaults.lease_ttl),
            concurrency_retry_after=_default(
                concurrency_retry_after, defaults.concurrency_retry_after
            ),
            max_delayed=_default(max_delayed, defaults.max_delayed),
            delay_sync=_default(delay_sync, defaults.delay_sync),
        )


def _parse_identity(identity: _Table) -> IdentityConfig:
    identity.check_keys(_IDENTITY_KEYS)
    defaults = IdentityConfig()
    header = identity.get("api_key_header", _header_name)
    unknown_keys = identity.get("unknown_keys", _one_of(UNKNOWN_KEY_MODES))
    proxies = identity.get("trusted_proxies", _networks)
    hops = identity.get("trusted_hops", _size)
    if hops is not None and hops > MAX_HOPS:
        raise identity.doc.error(
            (*identity.path, "trusted_hops"),
            f"expected an integer from 0 to {MAX_HOPS}, got {hops}",
        )
    forwarded = identity.get("forwarded_header", _one_of(FORWARDED_HEADERS))
    prefix = identity.get("ipv6_prefix", _size)
    if prefix is not None and not 1 <= prefix <= 128:
        raise identity.doc.error(
            (*identity.path, "ipv6_prefix"), f"expected an integer from 1 to 128, got {prefix}"
        )
    with identity.blame():
        return IdentityConfig(
            api_key_header=_default(header, defaults.api_key_header),
            unknown_keys=_default(unknown_keys, defaults.unknown_keys),
            trusted_proxies=_default(proxies, defaults.trusted_proxies),
            trusted_hops=_default(hops, defaults.trusted_hops),
            forwarded_header=_default(forwarded, defaults.forwarded_header),
            ipv6_prefix=_default(prefix, defaults.ipv6_prefix),
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
    per_user: _QuotaKeys | None
    fields: Mapping[str, _QuotaKeys]
    essential: bool
    max_in_flight: int | None
    max_subscriptions_in_flight: int | None
    fields_in_flight: Mapping[str, int]
    on_limit: OnLimit | None
    max_delay: float | None
    max_queued: int | None


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
    return _QuotaKeys(table, table.get("algorithm", _one_of(ALGORITHMS)), values)


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
        mode = tier.get("mode", _one_of(MODES))
        per_user = None
        if "per_user" in tier.data:
            table = tier.table("per_user")
            table.check_keys(_QUOTA_KEYS)
            per_user = _parse_quota_keys(table)
        fields: dict[str, _QuotaKeys] = {}
        fields_in_flight: dict[str, int] = {}
        table = tier.table("fields")
        for coordinate in table.data:
            match = _COORDINATE.fullmatch(coordinate)
            if match is None or match["field"] is None or match["arg"] is not None:
                raise tier.doc.error(
                    (*table.path, coordinate),
                    "expected a root field's coordinate ('Query.search',"
                    f" 'Mutation.exportOrders'), got {json.dumps(coordinate, ensure_ascii=False)}",
                )
            entry = table.table(coordinate)
            entry.check_keys(_FIELD_KEYS)
            keys = _parse_quota_keys(entry)
            field_in_flight = entry.get("max_in_flight", _count(1))
            if field_in_flight is not None:
                fields_in_flight[coordinate] = field_in_flight
            if keys.given or field_in_flight is None:  # a rate quota (or an empty entry)
                fields[coordinate] = keys
        essential = tier.get("essential", _boolean) or False
        max_in_flight = tier.get("max_in_flight", _count(1))
        max_subscriptions = tier.get("max_subscriptions_in_flight", _count(0))
        on_limit = tier.get("on_limit", _one_of(ON_LIMIT))
        max_delay = tier.get("max_delay", _seconds(0.0, MAX_DELAY_SECONDS, low_in=False))
        max_queued = tier.get("max_queued", _count(1))
        if on_limit != "delay":
            for key, value in (("max_delay", max_delay), ("max_queued", max_queued)):
                if value is not None:
                    raise tier.doc.error(
                        (*tier.path, key), f'{key} needs on_limit = "delay" in this tier'
                    )
        entries[name] = _TierKeys(
            tier,
            _parse_quota_keys(tier),
            mode,
            operations,
            per_user,
            fields,
            essential,
            max_in_flight,
            max_subscriptions,
            fields_in_flight,
            on_limit,
            max_delay,
            max_queued,
        )
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
    alerts.check_keys(ALERT_KINDS)
    values: dict[str, Any] = {}
    for key, kind in ALERT_KINDS.items():
        value = alerts.get(key, _alert_check(kind))
        if value is not None:
            values[key] = value
    with alerts.blame():
        return AlertsConfig(**values)


def _parse_adaptive(adaptive: _Table) -> AdaptiveConfig:
    adaptive.check_keys(_ADAPTIVE_KEYS)
    values: dict[str, Any] = {}
    mode = adaptive.get("mode", _one_of(ADAPTIVE_MODES))
    if mode is not None:
        values["mode"] = mode
    sources = adaptive.get("sources", _sources)
    if sources is not None:
        values["sources"] = sources
    tiers = adaptive.get("tiers", _tier_names)
    if tiers is not None:
        values["tiers"] = tiers
    for name in _ADAPTIVE_NUMBERS:
        value = adaptive.get(name, _ranged(name))
        if value is not None:
            values[name] = value
    min_samples = adaptive.get("min_samples", _size)
    if min_samples is not None:
        if min_samples < 1:
            raise adaptive.doc.error(
                (*adaptive.path, "min_samples"), f"expected an integer >= 1, got {min_samples}"
            )
        values["min_samples"] = min_samples
    scale_global = adaptive.get("global", _boolean)
    if scale_global is not None:
        values["scale_global"] = scale_global
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


def _check_adaptive_tiers(
    doc: _Document, adaptive: AdaptiveConfig, tiers: Mapping[str, TierConfig]
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
                else (f"expected one of: {_listing(tiers)}")
            )
            raise doc.error(path, f"no tier named {json.dumps(name, ensure_ascii=False)}; {hint}")
        if tier.essential:
            raise doc.error(
                path,
                f"tier {json.dumps(name, ensure_ascii=False)} is essential (tiers.{name}"
                ".essential = true): an essential tier is never scaled; list it here or mark"
                " it essential, not both",
            )


def _sources(doc: _Document, path: KeyPath, value: object) -> tuple[Any, ...]:
    names = _names(doc, path, value)
    if not names:
        raise doc.error(path, f"expected at least one of {_listing(PRESSURE_SOURCES)}")
    for index, source in enumerate(names):
        if source not in PRESSURE_SOURCES:
            close = difflib.get_close_matches(source, PRESSURE_SOURCES, n=1)
            hint = (
                f"did you mean {json.dumps(close[0])}?"
                if close
                else (f"expected one of: {_listing(PRESSURE_SOURCES)}")
            )
            raise doc.error(
                (*path, index),
                f"unknown pressure source {json.dumps(source, ensure_ascii=False)}; {hint}",
            )
        if source in names[:index]:
            raise doc.error((*path, index), f"{json.dumps(source)} is listed twice")
    return names


def _tier_names(doc: _Document, path: KeyPath, value: object) -> tuple[str, ...]:
    names = _names(doc, path, value)
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


def _ranged(name: str) -> Callable[[_Document, KeyPath, object], float]:
    """A check that the value is a number within the range of the ``[adaptive]`` key ``name``."""
    bounds = range_of(name)
    if bounds is None:  # every name of _ADAPTIVE_NUMBERS has a range
        raise KeyError(name)
    low, high, low_in, high_in = bounds
    expected = f"expected {describe_range(bounds)}"

    def check(doc: _Document, path: KeyPath, value: object) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise doc.error(path, f"{expected}, got {describe_value(value)}")
        above = value >= low if low_in else value > low
        below = value <= high if high_in else value < high
        if not (above and below):
            raise doc.error(path, f"{expected}, got {value}")
        return float(value)

    return check


def _alert_check(kind: AlertKind) -> Callable[[_Document, KeyPath, object], object]:
    def check(doc: _Document, path: KeyPath, value: object) -> object:
        checked = alert_value(kind, value)
        if checked is None:
            raise doc.error(path, f"expected {ALERT_EXPECTED[kind]}, got {describe_value(value)}")
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
    "identity": _parse_identity,
    "adaptive": _parse_adaptive,
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
    identity = _parsed(tables, "identity", IdentityConfig)
    adaptive = _parsed(tables, "adaptive", AdaptiveConfig)
    limits_keys = doc.data.get("limits", {})
    if not isinstance(limits_keys, dict):  # _parse_limits rejected it already
        raise TypeError("[limits] is not a table")
    base: tuple[Algorithm, str] = (
        limits.algorithm,
        "from limits.algorithm" if "algorithm" in limits_keys else "the default algorithm",
    )

    tiers: dict[str, TierConfig] = {}
    if not tier_keys.present:
        tiers[DEFAULT_TIER] = _default_tier(doc, limits.algorithm)
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
            key=render_key(path),
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
    _check_adaptive_tiers(doc, adaptive, tiers)

    with _Table(doc, (), doc.data).blame():
        return Config(
            cost,
            limits,
            tiers,
            tenants,
            global_quota,
            source=doc.file,
            alerts=alerts,
            identity=identity,
            declares_tiers=tier_keys.present,
            adaptive=adaptive,
        )


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
    return TierConfig(DEFAULT_TIER, quota, {})


def _build_tier(name: str, tier: _TierKeys, base: tuple[Algorithm, str]) -> TierConfig:
    own = f"from {render_key((*tier.table.path, 'algorithm'))}"
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
    per_user = None
    if tier.per_user is not None:
        per_user = _build_quota(tier.per_user, "user", (inherited,))
    fields = {
        coordinate: _build_quota(keys, f"field:{coordinate}", (inherited,), refundable=False)
        for coordinate, keys in tier.fields.items()
    }
    doc, path = tier.table.doc, tier.table.path
    lines = {
        coordinate: line
        for coordinate in {**tier.fields, **tier.fields_in_flight}
        if (line := doc.line((*path, "fields", coordinate))) is not None
    }
    with tier.table.blame():
        return TierConfig(
            name,
            quota,
            operations,
            tier.mode,
            per_user,
            fields,
            lines,
            essential=tier.essential,
            max_in_flight=tier.max_in_flight,
            max_subscriptions_in_flight=tier.max_subscriptions_in_flight,
            fields_in_flight=tier.fields_in_flight,
            on_limit=_default(tier.on_limit, "refuse"),
            max_delay=tier.max_delay,
            max_queued=tier.max_queued,
        )


def _build_quota(
    keys: _QuotaKeys,
    name: str,
    inherited: tuple[tuple[Algorithm, str], ...],
    *,
    shared: bool = False,
    refundable: bool = True,
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
            refundable=refundable,
        )


def _quota_pair(algorithm: Algorithm) -> tuple[str, str]:
    return _BUCKET_KEYS if algorithm in ("token_bucket", "gcra") else _WINDOW_KEYS


def _listing(names: Collection[str]) -> str:
    return ", ".join(json.dumps(name, ensure_ascii=False) for name in names)


# --- value checks: each takes the document, the key path and the raw value ---------------


def _table(doc: _Document, path: KeyPath, value: object) -> _Table:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a table, got {describe_value(value)}")
    return _Table(doc, path, value)


def _header_name(doc: _Document, path: KeyPath, value: object) -> str:
    if not isinstance(value, str) or not value or not all(c.isalnum() or c in "-_" for c in value):
        raise doc.error(
            path, f'expected an HTTP header name such as "x-api-key", got {describe_value(value)}'
        )
    return value


def _networks(doc: _Document, path: KeyPath, value: object) -> tuple[str, ...]:
    names = _names(doc, path, value)
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


def _size(doc: _Document, path: KeyPath, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(path, f"expected an integer >= 0, got {describe_value(value)}")
    if value < 0:
        raise doc.error(path, f"expected an integer >= 0, got {value}")
    return value


def _count(low: int) -> Callable[[_Document, KeyPath, object], int]:
    """A check that the value is an integer >= ``low`` (a count of operations)."""

    def check(doc: _Document, path: KeyPath, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise doc.error(path, f"expected an integer >= {low}, got {describe_value(value)}")
        if value < low:
            raise doc.error(path, f"expected an integer >= {low}, got {value}")
        return value

    return check


def _seconds(
    low: float, high: float, *, low_in: bool
) -> Callable[[_Document, KeyPath, object], float]:
    """A check that the value is a number of seconds from ``low`` (``low_in``: included,
    else above it) to ``high``."""
    expected = (
        f"expected a number of seconds from {low:g} to {high:g}"
        if low_in
        else f"expected a number of seconds above {low:g} and at most {high:g}"
    )

    def check(doc: _Document, path: KeyPath, value: object) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise doc.error(path, f"{expected}, got {describe_value(value)}")
        if not ((low <= value) if low_in else (low < value)) or value > high:
            raise doc.error(path, f"{expected}, got {value}")
        return float(value)

    return check


def _size_or_off(doc: _Document, path: KeyPath, value: object) -> int | Literal[False]:
    if value is False:
        return False
    expected = "expected an integer >= 0, or false for no limit, got"
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(path, f"{expected} {describe_value(value)}")
    if value < 0:
        raise doc.error(path, f"{expected} {value}")
    return value


def _fraction(doc: _Document, path: KeyPath, value: object) -> float:
    number = _non_negative_number(doc, path, value)
    if number > 1:
        raise doc.error(path, f"expected a number from 0 to 1, got {value}")
    return number


def _number(doc: _Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number, got {describe_value(value)}")
    return float(value)


def _non_negative_number(doc: _Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number >= 0, got {describe_value(value)}")
    if value < 0:
        raise doc.error(path, f"expected a finite number >= 0, got {value}")
    return float(value)


def _names(doc: _Document, path: KeyPath, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise doc.error(path, f"expected an array of strings, got {describe_value(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise doc.error((*path, index), f"expected a string, got {describe_value(item)}")
    return tuple(value)


def _boolean(doc: _Document, path: KeyPath, value: object) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"expected true or false, got {describe_value(value)}")
    return value


def _positive_number(doc: _Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number > 0, got {describe_value(value)}")
    if value <= 0:
        raise doc.error(path, f"expected a finite number > 0, got {value}")
    return float(value)


def _string(doc: _Document, path: KeyPath, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise doc.error(path, f"expected a non-empty string, got {describe_value(value)}")
    return value


def _http_status(doc: _Document, path: KeyPath, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(path, f"expected an integer from 400 to 599, got {describe_value(value)}")
    if not MIN_HTTP_STATUS <= value <= MAX_HTTP_STATUS:
        raise doc.error(path, f"expected an integer from 400 to 599, got {value}")
    return value


def _one_of(choices: tuple[S, ...]) -> Callable[[_Document, KeyPath, object], S]:
    """A check that the value is one of ``choices`` (strings), listing them if not."""

    def check(doc: _Document, path: KeyPath, value: object) -> S:
        for choice in choices:
            if value == choice:
                return choice
        raise doc.error(path, f"expected one of {_listing(choices)}, got {describe_value(value)}")

    return check


def _introspection(doc: _Document, path: KeyPath, value: object) -> Literal["free", "counted"]:
    for mode in _INTROSPECTION_MODES:
        if value == mode:
            return mode
    raise doc.error(path, f'expected "free" or "counted", got {describe_value(value)}')


def _default(value: T | None, default: T) -> T:
    return default if value is None else value
