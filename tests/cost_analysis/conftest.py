"""Schemas shared by the cost-analysis tests."""

from __future__ import annotations

import pytest
from graphql import GraphQLSchema, build_schema

from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL

# The schema of the worked examples.
WORKED_SDL = """
type Query {
  users(first: Int = 10): [User] @listSize(slicingArguments: ["first"])
}
type User {
  id: ID
  name: String
  friends(first: Int = 5): [User]
}
"""

# A richer schema: interfaces, unions, @cost on types / fields / arguments, Relay
# connections with sizedFields, assumedSize, requireOneSlicingArgument, mutations.
SHOP_SDL = """
type Query {
  product(id: ID!): Product
  products(first: Int, last: Int): [Product!]!
    @listSize(slicingArguments: ["first", "last"], requireOneSlicingArgument: false)
  search(term: String! @cost(weight: "3"), limit: Int = 20): [SearchResult!]!
  node(id: ID!): Node
  nodes(ids: [ID!]!): [Node]! @listSize(slicingArguments: ["ids"], requireOneSlicingArgument: false)
  orders(first: Int, after: String): OrderConnection!
    @listSize(slicingArguments: ["first"], sizedFields: ["edges", "nodes"])
  categories: [Category!]! @listSize(assumedSize: 25)
  expensive: Report @cost(weight: "50")
  tags: [String!]!
  discounted(limit: Int): [Product!]! @cost(weight: "-2")
}
type Mutation {
  placeOrder(productId: ID!, quantity: Int!): Order
  cancelOrder(id: ID!): Boolean @cost(weight: "5")
}
type Subscription {
  orderUpdates(first: Int = 3): [Order!]!
}
interface Node { id: ID! }
type Product implements Node @cost(weight: "2") {
  id: ID!
  name: String!
  price: Float!
  reviews(first: Int = 10): [Review!]!
  related(limit: Int): [Product!]!
  vendor: Vendor!
}
type Review implements Node {
  id: ID!
  stars: Int!
  author: Customer!
}
type Vendor implements Node @cost(weight: "4") {
  id: ID!
  name: String!
  products(first: Int = 10): [Product!]!
}
type Customer implements Node {
  id: ID!
  name: String!
  orders(first: Int = 5): [Order!]!
}
type Order implements Node {
  id: ID!
  total: Float!
  lines(first: Int = 10): [OrderLine!]!
}
type OrderLine {
  product: Product!
  quantity: Int!
}
type OrderConnection {
  edges: [OrderEdge!]!
  nodes: [Order!]!
  pageInfo: PageInfo!
  totalCount: Int! @cost(weight: "2")
}
type OrderEdge { cursor: String!  node: Order! }
type PageInfo { hasNextPage: Boolean!  endCursor: String }
type Category { id: ID!  name: String! }
type Report { total: Float! }
union SearchResult = Product | Vendor | Customer
"""


def build(sdl: str) -> GraphQLSchema:
    """A schema from SDL, with the cost directives declared."""
    return build_schema(COST_DIRECTIVES_SDL + sdl)


@pytest.fixture(scope="session")
def worked_schema() -> GraphQLSchema:
    return build(WORKED_SDL)


@pytest.fixture(scope="session")
def shop_schema() -> GraphQLSchema:
    return build(SHOP_SDL)
