"""The command-line interface: the only layer that prints, draws progress and picks exit codes.

Exit codes: 0 success / gate passed, 1 gate failed, 2 usage error, 3 input or runtime error.
Help is click's plain layout (rich_markup_mode=None): it never cuts option names at 80 columns, keeps
[brackets] such as [tool.macs-audit.gate] as written, and shows no type for flags.
Each command module holds its commands as plain functions; the app is built here, every command
registered once, so `from macs_audit.cli import app` always has them all. Command modules import
only the shared cli.console, cli.progress, cli.options and cli.output, and torch only inside a command.
"""

import inspect
import pathlib
import typing

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
# The placeholder of a value in --help, by its type, where the option names none itself: words a user types
# (PATH, N), not typer's type labels (<list[str]>, <int range>, {model}).
METAVARS = {pathlib.Path: "PATH", int: "N", float: "F", str: "TEXT"}


def _value_type(annotation: object) -> object:
    """The type of one value: Optional[X] and list[X] give X."""
    for _ in range(2):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (typing.Union, list, tuple) and len(args) == 1:
            annotation = args[0]
    return annotation


def name_placeholders(command: typing.Callable) -> typing.Callable:
    """Give each argument its name (MODEL) and each option that takes a value its kind (PATH, N, F, TEXT) as
    the placeholder --help shows, where the command names none itself; and each option its help panel
    (cli/panels.py)."""
    hints = typing.get_type_hints(command)
    parameters = inspect.signature(command).parameters
    panels.assign_panels(command.__name__, {name: p.default for name, p in parameters.items()})
    for name, parameter in parameters.items():
        info = parameter.default
        if isinstance(info, typer.models.ArgumentInfo) and info.metavar is None:
            info.metavar = name.upper()
        elif isinstance(info, typer.models.OptionInfo) and info.metavar is None:
            kind = _value_type(hints.get(name))
            if kind is not bool and kind in METAVARS:
                info.metavar = METAVARS[kind]  # type: ignore[index]
    return command


app.callback()(console.root)
# Each command with the one line `macs-audit --help` lists it by (click would cut its docstring's first sentence).
for command, summary in (
    (corrupt.corrupt, "Write the 19 corruptions of a data set as released: CIFAR-C .npy files or an image tree."),
    (evaluate.evaluate, "Audit a model: calibration, robustness and the CIFAR-C grid."),
    (finetune.finetune, "Fine-tune a PyTorch model (MaCS or a baseline), audited before and after."),
    (calibrate.calibrate, "Fit a post-hoc calibrator and write the calibrated model, audited before and after."),
    (export.export, "Export a PyTorch checkpoint to one ONNX file with the metadata evaluate reads."),
    (init.init, "Write starting gate thresholds from a saved report."),
    (gate.gate, "Check a saved report against thresholds: exit 0 if it passes, 1 if not."),
    (report.report, f"Re-render a saved report: {or_list(FORMATS)}."),
    (compare.compare, "Compare two saved reports; regressions are marked."),
):
    app.command(short_help=summary, cls=panels.PanelledCommand)(name_placeholders(command))


__all__ = ["app"]
