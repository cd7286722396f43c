"""`macs-audit report REPORT.json`: re-render a saved report in any format, with the gate's results if asked,
never reading the model. It imports neither torch nor onnxruntime (tested) and exits 0 whatever the verdict
(`gate` gives the exit code). Formats and files: cli.output.
"""

from __future__ import annotations

from typing import Any

from macs_audit.cli.console import handle_errors, warn
from macs_audit.cli.output import emit, render_report, resolve_outputs
from macs_audit.cli.parameters import given_values, takes_options


@handle_errors
@takes_options("report")
def report(**values: Any) -> None:
    """Re-render a saved report in any --format without the model. Exits 0 even if the gate fails."""
    from macs_audit.gating import ConfiguredGate
    from macs_audit.report import load_report
    from macs_audit.settings.resolve import resolve

    r = resolve("report", *given_values(values))
    configured = None
    if r["gate"] or r["config"] is not None or r["baseline"] is not None or r["use_interval"] is not None:
        configured = ConfiguredGate.load(r["config"], r["baseline"])
    gate_inputs = configured.inputs if configured is not None else ()
    targets = resolve_outputs(r["format"], r["output"], inputs=(r["report"], *gate_inputs))
    saved = load_report(r["report"])
    result = configured.run(saved, r["use_interval"]) if configured is not None else None
    for message in [*saved.deprecations, *(result.notes if result is not None else [])]:  # renamed keys read
        warn(message)
    if result is None and any(name == "junit" for name, _ in targets):
        render_report("junit", saved, None)  # raises the UsageError that explains what to do
    emit(targets, lambda name: render_report(name, saved, result))
