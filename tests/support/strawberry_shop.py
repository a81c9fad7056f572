"""A small Strawberry shop API for the extension's tests: real resolvers, real list sizes.

Prices (default cost model): ``products(first: n)`` is a list of ``Product`` (weight 2 each
via ``@cost``), each ``reviews(first: m)`` a list of ``Review`` (weight 1 each).
``{ products(first: 10) { name reviews(first: 5) { stars } } }`` costs 10 × (2 + 5 × 1) = 70.
The catalog holds ``CATALOG_SIZE`` products with ``REVIEWS_PER_PRODUCT`` reviews each, so a
query asking for more gets fewer: the actual cost is lower and the difference is refunded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator  # noqa: TC003  (Strawberry reads annotations at runtime)

import strawberry
from strawberry.schema.config import StrawberryConfig

from quotaql.cost_analysis.directives import Cost, ListSize
from quotaql.plugin.schema import RateLimit, rate_limit_field

CATALOG_SIZE = 4
REVIEWS_PER_PRODUCT = 2
resolver_calls: list[str] = []  # which root resolvers ran (tests clear it)


@strawberry.type
class Review:
    stars: int


@strawberry.type(directives=[Cost(weight="2")])
class Product:
    id: strawberry.ID
    name: str

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    def reviews(self, first: int = 10) -> list[Review]:
        return [Review(stars=5 - i % 5) for i in range(min(first, REVIEWS_PER_PRODUCT))]


def _products(first: int) -> list[Product]:
    return [Product(id=strawberry.ID(str(i)), name=f"product {i}") for i in range(first)]


@strawberry.type
class Query:
    rate_limit: RateLimit | None = rate_limit_field()

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    def products(self, first: int = 10) -> list[Product]:
        resolver_calls.append("products")
        return _products(min(first, CATALOG_SIZE))

    @strawberry.field
    def hello(self) -> str:
        resolver_calls.append("hello")
        return "world"


@strawberry.type
class Mutation:
    @strawberry.mutation
    def export_orders(self) -> int:
        resolver_calls.append("exportOrders")
        return 1


@strawberry.type
class Subscription:
    @strawberry.subscription(directives=[Cost(weight="30")])
    async def ticks(self, count: int = 3, interval: float = 0.0) -> AsyncGenerator[int, None]:
        for i in range(count):
            if interval:
                await asyncio.sleep(interval)
            yield i


def make_schema(*extensions: object, batching: bool = False) -> strawberry.Schema:
    config = StrawberryConfig(batching_config={"max_operations": 10}) if batching else None
    return strawberry.Schema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=list(extensions),
        config=config,
    )
