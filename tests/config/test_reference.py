"""docs/configuration.md is the reference of quotaql.toml: check its key tables against the code.

Each documented TOML table is a level-3 heading holding the table's name in backticks
(``### `[limits]` ``) followed by a Markdown table with the columns
``key | type | default | meaning``. A key is written in backticks; a default is a TOML value
in backticks (``"enforce"``, ``429``, ``2.0``, ``true``) or ``—`` when the key has none (the
code's default is ``None``: off, required or inherited).

The keys the parser accepts come from the code: the key tuples of ``quotaql.config.reader``
(and, for ``[identity]`` and ``[adaptive]``, of ``quotaql.config.features``; for ``[alerts]``,
of ``quotaql.observability.thresholds``) that its ``check_keys`` calls use, which must agree with the dataclass fields they fill; the defaults come from the
dataclasses.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from quotaql.adaptive import AdaptiveConfig
from quotaql.config import (
    AlertsConfig,
    CostConfig,
    LimitsConfig,
    TenantConfig,
    TierConfig,
    features,
    load_config,
    reader,
)
from quotaql.config.values import RedisConfig
from quotaql.cost_analysis.model import (
    DEFAULT_OPERATION_WEIGHTS,
    SAFE_LIMITS,
    CostLimits,
    CostModel,
    FieldCost,
)
from quotaql.identity import IdentityConfig
from quotaql.observability import thresholds
from quotaql.policy.quota import Quota

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
NO_DEFAULT = "—"
#: Pages whose ```toml examples are complete quotaql.toml files.
TOML_EXAMPLES = [ROOT / "docs" / name for name in ("configuration.md", "tuning.md")]

_HEADING = re.compile(r"^### `(\[[^`]+\])`\s*$")
_TABLE_HEADER = re.compile(r"^\|\s*key\s*\|\s*type\s*\|\s*default\s*\|\s*meaning\s*\|\s*$")
_SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")
_CODE = re.compile(r"^`([^`]+)`$")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    meaning: str
    line: int


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_reference(text: str) -> dict[str, list[Row]]:
    """Each documented TOML table (``[limits]``, ...) and the rows of its key table."""
    tables: dict[str, list[Row]] = {}
    heading: str | None = None
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        match = _HEADING.match(line)
        if match:
            heading = match.group(1)
            assert heading not in tables, f"line {index + 1}: {heading} is documented twice"
        elif line.startswith("### ") or line.startswith("## "):
            heading = None
        elif _TABLE_HEADER.match(line):
            assert heading is not None, (
                f"line {index + 1}: a key table outside a ### `[...]` section"
            )
            assert heading not in tables, f"line {index + 1}: {heading} has two key tables"
            assert _SEPARATOR.match(lines[index + 1]), f"line {index + 2}: expected |---|"
            rows = []
            index += 2
            while index < len(lines) and lines[index].startswith("|"):
                cells = _cells(lines[index])
                assert len(cells) == 4, f"line {index + 1}: expected 4 cells, got {cells}"
                key = _CODE.match(cells[0])
                assert key, f"line {index + 1}: the key must be in backticks: {cells[0]!r}"
                assert cells[1], f"line {index + 1}: empty type"
                assert cells[3], f"line {index + 1}: empty meaning"
                rows.append(Row(key.group(1), cells[1], cells[2], cells[3], index + 1))
                index += 1
            tables[heading] = rows
            continue
        index += 1
    return tables


def _field_names(cls: type, *exclude: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in exclude)


def _field_default(cls: type, name: str) -> Any:
    """A dataclass field's default (``None`` when it has none: a required field)."""
    found = {f.name: f for f in dataclasses.fields(cls)}[name]
    if found.default is not dataclasses.MISSING:
        return found.default
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    return None


def _instance_defaults(instance: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: getattr(instance, key) for key in keys}


def expected_tables() -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
    """Every TOML table with fixed keys: the keys its parser accepts and their defaults.

    The key tuples are what ``quotaql.config`` checks each table against; each is also
    compared with the fields of the dataclass it fills, so that the two cannot drift apart
    without this test noticing.
    """
    assert set(reader._MODEL_KEYS) == set(_field_names(CostModel, "source", "locations"))
    assert set(reader._LIMIT_KEYS) == set(_field_names(CostLimits))
    assert set(reader._COST_KEYS) == set(_field_names(CostConfig, "model", "limits"))
    assert set(reader._FIELD_COST_KEYS) == set(_field_names(FieldCost))
    assert set(reader._LIMITS_KEYS) == set(_field_names(LimitsConfig))
    assert set(thresholds.ALERT_KINDS) == set(_field_names(AlertsConfig))
    assert set(reader._OPERATION_TYPES) == set(DEFAULT_OPERATION_WEIGHTS)
    # fields_in_flight is read from the [tiers.<t>.fields] entries (their max_in_flight),
    # in_flight is built from the others: neither is a key of [tiers.<t>] itself.
    assert set(reader._TIER_KEYS) == {
        *reader._QUOTA_KEYS,
        *_field_names(TierConfig, "name", "quota", "field_lines", "fields_in_flight", "in_flight"),
    }
    assert set(reader._FIELD_KEYS) == {*reader._QUOTA_KEYS, "max_in_flight"}
    assert set(features.IDENTITY_KEYS) == set(_field_names(IdentityConfig, "networks"))
    adaptive_fields = {
        features.ADAPTIVE_FIELDS.get(key, key): key for key in features.ADAPTIVE_KEYS
    }
    assert set(adaptive_fields) == set(_field_names(AdaptiveConfig))
    assert set(reader._REDIS_CHECKS) == set(_field_names(RedisConfig))
    assert set(reader._TENANT_KEYS) == {
        *reader._QUOTA_KEYS,
        *_field_names(TenantConfig, "name", "quota"),
    }

    cost_keys = (*reader._MODEL_KEYS, *reader._LIMIT_KEYS, *reader._COST_KEYS)
    cost_defaults = {
        **_instance_defaults(CostModel(), reader._MODEL_KEYS),
        **_instance_defaults(CostConfig(), reader._COST_KEYS),
        **_instance_defaults(SAFE_LIMITS, reader._LIMIT_KEYS),  # a file starts from these
    }
    quota_defaults = dict.fromkeys(reader._QUOTA_KEYS)
    return {
        "[cost]": (cost_keys, cost_defaults),
        "[cost.operation_weights]": (reader._OPERATION_TYPES, dict(DEFAULT_OPERATION_WEIGHTS)),
        '[cost.weights."Type.field"]': (
            reader._FIELD_COST_KEYS,
            _instance_defaults(FieldCost(), reader._FIELD_COST_KEYS),
        ),
        "[limits]": (
            reader._LIMITS_KEYS,
            {
                **_instance_defaults(LimitsConfig(), reader._LIMITS_KEYS),
                # Unset: each tier's points' worth (gate/charges.py, time_quota).
                "time": None,
            },
        ),
        "[tiers.<name>]": (
            reader._TIER_KEYS,
            {
                **quota_defaults,
                "mode": _field_default(TierConfig, "mode"),
                "operations": _field_default(TierConfig, "operations"),
                "per_user": _field_default(TierConfig, "per_user"),
                "fields": _field_default(TierConfig, "fields"),
                "essential": _field_default(TierConfig, "essential"),
                "max_in_flight": _field_default(TierConfig, "max_in_flight"),
                "max_subscriptions_in_flight": _field_default(
                    TierConfig, "max_subscriptions_in_flight"
                ),
                "on_limit": _field_default(TierConfig, "on_limit"),
                "max_delay": _field_default(TierConfig, "max_delay"),
                "max_queued": _field_default(TierConfig, "max_queued"),
                "time": None,  # unset: [limits] time (TierConfig.time is True)
                "enforce_share": _field_default(TierConfig, "enforce_share"),
                "warn_at": _field_default(TierConfig, "warn_at"),
            },
        ),
        "[tiers.<name>.operations.<Operation>]": (reader._QUOTA_KEYS, quota_defaults),
        "[tiers.<name>.per_user]": (reader._QUOTA_KEYS, quota_defaults),
        '[tiers.<name>.fields."<Type.field>"]': (
            reader._FIELD_KEYS,
            {**quota_defaults, "max_in_flight": None},
        ),
        "[identity]": (
            features.IDENTITY_KEYS,
            _instance_defaults(IdentityConfig(), features.IDENTITY_KEYS),
        ),
        "[tenants.<name>]": (
            reader._TENANT_KEYS,
            {**quota_defaults, "tier": _field_default(TenantConfig, "tier")},
        ),
        "[global]": (
            reader._GLOBAL_KEYS,
            {**quota_defaults, "shards": _field_default(Quota, "shards")},
        ),
        "[alerts]": (
            tuple(thresholds.ALERT_KINDS),
            _instance_defaults(AlertsConfig(), tuple(thresholds.ALERT_KINDS)),
        ),
        "[redis]": (
            tuple(reader._REDIS_CHECKS),
            _instance_defaults(RedisConfig(), tuple(reader._REDIS_CHECKS)),
        ),
        "[adaptive]": (
            features.ADAPTIVE_KEYS,
            {key: getattr(AdaptiveConfig(), field) for field, key in adaptive_fields.items()},
        ),
    }


def documented_default(cell: str) -> Any:
    """The value of a default cell: ``None`` for ``—``, else the TOML value in backticks."""
    if cell == NO_DEFAULT:
        return None
    match = _CODE.match(cell)
    assert match, f"a default is {NO_DEFAULT} or a TOML value in backticks, got {cell!r}"
    return tomllib.loads(f"value = {match.group(1)}")["value"]


def _plain(value: Any) -> Any:
    """``value`` as TOML would give it back: tuples as lists, mappings as dicts, a mode
    (an enum) as its string."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, frozenset):
        return sorted(_plain(item) for item in value)
    return value


def same(documented: Any, actual: Any) -> bool:
    """Equal, and of the same type all the way down (``2`` is not ``2.0``, nor ``1`` ``true``)."""
    actual = _plain(actual)
    if type(documented) is not type(actual):
        return False
    if isinstance(documented, dict):
        return documented.keys() == actual.keys() and all(
            same(documented[key], actual[key]) for key in documented
        )
    if isinstance(documented, list):
        return len(documented) == len(actual) and all(map(same, documented, actual))
    return bool(documented == actual)


@pytest.fixture(scope="module")
def reference() -> dict[str, list[Row]]:
    return parse_reference(REFERENCE.read_text(encoding="utf-8"))


def test_every_table_with_fixed_keys_is_documented_and_no_other(reference):
    assert set(reference) == set(expected_tables())


def test_every_top_level_table_of_the_parser_is_documented(reference):
    documented = {heading.strip("[]").split(".")[0] for heading in reference}
    assert documented == set(reader._TABLES)


@pytest.mark.parametrize("table", sorted(expected_tables()))
def test_the_documented_keys_are_exactly_the_accepted_keys(reference, table):
    keys, _ = expected_tables()[table]
    documented = [row.key for row in reference[table]]
    assert len(documented) == len(set(documented)), f"{table}: a key is documented twice"
    missing = [key for key in keys if key not in documented]
    unknown = [key for key in documented if key not in keys]
    assert not missing, f"{table}: keys the parser accepts but the reference omits: {missing}"
    assert not unknown, f"{table}: documented keys the parser does not accept: {unknown}"


@pytest.mark.parametrize("table", sorted(expected_tables()))
def test_the_documented_defaults_are_the_code_defaults(reference, table):
    _, defaults = expected_tables()[table]
    for row in reference[table]:
        documented = documented_default(row.default)
        assert same(documented, defaults[row.key]), (
            f"docs/configuration.md:{row.line}: {table} {row.key}: documented default"
            f" {row.default!r}, the code's is {defaults[row.key]!r}"
        )


def _defaults_file(reference: dict[str, list[Row]], tables: tuple[str, ...]) -> str:
    lines = []
    for table in tables:
        lines.append(table)
        lines.extend(
            f"{row.key} = {row.default.strip('`')}"
            for row in reference[table]
            if row.default != NO_DEFAULT
        )
        lines.append("")
    return "\n".join(lines)


def test_a_file_of_the_documented_defaults_loads_as_the_defaults(reference, tmp_path):
    path = tmp_path / "quotaql.toml"
    tables = ("[cost]", "[limits]", "[alerts]", "[adaptive]")
    path.write_text(_defaults_file(reference, tables), encoding="utf-8")
    config = load_config(path)
    assert config.limits == LimitsConfig()
    assert config.alerts == AlertsConfig()
    assert config.cost == CostConfig()
    assert config.adaptive == AdaptiveConfig()


def test_the_defaults_file_sets_every_limits_and_alerts_key(reference):
    text = _defaults_file(reference, ("[limits]", "[alerts]"))
    data = tomllib.loads(text)
    unset = {key for key in reader._LIMITS_KEYS if getattr(LimitsConfig(), key) is None}
    unset.add("time")  # unset: each tier's points' worth, which no one value writes
    # No value in the file: no cap, a time per tier, no warning.
    assert unset == {"open_cap", "time", "warn_at"}
    assert set(data["limits"]) == set(reader._LIMITS_KEYS) - unset
    assert set(data["alerts"]) == set(thresholds.ALERT_KINDS)


@pytest.mark.parametrize("doc", TOML_EXAMPLES, ids=lambda path: path.name)
def test_every_toml_example_loads(doc, tmp_path):
    """The ```toml blocks of these pages are whole files that load as they are."""
    text = doc.read_text(encoding="utf-8")
    blocks = [(lang, body) for lang, body in _FENCE.findall(text) if lang == "toml"]
    assert blocks, f"{doc.name} has no ```toml example"
    for number, (_, body) in enumerate(blocks):
        path = tmp_path / f"{doc.stem}-{number}.toml"
        path.write_text(body, encoding="utf-8")
        load_config(path)  # raises ConfigError, naming the line, if an example rots


def test_the_parser_of_this_test_reads_what_it_should():
    text = "\n".join(
        [
            "### `[limits]`",
            "",
            "Some prose.",
            "",
            "| key | type | default | meaning |",
            "|---|---|---|---|",
            '| `mode` | string | `"enforce"` | what to do |',
            "| `x` | number | — | nothing |",
            "",
            "## Another section",
            "",
            "| key | type | default | meaning |",
        ]
    )
    with pytest.raises(AssertionError, match="outside"):
        parse_reference(text)
    tables = parse_reference(text.rsplit("\n## Another section", 1)[0])
    assert [(row.key, documented_default(row.default)) for row in tables["[limits]"]] == [
        ("mode", "enforce"),
        ("x", None),
    ]
    assert same(2.0, 2.0)
    assert not same(2, 2.0)
    assert not same(1, True)
    assert same(["a"], ("a",))
    assert same({"q": 0.0}, {"q": 0.0})
