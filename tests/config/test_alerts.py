"""Tests for the ``[alerts]`` table: the thresholds of the generated Prometheus alert rules."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from quotaql.config import AlertsConfig, Config, default_config, load_config
from quotaql.errors import ConfigError
from quotaql.instrumentation.names import CHECK_LATENCY_ALERT_SECONDS

FULL = """\
[tiers.free]
capacity = 10
refill_per_second = 1

[alerts]
runbook_base_url = "https://wiki.example.com/quotaql/runbook"
rate_window = "2m"
blocked_ratio = 0.35
blocked_ratio_min_rate = 2
blocked_ratio_for = "15m"
block_spike_factor = 5
block_spike_min_rate = 0.5
block_spike_window = "30m"
block_spike_offset = "1w"
block_spike_for = "0s"
check_latency_p99_seconds = 0.05
check_latency_for = "1h30m"
backend_errors_per_second = 0
backend_errors_for = "90s"
failing_window = "1m"
failing_for = "500ms"
circuit_open_for = "2m"
many_tenants_limited = 3
many_tenants_limited_for = "20m"
delay_p99_seconds = 5
delays_long_for = "30m"
delay_process_full_for = "0s"
variable_values_refused_per_second = 0.5
variable_values_refused_for = "1h"
metrics_absent_for = "1d"
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


# --- valid tables --------------------------------------------------------------------------


def test_every_key_parses_to_its_exact_value(write):
    alerts = load_config(write(FULL)).alerts

    assert alerts == AlertsConfig(
        runbook_base_url="https://wiki.example.com/quotaql/runbook",
        rate_window="2m",
        blocked_ratio=0.35,
        blocked_ratio_min_rate=2.0,
        blocked_ratio_for="15m",
        block_spike_factor=5.0,
        block_spike_min_rate=0.5,
        block_spike_window="30m",
        block_spike_offset="1w",
        block_spike_for="0s",
        check_latency_p99_seconds=0.05,
        check_latency_for="1h30m",
        backend_errors_per_second=0.0,
        backend_errors_for="90s",
        failing_window="1m",
        failing_for="500ms",
        circuit_open_for="2m",
        many_tenants_limited=3,
        many_tenants_limited_for="20m",
        delay_p99_seconds=5.0,
        delays_long_for="30m",
        delay_process_full_for="0s",
        variable_values_refused_per_second=0.5,
        variable_values_refused_for="1h",
        metrics_absent_for="1d",
    )
    # TOML integers become floats where a number is expected, so equality is predictable.
    assert type(alerts.blocked_ratio_min_rate) is float
    assert type(alerts.block_spike_factor) is float
    assert type(alerts.many_tenants_limited) is int
    assert type(alerts.delay_p99_seconds) is float


def test_defaults_are_documented_values():
    alerts = AlertsConfig()

    assert alerts.runbook_base_url == (
        "https://github.com/quotaql/quotaql/blob/main/docs/runbook.md"
    )
    assert (alerts.blocked_ratio, alerts.blocked_ratio_for) == (0.2, "10m")
    assert (alerts.block_spike_factor, alerts.block_spike_min_rate) == (3.0, 1.0)
    assert (alerts.block_spike_window, alerts.block_spike_offset) == ("10m", "1d")
    assert alerts.check_latency_p99_seconds == CHECK_LATENCY_ALERT_SECONDS == 0.025
    assert alerts.backend_errors_per_second == 0.1
    assert alerts.many_tenants_limited == 10
    assert (alerts.delay_p99_seconds, alerts.delays_long_for) == (1.0, "10m")
    assert alerts.delay_process_full_for == "5m"
    assert (alerts.variable_values_refused_per_second, alerts.variable_values_refused_for) == (
        0.0,
        "15m",
    )
    assert alerts.redis_eviction_refused_for == "1m"
    # every field is documented in the class docstring
    for field in dataclasses.fields(AlertsConfig):
        assert f"{field.name}:" in (AlertsConfig.__doc__ or ""), field.name


@pytest.mark.parametrize("text", ["", "[alerts]\n", "[cost]\nmax_depth = 3\n"])
def test_a_file_without_alert_keys_gives_the_defaults(write, text):
    assert load_config(write(text)).alerts == AlertsConfig()


def test_default_config_and_a_config_built_by_hand_have_default_alerts():
    config = default_config()

    assert config.alerts == AlertsConfig()
    by_hand = Config(config.cost, config.limits, config.tiers, config.tenants, None)
    assert by_hand.alerts == AlertsConfig()


def test_some_keys_keep_the_defaults_of_the_others(write):
    alerts = load_config(write('[alerts]\nblocked_ratio = 0.5\nfailing_for = "10m"\n')).alerts

    assert alerts == AlertsConfig(blocked_ratio=0.5, failing_for="10m")


def test_inline_table_form_is_read(write):
    alerts = load_config(write('alerts = { many_tenants_limited = 4, rate_window = "1m" }\n'))

    assert alerts.alerts == AlertsConfig(many_tenants_limited=4, rate_window="1m")


@pytest.mark.parametrize(
    "duration", ["1m", "30s", "1h30m", "2d", "1w", "1y", "250ms", "1d12h", "1h0m0s", "0s"]
)
def test_prometheus_durations_are_accepted_for_a_for(write, duration):
    alerts = load_config(write(f'[alerts]\nblocked_ratio_for = "{duration}"\n')).alerts

    assert alerts.blocked_ratio_for == duration


def test_blocked_ratio_of_one_is_accepted(write):
    assert load_config(write("[alerts]\nblocked_ratio = 1\n")).alerts.blocked_ratio == 1.0


def test_alerts_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        AlertsConfig().blocked_ratio = 0.5  # type: ignore[misc]


# --- errors --------------------------------------------------------------------------------

DURATION = 'a Prometheus duration such as "0s", "5m" or "1h30m"'
WINDOW = 'a Prometheus duration > 0 such as "30s", "5m" or "1h30m"'


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("blocked_ratio = 0", "expected a number > 0 and <= 1, got an integer (0)"),
        ("blocked_ratio = 1.5", "expected a number > 0 and <= 1, got a float (1.5)"),
        ('blocked_ratio = "20%"', 'expected a number > 0 and <= 1, got a string ("20%")'),
        ("blocked_ratio = nan", "expected a number > 0 and <= 1, got a float (nan)"),
        ("blocked_ratio_min_rate = -1", "expected a finite number >= 0, got an integer (-1)"),
        ("block_spike_factor = 0", "expected a finite number > 0, got an integer (0)"),
        ("block_spike_factor = true", "expected a finite number > 0, got a boolean (true)"),
        ("block_spike_min_rate = inf", "expected a finite number >= 0, got a float (inf)"),
        ("check_latency_p99_seconds = -0.5", "expected a finite number > 0, got a float (-0.5)"),
        ("delay_p99_seconds = 0", "expected a finite number > 0, got an integer (0)"),
        ('delay_p99_seconds = "1s"', 'expected a finite number > 0, got a string ("1s")'),
        ('delays_long_for = "10"', f'expected {DURATION}, got a string ("10")'),
        ("delay_process_full_for = 300", f"expected {DURATION}, got an integer (300)"),
        ("backend_errors_per_second = -0.1", "expected a finite number >= 0, got a float (-0.1)"),
        ("many_tenants_limited = 0", "expected an integer >= 1, got an integer (0)"),
        ("many_tenants_limited = 2.5", "expected an integer >= 1, got a float (2.5)"),
        ("many_tenants_limited = false", "expected an integer >= 1, got a boolean (false)"),
        ('blocked_ratio_for = "10 m"', f'expected {DURATION}, got a string ("10 m")'),
        ('blocked_ratio_for = "1.5h"', f'expected {DURATION}, got a string ("1.5h")'),
        ('blocked_ratio_for = "5min"', f'expected {DURATION}, got a string ("5min")'),
        ('blocked_ratio_for = "m"', f'expected {DURATION}, got a string ("m")'),
        ('blocked_ratio_for = "30s5m"', f'expected {DURATION}, got a string ("30s5m")'),
        ('blocked_ratio_for = ""', f'expected {DURATION}, got a string ("")'),
        ("blocked_ratio_for = 600", f"expected {DURATION}, got an integer (600)"),
        ('rate_window = "0s"', f'expected {WINDOW}, got a string ("0s")'),
        ('block_spike_window = "0m0s"', f'expected {WINDOW}, got a string ("0m0s")'),
        ('block_spike_offset = "yesterday"', f'expected {WINDOW}, got a string ("yesterday")'),
        ('failing_window = "-2m"', f'expected {WINDOW}, got a string ("-2m")'),
        (
            'runbook_base_url = "https://example.com/runbook.md#top"',
            "expected a non-empty URL without a #fragment (each alert adds its section's),"
            ' got a string ("https://example.com/runbook.md#top")',
        ),
        (
            'runbook_base_url = ""',
            "expected a non-empty URL without a #fragment (each alert adds its section's),"
            ' got a string ("")',
        ),
        (
            'runbook_base_url = "https://example.com/run book"',
            "expected a non-empty URL without a #fragment (each alert adds its section's),"
            ' got a string ("https://example.com/run book")',
        ),
    ],
)
def test_a_wrong_value_names_file_key_line_and_what_was_expected(write, line, expected):
    key = line.split(" = ")[0]
    error = config_error(write(f'# thresholds\n[alerts]\nmetrics_absent_for = "5m"\n{line}\n'))

    assert_located(error, f"alerts.{key}", 4)
    assert error.reason == expected


def test_unknown_key_suggests_the_closest_one(write):
    error = config_error(write("[alerts]\nblocked_ratio = 0.3\nblocked_ration = 0.3\n"))

    assert_located(error, "alerts.blocked_ration", 3)
    assert error.reason == "unknown key; did you mean 'blocked_ratio'?"


def test_unknown_key_without_a_close_match_lists_the_keys(write):
    error = config_error(write("[alerts]\nseverity = 'page'\n"))

    assert_located(error, "alerts.severity", 2)
    assert error.reason.startswith("unknown key; expected one of: 'runbook_base_url', ")
    assert error.reason.endswith("'metrics_absent_for', 'redis_eviction_refused_for'")


def test_alerts_that_is_not_a_table_is_rejected(write):
    error = config_error(write("alerts = 3\n"))

    assert_located(error, "alerts", 1)
    assert error.reason == "expected a table, got an integer (3)"


def test_an_unknown_table_hint_lists_alerts(write):
    error = config_error(write("[alert]\nblocked_ratio = 0.3\n"))

    assert error.reason == "unknown table; did you mean 'alerts'?"


def test_error_in_inline_table_points_at_its_line(write):
    error = config_error(
        write('# thresholds\n\nalerts = { rate_window = "5m", blocked_ratio = 2 }\n')
    )

    assert_located(error, "alerts.blocked_ratio", 3)
    assert error.reason == "expected a number > 0 and <= 1, got an integer (2)"


@pytest.mark.parametrize(
    ("field", "value", "phrase"),
    [
        ("blocked_ratio", 1.5, r"blocked_ratio must be a number > 0 and <= 1, got a float \(1.5\)"),
        (
            "rate_window",
            "0s",
            r'rate_window must be a Prometheus duration > 0 .*, got a string \("0s"\)',
        ),
        ("failing_for", "3 min", r"failing_for must be a Prometheus duration such as"),
        ("many_tenants_limited", 1.0, r"many_tenants_limited must be an integer >= 1"),
        (
            "runbook_base_url",
            "x#y",
            r"runbook_base_url must be a non-empty URL without a #fragment",
        ),
        (
            "backend_errors_per_second",
            -1,
            r"backend_errors_per_second must be a finite number >= 0",
        ),
    ],
)
def test_alerts_config_built_by_hand_is_checked(field, value, phrase):
    with pytest.raises(ConfigError, match=phrase):
        AlertsConfig(**{field: value})


def test_alerts_config_built_by_hand_takes_integers_as_floats():
    alerts = AlertsConfig(blocked_ratio=1, block_spike_factor=2)

    assert (alerts.blocked_ratio, alerts.block_spike_factor) == (1.0, 2.0)
    assert type(alerts.blocked_ratio) is float


def test_the_known_keys_are_exactly_the_fields(write):
    error = config_error(write("[alerts]\nzzz = 1\n"))

    listed = error.reason.removeprefix("unknown key; expected one of: ").split(", ")
    assert listed == [repr(field.name) for field in dataclasses.fields(AlertsConfig)]
