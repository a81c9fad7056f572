"""quotaql on a plain graphql-core server: no Strawberry, one Starlette route.

Run it from the repository root::

    uvicorn examples.graphql_core.app:app --port 8001

Every request is parsed, validated and priced before anything runs; its cost is debited
from the caller's budget (tenant = the ``X-API-Key`` header); what the operation did not
use is refunded afterwards. The answers (errors, ``extensions.cost``, HTTP status and
``RateLimit`` headers) are built by ``quotaql.contract``, exactly as the Strawberry
extension builds them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphql import GraphQLError, GraphQLResolveInfo, build_schema, execute, validate
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from quotaql import AsyncLimiter, CostAnalysisError, MemoryStorage
from quotaql.config import load_config
from quotaql.contract import (
    cost_extension,
    rate_limit_error,
    rate_limit_headers,
    status_for,
)
from quotaql.cost_analysis import actual_cost, analyze
from quotaql.cost_analysis.analyzer import parse_document
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL

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
    config = load_config(config_path)
    limiter = AsyncLimiter(
        storage if storage is not None else MemoryStorage(),  # or AsyncRedisStorage(...)
        on_backend_error=config.limits.on_backend_error,
    )
    model, limits = config.cost.model, config.cost.limits

    async def graphql(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            bad_request = GraphQLError("Send a JSON object: {query, variables, operationName}")
            return answer(errors=[bad_request], status=400)
        variables = body.get("variables")
        try:
            # 1. Parse within the parser limits, validate, price with the request's
            #    variables. A static limit (max_cost, max_depth, ...) refuses here.
            document = parse_document(body.get("query") or "", limits)
            errors = validate(SCHEMA, document)
            if errors:
                return answer(errors=errors)
            report = analyze(SCHEMA, document, variables, body.get("operationName"), model, limits)
        except CostAnalysisError as error:
            return answer(errors=[GraphQLError(error.message, extensions=error.extensions)])

        # 2. Debit the tenant's quotas (its tier's, the operation's if the tier has one,
        #    [global] if any) all or nothing.
        client = request.client.host if request.client else "anonymous"
        tenant = request.headers.get("x-api-key") or client
        quotas = config.quotas_for(tenant, report.operation_name)
        decision = await limiter.acquire(tenant, report.cost, quotas)
        restore_rate = quotas[0].refill_per_second  # None for window algorithms
        headers = rate_limit_headers(decision, quotas)
        if not decision.allowed:
            error = rate_limit_error(decision)  # RATE_LIMITED, COST_EXCEEDS_CAPACITY, ...
            status = status_for(error.extensions["code"], config.limits.http_status)
            cost = cost_extension(report.cost, None, decision, restore_rate)
            return answer(errors=[error], cost=cost, status=status, headers=headers)

        # 3. Run it.
        name = report.operation_name
        result = execute(SCHEMA, document, Root(), variable_values=variables, operation_name=name)
        if inspect.isawaitable(result):  # async resolvers
            result = await result

        # 4. Price what really came back, and give back what was not used.
        actual = actual_cost(SCHEMA, document, result.data, variables, name, model)
        unused = max(0.0, report.cost - actual)
        if config.limits.refund_unused and unused > 0:
            await limiter.refund(tenant, unused, quotas)
            decision = decision._replace(remaining=min(decision.limit, decision.remaining + unused))
            headers = rate_limit_headers(decision, quotas)
        cost = cost_extension(report.cost, actual, decision, restore_rate)
        return answer(result.data, result.errors, cost=cost, headers=headers)

    app = Starlette(routes=[Route("/graphql", graphql, methods=["POST"])])
    app.state.limiter = limiter
    return app


def answer(
    data: dict[str, Any] | None = None,
    errors: list[GraphQLError] | None = None,
    *,
    cost: dict[str, Any] | None = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A GraphQL-over-HTTP response: ``data``, ``errors`` and ``extensions.cost``."""
    body: dict[str, Any] = {"data": data}
    if errors:
        body["errors"] = [error.formatted for error in errors]
    if cost is not None:
        body["extensions"] = {"cost": cost}
    return JSONResponse(body, status_code=status, headers=headers)


app = create_app()
