"""A warning before the wall (``warn_at``): once an operation that ran leaves its subject below
``1 - warn_at`` of a quota, the answer says so (``extensions.cost.warning`` and the
``quotaql-warn`` parameter of the ``RateLimit`` header), counted and on the span; never on a
refusal, in shadow mode as "would", never about the ``[global]`` quota (every tenant's), and
rounded as ``throttleStatus`` is. The cost headers (``cost_headers``) are read from the same
operation.

Budgets in a real ``MemoryStorage`` on a frozen clock (exact amounts); operations really
execute (graphql-core).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, execute, parse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from starlette.responses import Response

from quotaql.config import LimitsConfig, load_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.errors import ConfigError
from quotaql.gate import Gate, Operation
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + """
type Query {
  items(first: Int = 10): [Item] @listSize(slicingArguments: ["first"])
  half(first: Int = 10): [Half] @listSize(slicingArguments: ["first"])
}
type Mutation { export(first: Int = 10): [Item] @listSize(slicingArguments: ["first"]) }
type Item { id: ID }
type Half @cost(weight: "0.5") { id: ID }
"""
)
TOML = """
[limits]
deny_cache_size = 0
{limits}
[tiers.free]
capacity = 1000
refill_per_second = 50
{tier}
[tiers.trial]
mode = "shadow"
capacity = 1000
refill_per_second = 50
[tenants.acme]
tier = "free"
[tenants.other]
tier = "free"
[tenants.newbie]
tier = "trial"
{extra}
"""


def items(n: int) -> str:
    return f"{{ items(first: {n}) {{ id }} }}"  # n points


class Root:
    def items(self, info: Any, first: int = 10) -> list[dict[str, str]]:
        return [{"id": str(i)} for i in range(first)]

    half = items
    export = items


class World:
    def __init__(
        self, tmp_path: Path, *, limits: str = "warn_at = 0.8", tier: str = "", extra: str = ""
    ) -> None:
        path = tmp_path / "quotaql.toml"
        path.write_text(TOML.format(limits=limits, tier=tier, extra=extra), encoding="utf-8")
        self.registry = CollectorRegistry()
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.gate = Gate(
            load_config(path),
            storage=MemoryStorage(clock=lambda: 1_000.0),
            metrics=PrometheusMetrics(self.registry),
            tracer_provider=provider,
        )

    def run(self, query: str, key: str = "acme") -> tuple[Operation, dict[str, Any]]:
        """Run ``query`` as the tenant of ``key``: the operation and its ``extensions``
        (worked out before its headers, as an adapter answers)."""
        document = parse(query)
        request = {"type": "http", "client": ("203.0.113.9", 1),
                   "headers": [(b"x-api-key", key.encode())]}  # fmt: skip
        op = self.gate.admit(SCHEMA, document, request=request)
        if op.runs:
            result = execute(SCHEMA, document, root_value=Root())
            self.gate.settle(op, result.data, result.errors)
        extensions = self.gate.results(op)
        self.gate.finish(op)
        return op, extensions

    def warnings(self, tier: str, quota: str) -> float:
        labels = {names.LABEL_TIER: tier, names.LABEL_QUOTA: quota}
        return self.registry.get_sample_value(names.QUOTA_WARNINGS_TOTAL, labels) or 0.0


def test_an_operation_that_leaves_less_than_a_fifth_is_warned(tmp_path: Path) -> None:
    world = World(tmp_path)
    op, extensions = world.run(items(700))  # 300 of 1000 left: 30 %, no warning yet
    assert "warning" not in extensions["cost"]
    assert "quotaql-warn" not in op.headers["RateLimit"]
    op, extensions = world.run(items(101))  # 199 left: below 200
    cost = extensions["cost"]
    assert cost["warning"] == {
        "quota": "tenant",
        "remaining": 199,
        "capacity": 1000,
        "sustainableRate": 50,
        "enforced": True,
        "message": "Only 199 of your 1000 points remain; spend at most 50 points a second"
        " (what the budget refills) or operations will be refused once it runs out.",
    }
    # Rounded as throttleStatus is, and the same quota the RateLimit header describes.
    assert cost["throttleStatus"]["currentlyAvailable"] == cost["warning"]["remaining"]
    assert op.headers["RateLimit"] == '"tenant";r=199;t=17;quotaql-warn=50'
    assert op.headers["X-RateLimit-Remaining"] == "199"
    assert world.warnings("free", "tenant") == 1
    (span,) = [s for s in world.exporter.get_finished_spans() if s.events]
    (event,) = [e for e in span.events if e.name == names.EVENT_QUOTA_WARNING]
    assert event.attributes is not None
    assert event.attributes[names.ATTR_WARNING_QUOTA] == "tenant"
    assert event.attributes[names.ATTR_WARNING_REMAINING] == 199
    assert event.attributes[names.ATTR_WARNING_ENFORCED] is True


def test_exactly_the_threshold_is_no_warning_and_warn_at_unset_is_none(tmp_path: Path) -> None:
    world = World(tmp_path)
    _, extensions = world.run(items(800))  # 200 left: 20 %, not below it
    assert "warning" not in extensions["cost"]
    unset = World(tmp_path, limits="")
    op, extensions = unset.run(items(990))
    assert "warning" not in extensions["cost"]
    assert "quotaql-warn" not in op.headers["RateLimit"]
    assert unset.warnings("free", "tenant") == 0


def test_a_refusal_carries_no_warning(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.run(items(950))
    op, extensions = world.run(items(100))  # 50 left: refused
    assert op.code == "RATE_LIMITED"
    assert "warning" not in extensions["cost"]
    assert "quotaql-warn" not in op.headers["RateLimit"]
    assert world.warnings("free", "tenant") == 1  # the first one only


def test_shadow_mode_warns_that_it_would_refuse(tmp_path: Path) -> None:
    world = World(tmp_path)
    op, extensions = world.run(items(900), key="newbie")
    warning = extensions["cost"]["warning"]
    assert warning["enforced"] is False
    assert "would be refused (shadow mode: nothing is yet)" in warning["message"]
    # Past the wall: shadow mode lets it run, and warns again (nothing is refused).
    op, extensions = world.run(items(500), key="newbie")
    assert op.refused is False
    assert extensions["cost"]["warning"]["remaining"] == 100
    assert "would be refused" in extensions["cost"]["warning"]["message"]
    assert world.warnings("trial", "tenant") == 2


def test_a_tier_sets_its_own_threshold_or_none(tmp_path: Path) -> None:
    world = World(tmp_path, tier="warn_at = 0.5")
    _, extensions = world.run(items(600))  # 40 % left: below the tier's 50 %
    assert extensions["cost"]["warning"]["remaining"] == 400
    silent = World(tmp_path, tier="warn_at = false")
    _, extensions = silent.run(items(990))
    assert "warning" not in extensions["cost"]
    _, extensions = silent.run(items(990), key="newbie")  # the trial tier keeps [limits]'
    assert extensions["cost"]["warning"]["remaining"] == 10


def test_the_quota_with_the_least_share_left_is_named_in_its_own_item(tmp_path: Path) -> None:
    tier = "[tiers.free.operations]\nExport = { capacity = 100, refill_per_second = 2 }"
    world = World(tmp_path, tier=tier)
    world.run(items(850))  # the tenant quota: 150 of 1000 left
    # An export of 30 (20 items and the mutation's 10): the tenant quota keeps 120 of 1000
    # (12 %, warned), the Export quota 70 of 100 (70 %): fewer points, a larger share.
    op, extensions = world.run("mutation Export { export(first: 20) { id } }")
    assert extensions["cost"]["warning"]["quota"] == "tenant"
    assert extensions["cost"]["warning"]["remaining"] == 120
    # RateLimit describes the quota with the fewest points left, as before; the warned
    # quota is a second item of the list, with its own remaining and reset.
    assert op.headers["RateLimit"] == ('"op:Export";r=70;t=15, "tenant";r=120;t=18;quotaql-warn=50')
    assert op.headers["X-RateLimit-Remaining"] == "70"


def test_the_global_quota_is_never_named(tmp_path: Path) -> None:
    # [global] is every tenant's: what is left of it says what the others spent.
    world = World(
        tmp_path,
        tier="",
        extra="[global]\ncapacity = 2000\nrefill_per_second = 1",
    )
    world.run(items(990), key="other")  # other spends; the platform has 1010 left
    op, extensions = world.run(items(900))  # 110 of the platform's 2000 left: 5.5 %
    warning = extensions["cost"]["warning"]
    assert warning["quota"] == "tenant"  # acme's own (100 of 1000), never "global"
    assert "global" not in warning["message"]
    assert "global" not in op.headers["RateLimit"].split("quotaql-warn")[0].rsplit(",", 1)[-1]
    # A tenant with budget left hears nothing of the platform's.
    fresh = World(tmp_path, extra="[global]\ncapacity = 2000\nrefill_per_second = 1")
    fresh.run(items(990), key="other")
    fresh.run(items(900), key="newbie")
    op, extensions = fresh.run(items(10))  # 100 of global left (5 %); acme: 990 of 1000
    assert "warning" not in extensions["cost"]
    assert "quotaql-warn" not in op.headers.get("RateLimit", "")
    assert fresh.warnings("free", "global") == 0


def test_another_tenants_wall_is_not_mine(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.run(items(950), key="other")
    op, extensions = world.run(items(10))
    assert "warning" not in extensions["cost"]
    assert op.headers["RateLimit"] == '"tenant";r=990;t=1'


def test_fractional_costs_are_rounded_as_throttle_status_rounds_them(tmp_path: Path) -> None:
    world = World(tmp_path)
    _, extensions = world.run("{ half(first: 1699) { id } }")  # 849.5: 150.5 left
    cost = extensions["cost"]
    assert cost["requestedQueryCost"] == 849.5
    assert cost["warning"]["remaining"] == cost["throttleStatus"]["currentlyAvailable"] == 150.5


def test_the_warning_is_counted_even_where_extensions_are_not_shown(tmp_path: Path) -> None:
    world = World(tmp_path, limits="warn_at = 0.8\nexpose_cost = false")
    op, extensions = world.run(items(900))
    assert extensions == {}
    assert op.headers["RateLimit"].endswith(";quotaql-warn=50")
    assert world.warnings("free", "tenant") == 1


def test_cost_headers_carry_the_estimate_and_the_actual_cost(tmp_path: Path) -> None:
    world = World(tmp_path, limits="cost_headers = true")
    op, extensions = world.run(items(30))
    assert op.headers["X-Cost-Estimated"] == "30"
    assert op.headers["X-Cost-Actual"] == str(extensions["cost"]["actualQueryCost"]) == "30"
    world.run(items(950))
    refused, _ = world.run(items(100))
    assert refused.refused
    assert refused.headers["X-Cost-Estimated"] == "100"  # what it asked: an edge counts it
    assert "X-Cost-Actual" not in refused.headers  # nothing ran
    named = World(
        tmp_path,
        limits='cost_headers = true\ncost_header_names = { estimated = "X-Score",'
        ' actual = "X-Spent" }',
    )
    op, _ = named.run("{ half(first: 3) { id } }")
    assert (op.headers["X-Score"], op.headers["X-Spent"]) == ("1.5", "1.5")
    assert "X-Cost-Estimated" not in op.headers
    off = World(tmp_path, limits="")
    op, _ = off.run(items(30))
    assert not [name for name in op.headers if name.startswith("X-Cost")]


def test_a_batch_sends_the_sums_and_an_actual_cost_only_when_every_one_is_known(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, limits="cost_headers = true")
    response = Response()
    response.headers["X-Cost-Actual"] = "0"  # an application's (or a client's echo): replaced
    ran, _ = world.run(items(30))
    world.gate.respond(ran, response)
    assert (response.headers["X-Cost-Estimated"], response.headers["X-Cost-Actual"]) == ("30", "30")
    world.run(items(940))  # 30 left
    refused, _ = world.run(items(100))
    world.gate.respond(refused, response)
    # What the batch asked (30 + 100), what ran (30): the refused one ran nothing.
    assert response.headers.getlist("X-Cost-Estimated") == ["130"]
    assert response.headers.getlist("X-Cost-Actual") == ["30"]
    # Every one refused: the estimate, no actual cost.
    alone = Response()
    alone.headers["X-Cost-Actual"] = "0"
    world.gate.respond(refused, alone)
    assert alone.headers["X-Cost-Estimated"] == "100"
    assert "X-Cost-Actual" not in alone.headers


def test_any_order_of_answering_gets_the_same_warning_and_headers(tmp_path: Path) -> None:
    # docs/graphql-core.md's recipe: finish, then the headers, then the extensions.
    world = World(tmp_path, limits="warn_at = 0.8\ncost_headers = true")
    document = parse(items(900))
    request = {"type": "http", "client": ("203.0.113.9", 1), "headers": [(b"x-api-key", b"acme")]}
    op = world.gate.admit(SCHEMA, document, request=request)
    result = execute(SCHEMA, document, root_value=Root())
    world.gate.settle(op, result.data, result.errors)
    world.gate.finish(op)
    headers = op.headers
    assert headers["RateLimit"].endswith(";quotaql-warn=50")
    assert (headers["X-Cost-Estimated"], headers["X-Cost-Actual"]) == ("900", "900")
    assert world.gate.results(op)["cost"]["warning"]["remaining"] == 100
    assert world.warnings("free", "tenant") == 1


def test_cost_header_names_cannot_take_a_header_quotaql_or_http_sets(tmp_path: Path) -> None:
    # quotaql replaces or removes the cost headers on every response: under the name
    # Content-Length or RateLimit, it would break every answer.
    for name in ("Content-Length", "ratelimit", "Retry-After", "Set-Cookie"):
        path = tmp_path / "quotaql.toml"
        path.write_text(
            f'[limits]\ncost_headers = true\ncost_header_names = {{ estimated = "X-Cost",'
            f' actual = "{name}" }}\n',
            encoding="utf-8",
        )
        with pytest.raises(ConfigError) as raised:
            load_config(path)
        message = str(raised.value)
        assert "quotaql.toml:3: limits.cost_header_names.actual:" in message  # file, line, key
        assert f"{name!r} is a header quotaql or HTTP itself sets" in message
    with pytest.raises(ConfigError, match="none that quotaql or HTTP owns"):
        LimitsConfig(cost_header_names={"estimated": "X-Cost", "actual": "Content-Type"})
