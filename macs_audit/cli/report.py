"""`macs-audit report REPORT.json`: re-render a saved report in any format, with the gate's results if asked,
never reading the model. It imports neither torch nor onnxruntime (tested) and exits 0 whatever the verdict
(`gate` gives the exit code). Formats and files: cli.output. `--into README.md` merges a model card into an
existing one (formats/model_card.py) and writes it back, or to --output.
"""

from __future__ import annotations

from typing import Any

from macs_audit.cli.console import handle_errors, warn
from macs_audit.cli.output import emit, render_report, resolve_outputs
from macs_audit.cli.parameters import given_values, takes_options
from macs_audit.errors import UsageError
from macs_audit.formats import canonical


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
    into, formats, outputs = r["into"], r["format"], r["output"]
    if into is not None:  # the card is written back to itself unless --output names another file
        if any(canonical(name) != "model-card" for name in formats or []):
            raise UsageError(f"--into {into} merges a model card: use it with --format model-card (or no --format)")
        formats, outputs = ["model-card"], outputs or [into]
    targets = resolve_outputs(formats, outputs, inputs=(r["report"], *gate_inputs))
    saved = load_report(r["report"])
    result = configured.run(saved, r["use_interval"]) if configured is not None else None
    for message in [*saved.deprecations, *(result.notes if result is not None else [])]:  # renamed keys read
        warn(message)
    if into is not None:
        from macs_audit.formats import model_card

        emit(targets, lambda name: model_card.merge_file(into, saved, result))
    else:
        emit(targets, lambda name: render_report(name, saved, result))
