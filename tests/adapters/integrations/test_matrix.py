"""The rate-limiting contract over real HTTP, under each of the eleven integrations' own servers.

Every integration serves ``tests.adapters.integrations.limited`` (``CostLimiter.from_config``) on
loopback, one server per integration and configuration for the whole module. Budgets are
exact: the free tier holds 100 points and refills 0.001 per second (0.1 point in the longest
run), and ``{ items(first: 10) { id } }`` costs 10, so a fresh address gets exactly ten
calls. Tests sharing a server never share a subject: each one connects from loopback
addresses of its own (``127.0.1.x`` and friends; Linux routes all of ``127.0.0.0/8`` to
``lo``), so they run in any order.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import random
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.adapters.integrations.limited import (
    CHANNELS_LIMITED_PATH,
    CONFIG_VARIABLE,
    FEW,
    limited_schema,
)
from tests.support.frameworks import SERVERS, LiveServer, configure_django, serve

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

FREE_CAPACITY = 100
PRO_CAPACITY = 1000
REFILL = 0.001
COST = 10
CALLS = FREE_CAPACITY // COST  # what one fresh free-tier subject gets: 10 calls
QUERY = f"{{ items(first: {COST}) {{ id }} subject }}"
TOO_BIG = f"{{ items(first: {FREE_CAPACITY + 1}) {{ id }} }}"  # more than free can ever hold

BASE_TOML = f"""
[limits]
default_tier = "free"
reload_interval = 0

[tiers.free]
capacity = {FREE_CAPACITY}
refill_per_second = {REFILL}

[tiers.pro]
capacity = {PRO_CAPACITY}
refill_per_second = {REFILL}

[tenants.acme]
tier = "pro"

[tenants.globex]
tier = "pro"
"""
PROXY_TOML = BASE_TOML + '\n[identity]\ntrusted_proxies = ["127.0.0.1/32"]\n'
REJECT_TOML = BASE_TOML + '\n[identity]\nunknown_keys = "reject"\n'

FREE_POLICY = f'"tenant";q={FREE_CAPACITY};w={math.ceil(FREE_CAPACITY / REFILL)}'
PRO_POLICY = f'"tenant";q={PRO_CAPACITY};w={math.ceil(PRO_CAPACITY / REFILL)}'
# TEST-NET-2 (RFC 5737): only ever header values, never addresses anything talks to.
FORWARDED_CLIENT = "198.51.100.7"

# Seeded: a failure names the same spoofed entries and keys when it runs again.
_random = random.Random(20_260_101)


def random_key() -> str:
    return f"k-{_random.getrandbits(64):016x}"


def random_address() -> str:
    return str(ipaddress.IPv4Address(_random.getrandbits(32)))


# -- servers and clients -------------------------------------------------------------------


class Api:
    """Posts GraphQL to one live server from chosen loopback addresses.

    One kept-alive ``httpx.Client`` per source address: a loop of requests costs a
    request each, not a connection each.
    """

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self._clients: dict[str, httpx.Client] = {}

    @property
    def integration(self) -> str:
        return self.server.integration

    def _client(self, source: str) -> httpx.Client:
        client = self._clients.get(source)
        if client is None:
            transport = httpx.HTTPTransport(local_address=source)
            client = self._clients[source] = httpx.Client(transport=transport, timeout=10)
        return client

    def post(
        self,
        query: str = QUERY,
        *,
        source: str,
        key: str | None = None,
        headers: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    ) -> httpx.Response:
        """POST ``query`` from ``source``, with ``key`` as ``X-API-Key`` and ``headers``
        (pairs: a name may repeat)."""
        sent = list(headers.items() if isinstance(headers, Mapping) else headers)
        if key is not None:
            sent.append(("X-API-Key", key))
        return self._client(source).post(self.server.url, json={"query": query}, headers=sent)

    def get(self, query: str = QUERY, *, source: str) -> httpx.Response:
        """The query in the URL (``allow_queries_via_get``, every integration's default)."""
        return self._client(source).get(self.server.url, params={"query": query})

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


@contextlib.contextmanager
def limited_server(integration: str, config_path: Path) -> Iterator[Api]:
    """``integration`` serving the limited schema configured by ``config_path``."""
    with contextlib.ExitStack() as stack:
        if integration == "channels":
            # daphne's child builds the schema at import, from its environment.
            child_env = {CONFIG_VARIABLE: str(config_path)}
            live = stack.enter_context(
                serve(integration, CHANNELS_LIMITED_PATH, child_env=child_env)
            )
        else:
            live = stack.enter_context(serve(integration, limited_schema(config_path)))
        api = Api(live)
        stack.callback(api.close)
        yield api


@pytest.fixture(scope="module", params=list(SERVERS))
def integration(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _config(factory: pytest.TempPathFactory, text: str) -> Path:
    path = factory.mktemp("quotaql") / "quotaql.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def api(integration: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The default identity: known keys are tenants, anything else pays by its address."""
    with limited_server(integration, _config(tmp_path_factory, BASE_TOML)) as served:
        yield served


@pytest.fixture(scope="module")
def proxied(integration: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """``trusted_proxies = ["127.0.0.1/32"]``: a peer at 127.0.0.1 is a proxy."""
    with limited_server(integration, _config(tmp_path_factory, PROXY_TOML)) as served:
        yield served


@pytest.fixture(scope="module")
def rejecting(integration: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """``unknown_keys = "reject"``."""
    with limited_server(integration, _config(tmp_path_factory, REJECT_TOML)) as served:
        yield served


# -- reading answers ---------------------------------------------------------------------


def expect(api: Api, response: httpx.Response, status: int) -> dict[str, Any]:
    """The JSON body of ``response``, once its status is ``status`` (else the server's log)."""
    assert response.status_code == status, (
        f"{api.integration}: {response.status_code} {response.text}\n{api.server.log()}"
    )
    body: dict[str, Any] = response.json()
    return body


def code_of(body: Mapping[str, Any]) -> str:
    (error,) = body["errors"]
    code: str = error["extensions"]["code"]
    return code


def remaining(response: httpx.Response) -> int:
    return int(response.headers["X-RateLimit-Remaining"])


def subject(api: Api, response: httpx.Response) -> str:
    subject: str = expect(api, response, 200)["data"]["subject"]
    return subject


def statuses(responses: list[httpx.Response]) -> list[int]:
    return [response.status_code for response in responses]


def assert_refusal_headers(response: httpx.Response, *, limit: int, policy: str) -> None:
    """A 429's headers: ``Retry-After`` of at least a second and every budget header."""
    headers = response.headers
    assert int(headers["Retry-After"]) >= 1
    assert headers["RateLimit-Policy"] == policy
    match = re.fullmatch(r'"tenant";r=(\d+);t=(\d+)', headers["RateLimit"])
    assert match is not None, headers["RateLimit"]
    assert int(match[1]) == remaining(response) == 0
    assert headers["X-RateLimit-Limit"] == str(limit)
    assert int(headers["X-RateLimit-Reset"]) == int(match[2]) >= 1


# -- 1. an allowed call ------------------------------------------------------------------


def test_an_allowed_call_answers_200_with_its_cost_and_the_rate_limit_headers(api: Api) -> None:
    response = api.post(source="127.0.1.1")

    body = expect(api, response, 200)
    assert "errors" not in body
    assert len(body["data"]["items"]) == COST
    cost = body["extensions"]["cost"]
    assert cost["requestedQueryCost"] == COST
    assert cost["actualQueryCost"] == COST  # all ten items came back: nothing to refund
    throttle = cost["throttleStatus"]
    assert throttle["maximumAvailable"] == FREE_CAPACITY
    assert throttle["currentlyAvailable"] == pytest.approx(FREE_CAPACITY - COST, abs=0.01)
    assert throttle["restoreRate"] == REFILL
    headers = response.headers
    assert headers["RateLimit-Policy"] == FREE_POLICY
    reset = math.ceil(COST / REFILL)  # until the ten points spent are back
    assert headers["RateLimit"] == f'"tenant";r={FREE_CAPACITY - COST};t={reset}'
    assert headers["X-RateLimit-Limit"] == str(FREE_CAPACITY)
    assert remaining(response) == FREE_CAPACITY - COST
    assert int(headers["X-RateLimit-Reset"]) == reset
    assert "Retry-After" not in headers


def test_what_an_operation_did_not_use_is_refunded_after_execution(api: Api) -> None:
    estimate = 2 * COST
    first = api.post(f"{{ few(first: {estimate}) {{ id }} }}", source="127.0.1.9")
    second = api.post(f"{{ few(first: {estimate}) {{ id }} }}", source="127.0.1.9")

    cost = expect(api, first, 200)["extensions"]["cost"]
    assert (cost["requestedQueryCost"], cost["actualQueryCost"]) == (estimate, FEW)
    assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(
        FREE_CAPACITY - FEW, abs=0.01
    )
    # The headers are written after the refund: they say what is left, not the estimate.
    assert [remaining(first), remaining(second)] == [FREE_CAPACITY - FEW, FREE_CAPACITY - 2 * FEW]


def test_a_query_sent_with_get_is_priced_and_debited_the_same_way(api: Api) -> None:
    responses = [api.get(source="127.0.1.10") for _ in range(CALLS + 1)]

    assert statuses(responses) == [200] * CALLS + [429]
    assert remaining(responses[0]) == FREE_CAPACITY - COST
    assert code_of(responses[CALLS].json()) == "RATE_LIMITED"
    assert_refusal_headers(responses[CALLS], limit=FREE_CAPACITY, policy=FREE_POLICY)


# -- 2. refusals ---------------------------------------------------------------------------


def test_a_call_over_the_remaining_budget_is_refused_with_429_and_every_header(api: Api) -> None:
    responses = [api.post(source="127.0.1.2") for _ in range(CALLS + 1)]

    assert statuses(responses[:CALLS]) == [200] * CALLS
    assert [remaining(response) for response in responses[:CALLS]] == list(range(90, -1, -10))
    refused = responses[CALLS]
    body = expect(api, refused, 429)
    assert body["data"] is None  # refused before any resolver ran
    assert code_of(body) == "RATE_LIMITED"
    extensions = body["errors"][0]["extensions"]
    assert (extensions["cost"], extensions["limit"], extensions["quota"]) == (
        COST,
        FREE_CAPACITY,
        "tenant",
    )
    assert extensions["retryAfter"] >= 1
    assert body["errors"][0]["message"].startswith("This query costs 10 points but only 0 of")
    assert_refusal_headers(refused, limit=FREE_CAPACITY, policy=FREE_POLICY)


def test_a_query_above_capacity_is_refused_with_400_and_pays_the_minimum(api: Api) -> None:
    refused = api.post(TOO_BIG, source="127.0.1.3")

    body = expect(api, refused, 400)
    assert body["data"] is None
    assert code_of(body) == "COST_EXCEEDS_CAPACITY"
    extensions = body["errors"][0]["extensions"]
    assert (extensions["cost"], extensions["limit"]) == (FREE_CAPACITY + 1, FREE_CAPACITY)
    assert "Retry-After" not in refused.headers  # waiting never helps
    assert refused.headers["X-RateLimit-Limit"] == str(FREE_CAPACITY)
    # It can never run, so asking again must not be free: [limits] min_charge (1).
    assert remaining(api.post(source="127.0.1.3")) == FREE_CAPACITY - 1 - COST


# -- 3. identity -------------------------------------------------------------------------


def test_a_known_key_pays_from_its_tenants_budget_not_its_address(api: Api) -> None:
    response = api.post(source="127.0.1.4", key="acme")

    assert subject(api, response) == "key:acme"
    assert response.headers["X-RateLimit-Limit"] == str(PRO_CAPACITY)
    assert response.headers["RateLimit-Policy"] == PRO_POLICY
    assert remaining(response) == PRO_CAPACITY - COST
    assert remaining(api.post(source="127.0.1.4")) == FREE_CAPACITY - COST


def test_a_new_random_key_per_request_gets_no_more_than_the_address_budget(api: Api) -> None:
    attempts = CALLS + 3
    keyless = [api.post(source="127.0.1.5") for _ in range(attempts)]
    attack = [api.post(source="127.0.1.6", key=random_key()) for _ in range(attempts)]

    assert statuses(keyless) == [200] * CALLS + [429] * 3
    assert statuses(attack) == statuses(keyless)
    assert {subject(api, response) for response in attack[:CALLS]} == {"ip:127.0.1.6"}
    assert {code_of(response.json()) for response in attack[CALLS:]} == {"RATE_LIMITED"}


def test_two_client_addresses_have_separate_budgets(api: Api) -> None:
    spent = [api.post(source="127.0.0.2") for _ in range(CALLS + 1)]
    other = api.post(source="127.0.0.3")

    assert statuses(spent) == [200] * CALLS + [429]
    assert subject(api, other) == "ip:127.0.0.3"
    assert remaining(other) == FREE_CAPACITY - COST


def test_without_trusted_proxies_x_forwarded_for_is_ignored_and_the_peer_pays(api: Api) -> None:
    forwarded = [
        api.post(
            source="127.0.0.1",
            headers={"X-Forwarded-For": f"{random_address()}, {FORWARDED_CLIENT}"},
        )
        for _ in range(2)
    ]

    assert [subject(api, response) for response in forwarded] == ["ip:127.0.0.1"] * 2
    assert [remaining(response) for response in forwarded] == [90, 80]


def test_behind_a_trusted_proxy_the_forwarded_client_pays_whatever_the_spoofed_entry(
    proxied: Api,
) -> None:
    responses = [
        proxied.post(
            source="127.0.0.1",
            headers={"X-Forwarded-For": f"{random_address()}, {FORWARDED_CLIENT}"},
        )
        for _ in range(CALLS + 1)
    ]
    proxy_itself = proxied.post(source="127.0.0.1")

    assert statuses(responses) == [200] * CALLS + [429], proxied.server.log()
    assert {subject(proxied, response) for response in responses[:CALLS]} == {
        f"ip:{FORWARDED_CLIENT}"
    }
    assert code_of(responses[CALLS].json()) == "RATE_LIMITED"
    assert subject(proxied, proxy_itself) == "ip:127.0.0.1"
    assert remaining(proxy_itself) == FREE_CAPACITY - COST


def test_behind_a_trusted_proxy_an_untrusted_peer_still_pays_for_itself(proxied: Api) -> None:
    forwarded_for = {"X-Forwarded-For": "198.51.100.9"}
    direct = [proxied.post(source="127.0.0.2", headers=forwarded_for) for _ in range(3)]
    through_the_proxy = proxied.post(source="127.0.0.1", headers=forwarded_for)

    assert [subject(proxied, response) for response in direct] == ["ip:127.0.0.2"] * 3
    assert [remaining(response) for response in direct] == [90, 80, 70]
    # What 127.0.0.2 forwarded cost 198.51.100.9 nothing.
    assert subject(proxied, through_the_proxy) == "ip:198.51.100.9"
    assert remaining(through_the_proxy) == FREE_CAPACITY - COST


def test_behind_a_trusted_proxy_repeated_forwarded_lines_count_as_one_list(
    proxied: Api,
) -> None:
    # HAProxy's `option forwardfor` adds a line of its own instead of appending to the
    # client's: the client wrote the first line, each proxy one more after it.
    spoofed = random_address()
    lines = [
        ("X-Forwarded-For", spoofed),
        ("X-Forwarded-For", "198.51.100.10"),
        ("X-Forwarded-For", "127.0.0.1"),  # a trusted hop: skipped
    ]
    response = proxied.post(source="127.0.0.1", headers=lines)

    if proxied.integration == "chalice":
        # Chalice's local server keeps the first of repeated header lines, and its Lambda
        # event has no multiValueHeaders: the client's own line is all anything can read.
        assert subject(proxied, response) == f"ip:{spoofed}"
    else:
        assert subject(proxied, response) == "ip:198.51.100.10"


# -- 4. a key spelled like an address ------------------------------------------------------


def test_an_api_key_spelled_like_an_address_leaves_that_address_budget_alone(api: Api) -> None:
    spelled = [api.post(source="127.0.1.7", key="127.0.0.5") for _ in range(CALLS + 1)]
    owner = api.post(source="127.0.0.5")

    assert statuses(spelled) == [200] * CALLS + [429]
    assert {subject(api, response) for response in spelled[:CALLS]} == {"ip:127.0.1.7"}
    assert subject(api, owner) == "ip:127.0.0.5"
    assert remaining(owner) == FREE_CAPACITY - COST  # its whole budget was there


# -- 5. GraphQL-Cost: validate -----------------------------------------------------------


def test_graphql_cost_validate_prices_without_running_and_pays_the_minimum(api: Api) -> None:
    validated = [
        api.post(source="127.0.1.8", headers={"GraphQL-Cost": "validate"}) for _ in range(3)
    ]
    real = api.post(source="127.0.1.8")

    for number, response in enumerate(validated, 1):
        body = expect(api, response, 200)
        assert body["data"] is None
        assert "errors" not in body
        assert body["extensions"]["cost"]["requestedQueryCost"] == COST
        assert remaining(response) == FREE_CAPACITY - number  # [limits] min_charge: 1 each
    assert remaining(real) == FREE_CAPACITY - 3 - COST


# -- 6. unknown_keys = "reject" ----------------------------------------------------------


def test_an_unknown_key_is_refused_with_401_when_unknown_keys_are_rejected(
    rejecting: Api,
) -> None:
    refused = rejecting.post(source="127.0.2.1", key=random_key())
    known = rejecting.post(source="127.0.2.1", key="acme")
    keyless = rejecting.post(source="127.0.2.1")

    body = expect(rejecting, refused, 401)
    assert body["data"] is None
    assert code_of(body) == "UNKNOWN_API_KEY"
    assert "X-RateLimit-Remaining" not in refused.headers
    assert subject(rejecting, known) == "key:acme"
    # The try cost the address one point.
    assert remaining(keyless) == FREE_CAPACITY - 1 - COST


def test_a_client_that_keeps_sending_unknown_keys_runs_its_address_dry(rejecting: Api) -> None:
    source = "127.0.2.2"
    tries = [rejecting.post(source=source, key=random_key()) for _ in range(FREE_CAPACITY + 2)]
    keyless = rejecting.post(source=source)
    known = rejecting.post(source=source, key="globex")

    # One point per try: the address holds 100 of them, then waiting is the only way.
    assert statuses(tries) == [401] * FREE_CAPACITY + [429] * 2, rejecting.server.log()
    assert {code_of(response.json()) for response in tries[:FREE_CAPACITY]} == {"UNKNOWN_API_KEY"}
    assert code_of(tries[-1].json()) == "RATE_LIMITED"
    assert_refusal_headers(tries[-1], limit=FREE_CAPACITY, policy=FREE_POLICY)
    assert code_of(expect(rejecting, keyless, 429)) == "RATE_LIMITED"  # the address is dry
    assert subject(rejecting, known) == "key:globex"  # a known key still works
    assert remaining(known) == PRO_CAPACITY - COST


# -- identity by principal: Django's session user ------------------------------------------


@pytest.fixture(scope="module")
def session_user() -> tuple[str, str]:
    """A Django user logged in: its primary key and the ``Cookie`` header of its session."""
    configure_django()
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(username="matrix-alice")
    client = Client()
    client.force_login(user)
    return str(user.pk), f"sessionid={client.cookies['sessionid'].value}"


def _logged_in_call(api: Api, session_user: tuple[str, str]) -> tuple[httpx.Response, str]:
    pk, cookie = session_user
    response = api.post(source="127.0.4.1", headers={"Cookie": cookie})
    body = expect(api, response, 200)
    assert "errors" not in body, body["errors"]
    return response, pk


@pytest.mark.parametrize("integration", ["django"], indirect=True)
def test_a_logged_in_django_user_pays_from_its_own_budget(
    api: Api, session_user: tuple[str, str]
) -> None:
    response, pk = _logged_in_call(api, session_user)

    assert subject(api, response) == f"user:{pk}"
    assert remaining(response) == FREE_CAPACITY - COST
    assert remaining(api.post(source="127.0.4.1")) == FREE_CAPACITY - COST  # not its address


# With a sync storage too, the async view gets CostLimiter's async hooks: the gate awaits
# request.auser() instead of reading the lazy request.user (a database query) on the loop.
@pytest.mark.parametrize("integration", ["django-async"], indirect=True)
def test_a_logged_in_user_of_the_async_django_view_pays_from_its_own_budget(
    api: Api, session_user: tuple[str, str]
) -> None:
    response, pk = _logged_in_call(api, session_user)

    assert subject(api, response) == f"user:{pk}"


@pytest.mark.parametrize("integration", ["django-async"], indirect=True)
def test_a_stale_session_cookie_on_the_async_django_view_still_pays_by_address(
    api: Api,
) -> None:
    response = api.post(source="127.0.4.2", headers={"Cookie": "sessionid=expired-long-ago"})

    body = expect(api, response, 200)
    assert "errors" not in body, body["errors"]
    assert subject(api, response) == "ip:127.0.4.2"


# -- 7. Django's own log of each refusal ---------------------------------------------------

DJANGO = ["django", "django-async"]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def captured(*names: str) -> Iterator[list[logging.LogRecord]]:
    """Every record of the loggers ``names``, from any thread, at any level."""
    handler = _Records()
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def _refused_records(api: Api, source: str) -> list[logging.LogRecord]:
    """Spend ``source``'s budget, then capture what Django logs about one refusal."""
    assert statuses([api.post(source=source) for _ in range(CALLS)]) == [200] * CALLS
    with captured("django.request", "django.server") as records:
        refused = api.post(source=source)
        # The dev server logs its access line after the response is sent: let it land.
        deadline = time.monotonic() + 2
        while api.integration == "django" and len(records) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    expect(api, refused, 429)
    return list(records)


@pytest.mark.parametrize("integration", DJANGO, indirect=True)
def test_django_does_not_log_a_warning_for_each_refusal_quotaql_answers(api: Api) -> None:
    # Django writes one WARNING per 4xx response on django.request ("Too Many Requests:
    # /graphql", with status_code and request as extra fields, from
    # django.utils.log.log_response); quotaql logs its refusals itself, rate-limited, and
    # marks the request so that CostLimiter(quiet_logs=True) drops Django's line.
    records = _refused_records(api, "127.0.3.1")

    assert [record for record in records if record.name == "django.request"] == []
    # The sync view runs under Django's development server, whose access line is the
    # server's own (like uvicorn's access log): it stays.
    access = [record for record in records if record.name == "django.server"]
    if api.integration == "django":
        (line,) = access
        assert line.getMessage().startswith('"POST /graphql HTTP/1.1" 429 ')
    else:
        assert access == []


@pytest.mark.parametrize("integration", DJANGO, indirect=True)
def test_django_still_logs_the_4xx_that_quotaql_did_not_answer(api: Api, rejecting: Api) -> None:
    with captured("django.request") as records:
        expect(api, api.post(TOO_BIG, source="127.0.3.2"), 400)  # quotaql's: quiet
        expect(rejecting, rejecting.post(source="127.0.3.2", key=random_key()), 401)  # quiet
        expect(api, api.post(source="127.0.3.2"), 200)  # a success logs nothing
        # Strawberry's own 400 (a body that is not JSON) is not quotaql's: Django logs it.
        raw = api._client("127.0.3.2").post(
            api.server.url, content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert raw.status_code == 400

    seen = [(r.levelno, r.getMessage(), getattr(r, "status_code", None)) for r in records]
    assert seen == [(logging.WARNING, "Bad Request: /graphql", 400)]
