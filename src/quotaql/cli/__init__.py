"""The ``quotaql`` command: price an operation, check a configuration, generate dashboards
and alert rules."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO, cast

from quotaql import __version__
from quotaql.cli._schema import SDL_SUFFIXES, SchemaSpecError, load_schema
from quotaql.config import Config, load_config, load_cost_config
from quotaql.config.reader import config_errors
from quotaql.cost_analysis import CostLimits, CostModel, analyze, check_model
from quotaql.cost_analysis.analyzer import free_subscription_fields
from quotaql.cost_analysis.model import MODELS, SAFE_LIMITS, ModelName
from quotaql.errors import ConfigError, CostAnalysisError

try:
    import click
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
except ModuleNotFoundError as exc:  # the optional 'cli' extra is not installed
    if (exc.name or "").partition(".")[0] not in {"click", "rich"}:
        raise
    # Raised while the entry point imports `main`: Python prints the message and exits 1.
    raise SystemExit(
        "the quotaql command needs the 'cli' extra: pip install 'quotaql[cli]'"
    ) from None

if TYPE_CHECKING:
    from collections.abc import Iterator

    from graphql import GraphQLSchema

    from quotaql.cost_analysis import CostReport

__all__ = ["SDL_SUFFIXES", "SchemaSpecError", "app", "load_schema", "load_variables", "main"]

DEFAULT_TOP = 15

_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


# --- option callbacks: convert a value or fail as a usage error (exit 2) --------------------


def _schema_option(ctx: click.Context, param: click.Parameter, value: str) -> GraphQLSchema:
    try:
        return load_schema(value)
    except SchemaSpecError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def _optional_schema_option(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> GraphQLSchema | None:
    return None if value is None else _schema_option(ctx, param, value)


def _variables_option(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        return load_variables(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def load_variables(value: str) -> dict[str, Any]:
    """The JSON object in ``value``, or in the file ``@path``.

    Raises:
        ValueError: the file cannot be read, or does not hold a JSON object.
    """
    text, where = value, ""
    if value.startswith("@"):
        path = value[1:]
        where = f"{path}: "
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise ValueError(f"cannot read {path}: {exc}") from exc
    try:
        variables = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}not JSON: {exc}") from exc
    if not isinstance(variables, dict):
        kind = _JSON_KINDS.get(type(variables), type(variables).__name__)
        raise ValueError(f"{where}expected a JSON object, got {kind}")
    return variables


# --- the commands ------------------------------------------------------------------------


class _Group(click.Group):
    """The command group, whose usage errors are one ``error:`` line (exit 2), as every
    other failure of the command is, instead of click's usage text and ``Error:`` line."""

    def main(
        self, args: Any = None, prog_name: str | None = None, *rest: Any, **options: Any
    ) -> Any:
        if not options.pop("standalone_mode", True) or rest:  # a caller handling errors
            return super().main(args, prog_name, *rest, **options)
        try:
            status = super().main(args, prog_name, standalone_mode=False, **options)
        except click.UsageError as error:
            where = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
            click.echo(_one_line(f"error: {error.format_message()}{where}"), err=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            click.echo(_one_line(f"error: {error.format_message()}"), err=True)
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="quotaql")
def app() -> None:
    """Price GraphQL operations by cost, and check cost configuration."""


@app.command("cost")
@click.option(
    "--schema",
    metavar="SPEC",
    required=True,
    callback=_schema_option,
    help="MODULE:ATTR of a GraphQLSchema or strawberry.Schema (or a function returning one),"
    " or an SDL file (.graphql, .graphqls, .gql).",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="quotaql.toml whose [cost] table gives the weights and the limits to enforce.",
)
@click.option(
    "--variables",
    metavar="JSON|@FILE",
    callback=_variables_option,
    help="Variables: a JSON object, or @FILE holding one.",
)
@click.option("--operation", "operation_name", metavar="NAME", help="Operation to price.")
@click.option(
    "--model",
    "model_name",
    type=click.Choice(["apollo", "ibm", "compare"]),
    help="Price with this model instead of the one of --config (apollo by default);"
    " compare prices with both.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=DEFAULT_TOP,
    show_default=True,
    help="Rows in the table of largest contributions (human output).",
)
@click.argument("query_file", metavar="QUERY_FILE|-", type=click.File("r", encoding="utf-8"))
def cost(
    schema: GraphQLSchema,
    config: Path | None,
    variables: dict[str, Any] | None,
    operation_name: str | None,
    model_name: str | None,
    as_json: bool,
    top: int,
    query_file: TextIO,
) -> None:
    """Price the operation in QUERY_FILE (- reads stdin) before it runs.

    Exits 1 when the operation cannot be priced or crosses a limit of --config,
    2 on a usage error (schema, configuration, variables).
    """
    model, limits = _cost_config(config)
    query = _read_query(query_file)
    names: tuple[ModelName, ...] = (model.model,)
    if model_name == "compare":
        names = MODELS
    elif model_name is not None:
        names = (cast("ModelName", model_name),)
    reports = []
    try:
        for name in names:
            priced_by = dataclasses.replace(model, model=name)
            reports.append(analyze(schema, query, variables, operation_name, priced_by, limits))
    except CostAnalysisError as error:
        _analysis_failed(error, query_file.name, as_json)
    except ConfigError as error:  # the model names a coordinate the schema does not have
        _fail(f"error: {error}", 2)
    if as_json:
        if len(reports) == 1:
            click.echo(json.dumps(_report_json(reports[0]), indent=2))
        else:
            both = {report.model: _report_json(report) for report in reports}
            click.echo(json.dumps(both, indent=2))
        return
    for index, report in enumerate(reports):
        if index:
            click.echo()
        _print_report(report, top)


@app.command("check-config")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--schema",
    metavar="SPEC",
    callback=_optional_schema_option,
    help="Also check that each weight names a coordinate of this schema: as for"
    " `quotaql cost` (it imports MODULE:ATTR; an SDL file imports nothing).",
)
def check_config(config: Path, schema: GraphQLSchema | None) -> None:
    """Check CONFIG (quotaql.toml): every error at once, each with its line and key.

    Without --schema, every check that needs no schema; with it, also that each weight
    names a coordinate of the schema, and each [tiers.<t>.fields] entry a root field.
    Exits 1 on any error.
    """
    errors = config_errors(config)
    if not errors and schema is not None:
        whole = load_config(config)
        errors = _coordinate_errors(schema, whole.cost.model) + _root_field_errors(schema, whole)
        errors.sort(key=lambda error: error.line or 0)
    if errors:
        _fail_all(errors)
    cost_config = load_cost_config(config)
    if schema is not None:  # what is no error, but prices something at nothing
        minimum = load_config(config).limits.min_charge
        for coordinate in free_subscription_fields(schema, cost_config.model):
            click.echo(
                f"warning: the events of {coordinate} price at 0 points (a scalar without a"
                f" weight): each pays only [limits] min_charge ({minimum:g}); give it a"
                f' weight ([cost.weights] "{coordinate}" = 1)',
                err=True,
            )
    weights = len(cost_config.model.weights)
    click.echo(
        f"OK: {config}: {weights} weight{'' if weights == 1 else 's'},"
        f" limits: {_describe_limits(cost_config.limits)}"
    )


@app.command("dashboards")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dashboards"),
    show_default=True,
    help="Directory to write the Grafana dashboard JSON files into.",
)
def dashboards(out_dir: Path) -> None:
    """Generate the Grafana dashboards (quotaql-overview.json, quotaql-tenant.json)."""
    from quotaql.observability.dashboards import write_dashboards  # noqa: PLC0415

    try:
        written = write_dashboards(out_dir)
    except OSError as error:
        _cannot_write(out_dir, error)
    for path in written:
        click.echo(f"wrote {path}")


@app.command("alerts")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("alerts"),
    show_default=True,
    help="Directory to write quotaql.rules.yml into.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="quotaql.toml whose [alerts] table sets the thresholds (default: the defaults).",
)
def alerts(out_dir: Path, config_path: Path | None) -> None:
    """Generate the Prometheus alert rules (quotaql.rules.yml)."""
    from quotaql.config import AlertsConfig  # noqa: PLC0415
    from quotaql.observability.alerts import write_alerts  # noqa: PLC0415

    try:
        thresholds = load_config(config_path).alerts if config_path else AlertsConfig()
    except ConfigError as error:  # every error of the file, as check-config lists them
        _fail_all(config_errors(config_path) if config_path else [error], 1)
    try:
        written = write_alerts(out_dir, thresholds)
    except OSError as error:
        _cannot_write(out_dir, error)
    click.echo(f"wrote {written}")


@app.command("tune")
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The quotaql.toml the servers run: the diff is of this file.",
)
@click.option(
    "--metrics",
    "dumps",
    multiple=True,
    metavar="FILE",
    help="A /metrics dump (Prometheus text format; several workers' dumps may be"
    " concatenated; - reads stdin). Repeat for several files.",
)
@click.option(
    "--prometheus",
    "prometheus_url",
    metavar="URL",
    help="A Prometheus server (http://host:9090) to read the metrics from, summed over"
    " every instance and worker.",
)
@click.option(
    "--selector",
    default="",
    metavar="MATCHERS",
    help='With --prometheus: label matchers for every query, e.g. job="api".',
)
@click.option(
    "--window",
    metavar="DURATION",
    help="With --prometheus: count over this range (increase(), e.g. 7d). Default: the"
    " totals since each server process started.",
)
@click.option(
    "--quantile",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=0.99,
    show_default=True,
    help="A proposed size holds at least this share of a field's lists.",
)
@click.option(
    "--min-lists",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="The fewest lists of a field that support a change.",
)
@click.option(
    "--over-factor",
    type=click.FloatRange(min=1),
    default=2.0,
    show_default=True,
    help="Lower a size only when it is more than this many times what the lists need.",
)
@click.option(
    "--max-decrease",
    type=click.FloatRange(min=1, max=1e9),
    default=2.0,
    show_default=True,
    help="Lower a size to no less than itself divided by this (without --allow-decrease).",
)
@click.option(
    "--allow-decrease",
    is_flag=True,
    help="Lower a size as far as the evidence supports, past --max-decrease.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, max=600, min_open=True),
    default=10.0,
    show_default=True,
    help="With --prometheus: seconds to wait for all the answers.",
)
@click.option("--write", is_flag=True, help="Apply the changes to --config (atomically).")
def tune(
    config_path: Path,
    dumps: tuple[str, ...],
    prometheus_url: str | None,
    selector: str,
    window: str | None,
    quantile: float,
    min_lists: int,
    over_factor: float,
    max_decrease: float,
    allow_decrease: bool,
    timeout: float,
    write: bool,
) -> None:
    """Propose list sizes (assumed_size, default_list_size) from the servers' tuning metrics.

    Prints the evidence as # comment lines, then a unified diff of --config.
    Exits 2 on unusable input (a file, a URL, the configuration), naming it.
    """
    from quotaql import tune as tuning  # noqa: PLC0415

    if bool(dumps) == bool(prometheus_url):
        raise click.UsageError("give either --metrics FILE (one or more) or --prometheus URL")
    if not prometheus_url and (window or selector):
        raise click.UsageError("--window and --selector go with --prometheus")
    if window is not None and not tuning.DURATION.fullmatch(window):
        raise click.BadParameter(
            f"{window!r} is not a Prometheus duration (7d, 12h, 1h30m)", param_hint="--window"
        )
    if "{" in selector or "}" in selector:
        raise click.BadParameter(
            'give the matchers without braces: job="api",env="prod"', param_hint="--selector"
        )
    options = tuning.Options(
        quantile=quantile,
        min_lists=min_lists,
        over_factor=over_factor,
        max_decrease=max_decrease,
        allow_decrease=allow_decrease,
    )
    try:
        if prometheus_url:
            evidence = tuning.read_prometheus(
                prometheus_url, selector=selector, window=window, timeout=timeout
            )
        else:
            evidence = tuning.read_dumps(dumps)
        report, proposal = tuning.tune(config_path, evidence, options, write=write)
    except tuning.TuneError as error:
        _fail(f"error: {error}", 2)
    click.echo(report, nl=False)
    if write and proposal.changes:
        click.echo(f"wrote {config_path}", err=True)


@app.command("demo")
@click.option("--port", default=8000, show_default=True, help="Port to serve on (0: any free one).")
@click.option(
    "--duration",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=1, max=600),
    help="Seconds of scripted traffic.",
)
@click.option("--redis", "redis_url", metavar="URL", help="Keep budgets in Redis (redis://...).")
@click.option(
    "--serve/--no-serve",
    default=True,
    help="Keep serving after the scripted traffic (--no-serve: exit, for scripts and tests).",
)
def demo(port: int, duration: float, redis_url: str | None, serve: bool) -> None:
    """Run the example shop API protected by quotaql, with three scripted tenants."""
    with _demo_extra("demo"):
        from quotaql.demo.run import Demo  # noqa: PLC0415
    if redis_url is not None:
        with _demo_extra("demo"):
            _check_redis_url(redis_url)
    try:
        runner = Demo(port=port, duration=duration, redis_url=redis_url)
    except OSError as error:
        _fail(f"error: cannot listen on 127.0.0.1:{port}: {error.strerror or error}", 1)
    runner.run(serve=serve)


@app.command("loadgen")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="Server root.")
@click.option(
    "--tenants",
    default="demo-polite,demo-integration,demo-scraper",
    show_default=True,
    help="Comma-separated API keys (X-API-Key), one set of workers each.",
)
@click.option(
    "--duration",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0.1, max=3600),
    help="Seconds of load.",
)
@click.option(
    "--concurrency",
    default=2,
    show_default=True,
    type=click.IntRange(min=1, max=64),
    help="Requests in flight per tenant.",
)
@click.option(
    "--max-requests",
    default=100_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Stop after this many requests.",
)
def loadgen(url: str, tenants: str, duration: float, concurrency: int, max_requests: int) -> None:
    """Send the demo shop's queries to URL from several tenants, with a progress bar."""
    with _demo_extra("loadgen"):
        from quotaql.demo.loadgen import run_load  # noqa: PLC0415

    names = [name.strip() for name in tenants.split(",") if name.strip()]
    if not names:
        _fail("error: --tenants names no tenant", 2)
    result = run_load(
        url.rstrip("/"),
        names,
        duration=duration,
        concurrency=concurrency,
        max_requests=max_requests,
    )
    if not any(code for counts in result.statuses.values() for code in counts):
        _fail(f"error: no answer from {url}", 1)


from quotaql.cli.report import report as _report  # noqa: E402  (click is there: checked above)

app.add_command(_report)  # quotaql report: the review before enforcing (issue 25)


def main() -> None:
    """Run the ``quotaql`` command (the console-script entry point)."""
    app(prog_name="quotaql")


# --- helpers of the commands -------------------------------------------------------------


#: Control characters as escapes: a file name or value holding a newline (or a terminal
#: escape) cannot split an error line in two, or recolour the terminal.
_CONTROL: Final = {code: f"\\x{code:02x}" for code in (*range(32), 127)} | {10: "\\n"}


def _one_line(text: str) -> str:
    return text.translate(_CONTROL)


def _fail(message: str, exit_code: int) -> NoReturn:
    click.echo(_one_line(message), err=True)
    raise click.exceptions.Exit(exit_code)


#: At most this many errors of a file are printed (a file of a million wrong keys would
#: otherwise print a million lines); a last line says how many more there are.
MAX_ERRORS_SHOWN = 50


def _fail_all(errors: list[ConfigError], exit_code: int = 1) -> NoReturn:
    """Print each error as one ``error:`` line; exit ``exit_code``."""
    for error in errors[:MAX_ERRORS_SHOWN]:
        click.echo(_one_line(f"error: {error}"), err=True)
    hidden = len(errors) - MAX_ERRORS_SHOWN
    if hidden > 0:
        click.echo(f"error: {hidden} more error{'' if hidden == 1 else 's'} not shown", err=True)
    raise click.exceptions.Exit(exit_code)


def _coordinate_errors(schema: GraphQLSchema, model: CostModel) -> list[ConfigError]:
    """Each weight of ``model`` that does not fit ``schema``: the model is checked whole,
    then, if that fails, weight by weight, so that every wrong coordinate is named."""
    try:
        check_model(schema, model)
    except ConfigError as whole:
        errors = []
        for coordinate, weight in model.weights.items():
            try:
                check_model(schema, dataclasses.replace(model, weights={coordinate: weight}))
            except ConfigError as error:
                errors.append(error)
        return errors or [whole]
    return []


def _root_field_errors(schema: GraphQLSchema, config: Config) -> list[ConfigError]:
    """Each ``[tiers.<t>.fields]`` coordinate of ``config`` that is not a root field of
    ``schema``: checked whole, then (if that fails) one coordinate at a time."""
    from quotaql.gate.charges import check_fields  # noqa: PLC0415

    try:
        check_fields(config, schema)
    except ConfigError as whole:
        errors = []
        bare = {
            name: dataclasses.replace(tier, fields={}, fields_in_flight={})
            for name, tier in config.tiers.items()
        }
        for name, tier in config.tiers.items():
            for coordinate in {**tier.fields, **tier.fields_in_flight}:
                one = dataclasses.replace(
                    tier,
                    fields={k: v for k, v in tier.fields.items() if k == coordinate},
                    fields_in_flight={
                        k: v for k, v in tier.fields_in_flight.items() if k == coordinate
                    },
                )
                try:
                    check_fields(dataclasses.replace(config, tiers={**bare, name: one}), schema)
                except ConfigError as error:
                    errors.append(error)
        return errors or [whole]
    return []


def _cannot_write(out_dir: Path, error: OSError) -> NoReturn:
    where = error.filename if isinstance(error.filename, str) else out_dir
    _fail(f"error: cannot write {where}: {error.strerror or error}", 1)


@contextlib.contextmanager
def _demo_extra(command: str) -> Iterator[None]:
    """Turn a missing package of the ``demo`` extra into one ``error:`` line."""
    try:
        yield
    except ModuleNotFoundError as error:
        package = (error.name or "?").partition(".")[0]
        _fail(
            f"error: quotaql {command} needs the 'demo' extra (no module named"
            f" {package!r}): pip install 'quotaql[demo]'",
            1,
        )


def _check_redis_url(url: str) -> None:
    """A usage error (exit 2) unless ``url`` is a Redis URL that redis-py accepts."""
    from redis.connection import parse_url  # noqa: PLC0415

    try:
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as error:
        _fail(f"error: --redis {url!r} is not a Redis URL: {error}", 2)


def _cost_config(path: Path | None) -> tuple[CostModel, CostLimits | None]:
    if path is None:
        return CostModel(), None
    try:
        config = load_cost_config(path)
    except ConfigError as error:  # every error of the file, as check-config lists them
        _fail_all(config_errors(path) or [error], 2)
    return config.model, config.limits


def _read_query(stream: TextIO) -> str:
    try:
        return stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"error: cannot read {stream.name}: {exc}", 2)


def _analysis_failed(error: CostAnalysisError, source: str, as_json: bool) -> NoReturn:
    if as_json:
        click.echo(json.dumps({"error": _error_json(error)}, indent=2))
    else:
        click.echo(f"error [{error.code}]: {error.message}", err=True)
        for line, column in error.locations:
            click.echo(f"  --> {source}:{line}:{column}", err=True)
    raise click.exceptions.Exit(1)


# --- rendering ---------------------------------------------------------------------------


def _report_json(report: CostReport) -> dict[str, Any]:
    """The ``--json`` form of a report (camelCase keys, as GraphQL extensions use)."""
    return {
        "cost": _plain(report.cost),
        "model": report.model,
        "fieldCost": _plain(report.field_cost),
        "typeCost": None if report.type_cost is None else _plain(report.type_cost),
        "depth": report.depth,
        "aliases": report.aliases,
        "rootFields": report.root_fields,
        "operationType": report.operation_type,
        "operationName": report.operation_name,
        "byCoordinate": {name: _plain(value) for name, value in report.by_coordinate.items()},
    }


def _error_json(error: CostAnalysisError) -> dict[str, Any]:
    """The ``--json`` form of an error: a GraphQL error's fields with its extensions inlined."""
    body: dict[str, Any] = {
        "code": error.code,
        "message": error.message,
        "locations": [{"line": line, "column": column} for line, column in error.locations],
    }
    for key, value in error.extensions.items():
        body.setdefault(key, _plain(value))
    return body


def _describe_limits(limits: CostLimits) -> str:
    """What differs from the safe defaults: ``max_cost=1000, max_depth=12, the rest safe
    defaults``, ``max_depth=off, ...``, or ``the safe defaults``."""
    shown = [
        f"{field.name}={'off' if value is None else _number(value)}"
        for field in dataclasses.fields(limits)
        if (value := getattr(limits, field.name)) != getattr(SAFE_LIMITS, field.name)
    ]
    return ", ".join([*shown, "the rest safe defaults"]) if shown else "the safe defaults"


def _print_report(report: CostReport, top: int) -> None:
    console = Console(highlight=False)
    console.print(_summary(report))
    contributions = report.by_coordinate
    if top and contributions:
        console.print()
        console.print(_contributions(contributions, report.cost, top))


def _summary(report: CostReport) -> Text:
    rows = (
        ("Operation", f"{report.operation_type} {report.operation_name or '(anonymous)'}"),
        ("Model", report.model),
        ("Cost", _number(report.cost)),
        *(
            (("Field cost", _number(report.field_cost)), ("Type cost", _number(report.type_cost)))
            if report.type_cost is not None
            else ()
        ),
        ("Depth", str(report.depth)),
        ("Aliases", str(report.aliases)),
        ("Root fields", str(report.root_fields)),
    )
    return Text("\n").join(Text.assemble((f"{label:<13}", "bold"), value) for label, value in rows)


def _contributions(contributions: dict[str, float], total: float, top: int) -> Table:
    hidden = len(contributions) - top
    table = Table(
        title="Largest contributions",
        title_justify="left",
        caption=f"{hidden} more not shown (--top)" if hidden > 0 else None,
        caption_justify="left",
    )
    table.add_column("Coordinate")
    table.add_column("Cost", justify="right")
    table.add_column("Share", justify="right")
    for coordinate, value in list(contributions.items())[:top]:
        table.add_row(coordinate, _number(value), _share(value, total))
    return table


def _share(value: float, total: float) -> str:
    return f"{100 * value / total:.1f}%" if total > 0 else "-"


def _number(value: float) -> str:
    """``18``, ``2.5``: no spurious ``.0`` for whole numbers."""
    plain = _plain(value)
    return f"{plain:.10g}" if isinstance(plain, float) else str(plain)


def _plain(value: Any) -> Any:
    """A float as JSON has it: whole as an int (``18``, not ``18.0``)."""
    if not isinstance(value, float):
        return value
    return int(value) if value.is_integer() and abs(value) < 2**53 else value
