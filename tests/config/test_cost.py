"""Tests for reading the ``[cost]`` table of ``quotaql.toml``."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

import quotaql.cost_analysis
from quotaql.config import CostConfig, load_cost_config, reader
from quotaql.cost_analysis.model import SAFE_LIMITS, CostLimits, CostModel, FieldCost
from quotaql.errors import ConfigError

FULL = """\
# quotaql settings
[cost]
default_list_size = 25
max_list_size = 400
slicing_arguments = ["first", "limit"]
operation_weights = { mutation = 20, subscription = 1.5 }
introspection = "off"
max_cost = 5000
max_depth = 12
max_aliases = 30
max_root_fields = 20
max_tokens = 50000
max_length = 1000000

[cost.weights]
"Post" = 2
"Query.search" = 5
"Query.search(term:)" = 1
"User.followers" = { weight = 1, assumed_size = 50, slicing_arguments = ["first"], max_size = 200 }
"""


@pytest.fixture
def write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write ``quotaql.toml`` in a fresh working directory; return its name as given."""
    monkeypatch.chdir(tmp_path)

    def write(text: str) -> str:
        Path("quotaql.toml").write_text(textwrap.dedent(text), encoding="utf-8")
        return "quotaql.toml"

    return write


def config_error(path: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_cost_config(path)
    return info.value


# --- valid files ---------------------------------------------------------------------------


def test_full_file_round_trips_into_exact_model_and_limits(write):
    cfg = load_cost_config(write(FULL))

    assert cfg.model == CostModel(
        default_list_size=25,
        max_list_size=400,
        slicing_arguments=("first", "limit"),
        operation_weights={"mutation": 20, "subscription": 1.5},
        introspection="off",
        weights={
            "Post": 2,
            "Query.search": 5,
            "Query.search(term:)": 1,
            "User.followers": FieldCost(
                weight=1, assumed_size=50, slicing_arguments=("first",), max_size=200
            ),
        },
    )
    assert dict(cfg.model.operation_weights) == {
        "query": 0.0,
        "mutation": 20.0,
        "subscription": 1.5,
    }
    assert cfg.limits == CostLimits(
        max_cost=5000,
        max_depth=12,
        max_aliases=30,
        max_root_fields=20,
        max_tokens=50000,
        max_length=1000000,
        max_fields=SAFE_LIMITS.max_fields,  # not in the file: the safe defaults
        max_repeated_fields=SAFE_LIMITS.max_repeated_fields,
        max_directives=SAFE_LIMITS.max_directives,
        max_variable_values=SAFE_LIMITS.max_variable_values,
        max_field_pairs=SAFE_LIMITS.max_field_pairs,
    )


def test_model_source_is_the_path_and_locations_give_each_weight_line(write):
    model = load_cost_config(write(FULL)).model

    assert model.source == "quotaql.toml"
    assert model.locations == {
        "Post": 16,
        "Query.search": 17,
        "Query.search(term:)": 18,
        "User.followers": 19,
    }


@pytest.mark.parametrize("text", ["", "# nothing configured yet\n\n", "[cost]\n"])
def test_empty_file_or_empty_cost_table_gives_defaults(write, text):
    assert load_cost_config(write(text)) == CostConfig(model=CostModel(), limits=SAFE_LIMITS)
    assert CostLimits() != SAFE_LIMITS  # safe, not unlimited


def test_max_variable_values_is_on_by_default_and_false_turns_it_off(write):
    assert load_cost_config(write("[cost]\n")).limits.max_variable_values == 5_000
    off = load_cost_config(write("[cost]\nmax_variable_values = false\n"))
    assert off.limits.max_variable_values is None
    assert off.limits.max_fields == SAFE_LIMITS.max_fields  # the others keep their defaults
    raised = load_cost_config(write("[cost]\nmax_variable_values = 200000\n"))
    assert raised.limits.max_variable_values == 200_000


def test_weights_in_subtable_form_build_field_costs_located_at_their_header(write):
    path = write(
        """\
        [cost.weights."User.followers"]
        weight = 3
        sized_fields = ["edges", "nodes"]
        require_one_slicing_argument = true

        [cost.weights."Query.search"]
        assumed_size = 0
        """
    )

    model = load_cost_config(path).model

    assert model.weights == {
        "User.followers": FieldCost(
            weight=3, sized_fields=("edges", "nodes"), require_one_slicing_argument=True
        ),
        "Query.search": FieldCost(assumed_size=0),
    }
    assert model.locations == {"User.followers": 1, "Query.search": 6}


def test_dotted_literal_and_spaced_keys_are_read_and_located(write):
    path = write(
        """\
        cost.default_list_size = 3
        [ cost . weights ]
        'Query.search' = 5
        "User".weight_table_is_not_this = 1
        """
    )

    error = config_error(path)

    # "User".x = 1 is a dotted key: the table User gets a key, found at its own line.
    assert (error.key, error.line) == ("cost.weights.User", 4)
    assert "expected a number (a table of settings is only for a 'Type.field'" in error.reason


def test_multiline_arrays_and_strings_do_not_confuse_line_numbers(write):
    path = write(
        '''\
        [cost]
        slicing_arguments = [
          "first",  # [x] in a comment
          "[x]",
          "a = b",
        ]
        introspection = """
        [cost.weights]
        Post = 99
        """
        max_depth = 4
        [cost.weights]
        'a = b' = 1
        '''
    )

    error = config_error(path)

    # The real [cost.weights] header is line 12; the coordinate 'a = b' is on line 13.
    assert (error.file, error.key, error.line) == ("quotaql.toml", 'cost.weights."a = b"', 13)


def test_multiline_strings_with_escaped_and_extra_quotes_keep_lines(write):
    lines = [
        "[cost]",
        "slicing_arguments = [",
        "  '''",
        "[cost] x = 1 '''',",  # ends with a quote of its own
        '  """a \\""" b = [c]',  # an escaped quote run does not end the string
        'd"""",',
        "]",
        "max_dept = 1",
    ]
    path = write("\n".join(lines) + "\n")

    error = config_error(path)

    assert (error.key, error.line) == ("cost.max_dept", 8)


def test_crlf_line_endings_are_located(write, tmp_path):
    (tmp_path / "quotaql.toml").write_bytes(b"[cost]\r\n\r\nmax_dept = 1\r\n")

    error = config_error("quotaql.toml")

    assert (error.key, error.line) == ("cost.max_dept", 3)


def test_accepts_a_path_object_and_reports_it_as_given(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text("[cost]\nmax_depth = -1\n", encoding="utf-8")

    error = config_error(path)

    assert (error.file, error.line) == (str(path), 2)


def test_reading_the_same_file_twice_gives_the_same_model_and_limits(write):
    path = write(FULL)

    assert load_cost_config(path).model == load_cost_config(path).model
    assert load_cost_config(path).limits.max_depth == 12


def test_cost_analysis_imports_nothing_from_config():
    # quotaql.config imports the cost model; cost_analysis reads no files and imports
    # nothing back, so that the two cannot form an import cycle.
    package = Path(quotaql.cost_analysis.__file__).parent
    imports = []
    for module in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imports += [(module.name, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                imports.append((module.name, node.module))
                imports += [(module.name, f"{node.module}.{alias.name}") for alias in node.names]
    assert imports, "no imports found: the scan is broken"
    assert [
        (name, target)
        for name, target in imports
        if target == "quotaql.config" or target.startswith("quotaql.config.")
    ] == []


# --- errors reading the file ---------------------------------------------------------------


def test_missing_file_names_the_file(tmp_path):
    error = config_error(str(tmp_path / "absent.toml"))

    assert error.file == str(tmp_path / "absent.toml")
    assert (error.key, error.line) == (None, None)
    assert "cannot read the file (No such file or directory)" in error.reason


def test_directory_is_unreadable_and_names_the_file(tmp_path):
    error = config_error(str(tmp_path))

    assert error.file == str(tmp_path)
    assert "cannot read the file" in error.reason


def test_non_utf8_file_names_file_and_line(write, tmp_path):
    (tmp_path / "quotaql.toml").write_bytes(b"[cost]\n# caf\xe9\nmax_depth = 1\n")

    error = config_error("quotaql.toml")

    assert (error.file, error.key, error.line) == ("quotaql.toml", None, 2)
    assert "not UTF-8" in error.reason


def test_toml_syntax_error_gives_line_and_reason(write):
    error = config_error(write("[cost]\nmax_depth = 1\nmax_aliases = = 2\n"))

    assert (error.file, error.key, error.line) == ("quotaql.toml", None, 3)
    assert error.reason == "invalid TOML: Invalid value"
    assert str(error) == "quotaql.toml:3: invalid TOML: Invalid value"


def test_toml_error_at_end_of_document_points_at_the_last_line(write):
    error = config_error(write('[cost]\nintrospection = "free'))

    assert error.line == 2
    assert "Unterminated string" in error.reason


# --- unknown keys --------------------------------------------------------------------------


def test_unknown_key_names_file_line_and_suggests_closest(write):
    error = config_error(write("[cost]\nmax_depth = 3\nmax_dept = 4\n"))

    assert (error.file, error.key, error.line) == ("quotaql.toml", "cost.max_dept", 3)
    assert str(error) == "quotaql.toml:3: cost.max_dept: unknown key; did you mean 'max_depth'?"


def test_unknown_table_suggests_closest_known_table(write):
    error = config_error(write("# settings\n[cots]\nmax_depth = 3\n"))

    assert (error.key, error.line) == ("cots", 2)
    assert error.reason == "unknown table; did you mean 'cost'?"


def test_unknown_table_without_a_close_match_lists_known_tables(write):
    error = config_error(write("[cost]\nmax_depth = 3\n[storage.redis]\nurl = 1\n"))

    assert (error.key, error.line) == ("storage", 3)
    assert error.reason == (
        "unknown table; expected one of: 'cost', 'limits', 'tiers', 'tenants', 'global',"
        " 'alerts', 'identity', 'adaptive', 'redis'"
    )


def test_unknown_key_in_inline_weight_table_points_at_its_line(write):
    path = write(
        """\
        [cost.weights]
        Post = 2
        "User.followers" = { weight = 1, assumed_sise = 50 }
        """
    )

    error = config_error(path)

    assert (error.key, error.line) == ('cost.weights."User.followers".assumed_sise', 3)
    assert error.reason == "unknown key; did you mean 'assumed_size'?"


def test_unknown_key_in_weight_subtable_points_at_its_line(write):
    path = write('[cost.weights."User.followers"]\nweight = 1\nslicing_argument = ["first"]\n')

    error = config_error(path)

    assert (error.key, error.line) == ('cost.weights."User.followers".slicing_argument', 3)
    assert error.reason == "unknown key; did you mean 'slicing_arguments'?"


def test_unknown_operation_type_suggests_closest(write):
    error = config_error(write("[cost]\n\noperation_weights = { query = 1, mutaton = 5 }\n"))

    assert (error.key, error.line) == ("cost.operation_weights.mutaton", 3)
    assert error.reason == "unknown operation type; did you mean 'mutation'?"


# --- wrong values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "key", "phrase"),
    [
        ('default_list_size = "10"', "cost.default_list_size", 'integer >= 0, got a string ("10")'),
        ("default_list_size = 1.5", "cost.default_list_size", "integer >= 0, got a float (1.5)"),
        ("default_list_size = -1", "cost.default_list_size", "integer >= 0, got -1"),
        ("max_list_size = 2.5", "cost.max_list_size", "integer >= 0, got a float (2.5)"),
        ("max_list_size = -1", "cost.max_list_size", "integer >= 0, got -1"),
        (
            "max_depth = true",
            "cost.max_depth",
            "integer >= 0, or false for no limit, got a boolean (true)",
        ),
        (
            "max_length = 1e6",
            "cost.max_length",
            "integer >= 0, or false for no limit, got a float (1000000.0)",
        ),
        ("max_aliases = -3", "cost.max_aliases", "integer >= 0, or false for no limit, got -3"),
        (
            'max_variable_values = "many"',
            "cost.max_variable_values",
            'integer >= 0, or false for no limit, got a string ("many")',
        ),
        ('max_cost = "5"', "cost.max_cost", 'finite number >= 0, got a string ("5")'),
        ("max_cost = inf", "cost.max_cost", "finite number >= 0, got a float (inf)"),
        ("max_cost = -0.5", "cost.max_cost", "finite number >= 0, got -0.5"),
        ("max_cost = false", "cost.max_cost", "finite number >= 0, got a boolean (false)"),
        ("operation_weights = { mutation = nan }", "cost.operation_weights.mutation", "nan"),
        ("operation_weights = 10", "cost.operation_weights", "a table, got an integer (10)"),
        (
            'introspection = "cheap"',
            "cost.introspection",
            '"counted", "free" or "off", got a string',
        ),
        ('slicing_arguments = "first"', "cost.slicing_arguments", "array of strings, got a str"),
        ('slicing_arguments = ["first", 3]', "cost.slicing_arguments[1]", "a string, got an int"),
        ("weights = 5", "cost.weights", "expected a table, got an integer (5)"),
        ('weights = { Post = "2" }', "cost.weights.Post", "a number or a table, got a string"),
        ("weights = { Post = true }", "cost.weights.Post", "a number or a table, got a boolean"),
        ("weights = { Post = -inf }", "cost.weights.Post", "finite number, got a float (-inf)"),
        (
            'weights."User.followers" = { assumed_size = -1 }',
            'cost.weights."User.followers".assumed_size',
            "integer >= 0, got -1",
        ),
        (
            'weights."User.followers" = { max_size = "all" }',
            'cost.weights."User.followers".max_size',
            'integer >= 0, got a string ("all")',
        ),
        (
            'weights."User.followers" = { require_one_slicing_argument = "yes" }',
            'cost.weights."User.followers".require_one_slicing_argument',
            'true or false, got a string ("yes")',
        ),
        (
            'weights."User.followers" = { sized_fields = ["edges", {}] }',
            'cost.weights."User.followers".sized_fields[1]',
            "a string, got a table",
        ),
        ("weights.Post.weight = 2", "cost.weights.Post", "a table of settings is only for"),
        (
            'weights."Query.search(term:)" = { weight = 2 }',
            'cost.weights."Query.search(term:)"',
            "a table of settings is only for",
        ),
    ],
)
def test_wrong_value_names_key_line_and_what_was_expected(write, line, key, phrase):
    error = config_error(write(f"# limits\n[cost]\n{line}\nmax_tokens = 10\n"))

    assert (error.file, error.key, error.line) == ("quotaql.toml", key, 3)
    assert "expected" in error.reason
    assert phrase in error.reason


def test_cost_that_is_not_a_table_is_rejected(write):
    error = config_error(write("\ncost = 5\n"))

    assert (error.key, error.line) == ("cost", 2)
    assert error.reason == "expected a table, got an integer (5)"


@pytest.mark.parametrize(
    ("coordinate", "key"),
    [
        ("Query search", 'cost.weights."Query search"'),
        ("1Post", "cost.weights.1Post"),
        ("Query.search(term)", 'cost.weights."Query.search(term)"'),
        ("Query.search(term:).x", 'cost.weights."Query.search(term:).x"'),
        ("Query.", 'cost.weights."Query."'),
        ("", 'cost.weights.""'),
    ],
)
def test_bad_weight_coordinate_is_rejected_with_its_syntax(write, coordinate, key):
    error = config_error(write(f'[cost]\n[cost.weights]\nPost = 1\n"{coordinate}" = 2\n'))

    assert (error.key, error.line) == (key, 4)
    assert error.reason.startswith(
        "expected a schema coordinate ('Type', 'Type.field' or 'Type.field(arg:)')"
    )
    assert error.reason.endswith(f'got "{coordinate}"')


def test_error_in_multiline_array_points_at_the_offending_item(write):
    path = write(
        """\
        [cost]
        slicing_arguments = [
          "first",
          "[x] = 1",
          false,
        ]
        """
    )

    error = config_error(path)

    assert (error.key, error.line) == ("cost.slicing_arguments[2]", 5)
    assert error.reason == "expected a string, got a boolean (false)"


def test_value_class_rejection_is_reraised_with_file_key_and_line(write, monkeypatch):
    # Values are checked before they are built; should a value class grow a check this
    # module does not know, its error must still say where the value came from.
    def stricter_limits(**kwargs):
        raise ConfigError("max_depth must be at most 100")

    monkeypatch.setattr(reader, "CostLimits", stricter_limits)

    error = config_error(write("# limits\n[cost]\nmax_depth = 1000\n"))

    assert (error.file, error.key, error.line) == ("quotaql.toml", "cost", 2)
    assert error.reason == "max_depth must be at most 100"
