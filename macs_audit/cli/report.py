"""`macs-audit report REPORT.json`: re-render a saved report in any format, with the gate's results if asked,
never reading the model. It imports neither torch nor onnxruntime (tested) and exits 0 whatever the verdict
(`gate` gives the exit code). Formats and files: cli.output.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from macs_audit.cli.console import handle_errors, warn
from macs_audit.cli.output import emit, render_report, resolve_outputs
from macs_audit.cli.report_options import BASELINE_HELP, CONFIG_HELP, FORMAT_OPTION, INTERVAL_HELP, OUTPUT_OPTION


@handle_errors
def report(
    report_path: Path = typer.Argument(
        ..., metavar="REPORT.json", readable=False, help="A report written by `evaluate -o`."
    ),
    formats: Optional[List[str]] = FORMAT_OPTION,
    outputs: Optional[List[Path]] = OUTPUT_OPTION,
    with_gate: bool = typer.Option(False, "--gate", help="Include gate results (config searched as for `gate`)."),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", readable=False, help=CONFIG_HELP + " Implies --gate."
    ),
    baseline: Optional[Path] = typer.Option(
        None, "--baseline", readable=False, help=BASELINE_HELP + " Implies --gate."
    ),
    use_interval: Optional[bool] = typer.Option(
        None, "--use-interval/--point-estimate", help=INTERVAL_HELP, show_default=False
    ),
) -> None:
    """Re-render a saved report in any --format without the model. Exits 0 even if the gate fails."""
    from macs_audit.gate import ConfiguredGate
    from macs_audit.report import load_report

    configured = None
    if with_gate or config is not None or baseline is not None or use_interval is not None:
        configured = ConfiguredGate.load(config, baseline)
    gate_inputs = configured.inputs if configured is not None else ()
    targets = resolve_outputs(formats, outputs, inputs=(report_path, *gate_inputs))
    saved = load_report(report_path)
    result = configured.run(saved, use_interval) if configured is not None else None
    for message in [*saved.deprecations, *(result.notes if result is not None else [])]:  # renamed keys read
        warn(message)
    if result is None and any(name == "junit" for name, _ in targets):
        render_report("junit", saved, None)  # raises the UsageError that explains what to do
    emit(targets, lambda name: render_report(name, saved, result))
