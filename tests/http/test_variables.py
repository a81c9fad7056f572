"""Variables over real HTTP: Strawberry's and Ariadne's ASGI apps under uvicorn, behind
``BodyLimit``'s default 1 MiB cap.

A list variable of a megabyte cost a worker 1.8-2.2 s of CPU for 1 point (priced 0), coerced
twice: once by quotaql's pricing, once by graphql-core's execution. Now ``[cost]
max_variable_values`` refuses it from the raw JSON before anything is coerced, and charges
the minimum; within the limit each value is coerced once (by the execution), and a list's
length still sizes the slicing argument that reads it.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any, NewType

import httpx
import pytest
import strawberry
from ariadne import QueryType, ScalarType, make_executable_schema
from prometheus_client import CollectorRegistry
from strawberry.asgi import GraphQL
from strawberry.schema.config import StrawberryConfig

from quotaql import ariadne as ariadne_adapter
from quotaql.asgi import BodyLimit
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL, ListSize
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from tests.support.app_servers import UvicornServer, WSGIServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

CONFIG = """
[tiers.free]
capacity = 1000
refill_per_second = 0.001
"""
TOO_MANY = "TOO_MANY_VARIABLE_VALUES"
# The body screen's own bound on a body's values (quotaql.asgi, 20,000 by default) refuses a
# megabyte of them before anything parses them (tests/adapters/test_body_screen.py): lifted
# here, where the variables' bound behind it is under test.
BODY_VALUES = 1_000_000


class Shop:
    """What the resolvers and the custom scalar saw, shared by both servers' schemas."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parsed = 0  # values of the custom scalar ``Counted`` parsed (coerced)
        self.resolved: list[str] = []

    def parse(self, value: Any) -> int:
        with self.lock:
            self.parsed += 1
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"Counted takes an integer, got {value!r}")
        return value


shop = Shop()


# -- Strawberry ------------------------------------------------------------------------------

Counted = NewType("Counted", int)
SCALARS = {
    Counted: strawberry.scalar(
        name="Counted",
        serialize=int,
        parse_value=shop.parse,
        description="An integer whose every coercion is counted.",
    )
}


@strawberry.type
class Node:
    id: strawberry.ID


@strawberry.type
class Query:
    @strawberry.field
    def hello(self) -> str:
        return "world"

    @strawberry.field
    def count(self, values: list[int]) -> int:
        shop.resolved.append("count")
        return len(values)

    @strawberry.field
    def tally(self, values: list[Counted]) -> int:
        shop.resolved.append("tally")
        return len(values)

    @strawberry.field(directives=[ListSize(slicing_arguments=["ids"])])
    def nodes(self, ids: list[strawberry.ID]) -> list[Node]:
        shop.resolved.append("nodes")
        return [Node(id=node) for node in ids]


# -- Ariadne ---------------------------------------------------------------------------------

SDL = (
    COST_DIRECTIVES_SDL
    + """
scalar Counted

type Node { id: ID! }

type Query {
  hello: String!
  count(values: [Int!]!): Int!
  tally(values: [Counted!]!): Int!
  nodes(ids: [ID!]!): [Node!]! @listSize(slicingArguments: ["ids"])
}
"""
)
query = QueryType()
counted = ScalarType("Counted", value_parser=shop.parse)


@query.field("hello")
def resolve_hello(*_: Any) -> str:
    return "world"


@query.field("count")
def resolve_count(_: Any, info: Any, values: list[int]) -> int:
    shop.resolved.append("count")
    return len(values)


@query.field("tally")
def resolve_tally(_: Any, info: Any, values: list[int]) -> int:
    shop.resolved.append("tally")
    return len(values)


@query.field("nodes")
def resolve_nodes(_: Any, info: Any, ids: list[str]) -> list[dict[str, str]]:
    shop.resolved.append("nodes")
    return [{"id": node} for node in ids]


# -- the servers -----------------------------------------------------------------------------


class Served:
    """A running server and the registry of its limiter's metrics."""

    def __init__(self, server: UvicornServer, registry: CollectorRegistry) -> None:
        self.server = server
        self.url = server.url
        self.registry = registry

    def post(self, body: Any) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.post(f"{self.url}/graphql", content=content, timeout=30,
                          headers={"content-type": "application/json"})  # fmt: skip

    def available(self) -> float:
        """What the client has left before this probe (``{ hello }`` pays the minimum, 1)."""
        cost = self.post({"query": "{ hello }"}).json()["extensions"]["cost"]
        return float(cost["throttleStatus"]["currentlyAvailable"]) + 1

    def rejections(self, code: str) -> float:
        value = self.registry.get_sample_value("quotaql_rejections_total", {"code": code})
        return value or 0.0


def application(kind: str, path: Path, registry: CollectorRegistry) -> Any:
    metrics = PrometheusMetrics(registry)
    if kind == "strawberry":
        limiter = CostLimiter.from_config(path, metrics=metrics)
        config = StrawberryConfig(scalar_map=SCALARS)
        return GraphQL(strawberry.Schema(query=Query, extensions=[limiter], config=config))
    adapter = ariadne_adapter.CostLimiter.from_config(path, metrics=metrics)
    app = adapter.asgi(make_executable_schema(SDL, query, counted))
    app.http_handler.max_body_values = BODY_VALUES  # type: ignore[misc]  # see BODY_VALUES
    return app


@pytest.fixture(params=["strawberry", "ariadne"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def serve(kind: str, tmp_path: Path) -> Iterator[Callable[[str], Served]]:
    """``serve(extra)``: a server of ``kind`` configured by ``CONFIG`` + ``extra``."""
    running: list[UvicornServer] = []

    def start(extra: str = "") -> Served:
        path = tmp_path / f"quotaql-{len(running)}.toml"
        path.write_text(CONFIG + extra, encoding="utf-8")
        registry = CollectorRegistry()
        app = BodyLimit(application(kind, path, registry), max_values=BODY_VALUES)
        server = UvicornServer(app).start()
        running.append(server)
        return Served(server, registry)

    shop.parsed = 0
    shop.resolved.clear()
    try:
        yield start
    finally:
        for server in running:
            server.stop()


def megabyte_of_ints() -> bytes:
    """A request just under BodyLimit's 1 MiB: one list variable of 500,000 integers."""
    variables = {"v": [1] * 500_000}
    body = json.dumps({"query": "query($v: [Int!]!) { count(values: $v) }",
                       "variables": variables}, separators=(",", ":")).encode()  # fmt: skip
    assert 1_000_000 < len(body) < 1_048_576
    return body


# -- the attack ------------------------------------------------------------------------------


def test_a_megabyte_list_variable_is_refused_at_once_and_charged(
    serve: Callable[[str], Served],
) -> None:
    # Before: 200, {"count": 500000}, 1.8-2.2 s of CPU a request for 1 point (priced 0).
    served = serve("")
    body = megabyte_of_ints()
    worked = []  # CPU seconds of this process (the server's thread and the client) a request
    for _ in range(3):
        started = time.process_time()
        response = served.post(body)
        worked.append(time.process_time() - started)
        (error,) = response.json()["errors"]
        assert error["extensions"] == {"code": TOO_MANY, "value": 500_001, "limit": 5_000}
        assert "more than 5000 values" in error["message"]
    # The transfer and two JSON decodings (BodyLimit's screen, the framework's); nothing is
    # coerced. Measured in CPU time, which a loaded machine does not stretch: 45-80 ms,
    # against 1.8-2.2 s before.
    assert min(worked) < 0.4, worked
    assert shop.resolved == []
    assert served.available() == pytest.approx(1000 - 3, abs=0.1)  # the minimum, each time
    assert served.rejections(TOO_MANY) == 3


def test_each_value_of_a_list_variable_is_coerced_once(serve: Callable[[str], Served]) -> None:
    # Before: every value was coerced twice, by the pricing and by the execution.
    served = serve("[cost]\nmax_variable_values = 100000\n")
    values = list(range(50_000))
    response = served.post({"query": "query($v: [Counted!]!) { tally(values: $v) }",
                            "variables": {"v": values}})  # fmt: skip
    assert response.json()["data"] == {"tally": 50_000}
    assert shop.parsed == 50_000


def test_a_list_variable_too_long_is_refused_before_any_coercion(
    serve: Callable[[str], Served],
) -> None:
    served = serve("[cost]\nmax_variable_values = 1000\n")
    response = served.post({"query": "query($v: [Counted!]!) { tally(values: $v) }",
                            "variables": {"v": list(range(1_001))}})  # fmt: skip
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == TOO_MANY
    assert shop.parsed == 0
    assert shop.resolved == []
    within = served.post({"query": "query($v: [Counted!]!) { tally(values: $v) }",
                          "variables": {"v": list(range(999))}})  # fmt: skip
    assert within.json()["data"] == {"tally": 999}  # 999 values and the list itself: 1000


def test_every_value_counts_lists_and_objects_included(serve: Callable[[str], Served]) -> None:
    served = serve("[cost]\nmax_variable_values = 50\n")
    # 30 one-item lists hold 60 values: refused, however few scalars each holds.
    nested = {"query": "query($v: [Int!]!) { count(values: $v) }",
              "variables": {"v": [1] * 10, "pad": [[1]] * 30}}  # fmt: skip
    (error,) = served.post(nested).json()["errors"]
    assert error["extensions"]["code"] == TOO_MANY


def test_the_limit_can_be_turned_off(serve: Callable[[str], Served]) -> None:
    served = serve("[cost]\nmax_variable_values = false\n")
    response = served.post(megabyte_of_ints())
    assert response.json()["data"] == {"count": 500_000}


def test_shadow_mode_lets_too_many_values_run_and_counts_them(
    serve: Callable[[str], Served],
) -> None:
    served = serve('[limits]\nmode = "shadow"\n[cost]\nmax_variable_values = 100\n')
    response = served.post({"query": "query($v: [Counted!]!) { tally(values: $v) }",
                            "variables": {"v": list(range(200))}})  # fmt: skip
    assert response.json()["data"] == {"tally": 200}
    assert shop.parsed == 200  # coerced once, by the execution, in shadow mode too
    labels = {"decision": "shadow_blocked", "operation_type": "query", "tier": "free"}
    assert served.registry.get_sample_value("quotaql_requests_total", labels) == 1
    assert served.rejections(TOO_MANY) == 0


def test_ariadnes_wsgi_app_refuses_too_many_values_too(tmp_path: Path) -> None:
    path = tmp_path / "quotaql.toml"
    path.write_text(CONFIG + "[cost]\nmax_variable_values = 1000\n", encoding="utf-8")
    adapter = ariadne_adapter.CostLimiter.from_config(path)
    app = adapter.wsgi(make_executable_schema(SDL, query, counted))
    shop.parsed = 0
    with WSGIServer(app) as server:
        too_many = {"query": "query($v: [Counted!]!) { tally(values: $v) }",
                    "variables": {"v": list(range(1_000))}}  # fmt: skip
        response = httpx.post(f"{server.url}/graphql", json=too_many, timeout=30)
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == TOO_MANY
        assert shop.parsed == 0
        within = {"query": too_many["query"], "variables": {"v": list(range(500))}}
        answer = httpx.post(f"{server.url}/graphql", json=within, timeout=30).json()
        assert answer["data"] == {"tally": 500}
        assert shop.parsed == 500
        left = answer["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]
        assert left == pytest.approx(1000 - 2, abs=0.1)  # the refusal and the tally: 1 each


# -- what the pricing still reads ------------------------------------------------------------


def test_a_list_variables_length_sizes_the_slicing_argument_that_reads_it(
    serve: Callable[[str], Served],
) -> None:
    served = serve("[cost]\nmax_cost = 500\n")
    text = "query($ids: [ID!]!) { nodes(ids: $ids) { id } }"
    ids = [str(i) for i in range(300)]
    answer = served.post({"query": text, "variables": {"ids": ids}}).json()
    assert answer["extensions"]["cost"]["requestedQueryCost"] == 300
    assert len(answer["data"]["nodes"]) == 300
    # One value where a list is expected is a list of one.
    one = served.post({"query": text, "variables": {"ids": "7"}}).json()
    assert one["extensions"]["cost"]["requestedQueryCost"] == 1
    assert one["data"] == {"nodes": [{"id": "7"}]}
    # A longer list is priced past max_cost, and refused before it runs.
    longer = {"query": text, "variables": {"ids": [str(i) for i in range(501)]}}
    (error,) = served.post(longer).json()["errors"]
    assert error["extensions"]["code"] == "QUERY_TOO_COMPLEX"
    assert error["extensions"]["cost"] == 501
    assert shop.resolved == ["nodes", "nodes"]


def test_an_invalid_list_the_pricing_did_not_coerce_runs_nothing_and_pays_its_price(
    serve: Callable[[str], Served],
) -> None:
    # The pricing reads the list's length (20) and leaves its coercion to graphql-core, which
    # refuses it before any resolver runs: the operation pays its whole price, no refund.
    served = serve("")
    ids: list[Any] = [str(i) for i in range(19)] + [{"not": "an id"}]
    answer = served.post({"query": "query($ids: [ID!]!) { nodes(ids: $ids) { id } }",
                          "variables": {"ids": ids}}).json()  # fmt: skip
    assert answer["data"] is None
    assert "ID cannot represent value" in answer["errors"][0]["message"]
    assert shop.resolved == []
    assert served.available() == pytest.approx(1000 - 20, abs=0.1)


def test_an_invalid_scalar_variable_is_still_refused_by_the_pricing_at_the_minimum(
    serve: Callable[[str], Served],
) -> None:
    served = serve("")
    answer = served.post({"query": "query($ids: [ID!]!, $n: Int!) { nodes(ids: $ids) { id }"
                                   " count(values: [$n]) }",
                          "variables": {"ids": ["1"], "n": "ten"}}).json()  # fmt: skip
    (error,) = answer["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "$n" in error["message"]
    assert shop.resolved == []
    assert served.available() == pytest.approx(1000 - 1, abs=0.1)
