"""`macs-audit evaluate [MODEL]`: audit a model's calibration and robustness, optionally gate the report. Parse,
build, run, write: the options come from the table (settings/table.py) through the flags and the spec, the plan
and the audit are the core's (macs_audit/plan.py), and this module writes what the run made."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from macs_audit.cli.console import handle_errors, note, state, stderr, stdout, warn, warn_about_model
from macs_audit.cli.output import emit, log_to_mlflow, render_report, report_targets
from macs_audit.cli.parameters import given_values, takes_options
from macs_audit.cli.progress import Progress, show_progress
from macs_audit.progress import Stage, step

REPORT_STAGE = Stage("report", "")


@dataclasses.dataclass(frozen=True)
class Writing:
    """Where the run's outputs go, checked before the model loads: the report's formats and files, the
    predictions file, and what the console shows (`brief`: the verdict line alone)."""

    targets: list[tuple[str, Path | None]]
    predictions: Path | None
    console: Any
    brief: bool

    @classmethod
    def check(cls, values: dict[str, Any], inputs: tuple[Path | None, ...]) -> Writing:
        from macs_audit.atomic import destination
        from macs_audit.errors import UsageError
        from macs_audit.outputs import check_distinct, check_file

        outputs, predictions = values["output"], values["save_predictions"]
        targets = report_targets(values["format"], outputs, inputs)  # a bad --format fails before the model loads
        check_distinct([*(("--output", path) for path in outputs or []), ("--save-predictions", predictions)])
        if predictions is not None:
            check_file(predictions, inputs=inputs, option="--save-predictions")
        # A format on standard output keeps it for that document: the tables go to stderr.
        to_stdout = any(path is None and name != "terminal" for name, path in targets)
        if to_stdout and predictions is not None and destination(predictions).fd == 1:
            raise UsageError("--output and --save-predictions cannot both go to standard output")
        targets = [(name, path) for name, path in targets if path is not None or name != "terminal"]
        brief = values["quiet"] and bool(outputs)  # --quiet with the report going to --output: the verdict alone
        return cls(targets, predictions, stderr if to_stdout else stdout, brief)

    def write(self, result: Any, gated: bool) -> Any:
        """Write the report and predictions; return the tables to print (None: nothing)."""
        from macs_audit.formats import terminal

        if self.predictions is not None:
            from macs_audit.predictions.files import write_predictions

            write_predictions(self.predictions, result)
        emit(self.targets, lambda name: render_report(name, result.report, None), self.console, quiet=True)
        if self.brief:  # the verdict line alone: the gate's where one runs
            return None if gated else terminal.verdict_line(result.report)
        return terminal.renderable(result.report, verdict=not gated)  # else the gate's ends it

    def files(self) -> list[Path]:
        """The files the run writes (its streams left out): what --mlflow logs as they are."""
        from macs_audit.atomic import destination

        paths = [path for _, path in self.targets] + [self.predictions]
        return [path for path in paths if path is not None and destination(path).file is not None]

    def notes(self, report: Any) -> None:
        from macs_audit.atomic import destination

        if self.brief:
            return
        if self.predictions is not None:
            note(f"predictions written to {destination(self.predictions).describe()}")
        for name, path in self.targets:
            note(f"{name} report written to {destination(path or '-').describe()}")
        summary = report.corruption_summary
        if summary is not None and summary.corruption_set:
            size = "x".join(map(str, summary.image_size or []))
            choice = summary.corruption_set_choice
            note(f"corruption parameters: {summary.corruption_set} set on {size} images ({choice})")


def _gate(resolved: Any) -> Any:
    """The gate to run after the audit (--gate or the spec's gate = true, or a --baseline given), loaded now: a bad
    config fails before the audit."""
    if not (resolved["gate"] or resolved["baseline"] is not None):
        return None
    from macs_audit.gating import ConfiguredGate

    return ConfiguredGate.load(resolved["config"], resolved["baseline"])


@handle_errors
@takes_options("evaluate")
def evaluate(**values: Any) -> None:
    """Audit MODEL's calibration and robustness: accuracy, ECE, NLL, Brier, margins with bootstrap
    intervals; temperature scaling; robust accuracy and input sensitivity; the CIFAR-C grid; selective
    prediction and conformal sets; with --ood-data, OOD detection; with --unlabeled, accuracy without labels.
    Options not given come from the spec (its evaluate table; see --config), then --preset."""
    from macs_audit import distributed
    from macs_audit.formats.summary import parse_bars
    from macs_audit.integrations.mlflow import Tracking
    from macs_audit.plan import load_audit, plan_audit, run_planned
    from macs_audit.settings.resolve import resolve

    resolved = resolve("evaluate", *given_values(values))
    if resolved["predictions"] is not None:  # no model: saved predictions (macs_audit/predictions)
        return _evaluate_predictions(resolved)
    plan = plan_audit(resolved)  # every option checked, nothing loaded
    gate = _gate(resolved)
    tracking = Tracking.of(resolved)  # the mlflow extra, before the audit
    bars = parse_bars(resolved["problem_bars"]) if resolved["problem_bars"] is not None else None
    writing = Writing.check(resolved.values, plan.files() + tuple(gate.inputs if gate else ()))
    ctx = distributed.init_from_env(resolved["device"])  # torchrun: one shard of every view per process
    loaded = load_audit(plan, ctx, debug=state["debug"])
    with Progress(show_progress(resolved["quiet"]) and ctx.is_main) as progress:
        result = run_planned(plan, loaded, progress=progress, ctx=ctx, on_warning=warn if ctx.is_main else None)
        distributed.shutdown(ctx)
        if not ctx.is_main:  # every rank holds the same report; rank 0 alone writes and prints
            return
        tables = _write(result, writing, bars, gate, progress)
    _finish(result, resolved, writing, tables, gate, tracking)


def _evaluate_predictions(resolved: Any) -> None:
    """`evaluate --predictions FILE`: the audit of saved predictions (predictions/audit.py), written and gated as a
    model's audit is. Nothing here imports torch."""
    from macs_audit.formats.summary import parse_bars
    from macs_audit.integrations.mlflow import Tracking
    from macs_audit.predictions.audit import plan_predictions, run_predictions

    plan = plan_predictions(resolved)  # the options checked and the files read, nothing written
    gate = _gate(resolved)
    tracking = Tracking.of(resolved)  # the mlflow extra, before the audit
    bars = parse_bars(resolved["problem_bars"]) if resolved["problem_bars"] is not None else None
    writing = Writing.check(resolved.values, plan.files + tuple(gate.inputs if gate else ()))
    if plan.ignored:
        verb = "needs" if len(plan.ignored) == 1 else "need"
        warn(f"the spec's {', '.join(plan.ignored)} {verb} a model: an audit of --predictions leaves it out")
    with Progress(show_progress(resolved["quiet"])) as progress:
        result = run_predictions(plan, progress=progress)
        tables = _write(result, writing, bars, gate, progress)
    _finish(result, resolved, writing, tables, gate, tracking)


def _write(result: Any, writing: Writing, bars: Any, gate: Any, progress: Any) -> Any:
    """The report's outputs written and its tables laid out (a stage of its own); the tables to print."""
    from macs_audit.formats.summary import record_bars

    finish = step(progress, REPORT_STAGE)
    if bars is not None:
        record_bars(result.report, bars)
    tables = writing.write(result, gated=gate is not None)
    finish()
    return tables


def _finish(result: Any, resolved: Any, writing: Writing, tables: Any, gate: Any, tracking: Any) -> None:
    """What follows the written report: the notes, the model's warnings, the tables, the gate's verdict, and the
    run logged to MLflow (--mlflow)."""
    from macs_audit.integrations.mlflow import RunRecord

    writing.notes(result.report)
    warn_about_model(result.report.model.warnings)  # e.g. CIFAR-10's mean/std on a model they do not fit
    if tables is not None:
        # Lines kept whole (a suggested command, the verdict) are not cut; the verdict alone is one line.
        writing.console.print(tables, crop=False, soft_wrap=writing.brief)
    code, gated = 0, None
    if gate is not None:
        from macs_audit.cli.output import gate_report

        gated = gate.run(result.report, resolved["use_interval"])
        code = gate_report(result.report, gate, console=writing.console, quiet=writing.brief, result=gated)
    # The options as the report records them: those that applied (an audit of predictions leaves the model's out).
    record = RunRecord("evaluate", None, result.report, gate=gated, files=writing.files())
    log_to_mlflow(tracking, record, quiet=writing.brief, exit_code=code)
    if gate is not None:
        raise typer.Exit(code)
