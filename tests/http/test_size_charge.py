"""A document's size is paid for, over real HTTP: graphql-core's pure-Python parse of the
42 KB of 900 fragments spread side by side costs a worker 51-75 ms before the static pass
refuses it (``TOO_MANY_FIELD_PAIRS``), and it paid ``min_charge`` (1 point): 50-75 ms a
point, where issue 22 asks for at most 20. Each request now pays at least its text's length
over ``[cost] chars_per_point`` (1,000: 42 points for it), refused before pricing (by the
static pass or the parser) or accepted and cheap; an honest small query pays what it paid.

Strawberry and Ariadne on uvicorn (the schema and apps of tests/http/test_field_pairs.py).
"""

# ruff: noqa: F811 (test_field_pairs' fixture, imported by name)
from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest
from prometheus_client import CollectorRegistry

from quotaql.instrumentation.metrics import PrometheusMetrics
from tests.http.test_field_pairs import (  # noqa: F401 (its fixture, by name)
    ATTACK,
    HONEST,
    _app,
    _post,
    config,
)
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from pathlib import Path

CAPACITY = 100_000  # test_field_pairs' tier
# An accepted, cheap operation in a 40 KB document; and one that does not parse.
PADDING = "# " + "x" * 40_000 + "\n"
CHEAP = PADDING + "{ field00 }"
BROKEN = PADDING + "{ field00"


def _available(client: httpx.Client, key: str) -> float:
    """What ``key`` has left before this probe (an honest query, 1 point)."""
    response, _ = _post(client, key, HONEST)
    available: float = response.json()["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]
    return available + 1


@pytest.mark.parametrize("adapter", ["strawberry", "ariadne"])
def test_fragments_side_by_side_pay_for_their_size(config: Path, adapter: str) -> None:
    with (
        UvicornServer(_app(adapter, config, PrometheusMetrics(CollectorRegistry()))) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        answers = [_post(client, "attacker", ATTACK)[0] for _ in range(3)]
        left = _available(client, "attacker")
    for response in answers:
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "TOO_MANY_FIELD_PAIRS"
    each = len(ATTACK) / 1000  # 42.8 points a request; it paid 1
    assert each >= 20
    assert left == pytest.approx(CAPACITY - 3 * each, abs=1)


@pytest.mark.parametrize("adapter", ["strawberry", "ariadne"])
def test_a_large_cheap_or_broken_document_pays_for_its_size(config: Path, adapter: str) -> None:
    with (
        UvicornServer(_app(adapter, config, PrometheusMetrics(CollectorRegistry()))) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        cheap, _ = _post(client, "attacker", CHEAP)
        after_cheap = _available(client, "attacker")
        broken, _ = _post(client, "attacker", BROKEN)
        after_broken = _available(client, "attacker")
        honest = [_post(client, "honest", HONEST)[0] for _ in range(3)]
    assert cheap.json()["data"] == {"field00": 0}
    assert cheap.json()["extensions"]["cost"]["requestedQueryCost"] == 0  # priced 0 points
    assert after_cheap == pytest.approx(CAPACITY - len(CHEAP) / 1000, abs=1)
    assert broken.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_PARSE_FAILED"
    assert after_broken == pytest.approx(after_cheap - 1 - len(BROKEN) / 1000, abs=1.5)
    # An honest small query pays min_charge, as before.
    remaining = [r.json()["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]
                 for r in honest]  # fmt: skip
    assert remaining == pytest.approx([CAPACITY - 1, CAPACITY - 2, CAPACITY - 3], abs=0.01)
