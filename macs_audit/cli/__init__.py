"""The command-line interface: the only layer that prints, draws progress and picks exit codes.

Exit codes: 0 success / gate passed, 1 gate failed, 2 usage error, 3 input or runtime error, 4 integration
error (--mlflow: the outputs are written, logging them failed).
Help is click's plain layout (rich_markup_mode=None): it never cuts option names at 80 columns, keeps
[brackets] such as [tool.macs-audit.gate] as written, and shows no type for flags.
Each command module holds its commands as plain functions; the app is built here, every command
registered once, so `from macs_audit.cli import app` always has them all. Command modules import
only the shared cli.console, cli.progress, cli.parameters and cli.output, and torch only inside a command.
Each command's parameters, their placeholders and help panels come from the options table (cli/parameters.py).
"""

import typer

from macs_audit.cli import (
    calibrate,
    compare,
    console,
    corrupt,
    evaluate,
    export,
    finetune,
    gate,
    init,
    panels,
    report,
)
from macs_audit.formats import FORMATS
from macs_audit.text import or_list

app = typer.Typer(
    name="macs-audit",
    help="Audit image classifiers for calibration and robustness, and fix them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.callback()(console.root)
# Each command with the one line `macs-audit --help` lists it by (click would cut its docstring's first sentence).
for command, summary in (
    (corrupt.corrupt, "Write the 19 corruptions of a data set as released: CIFAR-C .npy files or an image tree."),
    (evaluate.evaluate, "Audit a model: calibration, robustness and the corruption grid."),
    (finetune.finetune, "Fine-tune a PyTorch model (MaCS or a baseline), audited before and after."),
    (calibrate.calibrate, "Fit a post-hoc calibrator and write the calibrated model, audited before and after."),
    (export.export, "Export a PyTorch checkpoint to one ONNX file with the metadata evaluate reads."),
    (init.init, "Write a starting spec from a saved report: the audit it ran, gate thresholds."),
    (gate.gate, "Check a saved report against thresholds: exit 0 if it passes, 1 if not."),
    (report.report, f"Re-render a saved report: {or_list(FORMATS)}."),
    (compare.compare, "Compare two saved reports; regressions are marked."),
):
    app.command(short_help=summary, cls=panels.PanelledCommand)(command)


__all__ = ["app"]
