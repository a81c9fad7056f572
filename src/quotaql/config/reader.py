"""Read ``quotaql.toml`` into the values of :mod:`quotaql.config.values`, blaming each error.

The file as read (its tables and the line of each key) is a
:class:`~quotaql.config.document.Document`; single values are checked by
:mod:`quotaql.config.checks`; the ``[identity]``, ``[adaptive]`` and ``[alerts]`` tables are
read by :mod:`quotaql.config.features`. Here: the tables of quotas and limits, and the
configuration built from all of them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, TypeVar

from quotaql.config import checks, features
from quotaql.config.adaptive import AdaptiveConfig
from quotaql.config.alerts import AlertsConfig
from quotaql.config.document import Document, Table, describe_value, read_document
from quotaql.config.identity import IdentityConfig
from quotaql.config.locator import KeyPath, render_key
from quotaql.config.time_table import tier_time, time_table
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
    ON_FIELD_LIMIT,
    ON_LIMIT,
    Config,
    CostConfig,
    LimitsConfig,
    Mode,
    OnLimit,
    RedisConfig,
    TenantConfig,
    TierConfig,
)
from quotaql.cost_analysis.model import (
    INTROSPECTION_MODES,
    MODELS,
    SAFE_LIMITS,
    CostLimits,
    CostModel,
    FieldCost,
    IntrospectionMode,
)
from quotaql.errors import ConfigError
from quotaql.policy.quota import MAX_DELAY_SECONDS, MAX_SHARDS, Algorithm, Quota

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping

    from quotaql.config.checks import Check

__all__ = ["config_errors", "default_config", "load_config", "load_cost_config"]

T = TypeVar("T")

_NAME = r"[_A-Za-z][_0-9A-Za-z]*"
_COORDINATE: Final = re.compile(
    rf"(?P<type>{_NAME})(?:\.(?P<field>{_NAME})(?:\((?P<arg>{_NAME}):\))?)?"
)

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
    "max_list_size",
)
# [cost] keys that are neither the model's nor limits.
_COST_KEYS: Final = ("tuning_sample", "chars_per_point", "candidate", "candidate_sample")
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
    "max_variable_values",
    "max_field_pairs",
)
_FIELD_COST_KEYS: Final = (
    "weight",
    "assumed_size",
    "slicing_arguments",
    "sized_fields",
    "require_one_slicing_argument",
    "max_size",
)

_GRAPHQL_NAME: Final = re.compile(_NAME)
#: The ``[limits]`` keys and their checks, in the order an error is looked for.
_LIMITS_CHECKS: Final[Mapping[str, Check[object]]] = {
    "mode": checks.one_of(MODES),
    "algorithm": checks.one_of(ALGORITHMS),
    "on_backend_error": checks.one_of(BACKEND_ERROR_MODES),
    "default_tier": checks.string,
    "refund_unused": checks.boolean,
    "expose_cost": checks.boolean,
    "http_status": checks.integer(MIN_HTTP_STATUS, MAX_HTTP_STATUS),
    "reload_interval": checks.non_negative_number,
    "max_subscriptions": checks.size,
    "min_charge": checks.non_negative_number,
    "retry_jitter": checks.fraction,
    "deny_cache_size": checks.size,
    "local_share": checks.fraction,
    "open_cap": checks.fraction,
    "lease_ttl": checks.seconds(MIN_LEASE_TTL, MAX_LEASE_TTL, low_in=True),
    "concurrency_retry_after": checks.seconds(0.0, MAX_CONCURRENCY_RETRY_AFTER, low_in=False),
    "max_delayed": checks.size,
    "delayed_share": checks.fraction,
    "delay_sync": checks.one_of(DELAY_SYNC),
    "charge_overage": checks.boolean,
    "enforce_share": checks.fraction,
    "on_field_limit": checks.one_of(ON_FIELD_LIMIT),
    "cost_headers": checks.boolean,
    "cost_header_names": checks.header_names,
    "warn_at": checks.warn_at,
    "time": lambda doc, path, value: time_table(doc, path, value, off=None),
}
_LIMITS_KEYS: Final = tuple(_LIMITS_CHECKS)
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
    "time",
    "enforce_share",
    "warn_at",
)
#: A root field's entry: a rate quota, a concurrency limit, or both.
_FIELD_KEYS: Final = (*_QUOTA_KEYS, "max_in_flight")
_GLOBAL_KEYS: Final = (*_QUOTA_KEYS, "shards")  # shards: Quota.shards
_TENANT_KEYS: Final = ("tier", *_QUOTA_KEYS)
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
    return _build(read_document(os.fspath(path))).cost


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
    return _build(read_document(os.fspath(path)))


def default_config() -> Config:
    """The configuration of an empty file: default limits and one tier, ``free``."""
    limits = LimitsConfig()
    tier = _default_tier(Document("", {}, {}), limits.algorithm)
    return Config(CostConfig(), limits, {tier.name: tier}, {}, None)


# --- the tables --------------------------------------------------------------------------


def _parse_cost(cost: Table) -> CostConfig:
    cost.check_keys(_MODEL_KEYS + _LIMIT_KEYS + _COST_KEYS)
    weights, locations = _parse_weights(cost.table("weights"))
    defaults = CostModel()
    default_list_size = cost.get("default_list_size", checks.size)
    max_list_size = cost.get("max_list_size", checks.size)
    slicing_arguments = cost.get("slicing_arguments", checks.names)
    introspection = cost.get("introspection", _introspection)
    name = cost.get("model", checks.one_of(MODELS))
    connections = cost.get("connections", checks.boolean)
    connections_exclude = cost.get("connections_exclude", checks.names)
    tuning_sample = cost.get("tuning_sample", checks.fraction)
    chars_per_point = cost.get("chars_per_point", checks.size_or_off)
    candidate = cost.get("candidate", checks.string)
    candidate_sample = cost.get("candidate_sample", checks.fraction)
    with cost.blame():
        model = CostModel(
            model=checks.default(name, defaults.model),
            connections=checks.default(connections, defaults.connections),
            connections_exclude=frozenset(connections_exclude or ()),
            default_list_size=checks.default(default_list_size, defaults.default_list_size),
            max_list_size=checks.default(max_list_size, defaults.max_list_size),
            slicing_arguments=checks.default(slicing_arguments, defaults.slicing_arguments),
            operation_weights=_parse_operation_weights(cost.table("operation_weights")),
            introspection=checks.default(introspection, defaults.introspection),
            weights=weights,
            source=cost.doc.file,
            locations=locations,
        )
        limits = CostLimits(
            max_cost=cost.get("max_cost", checks.non_negative_number),
            **{name: _limit_or_safe(cost, name) for name in _LIMIT_KEYS if name != "max_cost"},
        )
    return CostConfig(
        model=model,
        limits=limits,
        tuning_sample=checks.default(tuning_sample, CostConfig().tuning_sample),
        # false or 0: the document's size is not charged
        chars_per_point=(
            CostConfig().chars_per_point if chars_per_point is None else chars_per_point or None
        ),
        # relative to the directory of the file that names it
        candidate=None if candidate is None else _beside(cost.doc.file, candidate),
        candidate_sample=checks.default(candidate_sample, CostConfig().candidate_sample),
    )


def _beside(file: str, path: str) -> str:
    """``path`` as written in ``file``: relative to ``file``'s directory (absolute kept)."""
    return os.path.join(os.path.dirname(os.path.abspath(file)), os.path.expanduser(path))


def _limit_or_safe(cost: Table, name: str) -> int | None:
    """A document limit of ``[cost]``: the key's integer, None for ``false`` (no limit), or
    the safe default (``SAFE_LIMITS``) when the key is absent."""
    value = cost.get(name, checks.size_or_off)
    if value is None:
        safe: int | None = getattr(SAFE_LIMITS, name)
        return safe
    return None if value is False else value


def _parse_operation_weights(table: Table) -> dict[str, float]:
    table.check_keys(_OPERATION_TYPES, what="operation type")
    return {
        name: checks.number(table.doc, (*table.path, name), value)
        for name, value in table.data.items()
    }


def _parse_weights(table: Table) -> tuple[dict[str, float | FieldCost], dict[str, int]]:
    weights: dict[str, float | FieldCost] = {}
    locations: dict[str, int] = {}
    for coordinate, value in table.data.items():
        path = (*table.path, coordinate)
        match = _COORDINATE.fullmatch(coordinate)
        if match is None:
            table.doc.fail(
                path,
                "expected a schema coordinate ('Type', 'Type.field' or 'Type.field(arg:)'),"
                f" got {json.dumps(coordinate, ensure_ascii=False)}",
            )
            continue  # when collecting errors: the next weight
        with table.doc.attempt():
            if isinstance(value, dict):
                if match["field"] is None or match["arg"] is not None:
                    raise table.doc.error(
                        path,
                        "expected a number (a table of settings is only for a 'Type.field'"
                        " coordinate), got a table",
                    )
                weights[coordinate] = _parse_field_cost(table.table(coordinate))
            elif isinstance(value, int | float) and not isinstance(value, bool):
                weights[coordinate] = checks.number(table.doc, path, value)
            else:
                raise table.doc.error(
                    path, f"expected a number or a table, got {describe_value(value)}"
                )
        line = table.doc.line(path)
        if line is not None and coordinate in weights:
            locations[coordinate] = line
    return weights, locations


def _parse_field_cost(table: Table) -> FieldCost:
    table.check_keys(_FIELD_COST_KEYS)
    weight = table.get("weight", checks.number)
    assumed_size = table.get("assumed_size", checks.size)
    slicing_arguments = table.get("slicing_arguments", checks.names)
    sized_fields = table.get("sized_fields", checks.names)
    require_one = table.get("require_one_slicing_argument", checks.boolean)
    max_size = table.get("max_size", checks.size)
    with table.blame():
        return FieldCost(
            weight=weight,
            assumed_size=assumed_size,
            slicing_arguments=slicing_arguments,
            sized_fields=sized_fields,
            require_one_slicing_argument=require_one,
            max_size=max_size,
        )


def _parse_limits(limits: Table) -> LimitsConfig:
    limits.check_keys(_LIMITS_KEYS)
    values = limits.read(_LIMITS_CHECKS)
    with limits.blame():
        return LimitsConfig(**values)


@dataclass(frozen=True, slots=True)
class _QuotaKeys:
    """The quota keys of one table, checked one by one; a ``Quota`` once its algorithm is
    known (that may come from another table)."""

    table: Table
    algorithm: Algorithm | None
    values: Mapping[str, float]  # only the keys the table gives

    @property
    def given(self) -> bool:
        return self.algorithm is not None or bool(self.values)


@dataclass(frozen=True, slots=True)
class _TierKeys:
    table: Table
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
    time: Quota | bool
    enforce_share: float | None
    warn_at: float | bool | None


@dataclass(frozen=True, slots=True)
class _TenantKeys:
    table: Table
    tier: str
    quota: _QuotaKeys


@dataclass(frozen=True, slots=True)
class _Tiers:
    table: Table
    present: bool  # an empty [tiers] is an error; no [tiers] gives the default tier
    tiers: Mapping[str, _TierKeys]


@dataclass(frozen=True, slots=True)
class _Tenants:
    tenants: Mapping[str, _TenantKeys]


@dataclass(frozen=True, slots=True)
class _Global:
    quota: _QuotaKeys | None
    shards: int = 1


def _parse_quota_keys(table: Table) -> _QuotaKeys:
    values: dict[str, float] = {}
    for key in (*_BUCKET_KEYS, *_WINDOW_KEYS):
        value = table.get(key, checks.positive_number)
        if value is not None:
            values[key] = value
    return _QuotaKeys(table, table.get("algorithm", checks.one_of(ALGORITHMS)), values)


def _parse_tiers(tiers: Table) -> _Tiers:
    entries: dict[str, _TierKeys] = {}
    for name in tiers.data:
        with tiers.doc.attempt():  # when collecting errors: the next tier
            entries[name] = _parse_tier(tiers.table(name))
    return _Tiers(tiers, tiers.path[0] in tiers.doc.data, entries)


def _parse_tier(tier: Table) -> _TierKeys:
    """One tier's table, its keys checked one by one."""
    tier.check_keys(_TIER_KEYS)
    operations = {
        operation: _parse_quota_keys(entry)
        for operation, entry in _entries(
            tier.table("operations"),
            _GRAPHQL_NAME.fullmatch,
            "an operation name (letters, digits and _, not starting with a digit)",
            _QUOTA_KEYS,
        )
    }
    mode = tier.get("mode", checks.one_of(MODES))
    per_user = None
    if "per_user" in tier.data:
        table = tier.table("per_user")
        table.check_keys(_QUOTA_KEYS)
        per_user = _parse_quota_keys(table)
    fields: dict[str, _QuotaKeys] = {}
    fields_in_flight: dict[str, int] = {}
    for coordinate, entry in _entries(
        tier.table("fields"),
        _is_field_coordinate,
        "a root field's coordinate ('Query.search', 'Mutation.exportOrders')",
        _FIELD_KEYS,
    ):
        keys = _parse_quota_keys(entry)
        field_in_flight = entry.get("max_in_flight", checks.integer(1))
        if field_in_flight is not None:
            fields_in_flight[coordinate] = field_in_flight
        if keys.given or field_in_flight is None:  # a rate quota (or an empty entry)
            fields[coordinate] = keys
    essential = tier.get("essential", checks.boolean) or False
    max_in_flight = tier.get("max_in_flight", checks.integer(1))
    max_subscriptions = tier.get("max_subscriptions_in_flight", checks.integer(0))
    on_limit = tier.get("on_limit", checks.one_of(ON_LIMIT))
    max_delay = tier.get("max_delay", checks.seconds(0.0, MAX_DELAY_SECONDS, low_in=False))
    max_queued = tier.get("max_queued", checks.integer(1))
    if on_limit != "delay":
        for key, value in (("max_delay", max_delay), ("max_queued", max_queued)):
            if value is not None:
                tier.doc.fail((*tier.path, key), f'{key} needs on_limit = "delay" in this tier')
    warn_at: float | bool | None = tier.get("warn_at", checks.warn_at)
    if warn_at is None and "warn_at" in tier.data:
        warn_at = False  # warn_at = false: no warning for this tier (absent: [limits]'s)
    return _TierKeys(
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
        True if (time := tier.get("time", tier_time)) is None else time,
        tier.get("enforce_share", checks.fraction),
        # false: no warning for this tier (absent: [limits]'s)
        False
        if (warn := tier.get("warn_at", checks.warn_at)) is None and "warn_at" in tier.data
        else warn,
    )


def _entries(
    table: Table, valid: Callable[[str], object], expected: str, keys: Collection[str]
) -> Iterator[tuple[str, Table]]:
    """Each subtable of ``table`` by its name, its keys checked against ``keys``; an error
    for a name that is not ``valid`` says it ``expected`` another."""
    for name in table.data:
        if not valid(name):
            table.doc.fail(
                (*table.path, name),
                f"expected {expected}, got {json.dumps(name, ensure_ascii=False)}",
            )
            continue  # when collecting errors: the next entry
        entry = table.table(name)
        entry.check_keys(keys)
        yield name, entry


def _is_field_coordinate(coordinate: str) -> bool:
    """``Type.field``, without an argument."""
    match = _COORDINATE.fullmatch(coordinate)
    return match is not None and match["field"] is not None and match["arg"] is None


def _parse_tenants(tenants: Table) -> _Tenants:
    entries: dict[str, _TenantKeys] = {}
    for name in tenants.data:
        tenant = tenants.table(name)
        tenant.check_keys(_TENANT_KEYS)
        tier = tenant.get("tier", checks.string)
        if tier is None:
            if "tier" not in tenant.data:
                tenant.doc.fail(tenant.path, 'a tenant needs a tier: add tier = "<name>"')
            continue  # when collecting errors: the next tenant
        entries[name] = _TenantKeys(tenant, tier, _parse_quota_keys(tenant))
    return _Tenants(entries)


#: The ``[redis]`` keys and their checks.
_REDIS_CHECKS: Final[Mapping[str, Check[object]]] = {"allow_eviction": checks.boolean}


def _parse_redis(table: Table) -> RedisConfig:
    table.check_keys(_REDIS_CHECKS)
    values = table.read(_REDIS_CHECKS)
    with table.blame():
        return RedisConfig(**values)


def _parse_global(table: Table) -> _Global:
    table.check_keys(_GLOBAL_KEYS)
    shards = table.get("shards", checks.integer(1, MAX_SHARDS)) or 1
    present = table.path[0] in table.doc.data
    return _Global(_parse_quota_keys(table) if present else None, shards)


#: Every known top-level table and its parser, called with an empty table when the file
#: has none (so that defaults come from one place). Adding a table is adding a line here.
#: The parsers check each table on its own; :func:`_build` then checks what tables say
#: about each other (tier names, inherited algorithms).
_TABLES: Final[Mapping[str, Callable[[Table], object]]] = {
    "cost": _parse_cost,
    "limits": _parse_limits,
    "tiers": _parse_tiers,
    "tenants": _parse_tenants,
    "global": _parse_global,
    "alerts": features.read_alerts,
    "identity": features.read_identity,
    "adaptive": features.read_adaptive,
    "redis": _parse_redis,
}


def _load_tables(doc: Document) -> dict[str, object]:
    root = Table(doc, (), doc.data)
    root.check_keys(_TABLES, what="table")
    tables: dict[str, object] = {}
    for name, parse in _TABLES.items():
        with doc.attempt():
            tables[name] = parse(root.table(name))
        if name not in tables:  # collecting errors: the table's defaults, to check the rest
            tables[name] = parse(Table(doc, (name,), {}))
    return tables


def _parsed(tables: Mapping[str, object], name: str, kind: type[T]) -> T:
    value = tables[name]
    if not isinstance(value, kind):  # the registry guarantees it; this tells mypy
        raise TypeError(f"the {name!r} table parser returned {type(value).__name__}")
    return value


def _build(doc: Document) -> Config:
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
    redis = _parsed(tables, "redis", RedisConfig)
    limits_keys = doc.data.get("limits", {})
    if not isinstance(limits_keys, dict):  # _parse_limits rejected it already
        raise TypeError("[limits] is not a table")
    base: tuple[Algorithm, str] = (
        limits.algorithm,
        "from limits.algorithm" if "algorithm" in limits_keys else "the default algorithm",
    )

    tiers: dict[str, TierConfig] = {}
    # When collecting errors, a tier that the file names but that has an error of its own
    # is left out of `tiers`: the checks of names below do not blame the names of it.
    named: Collection[str] = tier_keys.table.data if tier_keys.present else ()
    if not tier_keys.present:
        with doc.attempt():
            tiers[DEFAULT_TIER] = _default_tier(doc, limits.algorithm)
    elif not tier_keys.tiers:
        doc.fail(tier_keys.table.path, "expected at least one tier ([tiers.<name>])")
    for name, tier_entry in tier_keys.tiers.items():
        with doc.attempt():
            tiers[name] = _build_tier(name, tier_entry, base)
    broken = doc.problems is not None and any(name not in tiers for name in named)
    known = named or tiers  # the names to suggest
    if not tiers and doc.problems is not None:
        raise _stop(doc)

    if limits.default_tier not in tiers and limits.default_tier not in named:
        path: KeyPath = ("limits", "default_tier")
        located = path if doc.line(path) is not None else tier_keys.table.path
        doc.report(
            ConfigError(
                f"no tier named {json.dumps(limits.default_tier, ensure_ascii=False)}"
                f"{'' if 'default_tier' in limits_keys else ' (the default)'};"
                f" expected one of: {checks.listing(known)}",
                file=doc.file,
                key=render_key(path),
                line=doc.line(located),
            )
        )

    tenants: dict[str, TenantConfig] = {}
    for name, entry in tenant_keys.tenants.items():
        tier = tiers.get(entry.tier)
        if tier is None:
            if entry.tier not in named:
                doc.fail(
                    (*entry.table.path, "tier"),
                    f"no tier named {json.dumps(entry.tier, ensure_ascii=False)};"
                    f" expected one of: {checks.listing(known)}",
                )
            continue  # collecting errors: the next tenant
        with doc.attempt():
            quota = None
            if entry.quota.given:
                tier_algorithm = (tier.quota.algorithm, f"the algorithm of tier {tier.name!r}")
                quota = _build_quota(entry.quota, "tenant", (tier_algorithm, base))
            tenants[name] = TenantConfig(name, entry.tier, quota)

    global_quota = None
    if global_keys.quota is not None:
        with doc.attempt():
            global_quota = _build_quota(global_keys.quota, "global", (base,), shared=True)
            if global_keys.shards > 1:  # N buckets of C/N (quotaql.limiter.shards)
                global_quota = replace(global_quota, shards=global_keys.shards)
    if not broken:
        with doc.attempt():
            features.check_adaptive_tiers(doc, adaptive, tiers)
    if doc.problems:
        raise _stop(doc)

    with Table(doc, (), doc.data).blame():
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
            redis=redis,
        )


def _stop(doc: Document) -> ConfigError:
    """The first error collected in ``doc``: reading stops there, the others are in
    ``doc.problems``."""
    if not doc.problems:
        raise TypeError("no error was collected")
    return doc.problems[0]


def config_errors(path: str | os.PathLike[str]) -> list[ConfigError]:
    """Every error of the file ``path``, by line (none: the file is valid, and
    :func:`load_config` reads it).

    Where :func:`load_config` stops at the first error, this goes on past each wrong value
    as if the file did not give it; an error that follows from one already found (a
    missing capacity where the capacity is wrong) is left out. An unreadable file or
    invalid TOML is one error.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "quotaql.toml"
        >>> _ = path.write_text("[limits]\\nmode = 'loud'\\nreload_intervl = 5\\n")
        >>> for error in config_errors(path):
        ...     print(error.line, error.key, error.reason)
        2 limits.mode expected one of "enforce", "shadow", "off", got a string ("loud")
        3 limits.reload_intervl unknown key; did you mean 'reload_interval'?
    """
    try:
        read = read_document(os.fspath(path))
    except ConfigError as error:
        return [error]
    doc = Document(read.file, read.data, read.lines, problems=[])
    try:
        _build(doc)
    except ConfigError as error:
        doc.report(error)
    return sorted(doc.problems or (), key=lambda error: (error.line is None, error.line or 0))


def _default_tier(doc: Document, algorithm: Algorithm) -> TierConfig:
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
            on_limit=checks.default(tier.on_limit, "refuse"),
            max_delay=tier.max_delay,
            max_queued=tier.max_queued,
            time=tier.time,
            enforce_share=tier.enforce_share,
            warn_at=tier.warn_at,
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


# --- value checks of the [cost] table ----------------------------------------------------


def _introspection(doc: Document, path: KeyPath, value: object) -> IntrospectionMode:
    for mode in INTROSPECTION_MODES:
        if value == mode:
            return mode
    raise doc.error(path, f'expected "counted", "free" or "off", got {describe_value(value)}')
