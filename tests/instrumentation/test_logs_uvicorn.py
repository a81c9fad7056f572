"""quotaql's logs under a real uvicorn: docs/logging.md's ``--log-config`` recipe shows every
decision as a JSON line with its fields, and uvicorn's default logging (which configures
uvicorn's own loggers, not the root) gets the warning that nothing shows quotaql's records.

The app runs in a uvicorn process of its own (``uvicorn --factory``), as it runs in
production: what reaches its stdout and stderr is what an operator would see.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry
from strawberry.asgi import GraphQL

from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from tests.support import strawberry_shop
from tests.support.servers import bind_loopback, spawn, terminate

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

ROOT = Path(__file__).resolve().parents[2]
CONFIG_ENV = "QUOTAQL_LOGS_TEST_CONFIG"
GET_ORDERS = "query GetOrders { products(first: 10) { name reviews(first: 5) { stars } } }"  # 70
TOML = """
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tiers.trial]
capacity = 100
refill_per_second = 0.001
mode = "shadow"
[tenants.acme]
tier = "free"
[tenants.newco]
tier = "trial"
"""


def create_app() -> Any:
    """``uvicorn --factory tests.instrumentation.test_logs_uvicorn:create_app``: the shop,
    its tenants named in logs as in metrics (``tenant_allowlist``)."""
    metrics = PrometheusMetrics(CollectorRegistry(), tenant_allowlist=["acme", "newco"])
    limiter = CostLimiter.from_config(Path(os.environ[CONFIG_ENV]), metrics=metrics)
    return GraphQL(strawberry_shop.make_schema(limiter))


def recipe() -> str:
    """docs/logging.md's uvicorn ``--log-config`` file: its first ``yaml`` block."""
    text = (ROOT / "docs" / "logging.md").read_text(encoding="utf-8")
    match = re.search(r"^```yaml\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert match is not None, "docs/logging.md has no yaml block"
    return match.group(1)


@contextlib.contextmanager
def uvicorn(config: Path, options: Sequence[str], output: dict[str, str]) -> Iterator[str]:
    """uvicorn serving :func:`create_app` in a child process, on a socket bound here: its
    URL; once it stopped, ``output`` holds its ``stdout`` and ``stderr`` (written to files
    next to ``config``: a pipe nobody reads could fill and stall it)."""
    sock = bind_loopback()
    fd = sock.fileno()
    out, err = config.with_suffix(".stdout"), config.with_suffix(".stderr")
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = spawn(
            [sys.executable, "-m", "uvicorn", "--factory",
             "tests.instrumentation.test_logs_uvicorn:create_app", "--fd", str(fd), "--loop",
             "asyncio", "--lifespan", "off", *options],
            cwd=ROOT, env={**os.environ, CONFIG_ENV: str(config)}, pass_fds=(fd,),
            stdout=stdout, stderr=stderr,
        )  # fmt: skip
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"uvicorn exited ({process.returncode})")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/graphql", timeout=2).status_code < 500:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.1)
        yield url
    finally:
        terminate(process)
        sock.close()
        output["stdout"] = out.read_text(encoding="utf-8")
        output["stderr"] = err.read_text(encoding="utf-8")


def ask(url: str, key: str, times: int) -> list[int]:
    return [
        httpx.post(
            f"{url}/graphql", json={"query": GET_ORDERS}, headers={"X-API-Key": key}, timeout=10
        ).status_code
        for _ in range(times)
    ]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_the_recipe_shows_refusals_and_shadow_refusals_as_json_with_their_fields(
    tmp_path: Path,
) -> None:
    config = tmp_path / "quotaql.toml"
    config.write_text(TOML, encoding="utf-8")
    log_config = tmp_path / "logging.yaml"
    log_config.write_text(recipe(), encoding="utf-8")
    output: dict[str, str] = {}
    with uvicorn(config, ["--log-config", str(log_config)], output) as url:
        statuses = ask(url, "acme", 4)
        shadowed = ask(url, "newco", 4)
    assert 429 in statuses
    assert set(shadowed) == {200}  # shadow mode lets them run
    # Every line on stdout is JSON: quotaql's, and uvicorn's own.
    lines = json_lines(output["stdout"])
    assert len(lines) == len(output["stdout"].splitlines())
    assert any(line["logger"] == "uvicorn.error" for line in lines)
    assert "LoggingWarning" not in output["stderr"]
    events = [line for line in lines if line["logger"] == "quotaql"]

    blocked = next(line for line in events if line.get("quotaql_event") == "blocked")
    assert blocked["level"] == "INFO"
    assert blocked["tenant"] == "acme"
    assert blocked["tier"] == "free"
    assert blocked["identity"] == "key"
    assert (blocked["operation_type"], blocked["operation_name"]) == ("query", "GetOrders")
    assert blocked["cost"] == 70
    assert blocked["code"] == "RATE_LIMITED"
    assert (blocked["limited_by"], blocked["limit"]) == ("tenant", 100)
    assert isinstance(blocked["remaining"], int)
    assert 0 <= blocked["remaining"] < 70
    retry = blocked["retry_after"]
    assert retry > 0
    assert round(retry, 3) == retry  # to the millisecond, no float noise
    assert blocked["message"] == (
        "quotaql: blocked query GetOrders of tenant acme (tier free): costs 70 points,"
        f' {blocked["remaining"]} of 100 left on quota "tenant"; retry in {retry} s'
    )

    shadow = next(line for line in events if line.get("quotaql_event") == "shadow_blocked")
    assert (shadow["tenant"], shadow["tier"], shadow["cost"]) == ("newco", "trial", 70)
    assert shadow["code"] == "RATE_LIMITED"
    assert shadow["message"].startswith(
        "quotaql: shadow mode would have blocked query GetOrders of tenant newco (tier trial):"
        " costs 70 points, "
    )


def test_under_uvicorns_default_logging_the_gate_warns_that_nothing_shows_its_lines(
    tmp_path: Path,
) -> None:
    config = tmp_path / "quotaql.toml"
    config.write_text(TOML, encoding="utf-8")
    output: dict[str, str] = {}
    with uvicorn(config, ["--log-level", "info"], output) as url:
        assert 429 in ask(url, "acme", 4)
    stderr = output["stderr"]
    # uvicorn's own lines show: its loggers have handlers, quotaql's has none.
    assert "Uvicorn running" in stderr or "Application startup" in stderr
    assert stderr.count("LoggingWarning") == 1  # once, at start-up
    assert "no handler receives the 'quotaql' logger's records" in stderr
    assert "docs/logging.md" in stderr
    # And indeed: the refusal's INFO line went nowhere.
    assert "quotaql: blocked" not in stderr + output["stdout"]
