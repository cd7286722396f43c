"""Where a command's rendered formats go (files, written atomically, or stdout) and the gate's verdict:
shared by `evaluate --gate`, `gate`, `report` and `compare`.

Output (the options are declared in settings/table.py): `--format` (repeatable) picks a format of formats.FORMATS;
without `--output` every format goes to stdout; with `--output` (repeatable) the i-th output file gets the i-th
format, or the format its extension names (formats.EXTENSIONS) when no --format is given. `-o -` (or
/dev/stdout) is standard output; a stream without an extension gets the command's default format.
Every output is checked (macs_audit.outputs) before any report is read. What a run wrote is then logged to MLflow
where --mlflow asks (`log_to_mlflow`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import typer

from macs_audit.atomic import destination
from macs_audit.cli.console import note, stderr, stdout, warn
from macs_audit.errors import UsageError
from macs_audit.formats import EXTENSIONS, FORMATS, GATE_FORMATS, canonical
from macs_audit.outputs import check_distinct, check_file
from macs_audit.text import printable

if TYPE_CHECKING:
    from rich.console import Console

    from macs_audit.gating import ConfiguredGate, GateResult
    from macs_audit.integrations.mlflow import RunRecord, Tracking
    from macs_audit.report import Report


def report_targets(
    formats: list[str] | None, outputs: list[Path] | None, inputs: Iterable[Any] = ()
) -> list[tuple[str, Path | None]]:
    """Where `evaluate` writes its report (resolve_outputs): each --output in its format (JSON where neither
    --format nor its extension names one), each --format without --output to stdout; [] when neither is
    given (the tables alone). JUnit and the pull-request comment list gate checks, which `gate` writes: a usage
    error here."""
    if not formats and not outputs:
        return []
    targets = resolve_outputs(formats, outputs, "json", inputs, fallback="json")
    for name, _ in targets:
        if name in GATE_FORMATS:
            what, then = ("JUnit output", "-o checks.xml") if name == "junit" else (name, f"--format {name} -o FILE")
            raise UsageError(
                f"{what} lists gate checks: write the JSON report (-o report.json), then "
                f"`macs-audit gate report.json {then}`"
            )
    return targets


def resolve_outputs(
    formats: list[str] | None,
    outputs: list[Path] | None,
    default: str = "terminal",
    inputs: Iterable[Any] = (),
    fallback: str | None = None,
) -> list[tuple[str, Path | None]]:
    """[(format, path or None for stdout)], validated before any work is done: formats known, and every
    output file writable, not a directory and not one of `inputs` (macs_audit.inputs). `fallback`: the format
    of a file whose extension names none (None: a usage error)."""
    targets = _pair_outputs(formats, outputs, default, fallback)
    check_distinct(("--output", path) for _, path in targets)
    inputs = tuple(inputs)
    for _, path in targets:
        if path is not None:
            check_file(path, inputs=inputs)
    return [(name, None if path is not None and destination(path).fd == 1 else path) for name, path in targets]


def _pair_outputs(
    formats: list[str] | None, outputs: list[Path] | None, default: str, fallback: str | None = None
) -> list[tuple[str, Path | None]]:
    names = []
    for name in formats or []:
        name = canonical(name)
        if name not in FORMATS:
            raise UsageError(f"unknown --format {name!r}; choose from {', '.join(FORMATS)}")
        names.append(name)
    outputs = list(outputs or [])
    if not outputs:
        return [(name, None) for name in (names or [default])]
    if not names:
        for path in outputs:
            if path.suffix.lower() not in EXTENSIONS and not destination(path).is_stream and fallback is None:
                raise UsageError(f"cannot tell the format of --output {path} from its extension; add --format")
        return [
            (EXTENSIONS.get(path.suffix.lower(), default if destination(path).is_stream else fallback or default), path)
            for path in outputs
        ]
    if len(names) != len(outputs):
        raise UsageError(
            f"{len(names)} --format but {len(outputs)} --output; give one --output per --format "
            "(or only --output, with extensions naming the formats)"
        )
    return list(zip(names, outputs, strict=True))


def emit(
    targets: list[tuple[str, Path | None]],
    render: Callable[[str], Any],
    console: Console | None = None,
    quiet: bool = False,
) -> None:
    """Render each target's format, then send each to its file or to stdout (the terminal format to `console`,
    default stdout: `evaluate -o -` keeps its stdout for the JSON report), saying where each file went
    unless `quiet`. Every format is rendered before anything is written: a format that refuses (JUnit without
    gate results, a model card of a comparison) leaves no output half-written."""
    from macs_audit.atomic import write_text
    from macs_audit.formats import terminal

    rendered = [(name, path, render(name)) for name, path in targets]
    for name, path, content in rendered:
        if path is None:
            if name == "terminal":
                (console or stdout).print(content, crop=False)  # lines kept whole (commands) are not cut
            else:
                typer.echo(content, nl=not str(content).endswith("\n"))
        else:
            write_text(path, terminal.to_text(content) if name == "terminal" else str(content))
            if not quiet:
                note(f"{name} written to {destination(path).describe()}")


def append_step_summary(markdown_text: str) -> bool:
    """GitHub Actions shows $GITHUB_STEP_SUMMARY on the run page; several steps may append to it.

    The summary is a courtesy: a failed append is a warning on stderr, never a failed command (the
    verdict and its exit code are already decided). Returns whether it was appended."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown_text.rstrip("\n") + "\n\n")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        warn(
            f"cannot append to $GITHUB_STEP_SUMMARY ({path}): {reason}; "
            "the summary is missing from the run page, the result stands"
        )
        return False
    return True


def render_report(name: str, report: Report, gate: GateResult | None, terminal_gate_only: bool = False) -> Any:
    """One format of a report (with gate results if given): rich renderables for the terminal, else text."""
    from macs_audit import formats
    from macs_audit.formats import terminal

    if name == "terminal":
        return (
            terminal.gate_table(gate) if terminal_gate_only and gate is not None else terminal.renderable(report, gate)
        )
    return formats.render(name, report, gate)


def gate_report(
    report: Report,
    gate: ConfiguredGate,
    use_interval: bool | None = None,
    targets: list[tuple[str, Path | None]] | None = None,
    step_summary: bool = True,
    console: Console | None = None,
    quiet: bool = False,
    result: GateResult | None = None,
) -> int:
    """Gate `report`, write the requested formats, print the verdict; return the exit code (0 or 1). `result`: the
    gate's result where the caller ran it already (`evaluate --mlflow` logs it too).

    `gate`: the thresholds and baseline, loaded before the report was read or made (ConfiguredGate.load;
    `evaluate --gate` loads them before the audit runs). `targets`: where each format goes (`resolve_outputs`,
    checked before the report was read or made; None: the terminal's gate table). Raises MacsAuditError (exit 2
    or 3) for bad inputs. The terminal format shows the gate table only (`quiet`: not on the console, the verdict
    alone). The verdict is printed before the step summary is appended, whose failure is only a warning.
    """
    from macs_audit.formats import markdown, tables

    targets = resolve_outputs(None, None) if targets is None else targets
    result = gate.run(report, use_interval) if result is None else result
    for message in result.notes:  # deprecated keys of the config and the baseline report
        warn(message)
    if quiet:
        targets = [(name, path) for name, path in targets if path is not None or name != "terminal"]
    emit(targets, lambda name: render_report(name, report, result, terminal_gate_only=True), console, quiet=quiet)
    stderr.print(
        tables.gate_verdict(result),
        style="bold green" if result.passed else "bold red",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if step_summary and os.environ.get("GITHUB_STEP_SUMMARY"):
        append_step_summary(markdown.render(report, result))
    return 0 if result.passed else 1


def log_to_mlflow(tracking: Tracking | None, record: RunRecord, *, quiet: bool = False, exit_code: int = 0) -> None:
    """Log the run to MLflow (integrations/mlflow.py) after its outputs are written, and say where (`quiet`: not);
    nothing without --mlflow (`tracking` None). A failure is the IntegrationError's one line and exit 4, or
    `exit_code` where the run has another answer already: a failed gate's 1 is the verdict a CI job acts on."""
    if tracking is None:
        return
    from macs_audit.errors import IntegrationError
    from macs_audit.integrations.mlflow import log_run

    try:
        logged = log_run(tracking, record)
    except IntegrationError as exc:
        exc.exit_code = exit_code or exc.exit_code
        raise
    if not quiet:
        note(logged.describe())


def print_calibrators(selection: dict) -> None:
    """`calibrate --method all`'s table: each method's held-out scores, the chosen one starred."""
    from macs_audit.formats import terminal
    from macs_audit.report import Calibrators

    stdout.print(terminal.calibrator_comparison_table(Calibrators.from_dict(selection)))


def print_before_after(
    title: str, comparison, fixes: tuple[list[str], list[list[str]]] | None = None, which: str | None = None
) -> None:
    """The before/after audit of finetune and calibrate: its title, the fixes side by side (finetune's
    `fixes_table`: header and rows, a column per fix), which fix won (`which`, before_after.which_fix's words),
    then the compare command's terminal table."""
    from rich.table import Table
    from rich.text import Text

    from macs_audit.formats import terminal

    stdout.print(Text(printable(title), style="bold"))
    if fixes is not None:
        header, rows = fixes
        table = Table(title="Which fix", title_justify="left")
        for i, name in enumerate(header):
            table.add_column(Text(printable(name)), justify="left" if i == 0 else "right", no_wrap=i == 0)
        for row in rows:  # names wrap, values fit
            table.add_row(*(Text(printable(cell)) for cell in row))
        stdout.print(table)
    if which is not None:
        stdout.print(Text(printable(f"which fix: {which}"), style="bold"))
    stdout.print(terminal.comparison_table(comparison))
