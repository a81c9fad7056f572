"""The shop API of ``tests/support/strawberry_shop.py``, schema-first for Ariadne: the same
prices.

``products(first: n)`` is a list of ``Product`` (``@cost(weight: "2")`` each, sized by
``@listSize``), each ``reviews(first: m)`` a list of ``Review`` (weight 1 each), so
``{ products(first: 10) { name reviews(first: 5) { stars } } }`` costs 10 × (2 + 5) = 70;
the catalog holds ``CATALOG_SIZE`` products with ``REVIEWS_PER_PRODUCT`` reviews each, so
it comes back with 4 × (2 + 2) = 16 and 54 is refunded. ``exportOrders`` costs 10 (the
mutation weight) and ``ticks`` 30 per event.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ariadne import MutationType, ObjectType, QueryType, SubscriptionType, make_executable_schema

from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from graphql import GraphQLSchema

CATALOG_SIZE = 4
REVIEWS_PER_PRODUCT = 2
TICK_INTERVAL = 0.01
resolver_calls: list[str] = []  # which root resolvers ran (tests clear it)

SDL = (
    COST_DIRECTIVES_SDL
    + """
type Query {
  products(first: Int = 10): [Product!]! @listSize(slicingArguments: ["first"])
  hello: String!
}

type Product @cost(weight: "2") {
  id: ID!
  name: String!
  reviews(first: Int = 10): [Review!]! @listSize(slicingArguments: ["first"])
}

type Review {
  stars: Int!
}

type Mutation {
  exportOrders: Int!
}

type Subscription {
  ticks(count: Int = 3): Int! @cost(weight: "30")
}
"""
)

query = QueryType()
product = ObjectType("Product")
mutation = MutationType()
subscription = SubscriptionType()


@query.field("products")
def resolve_products(_: Any, info: Any, first: int = 10) -> list[dict[str, Any]]:
    resolver_calls.append("products")
    return [{"id": str(i), "name": f"product {i}"} for i in range(min(first, CATALOG_SIZE))]


@query.field("hello")
def resolve_hello(*_: Any) -> str:
    resolver_calls.append("hello")
    return "world"


@product.field("reviews")
def resolve_reviews(_: Any, info: Any, first: int = 10) -> list[dict[str, int]]:
    return [{"stars": 5 - i % 5} for i in range(min(first, REVIEWS_PER_PRODUCT))]


@mutation.field("exportOrders")
def resolve_export_orders(*_: Any) -> int:
    resolver_calls.append("exportOrders")
    return 1


@subscription.source("ticks")
async def ticks_source(_: Any, info: Any, count: int = 3) -> AsyncIterator[int]:
    resolver_calls.append("ticks")
    for i in range(count):
        await asyncio.sleep(TICK_INTERVAL)
        yield i


@subscription.field("ticks")
def resolve_tick(tick: int, *_: Any, **__: Any) -> int:
    return tick


def make_schema() -> GraphQLSchema:
    return make_executable_schema(SDL, query, product, mutation, subscription)
