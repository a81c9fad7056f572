"""The app ``bench_attacks.py`` attacks through uvicorn: one schema served by Strawberry or
Ariadne, protected as the docs advise (``BodyLimit`` of 1 MiB in front, ``CostLimiter`` on
``MemoryStorage``, the default configuration but for a tier that never runs out).

``uvicorn --factory bench_attacks_app:create_app --app-dir bench`` with the environment:

- ``QUOTAQL_ATTACK_FRAMEWORK``: ``strawberry`` or ``ariadne``;
- ``QUOTAQL_ATTACK_CONFIG``: the ``quotaql.toml`` (``CONFIG_TOML``).

The schema holds what the attacks of issue 22 pick: ``items(first: Int)`` sized by the
``first`` naming convention while its resolver returns ``ITEMS[:first]`` (all of them for
``first: null``), ``count(values: [Int!])`` that takes a list variable, and ``TYPES`` types of
``FIELDS`` fields each, so that introspection walks about 240 fields. ``GET /metrics``
serves the process's Prometheus registry (the points charged are read there), and
``GET /__attack/cpu`` the process's CPU seconds (user + system, every thread).
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, generate_latest

from quotaql import MemoryStorage
from quotaql.asgi import BodyLimit
from quotaql.instrumentation.metrics import PrometheusMetrics

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

__all__ = [
    "ATTACKERS",
    "BODY_LIMIT",
    "CONFIG_TOML",
    "CPU_PATH",
    "ITEMS",
    "SDL",
    "WIDE",
    "create_app",
]

ITEMS = 500
TYPES = 40
FIELDS = 6
WIDE = 60  # the fields of ``Wide``: fragments spread side by side pick among them
BODY_LIMIT = 1 << 20  # the 1 MiB the docs advise
CPU_PATH = "/__attack/cpu"
# Each attack comes with an API key of its own (ATTACKERS tenants): one attack's worker time
# quota is not another's. Their points never run out in a run (the work of one request is
# measured, not the refusals); every other setting, the time quota's included, is the default.
ATTACKERS = 16  # more than the attacks
CONFIG_TOML = """\
[tiers.free]
capacity = 1e12
refill_per_second = 1
""" + "".join(f'[tenants.attacker{i}]\ntier = "free"\n' for i in range(ATTACKERS))

_PADDING = "\n".join(
    f"type T{i} {{ {' '.join(f'f{j}: String' for j in range(FIELDS))} }}" for i in range(TYPES)
)
SDL = f"""
type Item {{ id: Int! name: String! }}
type Wide {{ {" ".join(f"w{j}: String" for j in range(WIDE))} }}
type Query {{
  hello: String
  items(first: Int): [Item!]!
  count(values: [Int!]): Int!
  wide: Wide
  {" ".join(f"t{i}: T{i}" for i in range(TYPES))}
}}
{_PADDING}
"""


def _items(first: int | None) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"item {i}"} for i in range(ITEMS)][:first]


def _strawberry_schema(limiter: Any) -> Any:
    import strawberry

    @strawberry.type
    class Item:
        id: int
        name: str

    padding: dict[str, Any] = {}
    for i in range(TYPES):
        namespace: dict[str, Any] = {
            "__annotations__": {f"f{j}": str | None for j in range(FIELDS)}
        }
        namespace.update({f"f{j}": None for j in range(FIELDS)})
        padding[f"t{i}"] = strawberry.type(type(f"T{i}", (), namespace))
    wide: dict[str, Any] = {"__annotations__": {f"w{j}": str | None for j in range(WIDE)}}
    wide.update({f"w{j}": "w" for j in range(WIDE)})
    padding["wide"] = strawberry.type(type("Wide", (), wide))

    def hello() -> str | None:
        return "world"

    def items(first: int | None = None) -> list[Item]:
        return [Item(id=it["id"], name=it["name"]) for it in _items(first)]

    def count(values: list[int] | None = None) -> int:
        return len(values or ())

    # Real types, not the strings this module's annotations are: Item is local.
    hello.__annotations__ = {"return": str | None}
    items.__annotations__ = {"first": int | None, "return": list[Item]}
    count.__annotations__ = {"values": list[int] | None, "return": int}
    query_namespace: dict[str, Any] = {
        "hello": strawberry.field(resolver=hello),
        "items": strawberry.field(resolver=items),
        "count": strawberry.field(resolver=count),
        "__annotations__": {name: kind | None for name, kind in padding.items()},
    }
    query_namespace.update(dict.fromkeys(padding))
    query_namespace["wide"] = strawberry.field(resolver=padding["wide"])
    query = strawberry.type(type("Query", (), query_namespace))
    return strawberry.Schema(query=query, extensions=[limiter])


def _ariadne_schema() -> Any:
    from ariadne import QueryType, make_executable_schema

    query = QueryType()
    query.set_field("hello", lambda *_: "world")
    query.set_field("items", lambda *_, first=None: _items(first))
    query.set_field("count", lambda *_, values=None: len(values or ()))
    query.set_field("wide", lambda *_: dict.fromkeys((f"w{j}" for j in range(WIDE)), "w"))
    return make_executable_schema(SDL, query)


class _AttackApp:
    """The protected GraphQL app, with ``/metrics`` and the CPU probe beside it."""

    def __init__(self, graphql: Any, limiter: Any) -> None:
        self.graphql = BodyLimit(graphql, max_bytes=BODY_LIMIT, limiter=limiter)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        if scope["type"] == "http" and path == "/metrics":
            await _reply(send, generate_latest(REGISTRY), b"text/plain")
        elif scope["type"] == "http" and path == CPU_PATH:
            cpu = time.process_time()
            await _reply(send, json.dumps({"cpu": cpu}).encode(), b"application/json")
        else:
            await self.graphql(scope, receive, send)


async def _reply(send: Send, body: bytes, kind: bytes) -> None:
    headers = [(b"content-type", kind), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app() -> _AttackApp:
    framework = os.environ["QUOTAQL_ATTACK_FRAMEWORK"]
    config = os.environ["QUOTAQL_ATTACK_CONFIG"]
    metrics = PrometheusMetrics()
    if framework == "strawberry":
        from strawberry.asgi import GraphQL

        from quotaql.plugin import CostLimiter

        limiter = CostLimiter.from_config(config, storage=MemoryStorage(), metrics=metrics)
        return _AttackApp(GraphQL(_strawberry_schema(limiter)), limiter)
    if framework == "ariadne":
        from quotaql.ariadne import CostLimiter as AriadneLimiter

        limiter = AriadneLimiter.from_config(config, storage=MemoryStorage(), metrics=metrics)
        return _AttackApp(limiter.asgi(_ariadne_schema()), limiter)
    raise RuntimeError(f"QUOTAQL_ATTACK_FRAMEWORK={framework!r}: strawberry or ariadne")
