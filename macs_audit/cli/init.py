"""`macs-audit init REPORT.json`: a starting spec from a saved report: the evaluate table (the audit the report
ran) and a gate table, so `evaluate` runs the same audit with no argument and `gate` and `report --format junit`
have thresholds to start from. Reads the report only: never the model, torch or onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from macs_audit.cli.console import handle_errors, note, warn
from macs_audit.cli.parameters import given_values, takes_options


def _spec_table(out: Path) -> str | None:
    """The name of the evaluate table init adds to `out` beside the gate's; None where the file has one already
    (kept as it is)."""
    from macs_audit.gating.config import table_name
    from macs_audit.settings.spec import read_spec
    from macs_audit.settings.starting import COMMAND, spec_table_name

    if out.is_file() and COMMAND in read_spec(out, needs_tables=False).tables:
        return None
    return spec_table_name(table_name(out))


@handle_errors
@takes_options("init")
def init(**values: Any) -> None:
    """Write a starting spec from a saved report: the evaluate table with the options the report's audit was
    given (where it records them), and gate thresholds: accuracy, ECE, NLL, robust accuracy, the corruption mean and
    conformal coverage (where the report has them) loosened by the noise of their estimates, the baseline
    allowances alike, the other metrics commented out. Never replaces a gate table that exists, nor an evaluate
    table; appends to a pyproject.toml that has none."""
    from macs_audit import gating as gate_core
    from macs_audit.atomic import destination
    from macs_audit.outputs import check_file
    from macs_audit.report import load_report
    from macs_audit.settings.resolve import resolve
    from macs_audit.settings.starting import spec_table_name, starting_spec

    r = resolve("init", *given_values(values))
    report_path, out, margin, relative_margin = r["report"], r["output"], r["margin"], r["relative_margin"]
    if out is not None and str(out) == "-":
        report = load_report(report_path)
        for message in report.deprecations:  # a renamed key of an older report
            warn(message)
        spec = starting_spec(report, spec_table_name(gate_core.TOOL_TABLE), Path.cwd(), report_path.name)
        config = gate_core.starting_config(report, gate_core.TOOL_TABLE, margin, relative_margin, report_path.name)
        typer.echo(f"{spec}\n{config}")
        return
    if out is None:
        pyproject = Path(gate_core.PYPROJECT_TOML)
        out = pyproject if pyproject.is_file() else Path(gate_core.MACS_AUDIT_TOML)
    spec_table = None
    if not out.is_dir():  # a directory gets write_starting_config's own message
        check_file(out, inputs=(report_path,), option="--output")  # every output's checks, before the report is read
        spec_table = _spec_table(out)
    report = load_report(report_path)
    for message in report.deprecations:
        warn(message)
    folder = out.resolve().parent
    before = starting_spec(report, spec_table, folder, report_path.name) if spec_table is not None else ""
    table = gate_core.write_starting_config(out, report, margin, relative_margin, report_path.name, before=before)
    written = f"[{spec_table}] and [{table}]" if spec_table is not None else f"[{table}]"
    if destination(out).is_stream:
        message = f"{written} written to {out}"
    else:
        searched = out.resolve().parent == Path.cwd().resolve()  # gate's search starts here
        found = searched and out.name in (gate_core.PYPROJECT_TOML, gate_core.MACS_AUDIT_TOML)
        check = f"macs-audit gate {report_path}" + ("" if found else f" --config {out}")
        message = (
            f"{written} written to {out}; `{check}` passes on this report (its baseline allowances run with "
            "--baseline BASE.json); tighten the thresholds as the model improves"
        )
    note(message)
