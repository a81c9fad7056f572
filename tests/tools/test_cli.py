"""Tests for the ``quotaql`` command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from quotaql.cli import app
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL

SDL = """\
type Query {
  users(first: Int = 10): [User] @listSize(slicingArguments: ["first"])
}
type User {
  id: ID
  name: String
  friends(first: Int = 5): [User]
}
"""
QUERY = "{ users(first: 3) { friends { id } } }\n"
# users: 3 x (User 1 + friends: 5 x User 1) = 18; User.friends 3 x 5 = 15, Query.users 3.
EXPECTED_REPORT = {
    "cost": 18,
    "model": "apollo",
    "fieldCost": 18,
    "typeCost": None,
    "depth": 3,
    "aliases": 0,
    "rootFields": 1,
    "operationType": "query",
    "operationName": None,
    "byCoordinate": {"User.friends": 15, "Query.users": 3},
}

GRAPHQL_CORE_MODULE = f"""\
from graphql import build_schema
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL

schema = build_schema(COST_DIRECTIVES_SDL + {SDL!r})
number = 42

class api:
    schema = schema

def make_schema():
    return schema
"""

STRAWBERRY_MODULE = """\
from __future__ import annotations

import strawberry
from quotaql.cost_analysis.directives import ListSize

@strawberry.type
class User:
    id: strawberry.ID

    @strawberry.field
    def friends(self, first: int = 5) -> list[User]:
        return []

@strawberry.type
class Query:
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    def users(self, first: int = 10) -> list[User]:
        return []

schema = strawberry.Schema(query=Query)
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh working directory holding ``schema.graphql`` and ``query.graphql``.

    The command makes the working directory importable: ``sys.path`` is restored and the
    modules imported from here are forgotten afterwards.
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "schema.graphql").write_text(SDL, encoding="utf-8")
    (tmp_path / "query.graphql").write_text(QUERY, encoding="utf-8")
    yield tmp_path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path.name


def invoke(*args: str, stdin: str | None = None):
    return CliRunner().invoke(
        app, list(args), input=stdin, catch_exceptions=False, prog_name="quotaql"
    )


def cost_json(*args: str, stdin: str | None = None) -> dict:
    result = invoke("cost", "--json", *args, stdin=stdin)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def error_json(*args: str, stdin: str | None = None) -> dict:
    result = invoke("cost", "--json", *args, stdin=stdin)
    assert result.exit_code == 1, result.output
    return json.loads(result.stdout)["error"]


# --- end to end, through the real interpreter -------------------------------------------


def run(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quotaql.cli", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )


def test_command_prices_a_module_schema_from_the_working_directory(workdir):
    write(workdir / "shop_api.py", GRAPHQL_CORE_MODULE)

    result = run("cost", "--json", "--schema", "shop_api:schema", "query.graphql", cwd=workdir)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == EXPECTED_REPORT


def test_command_reads_the_query_from_stdin_and_prints_a_table(workdir):
    result = run("cost", "--schema", "schema.graphql", "-", cwd=workdir, stdin=QUERY)

    assert result.returncode == 0, result.stderr
    assert "Cost         18" in result.stdout
    assert "User.friends" in result.stdout
    assert "83.3%" in result.stdout


def test_command_without_the_cli_extra_says_how_to_install_it(tmp_path):
    code = (
        "import runpy, sys; sys.modules['click'] = None;"
        " runpy.run_module('quotaql.cli', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )

    assert result.returncode == 1
    assert result.stderr.strip() == (
        "the quotaql command needs the 'cli' extra: pip install 'quotaql[cli]'"
    )


# --- schemas -----------------------------------------------------------------------------


def test_json_report_has_exact_values_largest_coordinate_first(workdir):
    report = cost_json("--schema", "schema.graphql", "query.graphql")

    assert report == EXPECTED_REPORT
    assert list(report["byCoordinate"]) == ["User.friends", "Query.users"]


def test_sdl_that_declares_the_cost_directives_itself_is_used_as_is(workdir):
    write(workdir / "own.graphqls", COST_DIRECTIVES_SDL + SDL)

    assert cost_json("--schema", "own.graphqls", "query.graphql") == EXPECTED_REPORT


def test_sdl_that_declares_only_cost_gets_list_size_added(workdir):
    own_cost = "directive @cost(weight: String!) on FIELD_DEFINITION | OBJECT\n"
    write(
        workdir / "partial.gql",
        own_cost + SDL.replace("name: String", 'name: String @cost(weight: "2")'),
    )

    report = cost_json("--schema", "partial.gql", "-", stdin="{ users(first: 3) { name } }")

    assert report["cost"] == 9  # 3 x (User 1 + name 2)


@pytest.mark.parametrize("spec", ["shop_api:schema", "shop_api:make_schema", "shop_api:api.schema"])
def test_module_attr_names_a_schema_a_factory_or_a_dotted_attribute(workdir, spec):
    write(workdir / "shop_api.py", GRAPHQL_CORE_MODULE)

    assert cost_json("--schema", spec, "query.graphql") == EXPECTED_REPORT


def test_module_attr_can_name_a_strawberry_schema(workdir):
    write(workdir / "strawberry_api.py", STRAWBERRY_MODULE)

    assert cost_json("--schema", "strawberry_api:schema", "query.graphql") == EXPECTED_REPORT


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module:schema", "no_such_module:schema: no module named 'no_such_module'"),
        ("shop_api:missing", "shop_api:missing: module 'shop_api' has no attribute 'missing'"),
        ("shop_api:api.missing", "shop_api:api.missing: 'api' has no attribute 'missing'"),
        ("shop_api:number", "shop_api:number is of type 'int', not a graphql.GraphQLSchema"),
        ("shop_api", "'shop_api' is neither MODULE:ATTR nor a schema file"),
        ("shop_api:", "'shop_api:' is not MODULE:ATTR"),
        ("absent.graphql", "cannot read absent.graphql: No such file or directory"),
        ("syntax.graphql", "syntax.graphql:3:7: Syntax Error: Expected ':', found Name 'Foo'."),
        ("unknown.graphql", "unknown.graphql:2:13: Unknown type 'Foo'."),
        ("rootless.graphql", "rootless.graphql: invalid schema: Query root type must be provided."),
    ],
)
def test_bad_schema_spec_is_a_usage_error_naming_the_spec(workdir, spec, message):
    write(workdir / "shop_api.py", GRAPHQL_CORE_MODULE)
    write(workdir / "syntax.graphql", "type Query {\n  a: Int\n    b Foo\n}\n")
    write(workdir / "unknown.graphql", "type Query {\n  a: Int b: Foo\n}\n")
    write(workdir / "rootless.graphql", "type User { id: ID }\n")

    result = invoke("cost", "--schema", spec, "query.graphql")

    assert result.exit_code == 2
    assert f"Invalid value for '--schema': {message}" in result.stderr


def test_missing_import_inside_the_schema_module_keeps_its_traceback(workdir):
    write(workdir / "broken_api.py", "import not_installed_dependency\n")

    with pytest.raises(ModuleNotFoundError, match="not_installed_dependency"):
        invoke("cost", "--schema", "broken_api:schema", "query.graphql")


# --- query, variables, operation -----------------------------------------------------------


def test_query_is_read_from_stdin_with_a_dash(workdir):
    report = cost_json("--schema", "schema.graphql", "-", stdin="{ users { id } }")

    assert report["cost"] == 10  # the schema default of `first`


def test_inline_variables_size_the_lists(workdir):
    write(workdir / "vars.graphql", "query Q($n: Int) { users(first: $n) { friends { id } } }")

    report = cost_json("--schema", "schema.graphql", "--variables", '{"n": 2}', "vars.graphql")

    assert report["cost"] == 12
    assert report["operationName"] == "Q"


def test_variables_can_come_from_a_file(workdir):
    write(workdir / "vars.graphql", "query Q($n: Int) { users(first: $n) { friends { id } } }")
    write(workdir / "vars.json", '{"n": 4}')

    report = cost_json("--schema", "schema.graphql", "--variables", "@vars.json", "vars.graphql")

    assert report["cost"] == 24


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ("{n", "not JSON: Expecting property name enclosed in double quotes"),
        ("[1]", "expected a JSON object, got an array"),
        ("@absent.json", "cannot read absent.json: No such file or directory"),
        ("@list.json", "list.json: expected a JSON object, got an array"),
    ],
)
def test_variables_that_are_not_a_json_object_are_a_usage_error(workdir, variables, message):
    write(workdir / "list.json", "[]")

    result = invoke("cost", "--schema", "schema.graphql", "--variables", variables, "query.graphql")

    assert result.exit_code == 2
    assert f"Invalid value for '--variables': {message}" in result.stderr


def test_variable_of_the_wrong_type_is_an_analysis_error(workdir):
    write(workdir / "vars.graphql", "query Q($n: Int) { users(first: $n) { id } }")

    error = error_json("--schema", "schema.graphql", "--variables", '{"n": "x"}', "vars.graphql")

    assert error["code"] == "BAD_USER_INPUT"
    assert error["locations"] == [{"line": 1, "column": 9}]


def test_operation_option_picks_one_of_several_operations(workdir):
    write(workdir / "two.graphql", "query A { users { id } }\nquery B { users(first: 2) { id } }")

    report = cost_json("--schema", "schema.graphql", "--operation", "B", "two.graphql")

    assert (report["operationName"], report["cost"]) == ("B", 2)


def test_unknown_operation_exits_1_with_its_code(workdir):
    error = error_json("--schema", "schema.graphql", "--operation", "C", "query.graphql")

    assert error == {
        "code": "OPERATION_RESOLUTION_FAILURE",
        "message": "Unknown operation named 'C'.",
        "locations": [],
    }


def test_syntax_error_names_the_file_line_and_column(workdir):
    write(workdir / "broken.graphql", "{ users(first: 3) { id }\n")

    result = invoke("cost", "--schema", "schema.graphql", "broken.graphql")

    assert result.exit_code == 1
    assert result.stderr == (
        "error [GRAPHQL_PARSE_FAILED]: Expected Name, found <EOF>.\n  --> broken.graphql:2:1\n"
    )
    assert result.stdout == ""


def test_syntax_error_in_json_mode_is_a_json_error_on_stdout(workdir):
    error = error_json("--schema", "schema.graphql", "-", stdin="{ users(first: 3) { id }\n")

    assert error == {
        "code": "GRAPHQL_PARSE_FAILED",
        "message": "Expected Name, found <EOF>.",
        "locations": [{"line": 2, "column": 1}],
    }


def test_cost_too_large_for_a_float_is_still_valid_json(workdir):
    nested = "friends(first: 2000000000) { " * 40 + "id" + " }" * 40
    query = "{ users(first: 2000000000) { " + nested + " } }"

    result = invoke("cost", "--json", "--schema", "schema.graphql", "-", stdin=query)

    def reject(constant):
        raise AssertionError(f"{constant} is not JSON")

    report = json.loads(result.stdout, parse_constant=reject)
    assert report["cost"] == sys.float_info.max  # an overflow prices as the largest float
    assert report["byCoordinate"]["Query.users"] == 2_000_000_000


# --- human output --------------------------------------------------------------------------


def test_human_output_shows_totals_and_the_share_of_each_coordinate(workdir):
    result = invoke("cost", "--schema", "schema.graphql", "query.graphql")

    assert result.exit_code == 0
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[:6] == [
        "Operation    query (anonymous)",
        "Model        apollo",
        "Cost         18",
        "Depth        3",
        "Aliases      0",
        "Root fields  1",
    ]
    # The cells of each table row, whatever box characters the console can draw.
    rows = [re.findall(r"[\w.%]+", line) for line in lines if "User." in line or "Query." in line]
    assert rows == [["User.friends", "15", "83.3%"], ["Query.users", "3", "16.7%"]]


def test_model_compare_prices_with_both_models(workdir):
    result = invoke("cost", "--schema", "schema.graphql", "--model", "compare", "--json",
                    "query.graphql")  # fmt: skip
    assert result.exit_code == 0, result.output
    both = json.loads(result.stdout)
    assert both["apollo"] == EXPECTED_REPORT
    # IBM: field cost users 1 + 3 × friends 1 = 4; type cost Query 1 + 3 User + 15 User.
    ibm = both["ibm"]
    assert (ibm["model"], ibm["cost"], ibm["fieldCost"], ibm["typeCost"]) == ("ibm", 19, 4, 19)
    human = invoke("cost", "--schema", "schema.graphql", "--model", "ibm", "query.graphql")
    assert "Field cost   4" in human.stdout
    assert "Type cost    19" in human.stdout


def test_top_limits_the_rows_and_says_how_many_are_hidden(workdir):
    result = invoke("cost", "--schema", "schema.graphql", "--top", "1", "query.graphql")

    assert "User.friends" in result.stdout
    assert "Query.users" not in result.stdout
    assert "1 more not shown (--top)" in result.stdout


def test_top_zero_prints_only_the_totals(workdir):
    result = invoke("cost", "--schema", "schema.graphql", "--top", "0", "query.graphql")

    assert result.exit_code == 0
    assert "Largest contributions" not in result.stdout
    assert "Cost         18" in result.stdout


# --- configuration -------------------------------------------------------------------------


def test_config_weights_price_the_query(workdir):
    write(workdir / "quotaql.toml", '[cost.weights]\n"User.friends" = 2\n')

    report = cost_json("--schema", "schema.graphql", "--config", "quotaql.toml", "query.graphql")

    assert report["cost"] == 33  # 3 x (1 + 5 x 2)
    assert report["byCoordinate"] == {"User.friends": 30, "Query.users": 3}


def test_cost_over_the_config_limit_exits_1_with_query_too_complex(workdir):
    write(workdir / "quotaql.toml", "[cost]\nmax_cost = 10\n")

    error = error_json("--schema", "schema.graphql", "--config", "quotaql.toml", "query.graphql")

    assert error["code"] == "QUERY_TOO_COMPLEX"
    assert error["limit"] == 10
    assert error["cost"] > 10
    assert error["message"].endswith("exceeds the maximum of 10")


def test_cost_over_the_limit_in_human_mode_prints_the_code_on_stderr(workdir):
    write(workdir / "quotaql.toml", "[cost]\nmax_depth = 2\n")

    result = invoke(
        "cost", "--schema", "schema.graphql", "--config", "quotaql.toml", "query.graphql"
    )

    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error [QUERY_TOO_DEEP]: Query depth 3 exceeds the maximum of 2\n  --> query.graphql:1:"
    )


def test_invalid_config_is_a_usage_error_with_file_line_and_key(workdir):
    write(workdir / "quotaql.toml", '[cost]\nmax_cost = "x"\n')

    result = invoke(
        "cost", "--schema", "schema.graphql", "--config", "quotaql.toml", "query.graphql"
    )

    assert result.exit_code == 2
    assert result.stderr == (
        'error: quotaql.toml:2: cost.max_cost: expected a finite number >= 0, got a string ("x")\n'
    )


def test_config_naming_an_unknown_coordinate_is_a_usage_error_for_cost(workdir):
    write(workdir / "quotaql.toml", '[cost.weights]\n"Query.user" = 2\n')

    result = invoke(
        "cost", "--schema", "schema.graphql", "--config", "quotaql.toml", "query.graphql"
    )

    assert result.exit_code == 2
    assert "did you mean 'Query.users'?" in result.stderr


# --- check-config --------------------------------------------------------------------------


def test_check_config_reports_weights_and_limits(workdir):
    write(
        workdir / "quotaql.toml",
        """\
        [cost]
        max_cost = 1000
        max_depth = 12

        [cost.weights]
        "User.friends" = 2
        """,
    )

    result = invoke("check-config", "quotaql.toml", "--schema", "schema.graphql")

    assert result.exit_code == 0
    assert result.stdout == (
        "OK: quotaql.toml: 1 weight, limits: max_cost=1000, max_depth=12, the rest safe defaults\n"
    )


def test_check_config_warns_of_subscription_events_that_price_at_0(workdir):
    write(
        workdir / "events.graphql",
        """\
        type Query { hello: String }
        type Subscription { countdown: Int  ticks: Int }
        """,
    )
    write(workdir / "quotaql.toml", '[cost.weights]\n"Subscription.ticks" = 2\n')

    result = invoke("check-config", "quotaql.toml", "--schema", "events.graphql")

    assert result.exit_code == 0  # a warning, not an error
    assert result.stderr.startswith("warning: the events of Subscription.countdown price at 0")
    assert "Subscription.ticks" not in result.stderr
    assert result.stdout.startswith("OK: quotaql.toml: 1 weight")


def test_check_config_of_an_empty_file_has_the_safe_limits(workdir):
    write(workdir / "quotaql.toml", "")

    result = invoke("check-config", "quotaql.toml", "--schema", "schema.graphql")

    assert result.stdout == "OK: quotaql.toml: 0 weights, limits: the safe defaults\n"


def test_check_config_shows_a_lifted_limit(workdir):
    write(workdir / "quotaql.toml", "[cost]\nmax_depth = false\n")

    result = invoke("check-config", "quotaql.toml", "--schema", "schema.graphql")

    assert result.stdout == (
        "OK: quotaql.toml: 0 weights, limits: max_depth=off, the rest safe defaults\n"
    )


def test_check_config_rejects_an_unknown_coordinate_with_a_suggestion(workdir):
    write(
        workdir / "quotaql.toml",
        """\
        [cost.weights]
        "User.friends" = 2
        "Query.user" = 3
        """,
    )

    result = invoke("check-config", "quotaql.toml", "--schema", "schema.graphql")

    assert result.exit_code == 1
    assert result.stderr == (
        "error: quotaql.toml:3: cost.weights.\"Query.user\": no field 'user' on type 'Query';"
        " did you mean 'Query.users'?\n"
    )


def test_check_config_rejects_an_invalid_file_with_its_line(workdir):
    write(workdir / "quotaql.toml", "[cost]\nmax_depth = -1\n")

    result = invoke("check-config", "quotaql.toml", "--schema", "schema.graphql")

    assert result.exit_code == 1
    assert result.stderr.startswith("error: quotaql.toml:2: cost.max_depth: ")


def test_group_lists_its_commands(workdir):
    result = invoke("--help")

    assert result.exit_code == 0
    assert "cost" in result.stdout
    assert "check-config" in result.stdout


def test_dashboards_command_writes_the_committed_files(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["dashboards", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    committed = Path(__file__).resolve().parents[2] / "dashboards"
    for name in ("quotaql-overview.json", "quotaql-tenant.json"):
        assert f"wrote {tmp_path / 'out' / name}" in result.output
        assert (tmp_path / "out" / name).read_bytes() == (committed / name).read_bytes()


def test_alerts_command_writes_the_committed_rules_and_reads_thresholds(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["alerts", "--out", str(tmp_path / "default")])
    assert result.exit_code == 0, result.output
    committed = Path(__file__).resolve().parents[2] / "alerts" / "quotaql.rules.yml"
    written = tmp_path / "default" / "quotaql.rules.yml"
    assert written.read_bytes() == committed.read_bytes()
    config = tmp_path / "quotaql.toml"
    config.write_text("[alerts]\nblocked_ratio = 0.35\n", encoding="utf-8")
    custom = runner.invoke(app, ["alerts", "--config", str(config), "--out", str(tmp_path / "c")])
    assert custom.exit_code == 0, custom.output
    assert "> 0.35" in (tmp_path / "c" / "quotaql.rules.yml").read_text(encoding="utf-8")
    config.write_text("[alerts]\nblocked_ratio = -1\n", encoding="utf-8")
    bad = runner.invoke(app, ["alerts", "--config", str(config), "--out", str(tmp_path / "b")])
    assert bad.exit_code == 1
    assert "alerts.blocked_ratio" in bad.output


def test_loadgen_reports_a_dead_server_and_bad_tenants() -> None:
    from tests.support.servers import free_port

    port = free_port()  # nothing listens on it
    runner = CliRunner()
    dead = runner.invoke(app, ["loadgen", "--url", f"http://127.0.0.1:{port}", "--duration", "0.3"])
    assert dead.exit_code == 1
    assert "no answer from" in dead.output
    empty = runner.invoke(app, ["loadgen", "--tenants", " , "])
    assert empty.exit_code == 2
    assert "names no tenant" in empty.output
