"""The command-line interface: the only layer that prints, draws progress and picks exit codes.

Exit codes: 0 success / gate passed, 1 gate failed, 2 usage error, 3 input or runtime error.
Each command module holds its commands as plain functions; the app is built here, every command
registered once, so `from macs_audit.cli import app` always has them all. Command modules import
only the shared cli.console, cli.options and cli.output, and torch only inside a command.
"""

import typer

from macs_audit.cli import calibrate, console, corrupt, evaluate, export, finetune, reports

app = typer.Typer(
    name="macs-audit",
    help="Audit image classifiers for calibration and robustness, and fix them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.callback()(console.root)
for command in (
    corrupt.corrupt,
    evaluate.evaluate,
    finetune.finetune,
    calibrate.calibrate,
    export.export,
    reports.gate,
    reports.report,
    reports.compare,
):
    app.command()(command)


def main() -> None:
    app()


__all__ = ["app", "main"]
