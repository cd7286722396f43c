"""`macs-audit compare A.json B.json`: two saved reports side by side, B - A for every metric, never reading a
model. It imports neither torch nor onnxruntime (tested) and exits 0. Formats and files: cli.output.
"""

from __future__ import annotations

import os
from typing import Any

from macs_audit.cli.console import handle_errors, warn
from macs_audit.cli.output import append_step_summary, emit, resolve_outputs
from macs_audit.cli.parameters import given_values, takes_options


@handle_errors
@takes_options("compare")
def compare(**values: Any) -> None:
    """Compare two saved reports side by side; changes in the bad direction are highlighted, changes a
    temperature alone makes (margins, logit norms, L^, set sizes) are shown but not counted; the headline
    counts the checks the gate fails as regressions. Exits 0."""
    from macs_audit.compare import compare as compare_reports
    from macs_audit.errors import InputError, UsageError
    from macs_audit.formats import markdown
    from macs_audit.gating import ConfiguredGate, run_gate
    from macs_audit.gating.config import find_config
    from macs_audit.report import load_report
    from macs_audit.settings.resolve import resolve

    r = resolve("compare", *given_values(values))
    a_path, b_path, with_gate, config = r["report_a"], r["report_b"], r["gate"], r["config"]
    if with_gate is False and config is not None:
        raise UsageError(f"--no-gate runs no gate but --config {config} names one: drop one of the two")
    # As `gate` finds its config: --config, else macs-audit.toml or pyproject.toml's gate table from the
    # current directory up; without --gate, finding none is no error (no gate runs, and none is counted).
    found = config if config is not None or with_gate is False else find_config()
    configured = ConfiguredGate.load(found) if found is not None or with_gate else None
    gate_inputs = (configured.config_path,) if configured is not None else ()
    targets = resolve_outputs(r["format"], r["output"], inputs=(a_path, b_path, *gate_inputs))
    a, b = load_report(a_path), load_report(b_path)
    for message in [*a.deprecations, *b.deprecations]:  # renamed keys of older reports
        warn(message)
    gate = None
    if configured is not None:  # A is the baseline: the config's own baseline report is not read here
        baseline = a if configured.config.baseline else None
        try:
            gate = run_gate(b, configured.config, baseline, baseline_name=str(a_path))
        except InputError as e:
            if with_gate or config is not None:
                raise
            # A config found, not asked for, that checks what B lacks: compared without it, and said so.
            warn(f"the gate of {configured.config_path} cannot judge {b_path}: {e}; compared without a gate")
        for message in gate.notes if gate is not None else []:
            warn(message)
    comparison = compare_reports(a, b, a_path.name, b_path.name, gate=gate)

    def render(name: str):
        from macs_audit import formats
        from macs_audit.formats import terminal

        if name == "terminal":
            return terminal.comparison_table(comparison)
        # A format with no comparison (a model card, a pull-request comment) raises the UsageError that says so.
        return formats.render_comparison(name, comparison)

    emit(targets, render)
    if r["step_summary"] and os.environ.get("GITHUB_STEP_SUMMARY"):
        append_step_summary(markdown.render_comparison(comparison))
