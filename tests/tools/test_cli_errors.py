"""Every failure of the ``quotaql`` command is ``error:`` lines and an exit status (2: usage,
1: input), never a traceback: run as a user runs it, a subprocess of the entry point."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import quotaql

QUOTAQL = str(Path(sys.executable).with_name("quotaql"))  # the console script
SOURCE = str(Path(quotaql.__file__).resolve().parents[1])  # this checkout's src/
SDL = """\
type Query { users(first: Int = 10): [User] }
type User { id: ID name: String friends(first: Int = 5): [User] }
"""


def run(*args: str, cwd: Path, blocked: str | None = None) -> subprocess.CompletedProcess[str]:
    """``quotaql ARGS`` in ``cwd``; with ``blocked``, as if that package were not installed."""
    command = [QUOTAQL, *args]
    if blocked is not None:  # what the entry point script does, after poisoning the import
        code = (
            f"import sys; sys.modules[{blocked!r}] = None; sys.argv[0] = 'quotaql';"
            " from quotaql.cli import main; sys.exit(main())"
        )
        command = [sys.executable, "-c", code, *args]
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": SOURCE, "NO_COLOR": "1"},
    )


def error_lines(result: subprocess.CompletedProcess[str], status: int) -> list[str]:
    assert result.returncode == status, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines, "no error printed"
    assert all(line.startswith("error: ") for line in lines), result.stderr
    return lines


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --- check-config ------------------------------------------------------------------------


def test_check_config_lists_every_error_without_a_schema(tmp_path):
    write(
        tmp_path / "quotaql.toml",
        """\
        [limits]
        mode = "loud"
        reload_intervl = 5

        [tiers.free]
        capacity = -1
        refill_per_second = 5

        [cost]
        max_depht = 3
        """,
    )

    lines = error_lines(run("check-config", "quotaql.toml", cwd=tmp_path), 1)

    assert lines == [
        'error: quotaql.toml:2: limits.mode: expected one of "enforce", "shadow", "off",'
        ' got a string ("loud")',
        "error: quotaql.toml:3: limits.reload_intervl: unknown key; did you mean"
        " 'reload_interval'?",
        "error: quotaql.toml:6: tiers.free.capacity: expected a finite number > 0, got -1",
        "error: quotaql.toml:10: cost.max_depht: unknown key; did you mean 'max_depth'?",
    ]


def test_check_config_of_a_valid_file_needs_no_schema(tmp_path):
    write(tmp_path / "quotaql.toml", '[cost]\nmax_depth = 12\n[cost.weights]\n"User.friends" = 2\n')

    result = run("check-config", "quotaql.toml", cwd=tmp_path)

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        "OK: quotaql.toml: 1 weight, limits: max_depth=12, the rest safe defaults\n"
    )


def test_check_config_with_a_schema_names_every_wrong_coordinate(tmp_path):
    write(tmp_path / "schema.graphql", SDL)
    write(
        tmp_path / "quotaql.toml",
        """\
        [cost.weights]
        "Query.user" = 3
        "User.friends" = 2
        "User.frends" = 2
        """,
    )

    lines = error_lines(
        run("check-config", "quotaql.toml", "--schema", "schema.graphql", cwd=tmp_path), 1
    )

    assert lines == [
        "error: quotaql.toml:2: cost.weights.\"Query.user\": no field 'user' on type 'Query';"
        " did you mean 'Query.users'?",
        "error: quotaql.toml:4: cost.weights.\"User.frends\": no field 'frends' on type 'User';"
        " did you mean 'User.friends' or 'User.id' or 'User.name'?",
    ]


def test_check_config_with_a_schema_names_every_root_field_that_is_not_one(tmp_path):
    write(tmp_path / "schema.graphql", SDL)
    write(
        tmp_path / "quotaql.toml",
        """\
        [tiers.free]
        capacity = 10
        refill_per_second = 1
        [tiers.free.fields]
        "Query.user" = { capacity = 5, refill_per_second = 1 }
        "Query.users" = { max_in_flight = 2 }
        [tiers.pro]
        capacity = 10
        refill_per_second = 1
        [tiers.pro.fields]
        "Query.sers" = { max_in_flight = 2 }
        [cost.weights]
        "User.frends" = 2
        """,
    )

    with_schema = run("check-config", "quotaql.toml", "--schema", "schema.graphql", cwd=tmp_path)
    without = run("check-config", "quotaql.toml", cwd=tmp_path)

    not_root = (
        "is not a root field of the schema (a field of its query, mutation or subscription type)"
    )
    assert error_lines(with_schema, 1) == [
        f"error: quotaql.toml:5: tiers.free.fields.\"Query.user\": 'Query.user' {not_root};"
        " did you mean 'Query.users'?",
        f"error: quotaql.toml:11: tiers.pro.fields.\"Query.sers\": 'Query.sers' {not_root};"
        " did you mean 'Query.users'?",
        "error: quotaql.toml:13: cost.weights.\"User.frends\": no field 'frends' on type 'User';"
        " did you mean 'User.friends' or 'User.id' or 'User.name'?",
    ]
    # without the schema, the file is valid: coordinates are the schema's to judge
    assert (without.returncode, without.stderr) == (0, "")


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("cost", "--schema", "schema.graphql", "--config", "quotaql.toml", "q.graphql"), 2),
        (("alerts", "--config", "quotaql.toml", "--out", "out"), 1),
    ],
)
def test_commands_reading_a_config_list_every_error_of_it(tmp_path, args, status):
    write(tmp_path / "schema.graphql", SDL)
    write(tmp_path / "q.graphql", "{ users { id } }")
    write(tmp_path / "quotaql.toml", "[cost]\nmax_depth = -1\n[alerts]\nblocked_ratio = 2\n")

    lines = error_lines(run(*args, cwd=tmp_path), status)

    assert [line.split(": ")[1:3] for line in lines] == [
        ["quotaql.toml:2", "cost.max_depth"],
        ["quotaql.toml:4", "alerts.blocked_ratio"],
    ]
    assert not (tmp_path / "out").exists()


def test_a_flood_of_errors_prints_a_bounded_number_of_lines(tmp_path):
    write(tmp_path / "quotaql.toml", "[limits]\n" + "".join(f"k{i} = 1\n" for i in range(5000)))

    lines = error_lines(run("check-config", "quotaql.toml", cwd=tmp_path), 1)

    assert len(lines) == 51
    assert lines[0] == "error: quotaql.toml:2: limits.k0: unknown key; did you mean 'mode'?" or (
        lines[0].startswith("error: quotaql.toml:2: limits.k0: unknown key; ")
    )
    assert lines[-1] == "error: 4950 more errors not shown"


# --- configuration files that cannot be read -----------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("check-config", "conf/quotaql.toml"),
        ("alerts", "--config", "conf/quotaql.toml", "--out", "out"),
    ],
)
def test_a_missing_relative_config_path_says_relative_to_what(tmp_path, args):
    (line,) = error_lines(run(*args, cwd=tmp_path), 1)

    assert line == (
        "error: conf/quotaql.toml: cannot read the file (No such file or directory);"
        " conf/quotaql.toml is relative to the working directory:"
        f" {tmp_path.resolve() / 'conf' / 'quotaql.toml'}"
    )


def test_a_newline_or_escape_in_a_name_cannot_split_or_colour_the_error_line(tmp_path):
    (line,) = error_lines(run("check-config", "evil\n\x1b[31mname.toml", cwd=tmp_path), 1)

    assert line.startswith("error: evil\\n\\x1b[31mname.toml: cannot read the file")


def test_cost_with_a_missing_config_is_a_usage_error(tmp_path):
    write(tmp_path / "schema.graphql", SDL)
    write(tmp_path / "query.graphql", "{ users { id } }")

    (line,) = error_lines(
        run(
            "cost", "--schema", "schema.graphql", "--config", "nope.toml", "query.graphql",
            cwd=tmp_path,
        ),
        2,
    )  # fmt: skip

    assert line.startswith("error: nope.toml: cannot read the file (No such file or directory);")


def test_an_unreadable_config_is_one_error_line(tmp_path):
    (tmp_path / "adir.toml").mkdir()
    (tmp_path / "latin1.toml").write_bytes(b"[limits]\nmode = '\xe9'\n")

    (directory,) = error_lines(run("check-config", "adir.toml", cwd=tmp_path), 2)
    (latin1,) = error_lines(run("check-config", "latin1.toml", cwd=tmp_path), 1)

    assert directory == (
        "error: Invalid value for 'CONFIG': File 'adir.toml' is a directory."
        " (see 'quotaql check-config --help')"
    )
    assert latin1 == "error: latin1.toml:2: not UTF-8 text (byte 0xe9 at offset 17)"


def test_usage_errors_are_one_error_line_with_status_2(tmp_path):
    (missing,) = error_lines(run("check-config", cwd=tmp_path), 2)
    (unknown,) = error_lines(run("chek-config", cwd=tmp_path), 2)
    (option,) = error_lines(run("alerts", "--outt", "x", cwd=tmp_path), 2)

    assert missing == ("error: Missing argument 'CONFIG'. (see 'quotaql check-config --help')")
    assert unknown.startswith("error: No such command 'chek-config'.")
    assert option == (
        "error: No such option '--outt'. Did you mean '--out'? (see 'quotaql alerts --help')"
    )


# --- generated files that cannot be written ------------------------------------------------


@pytest.mark.parametrize("command", ["dashboards", "alerts"])
def test_an_unwritable_out_directory_is_one_error_line(tmp_path, command):
    (tmp_path / "taken").write_text("a file, not a directory", encoding="utf-8")

    (line,) = error_lines(run(command, "--out", "taken/out", cwd=tmp_path), 1)

    assert line == "error: cannot write taken/out: Not a directory"
    assert (tmp_path / "taken").read_text(encoding="utf-8") == "a file, not a directory"


# --- the demo ------------------------------------------------------------------------------


def test_demo_with_a_redis_url_that_is_not_one_is_a_usage_error(tmp_path):
    (line,) = error_lines(run("demo", "--redis", "notaurl", "--no-serve", cwd=tmp_path), 2)

    assert line == (
        "error: --redis 'notaurl' is not a Redis URL: Redis URL must specify one of the"
        " following schemes (redis://, rediss://, unix://)"
    )


@pytest.mark.parametrize(
    ("command", "blocked"),
    [("demo", "uvicorn"), ("demo", "starlette"), ("loadgen", "httpx")],
)
def test_demo_commands_without_the_demo_extra_say_how_to_install_it(tmp_path, command, blocked):
    (line,) = error_lines(run(command, "--duration", "1", cwd=tmp_path, blocked=blocked), 1)

    assert line == (
        f"error: quotaql {command} needs the 'demo' extra (no module named {blocked!r}):"
        " pip install 'quotaql[demo]'"
    )
