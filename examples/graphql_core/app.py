"""quotaql on a plain graphql-core server: no Strawberry, one Starlette route over the gate.

Run it from the repository root::

    uvicorn examples.graphql_core.app:app --port 8001

Every request is parsed (within the parser limits of ``[cost]``) and validated here; the
gate (``quotaql.gate.Gate``) identifies who pays (the ``X-API-Key`` header, else the
client's address), prices the operation, debits the budget or refuses it, and after
execution refunds what it did not use. The answers (errors, ``extensions.cost``, HTTP
status and ``RateLimit`` headers) are the gate's, exactly as the Strawberry extension's.
This is the recipe of docs/graphql-core.md, on an async server.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphql import (
    ExecutionResult,
    GraphQLError,
    GraphQLResolveInfo,
    build_schema,
    execute,
)
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.gate import Gate

if TYPE_CHECKING:
    import os

    from starlette.requests import Request

HERE = Path(__file__).parent
CONFIG = HERE / "quotaql.toml"
# The SDL declares @cost and @listSize itself: prepend their definitions.
SCHEMA = build_schema(COST_DIRECTIVES_SDL + (HERE / "schema.graphql").read_text())


# --- resolvers: graphql-core's default resolver calls methods with (info, **arguments) ---

CATALOG = 12


class Book:
    def __init__(self, number: int) -> None:
        self.number = number
        self.id = str(number)
        self.title = f"Book {number}"

    def reviews(self, _info: GraphQLResolveInfo, first: int = 5) -> list[dict[str, Any]]:
        return [{"stars": 5 - i, "text": "good"} for i in range(min(first, 2))]  # 2 each

    def similar(self, _info: GraphQLResolveInfo, first: int = 3) -> list[Book]:
        return [Book((self.number + i + 1) % CATALOG) for i in range(min(first, 3))]


class Root:
    def books(self, _info: GraphQLResolveInfo, first: int = 10) -> list[Book]:
        return [Book(i) for i in range(min(first, CATALOG))]

    def book(self, _info: GraphQLResolveInfo, id: str) -> Book | None:
        return Book(int(id)) if id.isdigit() and int(id) < CATALOG else None


# --- the app ------------------------------------------------------------------------------


def create_app(config_path: str | os.PathLike[str] = CONFIG, storage: Any = None) -> Starlette:
    """The bookshop at ``POST /graphql``, its budgets in ``storage`` (default: memory)."""
    gate = Gate.from_config(config_path, storage=storage)  # or AsyncRedisStorage(...)

    async def graphql(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            error = GraphQLError("Send a JSON object: {query, variables, operationName}")
            return JSONResponse(ExecutionResult(None, [error]).formatted, status_code=400)
        variables, name = body.get("variables"), body.get("operationName")
        op = await gate.begin_async(request=request)  # who pays; refused at once if refused
        document = gate.parse(SCHEMA, body.get("query"), op=op)  # within the limits, validated
        op = await gate.admit_async(SCHEMA, document, variables, name, op=op)
        result = ExecutionResult(None, op.errors)  # invalid, refused, or GraphQL-Cost: validate
        if op.runs:  # not refused, not only priced
            run = execute(SCHEMA, document, Root(), variable_values=variables, operation_name=name)
            result = await run if inspect.isawaitable(run) else run  # async resolvers
            await gate.settle_async(op, result.data, result.errors)  # the rest goes back
        gate.finish(op)
        answer = {**result.formatted, "extensions": gate.results(op)}
        return JSONResponse(answer, status_code=op.status or 200, headers=op.headers)

    app = Starlette(routes=[Route("/graphql", graphql, methods=["POST"])])
    app.state.gate = gate
    return app


app = create_app()
