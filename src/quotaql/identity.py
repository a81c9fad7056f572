"""Who pays for a request: namespaced subjects from known API keys, principals and addresses.

The subject is the budget a request is debited from, and quotaql is only as good as it: a
client that can choose its subject can choose a fresh budget. So every source says what it
trusts (``docs/identity.md``):

- an API key counts as its own tenant only when it is *known* (listed under ``[tenants]``
  by its raw value, or accepted by a ``key_resolver``); an unknown key counts as the
  client's address (``unknown_keys = "address"``), is refused (``"reject"``), or, unsafe
  on a public API, becomes a tenant anyway (``"tenant"``); every request pays at least
  for the work it caused, so a client address drives the resolver at most
  ``[identity] resolver_rate`` lookups a second: an invented key past that counts as its
  address without a lookup, while cached answers and keys the resolver accepted before
  never wait for the address's budget;
- the client's address is the socket peer's, unless that peer is a trusted proxy: then
  ``X-Forwarded-For`` (or ``Forwarded``) is read right to left, skipping trusted hops, and
  the first untrusted address is the client, so a spoofed leftmost entry changes nothing;
  an IPv6 client is limited per ``/64`` (``ipv6_prefix``), as one host usually owns one;
- an authenticated principal (Django's ``request.user``, or a ``principal`` hook reading a
  verified JWT claim) is a ``user:`` subject, or, beside a known key, a user inside that
  tenant (``[tiers.<tier>.per_user]``).

Subjects are namespaced, ``key:<tenant>``, ``ip:<address>``, ``user:<id>``, ``id:<what
identify() returned>``, ``ukey:<unknown key>`` (only under ``unknown_keys = "tenant"``) and
``anonymous``, so that no two sources ever share a budget (an API key spelled like an IP
address is still a key; an unknown key spelled like a tenant is not that tenant).
"""

from __future__ import annotations

import inspect
import ipaddress
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

from quotaql import web
from quotaql._flow import Await
from quotaql.config.identity import MAX_HOPS, IdentityConfig, UnknownKeys
from quotaql.instrumentation.subjects import subject_class

if TYPE_CHECKING:
    from collections.abc import Generator

    from quotaql.instrumentation.logs import StructuredLog

__all__ = [
    "ANONYMOUS",
    "LOOKUP_OUTCOMES",
    "Identify",
    "Identity",
    "IdentityConfig",
    "IdentitySource",
    "KeyResolver",
    "LookupOutcome",
    "Principal",
    "Subject",
    "UnknownKeys",
    "client_address",
]

ANONYMOUS: Final = "anonymous"

#: Where a subject came from; the ``source`` label of ``quotaql_identity_total``.
IdentitySource = Literal[
    "key",  # a known API key
    "user",  # an authenticated principal
    "custom",  # what identify() returned
    "address",  # no key: the client's address
    "unknown_key",  # an unknown key, counted as the client's address
    "rejected_key",  # an unknown key, refused (unknown_keys = "reject")
    "unverified_key",  # an unknown key taken as a tenant (unknown_keys = "tenant")
    "anonymous",  # no key, no principal, no address
    "limited_key",  # a key not looked up (its address was over resolver_rate): the address
]

#: ``key_resolver(key, context) -> tenant | None``, or a coroutine function answering that.
KeyResolver = Callable[[str, Any], Any]
#: ``principal(context) -> user id | None``, or a coroutine function answering that.
Principal = Callable[[Any], Any]
#: ``identify(context) -> subject | None``, or a coroutine function answering that.
Identify = Callable[[Any], Any]

_MAX_KEY_LENGTH: Final = 512


class Subject(NamedTuple):
    """Who pays for one request (built for every request: a NamedTuple, the cheapest value).

    Attributes:
        key: the namespaced subject, the key of its budgets in the storage:
            ``key:<tenant>``, ``ip:<address or /64 network>``, ``user:<id>``,
            ``id:<identify() value>``, ``ukey:<unknown key>`` or ``anonymous``.
        source: how it was identified (``IdentitySource``).
        tenant: the name ``[tenants]`` and tiers know it by (a known key's tenant, what
            ``identify`` returned), else None (the default tier).
        user: an authenticated principal inside a tenant (``[tiers.<t>.per_user]``).
        address: the client's address as identified (before the /64 folding), if known.
    """

    key: str
    source: IdentitySource
    tenant: str | None = None
    user: str | None = None
    address: str | None = None

    def __str__(self) -> str:
        return self.key

    @property
    def rejected(self) -> bool:
        """An unknown API key refused by ``unknown_keys = "reject"``."""
        return self.source == "rejected_key"


# -- the client address -------------------------------------------------------------------

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parse_ip(text: str) -> _IP | None:
    """An address from a proxy header entry or a peer: ``1.2.3.4``, ``1.2.3.4:80``,
    ``[2001:db8::1]:443``, ``"[2001:db8::1]"``, ``fe80::1%eth0``; None for anything else
    (``unknown``, ``_hidden``, garbage)."""
    text = text.strip().strip('"').strip()
    if not text or len(text) > 64:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        text = text[1:end]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.split(":", 1)[0]
    text = text.split("%", 1)[0]  # an IPv6 zone
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _forwarded_entries(request: Any, header: str) -> list[str]:
    """The addresses a proxy header lists, left to right (at most the last ``MAX_HOPS``)."""
    values = web.header_values(request, header)
    if not values:
        return []
    joined = ",".join(values)
    parts = joined.rsplit(",", MAX_HOPS)[-MAX_HOPS:]
    if header == "x-forwarded-for":
        return [part.strip() for part in parts]
    entries = []
    for element in parts:  # RFC 7239: for=...;proto=...;by=...
        found = ""
        for pair in element.split(";"):
            name, _, value = pair.partition("=")
            if name.strip().lower() == "for":
                found = value.strip()
                break
        entries.append(found)
    return entries


def client_address(request: Any, config: IdentityConfig) -> str | None:
    """The client's address: the socket peer's, or what trusted proxies say it is.

    Only when the peer is a trusted proxy (``trusted_proxies``, or any peer with
    ``trusted_hops`` and no ``trusted_proxies``, a proxy on a unix socket included) is the
    proxy header read, right to left:
    with ``trusted_hops = N`` the client is the N-th entry from the right; otherwise the
    first entry that is not a trusted proxy. An entry that is not an address stops the walk
    at the last hop known good. Nothing a client writes to the left of what the proxies
    appended can change the result.

    Returns:
        The address as text (IPv4-mapped IPv6 as IPv4), or None when the framework
        reports no peer.
    """
    found = _client(request, config)
    return found if found is None or isinstance(found, str) else str(found)


def _client(request: Any, config: IdentityConfig) -> _IP | str | None:
    """:func:`client_address`, parsed: the address, or the peer's name when it is none."""
    peer_text = web.peer_address(request)
    peer = _parse_ip(peer_text) if peer_text is not None else None
    # No address (a unix socket, a test client): as the server names it, or None.
    own = peer if peer is not None else peer_text
    hops = config.trusted_hops
    # With no trusted networks, a fixed chain: every peer is its last proxy (a unix one too).
    trusted = (peer is not None and config.trusts(peer)) if config.networks else hops > 0
    if not trusted:
        return own
    entries = _forwarded_entries(request, config.forwarded_header)
    if not entries:
        return own
    if hops:
        index = max(0, len(entries) - hops)
        found = _parse_ip(entries[index])
        return found if found is not None else own
    assert peer is not None  # trusted by its network
    client = peer
    for entry in reversed(entries):
        address = _parse_ip(entry)
        if address is None:
            break  # garbage written by a trusted hop: the hop is the last address we know
        client = address
        if not config.trusts(address):
            break
    return client


def address_subject(address: str | _IP, config: IdentityConfig) -> str:
    """``ip:<address>``; an IPv6 address as its ``/ipv6_prefix`` network."""
    parsed = _parse_ip(address) if isinstance(address, str) else address
    if isinstance(parsed, ipaddress.IPv6Address) and config.ipv6_prefix < 128:
        network = ipaddress.IPv6Network((parsed, config.ipv6_prefix), strict=False)
        return f"ip:{network}"
    return f"ip:{parsed if parsed is not None else address}"


# -- resolving ----------------------------------------------------------------------------

# What a hook that failed answered (logged): going on as if it had answered None.
_FAILED: Any = object()
# What _resolved answers for a key it did not look up: its address was over resolver_rate.
_LIMITED: Any = object()
# How long a key the resolver accepted is remembered as one (its lookups, once its cache
# entry expired, do not wait for its address's budget): a day, or until it is refused.
_VOUCHED_TTL: Final = 86_400.0
# The fewest addresses whose lookup budgets are kept, whatever key_cache_size says: with a
# table of a few, two addresses taking turns would each find a fresh burst every time.
_MIN_BUDGETS: Final = 1_024
# How many times an address's lookups its network (IPv4 /24, IPv6 /48: the class
# instrumentation.subjects counts subjects in) may cause: an IPv6 client owns its /48's 65,536
# /64 networks, each an address with a burst of its own; the network's budget bounds them all.
_NETWORK_LOOKUPS: Final = 8

#: What became of a key that needed the ``key_resolver`` (``quotaql_key_lookups_total``):
#: looked up and known, unknown, failed (the hook raised), or not looked up (``limited``:
#: its address was over ``[identity] resolver_rate``).
LookupOutcome = Literal["known", "unknown", "failed", "limited"]
LOOKUP_OUTCOMES: Final[tuple[LookupOutcome, ...]] = ("known", "unknown", "failed", "limited")


class _KeyCache:
    """A bounded, expiring cache of ``key_resolver`` answers, least recently used out first.

    The tenants of known keys and the None of unknown ones are kept in two of these, so
    that a flood of random keys (one lookup each, then cached) only ever evicts other
    unknown keys, never a known key's answer.
    """

    def __init__(self, size: int, ttl: float, clock: Callable[[], float]) -> None:
        self.size = size
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, str | None]] = OrderedDict()

    def get(self, key: str) -> tuple[bool, str | None]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            if entry[0] <= self.clock():
                del self._entries[key]
                return False, None
            self._entries.move_to_end(key)
            return True, entry[1]

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def put(self, key: str, tenant: str | None) -> None:
        if self.size <= 0 or self.ttl <= 0:
            return
        with self._lock:
            self._entries[key] = (self.clock() + self.ttl, tenant)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


class _LookupBudget:
    """The ``key_resolver`` lookups each client address may still cause: a token bucket per
    address (``burst`` lookups, refilled at ``rate`` a second), and one per network
    (:data:`_NETWORK_LOOKUPS` times as many), in a bounded table.

    A lookup takes a token from both or from neither: an IPv6 client that rotates through
    the 65,536 /64 networks of its /48 (or an IPv4 client through its /24) finds a fresh
    address bucket each time, but not a fresh network one.

    The least recently seen bucket leaves a full table first; it comes back with a full
    burst, as a new address would (an address's budget is worth what its burst is). A
    network's bucket is seen with each of its addresses' lookups: it is the last to go.
    """

    def __init__(self, size: int, clock: Callable[[], float]) -> None:
        self.size = size
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def take(self, address: str, network: str | None, rate: float, burst: int) -> bool:
        """One lookup for ``address`` (and its ``network``, if it has one), if both budgets
        have one."""
        now = self.clock()
        with self._lock:
            tokens = self._tokens(address, now, rate, float(burst))
            if network is None:
                allowed = tokens >= 1.0
            else:
                scale = float(_NETWORK_LOOKUPS)
                shared = self._tokens(network, now, rate * scale, burst * scale)
                allowed = tokens >= 1.0 and shared >= 1.0
                self._buckets[network] = (shared - 1.0 if allowed else shared, now)
            self._buckets[address] = (tokens - 1.0 if allowed else tokens, now)
            while len(self._buckets) > self.size:
                self._buckets.popitem(last=False)
            return allowed

    def _tokens(self, name: str, now: float, rate: float, burst: float) -> float:
        """The tokens in ``name``'s bucket now (a full one for a name not in the table)."""
        entry = self._buckets.get(name)
        if entry is None:
            return burst
        self._buckets.move_to_end(name)
        return min(burst, entry[0] + max(0.0, now - entry[1]) * rate)


class Identity:
    """Finds the subject of each request from its headers, peer, principal and hooks.

    Example:
        >>> identity = Identity()
        >>> request = {"type": "http", "client": ("203.0.113.9", 5123),
        ...            "headers": [(b"x-api-key", b"acme")]}
        >>> identity.subject(request, None, IdentityConfig(), tenants={"acme": ...}).key
        'key:acme'
        >>> identity.subject(request, None, IdentityConfig(), tenants={}).key
        'ip:203.0.113.9'

    Args:
        identify: ``identify(context) -> str | None``: the subject, in its own ``id:``
            namespace, before anything else is looked at; None goes on with the
            default (a known key, a principal, the client's address).
        key_resolver: ``key_resolver(key, context) -> tenant | None``: the tenant of an
            API key (a database lookup; it may be a coroutine function on async
            servers); None: an unknown key. With a resolver, ``[tenants]`` names
            tenants (for their tiers), not keys.
        principal: ``principal(context) -> id | None``: the authenticated user (a
            verified JWT's ``sub``, a session's user); default: Django's
            ``request.user``.
        log: where a failing hook is reported.
        key_cache_size: how many ``key_resolver`` answers are kept: as many known keys'
            tenants, and as many unknown keys (apart, so that unknown keys never evict
            known ones). A resolver that fails is not an answer: nothing is cached, and
            that request's key counts as its client's address (never refused under
            ``unknown_keys = "reject"``: an outage of the lookup is not a wrong key).
        key_cache_ttl: how long one is kept, in seconds.

    Attributes:
        lookups: what became of the keys that needed the ``key_resolver``, by
            ``LookupOutcome`` (``quotaql_key_lookups_total``): known, unknown, failed,
            limited (not looked up: their address was over ``[identity] resolver_rate``).
    """

    def __init__(
        self,
        *,
        identify: Callable[[Any], Any] | None = None,
        key_resolver: Callable[[str, Any], Any] | None = None,
        principal: Callable[[Any], Any] | None = None,
        log: StructuredLog | None = None,
        key_cache_size: int = 10_000,
        key_cache_ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.identify = identify
        self.key_resolver = key_resolver
        self.principal = principal
        self.log = log
        # A hook that answers with an awaitable: resolutions must run where they can await.
        self._awaits = any(
            inspect.iscoroutinefunction(hook) for hook in (identify, key_resolver, principal)
        )
        self._known = _KeyCache(key_cache_size, key_cache_ttl, clock)
        self._unknown = _KeyCache(key_cache_size, key_cache_ttl, clock)
        # Keys the resolver accepted: looked up again without waiting for their address's
        # budget, so that a flood of invented keys from a shared address (a NAT) never
        # keeps a known tenant's key from being revalidated.
        self._vouched = _KeyCache(key_cache_size, _VOUCHED_TTL, clock)
        self._budget = _LookupBudget(max(key_cache_size, _MIN_BUDGETS), clock)
        self._counts_lock = threading.Lock()
        self.lookups: dict[LookupOutcome, int] = dict.fromkeys(LOOKUP_OUTCOMES, 0)

    def may_await(self, request: Any = None) -> bool:
        """Resolving (``request``'s, when known) may need to await: an async hook, or
        (without a ``principal`` hook) a framework whose principal is only awaitable there
        (Django's async views)."""
        return self._awaits or (self.principal is None and web.principal_may_await(request))

    def subject(
        self,
        request: Any,
        context: Any,
        config: IdentityConfig,
        tenants: Mapping[str, object],
    ) -> Subject:
        """:meth:`resolve` for synchronous hooks: the subject of one request."""
        flow = self.resolve(request, context, config, tenants, can_await=False)
        try:
            while True:
                next(flow)  # never yields without can_await
        except StopIteration as stop:
            found: Subject = stop.value
            return found

    def resolve(
        self,
        request: Any,
        context: Any,
        config: IdentityConfig,
        tenants: Mapping[str, object],
        *,
        can_await: bool,
    ) -> Generator[Await, Any, Subject]:
        """The subject of one request, as a flow that yields the awaitables it needs.

        ``can_await``: the caller's driver awaits what is yielded (async servers); else an
        awaitable a hook returns is a hook failure.
        """
        if self.identify is not None:
            custom = yield from self._call("identify", self.identify, (context,), can_await)
            if custom is not None and custom is not _FAILED:
                value = _clean(custom)
                if value is not None:
                    principal = yield from self._principal(request, context, can_await)
                    return Subject(f"id:{value}", "custom", tenant=value, user=principal)
        key = web.header(request, config.api_key_header)
        if key is None:  # a browser cannot set headers on a websocket: connection_init's
            key = _connection_param(context, request, config.api_key_header)
        key = key.strip() if key is not None else None
        principal = yield from self._principal(request, context, can_await)
        rejected = limited = False
        if key:
            if self.key_resolver is None:  # [tenants] lists the known keys
                tenant = key if len(key) <= _MAX_KEY_LENGTH and key in tenants else None
            else:
                tenant = yield from self._resolved(key, request, context, config, can_await)
            # Not known, not known to be unknown (failed, or not looked up): its address.
            limited = tenant is _LIMITED
            failed = limited or tenant is _FAILED
            if tenant is not None and not failed:
                return Subject(f"key:{tenant}", "key", tenant=tenant, user=principal)
            if config.unknown_keys == "tenant" and not limited:  # its own: never a tenant's
                value = key[:_MAX_KEY_LENGTH]
                return Subject(f"ukey:{value}", "unverified_key", user=principal)
            rejected = config.unknown_keys == "reject" and not failed
        if principal is not None:
            return Subject(f"user:{principal}", "rejected_key" if rejected else "user")
        address = _client(request, config)
        if address is None:
            return Subject(ANONYMOUS, "rejected_key" if rejected else "anonymous")
        source: IdentitySource = "address"
        if key:
            source = "rejected_key" if rejected else "limited_key" if limited else "unknown_key"
        return Subject(address_subject(address, config), source, address=str(address))

    def _resolved(
        self, key: str, request: Any, context: Any, config: IdentityConfig, can_await: bool
    ) -> Generator[Await, Any, Any]:
        """The ``key_resolver``'s tenant of ``key`` (cached), None, ``_FAILED``, or
        ``_LIMITED`` (not looked up: its address is over ``resolver_rate``)."""
        if len(key) > _MAX_KEY_LENGTH or self.key_resolver is None:
            return None  # no real key is this long; a hostile one is not looked up
        cached, tenant = self._known.get(key)
        if cached:
            return tenant
        if self._unknown.get(key)[0]:
            return None
        # A lookup is work the request causes before it is charged: its address pays for
        # it from a budget of lookups, unless the resolver accepted this key before.
        if not self._vouched.get(key)[0]:
            address = _client(request, config)
            where = ANONYMOUS if address is None else address_subject(address, config)
            network = subject_class(where)
            shared = None if network == where else network
            if not self._budget.take(where, shared, config.resolver_rate, config.resolver_burst):
                self._count("limited")
                return _LIMITED
        found = yield from self._call("key_resolver", self.key_resolver, (key, context), can_await)
        if found is _FAILED:
            self._count("failed")
            return _FAILED  # an outage of the lookup is not an answer: asked again next time
        tenant = _clean(found) if found is not None else None
        if tenant is None:
            self._unknown.put(key, None)
            self._vouched.forget(key)  # revoked: its next lookups wait for the budget
            self._count("unknown")
        else:
            self._known.put(key, tenant)
            self._vouched.put(key, tenant)
            self._count("known")
        return tenant

    def _count(self, outcome: LookupOutcome) -> None:
        with self._counts_lock:
            self.lookups[outcome] += 1

    def _principal(
        self, request: Any, context: Any, can_await: bool
    ) -> Generator[Await, Any, str | None]:
        if self.principal is not None:
            found = yield from self._call("principal", self.principal, (context,), can_await)
        elif web.has_authenticated_user(request):  # Django's request.user
            found = yield from self._call(
                "django_user", web.authenticated_user, (request, can_await), can_await
            )
        else:
            return None  # the common case: no framework principal
        return _clean(found) if found is not None and found is not _FAILED else None

    def _call(
        self, name: str, hook: Callable[..., Any], args: tuple[Any, ...], can_await: bool
    ) -> Generator[Await, Any, Any]:
        """A hook's answer, or ``_FAILED`` for a hook that failed (logged)."""
        try:
            result = hook(*args)
            if inspect.isawaitable(result):
                if not can_await:
                    self._awaits = True  # from now on, resolutions run where they can await
                    _discard(result)
                    raise TypeError(
                        "it returned an awaitable, but this server runs it synchronously"
                    )
                result = yield Await(result)
        except Exception as error:  # a bug in a hook must not fail the request
            self._failed(name, error)
            return _FAILED
        return result

    def _failed(self, name: str, error: Exception) -> None:
        if self.log is None:
            return
        self.log.log(
            logging.ERROR,
            f"{name}_failed",
            "quotaql: %s() failed (%s: %s); going on without it",
            name,
            type(error).__name__,
            error,
        )


def _connection_param(context: Any, request: Any, name: str) -> str | None:
    """The API key a websocket client sent in its ``connection_init`` payload (any case;
    among its first ``_MAX_PARAMS`` entries: a huge payload costs no more than a small one)."""
    params = web.connection_params(context, request)
    if params is None:
        return None
    for key, value in itertools.islice(params.items(), _MAX_PARAMS):
        if isinstance(key, str) and key.lower() == name and isinstance(value, str):
            return value
    return None


_MAX_PARAMS = 64


def _clean(value: object) -> str | None:
    """A hook's answer as a subject part: a non-empty string of bounded length."""
    text = str(value).strip()
    return text[:_MAX_KEY_LENGTH] if text else None


def _discard(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)  # a coroutine never awaited must not warn
    if callable(close):
        close()
