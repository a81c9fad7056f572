"""Tests for the ``[limits]``, ``[tiers]``, ``[tenants]`` and ``[global]`` tables."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from quotaql.config import (
    Config,
    CostConfig,
    LimitsConfig,
    TenantConfig,
    TierConfig,
    default_config,
    load_config,
    load_cost_config,
)
from quotaql.errors import ConfigError
from quotaql.gate.charges import check_fields, in_flight, quotas_for
from quotaql.policy.quota import Quota

FULL = """\
[limits]
mode = "enforce"                # enforce | shadow | off (also per tier)
algorithm = "token_bucket"      # default algorithm of every quota below
on_backend_error = "local"      # open | closed | local
default_tier = "free"
refund_unused = true
expose_cost = true
http_status = 429               # integer 400..599
reload_interval = 2.0           # seconds between checks of the file for edits; 0 = never

[tiers.free]
capacity = 1000
refill_per_second = 50
[tiers.pro]
capacity = 10000
refill_per_second = 500
mode = "shadow"                 # optional per-tier mode
[tiers.pro.operations]          # optional per-operation quotas within a tier
ExportOrders = { capacity = 100, refill_per_second = 1 }
[tiers.enterprise]
algorithm = "sliding_counter"   # optional per-tier algorithm
limit = 100000
window_seconds = 60

[tenants.acme]
tier = "pro"
[tenants."big-co"]
tier = "enterprise"
capacity = 50000                # optional override of the tier's tenant quota
refill_per_second = 1000

[global]                        # optional platform-wide quota
capacity = 200000
refill_per_second = 20000
"""

TWO_TIERS = """\
[tiers.free]
capacity = 10
refill_per_second = 1
[tiers.pro]
capacity = 100
refill_per_second = 10
[tiers.pro.operations]
Export = { capacity = 5, refill_per_second = 0.5 }
[tenants.acme]
tier = "pro"
"""


@pytest.fixture
def write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write ``quotaql.toml`` in a fresh working directory; return its name as given."""
    monkeypatch.chdir(tmp_path)

    def write(text: str) -> str:
        Path("quotaql.toml").write_text(textwrap.dedent(text), encoding="utf-8")
        return "quotaql.toml"

    return write


def config_error(path: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value


def assert_located(error: ConfigError, key: str, line: int) -> None:
    """The error names the file, the dotted key and the line, in its fields and its text."""
    assert (error.file, error.key, error.line) == ("quotaql.toml", key, line)
    assert str(error).startswith(f"quotaql.toml:{line}: {key}: ")


# --- valid files ---------------------------------------------------------------------------


def test_full_example_parses_to_exact_values(write):
    cfg = load_config(write(FULL))

    assert cfg.limits == LimitsConfig(
        mode="enforce",
        algorithm="token_bucket",
        on_backend_error="local",
        default_tier="free",
        refund_unused=True,
        expose_cost=True,
        http_status=429,
        reload_interval=2.0,
    )
    assert list(cfg.tiers) == ["free", "pro", "enterprise"]
    assert cfg.tiers["free"] == TierConfig(
        "free", Quota("tenant", capacity=1000, refill_per_second=50), {}, None
    )
    assert cfg.tiers["pro"] == TierConfig(
        "pro",
        Quota("tenant", capacity=10000, refill_per_second=500),
        {"ExportOrders": Quota("op:ExportOrders", capacity=100, refill_per_second=1)},
        "shadow",
    )
    enterprise = cfg.tiers["enterprise"]
    assert enterprise.quota == Quota(
        "tenant", limit=100000, window_seconds=60, algorithm="sliding_counter"
    )
    assert enterprise.operations == {}
    assert enterprise.mode is None
    assert cfg.tenants == {
        "acme": TenantConfig("acme", "pro", None),
        "big-co": TenantConfig(
            "big-co", "enterprise", Quota("tenant", capacity=50000, refill_per_second=1000)
        ),
    }
    assert cfg.global_quota == Quota(
        "global", capacity=200000, refill_per_second=20000, shared=True
    )
    assert cfg.source == "quotaql.toml"
    assert cfg.cost == CostConfig()


def test_full_example_quotas_carry_the_params_the_storages_read(write):
    cfg = load_config(write(FULL))

    assert cfg.tiers["free"].quota.params == (1000.0, 0.05)  # tokens per millisecond
    assert cfg.tiers["pro"].operations["ExportOrders"].params == (100.0, 0.001)
    assert cfg.tiers["enterprise"].quota.algorithm == "sliding_counter"
    assert cfg.tiers["enterprise"].quota.params == (100000.0, 60000)  # window in ms
    big_co = cfg.tenants["big-co"].quota
    assert big_co is not None
    # the tier is a window, the override a bucket: it takes limits.algorithm
    assert (big_co.algorithm, big_co.params) == ("token_bucket", (50000.0, 1.0))
    assert cfg.global_quota is not None
    assert cfg.global_quota.shared is True
    assert cfg.global_quota.params == (200000.0, 20.0)


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "[limits]\n", "[cost]\nmax_depth = 3\n"])
def test_a_file_without_limiter_tables_gives_the_defaults(write, text):
    cfg = load_config(write(text))

    assert cfg.limits == LimitsConfig()
    assert cfg.limits == LimitsConfig(
        mode="enforce",
        algorithm="token_bucket",
        on_backend_error="local",
        default_tier="free",
        refund_unused=True,
        expose_cost=True,
        http_status=429,
        reload_interval=2.0,
    )
    assert cfg.tiers == {
        "free": TierConfig("free", Quota("tenant", capacity=1000, refill_per_second=50), {})
    }
    assert cfg.tenants == {}
    assert cfg.global_quota is None


def test_default_config_is_what_an_empty_file_gives(write):
    cfg = load_config(write(""))

    assert cfg.source == "quotaql.toml"
    assert default_config().source is None
    assert dataclasses.replace(cfg, source=None) == default_config()


def test_limits_keys_are_read_and_absent_ones_default(write):
    cfg = load_config(
        write(
            """\
            [limits]
            mode = "shadow"
            on_backend_error = "closed"
            refund_unused = false
            http_status = 503
            reload_interval = 0
            """
        )
    )

    assert cfg.limits == LimitsConfig(
        mode="shadow",
        on_backend_error="closed",
        refund_unused=False,
        http_status=503,
        reload_interval=0.0,
    )
    assert cfg.limits.expose_cost is True
    assert cfg.limits.algorithm == "token_bucket"


def test_a_file_with_tiers_gets_only_the_tiers_it_names(write):
    cfg = load_config(
        write(
            """\
            [limits]
            default_tier = "basic"
            [tiers.basic]
            capacity = 5
            refill_per_second = 2
            """
        )
    )

    assert list(cfg.tiers) == ["basic"]
    assert cfg.tier_of(None).quota == Quota("tenant", capacity=5, refill_per_second=2)


def test_limits_algorithm_is_the_default_of_tiers_operations_and_global(write):
    cfg = load_config(
        write(
            """\
            [limits]
            algorithm = "gcra"
            [tiers.free]
            capacity = 10
            refill_per_second = 2
            operations.Export = { capacity = 1, refill_per_second = 1 }
            [global]
            capacity = 100
            refill_per_second = 50
            """
        )
    )

    free = cfg.tiers["free"]
    assert free.quota.algorithm == "gcra"
    assert free.operations["Export"].algorithm == "gcra"
    assert cfg.global_quota is not None
    assert cfg.global_quota.algorithm == "gcra"
    assert cfg.global_quota.params == (100.0, 20.0)  # one unit every 20 ms


def test_a_bucket_limits_algorithm_applies_to_the_default_tier(write):
    cfg = load_config(write('[limits]\nalgorithm = "gcra"\n'))

    assert cfg.tiers["free"].quota == Quota(
        "tenant", capacity=1000, refill_per_second=50, algorithm="gcra"
    )


def test_operations_take_the_tier_algorithm_unless_they_name_their_own(write):
    cfg = load_config(
        write(
            """\
            [tiers.free]
            algorithm = "fixed_window"
            limit = 100
            window_seconds = 10
            [tiers.free.operations]
            Search = { limit = 5, window_seconds = 1 }
            Export = { algorithm = "token_bucket", capacity = 2, refill_per_second = 0.1 }
            """
        )
    )

    operations = cfg.tiers["free"].operations
    assert operations["Search"] == Quota(
        "op:Search", limit=5, window_seconds=1, algorithm="fixed_window"
    )
    assert operations["Export"] == Quota(
        "op:Export", capacity=2, refill_per_second=0.1, algorithm="token_bucket"
    )


def test_tenant_override_keeps_the_tier_algorithm_when_it_takes_the_keys(write):
    cfg = load_config(
        write(
            """\
            [limits]
            default_tier = "gold"
            [tiers.gold]
            algorithm = "gcra"
            capacity = 10
            refill_per_second = 1
            [tiers.window]
            algorithm = "sliding_log"
            limit = 10
            window_seconds = 1
            [tenants.a]
            tier = "gold"
            capacity = 20
            refill_per_second = 4
            [tenants.b]
            tier = "window"
            limit = 30
            window_seconds = 2
            [tenants.c]
            tier = "window"
            algorithm = "fixed_window"
            limit = 7
            window_seconds = 3
            """
        )
    )

    assert cfg.tenants["a"].quota == Quota(
        "tenant", capacity=20, refill_per_second=4, algorithm="gcra"
    )
    assert cfg.tenants["b"].quota == Quota(
        "tenant", limit=30, window_seconds=2, algorithm="sliding_log"
    )
    assert cfg.tenants["c"].quota == Quota(
        "tenant", limit=7, window_seconds=3, algorithm="fixed_window"
    )


def test_mappings_are_read_only(write):
    cfg = load_config(write(FULL))

    with pytest.raises(TypeError):
        cfg.tiers["gold"] = cfg.tiers["free"]  # type: ignore[index]
    with pytest.raises(TypeError):
        cfg.tenants["x"] = cfg.tenants["acme"]  # type: ignore[index]
    with pytest.raises(TypeError):
        cfg.tiers["pro"].operations["X"] = cfg.tiers["free"].quota  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.limits.mode = "off"  # type: ignore[misc]


def test_load_cost_config_checks_the_limiter_tables_too(write):
    path = write('[cost]\nmax_depth = 3\n[tenants.acme]\ntier = "gold"\n')

    with pytest.raises(ConfigError) as info:
        load_cost_config(path)

    assert_located(info.value, "tenants.acme.tier", 4)


def test_config_built_by_hand_rejects_an_unknown_default_tier():
    tier = TierConfig("pro", Quota("tenant", capacity=1, refill_per_second=1))

    with pytest.raises(ConfigError, match="default_tier 'free' is not a tier"):
        Config(CostConfig(), LimitsConfig(), {"pro": tier}, {}, None)
    with pytest.raises(ConfigError, match="tenant 'acme': 'gold' is not a tier"):
        Config(
            CostConfig(),
            LimitsConfig(default_tier="pro"),
            {"pro": tier},
            {"acme": TenantConfig("acme", "gold")},
            None,
        )


@pytest.mark.parametrize(
    ("field", "value", "phrase"),
    [
        ("mode", "strict", "mode must be one of enforce, shadow, off"),
        ("on_backend_error", "retry", "on_backend_error must be one of open, closed, local"),
        ("http_status", 200, "http_status must be an integer from 400 to 599"),
        ("reload_interval", -1, "reload_interval must be a number >= 0"),
    ],
)
def test_limits_config_built_by_hand_is_checked(field, value, phrase):
    with pytest.raises(ConfigError, match=phrase):
        LimitsConfig(**{field: value})


# --- tier_of and quotas_for ----------------------------------------------------------------


def test_tier_of_a_named_tenant_is_its_tier_and_of_anyone_else_the_default(write):
    cfg = load_config(write(FULL))

    assert cfg.tier_of("acme").name == "pro"
    assert cfg.tier_of("big-co").name == "enterprise"
    assert cfg.tier_of("stranger").name == "free"
    assert cfg.tier_of(None).name == "free"


def test_quotas_for_orders_tenant_then_operation_then_global(write):
    cfg = load_config(write(FULL))
    pro = cfg.tiers["pro"]

    assert quotas_for(cfg, "acme", "ExportOrders") == (
        pro.quota,
        pro.operations["ExportOrders"],
        cfg.global_quota,
    )
    assert [q.name for q in quotas_for(cfg, "acme", "ExportOrders")] == [
        "tenant",
        "op:ExportOrders",
        "global",
    ]


def test_quotas_for_an_operation_without_a_quota_skips_it(write):
    cfg = load_config(write(FULL))
    pro = cfg.tiers["pro"]

    assert quotas_for(cfg, "acme", "ListOrders") == (pro.quota, cfg.global_quota)
    assert quotas_for(cfg, "acme", None) == (pro.quota, cfg.global_quota)


def test_quotas_for_uses_the_tenant_override_instead_of_the_tier_quota(write):
    cfg = load_config(write(FULL))

    quotas = quotas_for(cfg, "big-co", "ExportOrders")

    assert quotas == (cfg.tenants["big-co"].quota, cfg.global_quota)
    assert quotas[0] != cfg.tiers["enterprise"].quota


def test_quotas_for_an_unknown_or_anonymous_tenant_uses_the_default_tier(write):
    cfg = load_config(write(FULL))
    free = cfg.tiers["free"].quota

    # ExportOrders has a quota on pro only: a stranger on free does not get it
    assert quotas_for(cfg, "stranger", "ExportOrders") == (free, cfg.global_quota)
    assert quotas_for(cfg, None, None) == (free, cfg.global_quota)


def test_quotas_for_without_global_returns_no_global_quota(write):
    cfg = load_config(write(TWO_TIERS))
    pro = cfg.tiers["pro"]

    assert cfg.global_quota is None
    assert quotas_for(cfg, "acme", "Export") == (pro.quota, pro.operations["Export"])
    assert quotas_for(cfg, "acme", "Other") == (pro.quota,)
    assert quotas_for(cfg, "someone", "Export") == (cfg.tiers["free"].quota,)


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "line", "suggestion"),
    [
        (
            "[limits]\nmode = 'off'\nrefund_unsed = true\n",
            "limits.refund_unsed",
            3,
            "refund_unused",
        ),
        (
            "[tiers.free]\ncapacity = 1\nrefil_per_second = 1\n",
            "tiers.free.refil_per_second",
            3,
            "refill_per_second",
        ),
        ("[tenants.acme]\ntier = 'free'\n\nteir = 'free'\n", "tenants.acme.teir", 4, "tier"),
        (
            "[tiers.free]\ncapacity = 1\nrefill_per_second = 1\n"
            "operations.Export = { capasity = 1 }\n",
            "tiers.free.operations.Export.capasity",
            4,
            "capacity",
        ),
        ("[global]\nlimt = 10\n", "global.limt", 2, "limit"),
        ("[tier.free]\ncapacity = 1\n", "tier", 1, "tiers"),
    ],
)
def test_unknown_key_is_located_and_gets_a_suggestion(write, text, key, line, suggestion):
    error = config_error(write(text))

    assert_located(error, key, line)
    assert error.reason.endswith(f"did you mean {suggestion!r}?")


@pytest.mark.parametrize(
    ("line", "key", "phrase"),
    [
        ('refund_unused = "yes"', "limits.refund_unused", 'true or false, got a string ("yes")'),
        ("expose_cost = 1", "limits.expose_cost", "true or false, got an integer (1)"),
        ("default_tier = 5", "limits.default_tier", "a non-empty string, got an integer (5)"),
        ('reload_interval = "2"', "limits.reload_interval", "finite number >= 0, got a string"),
        ("reload_interval = -1", "limits.reload_interval", "finite number >= 0, got -1"),
        (
            "reload_interval = nan",
            "limits.reload_interval",
            "finite number >= 0, got a float (nan)",
        ),
        ("http_status = 200", "limits.http_status", "an integer from 400 to 599, got 200"),
        ("http_status = 600", "limits.http_status", "an integer from 400 to 599, got 600"),
        ("http_status = 429.0", "limits.http_status", "from 400 to 599, got a float (429.0)"),
        ("http_status = true", "limits.http_status", "from 400 to 599, got a boolean (true)"),
        (
            'mode = "strict"',
            "limits.mode",
            'one of "enforce", "shadow", "off", got a string ("strict")',
        ),
        (
            'algorithm = "leaky_bucket"',
            "limits.algorithm",
            'one of "token_bucket", "gcra", "sliding_log", "sliding_counter", "fixed_window",'
            ' got a string ("leaky_bucket")',
        ),
        (
            "on_backend_error = 1",
            "limits.on_backend_error",
            'one of "open", "closed", "local", got an integer (1)',
        ),
    ],
)
def test_wrong_limits_value_is_located_and_says_what_was_expected(write, line, key, phrase):
    error = config_error(write(f"# limiter\n[limits]\n{line}\n# end\n"))

    assert_located(error, key, 3)
    assert "expected" in error.reason
    assert phrase in error.reason


@pytest.mark.parametrize(
    ("line", "key", "phrase"),
    [
        ("capacity = 0", "tiers.free.capacity", "a finite number > 0, got 0"),
        ("capacity = -5", "tiers.free.capacity", "a finite number > 0, got -5"),
        ('capacity = "100"', "tiers.free.capacity", 'a finite number > 0, got a string ("100")'),
        ("capacity = inf", "tiers.free.capacity", "a finite number > 0, got a float (inf)"),
        ('mode = "loud"', "tiers.free.mode", 'one of "enforce", "shadow", "off", got a string'),
        ('algorithm = "lru"', "tiers.free.algorithm", 'got a string ("lru")'),
        ("operations = 5", "tiers.free.operations", "a table, got an integer (5)"),
        (
            "operations = { Export = 5 }",
            "tiers.free.operations.Export",
            "a table, got an integer (5)",
        ),
        (
            "operations = { Export = { capacity = 1, refill_per_second = -1 } }",
            "tiers.free.operations.Export.refill_per_second",
            "a finite number > 0, got -1",
        ),
    ],
)
def test_wrong_tier_value_is_located_and_says_what_was_expected(write, line, key, phrase):
    error = config_error(write(f"[tiers.free]\nrefill_per_second = 50\n{line}\n"))

    assert_located(error, key, 3)
    assert "expected" in error.reason
    assert phrase in error.reason


def test_tiers_that_are_not_tables_are_rejected(write):
    error = config_error(write("[tiers]\nfree = 5\n"))

    assert_located(error, "tiers.free", 2)
    assert error.reason == "expected a table, got an integer (5)"


def test_limits_that_is_not_a_table_is_rejected(write):
    error = config_error(write("\nlimits = 3\n"))

    assert_located(error, "limits", 2)
    assert error.reason == "expected a table, got an integer (3)"


def test_unknown_default_tier_points_at_limits_default_tier_and_lists_tiers(write):
    path = write(
        """\
        [limits]
        mode = "enforce"
        default_tier = "gold"
        """
        + TWO_TIERS
    )

    error = config_error(path)

    assert_located(error, "limits.default_tier", 3)
    assert error.reason == 'no tier named "gold"; expected one of: "free", "pro"'


def test_implicit_default_tier_missing_from_tiers_is_an_error_at_the_tiers(write):
    error = config_error(write("# plans\n[tiers.pro]\ncapacity = 1\nrefill_per_second = 1\n"))

    # no [limits]: the key is limits.default_tier, the line that of the first [tiers.*]
    assert_located(error, "limits.default_tier", 2)
    assert error.reason == 'no tier named "free" (the default); expected one of: "pro"'


def test_tenant_with_an_unknown_tier_points_at_its_tier_key(write):
    error = config_error(write(TWO_TIERS + '[tenants."big-co"]\n\ntier = "gold"\n'))

    assert_located(error, "tenants.big-co.tier", 13)
    assert error.reason == 'no tier named "gold"; expected one of: "free", "pro"'


def test_tenant_tier_that_is_not_a_string_is_rejected(write):
    error = config_error(write("[tenants.acme]\ntier = 5\n"))

    assert_located(error, "tenants.acme.tier", 2)
    assert error.reason == "expected a non-empty string, got an integer (5)"


def test_tenant_without_a_tier_is_an_error_at_its_table(write):
    error = config_error(write(TWO_TIERS + "[tenants.solo]\ncapacity = 5\n"))

    assert_located(error, "tenants.solo", 11)
    assert error.reason == 'a tenant needs a tier: add tier = "<name>"'


def test_tier_without_quota_keys_is_an_error_at_its_table(write):
    error = config_error(
        write('[tiers.free]\ncapacity = 1\nrefill_per_second = 1\n[tiers.pro]\nmode = "shadow"\n')
    )

    assert_located(error, "tiers.pro", 4)
    assert error.reason == (
        "a tier needs a quota: capacity and refill_per_second for token_bucket"
        " (the default algorithm)"
    )


def test_empty_tiers_table_is_an_error(write):
    error = config_error(write("# none yet\n[tiers]\n"))

    assert_located(error, "tiers", 2)
    assert error.reason == "expected at least one tier ([tiers.<name>])"


def test_window_limits_algorithm_without_tiers_is_an_error(write):
    error = config_error(write('[limits]\nalgorithm = "fixed_window"\n'))

    assert_located(error, "limits.algorithm", 2)
    assert "without [tiers] the only tier is 'free', a bucket" in error.reason


@pytest.mark.parametrize(
    ("lines", "key", "line", "reason"),
    [
        (
            "capacity = 10\nlimit = 5",
            "tiers.free.limit",
            3,
            "token_bucket (the default algorithm) takes capacity and refill_per_second,"
            " not limit; or set algorithm to one that does",
        ),
        (
            'algorithm = "sliding_log"\nlimit = 10\ncapacity = 5',
            "tiers.free.capacity",
            4,
            "sliding_log takes limit and window_seconds, not capacity",
        ),
        (
            'algorithm = "gcra"\ncapacity = 10',
            "tiers.free",
            1,
            "a quota needs capacity and refill_per_second for gcra; missing: refill_per_second",
        ),
        (
            # Quota's own check, which this module leaves to it: blamed on the table
            'algorithm = "fixed_window"\nlimit = 10\nwindow_seconds = 0.0001',
            "tiers.free",
            1,
            "quota 'tenant': window_seconds must be at least 0.001",
        ),
    ],
)
def test_quota_with_the_wrong_or_half_a_pair_is_located(write, lines, key, line, reason):
    error = config_error(write(f"[tiers.free]\n{lines}\n"))

    assert_located(error, key, line)
    assert error.reason == reason


def test_operation_quota_with_the_wrong_pair_names_the_tier_algorithm(write):
    path = write(
        """\
        [tiers.free]
        algorithm = "gcra"
        capacity = 10
        refill_per_second = 1
        [tiers.free.operations]
        Export = { limit = 1, window_seconds = 1 }
        """
    )

    error = config_error(path)

    assert_located(error, "tiers.free.operations.Export.limit", 6)
    assert error.reason.startswith(
        "gcra (from tiers.free.algorithm) takes capacity and refill_per_second, not limit"
    )


def test_tenant_override_must_be_a_complete_quota(write):
    error = config_error(write(TWO_TIERS + "[tenants.half]\ntier = 'pro'\ncapacity = 50\n"))

    assert_located(error, "tenants.half", 11)
    assert error.reason == (
        "a quota needs capacity and refill_per_second for token_bucket"
        " (the algorithm of tier 'pro'); missing: refill_per_second"
    )


def test_tenant_algorithm_alone_is_not_an_override(write):
    error = config_error(write(TWO_TIERS + "[tenants.x]\ntier = 'pro'\nalgorithm = 'gcra'\n"))

    assert_located(error, "tenants.x", 11)
    assert "missing: capacity, refill_per_second" in error.reason


def test_tenant_override_that_no_inherited_algorithm_takes_is_rejected(write):
    path = write(
        """\
        [limits]
        algorithm = "sliding_log"
        default_tier = "w"
        [tiers.w]
        limit = 10
        window_seconds = 1
        [tenants.x]
        tier = "w"
        capacity = 5
        refill_per_second = 1
        """
    )

    error = config_error(path)

    assert_located(error, "tenants.x.capacity", 9)
    assert error.reason.startswith(
        "sliding_log (the algorithm of tier 'w') takes limit and window_seconds, not capacity"
    )


def test_zero_capacity_in_a_tenant_override_points_at_the_key(write):
    error = config_error(
        write(TWO_TIERS + "[tenants.z]\ntier = 'pro'\ncapacity = 0\nrefill_per_second = 1\n")
    )

    assert_located(error, "tenants.z.capacity", 13)
    assert error.reason == "expected a finite number > 0, got 0"


def test_global_with_a_bad_value_or_no_quota_is_located(write):
    negative = config_error(write("[global]\ncapacity = 10\nrefill_per_second = -2\n"))
    empty = config_error(write("# platform\n[global]\n"))

    assert_located(negative, "global.refill_per_second", 3)
    assert negative.reason == "expected a finite number > 0, got -2"
    assert_located(empty, "global", 2)
    assert empty.reason.endswith("missing: capacity, refill_per_second")


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Export-Orders", "tiers.free.operations.Export-Orders"),
        ("1Export", "tiers.free.operations.1Export"),
        ("Export Orders", 'tiers.free.operations."Export Orders"'),
        ("", 'tiers.free.operations.""'),
    ],
)
def test_operation_name_must_be_a_graphql_name(write, name, key):
    path = write(
        f"[tiers.free]\ncapacity = 1\nrefill_per_second = 1\n[tiers.free.operations]\n"
        f'Fine = {{ capacity = 1, refill_per_second = 1 }}\n"{name}" = {{ capacity = 1 }}\n'
    )

    error = config_error(path)

    assert_located(error, key, 6)
    assert error.reason.startswith("expected an operation name (letters, digits and _")
    assert error.reason.endswith(f'got "{name}"')


# --- concurrency limits (max_in_flight) ---------------------------------------------------

IN_FLIGHT = """\
[limits]
lease_ttl = 12.5
concurrency_retry_after = 0.25
[tiers.free]
capacity = 100
refill_per_second = 1
max_in_flight = 4
[tiers.free.fields]
"Query.search" = { max_in_flight = 2 }
"Mutation.export" = { capacity = 10, refill_per_second = 0.1, max_in_flight = 1 }
"Query.products" = { capacity = 50, refill_per_second = 1 }
[tiers.streams]
capacity = 100
refill_per_second = 1
max_in_flight = 2
max_subscriptions_in_flight = 20
[tiers.nostreams]
capacity = 100
refill_per_second = 1
max_subscriptions_in_flight = 0
[tiers.plain]
capacity = 100
refill_per_second = 1
"""


def test_concurrency_limits_are_read_per_tier_and_per_field(write):
    config = load_config(write(IN_FLIGHT))

    assert (config.limits.lease_ttl, config.limits.concurrency_retry_after) == (12.5, 0.25)
    free = config.tiers["free"]
    assert (free.max_in_flight, free.max_subscriptions_in_flight) == (4, None)
    assert free.subscriptions_in_flight == 4  # D5: as max_in_flight unless set
    assert dict(free.fields_in_flight) == {"Query.search": 2, "Mutation.export": 1}
    # a concurrency limit alone is no rate quota; with rate keys it is both
    assert sorted(free.fields) == ["Mutation.export", "Query.products"]
    assert free.fields["Mutation.export"].name == "field:Mutation.export"
    assert free.field_lines == {"Query.search": 9, "Mutation.export": 10, "Query.products": 11}
    streams = config.tiers["streams"]
    assert streams.subscriptions_in_flight == 20
    assert config.tiers["nostreams"].subscriptions_in_flight == 0
    assert config.tiers["nostreams"].max_in_flight is None
    assert in_flight(config.tiers["plain"]) is None  # no limit: nothing for the gate to do
    assert LimitsConfig().lease_ttl == 30.0
    assert LimitsConfig().concurrency_retry_after == 1.0


def test_the_lease_sets_an_operation_takes(write):
    config = load_config(write(IN_FLIGHT))
    free = in_flight(config.tiers["free"])
    assert free is not None
    names = lambda specs: [(spec.name, spec.maximum) for spec in specs]  # noqa: E731
    assert names(free.specs("query", {"Query.products": 1})) == [("tier", 4)]
    assert names(free.specs("mutation", {"Mutation.export": 1, "Query.x": 1})) == [
        ("tier", 4),
        ("field:Mutation.export", 1),
    ]
    assert names(free.specs("subscription", {})) == [("subscriptions", 4)]
    nostreams = in_flight(config.tiers["nostreams"])
    assert nostreams is not None
    assert nostreams.specs("subscription", {}) is None  # refused outright
    assert nostreams.specs("query", {}) == ()  # queries are not limited


@pytest.mark.parametrize(
    ("line", "key", "phrase"),
    [
        ("max_in_flight = 0", "tiers.free.max_in_flight", "an integer >= 1, got 0"),
        ("max_in_flight = 2.5", "tiers.free.max_in_flight", "an integer >= 1, got a float (2.5)"),
        ("max_in_flight = true", "tiers.free.max_in_flight", "got a boolean (true)"),
        ('max_in_flight = "4"', "tiers.free.max_in_flight", 'got a string ("4")'),
        (
            "max_subscriptions_in_flight = -1",
            "tiers.free.max_subscriptions_in_flight",
            "an integer >= 0, got -1",
        ),
        (
            'fields = { "Query.search" = { max_in_flight = 0 } }',
            'tiers.free.fields."Query.search".max_in_flight',
            "an integer >= 1, got 0",
        ),
        (
            'fields = { "Query.search" = { max_in_flight = 1, capacity = 5 } }',
            'tiers.free.fields."Query.search"',
            "missing: refill_per_second",
        ),
    ],
)
def test_wrong_concurrency_values_are_located(write, line, key, phrase):
    error = config_error(write(f"[tiers.free]\ncapacity = 1\nrefill_per_second = 50\n{line}\n"))

    assert_located(error, key, 4)
    assert phrase in error.reason


@pytest.mark.parametrize(
    ("line", "key", "phrase"),
    [
        ("lease_ttl = 0.5", "limits.lease_ttl", "seconds from 1 to 3600, got 0.5"),
        ("lease_ttl = 3601", "limits.lease_ttl", "from 1 to 3600, got 3601"),
        ('lease_ttl = "30s"', "limits.lease_ttl", 'got a string ("30s")'),
        ("lease_ttl = nan", "limits.lease_ttl", "got a float (nan)"),
        (
            "concurrency_retry_after = 0",
            "limits.concurrency_retry_after",
            "above 0 and at most 60, got 0",
        ),
        ("concurrency_retry_after = 61", "limits.concurrency_retry_after", "got 61"),
        ("concurrency_retry_after = false", "limits.concurrency_retry_after", "a boolean"),
    ],
)
def test_wrong_lease_settings_are_located(write, line, key, phrase):
    error = config_error(write(f"# limiter\n[limits]\n{line}\n# end\n"))

    assert_located(error, key, 3)
    assert phrase in error.reason


def test_a_misspelt_concurrency_key_gets_a_suggestion(write):
    error = config_error(
        write(
            "[tiers.free]\ncapacity = 1\nrefill_per_second = 1\n[tiers.free.fields]\n"
            '"Query.search" = { max_inflight = 2 }\n'
        )
    )
    assert_located(error, 'tiers.free.fields."Query.search".max_inflight', 5)
    assert "did you mean 'max_in_flight'?" in error.reason
    error = config_error(
        write("[tiers.free]\ncapacity = 1\nrefill_per_second = 1\nmax_inflight = 2\n")
    )
    assert_located(error, "tiers.free.max_inflight", 4)
    assert "did you mean 'max_in_flight'?" in error.reason


def test_a_field_limit_on_a_field_the_schema_lacks_is_located(write):
    from graphql import build_schema

    config = load_config(write(IN_FLIGHT))
    schema = build_schema(
        "type Query { search: String products: [String] } type Mutation { exportOrders: Int }"
    )
    with pytest.raises(ConfigError) as info:
        check_fields(config, schema)
    assert_located(info.value, 'tiers.free.fields."Mutation.export"', 10)
    assert "did you mean 'Mutation.exportOrders'?" in info.value.reason
    schema = build_schema(
        "type Query { search: String products: [String] } type Mutation { export: Int }"
    )
    check_fields(config, schema)  # every coordinate, with or without a rate quota, exists


@pytest.mark.parametrize(
    ("field", "value", "phrase"),
    [
        ("max_in_flight", 0, "max_in_flight must be an integer >= 1"),
        ("max_in_flight", True, "max_in_flight must be an integer >= 1"),
        ("max_subscriptions_in_flight", -2, "max_subscriptions_in_flight must be an integer >= 0"),
        ("fields_in_flight", {"Query.a": 0}, "Query.a max_in_flight must be an integer >= 1"),
    ],
)
def test_tier_concurrency_built_by_hand_is_checked(field, value, phrase):
    quota = Quota("tenant", capacity=1, refill_per_second=1)
    with pytest.raises(ConfigError, match=phrase):
        TierConfig("free", quota, **{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [("lease_ttl", 0.9), ("lease_ttl", 4000), ("concurrency_retry_after", 0), ("lease_ttl", True)],
)
def test_lease_settings_built_by_hand_are_checked(field, value):
    with pytest.raises(ConfigError, match=field):
        LimitsConfig(**{field: value})
