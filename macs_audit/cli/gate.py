"""`macs-audit gate REPORT.json`: check a saved report against the thresholds, never reading the model.

It imports neither torch nor onnxruntime (tested). Exit codes: 0 every check passed, 1 one failed, 2 usage
error (the configuration included), 3 input error. The checks: macs_audit.gate; formats, files and the
verdict: cli.output.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from macs_audit.cli.console import handle_errors, warn
from macs_audit.cli.output import gate_report, resolve_outputs
from macs_audit.cli.report_options import (
    BASELINE_HELP,
    CONFIG_HELP,
    FORMAT_OPTION,
    INTERVAL_HELP,
    OUTPUT_OPTION,
    SUMMARY_HELP,
)


@handle_errors
def gate(
    report_path: Path = typer.Argument(
        ..., metavar="REPORT.json", readable=False, help="A report written by `evaluate -o`."
    ),
    config: Optional[Path] = typer.Option(None, "--config", "-c", readable=False, help=CONFIG_HELP),
    baseline: Optional[Path] = typer.Option(None, "--baseline", readable=False, help=BASELINE_HELP),
    use_interval: Optional[bool] = typer.Option(
        None, "--use-interval/--point-estimate", help=INTERVAL_HELP, show_default=False
    ),
    formats: Optional[List[str]] = FORMAT_OPTION,
    outputs: Optional[List[Path]] = OUTPUT_OPTION,
    step_summary: bool = typer.Option(True, "--step-summary/--no-step-summary", help=SUMMARY_HELP),
) -> None:
    """Check a saved report against calibration thresholds: exit 0 if every check passes, 1 if any fails."""
    from macs_audit.gate import ConfiguredGate
    from macs_audit.report import load_report

    configured = ConfiguredGate.load(config, baseline)  # usage errors (exit 2) before input errors (exit 3)
    inputs = (report_path, *configured.inputs)
    resolve_outputs(formats, outputs, inputs=inputs)
    saved = load_report(report_path)
    for message in saved.deprecations:  # a renamed key of an older report (the config's: gate_report)
        warn(message)
    raise typer.Exit(gate_report(saved, configured, use_interval, formats, outputs, step_summary, inputs))
