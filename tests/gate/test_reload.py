"""Hot reload on a timer (quotaql.gate.reload): every process that holds a gate looks at the
file in a thread of its own, so an idle worker, or one serving only a subscription, applies
an edit within ``reload_interval`` and one more look (issue 24)."""

# ruff: noqa: F811 (test_gate's fixtures, imported by name)
from __future__ import annotations

import gc
import multiprocessing
import threading
import time
from typing import TYPE_CHECKING, Any

from graphql import build_schema, parse

from quotaql.config import load_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.gate import Gate
from quotaql.gate.reload import Reloader, digest_of
from quotaql.instrumentation.logs import StructuredLog
from tests.gate.test_gate import (  # noqa: F401 (its fixtures, by name)
    SCHEMA,
    TOML,
    admit,
    config_path,
    scope,
)
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

INTERVAL = 0.2  # seconds between two looks: far above a look's time, on a busy machine too
# An edit is applied by the second look after it: at most two intervals later, plus the
# thread's own scheduling on a busy machine.
BOUND_S = 2 * INTERVAL + 1.0


def _with_interval(text: str, interval: float = INTERVAL) -> str:
    return text.replace("[limits]\n", f"[limits]\nreload_interval = {interval}\n")


def _reload_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "quotaql-reload" and t.is_alive()]


# -- the two looks: a file being written is never applied ----------------------------------


def test_a_change_is_applied_only_once_two_looks_saw_it(
    config_path: Callable[[str], Path],
) -> None:
    path = config_path(_with_interval(TOML))
    current = load_config(path)
    reloader = Reloader(str(path), INTERVAL, StructuredLog())
    assert reloader.poll(SCHEMA, current, due=True) is None  # unchanged
    path.write_text(path.read_text().replace("capacity = 100", "capacity = 300"))
    assert reloader.poll(SCHEMA, current, due=True) is None  # seen once: maybe mid-write
    new = reloader.poll(SCHEMA, current, due=True)
    assert new is not None
    assert new.tiers["free"].quota.capacity == 300
    assert (reloader.generation, reloader.digest) == (2, digest_of(str(path)))


def test_a_file_still_being_written_is_never_applied(config_path: Callable[[str], Path]) -> None:
    text = _with_interval(TOML)
    path = config_path(text)
    current = load_config(path)
    reloader = Reloader(str(path), INTERVAL, StructuredLog())
    path.write_text(text[: text.index("[tenants")])  # valid TOML, every tenant demoted
    assert reloader.poll(SCHEMA, current, due=True) is None
    path.write_text(text.replace("capacity = 1000", "capacity = 2000"))  # the rest written
    assert reloader.poll(SCHEMA, current, due=True) is None  # changed again since
    new = reloader.poll(SCHEMA, current, due=True)
    assert new is not None
    assert new.tiers["pro"].quota.capacity == 2000  # the whole file, at last
    assert reloader.generation == 2  # the half-written one never counted


# -- the timer --------------------------------------------------------------------------------


def test_an_idle_gate_applies_an_edit_on_its_timer(config_path: Callable[[str], Path]) -> None:
    path = config_path(_with_interval(TOML))
    gate = Gate.from_config(path)
    gate.check(SCHEMA)  # a schema seen (at start-up, or by a first request)
    path.write_text(path.read_text().replace("capacity = 100", "capacity = 300"))
    took = eventually(lambda: gate.config.tiers["free"].quota.capacity == 300, 10)
    assert took is not None, "the edit was never applied without a request"
    assert took <= BOUND_S
    assert admit(gate, "{ hello }").decision.limit == 300  # the first request after it


def test_requests_never_apply_a_file_the_timer_has_not_seen_twice(
    config_path: Callable[[str], Path],
) -> None:
    # A flood of requests does not look at the file any sooner: the timer does.
    path = config_path(_with_interval(TOML, 5.0))
    gate = Gate.from_config(path)
    admit(gate, "{ hello }")
    path.write_text(path.read_text().replace("capacity = 100", "capacity = 300"))
    for _ in range(200):
        assert admit(gate, "{ hello }").decision.limit == 100


def test_a_gate_with_reloads_off_starts_no_thread(config_path: Callable[[str], Path]) -> None:
    before = len(_reload_threads())
    gate = Gate.from_config(config_path(_with_interval(TOML, 0)))
    gate.check(SCHEMA)
    assert len(_reload_threads()) == before
    assert gate.config.limits.reload_interval == 0


def test_a_gate_that_never_saw_its_schema_starts_no_thread(
    config_path: Callable[[str], Path],
) -> None:
    # A gate built at import and never used (a module of the app's, a test's) costs nothing;
    # its first operation (or gate.check at startup) starts the thread, once.
    gate = Gate.from_config(config_path(_with_interval(TOML)))
    assert gate._reloader is not None
    assert gate._reloader._thread is None
    admit(gate, "{ hello }")
    thread = gate._reloader._thread
    assert thread is not None
    assert thread.is_alive()
    admit(gate, "{ hello }")
    gate.check(SCHEMA)
    assert gate._reloader._thread is thread


def test_the_thread_ends_with_its_gate(config_path: Callable[[str], Path]) -> None:
    # A look every 30 s: the thread ends when its gate is collected, not at its next look.
    gate = Gate.from_config(config_path(_with_interval(TOML, 30)))
    gate.check(SCHEMA)
    thread = gate._reloader._thread  # type: ignore[union-attr]
    assert thread is not None
    assert thread.is_alive()
    del gate
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


def test_an_open_subscription_pays_the_new_weights_after_a_reload(
    config_path: Callable[[str], Path],
) -> None:
    # Events of an open subscription are priced again when the file changes: an edited
    # weight reaches a subscription opened before the edit.
    text = _with_interval(TOML) + '\n[cost.weights]\n"Subscription.ticks" = 30\n'
    path = config_path(text)
    gate = Gate.from_config(path)
    op = admit(gate, "subscription { ticks }")
    for _ in range(2):  # the first event paid at the start, the second its price
        assert gate.event(op) is None
    assert op.charge == 30
    path.write_text(text.replace('"Subscription.ticks" = 30', '"Subscription.ticks" = 7'))
    assert eventually(lambda: gate.config.cost.model.weights["Subscription.ticks"] == 7, 10)
    assert gate.event(op) is None
    assert op.charge == 7
    gate.finish(op)


def _child_sees_the_edit(gate: Gate, path: str, result: Any) -> None:
    """In a forked child (gunicorn --preload): the parent's thread is gone; the gate's is
    started again, and applies an edit made in the child's life."""
    names = [t.name for t in threading.enumerate() if t.is_alive()]
    with open(path, encoding="utf-8") as file:
        text = file.read()
    with open(path, "w", encoding="utf-8") as file:
        file.write(text.replace("capacity = 100", "capacity = 300"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and gate.config.tiers["free"].quota.capacity != 300:
        time.sleep(0.01)
    result.put((names.count("quotaql-reload") >= 1, gate.config.tiers["free"].quota.capacity))


def test_a_forked_worker_looks_at_the_file_in_its_own_thread(
    config_path: Callable[[str], Path],
) -> None:
    path = config_path(_with_interval(TOML))
    gate = Gate.from_config(path)
    gate.check(SCHEMA)
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_child_sees_the_edit, args=(gate, str(path), result))
    child.start()
    try:
        started, capacity = result.get(timeout=20)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert started
    assert capacity == 300


def test_a_config_that_no_longer_fits_the_schema_is_not_applied_by_the_timer(
    config_path: Callable[[str], Path],
) -> None:
    path = config_path(_with_interval(TOML))
    gate = Gate.from_config(path)
    gate.check(SCHEMA)
    path.write_text(path.read_text() + '\n[cost.weights]\n"Query.nope" = 3\n')
    time.sleep(BOUND_S)
    assert "Query.nope" not in gate.config.cost.model.weights


# -- subscriptions whose events cost nothing --------------------------------------------------

FREE_EVENTS = build_schema(
    COST_DIRECTIVES_SDL
    + 'type Query { hello: String }\ntype Subscription { countdown: Int  ticks: Int @cost(weight: "3") }'
)


def test_a_subscription_whose_events_price_at_0_is_warned_of_once(
    config_path: Callable[[str], Path], caplog: Any
) -> None:
    caplog.set_level("WARNING", logger="quotaql")
    gate = Gate(load_config(config_path("[tiers.free]\ncapacity = 100\nrefill_per_second = 1\n")))
    gate.check(FREE_EVENTS)
    gate.check(FREE_EVENTS)
    warned = [r.getMessage() for r in caplog.records if "price at 0" in r.getMessage()]
    assert len(warned) == 1
    assert "Subscription.countdown" in warned[0]
    assert "Subscription.ticks" not in warned[0]
    parse("subscription { countdown }")  # the document is valid: only its price is 0
