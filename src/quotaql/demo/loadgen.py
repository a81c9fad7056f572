"""``quotaql loadgen``: steady GraphQL traffic from several tenants, bounded in time and count.

Each tenant sends the demo shop's queries in turn (cheap reads, nested reads, an export)
from ``concurrency`` workers; every answer is counted by status, and those that warned
(``warn_at``: a budget below its threshold) apart. It stops at ``duration`` seconds or
``max_requests`` requests, whichever comes first.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from quotaql.demo.run import CATALOGUE, EXPORT, POLITE, SCRAPE

__all__ = ["LoadResult", "run_load"]

QUERIES = (POLITE, CATALOGUE, POLITE, SCRAPE, POLITE, EXPORT)


@dataclass
class LoadResult:
    """What the load got, per tenant and status code (0: no answer)."""

    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    seconds: float = 0.0
    warned: Counter[str] = field(default_factory=Counter)
    """Answers per tenant that warned (``warn_at``: the ``quotaql-warn`` parameter of their
    ``RateLimit`` header): a budget below its threshold, before the wall."""

    @property
    def requests(self) -> int:
        return sum(sum(counts.values()) for counts in self.statuses.values())


async def _worker(
    client: httpx.AsyncClient,
    tenant: str,
    offset: int,
    deadline: float,
    budget: list[int],
    result: LoadResult,
) -> None:
    counts = result.statuses.setdefault(tenant, Counter())
    turn = offset
    while time.monotonic() < deadline and budget[0] > 0:
        budget[0] -= 1
        query = QUERIES[turn % len(QUERIES)]
        turn += 1
        try:
            response = await client.post(
                "/graphql", json={"query": query}, headers={"X-API-Key": tenant}
            )
            counts[response.status_code] += 1
            if "quotaql-warn" in response.headers.get("RateLimit", ""):
                result.warned[tenant] += 1
        except httpx.HTTPError:
            counts[0] += 1
            await asyncio.sleep(0.1)


async def _run(
    url: str,
    tenants: list[str],
    duration: float,
    concurrency: int,
    max_requests: int,
    console: Console,
) -> LoadResult:
    result = LoadResult()
    started = time.monotonic()
    deadline = started + duration
    budget = [max_requests]
    progress = Progress(
        TextColumn("load"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
        TimeRemainingColumn(),
        console=console,
    )
    limits = httpx.Limits(max_connections=concurrency * len(tenants))
    async with httpx.AsyncClient(base_url=url, timeout=10, limits=limits) as client:
        workers = [
            _worker(client, tenant, index, deadline, budget, result)
            for tenant in tenants
            for index in range(concurrency)
        ]
        with progress:
            task = progress.add_task("load", total=duration)
            running = asyncio.gather(*workers)
            while not running.done():
                progress.update(task, completed=min(duration, time.monotonic() - started))
                await asyncio.sleep(0.2)
            await running
            progress.update(task, completed=duration)
    result.seconds = time.monotonic() - started
    return result


def run_load(
    url: str,
    tenants: list[str],
    *,
    duration: float = 10.0,
    concurrency: int = 2,
    max_requests: int = 100_000,
    console: Console | None = None,
) -> LoadResult:
    """Drive ``url`` (the server root; queries go to ``/graphql``) and print a summary."""
    console = console or Console()
    result = asyncio.run(_run(url, tenants, duration, concurrency, max_requests, console))
    table = Table(title=f"{result.requests:,} requests in {result.seconds:.1f} s")
    codes = sorted({code for counts in result.statuses.values() for code in counts})
    table.add_column("tenant")
    for code in codes:
        table.add_column(str(code) if code else "no answer", justify="right")
    table.add_column("warned", justify="right")
    for tenant, counts in result.statuses.items():
        warned = f"{result.warned[tenant]:,}"
        table.add_row(tenant, *(f"{counts.get(code, 0):,}" for code in codes), warned)
    console.print(table)
    return result
