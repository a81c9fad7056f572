"""An example shop API: a Strawberry schema with IBM cost directives, protected by quotaql.

Run it on its own::

    uvicorn --factory quotaql.demo.shop:create_app --port 8000

then open http://127.0.0.1:8000/graphql (GraphiQL) and http://127.0.0.1:8000/metrics.
Without an ``X-API-Key`` header a request is the client address's (free tier); the demo's
tenants are ``demo-polite`` (free), ``demo-integration`` (pro) and ``demo-scraper`` (free).

Prices (``quotaql.toml`` beside this file): a ``Product`` weighs 2, a ``Review`` 1, a
``Customer`` 3 (``@cost`` on the types); lists are sized by their ``first`` argument
(``@listSize``), 10 when absent; a mutation starts at 10.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import strawberry
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from strawberry.asgi import GraphQL

from quotaql.cost_analysis._strawberry import Cost, ListSize
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.plugin import CostLimiter
from quotaql.plugin.schema import RateLimit, rate_limit_field

if TYPE_CHECKING:
    import os

__all__ = ["CONFIG", "create_app", "schema"]

#: The demo's ``quotaql.toml`` (package data).
CONFIG = Path(str(resources.files("quotaql.demo") / "quotaql.toml"))
CATALOG = 40  # products in the catalog


@strawberry.type(directives=[Cost(weight="3")])
class Customer:
    id: strawberry.ID
    name: str
    country: str


@strawberry.type
class Review:
    id: strawberry.ID
    stars: int
    text: str

    @strawberry.field
    def author(self) -> Customer:
        return Customer(id=strawberry.ID(f"c{self.id}"), name=f"customer {self.id}", country="NZ")


@strawberry.type(directives=[Cost(weight="2")])
class Product:
    id: strawberry.ID
    name: str
    price: float

    # Strawberry's field() overloads type a call with directives as untyped: hence the ignores.
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])  # type: ignore[untyped-decorator]
    def reviews(self, first: int = 10) -> list[Review]:
        count = min(max(first, 0), int(self.id) % 7 + 1)  # each product has 1-7 reviews
        return [
            Review(id=strawberry.ID(f"{self.id}-{i}"), stars=5 - i % 3, text="great")
            for i in range(count)
        ]

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])  # type: ignore[untyped-decorator]
    def related(self, first: int = 5) -> list[Product]:
        return [_product((int(self.id) + i + 1) % CATALOG) for i in range(min(max(first, 0), 5))]


def _product(number: int) -> Product:
    return Product(id=strawberry.ID(str(number)), name=f"product {number}", price=9.5 + number)


@strawberry.type
class Order:
    id: strawberry.ID
    total: float


@strawberry.type
class Query:
    rate_limit: RateLimit | None = rate_limit_field()

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])  # type: ignore[untyped-decorator]
    def products(self, first: int = 10) -> list[Product]:
        return [_product(i) for i in range(min(max(first, 0), CATALOG))]

    @strawberry.field
    def product(self, id: strawberry.ID) -> Product | None:
        number = int(id) if str(id).isdigit() else -1
        return _product(number) if 0 <= number < CATALOG else None


@strawberry.type
class Mutation:
    @strawberry.mutation
    def export_orders(self, first: int = 100) -> list[Order]:
        return [Order(id=strawberry.ID(str(i)), total=10.0 * i) for i in range(min(first, 100))]


def make_schema(*extensions: Any) -> strawberry.Schema:
    """The shop's schema with these extensions."""
    return strawberry.Schema(query=Query, mutation=Mutation, extensions=list(extensions))


#: The schema without quotaql, for ``quotaql cost --schema quotaql.demo.shop:schema``.
schema = make_schema()


def create_app(
    *,
    storage: Any = None,
    config_path: str | os.PathLike[str] | None = None,
    registry: CollectorRegistry | None = None,
) -> Starlette:
    """The shop as an ASGI app: GraphQL (and GraphiQL) at ``/graphql``, metrics at ``/metrics``.

    Args:
        storage: the limiter's storage (default: in memory).
        config_path: the ``quotaql.toml`` (default: the demo's).
        registry: where the metrics go (default: a new registry for this app).
    """
    registry = registry if registry is not None else CollectorRegistry()
    cost_limiter = CostLimiter.from_config(
        config_path or CONFIG,
        storage=storage,
        metrics=PrometheusMetrics(registry, top_tenants=10),
    )
    graphql = GraphQL(make_schema(cost_limiter))
    metrics = metrics_app(registry)
    # GraphQL answers on any path but /metrics: /graphql as the docs say, / as well. A Mount
    # matches /metrics/ only: the Route answers /metrics itself, as Prometheus scrapes it.
    app = Starlette(
        routes=[
            Route("/metrics", _AsgiEndpoint(metrics)),
            Mount("/metrics", metrics),
            Mount("/", graphql),
        ]
    )
    app.state.cost_limiter = cost_limiter
    return app


class _AsgiEndpoint:
    """An ASGI app as a ``Route``'s endpoint (Starlette wraps a plain function as a request
    handler, which an ASGI function such as prometheus-client's app is not)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
