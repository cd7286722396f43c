"""`macs-audit compare A.json B.json`: two saved reports side by side, B - A for every metric, never reading a
model. It imports neither torch nor onnxruntime (tested) and exits 0. Formats and files: cli.output.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from macs_audit.cli.console import handle_errors, warn
from macs_audit.cli.output import (
    CONFIG_HELP,
    FORMAT_OPTION,
    OUTPUT_OPTION,
    SUMMARY_HELP,
    append_step_summary,
    emit,
    resolve_outputs,
)


@handle_errors
def compare(
    a_path: Path = typer.Argument(
        ..., metavar="A.json", readable=False, help="The reference report (e.g. the main branch)."
    ),
    b_path: Path = typer.Argument(
        ..., metavar="B.json", readable=False, help="The candidate report; deltas are B - A."
    ),
    formats: Optional[List[str]] = FORMAT_OPTION,
    outputs: Optional[List[Path]] = OUTPUT_OPTION,
    step_summary: bool = typer.Option(True, "--step-summary/--no-step-summary", help=SUMMARY_HELP),
    with_gate: bool = typer.Option(
        False,
        "--gate",
        help="Run the gate on B (A its baseline where the config sets allowances; config searched as for "
        "`gate`): every metric it fails is counted a regression.",
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", readable=False, help=CONFIG_HELP + " Implies --gate."
    ),
) -> None:
    """Compare two saved reports side by side; changes in the bad direction are highlighted, changes a
    temperature alone makes (margins, logit norms, L^, set sizes) are shown but not counted. Exits 0."""
    from macs_audit.compare import compare as compare_reports
    from macs_audit.gate import ConfiguredGate, run_gate
    from macs_audit.report import load_report
    from macs_audit.reports import markdown

    configured = ConfiguredGate.load(config) if with_gate or config is not None else None
    gate_inputs = (configured.config_path,) if configured is not None else ()
    targets = resolve_outputs(formats, outputs, inputs=(a_path, b_path, *gate_inputs))
    a, b = load_report(a_path), load_report(b_path)
    for message in [*a.deprecations, *b.deprecations]:  # renamed keys of older reports
        warn(message)
    gate = None
    if configured is not None:  # A is the baseline: the config's own baseline report is not read here
        baseline = a if configured.config.baseline else None
        gate = run_gate(b, configured.config, baseline, baseline_name=str(a_path))
        for message in gate.notes:
            warn(message)
    comparison = compare_reports(a, b, a_path.name, b_path.name, gate=gate)

    def render(name: str):
        from macs_audit.reports import html, json_report, junit, terminal

        return {
            "terminal": terminal.comparison_table,
            "json": json_report.render_comparison,
            "md": markdown.render_comparison,
            "junit": junit.render_comparison,
            "html": html.render_comparison,
        }[name](comparison)

    emit(targets, render)
    if step_summary and os.environ.get("GITHUB_STEP_SUMMARY"):
        append_step_summary(markdown.render_comparison(comparison))
