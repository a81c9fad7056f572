"""Tests for the generated Prometheus alert rules, their promtool unit tests and the runbook."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from quotaql.config import AlertsConfig, load_config
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import DELAY_BUCKETS
from quotaql.observability.alerts import (
    ALERT_NAMES,
    HEADER,
    RULES_FILE,
    alert_rules,
    render_rules,
    runbook_anchor,
    write_alerts,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "quotaql.rules.yml"
RULE_TESTS = ROOT / "alerts" / "quotaql.rules.test.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"
REGENERATE = (
    "regenerate it: quotaql alerts --out alerts/  (or: .venv/bin/python -c"
    " 'from pathlib import Path; from quotaql.observability.alerts import write_alerts;"
    ' write_alerts(Path("alerts"))\')'
)

#: Every metric name names.py defines.
METRICS = {
    value
    for key, value in vars(names).items()
    if key.isupper() and isinstance(value, str) and value.startswith("quotaql_")
} - {names.LOG_EVENT}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
#: Labels quotaql defines, and those Prometheus adds (the scrape's, the histogram buckets').
LABELS = {
    value for key, value in vars(names).items() if key.startswith("LABEL_") and type(value) is str
} | {"job", "instance", "le"}


def rules_of(rules: dict) -> list[dict]:
    (group,) = rules["groups"]
    assert group["name"] == "quotaql"
    return group["rules"]


def promtool(*args: str | Path) -> str:
    """Run promtool; fail (not skip) when it is missing, with how to install it."""
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail(
            "promtool not found: it comes with the prometheus package"
            " (scripts/ensure-system-deps.sh installs it; or apt-get install prometheus)"
        )
    result = subprocess.run(
        [binary, *map(str, args)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"promtool {args}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (outside code blocks)."""
    anchors = set()
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.*)", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", match[1].strip().lower()).replace(" ", "-"))
    return anchors


# --- the committed file --------------------------------------------------------------------


def test_committed_rules_are_exactly_what_the_generator_writes(tmp_path):
    written = write_alerts(tmp_path / "out")

    assert written == tmp_path / "out" / RULES_FILE
    assert RULES.exists(), f"alerts/quotaql.rules.yml is missing: {REGENERATE}"
    assert RULES.read_bytes() == written.read_bytes(), (
        f"alerts/quotaql.rules.yml differs from the generator's output: {REGENERATE}"
    )


def test_rendering_is_deterministic_and_ends_with_one_newline():
    first = render_rules(alert_rules())

    assert first == render_rules(alert_rules(AlertsConfig()))
    assert first.startswith(HEADER + "\ngroups:\n")
    assert first.endswith("\n")
    assert not first.endswith("\n\n")
    assert "\t" not in first
    assert all(line == line.rstrip() for line in first.splitlines())


def test_write_alerts_creates_the_directory_and_overwrites(tmp_path):
    out = tmp_path / "a" / "b"
    write_alerts(out, AlertsConfig(blocked_ratio=0.9))
    path = write_alerts(out)

    assert path.read_text(encoding="utf-8") == render_rules(alert_rules())


# --- every alert ---------------------------------------------------------------------------


def test_the_alerts_are_the_issue_s_list_in_order():
    assert [rule["alert"] for rule in rules_of(alert_rules())] == list(ALERT_NAMES)
    assert ALERT_NAMES == (
        "QuotaqlBlockedRatioHigh",
        "QuotaqlBlockSpike",
        "QuotaqlCheckLatencyHigh",
        "QuotaqlBackendErrors",
        "QuotaqlFailingOpen",
        "QuotaqlFailingClosed",
        "QuotaqlCircuitOpen",
        "QuotaqlManyTenantsLimited",
        "QuotaqlAnonymousRequests",
        "QuotaqlUnknownApiKeys",
        "QuotaqlUnverifiedApiKeys",
        "QuotaqlAdaptiveEngaged",
        "QuotaqlLeasesExpired",
        "QuotaqlRefundsLost",
        "QuotaqlDelaysLong",
        "QuotaqlDelayProcessFull",
        "QuotaqlMemoryOverflow",
        "QuotaqlVariableValuesRefused",
        "QuotaqlTimeQuotaRefusing",
        "QuotaqlMetricsAbsent",
        "QuotaqlRedisEvictionRefused",
        "QuotaqlConfigDrift",
    )
    assert all(re.fullmatch(r"Quotaql(?:[A-Z][a-z]+)+", name) for name in ALERT_NAMES)


@pytest.mark.parametrize("rule", rules_of(alert_rules()), ids=ALERT_NAMES)
def test_every_alert_has_severity_summary_description_and_runbook(rule):
    assert list(rule) == ["alert", "expr", "for", "labels", "annotations"]
    assert rule["labels"] == {"severity": rule["labels"]["severity"]}
    assert rule["labels"]["severity"] in ("warning", "critical")
    annotations = rule["annotations"]
    assert list(annotations) == ["summary", "description", "runbook_url"]
    assert all(isinstance(text, str) and text.strip() for text in annotations.values())
    assert "{{" in annotations["description"] or rule["alert"] == "QuotaqlMetricsAbsent"
    assert annotations["runbook_url"] == (
        f"{AlertsConfig().runbook_base_url}#{rule['alert'].lower()}"
    )


@pytest.mark.parametrize("rule", rules_of(alert_rules()), ids=ALERT_NAMES)
def test_every_metric_in_every_expr_is_defined_in_names(rule):
    used = set(re.findall(r"\b(quotaql_\w+)", rule["expr"]))

    assert used
    for metric in used:
        base = next(
            (metric.removesuffix(s) for s in HISTOGRAM_SUFFIXES if metric.endswith(s)), metric
        )
        assert metric in METRICS or base in METRICS, f"{metric} is not in names.py"
    # no metric other than quotaql's: every selector is one of them
    selectors = re.findall(r"([A-Za-z_:][\w:]*)\s*(?:\{|\[)", rule["expr"])
    assert all(name.startswith("quotaql_") for name in selectors), selectors


@pytest.mark.parametrize("rule", rules_of(alert_rules()), ids=ALERT_NAMES)
def test_every_label_in_every_expr_is_defined_in_names_or_by_prometheus(rule):
    expr = rule["expr"]
    grouped = [
        label.strip()
        for labels in re.findall(r"\bby \(([^)]*)\)", expr)
        for label in labels.split(",")
    ]
    matched = re.findall(r"(\w+)\s*(?:=|!=|=~|!~)\s*\"", expr)
    assert set(grouped + matched) <= LABELS
    values = set(re.findall(r"(?:=|!=)\"([^\"]*)\"", expr))
    values.update(
        value
        for alternatives in re.findall(r"(?:=~|!~)\"([^\"]*)\"", expr)
        for value in alternatives.split("|")
    )
    assert values <= {
        *names.DECISIONS,
        *names.IDENTITY_SOURCES,
        names.OTHER_TENANT,
        *names.LEASE_OUTCOMES,
        *names.REFUND_OUTCOMES,
        *names.DELAY_REFUSED_REASONS,
        *names.REJECTION_CODES,
        names.QUOTA_TIME,
    }


def test_the_exprs_compare_with_the_default_thresholds():
    exprs = {rule["alert"]: rule["expr"] for rule in rules_of(alert_rules())}

    assert "> 0.2\nand\n" in exprs["QuotaqlBlockedRatioHigh"]
    assert exprs["QuotaqlBlockedRatioHigh"].endswith("> 0.1")
    assert "> 3 * sum by (job)" in exprs["QuotaqlBlockSpike"]
    assert "[10m] offset 1d))" in exprs["QuotaqlBlockSpike"]
    assert "unless sum by (job)" in exprs["QuotaqlBlockSpike"]
    assert exprs["QuotaqlBlockSpike"].endswith(")\n> 1")
    assert exprs["QuotaqlCheckLatencyHigh"].startswith("histogram_quantile(0.99, ")
    assert exprs["QuotaqlCheckLatencyHigh"].endswith(f"> {names.CHECK_LATENCY_ALERT_SECONDS}")
    assert exprs["QuotaqlBackendErrors"].endswith("> 0.1")
    assert 'decision="fail_open"}[2m]' in exprs["QuotaqlFailingOpen"]
    assert 'decision="fail_closed"}[2m]' in exprs["QuotaqlFailingClosed"]
    assert 'tenant!="other"' in exprs["QuotaqlManyTenantsLimited"]
    assert exprs["QuotaqlManyTenantsLimited"].endswith(">= 10")
    assert exprs["QuotaqlAnonymousRequests"] == (
        'sum by (job) (rate(quotaql_identity_total{source="anonymous"}[5m]))\n  > 0'
    )
    assert exprs["QuotaqlUnknownApiKeys"] == (
        "sum by (job) (rate(quotaql_identity_total"
        '{source=~"unknown_key|rejected_key|limited_key"}[5m]))\n  > 0.1'
    )
    assert exprs["QuotaqlUnverifiedApiKeys"] == (
        'sum by (job) (rate(quotaql_identity_total{source="unverified_key"}[5m]))\n  > 0'
    )
    assert exprs["QuotaqlAdaptiveEngaged"] == f"max by (job) ({names.ADAPTIVE_ENGAGED})\n  > 0"
    assert exprs["QuotaqlLeasesExpired"] == (
        'sum by (job) (rate(quotaql_leases_total{outcome="expired"}[5m]))\n  > 0'
    )
    assert exprs["QuotaqlRefundsLost"] == (
        'sum by (job) (increase(quotaql_refunds_total{outcome=~"lost|unknown"}[10m]))\n  > 0'
    )
    assert exprs["QuotaqlDelaysLong"] == (
        "histogram_quantile(0.99, sum by (job, le) (rate(quotaql_delay_seconds_bucket[5m])))\n  > 1"
    )
    assert exprs["QuotaqlDelayProcessFull"] == (
        'sum by (job) (rate(quotaql_delay_refused_total{reason="process_full"}[5m]))\n  > 0'
    )
    assert exprs["QuotaqlMemoryOverflow"] == (
        "sum by (job) (rate(quotaql_overflow_total[5m]))\n  > 0"
    )
    assert exprs["QuotaqlVariableValuesRefused"] == (
        'sum by (job) (rate(quotaql_rejections_total{code="TOO_MANY_VARIABLE_VALUES"}[5m]))\n  > 0'
    )
    assert exprs["QuotaqlMetricsAbsent"] == f"absent({names.BUILD_INFO})"


def test_the_delay_alerts_defaults_are_a_bucket_edge_and_the_issue_s_durations():
    """1s is an edge of quotaql_delay_seconds: "p99 above 1s" is exact, not interpolated
    inside a bucket; the delay alerts wait 10m and 5m."""
    rules = {rule["alert"]: rule for rule in rules_of(alert_rules())}
    config = AlertsConfig()

    assert config.delay_p99_seconds == 1.0
    assert config.delay_p99_seconds in DELAY_BUCKETS
    assert rules["QuotaqlDelaysLong"]["for"] == config.delays_long_for == "10m"
    assert rules["QuotaqlDelayProcessFull"]["for"] == config.delay_process_full_for == "5m"
    assert rules["QuotaqlDelaysLong"]["labels"] == {"severity": "warning"}
    assert rules["QuotaqlDelayProcessFull"]["labels"] == {"severity": "warning"}
    assert names.DELAY_PROCESS_FULL in names.DELAY_REFUSED_REASONS
    assert "above 1s" in rules["QuotaqlDelaysLong"]["annotations"]["description"]
    quarter = {r["alert"]: r for r in rules_of(alert_rules(AlertsConfig(delay_p99_seconds=0.25)))}
    assert "above 250ms" in quarter["QuotaqlDelaysLong"]["annotations"]["description"]
    assert quarter["QuotaqlDelaysLong"]["expr"].endswith("> 0.25")


def test_the_identity_alerts_wait_longer_than_their_window_by_default():
    """A stray anonymous request or unknown key keeps the rate above 0 for one window: the
    ``for`` must be longer for such a request to stay quiet."""
    rules = {rule["alert"]: rule for rule in rules_of(alert_rules())}
    config = AlertsConfig()

    assert config.anonymous_per_second == 0
    assert (config.rate_window, rules["QuotaqlAnonymousRequests"]["for"]) == ("5m", "10m")
    assert rules["QuotaqlUnknownApiKeys"]["for"] == "5m"
    assert rules["QuotaqlUnverifiedApiKeys"]["for"] == "5m"
    # A threshold above 0 is quoted in the description; 0 ("any") is not.
    described = alert_rules(AlertsConfig(anonymous_per_second=0.5))
    (anonymous,) = [r for r in rules_of(described) if r["alert"] == "QuotaqlAnonymousRequests"]
    assert "above 0.5/s" in anonymous["annotations"]["description"]
    assert anonymous["expr"].endswith("> 0.5")
    assert "above 0/s" not in rules["QuotaqlAnonymousRequests"]["annotations"]["description"]


# --- the runbook ---------------------------------------------------------------------------


def test_every_runbook_url_anchor_is_a_heading_of_the_runbook():
    anchors = github_anchors(RUNBOOK.read_text(encoding="utf-8"))

    for rule in rules_of(alert_rules()):
        url = rule["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base.endswith("docs/runbook.md")
        assert anchor in anchors, f"{rule['alert']}: no heading #{anchor} in docs/runbook.md"


def test_every_alert_has_its_own_section_named_after_it():
    headings = re.findall(r"^## (\S+)$", RUNBOOK.read_text(encoding="utf-8"), re.MULTILINE)

    assert [h for h in headings if h.startswith("Quotaql")] == list(ALERT_NAMES)
    assert runbook_anchor("QuotaqlBlockSpike") == "quotaqlblockspike"
    assert runbook_anchor("Many tenants: `at once`!") == "many-tenants-at-once"


def test_the_runbook_s_own_links_resolve_and_it_runs_no_python():
    text = RUNBOOK.read_text(encoding="utf-8")
    anchors = github_anchors(text)

    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links
    assert set(links) <= anchors
    assert "```python" not in text  # tests/docs/test_snippets.py would run it


def test_the_runbook_shows_every_alerts_key():
    text = RUNBOOK.read_text(encoding="utf-8")

    for key in AlertsConfig.__dataclass_fields__:
        assert re.search(rf"^{key} = ", text, re.MULTILINE), key


# --- promtool ------------------------------------------------------------------------------


def test_promtool_checks_the_committed_rules():
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in promtool("check", "rules", RULES)


def test_promtool_unit_tests_pass():
    assert "SUCCESS" in promtool("test", "rules", RULE_TESTS)


def test_the_unit_tests_cover_each_alert_firing_and_staying_quiet():
    text = RULE_TESTS.read_text(encoding="utf-8")
    cases = re.findall(r"alertname: (\w+)\n\s+exp_alerts:( \[\]|\n\s+- exp_labels:)", text)

    assert {name for name, exp in cases if exp != " []"} == set(ALERT_NAMES)
    assert {name for name, exp in cases if exp == " []"} == set(ALERT_NAMES)
    assert "rule_files:\n  - quotaql.rules.yml\n" in text


CUSTOM = """\
[alerts]
runbook_base_url = "https://wiki.example.com/ops/quotaql.md"
rate_window = "3m"
blocked_ratio = 0.35
blocked_ratio_min_rate = 2.5
blocked_ratio_for = "20m"
block_spike_factor = 4.5
block_spike_min_rate = 7
block_spike_window = "30m"
block_spike_offset = "1w"
block_spike_for = "15m"
check_latency_p99_seconds = 0.1
check_latency_for = "1h"
backend_errors_per_second = 0
backend_errors_for = "2m"
failing_window = "4m"
failing_for = "6m"
circuit_open_for = "45s"
many_tenants_limited = 25
many_tenants_limited_for = "30m"
anonymous_per_second = 0.25
anonymous_for = "20m"
unknown_keys_per_second = 2
unknown_keys_for = "15m"
unverified_keys_for = "1h"
adaptive_engaged_for = "3m"
leases_expired_for = "25m"
refunds_lost_window = "30m"
refunds_lost_for = "2m"
delay_p99_seconds = 2.5
delays_long_for = "20m"
delay_process_full_for = "1m"
memory_overflow_for = "40m"
variable_values_refused_per_second = 0.02
variable_values_refused_for = "40m"
time_refusals_per_second = 0.5
time_refusals_for = "40m"
metrics_absent_for = "1h30m"
redis_eviction_refused_for = "5m"
"""


def test_thresholds_from_an_alerts_table_end_up_in_the_rules(tmp_path):
    config_file = tmp_path / "quotaql.toml"
    config_file.write_text(textwrap.dedent(CUSTOM), encoding="utf-8")
    rules = {rule["alert"]: rule for rule in rules_of(alert_rules(load_config(config_file).alerts))}
    expr = {name: rule["expr"] for name, rule in rules.items()}
    for_ = {name: rule["for"] for name, rule in rules.items()}

    assert "rate(quotaql_requests_total[3m])" in expr["QuotaqlBlockedRatioHigh"]
    assert "> 0.35\nand\n" in expr["QuotaqlBlockedRatioHigh"]
    assert expr["QuotaqlBlockedRatioHigh"].endswith("> 2.5")
    assert "> 4.5 * sum by (job)" in expr["QuotaqlBlockSpike"]
    assert '{decision=~"blocked|denied"}[30m] offset 1w))' in expr["QuotaqlBlockSpike"]
    assert expr["QuotaqlBlockSpike"].endswith("> 7")
    assert "[3m]" in expr["QuotaqlCheckLatencyHigh"]
    assert expr["QuotaqlCheckLatencyHigh"].endswith("> 0.1")
    assert expr["QuotaqlBackendErrors"].endswith("[3m]))\n  > 0")
    assert 'decision="fail_open"}[4m]' in expr["QuotaqlFailingOpen"]
    assert 'decision="fail_closed"}[4m]' in expr["QuotaqlFailingClosed"]
    assert expr["QuotaqlManyTenantsLimited"].endswith(">= 25")
    assert expr["QuotaqlAnonymousRequests"].endswith("[3m]))\n  > 0.25")
    assert expr["QuotaqlUnknownApiKeys"].endswith("[3m]))\n  > 2")
    assert expr["QuotaqlUnverifiedApiKeys"].endswith("[3m]))\n  > 0")
    assert expr["QuotaqlLeasesExpired"].endswith("[3m]))\n  > 0")
    assert expr["QuotaqlRefundsLost"].endswith("[30m]))\n  > 0")
    assert expr["QuotaqlDelaysLong"].endswith("_bucket[3m])))\n  > 2.5")
    assert expr["QuotaqlDelayProcessFull"].endswith("[3m]))\n  > 0")
    assert expr["QuotaqlMemoryOverflow"].endswith("[3m]))\n  > 0")
    assert expr["QuotaqlVariableValuesRefused"].endswith("[3m]))\n  > 0.02")
    assert expr["QuotaqlTimeQuotaRefusing"].endswith('{quota="time"}[3m]))\n  > 0.5')
    assert for_ == {
        "QuotaqlBlockedRatioHigh": "20m",
        "QuotaqlBlockSpike": "15m",
        "QuotaqlCheckLatencyHigh": "1h",
        "QuotaqlBackendErrors": "2m",
        "QuotaqlFailingOpen": "6m",
        "QuotaqlFailingClosed": "6m",
        "QuotaqlCircuitOpen": "45s",
        "QuotaqlManyTenantsLimited": "30m",
        "QuotaqlAnonymousRequests": "20m",
        "QuotaqlUnknownApiKeys": "15m",
        "QuotaqlUnverifiedApiKeys": "1h",
        "QuotaqlAdaptiveEngaged": "3m",
        "QuotaqlLeasesExpired": "25m",
        "QuotaqlRefundsLost": "2m",
        "QuotaqlDelaysLong": "20m",
        "QuotaqlDelayProcessFull": "1m",
        "QuotaqlMemoryOverflow": "40m",
        "QuotaqlVariableValuesRefused": "40m",
        "QuotaqlTimeQuotaRefusing": "40m",
        "QuotaqlMetricsAbsent": "1h30m",
        "QuotaqlRedisEvictionRefused": "5m",
        "QuotaqlConfigDrift": "2m",  # no [alerts] key: a reload takes seconds, not minutes
    }
    for name, rule in rules.items():
        assert rule["annotations"]["runbook_url"] == (
            f"https://wiki.example.com/ops/quotaql.md#{name.lower()}"
        )
    # the descriptions quote the thresholds too
    assert (
        "more than 35%, at more than 2.5 operations/s"
        in (rules["QuotaqlBlockedRatioHigh"]["annotations"]["description"])
    )
    assert "above 100ms" in rules["QuotaqlCheckLatencyHigh"]["annotations"]["description"]

    path = write_alerts(tmp_path / "alerts", load_config(config_file).alerts)
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in promtool("check", "rules", path)


def test_tiny_and_large_thresholds_are_written_as_promql_reads_them(tmp_path):
    config = AlertsConfig(
        check_latency_p99_seconds=0.00005, block_spike_factor=1e20, blocked_ratio=1 / 3
    )
    expr = {rule["alert"]: rule["expr"] for rule in rules_of(alert_rules(config))}

    assert expr["QuotaqlCheckLatencyHigh"].endswith("> 5e-05")
    assert "> 100000000000000000000 * " in expr["QuotaqlBlockSpike"]
    assert "> 0.3333333333333333\n" in expr["QuotaqlBlockedRatioHigh"]
    assert "SUCCESS" in promtool("check", "rules", write_alerts(tmp_path, config))


# --- the YAML writer -----------------------------------------------------------------------


def test_yaml_scalars_are_plain_only_when_they_read_back_as_the_same_string():
    text = render_rules(
        {
            "word": "quotaql",
            "dotted-word": "a.b_c-d",
            "keywords": ["yes", "No", "true", "null", "on", "off", "y"],
            "duration": "10m",
            "number-like": "0.5",
            "colon": "a: b",
            "comment": "a #b",
            "quotes": 'say "hi" \\ back',
            "template": "{{ $labels.job }}",
            "unicode": "café – ok",
            "controls": "bell\x07 nbsp\u00a0 line-sep\u2028 astral\U0001f600",
            "tab": "a\tb",
            "empty": "",
            "numbers": [1, 2.5, True, False, None],
            "nothing": {},
            "none": [],
        }
    )

    assert text == HEADER + "\n" + textwrap.dedent(
        """\
        word: quotaql
        dotted-word: a.b_c-d
        keywords:
          - "yes"
          - "No"
          - "true"
          - "null"
          - "on"
          - "off"
          - "y"
        duration: "10m"
        number-like: "0.5"
        colon: "a: b"
        comment: "a #b"
        quotes: "say \\"hi\\" \\\\ back"
        template: "{{ $labels.job }}"
        unicode: "café – ok"
        controls: "bell\\x07 nbsp\\xa0 line-sep\\u2028 astral😀"
        tab: "a\\tb"
        empty: ""
        numbers:
          - 1
          - 2.5
          - true
          - false
          - null
        nothing: {}
        none: []
        """
    )


def test_multiline_strings_are_literal_blocks_unless_they_would_not_read_back():
    text = render_rules(
        {
            "groups": [
                {"expr": "a\n  b\n\nc", "trailing": "a \nb", "indented": " a\nb", "end": "a\nb\n"},
                ["x\ny", "z"],
            ]
        }
    )

    assert text == HEADER + "\n" + textwrap.dedent(
        """\
        groups:
          - expr: |-
              a
                b

              c
            trailing: "a \\nb"
            indented: " a\\nb"
            end: "a\\nb\\n"
          -
            - |-
              x
              y
            - z
        """
    )


def test_yaml_writer_rejects_what_it_cannot_write():
    with pytest.raises(TypeError, match="cannot write set as YAML"):
        render_rules({"a": {1, 2}})
    with pytest.raises(ValueError, match="not a finite number"):
        render_rules({"a": float("nan")})


def test_promtool_reads_back_tricky_annotations(tmp_path):
    """The writer's quoting is YAML that Prometheus reads as the same text."""
    description = 'quotes " and \\ backslash: colon, #hash, {{ $labels.job }}, café'
    rules = {
        "groups": [
            {
                "name": "t",
                "rules": [
                    {
                        "alert": "Tricky",
                        "expr": "vector(1)\n  > 0",
                        "labels": {"severity": "yes"},
                        "annotations": {"description": description},
                    }
                ],
            }
        ]
    }
    (tmp_path / "r.yml").write_text(render_rules(rules), encoding="utf-8")
    (tmp_path / "t.yml").write_text(
        textwrap.dedent(
            """\
            rule_files: [r.yml]
            evaluation_interval: 1m
            tests:
              - interval: 1m
                input_series:
                  - series: 'up{job="api"}'
                    values: '1x5'
                alert_rule_test:
                  - eval_time: 1m
                    alertname: Tricky
                    exp_alerts:
                      - exp_labels: {severity: "yes"}
                        exp_annotations:
                          description: 'quotes " and \\ backslash: colon, #hash, , café'
            """
        ),
        encoding="utf-8",
    )

    assert "SUCCESS" in promtool("test", "rules", tmp_path / "t.yml")


# --- what the alerts print ---------------------------------------------------------------


@pytest.mark.parametrize("rule", rules_of(alert_rules()), ids=ALERT_NAMES)
def test_alert_text_prints_rates_as_plain_decimals_never_si_prefixes(rule):
    """``humanize`` writes 0.3845 as "384.5m": rates and counts are printed with printf."""
    for field in ("summary", "description"):
        text = rule["annotations"][field]
        assert "| humanize }}" not in text, (rule["alert"], field)
        for per_second in re.findall(r"\{\{ ([^}]*) \}\} \w+/s", text):
            assert per_second == 'printf "%.2f" $value', (rule["alert"], per_second)


def test_promtool_renders_small_rates_and_counts_as_an_operator_reads_them(tmp_path):
    """0.3845 failed calls/s read "0.38 calls/s" (humanize wrote "384.5m"), and a drift of two
    configurations "2", in the alerts promtool evaluates from the generated rules."""
    config = AlertsConfig(backend_errors_for="0s")
    (tmp_path / RULES_FILE).write_text(render_rules(alert_rules(config)), encoding="utf-8")
    errors = _texts(config, "QuotaqlBackendErrors", "0.38", job="api", backend="redis")
    drift = _texts(config, "QuotaqlConfigDrift", "2", job="api")
    assert errors[0] == "quotaql storage redis fails 0.38 calls/s"
    assert drift[0] == "api runs 2 different configurations"
    cases = f"""\
rule_files:
  - {RULES_FILE}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'quotaql_backend_errors_total{{job="api", backend="redis", error_type="TimeoutError"}}'
        values: '0+23.07x30'
      - series: 'quotaql_config_info{{job="api", pid="1", digest="aaaaaaaaaaaa"}}'
        values: '1x10'
      - series: 'quotaql_config_info{{job="api", pid="2", digest="bbbbbbbbbbbb"}}'
        values: '1x10'
    alert_rule_test:
      - eval_time: 10m
        alertname: QuotaqlBackendErrors
        exp_alerts:
          - exp_labels: {{severity: warning, job: api, backend: redis}}
            exp_annotations: {_annotations(config, "QuotaqlBackendErrors", errors)}
      - eval_time: 10m
        alertname: QuotaqlConfigDrift
        exp_alerts:
          - exp_labels: {{severity: warning, job: api}}
            exp_annotations: {_annotations(config, "QuotaqlConfigDrift", drift)}
"""
    (tmp_path / "cases.yml").write_text(cases, encoding="utf-8")
    promtool("test", "rules", tmp_path / "cases.yml")


def _texts(config: AlertsConfig, name: str, value: str, **labels: str) -> tuple[str, str]:
    """The summary and description of alert ``name`` with ``labels`` and ``value`` filled in."""
    (rule,) = [r for r in rules_of(alert_rules(config)) if r["alert"] == name]
    texts = []
    for field in ("summary", "description"):
        text = rule["annotations"][field]
        for label, label_value in labels.items():
            text = text.replace(f"{{{{ $labels.{label} }}}}", label_value)
        text = re.sub(r'\{\{ printf "%\.[02]f" \$value \}\}', value, text)
        assert "{{" not in text, text
        texts.append(text)
    return texts[0], texts[1]


def _annotations(config: AlertsConfig, name: str, texts: tuple[str, str]) -> str:
    """The ``exp_annotations`` of ``name`` as a YAML flow mapping (JSON strings)."""
    url = f"{config.runbook_base_url}#{runbook_anchor(name)}"
    summary, description = texts
    return json.dumps({"summary": summary, "description": description, "runbook_url": url})
