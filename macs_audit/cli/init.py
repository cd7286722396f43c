"""`macs-audit init REPORT.json`: a starting gate table from a saved report, so `gate` and `report --format junit`
have thresholds to start from. Reads the report only: never the model, torch or onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.console import handle_errors, note, warn

OUT_HELP = (
    "The TOML file: [tool.macs-audit.gate] added to any file (pyproject.toml), [gate] to a macs-audit.toml; "
    "- prints it. Default: ./pyproject.toml if it exists, else ./macs-audit.toml."
)


@handle_errors
def init(
    report_path: Path = typer.Argument(
        ...,
        metavar="REPORT.json",
        readable=False,
        help="A report written by `evaluate -o`: its values give the thresholds.",
    ),
    out: Optional[Path] = typer.Option(None, "--output", "--out", "-o", readable=False, help=OUT_HELP),
    margin: Optional[float] = typer.Option(
        None,
        "--margin",
        min=0,
        max=1,
        help="A flat allowance on fractions (accuracy, ECE, ...), 0.02 = 2 percentage points, in place of "
        "the noise of each estimate (default: sqrt(2) x its 95% interval's half-width).",
    ),
    relative_margin: Optional[float] = typer.Option(
        None,
        "--relative-margin",
        min=0,
        max=1,
        help="A flat allowance on the other metrics (NLL, ratios), 0.1 = 10% of the value, in place of the noise.",
    ),
) -> None:
    """Write starting gate thresholds from a saved report: accuracy, ECE, NLL, robust accuracy, the corruption
    mean and conformal coverage (where the report has them) loosened by the noise of their estimates, the
    baseline allowances alike, the other metrics commented out. Never replaces a gate table that exists;
    appends to a pyproject.toml that has none."""
    from macs_audit import gate as gate_core
    from macs_audit.atomic import destination
    from macs_audit.outputs import check_file
    from macs_audit.report import load_report

    if out is not None and str(out) == "-":
        report = load_report(report_path)
        for message in report.deprecations:  # a renamed key of an older report
            warn(message)
        typer.echo(gate_core.starting_config(report, gate_core.TOOL_TABLE, margin, relative_margin, report_path.name))
        return
    if out is None:
        pyproject = Path(gate_core.PYPROJECT_TOML)
        out = pyproject if pyproject.is_file() else Path(gate_core.MACS_AUDIT_TOML)
    if not out.is_dir():  # a directory gets write_starting_config's own message
        check_file(out, inputs=(report_path,), option="--output")  # every output's checks, before the report is read
    report = load_report(report_path)
    for message in report.deprecations:
        warn(message)
    table = gate_core.write_starting_config(out, report, margin, relative_margin, report_path.name)
    if destination(out).is_stream:
        message = f"[{table}] written to {out}"
    else:
        searched = out.resolve().parent == Path.cwd().resolve()  # gate's search starts here
        found = searched and out.name in (gate_core.PYPROJECT_TOML, gate_core.MACS_AUDIT_TOML)
        check = f"macs-audit gate {report_path}" + ("" if found else f" --config {out}")
        message = (
            f"[{table}] written to {out}; `{check}` passes on this report (its baseline allowances run with "
            "--baseline BASE.json); tighten the thresholds as the model improves"
        )
    note(message)
