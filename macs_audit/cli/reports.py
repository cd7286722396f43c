"""`macs-audit gate`, `report` and `compare`: read saved JSON reports, never the model.

None of these import torch or onnxruntime (tested). Output formats and files: cli.output.
Exit codes: 0 pass (or rendered), 1 gate failed, 2 usage error, 3 input error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from macs_audit.cli.console import handle_errors
from macs_audit.cli.output import append_step_summary, emit, gate_report, render_report, resolve_outputs

FORMAT_HELP = "Output format: terminal, json, md, junit or html. Repeatable."
OUTPUT_HELP = (
    "Write to this file (atomically) instead of stdout. Repeatable: pairs with --format in order, "
    "or the extension (.json .md .xml .html .txt) names the format."
)
CONFIG_HELP = (
    "Gate thresholds: a macs-audit.toml ([gate]) or pyproject.toml ([tool.macs-audit.gate]). "
    "Default: searched from the current directory."
)
BASELINE_HELP = "Baseline report for the [gate.baseline] regression checks."
INTERVAL_HELP = "Gate on the pessimistic end of the 95% bootstrap interval (default: the config's use_interval)."
SUMMARY_HELP = "Append the Markdown to $GITHUB_STEP_SUMMARY when that is set."


@handle_errors
def gate(
    report_path: Path = typer.Argument(..., metavar="REPORT.json", help="A report written by `evaluate -o`."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help=BASELINE_HELP),
    use_interval: Optional[bool] = typer.Option(
        None, "--use-interval/--point-estimate", help=INTERVAL_HELP, show_default=False
    ),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    outputs: Optional[List[Path]] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    step_summary: bool = typer.Option(True, "--step-summary/--no-step-summary", help=SUMMARY_HELP),
) -> None:
    """Check a saved report against calibration thresholds: exit 0 if every check passes, 1 if any fails."""
    from macs_audit import gate as gate_core
    from macs_audit.report import load_report

    cfg = gate_core.load_config(config)  # usage errors (exit 2) before input errors (exit 3)
    inputs = (report_path, config or gate_core.find_config(), baseline or cfg.baseline_report)
    resolve_outputs(formats, outputs, inputs=inputs)
    saved = load_report(report_path)
    raise typer.Exit(gate_report(saved, cfg, baseline, use_interval, formats, outputs, step_summary, inputs))


@handle_errors
def report(
    report_path: Path = typer.Argument(..., metavar="REPORT.json", help="A report written by `evaluate -o`."),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    outputs: Optional[List[Path]] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    with_gate: bool = typer.Option(False, "--gate", help="Include gate results (config searched as for `gate`)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help=CONFIG_HELP + " Implies --gate."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help=BASELINE_HELP + " Implies --gate."),
    use_interval: Optional[bool] = typer.Option(
        None, "--use-interval/--point-estimate", help=INTERVAL_HELP, show_default=False
    ),
) -> None:
    """Re-render a saved report (terminal, json, md, junit, html) without the model. Exits 0 even if the gate fails."""
    from macs_audit import gate as gate_core
    from macs_audit.report import load_report

    cfg = None
    if with_gate or config is not None or baseline is not None or use_interval is not None:
        cfg = gate_core.load_config(config)
    gate_inputs = (config or gate_core.find_config(), baseline or cfg.baseline_report) if cfg is not None else ()
    targets = resolve_outputs(formats, outputs, inputs=(report_path, *gate_inputs))
    saved = load_report(report_path)
    result = None
    if cfg is not None:
        baseline_path = baseline if baseline is not None else cfg.baseline_report
        base = load_report(baseline_path) if baseline_path is not None else None
        result = gate_core.run_gate(
            saved,
            cfg,
            base,
            use_interval=use_interval,
            baseline_name=str(baseline_path) if baseline_path is not None else None,
        )
    if result is None and any(name == "junit" for name, _ in targets):
        render_report("junit", saved, None)  # raises the UsageError that explains what to do
    emit(targets, lambda name: render_report(name, saved, result))


@handle_errors
def compare(
    a_path: Path = typer.Argument(..., metavar="A.json", help="The reference report (e.g. the main branch)."),
    b_path: Path = typer.Argument(..., metavar="B.json", help="The candidate report; deltas are B - A."),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    outputs: Optional[List[Path]] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    step_summary: bool = typer.Option(True, "--step-summary/--no-step-summary", help=SUMMARY_HELP),
) -> None:
    """Compare two saved reports side by side; changes in the bad direction are highlighted. Exits 0."""
    from macs_audit.compare import compare as compare_reports
    from macs_audit.report import load_report
    from macs_audit.reports import markdown

    targets = resolve_outputs(formats, outputs, inputs=(a_path, b_path))
    comparison = compare_reports(load_report(a_path), load_report(b_path), a_path.name, b_path.name)

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
