"""Staged enforcement (``enforce_share``): a stable share of an enforce tier's subjects is
enforced, the rest run in shadow, and nothing a client sends moves it from one to the other."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.gate import Gate, staging
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + """
type Query { products(first: Int = 10): [Product] @listSize(slicingArguments: ["first"])
             hello: String }
type Product { id: ID name: String }
type Subscription { ticks: Int @cost(weight: "30") }
"""
)
TENANTS = [f"tenant-{i}" for i in range(40)]
TOML = """
[limits]
enforce_share = 0.5
[identity]
trusted_proxies = ["10.0.0.0/8"]
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tiers.calm]
capacity = 100
refill_per_second = 0.001
mode = "shadow"
[tiers.pro]
capacity = 100
refill_per_second = 0.001
enforce_share = 1.0
[tenants.observed]
tier = "calm"
[tenants.everyone]
tier = "pro"
""" + "".join(f'[tenants."{name}"]\ntier = "free"\n' for name in TENANTS)


def scope(peer: str = "203.0.113.9", key: str | None = None, **headers: str) -> dict[str, Any]:
    raw = [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    if key is not None:
        raw.append((b"x-api-key", key.encode()))
    return {"type": "http", "client": (peer, 40000), "headers": raw}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    return path


def both_sides(tier: str = "free") -> tuple[str, str]:
    """A tenant of ``tier`` in the enforced half, and one outside it."""
    inside = [t for t in TENANTS if staging.staged(0.5, tier, f"key:{t}") == "enforced"]
    outside = [t for t in TENANTS if staging.staged(0.5, tier, f"key:{t}") == "shadow"]
    assert inside, "40 tenants: both halves are there"
    assert outside
    return inside[0], outside[0]


# -- the share --------------------------------------------------------------------------------


def test_the_enforced_fraction_is_the_share_and_raising_it_only_adds_subjects() -> None:
    subjects = [f"key:synthetic-{i}" for i in range(10_000)]
    places = {subject: staging.place("free", subject) for subject in subjects}
    enforced = {}
    for share in (0.0, 0.1, 0.3, 0.5, 0.9, 1.0):
        enforced[share] = {s for s in subjects if staging.staged(share, "free", s) == "enforced"}
        assert len(enforced[share]) / len(subjects) == pytest.approx(share, abs=0.02)
    assert not enforced[0.0]
    assert enforced[0.1] <= enforced[0.3] <= enforced[0.5] <= enforced[0.9] <= enforced[1.0]
    assert all(0.0 <= place < 1.0 for place in places.values())
    # Another tier draws its own share: not the same subjects.
    other = {s for s in subjects if staging.staged(0.1, "pro", s) == "enforced"}
    assert len(other & enforced[0.1]) < len(enforced[0.1]) / 2


def test_a_place_is_the_same_in_another_process() -> None:
    """A fixed key, not Python's salted hash: every worker and restart agrees."""
    subjects = ["key:acme", "ip:203.0.113.0/24", "user:42", "ip:2001:db8:1::/48"]
    code = (
        "from quotaql.gate import staging; import sys;"
        f"print(' '.join(repr(staging.place('free', s)) for s in {subjects!r}))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(sys.path)},
    ).stdout.split()
    assert [float(value) for value in found] == [staging.place("free", s) for s in subjects]


def test_a_place_is_the_documented_keyed_hash() -> None:
    """docs/tuning.md gives the recipe: an operator can tell where a tenant stands."""
    digest = hashlib.blake2b(b"4:free:key:acme", digest_size=8, key=b"quotaql.enforce_share.v1")
    assert staging.place("free", "key:acme") == int.from_bytes(digest.digest(), "big") / 2**64
    network = hashlib.blake2b(
        b"4:free:ip:203.0.113.0/24", digest_size=8, key=b"quotaql.enforce_share.v1"
    )
    assert (
        staging.place("free", "ip:203.0.113.9") == int.from_bytes(network.digest(), "big") / 2**64
    )


def test_a_share_of_one_hashes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(tier: str, subject: str) -> float:
        raise AssertionError("hashed on the hot path")

    monkeypatch.setattr(staging, "place", never)
    op = Gate().admit(SCHEMA, parse("{ hello }"), request=scope())
    assert (op.mode, op.staged, op.refused) == (Mode.ENFORCE, None, False)


def test_only_enforce_tiers_are_staged_and_a_tier_may_set_its_own_share(
    config_file: Path,
) -> None:
    gate = Gate(load_config(config_file))
    shadow_tier = gate.admit(SCHEMA, parse("{ hello }"), request=scope(key="observed"))
    assert (shadow_tier.mode, shadow_tier.staged) == (Mode.SHADOW, None)
    own_share = gate.admit(SCHEMA, parse("{ hello }"), request=scope(key="everyone"))
    assert (own_share.mode, own_share.staged) == (Mode.ENFORCE, None)  # pro: enforce_share = 1


def test_the_gate_says_which_tiers_are_staged_and_which_share_does_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML.replace('mode = "shadow"\n', 'mode = "shadow"\nenforce_share = 0.2\n'))
    caplog.set_level(logging.INFO, logger=names.LOGGER)
    Gate(load_config(path))
    said = {r.quotaql_event: r.getMessage() for r in caplog.records}
    assert said["enforce_share:free:0.5"].startswith(
        "quotaql: tier free enforces 0.5 of its subjects (enforce_share)"
    )
    assert "enforce_share:pro:1.0" not in said
    assert "its mode is shadow: only enforce tiers are staged" in said["enforce_share_unused:calm"]


# -- the gate: enforced, or shadow because of the share ---------------------------------------


def test_the_enforced_share_is_refused_and_the_rest_is_counted_logged_and_traced(
    config_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inside, outside = both_sides()
    metrics = PrometheusMetrics(registry, tenant_allowlist=[outside])
    gate = Gate(load_config(config_file), metrics=metrics, tracer_provider=provider)
    caplog.set_level(logging.INFO, logger=names.LOGGER)
    query = parse("{ products(first: 60) { name } }")  # 60 of 100: the second does not fit
    ops = {}
    for tenant in (inside, outside):
        for _ in range(2):
            op = ops[tenant] = gate.admit(SCHEMA, query, request=scope(key=tenant))
            gate.finish(op)
    assert (ops[inside].staged, ops[inside].code, ops[inside].status) == (
        "enforced",
        "RATE_LIMITED",
        429,
    )
    assert (ops[outside].staged, ops[outside].refused, ops[outside].outcome) == (
        "shadow",
        False,
        names.SHADOW_BLOCKED,
    )
    assert "Retry-After" not in ops[outside].headers

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    staged = names.STAGED_TOTAL
    assert sample(staged, tier="free", enforced="true", decision="allowed") == 1
    assert sample(staged, tier="free", enforced="true", decision="blocked") == 1
    assert sample(staged, tier="free", enforced="false", decision="allowed") == 1
    assert sample(staged, tier="free", enforced="false", decision="shadow_blocked") == 1
    would = names.WOULD_REFUSE_TOTAL
    assert sample(would, tier="free", tenant=outside, quota="tenant", cause="share") == 1
    cost = names.WOULD_REFUSE_COST_TOTAL
    assert sample(cost, tier="free", tenant=outside, quota="tenant") == 60
    ratio = names.REFUSAL_CAPACITY_RATIO
    # 60 asked with 40 left: 20 short of a capacity of 100, 1.2 times it.
    for decision in ("blocked", "shadow_blocked"):
        assert sample(f"{ratio}_count", tier="free", decision=decision) == 1
        assert sample(f"{ratio}_sum", tier="free", decision=decision) == pytest.approx(1.2)
        assert sample(f"{ratio}_bucket", tier="free", decision=decision, le="1.1") == 0
        assert sample(f"{ratio}_bucket", tier="free", decision=decision, le="1.25") == 1

    lines = [r for r in caplog.records if getattr(r, "quotaql_event", None) == "shadow_blocked"]
    assert len(lines) == 1
    assert "shadow by enforce_share would have blocked query" in lines[0].getMessage()
    assert lines[0].staged == "shadow"
    blocked = [r for r in caplog.records if getattr(r, "quotaql_event", None) == "blocked"]
    assert blocked[0].staged == "enforced"
    assert "quotaql: blocked query" in blocked[0].getMessage()

    spans = [span.attributes or {} for span in exporter.get_finished_spans()]
    assert [s[names.ATTR_STAGED] for s in spans] == ["enforced"] * 2 + ["shadow"] * 2
    assert spans[-1][names.ATTR_DECISION] == names.SHADOW_BLOCKED


def test_a_shadow_tiers_would_be_refusals_are_counted_by_mode(config_file: Path) -> None:
    registry = CollectorRegistry()
    gate = Gate(load_config(config_file), metrics=PrometheusMetrics(registry))
    for _ in range(2):
        gate.finish(gate.admit(SCHEMA, parse("{ products(first: 70) { name } }"),
                               request=scope(key="observed")))  # fmt: skip
    labels = {"tier": "calm", "tenant": "other", "quota": "tenant", "cause": "mode"}
    assert registry.get_sample_value(names.WOULD_REFUSE_TOTAL, labels) == 1
    assert registry.get_sample_value(names.STAGED_TOTAL, {"tier": "calm", "enforced": "false",
                                                           "decision": "allowed"}) is None  # fmt: skip


def test_a_staged_shadow_subscription_is_never_ended_and_its_events_are_counted(
    config_file: Path,
) -> None:
    registry = CollectorRegistry()
    gate = Gate(load_config(config_file), metrics=PrometheusMetrics(registry))
    inside, outside = both_sides()
    ended = {}
    for tenant in (inside, outside):
        op = gate.admit(SCHEMA, parse("subscription { ticks }"), request=scope(key=tenant))
        assert not op.refused
        errors = [gate.event(op) for _ in range(4)]  # 30 a tick of 100: the fourth is over
        ended[tenant] = [error is not None for error in errors]
        gate.finish(op)
    assert ended[inside] == [False, False, False, True]
    assert not any(ended[outside])
    labels = {"tier": "free", "enforced": "false", "decision": "shadow_blocked"}
    assert registry.get_sample_value(names.STAGED_EVENTS_TOTAL, labels) == 1
    labels = {"tier": "free", "enforced": "true", "decision": "blocked"}
    assert registry.get_sample_value(names.STAGED_EVENTS_TOTAL, labels) == 1


# -- the attack: a subject trying to move itself out of the enforced share --------------------


def where(gate: Gate, request: dict[str, Any], query: str = "{ hello }", **options: Any) -> Any:
    op = gate.admit(SCHEMA, parse(query), request=request, **options)
    gate.finish(op)
    return op.subject.key, op.staged, op.mode


def test_nothing_a_client_sends_moves_its_subject_out_of_the_enforced_share(
    config_file: Path,
) -> None:
    users = iter(range(1000))
    gate = Gate(load_config(config_file), principal=lambda context: f"u{next(users)}")
    inside, outside = both_sides()
    for tenant in (inside, outside):
        first = where(gate, scope(key=tenant))
        tries = [
            scope(peer="198.51.100.7", key=tenant),  # another address
            scope(key=f"  {tenant}\t"),  # whitespace around the key
            scope(X_API_KEY=tenant),  # the header's name in capitals
            scope(x_Api_Key=tenant),
            scope(key=tenant, x_forwarded_for="10.0.0.1, 192.0.2.1"),  # not from a proxy
            scope(peer="10.1.1.1", key=tenant, x_forwarded_for="192.0.2.44, 198.51.100.1"),
        ]
        for request in tries:  # each with another principal (a user inside the tenant)
            assert where(gate, request) == first
        for name in ("A", "B", "ExportEverything"):
            assert where(gate, scope(key=tenant), f"query {name} {{ hello }}") == first
        assert where(gate, scope(key=tenant), "{ products(first: 1) { id } }") == first
    assert where(gate, scope(key=inside))[1:] == ("enforced", Mode.ENFORCE)
    assert where(gate, scope(key=outside))[1:] == ("shadow", Mode.SHADOW)


def test_rotating_addresses_within_a_network_keeps_one_place(config_file: Path) -> None:
    gate = Gate(load_config(config_file))
    for network in ("203.0.113", "198.51.100", "192.0.2"):
        places = {where(gate, scope(peer=f"{network}.{host}"))[1:] for host in range(0, 256, 5)}
        assert len(places) == 1
    # IPv6: each /64 is a subject of its own, and the /48 their place.
    places = {
        where(gate, scope(peer=f"2001:db8:7:{block:x}::{host}"))[1:]
        for block in range(0, 0x10000, 4099)
        for host in (1, 99)
    }
    assert len(places) == 1
    # Behind a trusted proxy, a forged chain on the left changes nothing either.
    forged = {
        where(gate, scope(peer="10.0.0.2", x_forwarded_for=f"{left}, 203.0.113.77"))[1:]
        for left in ("1.2.3.4", "8.8.8.8", "garbage", "198.51.100.1, 192.0.2.9")
    }
    assert forged == {where(gate, scope(peer="203.0.113.1"))[1:]}
    # Invented API keys count as their address: the same place as no key at all.
    invented = {where(gate, scope(peer="192.0.2.8", key=f"guess-{i}"))[1:] for i in range(20)}
    assert invented == {where(gate, scope(peer="192.0.2.9"))[1:]}


def test_the_halves_of_addresses_are_networks_not_addresses(config_file: Path) -> None:
    """Over many networks both halves appear: the share is drawn per network."""
    gate = Gate(load_config(config_file))
    seen = {where(gate, scope(peer=f"198.{n // 256}.{n % 256}.1"))[1] for n in range(64)}
    assert seen == {"enforced", "shadow"}
