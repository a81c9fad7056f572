"""``quotaql demo``: the shop API under uvicorn, three scripted tenants, a live terminal view.

- ``demo-polite`` (free tier) asks for a few products twice a second: well within budget.
- ``demo-integration`` (pro tier) sends bursts of catalogue reads and order exports; the
  exports have their own small quota (``[tiers.pro.operations]``).
- ``demo-scraper`` (free tier) sends expensive nested queries as fast as it can: the budget
  lets one through now and then and refuses the rest with 429. Each one that runs leaves it
  below a fifth of its budget: its answer warns first (``warn_at``, ``extensions.cost.warning``
  and the ``quotaql-warn`` parameter of its ``RateLimit`` header), the "warned" column.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import time
from dataclasses import dataclass, field

import httpx
import uvicorn
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from quotaql.demo.shop import create_app

__all__ = ["Demo", "TenantStats"]

POLITE = "{ products(first: 3) { name price } rateLimit { remaining } }"  # 6 + 1
CATALOGUE = "{ products(first: 10) { name reviews(first: 3) { stars } } }"  # 50
EXPORT = "mutation ExportOrders { exportOrders(first: 20) { id total } }"  # 10 + 20
SCRAPE = "{ products(first: 20) { name reviews(first: 3) { stars author { name } } } }"  # 280


@dataclass
class TenantStats:
    """What one tenant's requests got."""

    name: str
    tier: str
    story: str
    requests: int = 0
    allowed: int = 0
    blocked: int = 0
    warned: int = 0  # answers that warned: a quota below warn_at's threshold
    charged: float = 0.0
    remaining: float | None = None
    limit: float | None = None
    statuses: dict[int, int] = field(default_factory=dict)

    def record(self, response: httpx.Response) -> None:
        self.requests += 1
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        body = response.json()
        errors = body.get("errors") or []
        codes = [(error.get("extensions") or {}).get("code") for error in errors]
        if response.status_code == 429 or "RATE_LIMITED" in codes:
            self.blocked += 1
        else:
            self.allowed += 1
            cost = (body.get("extensions") or {}).get("cost") or {}
            self.charged += float(cost.get("actualQueryCost") or 0)
            if cost.get("warning") or "quotaql-warn" in response.headers.get("RateLimit", ""):
                self.warned += 1
        remaining = response.headers.get("X-RateLimit-Remaining")
        limit = response.headers.get("X-RateLimit-Limit")
        if remaining is not None and limit is not None:
            self.remaining, self.limit = float(remaining), float(limit)


class Demo:
    """Serve the shop and drive the scripted traffic.

    Args:
        port: where uvicorn listens (0: a free port).
        duration: seconds of scripted traffic.
        redis_url: keep the budgets in Redis instead of in memory.
        console: where the live view goes.
    """

    def __init__(
        self,
        *,
        port: int = 8000,
        duration: float = 10.0,
        redis_url: str | None = None,
        console: Console | None = None,
    ) -> None:
        self.duration = duration
        self.redis_url = redis_url
        self.console = console or Console()
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", port))
        self.port: int = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.tenants = {
            "demo-polite": TenantStats("demo-polite", "free", "a few products, twice a second"),
            "demo-integration": TenantStats(
                "demo-integration", "pro", "bursts of reads and order exports"
            ),
            "demo-scraper": TenantStats(
                "demo-scraper", "free", "expensive nested queries, flat out"
            ),
        }

    def run(self, *, serve: bool = True) -> dict[str, TenantStats]:
        """Run the scripted traffic; then keep serving until Ctrl-C (unless ``serve`` is off)."""
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(self._main(serve))
        return self.tenants

    async def _main(self, serve: bool) -> None:
        storage = None
        if self.redis_url:
            from quotaql.storage.redis import AsyncRedisStorage  # noqa: PLC0415

            storage = AsyncRedisStorage.from_url(self.redis_url, timeout=0.5)
        app = create_app(storage=storage)
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve(sockets=[self.socket]))
        try:
            while not server.started:
                if serving.done():
                    serving.result()  # raises what stopped it
                await asyncio.sleep(0.02)
            where = "Redis at " + self.redis_url if self.redis_url else "memory"
            self.console.print(f"quotaql demo: the shop API at {self.url}/graphql ({where})")
            for stats in self.tenants.values():
                self.console.print(f"  {stats.name} ({stats.tier} tier): {stats.story}")
            await self._traffic()
            self._summary()
            if serve:
                self._instructions()
                await serving
        finally:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await serving
            if storage is not None:
                await storage.close()

    async def _traffic(self) -> None:
        progress = Progress(
            TextColumn("scripted traffic"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeRemainingColumn(),
            console=self.console,
        )
        task = progress.add_task("traffic", total=self.duration)
        started = time.monotonic()
        deadline = started + self.duration
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            workers = [
                self._polite(client, deadline),
                self._integration(client, deadline),
                *(self._scraper(client, deadline) for _ in range(3)),
            ]
            with Live(self._view(progress), console=self.console, refresh_per_second=4) as live:
                running = asyncio.gather(*workers)
                while not running.done():
                    progress.update(task, completed=min(self.duration, time.monotonic() - started))
                    live.update(self._view(progress))
                    await asyncio.sleep(0.25)
                await running
                progress.update(task, completed=self.duration)
                live.update(self._view(progress))

    async def _send(self, client: httpx.AsyncClient, tenant: str, query: str) -> None:
        response = await client.post(
            "/graphql", json={"query": query}, headers={"X-API-Key": tenant}
        )
        self.tenants[tenant].record(response)

    async def _polite(self, client: httpx.AsyncClient, deadline: float) -> None:
        while time.monotonic() < deadline:
            await self._send(client, "demo-polite", POLITE)
            await asyncio.sleep(0.5)

    async def _integration(self, client: httpx.AsyncClient, deadline: float) -> None:
        while time.monotonic() < deadline:
            for _ in range(12):
                await self._send(client, "demo-integration", CATALOGUE)
            for _ in range(4):
                await self._send(client, "demo-integration", EXPORT)
            await asyncio.sleep(2.0)

    async def _scraper(self, client: httpx.AsyncClient, deadline: float) -> None:
        while time.monotonic() < deadline:
            await self._send(client, "demo-scraper", SCRAPE)
            await asyncio.sleep(0.05)

    def _table(self) -> Table:
        table = Table(title="quotaql demo: cost-based rate limiting, per tenant")
        for column in ("tenant", "tier", "requests", "allowed", "blocked", "warned"):
            table.add_column(column, justify="right" if column[0] in "rabw" else "left")
        table.add_column("cost charged", justify="right")
        table.add_column("budget left (last answer)", justify="right")
        for stats in self.tenants.values():
            left = (
                f"{math.floor(stats.remaining):,} / {stats.limit:,.0f}"
                if stats.remaining is not None and stats.limit is not None
                else "-"
            )
            table.add_row(
                stats.name,
                stats.tier,
                f"{stats.requests:,}",
                f"[green]{stats.allowed:,}[/]",
                f"[red]{stats.blocked:,}[/]" if stats.blocked else "0",
                f"[yellow]{stats.warned:,}[/]" if stats.warned else "0",
                f"{stats.charged:,.0f}",
                left,
            )
        return table

    def _view(self, progress: Progress) -> Group:
        return Group(self._table(), progress)

    def _summary(self) -> None:
        self.console.print()
        for stats in self.tenants.values():
            self.console.print(
                f"{stats.name}: {stats.requests} requests, {stats.allowed} allowed,"
                f" {stats.blocked} blocked, {stats.warned} warned, {stats.charged:.0f} points"
                " charged"
            )

    def _instructions(self) -> None:
        body = '{"query": "' + SCRAPE.replace('"', '\\"') + '"}'
        self.console.print(
            f"\nStill serving (Ctrl-C to stop):\n"
            f"  GraphiQL      {self.url}/graphql\n"
            f"  metrics       {self.url}/metrics\n"
            f"  a 429 with its headers (run it twice: the first call spends the budget):\n"
            f"  curl -i {self.url}/graphql -H 'X-API-Key: demo-scraper'"
            f" -H 'Content-Type: application/json' -d '{body}'\n",
            highlight=False,
            soft_wrap=True,
        )
