"""``config_errors``: every error of a file at once, where ``load_config`` stops at the first."""

from __future__ import annotations

import os
import textwrap
import time
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaql.config import load_config
from quotaql.config.reader import config_errors
from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

MANY = """\
[limits]
mode = "loud"
reload_intervl = 5
default_tier = "gold"

[tiers.free]
capacity = -1
refill_per_second = 5

[tiers.pro]
capacity = 100
refill_per_second = 5
on_limt = "delay"

[tenants.acme]
tier = "platinum"

[tenants.bob]
tier = "free"

[cost]
max_depht = 3
weights = { "Query.x" = "a", "bad coord!" = 1 }

[alerts]
blocked_ratio = "high"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def shown(errors: list[ConfigError]) -> list[tuple[int | None, str | None, str]]:
    return [(error.line, error.key, error.reason) for error in errors]


def test_every_error_is_listed_by_line_with_its_key_and_suggestion(tmp_path):
    path = write(tmp_path, MANY)

    errors = config_errors(path)

    assert {error.file for error in errors} == {str(path)}
    assert shown(errors) == [
        (2, "limits.mode", 'expected one of "enforce", "shadow", "off", got a string ("loud")'),
        (3, "limits.reload_intervl", "unknown key; did you mean 'reload_interval'?"),
        # "free" has an error of its own: it is a tier of the file all the same
        (4, "limits.default_tier", 'no tier named "gold"; expected one of: "free", "pro"'),
        (7, "tiers.free.capacity", "expected a finite number > 0, got -1"),
        (13, "tiers.pro.on_limt", "unknown key; did you mean 'on_limit'?"),
        (16, "tenants.acme.tier", 'no tier named "platinum"; expected one of: "free", "pro"'),
        (22, "cost.max_depht", "unknown key; did you mean 'max_depth'?"),
        (23, 'cost.weights."Query.x"', 'expected a number or a table, got a string ("a")'),
        (
            23,
            'cost.weights."bad coord!"',
            "expected a schema coordinate ('Type', 'Type.field' or 'Type.field(arg:)'),"
            ' got "bad coord!"',
        ),
        (26, "alerts.blocked_ratio", 'expected a number > 0 and <= 1, got a string ("high")'),
    ]


def test_load_config_still_stops_at_the_first_error_with_its_text(tmp_path):
    path = write(tmp_path, MANY)

    with pytest.raises(ConfigError) as raised:
        load_config(path)

    # the first error in the order of the checks: [cost] is read first
    assert str(raised.value) == f"{path}:22: cost.max_depht: unknown key; did you mean 'max_depth'?"
    assert str(raised.value) in [str(error) for error in config_errors(path)]


def test_an_error_that_follows_from_another_is_not_listed(tmp_path):
    # a wrong capacity is also a missing one; a tier without its keys is also quota-less
    path = write(
        tmp_path,
        """\
        [tiers.free]
        capacity = "lots"
        refill_per_second = 5

        [tiers.pro]
        capacty = 100
        refill_per_second = 5
        """,
    )

    assert shown(config_errors(path)) == [
        (2, "tiers.free.capacity", 'expected a finite number > 0, got a string ("lots")'),
        (6, "tiers.pro.capacty", "unknown key; did you mean 'capacity'?"),
    ]


def test_a_valid_file_has_no_error(tmp_path):
    path = write(
        tmp_path, '[tiers.free]\ncapacity = 10\nrefill_per_second = 1\n[tenants.a]\ntier = "free"\n'
    )

    assert config_errors(path) == []
    load_config(path)


def test_invalid_toml_is_one_error_with_its_line(tmp_path):
    path = write(tmp_path, "[limits]\nmode = \n")

    (error,) = config_errors(path)

    assert (error.line, error.reason.startswith("invalid TOML: ")) == (2, True)


def test_values_nested_past_the_parser_s_recursion_are_a_config_error(tmp_path):
    # tomllib recurses into nested arrays: a RecursionError reached a reload (and, without
    # the reload thread, a request) where every other bad file is a ConfigError
    path = write(tmp_path, "[cost]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n")

    (error,) = config_errors(path)

    assert error.reason == "invalid TOML: values nested too deep"
    with pytest.raises(ConfigError, match="nested too deep"):
        load_config(path)


def test_a_missing_relative_path_says_relative_to_what(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    (error,) = config_errors("conf/quotaql.toml")

    assert error.file == "conf/quotaql.toml"
    assert error.reason == (
        "cannot read the file (No such file or directory); conf/quotaql.toml is relative to"
        f" the working directory: {tmp_path / 'conf' / 'quotaql.toml'}"
    )
    with pytest.raises(ConfigError, match="relative to the working directory"):
        load_config("conf/quotaql.toml")


def test_a_missing_absolute_path_says_nothing_of_the_working_directory(tmp_path):
    (error,) = config_errors(tmp_path / "absent.toml")

    assert error.reason == "cannot read the file (No such file or directory)"


def test_a_flood_of_unknown_keys_is_read_in_linear_time(tmp_path):
    # a hostile or broken file: 20,000 wrong keys are 20,000 errors, found quickly
    path = write(tmp_path, "[limits]\n" + "".join(f"k{i} = 1\n" for i in range(20_000)))

    started = time.monotonic()
    errors = config_errors(path)

    assert time.monotonic() - started < 30  # about 2 s; comparing each error with all: minutes

    assert len(errors) == 20_000
    assert errors[-1].line == 20_001


# --- the two readings agree ---------------------------------------------------------------

#: Lines, each valid or not, that a file is made of (a table header opens each group).
PIECES = {
    "limits": ['mode = "shadow"', 'mode = "loud"', "reload_interval = 5", "reload_intervl = 5",
               'default_tier = "pro"', 'default_tier = "gold"', "retry_jitter = 2"],
    "tiers.free": ["capacity = 10", "capacity = -1", "refill_per_second = 1", "limit = 3",
                   'on_limit = "delay"', "max_delay = 1", 'algorithm = "sliding_window"'],
    "tiers.pro": ["capacity = 100", "refill_per_second = 5", 'mode = "sometimes"', "essential = 1"],
    "tenants.acme": ['tier = "pro"', 'tier = "platinum"', "capacity = 5", "tier = 3"],
    "global": ["capacity = 1000", "refill_per_second = 0", "window_seconds = 5"],
    "cost": ["max_depth = 3", "max_depth = -3", "max_dept = 3", 'weights = { "Query.x" = 2 }',
             'weights = { "Query.x" = "2" }', 'weights = { "a b" = 2 }', "introspection = 1"],
    "adaptive": ['tiers = ["free"]', 'tiers = ["nope"]', "tiers = 3"],
    "alerts": ["blocked_ratio = 0.5", "blocked_ratio = 5", "nope = 1"],
    "mystery": ["x = 1"],
}  # fmt: skip


@st.composite
def files(draw: st.DrawFn) -> str:
    tables = draw(st.lists(st.sampled_from(sorted(PIECES)), unique=True, max_size=6))
    text = []
    for table in tables:
        lines = draw(st.lists(st.sampled_from(PIECES[table]), unique=True, max_size=4))
        keys = [line.partition(" ")[0] for line in lines]
        if len(set(keys)) == len(keys):  # TOML forbids a key twice: skip the table
            text += [f"[{table}]", *lines]
    return "\n".join(text) + "\n"


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=files())
def test_config_errors_and_load_config_agree(tmp_path, text):
    path = tmp_path / "quotaql.toml"
    path.write_text(text, encoding="utf-8")

    errors = config_errors(path)

    first = None
    try:
        load_config(path)
    except ConfigError as error:
        first = str(error)
    if first is None:
        assert errors == [], text
    else:  # the file is wrong for both; the error that stops loading is among those listed
        assert first in [str(error) for error in errors], (text, shown(errors))
    for error in errors:  # each blames the file (and a line, unless it is the whole file)
        assert error.file == os.fspath(path)
