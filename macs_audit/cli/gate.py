"""`macs-audit gate REPORT.json`: check a saved report against the thresholds, never reading the model.

It imports neither torch nor onnxruntime (tested). Exit codes: 0 every check passed, 1 one failed, 2 usage
error (the configuration included), 3 input error. The checks: macs_audit.gating; formats, files and the
verdict: cli.output.
"""

from __future__ import annotations

from typing import Any

import typer

from macs_audit.cli.console import handle_errors, warn
from macs_audit.cli.output import gate_report, resolve_outputs
from macs_audit.cli.parameters import given_flags, takes_options


@handle_errors
@takes_options("gate")
def gate(**values: Any) -> None:
    """Check a saved report against calibration thresholds: exit 0 if every check passes, 1 if any fails."""
    from macs_audit.gating import ConfiguredGate
    from macs_audit.report import load_report
    from macs_audit.settings.resolve import resolve

    # The flags alone: the spec's gate table is the thresholds (ConfiguredGate reads it), not gate's options.
    r = resolve("gate", given_flags(values))
    configured = ConfiguredGate.load(r["config"], r["baseline"])  # usage errors (exit 2) before input errors (exit 3)
    inputs = (r["report"], *configured.inputs)
    formats, outputs = r["format"], r["output"]
    targets = resolve_outputs(formats, outputs, inputs=inputs)
    saved = load_report(r["report"])
    for message in saved.deprecations:  # a renamed key of an older report (the config's: gate_report)
        warn(message)
    raise typer.Exit(gate_report(saved, configured, r["use_interval"], targets, r["step_summary"]))
